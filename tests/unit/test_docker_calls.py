"""``wire.Calls`` and the ``DockerRuntime`` calls made through it, against a fake Engine
on a unix socket that answers as a test says (framing, keep-alive, refusals, silence)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from berth.adapters.docker import DockerRuntime
from berth.adapters.docker.wire import Calls
from berth.core.errors import RuntimeFailure, ServerUnreachable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

#: What the fake Engine writes for a request (its method and path): the raw answer, or
#: ``None`` to say nothing at all.
Reply = Callable[[str, str], bytes | None]


def framed(status: int, body: bytes, *, close: bool = False) -> bytes:
    head = f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\n"
    return (head + ("Connection: close\r\n" if close else "") + "\r\n").encode() + body


def chunked(status: int, pieces: list[bytes], trailer: bytes = b"") -> bytes:
    out = f"HTTP/1.1 {status} X\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    for piece in pieces:
        out += f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    return out + b"0\r\n" + trailer + b"\r\n"


def refusal(status: int, message: str) -> bytes:
    return framed(status, json.dumps({"message": message}).encode())


@dataclass
class FakeEngine:
    reply: Reply
    connections: int = 0
    requests: list[tuple[str, str, bytes]] = field(default_factory=list)
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
                method, path, _ = head.split(" ", 2)
                length = 0
                for line in head.split("\r\n")[1:]:
                    name, _, value = line.partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                body = await reader.readexactly(length)
                self.requests.append((method, path, body))
                answer = self.reply(method, path)
                if answer is None:
                    continue
                writer.write(answer)
                await writer.drain()
                if b"Connection: close" in answer.split(b"\r\n\r\n", 1)[0]:
                    break
        writer.close()

    def hang_up_all(self) -> None:
        for writer in self.writers:
            writer.close()


Start = Callable[[Reply], Awaitable[tuple[str, FakeEngine]]]


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[Start]:
    servers: list[asyncio.AbstractServer] = []

    async def start(reply: Reply) -> tuple[str, FakeEngine]:
        fake = FakeEngine(reply)
        path = tmp_path / f"engine-{len(servers)}.sock"
        servers.append(await asyncio.start_unix_server(fake.serve, path=str(path)))
        return f"unix://{path}", fake

    yield start
    for server in servers:
        server.close()


class TestCalls:
    async def test_calls_share_one_kept_alive_connection(self, engine: Start) -> None:
        """Answers framed by length or in chunks (with trailers) leave the connection
        ready for the next call: three calls, one connection."""
        answers = iter(
            [
                framed(200, b'{"a": 1}'),
                chunked(200, [b'{"b"', b": 2}"], trailer=b"X-Trailer: yes\r\n"),
                framed(200, b"last"),
            ]
        )
        url, fake = await engine(lambda method, path: next(answers))
        calls = Calls(url, timeout=5, max_bytes=1024)
        got = [await calls.call("GET", f"/p{i}", what="a test") for i in range(3)]
        assert got == [(200, b'{"a": 1}'), (200, b'{"b": 2}'), (200, b"last")]
        assert fake.connections == 1
        assert [path for _, path, _ in fake.requests] == ["/p0", "/p1", "/p2"]
        calls.close()

    @settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(body=st.binary(max_size=300), cuts=st.lists(st.integers(0, 300), max_size=6))
    async def test_any_chunking_reads_the_same_body(
        self, engine: Start, body: bytes, cuts: list[int]
    ) -> None:
        """However Docker cuts an answer into chunks, the body read is the body sent, and
        the connection carries the next call."""
        edges = sorted({0, len(body), *(cut for cut in cuts if cut <= len(body))})
        pieces = [body[a:b] for a, b in itertools.pairwise(edges) if b > a]
        url, fake = await engine(
            lambda method, path: chunked(200, pieces) if path == "/body" else framed(200, b"ok")
        )
        calls = Calls(url, timeout=5, max_bytes=1024)
        assert await calls.call("GET", "/body", what="a test") == (200, body)
        assert await calls.call("GET", "/next", what="a test") == (200, b"ok")
        assert fake.connections == 1
        calls.close()

    async def test_no_content_answers_have_no_body_to_wait_for(self, engine: Start) -> None:
        """204 and 304 carry no body even without a Content-Length: the call returns at
        once (reading until the Engine closed would wait out the timeout)."""
        answers = iter([b"HTTP/1.1 204 No Content\r\n\r\n", b"HTTP/1.1 304 Not Modified\r\n\r\n"])
        url, fake = await engine(lambda method, path: next(answers))
        calls = Calls(url, timeout=2, max_bytes=1024)
        assert await calls.call("POST", "/start", what="a start") == (204, b"")
        assert await calls.call("POST", "/start", what="a start") == (304, b"")
        assert fake.connections == 1
        assert fake.requests[0] == ("POST", "/start", b"")
        calls.close()

    async def test_a_connection_the_engine_closed_while_idle_is_replaced(
        self, engine: Start
    ) -> None:
        """The Engine closes an idle kept-alive connection: the next call is made on a
        new one, without an error."""
        url, fake = await engine(lambda method, path: framed(200, path.encode()))
        calls = Calls(url, timeout=5, max_bytes=1024)
        assert await calls.call("GET", "/one", what="a test") == (200, b"/one")
        fake.hang_up_all()
        await asyncio.sleep(0.05)
        assert await calls.call("GET", "/two", what="a test") == (200, b"/two")
        assert fake.connections == 2
        calls.close()

    async def test_connection_close_is_not_kept(self, engine: Start) -> None:
        url, fake = await engine(lambda method, path: framed(200, b"x", close=True))
        calls = Calls(url, timeout=5, max_bytes=1024)
        for _ in range(2):
            assert await calls.call("GET", "/x", what="a test") == (200, b"x")
        assert fake.connections == 2
        calls.close()

    async def test_an_answer_past_the_ceiling_is_refused_unread(self, engine: Start) -> None:
        """A length past ``max_bytes`` is refused before reading it, naming the call."""
        url, _ = await engine(lambda method, path: framed(200, b"x" * 2048))
        calls = Calls(url, timeout=5, max_bytes=1024)
        with pytest.raises(RuntimeFailure) as refused:
            await calls.call("GET", "/big", what="a container's inspect", hint=": ask less")
        assert refused.value.kind == "response-too-large"
        assert "a container's inspect" in refused.value.detail
        assert "1 KiB" in refused.value.detail
        assert refused.value.detail.endswith(": ask less.")

    async def test_silence_is_unreachable_within_the_timeout(self, engine: Start) -> None:
        url, fake = await engine(lambda method, path: None)
        calls = Calls(url, timeout=0.3, max_bytes=1024)
        with pytest.raises(ServerUnreachable, match="did not answer in time"):
            await calls.call("GET", "/slow", what="a test")
        assert len(fake.requests) == 1

    async def test_no_engine_is_unreachable(self, tmp_path: Path) -> None:
        calls = Calls(f"unix://{tmp_path / 'missing.sock'}", timeout=1, max_bytes=1024)
        with pytest.raises(ServerUnreachable, match="Docker cannot be reached"):
            await calls.call("GET", "/x", what="a test")


class TestRuntimeThroughCalls:
    async def test_refusals_quote_docker_and_absence_is_none(self, engine: Start) -> None:
        """A 404 is ``None`` where absence is an answer (inspect, an image's id) and
        Docker's own words where it is not (start); a removal of what is gone, or is
        being removed, is no error."""

        def reply(method: str, path: str) -> bytes:
            if path.endswith("/start"):
                return refusal(404, "No such container: web")
            if method == "DELETE" and "busy" in path:
                return refusal(409, "removal of container busy is already in progress")
            if method == "DELETE" and "held" in path:
                return refusal(409, "You cannot remove a running container held")
            return refusal(404, "No such object")

        url, _ = await engine(reply)
        runtime = DockerRuntime(url, timeout=5)
        assert await runtime.inspect("web") is None
        assert await runtime.image_id("nginx:1") is None
        assert await runtime.image_exists("nginx:1") is False
        with pytest.raises(RuntimeFailure, match="No such container: web"):
            await runtime.start("web")
        await runtime.remove("gone")
        await runtime.remove("busy")
        with pytest.raises(RuntimeFailure, match="cannot remove a running container"):
            await runtime.remove("held")
        runtime.close()

    async def test_a_port_clash_is_said_in_words(self, engine: Start) -> None:
        clash = "Bind for 0.0.0.0:8091 failed: port is already allocated"
        url, _ = await engine(lambda method, path: refusal(500, f"driver failed: {clash}"))
        runtime = DockerRuntime(url, timeout=5)
        with pytest.raises(RuntimeFailure, match="Port 8091 is already in use on this server"):
            await runtime.start("web")
        runtime.close()

    async def test_calls_name_the_api_version_and_quote_ids(self, engine: Start) -> None:
        """Paths carry the API version; an id or name is quoted (``/`` and ``:`` kept, as
        the SDK does), never spliced raw into the request line."""
        url, fake = await engine(lambda method, path: framed(204, b""))
        runtime = DockerRuntime(url, timeout=5, version="1.41")
        await runtime.start("a b?c")
        await runtime.rename("web", "new name&x=1")
        await runtime.stop("web", grace=2.5)
        await runtime.remove("web")
        assert [(method, path) for method, path, _ in fake.requests] == [
            ("POST", "/v1.41/containers/a%20b%3Fc/start"),
            ("POST", "/v1.41/containers/web/rename?name=new+name%26x%3D1"),
            ("POST", "/v1.41/containers/web/stop?t=3"),
            ("DELETE", "/v1.41/containers/web?force=1"),
        ]
        runtime.close()

    async def test_a_logs_tail_is_demultiplexed(self, engine: Start) -> None:
        frames = b"".join(
            bytes([stream, 0, 0, 0]) + len(text).to_bytes(4, "big") + text
            for stream, text in [(1, b"out 1\n"), (2, b"err 1\n"), (1, b"out 2\n")]
        )
        url, fake = await engine(lambda method, path: framed(200, frames))
        runtime = DockerRuntime(url, timeout=5)
        assert await runtime.logs("web", 3) == ["out 1", "err 1", "out 2"]
        assert "tail=3" in fake.requests[0][1]
        runtime.close()
