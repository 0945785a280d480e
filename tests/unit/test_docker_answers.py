"""``DockerRuntime`` against an engine that answers what a test says (a fake Engine on a
unix socket): answers past the ceiling, empty and broken ones, and what a container list
is made of."""

from __future__ import annotations

import json
import socketserver
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from berth.adapters.docker import DockerRuntime
from berth.core.errors import RuntimeFailure
from berth.core.models import ContainerStats

#: What the fake engine does for a path: ``(status, body chunks)``; chunks are sent as
#: a chunked answer, one after the other, while the client reads.
Answer = Callable[[str], tuple[int, Iterator[bytes]]]


class _Engine(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    answer: Answer
    sent: int = 0


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Engine

    def do_GET(self) -> None:
        status, chunks = self.server.answer(self.path)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for chunk in chunks:
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
                self.server.sent += len(chunk)
            self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client hung up
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Callable[[Answer], tuple[DockerRuntime, _Engine]]]:
    made: list[tuple[DockerRuntime, _Engine]] = []

    def start(answer: Answer, max_bytes: int = 64 * 1024) -> tuple[DockerRuntime, _Engine]:
        path = tmp_path / f"engine-{len(made)}.sock"
        server = _Engine(str(path), _Handler)
        server.answer = answer
        threading.Thread(target=server.serve_forever, daemon=True).start()
        runtime = DockerRuntime(f"unix://{path}", timeout=5, max_bytes=max_bytes)
        made.append((runtime, server))
        return runtime, server

    yield start  # type: ignore[misc]
    for runtime, server in made:
        runtime.close()
        server.shutdown()
        server.server_close()


class TestAnswers:
    async def test_an_endless_answer_is_cut_at_the_ceiling(self, engine: Any) -> None:
        """An engine that never stops answering ``info``: berth stops reading past its
        ceiling (the engine gets to send little more) and says which answer it was."""

        def endless(path: str) -> tuple[int, Iterator[bytes]]:
            def chunks() -> Iterator[bytes]:
                yield b'{"ServerVersion": "'
                while True:
                    yield b"x" * 4096

            return 200, chunks()

        runtime, server = engine(endless)
        with pytest.raises(RuntimeFailure) as refused:
            await runtime.facts()
        assert refused.value.kind == "response-too-large"
        assert "version" in refused.value.detail
        assert "64 KiB" in refused.value.detail
        assert server.sent < 4 * 1024 * 1024

    async def test_an_empty_stats_answer_is_a_stopped_sample(self, engine: Any) -> None:
        """Docker answers stats of a container that stops meanwhile with nothing: that is
        a sample of a stopped container, not an error."""
        runtime, _ = engine(lambda path: (200, iter([])))
        assert await runtime.stats("web") == ContainerStats(
            running=False, cpu_percent=None, memory_bytes=None, memory_limit_bytes=None
        )

    async def test_an_answer_that_is_not_json_says_so(self, engine: Any) -> None:
        """Garbage where JSON belongs is a RuntimeFailure naming the call, not a crash."""
        runtime, _ = engine(lambda path: (200, iter([b"<html>nope</html>"])))
        with pytest.raises(RuntimeFailure, match="the container list is not JSON"):
            await runtime.list_containers()


class TestContainerList:
    async def test_each_container_names_the_image_it_runs(self, engine: Any) -> None:
        """A row's ``ImageID`` is the container's ``image_id``; a row without one (an
        older Engine, a row Docker could not fill) lists ``None``."""
        image_id = "sha256:" + "3f4e5d6c7b8a" * 5 + "9f0e"
        rows = [
            {"Id": "a" * 64, "Names": ["/web"], "Image": "shop:2", "ImageID": image_id},
            {"Id": "b" * 64, "Names": ["/db"], "Image": "postgres:17"},
        ]
        runtime, _ = engine(lambda path: (200, iter([json.dumps(rows).encode()])))
        listed = await runtime.list_containers()
        assert [(c.name, c.image, c.image_id) for c in listed] == [
            ("web", "shop:2", image_id),
            ("db", "postgres:17", None),
        ]
