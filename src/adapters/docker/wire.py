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

__all__ = ["MAX_LINE", "Frames", "Output", "capped_body", "follow", "too_large"]

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
    with contextlib.suppress(ValueError, AttributeError):
        message = json.loads(taken).get("message")
        if message:
            return str(message)
    return taken[:500].decode("utf-8", errors="replace").strip() or f"HTTP {status}"


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
