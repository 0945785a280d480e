"""Env values out of container output: what berth shows of an app's logs (a failed
deployment's events, an installation's logs) never repeats the secrets it was given."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["REDACTED", "REDACT_MIN_LENGTH", "redact_env"]

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
