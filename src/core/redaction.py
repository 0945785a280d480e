"""Secrets out of what berth shows: env values out of container output (a failed
deployment's events, an installation's logs), registry passwords out of reprs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["REDACTED", "REDACT_MIN_LENGTH", "credentials_repr", "redact_env", "redact_line"]

REDACTED = "[redacted]"
# Shorter values ("8080", "true", "prod") would mangle ordinary output and are no secrets.
REDACT_MIN_LENGTH = 6


def redact_env(lines: Iterable[str], env: Mapping[str, str]) -> list[str]:
    """``lines`` with every env value of at least ``REDACT_MIN_LENGTH`` characters
    replaced by ``[redacted]``, longest first (a value inside another goes with it)."""
    secrets = sorted(
        (v for v in env.values() if len(v) >= REDACT_MIN_LENGTH), key=len, reverse=True
    )
    cleaned = []
    for line in lines:
        for value in secrets:
            line = line.replace(value, REDACTED)
        cleaned.append(line)
    return cleaned


def redact_line(line: str, env: Mapping[str, str], timestamps: bool) -> str:
    """``line`` with env values redacted; with ``timestamps``, Docker's time before the
    first space is kept as it is (a value that happens to be digits cannot eat it)."""
    if timestamps and " " in line:
        stamp, text = line.split(" ", 1)
        return f"{stamp} {redact_env([text], env)[0]}"
    return redact_env([line], env)[0]


def credentials_repr(credentials: Any) -> str:
    """The ``repr`` (and ``str``) of a struct holding a registry's ``host``, ``username``
    and ``password``: the password left out, so a log line or a traceback never shows it."""
    name = type(credentials).__name__
    return (
        f"{name}(host={credentials.host!r}, username={credentials.username!r}, password=<hidden>)"
    )
