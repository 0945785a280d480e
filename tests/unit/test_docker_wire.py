"""The docker adapter's bounded reads (``adapters.docker.wire``): capped bodies, Docker's
multiplexed frames, and a followed log read on the event loop from a socket (served
here by a tiny asyncio server speaking the Engine's HTTP)."""

from __future__ import annotations

import asyncio
import itertools
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from berth.adapters.docker.wire import MAX_LINE, Frames, Output, capped_body, follow
from berth.core.errors import RuntimeFailure, ServerUnreachable
from hypothesis import given
from hypothesis import strategies as st

#: Payloads of frames, and the places their bytes are cut at (see :func:`cut`).
PAYLOADS = st.lists(st.binary(max_size=300), max_size=8)
CUT_POINTS = st.lists(st.integers(min_value=0), max_size=12)


def frame(payload: bytes, stream: int = 1) -> bytes:
    return struct.pack(">BxxxI", stream, len(payload)) + payload


def cut(data: bytes, points: list[int]) -> list[bytes]:
    """``data`` cut at ``points`` (positions, any order, repeats allowed)."""
    edges = sorted({0, len(data), *(p % (len(data) + 1) for p in points)})
    return [data[a:b] for a, b in itertools.pairwise(edges)]


class TestFrames:
    @given(PAYLOADS, CUT_POINTS)
    def test_payloads_come_out_whole_however_the_bytes_are_cut(
        self, payloads: list[bytes], points: list[int]
    ) -> None:
        """Frames fed in pieces cut anywhere give back exactly their payloads' bytes."""
        frames = Frames()
        data = b"".join(frame(p, 1 + i % 2) for i, p in enumerate(payloads))
        out = b"".join(b"".join(frames.feed(piece)) for piece in cut(data, points))
        assert out == b"".join(payloads)


class TestOutput:
    @given(PAYLOADS, CUT_POINTS)
    def test_multiplexed_output_is_taken_apart(
        self, payloads: list[bytes], points: list[int]
    ) -> None:
        """Frames (a container without a TTY) come out as their payloads."""
        output = Output()
        data = b"".join(frame(p) for p in payloads)
        pieces = [b"".join(output.feed(piece)) for piece in cut(data, points)]
        assert b"".join(pieces) + b"".join(output.end()) == b"".join(payloads)

    @given(
        st.text(alphabet=st.characters(min_codepoint=9, codec="utf-8"), max_size=300),
        CUT_POINTS,
    )
    def test_a_ttys_output_comes_out_as_it_is(self, text: str, points: list[int]) -> None:
        """Text (a TTY's output, never starting with a frame's header) comes out as is."""
        output = Output()
        data = text.encode()
        pieces = [b"".join(output.feed(piece)) for piece in cut(data, points)]
        assert b"".join(pieces) + b"".join(output.end()) == data


class FakeResponse:
    """What ``capped_body`` reads: ``iter_content`` chunks, ``close``."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks
        self.read = 0
        self.closed = False

    def iter_content(self, chunk_size: int) -> Iterator[bytes]:
        for chunk in self._chunks:
            self.read += 1
            yield chunk

    def close(self) -> None:
        self.closed = True


class TestCappedBody:
    def test_a_body_within_the_cap_is_read_whole(self) -> None:
        """Up to the cap the whole body comes back (and stays on the response)."""
        response = FakeResponse([b"ab", b"cd"])
        assert capped_body(response, 4, "info") == b"abcd"
        assert response._content == b"abcd"  # type: ignore[attr-defined]
        assert not response.closed

    def test_past_the_cap_the_read_stops_and_says_so(self) -> None:
        """One byte more: reading stops there, the connection is dropped, and the error
        names the call, the ceiling and the setting."""
        response = FakeResponse([b"ab", b"cde", b"never read"])
        with pytest.raises(RuntimeFailure) as refused:
            capped_body(response, 4, "the container list")
        assert refused.value.kind == "response-too-large"
        assert "the container list" in refused.value.detail
        assert "4 bytes" in refused.value.detail
        assert "BERTH_DOCKER_MAX_BYTES" in refused.value.detail
        assert response.closed
        assert response.read == 2


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    """Serve a handler on a unix socket, as the Engine would; gives its ``unix://`` URL."""
    servers: list[asyncio.AbstractServer] = []

    async def serve(handler: Handler) -> str:
        path = tmp_path / f"docker-{len(servers)}.sock"

        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")  # the request's head
            try:
                await handler(reader, writer)
            except (ConnectionError, OSError):
                pass
            finally:
                writer.close()

        servers.append(await asyncio.start_unix_server(answer, str(path)))
        return f"unix://{path}"

    yield serve
    for server in servers:
        server.close()


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
CHUNKED = HEAD + b"Transfer-Encoding: chunked\r\n\r\n"


