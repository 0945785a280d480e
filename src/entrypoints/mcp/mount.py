"""``MountedMcp``, what the HTTP app mounts at ``/mcp``.

It imports nothing of the MCP SDK (about 35 MiB of modules): the server is built, and
its session manager started, on the first request to ``/mcp``, and stopped with the app.
Authentication, the per-token rate limit and the failure throttle are the API's own
(``http.auth.bearer_auth`` on its router): a missing or wrong token is the API's 401 with
``WWW-Authenticate: Bearer``, before the MCP server sees the request. A request past the
token's limit reaches the MCP server, which answers it in MCP's terms
(``mounted.RateLimitedCalls``: a tool error saying when to retry), as a client shows
those and not an HTTP 429.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from berth.core.bus import MessageBus
from litestar import Litestar, Router
from litestar.handlers import asgi
from litestar.types import Receive, Scope, Send

from ..http.auth import HttpLimits, bearer_auth
from . import MCP_PATH

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

__all__ = ["MountedMcp"]


class MountedMcp:
    """``/mcp`` in the HTTP app: its router (behind the API's auth) and its lifespan."""

    def __init__(self, bus: MessageBus, limits: HttpLimits, *, max_body_bytes: int) -> None:
        self._bus = bus
        self._max_body_bytes = max_body_bytes
        self._manager: StreamableHTTPSessionManager | None = None
        self._lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self._serving: asyncio.Task[None] | None = None

        @asgi(MCP_PATH, copy_scope=False)  # the SDK reads the scope, changes nothing of ours
        async def mcp_app(scope: Scope, receive: Receive, send: Send) -> None:
            manager = await self._started()
            await manager.handle_request(scope, receive, send)  # type: ignore[arg-type]

        self.router = Router(
            "/", route_handlers=[mcp_app], middleware=[bearer_auth(bus, limits, admit_limited=True)]
        )

    async def _started(self) -> StreamableHTTPSessionManager:
        """The session manager, built and started on the first call. It runs in a task
        of its own, which enters and leaves its task group (anyio wants both in one task)."""
        if self._manager is None:
            async with self._lock:
                if self._manager is None:
                    from .mounted import session_manager

                    manager = session_manager(self._bus, max_body_bytes=self._max_body_bytes)
                    ready = asyncio.Event()
                    self._serving = asyncio.create_task(self._serve(manager, ready))
                    waiting = asyncio.create_task(ready.wait())
                    await asyncio.wait({waiting, self._serving}, return_when="FIRST_COMPLETED")
                    if not ready.is_set():  # it failed to start: say why, here
                        waiting.cancel()
                        await self._serving
                        raise RuntimeError("The MCP session manager stopped at once.")
                    self._manager = manager
        return self._manager

    async def _serve(self, manager: StreamableHTTPSessionManager, ready: asyncio.Event) -> None:
        async with manager.run():
            ready.set()
            await self._stop.wait()

    @asynccontextmanager
    async def lifespan(self, app: Litestar) -> AsyncIterator[None]:
        """Stops the session manager (if a request started it) when the app stops."""
        try:
            yield
        finally:
            self._stop.set()
            if self._serving is not None:
                await self._serving
