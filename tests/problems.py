"""Problem bodies (RFC 9457) as berth sends them, for tests of what reads them."""

from __future__ import annotations

import json
from http import HTTPStatus

__all__ = ["problem_body"]


def problem_body(status: int, kind: str, detail: str, *errors: tuple[str, str]) -> bytes:
    """``application/problem+json`` of ``status`` and ``urn:berth:problem:<kind>``, with
    ``errors`` as ``(location, message)`` pairs."""
    return json.dumps(
        {
            "type": f"urn:berth:problem:{kind}",
            "title": HTTPStatus(status).phrase,
            "status": status,
            "detail": detail,
            "errors": [{"location": where, "message": what} for where, what in errors],
            "requestId": None,
        }
    ).encode()