async def lines_of(url: str) -> list[str]:
    return [line async for line in follow(url, "/logs", answer_within=5)]


class TestFollow:
    async def test_multiplexed_chunks_become_lines(self, engine: Any) -> None:
        """Frames split across chunks anywhere, stdout and stderr, become the lines; a
        last line without a newline is kept; the zero chunk ends the stream."""
        data = frame(b"one\ntw") + frame(b"o\r\n", 2) + frame(b"th\xffree")

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(CHUNKED)
            for piece in cut(data, [3, 9, 10, 17, 25]):
                writer.write(chunk(piece))
                await writer.drain()
            writer.write(b"0\r\n\r\n")

        url = await engine(handler)
        assert await asyncio.wait_for(lines_of(url), 5) == ["one", "two", "th\ufffdree"]

    async def test_a_tty_container_s_output_is_raw(self, engine: Any) -> None:
        """A TTY's output has no frames (told by its first bytes): its bytes are the lines."""

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(HEAD + b"Content-Length: 8\r\n\r\nabc\ndef\n")

        assert await asyncio.wait_for(lines_of(await engine(handler)), 5) == [
            "abc",
            "def",
        ]

    async def test_long_lines_are_cut(self, engine: Any) -> None:
        """A line over MAX_LINE bytes arrives in pieces of at most MAX_LINE."""
        data = frame(b"x" * (MAX_LINE * 2 + 5) + b"\n")

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(CHUNKED + chunk(data) + b"0\r\n\r\n")

        lines = await asyncio.wait_for(lines_of(await engine(handler)), 5)
        assert [len(line) for line in lines] == [MAX_LINE, MAX_LINE, 5]

    async def test_dockers_refusal_is_quoted(self, engine: Any) -> None:
        """A 404 with Docker's JSON message is a RuntimeFailure quoting it."""
        body = b'{"message":"No such container: web"}'

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(
                b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )

        with pytest.raises(RuntimeFailure, match="No such container: web"):
            await lines_of(await engine(handler))

    async def test_no_engine_is_unreachable(self, tmp_path: Path) -> None:
        """Nothing listening on the socket: ServerUnreachable."""
        with pytest.raises(ServerUnreachable):
            await lines_of(f"unix://{tmp_path}/nothing.sock")

    async def test_a_slow_reader_holds_back_the_engine_and_closing_ends_it(
        self, engine: Any
    ) -> None:
        """Nobody reading: what the engine could send is held back by the socket (a
        bounded read-ahead), and closing the iterator closes the connection."""
        written = 0
        gone = asyncio.Event()
        line = frame(b"y" * 1000 + b"\n")

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal written
            writer.write(CHUNKED)
            try:
                while written < 200 * 1024 * 1024:
                    writer.write(chunk(line * 64))
                    await writer.drain()
                    written += len(line) * 64
            finally:
                gone.set()

        lines = follow(await engine(handler), "/logs", answer_within=5)
        assert (await anext(lines)).startswith("y")
        await asyncio.sleep(0.5)
        assert written < 16 * 1024 * 1024
        await lines.aclose()
        await asyncio.wait_for(gone.wait(), 5)
