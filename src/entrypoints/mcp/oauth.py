"""OAuth for remote MCP clients, mounted in the HTTP app: the SDK's authorization server
(``oauth_server``, imported on the first OAuth request) at its well-known paths, and
the 401 of ``/mcp`` pointing at its protected resource metadata (RFC 9728 §5.1).

Everything OAuth adds to the app is here, in ``serve_oauth(app, …)``: the routes (the
SDK's Starlette routes behind one Litestar ASGI handler, built once per public origin —
the issuer is the URL clients reach berth at, ``BERTH_BASE_URL`` or the request's
Host), a per-address request budget on them (registration writes to the store), and
the ``WWW-Authenticate`` challenge. The dashboard's consent page is
``http.dashboard.consent``; the tokens it mints are named tokens, which ``/mcp``'s
``bearer_auth`` accepts as any other.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from berth.core.bus import MessageBus
from berth.core.errors import NotFound
from litestar import Litestar, Request
from litestar.handlers import asgi
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from ..http.auth import HttpLimits
from ..http.urls import base_url
from ..settings import Settings
from . import MCP_PATH

if TYPE_CHECKING:
    from starlette.routing import Router

__all__ = ["OAUTH_PATHS", "resource_metadata_path", "serve_oauth"]

#: The SDK's endpoints (``mcp.server.auth.routes``), at the issuer's root.
OAUTH_PATHS = [
    "/.well-known/oauth-authorization-server",
    "/.well-known/oauth-protected-resource" + MCP_PATH,
    "/authorize",
    "/token",
    "/register",
    "/revoke",
]
_KEPT_ORIGINS = 16  # built routers kept (one per public origin berth is reached at)


def resource_metadata_path() -> str:
    return "/.well-known/oauth-protected-resource" + MCP_PATH


def serve_oauth(app: Litestar, bus: MessageBus, settings: Settings, limits: HttpLimits) -> None:
    """Mount the OAuth endpoints on ``app`` and make ``/mcp``'s 401 name them."""
    routers: dict[str, Router] = {}
    lock = asyncio.Lock()

    async def router_for(origin: str) -> Router | None:
        async with lock:
            if origin not in routers:
                from .oauth_server import oauth_router

                try:
                    built = oauth_router(bus, origin, MCP_PATH)
                except ValueError:  # the SDK wants HTTPS, but on this machine
                    return None
                if len(routers) >= _KEPT_ORIGINS:
                    routers.pop(next(iter(routers)))
                routers[origin] = built
            return routers[origin]

    @asgi(OAUTH_PATHS, copy_scope=False, include_in_schema=False)
    async def oauth_endpoints(scope: Scope, receive: Receive, send: Send) -> None:
        request: Request[Any, Any, Any] = Request(scope)
        address = request.client.host if request.client else "unknown"
        if request.method != "OPTIONS":
            await limits.request(f"oauth:{address}", "Too many OAuth requests from this address.")
        router = await router_for(base_url(request, settings))
        if router is None:
            raise NotFound(
                "OAuth needs berth served over HTTPS: set BERTH_BASE_URL to its https:// "
                "address (or connect with a token: Authorization: Bearer <token>)."
            )
        await router(scope, receive, send)  # type: ignore[arg-type]

    app.register(oauth_endpoints)
    app.asgi_handler = _challenge(app.asgi_handler, settings)


def _challenge(app: ASGIApp, settings: Settings) -> ASGIApp:
    """``/mcp``'s 401 says where its protected resource metadata is (RFC 9728 §5.1), so
    a client that has only the URL finds the authorization server."""

    async def challenged(scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("path") != MCP_PATH:  # lifespan scopes have none
            await app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 401:
                metadata = base_url(Request(scope), settings) + resource_metadata_path()
                headers = [
                    (k, v)
                    for k, v in message.get("headers", [])
                    if k.lower() != b"www-authenticate"
                ]
                value = f'Bearer resource_metadata="{metadata}"'
                headers.append((b"www-authenticate", value.encode("latin-1")))
                message = {**message, "headers": headers}
            await send(message)

        await app(scope, receive, sending)

    return challenged
