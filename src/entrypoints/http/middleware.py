"""ASGI middleware: a request id per request, one log line per request, safe headers,
no body in an answer to HEAD, and a whole ``Allow`` in an answer to OPTIONS."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog
from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["allowed_methods", "request_context"]

log = structlog.get_logger()

_INCOMING_ID = re.compile(r"^[A-Za-z0-9._-]{8,64}$")


def request_context(
    app: ASGIApp,
    allow: Mapping[str, str] | None = None,
    *,
    observe: Callable[[str, str | None, int], None] | None = None,
) -> ASGIApp:
    """Bind ``request_id`` for logs, echo it as ``X-Request-Id``, log the outcome, and
    tell ``observe`` (method, route template or ``None`` when none matched, status).

    ``allow`` is each route's ``Allow`` by path template (``/api/agent/servers/{serverId}``):
    Litestar's own OPTIONS answer lists only the methods of the first handler of a path
    with several (it said ``DELETE, OPTIONS`` where a 405 says ``DELETE, GET, OPTIONS``).
    """
    allow = allow or {}

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await app(scope, receive, send)
            return
        incoming = _header(scope, b"x-request-id")
        # 128 random bits in hex, as ``uuid.uuid4().hex`` without building a UUID (a
        # tenth of its cost, which was 3 % of a cached API read).
        request_id = incoming if incoming and _INCOMING_ID.match(incoming) else os.urandom(16).hex()
        scope.setdefault("state", {})["request_id"] = request_id
        started = time.perf_counter()
        status = 500
        head = scope["method"] == "HEAD"
        options = scope["method"] == "OPTIONS"

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", []))
                allowed = allow.get(str(scope.get("path_template", ""))) if options else None
                if allowed is not None and status == 204:
                    headers = [(k, v) for k, v in headers if k.lower() != b"allow"]
                    headers.append((b"allow", allowed.encode()))
                headers.append((b"x-request-id", request_id.encode()))
                headers.append((b"x-content-type-options", b"nosniff"))
                if scope["path"].startswith("/api/agent/"):
                    for key, _ in headers:
                        if key.lower() == b"cache-control":
                            break  # it says
                    else:
                        headers.append((b"cache-control", b"no-store"))
                message["headers"] = headers
            elif head and message["type"] == "http.response.body" and message.get("body"):
                # A HEAD answer is the GET's status and headers (Content-Length included),
                # never its body, whatever the ASGI server does with one.
                message = {**message, "body": b""}
            await send(message)

        # As ``bound_contextvars``, without its cost (it reads every context variable).
        bound = structlog.contextvars.bind_contextvars(request_id=request_id)
        try:
            try:
                await app(scope, receive, send_wrapper)
            finally:
                if observe is not None:
                    observe(scope["method"], scope.get("path_template") or None, status)
                log.info(
                    "request",
                    method=scope["method"],
                    path=scope["path"],
                    status=status,
                    ms=round((time.perf_counter() - started) * 1000, 2),
                )
        finally:
            structlog.contextvars.reset_contextvars(**bound)

    return middleware


def allowed_methods(routes: Any) -> dict[str, str]:
    """Each HTTP route's ``Allow`` (its methods, sorted: as a 405 lists them), by path
    template."""
    found: dict[str, set[str]] = {}
    for route in routes:
        methods = getattr(route, "methods", None)
        if methods and getattr(route, "path_format", None) is not None:
            found.setdefault(route.path_format or "/", set()).update(methods)
    return {path: ", ".join(sorted(methods)) for path, methods in found.items()}


def _header(scope: Scope, name: bytes) -> str | None:
    headers: Any = scope.get("headers", [])
    for key, value in headers:
        if key == name:
            return str(value.decode("latin-1"))
    return None
