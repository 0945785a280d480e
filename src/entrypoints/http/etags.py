"""ETags on the API's reads: a ``GET`` answered ``200`` with JSON carries a strong
``ETag`` (a digest of the body, so the same representation has the same tag on every
replica) and ``Cache-Control: private, no-cache`` (a client may keep it, and asks
again with ``If-None-Match``); a request whose ``If-None-Match`` names the current
tag (or ``*``) is answered ``304 Not Modified`` without a body. Streams (an event
stream, a followed log) and other answers pass as they are. Writes take no
``If-Match``: see ``docs/decisions/2026-11-27-etags.md``.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from litestar.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["etags", "matches"]


def matches(if_none_match: str, tag: str) -> bool:
    """Whether an ``If-None-Match`` value names ``tag`` (weak comparison, RFC 9110)."""
    if if_none_match.strip() == "*":
        return True
    wanted = tag.removeprefix("W/")
    return any(one.strip().removeprefix("W/") == wanted for one in if_none_match.split(","))


def _header(headers: Any, name: bytes) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def _tagged(start: Any) -> bool:
    """Whether an answer starting so gets a tag: a ``200`` with JSON."""
    kind = _header(start.get("headers", ()), b"content-type")
    return start["status"] == 200 and kind is not None and kind.startswith("application/json")


def etags(app: ASGIApp) -> ASGIApp:
    """Middleware: see the module's docstring."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("method") not in ("GET", "HEAD"):  # an HTTP read (no websocket has one)
            await app(scope, receive, send)
            return
        start: Message | None = None
        chunks: list[bytes] = []

        async def sending(message: Message) -> None:
            nonlocal start
            if start is None:
                if message["type"] == "http.response.start" and _tagged(message):
                    start = message  # held, not sent: _answer sends its own
                    return
                await send(message)
                return
            if message["type"] != "http.response.body":
                await send(message)
                return
            if message.get("more_body", False):
                chunks.append(message.get("body", b""))
                return
            body = message.get("body", b"")
            await _answer(scope, start, b"".join((*chunks, body)) if chunks else body, send)

        await app(scope, receive, sending)

    return middleware


class _RecentTags:
    """The tags of the last bodies tagged, by the identity of the body object: a body
    rendered once and sent again (a listing, ``schemas.ListingResponse``) is hashed
    once. An entry holds its body, so no other object takes its id while it is here;
    bytes are immutable, so the same object always has the same tag. Bounded in bytes
    held (a body over the bound is simply hashed each time). Single event loop."""

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._held = 0
        self._entries: dict[int, tuple[bytes, str]] = {}

    def tag(self, body: bytes) -> str:
        found = self._entries.get(id(body))
        if found is not None and found[0] is body:
            return found[1]
        digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()[:18]).decode()
        tag = f'"{digest}"'
        if len(body) <= self._max_bytes:
            while self._entries and self._held + len(body) > self._max_bytes:
                self._held -= len(self._entries.pop(next(iter(self._entries)))[0])
            self._entries[id(body)] = (body, tag)
            self._held += len(body)
        return tag


_tags = _RecentTags(max_bytes=1 << 20)


async def _answer(scope: Scope, start: Any, body: bytes, send: Send) -> None:
    tag = _tags.tag(body)
    kept = [
        (k, v) for k, v in start.get("headers", ()) if k.lower() not in (b"cache-control", b"etag")
    ]
    extra = [(b"etag", tag.encode()), (b"cache-control", b"private, no-cache")]
    wanted = None
    for key, value in scope["headers"]:  # an ASGI request's header names are lowercase
        if key == b"if-none-match":
            wanted = value.decode("latin-1")
            break
    if wanted is not None and matches(wanted, tag):
        dropped = (b"content-length", b"content-type")
        headers = [(k, v) for k, v in kept if k.lower() not in dropped] + extra
        await send({"type": "http.response.start", "status": 304, "headers": headers})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    await send({**start, "headers": kept + extra})  # type: ignore[arg-type]
    await send({"type": "http.response.body", "body": body, "more_body": False})
