"""What answers on a port: the one health-probe rule every transport shares.

A probe opens a TCP stream (directly, or as an SSH ``direct-tcpip`` channel), sends a
minimal HTTP request and waits briefly for a reply. Docker's userland proxy accepts a
connection on a published port even when nothing listens inside the container, then
closes it at once: that end-of-stream without a byte is *not* an answer. When the proxy
closes late (a busy machine, a slow SSH channel), the connection looks held and silent:
the health rule (``steps.answered``) takes a bare TCP answer only when two probes in a row
give it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Protocol

from berth.core.ports import BARE_TCP

__all__ = [
    "REQUEST",
    "ByteReader",
    "ByteWriter",
    "StreamOpener",
    "http_answer",
    "https_answer",
    "probe_stream",
    "request_for",
]

REQUEST = b"GET / HTTP/1.0\r\nHost: localhost\r\nUser-Agent: berth-probe\r\n\r\n"
# What may stay as is in the request target; anything else (spaces, CR, LF, …) is
# percent-encoded, so a health path can never add a header or a second request.
_PATH_SAFE = "/?&=:@!$'()*+,;~-._%"


def request_for(path: str | None) -> bytes:
    """The probe's request: ``GET <path>`` (``/`` when ``None``), one line per header."""
    if path is None:
        return REQUEST
    target = urllib.parse.quote(path if path.startswith("/") else f"/{path}", safe=_PATH_SAFE)
    return (f"GET {target} HTTP/1.0\r\nHost: localhost\r\nUser-Agent: berth-probe\r\n\r\n").encode(
        "ascii"
    )


_MAX_BYTES = 1024


class ByteReader(Protocol):
    """The part of ``asyncio.StreamReader`` (or asyncssh's ``SSHReader``) a probe reads with."""

    async def read(self, n: int = -1) -> bytes: ...


class ByteWriter(Protocol):
    """The part of ``asyncio.StreamWriter`` (or asyncssh's ``SSHWriter``) a probe writes with."""

    def write(self, data: bytes) -> None: ...

    def close(self) -> None: ...


StreamOpener = Callable[[], Awaitable[tuple[ByteReader, ByteWriter]]]


async def probe_stream(
    open_stream: StreamOpener,
    *,
    connect_timeout: float = 0.5,
    read_timeout: float = 1.0,
    path: str | None = None,
) -> str | None:
    """Whether something answers on the stream ``open_stream`` opens, to a GET of ``path``.

    Returns ``"HTTP <status>"`` when the reply starts like an HTTP response
    (``"HTTP"`` alone if its status line is cut short), ``"TCP"`` for any other reply
    or for a peer that keeps the stream open without a word for ``read_timeout``
    seconds, and ``None`` when the stream cannot be opened (``OSError`` or the
    connect deadline) or ends before a single byte. Never takes longer than
    ``connect_timeout + read_timeout`` (plus scheduling noise). Errors other than
    ``OSError`` raised by ``open_stream`` propagate (an opener uses them to say that
    the transport itself is gone).
    """
    try:
        async with asyncio.timeout(connect_timeout):
            reader, writer = await open_stream()
    except (OSError, TimeoutError):
        return None
    try:
        writer.write(request_for(path))
        data = await _read_reply(reader, time.monotonic() + read_timeout)
    except OSError:
        return None
    finally:
        with contextlib.suppress(Exception):
            writer.close()
    if data is None:
        return BARE_TCP  # open, silent: something holds the port (or a proxy in front)
    if not data:
        return None  # accepted, then closed without a word: nobody behind the port
    if not data.startswith(b"HTTP/"):
        return BARE_TCP
    status_line = data.split(b"\r\n", 1)[0].split(b"\n", 1)[0]
    parts = status_line.split()
    if len(parts) >= 2 and parts[1].isdigit() and len(parts[1]) == 3:
        return f"HTTP {parts[1].decode('ascii')}"
    return "HTTP"


async def accepts_stream(open_stream: StreamOpener, *, connect_timeout: float = 0.5) -> bool:
    """Whether the stream ``open_stream`` opens can be opened at all (a TCP connect:
    something listens), closed at once without a byte sent. ``OSError`` and the connect
    deadline are ``False``; other errors of the opener propagate (the transport is gone)."""
    try:
        async with asyncio.timeout(connect_timeout):
            _, writer = await open_stream()
    except (OSError, TimeoutError):
        return False
    with contextlib.suppress(Exception):
        writer.close()
    return True


