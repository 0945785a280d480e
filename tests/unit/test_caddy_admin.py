"""``CaddyAdmin``'s client against a small real HTTP server on a unix socket."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from berth.adapters.caddy import CaddyAdmin
from berth.core.errors import RuntimeFailure, ServerUnreachable
from berth.core.models import ProxyRoute

Answer = Callable[[bytes], Awaitable[bytes | None]]  # request bytes → raw response (None: hang)


@pytest.fixture
async def admin_socket(tmp_path: Path) -> AsyncIterator[Callable[[Answer], Awaitable[Path]]]:
    servers: list[asyncio.Server] = []
    seen: list[bytes] = []

    async def serve(answer: Answer) -> Path:
        path = tmp_path / f"admin-{len(servers)}.sock"

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                (int(line.split(b":")[1]) for line in head.split(b"\r\n")
                 if line.lower().startswith(b"content-length:")),
                0,
            )  # fmt: skip
            request = head + (await reader.readexactly(length) if length else b"")
            seen.append(request)
            raw = await answer(request)
            if raw is None:
                await asyncio.sleep(30)
            else:
                writer.write(raw)
                await writer.drain()
            writer.close()

        servers.append(await asyncio.start_unix_server(handle, path=str(path)))
        return path

    serve.seen = seen  # type: ignore[attr-defined]
    yield serve
    for server in servers:
        server.close()


def _http(status: int, body: bytes) -> bytes:
    return (
        f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


ROUTES = [ProxyRoute(domain="shop.example.com", upstream_port=8080)]


class TestCaddyAdmin:
    async def test_apply_posts_the_whole_config_to_load(self, admin_socket: Any) -> None:
        """``apply`` is one ``POST /load`` with ``Host: caddy-admin`` and the rendered JSON."""

        async def ok(request: bytes) -> bytes:
            return _http(200, b"")

        path = await admin_socket(ok)
        admin = CaddyAdmin(path)
        await admin.apply(ROUTES)
        (request,) = admin_socket.seen
        head, _, body = request.partition(b"\r\n\r\n")
        assert head.startswith(b"POST /load HTTP/1.1\r\n")
        assert b"\r\nhost: caddy-admin\r\n" in head.lower()
        assert json.loads(body) == admin.config(ROUTES)

    async def test_a_refusal_quotes_caddy(self, admin_socket: Any) -> None:
        """Caddy's ``{"error": …}`` becomes a RuntimeFailure with its words."""

        async def refuse(request: bytes) -> bytes:
            return _http(400, b'{"error":"loading config: bad module"}')

        admin = CaddyAdmin(await admin_socket(refuse))
        with pytest.raises(RuntimeFailure, match="loading config: bad module"):
            await admin.apply(ROUTES)

    async def test_live_config_round_trips(self, admin_socket: Any) -> None:
        """``matches`` compares Caddy's live JSON with what ``apply`` would load."""
        wanted: list[bytes] = []

        async def live(request: bytes) -> bytes:
            return _http(200, wanted[0])

        admin = CaddyAdmin(await admin_socket(live))
        wanted.append(json.dumps(admin.config(ROUTES)).encode())
        assert await admin.matches(ROUTES)
        assert not await admin.matches([])

    async def test_a_missing_socket_is_unreachable(self, tmp_path: Path) -> None:
        """No socket: ServerUnreachable with the system's reason."""
        admin = CaddyAdmin(tmp_path / "nothing.sock")
        with pytest.raises(ServerUnreachable, match="cannot be reached: No such file"):
            await admin.live()

    async def test_a_silent_close_is_unreachable(self, admin_socket: Any) -> None:
        """A socket that closes without a word is not a Caddy: ServerUnreachable."""

        async def nothing(request: bytes) -> bytes:
            return b""

        admin = CaddyAdmin(await admin_socket(nothing))
        with pytest.raises(ServerUnreachable, match="closed the connection without answering"):
            await admin.live()

    async def test_no_answer_in_time_is_unreachable(self, admin_socket: Any) -> None:
        """A Caddy that never answers is given up on after ``timeout``."""
        admin = CaddyAdmin(await admin_socket(lambda request: asyncio.sleep(0)), timeout=0.2)
        with pytest.raises(ServerUnreachable, match=r"did not answer within 0\.2 s"):
            await admin.live()
