"""structlog, configured once: JSON off a TTY, console on one, secrets never written."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

__all__ = ["configure_library_logging", "configure_logging", "redact_secrets"]

_SECRET_KEYS = re.compile(
    r"(token|password|passwd|secret|authorization|cookie|env|private_key|api_key)", re.I
)
_TOKEN_LIKE = re.compile(r"berth_(?:enroll_)?[0-9A-Za-z]{20,}")
_BEARER = re.compile(r"(?i)bearer\s+\S+")


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        return _BEARER.sub("Bearer [redacted]", _TOKEN_LIKE.sub("[redacted]", value))
    if isinstance(value, dict):
        return {
            k: "[redacted]" if _SECRET_KEYS.search(str(k)) else _scrub(v) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_scrub(v) for v in value]
    return value


def redact_secrets(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Drop any field whose name suggests a secret; mask token-shaped strings anywhere."""
    for key in list(event_dict):
        if key != "event" and _SECRET_KEYS.search(key) and key not in _ALLOWED:
            event_dict[key] = "[redacted]"
        else:
            event_dict[key] = _scrub(event_dict[key])
    return event_dict


# Names that match the pattern but carry no secret.
_ALLOWED = frozenset({"env_keys", "token_prefix"})


def configure_logging(fmt: str = "auto", level: str = "info") -> None:
    """Set up structlog and route the standard library's logging through it."""
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        numeric = logging.INFO
    console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact_secrets,
    ]
    renderer: Any = (
        structlog.dev.ConsoleRenderer(exception_formatter=structlog.dev.plain_traceback)
        if console
        else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
            foreign_pre_chain=shared,
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(numeric, logging.WARNING))
    for noisy in ("uvicorn.access",):
        logging.getLogger(noisy).disabled = True
    logging.getLogger("uvicorn.error").setLevel(numeric)


def configure_library_logging() -> None:
    """berth as a library: its events go to ``logging``, secrets redacted.

    Only if the application has not configured structlog itself. Silent unless the
    application sets up ``logging`` handlers, as a library should be; without this,
    structlog's defaults would print every event to stdout, unredacted.
    """
    if structlog.is_configured():
        return
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            redact_secrets,
            structlog.processors.format_exc_info,
            structlog.processors.KeyValueRenderer(key_order=["event"]),
        ],
        wrapper_class=structlog.stdlib.BoundLogger,
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=False,  # the application may reconfigure later
    )
