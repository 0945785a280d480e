"""The Docker Engine API's answers, read within bounds.

* ``capped_body``: the body of an answer the docker SDK asked for (a ``requests``
  response opened with ``stream=True``), read up to a ceiling; past it the read stops
  and the call fails saying so (``kind`` ``response-too-large``). A server berth manages
  is not trusted to keep its answers small.
* ``Frames``: Docker's multiplexed stream (a container without a TTY: each payload
  after an 8-byte header naming stdout or stderr and its length), taken apart;
  ``Output`` tells it from a TTY's raw output by its first bytes.
* ``follow``: a followed log read on the event loop from the Engine's socket itself
  (HTTP/1.1, chunked) — no thread per follow. The socket's buffer is the read-ahead:
  nothing more is read until the reader asks for the next line.
* ``Calls``: short calls (an inspect, a start, a log's tail) made on the event loop over
  a few kept-alive connections, each answer read within a ceiling — no thread, so a
  deployment's many small calls don't make the event loop wait for the GIL behind
  twenty threads of the docker SDK (a fleet's list waited so).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import structlog
from berth.core.errors import RuntimeFailure, ServerUnreachable

__all__ = ["MAX_LINE", "Calls", "Frames", "Output", "capped_body", "follow", "too_large"]

log = structlog.get_logger()

#: A longer log line is cut into pieces of this many bytes.
MAX_LINE = 16 * 1024
#: Bytes of a status line or of all the headers of an answer, at most.
_MAX_HEAD = 64 * 1024
#: Bytes of an error's body read, at most (Docker's are one short JSON message).
_MAX_ERROR = 64 * 1024
_READ = 64 * 1024
#: How a connection to Docker breaks mid-answer.
_BROKEN = (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError)


def _size(limit: int) -> str:
    if limit >= 1024 * 1024 and limit % (1024 * 1024) == 0:
        return f"{limit // (1024 * 1024)} MiB"
    if limit >= 1024 and limit % 1024 == 0:
        return f"{limit // 1024} KiB"
    return f"{limit} bytes"


def too_large(what: str, limit: int, hint: str = "") -> RuntimeFailure:
    """The error of an answer past ``limit`` bytes."""
    return RuntimeFailure(
        f"Docker's answer to {what} is larger than {_size(limit)}, the most berth reads "
        f"(BERTH_DOCKER_MAX_BYTES){hint}.",
        kind="response-too-large",
    )


def capped_body(response: Any, limit: int, what: str, hint: str = "") -> bytes:
    """The whole body of ``response`` (``requests``, ``stream=True``), at most ``limit``
    bytes; past it the connection is dropped and ``too_large`` raised. The body is also
    left on the response, so the SDK's error handling reads it (``response.json()``)."""
    taken = bytearray()
    for chunk in response.iter_content(chunk_size=_READ):
        taken += chunk
        if len(taken) > limit:
            response.close()
            raise too_large(what, limit, hint)
    body = bytes(taken)
    response._content = body
    response._content_consumed = True
    return body


class Frames:
    """Docker's multiplexed stream taken apart: ``feed`` bytes as they come, get the
    payloads completed so far. A frame's length is bounded by what Docker writes at
    once; a longer one is handed on in pieces as it arrives."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._left = 0  # payload bytes of the current frame not yet handed on

    def feed(self, data: bytes) -> list[bytes]:
        self._buffer += data
        payloads = []
        while self._buffer:
            if self._left == 0:
                if len(self._buffer) < 8:
                    break
                (self._left,) = struct.unpack(">I", self._buffer[4:8])
                del self._buffer[:8]
                continue
            piece = bytes(self._buffer[: self._left])
            del self._buffer[: len(piece)]
            self._left -= len(piece)
            payloads.append(piece)
        return payloads


class Output:
    """A container's log output as Docker sends it: multiplexed (no TTY) or raw (a TTY),
    told apart by its first four bytes — a frame's header is a stream number (0, 1 or 2)
    and three zero bytes, which a TTY's text never starts with. ``feed`` bytes as they
    come, get the output's bytes; ``end`` gives what is left at its end."""

    def __init__(self) -> None:
        self._start = b""
        self._frames: Frames | None = None
        self._decided = False

    def feed(self, data: bytes) -> list[bytes]:
        if not self._decided:
            self._start += data
            if len(self._start) < 4:
                return []
            data, self._start = self._start, b""
            self._decided = True
            if data[0] in (0, 1, 2) and data[1:4] == b"\0\0\0":
                self._frames = Frames()
        if self._frames is None:
            return [data] if data else []
        return self._frames.feed(data)

    def end(self) -> list[bytes]:
        start, self._start = self._start, b""
        return [start] if start else []