async def _read_reply(reader: ByteReader, deadline: float) -> bytes | None:
    """The first bytes of the reply (up to a line), ``b""`` at end-of-stream, or ``None``
    if nothing came before ``deadline``."""
    data = b""
    while len(data) < _MAX_BYTES and b"\n" not in data:
        remaining = deadline - time.monotonic()
        try:
            if remaining <= 0:
                raise TimeoutError
            async with asyncio.timeout(remaining):
                chunk = await reader.read(_MAX_BYTES - len(data))
        except TimeoutError:
            return data or None
        if not chunk:
            break
        data += chunk
    return data


# -- through the reverse proxy: plain HTTP (a redirect), then HTTPS with SNI -------------

_HEAD_MAX = 16 * 1024


def _request_to(host: str) -> bytes:
    """``GET /`` for ``host`` (a checked DNS name: no CR, LF or space can be in it)."""
    return (
        f"GET / HTTP/1.1\r\nHost: {host}\r\nUser-Agent: berth-probe\r\nConnection: close\r\n\r\n"
    ).encode("ascii")


def _status_and_location(head: bytes) -> tuple[str | None, str | None]:
    """``("HTTP 308", "https://…")`` from a response's head; ``(None, None)`` if it is
    not HTTP."""
    if not head.startswith(b"HTTP/"):
        return None, None
    lines = head.split(b"\r\n")
    parts = lines[0].split()
    status = (
        f"HTTP {parts[1].decode('ascii')}"
        if len(parts) >= 2 and parts[1].isdigit() and len(parts[1]) == 3
        else "HTTP"
    )
    location = None
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"location":
            location = value.strip().decode("latin-1")
            break
    return status, location


async def _read_head(read: Callable[[], Awaitable[bytes]]) -> bytes:
    """Bytes up to the end of the response head (or what came before end-of-stream)."""
    data = b""
    while b"\r\n\r\n" not in data and len(data) < _HEAD_MAX:
        chunk = await read()
        if not chunk:
            break
        data += chunk
    return data


async def http_answer(
    open_stream: StreamOpener, host: str, *, within: float = 3.0
) -> tuple[str | None, str | None]:
    """What plain HTTP answers to ``GET /`` for ``host`` on the stream: its status
    (``"HTTP 308"``) and ``Location``; ``(None, None)`` when nothing answers HTTP."""
    try:
        async with asyncio.timeout(within):
            reader, writer = await open_stream()
            try:
                writer.write(_request_to(host))
                head = await _read_head(lambda: reader.read(_MAX_BYTES))
            finally:
                with contextlib.suppress(Exception):
                    writer.close()
    except (OSError, TimeoutError):
        return None, None
    return _status_and_location(head)


async def https_answer(
    open_stream: StreamOpener,
    server_name: str,
    *,
    cadata: str | None,
    verify: bool = True,
    within: float = 5.0,
) -> tuple[str | None, str | None]:
    """A TLS handshake naming ``server_name`` (SNI) over the stream, then ``GET /``:
    ``(what answered, None)``, or ``(None, why)`` when the handshake or its verification
    failed. The certificate is verified against ``cadata`` (PEM roots), or the system's
    roots without it; ``verify=False`` skips verification. TLS runs over memory buffers,
    so any byte stream carries it (an SSH channel as well as a socket)."""
    context = ssl.create_default_context(cadata=cadata) if cadata else ssl.create_default_context()
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=server_name)
    try:
        async with asyncio.timeout(within):
            reader, writer = await open_stream()
            try:

                async def pull() -> bool:
                    chunk = await reader.read(_HEAD_MAX)
                    if not chunk:
                        incoming.write_eof()
                        return False
                    incoming.write(chunk)
                    return True

                while True:
                    try:
                        tls.do_handshake()
                        break
                    except ssl.SSLWantReadError:
                        if pending := outgoing.read():
                            writer.write(pending)
                        if not await pull():
                            return None, "the proxy closed the connection during the handshake"
                tls.write(_request_to(server_name))
                writer.write(outgoing.read())

                async def read_plain() -> bytes:
                    while True:
                        try:
                            return tls.read(_HEAD_MAX)
                        except ssl.SSLWantReadError:
                            if not await pull():
                                return b""
                        except ssl.SSLZeroReturnError:
                            return b""

                head = await _read_head(read_plain)
            finally:
                with contextlib.suppress(Exception):
                    writer.close()
    except ssl.SSLCertVerificationError as exc:
        return None, f"the certificate is not trusted: {exc.verify_message or exc.reason}"
    except ssl.SSLError as exc:
        return None, f"TLS failed: {exc.reason or exc}"
    except TimeoutError:
        return None, f"no TLS answer within {within:g} s"
    except OSError as exc:
        return None, f"cannot connect: {exc.strerror or exc}"
    status, _ = _status_and_location(head)
    return (status or "TLS"), None
