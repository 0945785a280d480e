"""The MCP server inside the HTTP app, at ``/mcp`` (streamable HTTP, stateless, answers
as Server-Sent Events so that a long tool's progress reaches the client).

The router and the lifespan that serve it are ``entrypoints.mcp.mount.MountedMcp``'s, which
imports this module (and the SDK) on the first ``/mcp`` request only.
Each tool call then goes through the library facade's methods (the core's parsers,
then ``bus.handle(command, user)``) as the token's user, so another user's ids are
"not found"; results are rendered by the API's own ``schemas``, so they are the API's
bodies exactly — what ``berth mcp``'s client returns for the same call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

from berth.core.access import Actor
from berth.core.bus import MessageBus
from berth.core.errors import FieldError, InvalidInput, Unauthorized
from berth.core.models import Installation
from berth.core.paging import page
from berth.core.results import DeployResult, FeedEnd, FeedEvent
from berth.facade import Berth
from mcp.server import MCPServer
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_REQUEST, CallToolResult, TextContent

from ..http.auth import RATE_LIMITED
from ..http.events import EndOut
from ..http.schemas import (
    ContainerListOut,
    CurrentTokenOut,
    DeploymentListOut,
    DeploymentOut,
    DeployOut,
    EventOut,
    InstallationListOut,
    InstallationOut,
    InstallationStatsOut,
    LogsOut,
    ServerDiskOut,
    ServerListOut,
    ServerOut,
    container_list_out,
    current_token_out,
    deploy_out,
    deployment_list_out,
    deployment_out,
    event_out,
    installation_out,
    installation_stats_out,
    installations_out,
    logs_out,
    server_disk_out,
    server_list_out,
    server_out,
)
from .tools import build_server, failure_text

__all__ = ["FacadeBackend", "session_manager"]


class FacadeBackend:
    """The tools' backend in the HTTP app: the library facade, as ``user``; each method
    is the facade's of the same name, its result rendered as the API renders it."""

    def __init__(self, berth: Berth, user: Actor) -> None:
        self._berth = berth
        self._user = user

    async def servers(
        self,
        *,
        status: str | None = None,
        name: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> ServerListOut:
        servers = await self._berth.servers(self._user, status=status, name=name)
        found = page(servers, limit=limit, cursor=_cursor(cursor), key=lambda s: s.id)
        return server_list_out(found.items, found.next_cursor)

    async def installations(
        self,
        server_id: str,
        *,
        include_removed: bool = False,
        status: str | None = None,
        name: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> InstallationListOut:
        listing = await self._berth.installations(
            self._user, server_id, include_removed=include_removed, status=status, name=name
        )
        found = page(listing.installations, limit=limit, cursor=_cursor(cursor), key=lambda i: i.id)
        return InstallationListOut(
            server_id=listing.server.id,
            installations=installations_out(listing.server, found.items),
            next_cursor=found.next_cursor,
        )

    async def containers(self, server_id: str) -> ContainerListOut:
        return container_list_out(await self._berth.containers(self._user, server_id))

    async def deploy(self, **arguments: Any) -> DeployOut:
        """The facade's ``deploy`` (the tools' arguments, by name: ``Backend.deploy``)."""
        return _queued(await self._berth.deploy(self._user, **arguments))

    async def deployment(self, deployment_id: str) -> DeploymentOut:
        return deployment_out(await self._berth.deployment(self._user, deployment_id))

    async def events(self, deployment_id: str) -> AsyncIterator[EventOut | EndOut]:
        """The deployment's events and its end, as the API's event stream sends them."""
        async for item in await self._berth.follow(self._user, deployment_id):
            if isinstance(item, FeedEvent):
                yield event_out(item.event)
            elif isinstance(item, FeedEnd):
                yield EndOut(state=item.state.value)

    async def installation(self, installation_id: str) -> InstallationOut:
        return await self._installation(await self._berth.installation(self._user, installation_id))

    async def revisions(
        self, installation_id: str, *, limit: int = 20, before: str | None = None
    ) -> DeploymentListOut:
        found = await self._berth.revisions(
            self._user, installation_id, limit=limit, before=_cursor(before, "before")
        )
        return deployment_list_out(found)

    async def logs(self, installation_id: str, *, tail: int = 100) -> LogsOut:
        return logs_out(await self._berth.logs(self._user, installation_id, tail=tail))

    async def stats(self, installation_id: str) -> InstallationStatsOut:
        return installation_stats_out(await self._berth.stats(self._user, installation_id))

    async def disk_usage(self, server_id: str) -> ServerDiskOut:
        return server_disk_out(await self._berth.disk_usage(self._user, server_id))

    async def change_server(self, server_id: str, **arguments: Any) -> ServerOut:
        """The facade's ``change_server`` (``Backend.change_server``'s arguments)."""
        return server_out(await self._berth.change_server(self._user, server_id, **arguments))

    async def rollback(self, installation_id: str, **arguments: Any) -> DeployOut:
        return _queued(await self._berth.rollback(self._user, installation_id, **arguments))

    async def cancel(self, deployment_id: str, *, wait: int = 0) -> DeploymentOut:
        return deployment_out(await self._berth.cancel(self._user, deployment_id, wait=wait))

    async def stop(self, installation_id: str) -> InstallationOut:
        return await self._installation(await self._berth.stop(self._user, installation_id))

    async def start(self, installation_id: str) -> InstallationOut:
        return await self._installation(await self._berth.start(self._user, installation_id))

    async def restart(self, installation_id: str) -> InstallationOut:
        return await self._installation(await self._berth.restart(self._user, installation_id))

    async def remove_installation(self, installation_id: str) -> None:
        await self._berth.remove_installation(self._user, installation_id)

    async def whoami(self) -> CurrentTokenOut:
        return current_token_out(await self._berth.whoami(self._user))

    async def _installation(self, installation: Installation) -> InstallationOut:
        """An installation as the API shows it: its URL needs its server."""
        server = await self._berth.server(self._user, installation.server_id)
        return installation_out(server, installation)


def _queued(result: DeployResult) -> DeployOut:
    """A deploy's or a rollback's answer: the deployment and its installation, with the
    server the deploy flow read (the facade's ``DeployResult`` always carries it)."""
    assert result.server is not None
    return deploy_out(result.server, result)


class RateLimitedCalls:
    """A request past the token's rate limit (``bearer_auth`` admitted it, see
    ``entrypoints.mcp``), answered in MCP's terms: a tool call is a tool error saying
    when to retry; any other request but the handshake a JSON-RPC error saying so."""

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        request = ctx.request
        limited = None if request is None else request.scope.get(RATE_LIMITED)
        if limited is None or ctx.method in ("initialize", "server/discover", "ping"):
            return await call_next(ctx)
        text = failure_text(limited)
        if ctx.method == "tools/call":
            return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
        raise MCPError(code=INVALID_REQUEST, message=text, data={"retryAfter": limited.retry_after})


def _user_of(ctx: Context) -> Actor:
    """The actor ``bearer_auth`` put in the HTTP request's scope."""
    request = ctx.request_context.request  # the starlette Request of this call
    if request is None:  # only over HTTP, behind bearer_auth, are tools called here
        raise Unauthorized()
    actor: Actor = request.scope["user"]
    return actor


def session_manager(bus: MessageBus, *, max_body_bytes: int) -> StreamableHTTPSessionManager:
    """The MCP server's session manager, which answers ``/mcp`` requests (``run()`` it for
    as long as it serves: ``entrypoints.mcp.mount.MountedMcp`` does, from the first request)."""
    berth = Berth(bus)
    server: MCPServer = build_server(lambda ctx: FacadeBackend(berth, _user_of(ctx)))
    server.middleware.append(RateLimitedCalls())
    # Stateless: any replica answers any request (a tool's progress goes on its own
    # request's answer, so no session is needed for it). Answers are Server-Sent Events
    # once a tool reports progress (plain JSON otherwise, on the 2026-07-28 protocol).
    # No DNS-rebinding Host check: every request needs the Bearer token, which a
    # rebinding page cannot have, and berth is served under its own public names.
    server.streamable_http_app(
        stateless_http=True,
        json_response=False,
        max_request_body_size=max_body_bytes,  # the API's limit (413 past it)
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    return server.session_manager


def _cursor(value: str | None, field: str = "cursor") -> UUID | None:
    """A page's cursor as given: a UUID, else ``InvalidInput`` naming ``field``."""
    if value is None:
        return None
    try:
        return UUID(value)
    except ValueError:
        raise InvalidInput(
            [FieldError(field, "Expected a UUID (a page's cursor).", value)]
        ) from None