class _Lines:
    """Bytes to lines: split at ``\\n`` (a trailing ``\\r`` dropped), a line longer than
    ``MAX_LINE`` cut into pieces, bytes that are not UTF-8 replaced."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, data: bytes) -> list[str]:
        self._pending += data
        *whole, self._pending = self._pending.split(b"\n")
        while len(self._pending) > MAX_LINE:
            whole.append(self._pending[:MAX_LINE])
            self._pending = self._pending[MAX_LINE:]
        lines = []
        for raw in whole:
            for start in range(0, max(len(raw), 1), MAX_LINE):
                piece = raw[start : start + MAX_LINE].rstrip(b"\r")
                lines.append(piece.decode("utf-8", errors="replace"))
        return lines

    def rest(self) -> list[str]:
        return [self._pending.decode("utf-8", errors="replace")] if self._pending else []


async def _connect(base_url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    parts = urlsplit(base_url)
    if parts.scheme in ("unix", "http+unix"):
        return await asyncio.open_unix_connection(parts.path, limit=_MAX_HEAD)
    if parts.scheme in ("tcp", "http") and parts.hostname:
        return await asyncio.open_connection(parts.hostname, parts.port or 2375, limit=_MAX_HEAD)
    raise ServerUnreachable(f"Following logs over {parts.scheme}:// is not supported.")


async def _head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    """The status and headers (lower-cased names) of an HTTP/1.1 answer."""
    status_line = await reader.readuntil(b"\r\n")
    parts = status_line.decode("latin-1").split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ServerUnreachable("Docker answered something that is not HTTP.")
    headers: dict[str, str] = {}
    while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


async def _chunked(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """The body of a ``Transfer-Encoding: chunked`` answer, in the pieces read."""
    while True:
        size_line = await reader.readuntil(b"\r\n")
        try:
            left = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise ServerUnreachable("Docker's answer broke its chunked encoding.") from None
        if left == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":
                pass  # trailers, then the blank line that ends the answer
            return
        while left:
            data = await reader.read(min(left, _READ))
            if not data:
                raise asyncio.IncompleteReadError(b"", left)
            left -= len(data)
            yield data
        await reader.readexactly(2)  # the chunk's CRLF


async def _until_closed(reader: asyncio.StreamReader, length: int | None) -> AsyncIterator[bytes]:
    """The body of an answer of ``Content-Length`` ``length`` (``None``: until closed)."""
    left = length
    while left is None or left > 0:
        data = await reader.read(_READ if left is None else min(left, _READ))
        if not data:
            return
        if left is not None:
            left -= len(data)
        yield data


async def _error_text(body: AsyncIterator[bytes], status: int) -> str:
    taken = b""
    async for data in body:
        taken += data
        if len(taken) >= _MAX_ERROR:
            break
    return error_message(taken, status)


def error_message(body: bytes, status: int) -> str:
    """Docker's explanation in an error's body (its JSON ``message``, else the text)."""
    with contextlib.suppress(ValueError, AttributeError):
        message = json.loads(body).get("message")
        if message:
            return str(message)
    return body[:500].decode("utf-8", errors="replace").strip() or f"HTTP {status}"


async def follow(base_url: str, path: str, *, answer_within: float) -> AsyncGenerator[str, None]:
    """The lines of ``GET path`` (a ``/containers/{id}/logs?follow=1`` URL) on the Engine
    at ``base_url`` until Docker ends the answer (the container stopped) or the reader
    closes the iterator (which closes the connection).

    Connecting and the answer's head each take at most ``answer_within`` seconds
    (``ServerUnreachable`` else); Docker's refusal is ``RuntimeFailure`` quoting it; a
    connection that breaks later is the stream's end.
    """
    try:
        reader, writer = await asyncio.wait_for(_connect(base_url), answer_within)
    except (OSError, TimeoutError) as exc:
        raise ServerUnreachable(f"Docker cannot be reached: {exc or type(exc).__name__}") from exc
    try:
        request = f"GET {path} HTTP/1.1\r\nHost: docker\r\nUser-Agent: berth\r\n\r\n"
        writer.write(request.encode("ascii"))
        try:
            status, headers = await asyncio.wait_for(_head(reader), answer_within)
        except (TimeoutError, *_BROKEN) as exc:
            raise ServerUnreachable(f"Docker did not answer: {exc or type(exc).__name__}") from exc
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = _chunked(reader)
        else:
            length = headers.get("content-length", "")
            body = _until_closed(reader, int(length) if length.isdigit() else None)
        if status >= 400:
            raise RuntimeFailure(await _error_text(body, status))
        output, lines = Output(), _Lines()
        try:
            async for data in body:
                for payload in output.feed(data):
                    for line in lines.feed(payload):
                        yield line
        except (ServerUnreachable, *_BROKEN) as exc:
            log.info("docker_log_stream_ended", reason=str(exc) or type(exc).__name__)
        for payload in output.end():
            for line in lines.feed(payload):
                yield line
        for line in lines.rest():
            yield line
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


_Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class Calls:
    """HTTP/1.1 calls to the Engine at ``base_url`` made on the event loop: no thread.

    Connections are kept alive for the next call (``keep`` idle at most; through SSH a
    new one is a new channel); one the Engine closed while idle is replaced once,
    silently. Each call takes at most ``timeout`` seconds, connecting included
    (``ServerUnreachable`` else); its answer is read within ``max_bytes`` (``too_large``
    past it, naming ``what``). Docker's refusal is the caller's: the status and body
    are returned. Use one from one event loop at a time (a new loop starts afresh).
    """

    def __init__(self, base_url: str, *, timeout: float, max_bytes: int, keep: int = 8) -> None:
        self._base_url = base_url
        self._timeout = timeout
        self._max_bytes = max_bytes
        self._keep = keep
        self._idle: list[_Stream] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    async def call(
        self,
        method: str,
        path: str,
        *,
        what: str,
        hint: str = "",
        body: bytes | None = None,
        within: float | None = None,
    ) -> tuple[int, bytes]:
        """``method path`` (``body`` sent as JSON); the answer's status and whole body."""
        seconds = self._timeout if within is None else within
        head = f"{method} {path} HTTP/1.1\r\nHost: docker\r\nUser-Agent: berth\r\n"
        if body is not None or method != "GET":
            head += f"Content-Type: application/json\r\nContent-Length: {len(body or b'')}\r\n"
        request = (head + "\r\n").encode("latin-1") + (body or b"")
        try:
            async with asyncio.timeout(seconds):
                return await self._exchange(request, what, hint)
        except TimeoutError:
            raise ServerUnreachable(
                f"Docker did not answer in time: no answer within {seconds:g} s."
            ) from None

    def close(self) -> None:
        """Close the idle connections (call on the event loop they were made on)."""
        idle, self._idle = self._idle, []
        for _, writer in idle:
            with contextlib.suppress(Exception):
                writer.close()

    async def _exchange(self, request: bytes, what: str, hint: str) -> tuple[int, bytes]:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new event loop: the old one's connections are dead
            self._idle, self._loop = [], loop
        while True:
            reused = bool(self._idle)
            reader, writer = self._idle.pop() if reused else await self._open()
            kept = False
            try:
                try:
                    writer.write(request)
                    status, headers = await _head(reader)
                except _BROKEN as exc:
                    if reused:
                        continue  # closed by the Engine while idle: once more, afresh
                    raise ServerUnreachable(
                        f"Docker cannot be reached: {exc or type(exc).__name__}"
                    ) from exc
                try:
                    answer, framed = await self._body(reader, headers, status, what, hint)
                except _BROKEN as exc:
                    raise ServerUnreachable(
                        f"Docker's answer broke off: {exc or type(exc).__name__}"
                    ) from exc
                closing = headers.get("connection", "").lower() == "close"
                if framed and not closing and len(self._idle) < self._keep:
                    self._idle.append((reader, writer))
                    kept = True
                return status, answer
            finally:
                if not kept:
                    writer.close()

    async def _open(self) -> _Stream:
        try:
            return await _connect(self._base_url)
        except OSError as exc:
            raise ServerUnreachable(
                f"Docker cannot be reached: {exc or type(exc).__name__}"
            ) from exc

    async def _body(
        self,
        reader: asyncio.StreamReader,
        headers: dict[str, str],
        status: int,
        what: str,
        hint: str,
    ) -> tuple[bytes, bool]:
        """The answer's body read within the ceiling; whether its end was framed (the
        connection can carry another call)."""
        limit = _MAX_ERROR if status >= 400 else self._max_bytes
        length = headers.get("content-length", "")
        if status in (204, 304):
            return b"", True  # no body, whatever the headers say
        if "chunked" in headers.get("transfer-encoding", "").lower():
            pieces, framed = _chunked(reader), True
        elif length.isdigit():
            if int(length) > limit and status < 400:
                raise too_large(what, limit, hint)
            pieces, framed = _until_closed(reader, int(length)), True
        else:
            pieces, framed = _until_closed(reader, None), False
        taken = bytearray()
        async for data in pieces:
            taken += data
            if len(taken) > limit:
                if status >= 400:
                    return bytes(taken[:limit]), False
                raise too_large(what, limit, hint)
        return bytes(taken), framed
