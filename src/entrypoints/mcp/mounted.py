"""The MCP server inside the HTTP app, at ``/mcp`` (streamable HTTP, stateless).

The router and the lifespan that serve it are ``entrypoints.mcp.MountedMcp``'s, which
imports this module (and the SDK) on the first ``/mcp`` request only.
Each tool call then goes through the library facade's methods (the core's parsers,
then ``bus.handle(command, user)``) as the token's user, so another user's ids are
"not found"; results are rendered by the API's own ``schemas``.
"""

from __future__ import annotations

from typing import Any

import msgspec
from berth.core import commands as c
from berth.core.bus import MessageBus
from berth.core.commands import parse_id
from berth.core.errors import CoreError, Unauthorized
from berth.core.models import User
from berth.core.results import DeployResult
from berth.facade import Berth
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from ..http.schemas import (
    ContainerListOut,
    DeploymentListOut,
    DeployOut,
    InstallationListOut,
    LogsOut,
    ServerListOut,
    container_out,
    deployment_out,
    installation_out,
    installation_stats_out,
    installations_out,
    server_disk_out,
    server_out,
)
from .tools import ToolFailure, build_server, core_error_text

__all__ = ["BusBackend", "session_manager"]


def _json(value: msgspec.Struct) -> Any:
    return msgspec.to_builtins(value)


class BusBackend:
    """The tools' backend in the HTTP app: the facade's methods, as ``user``."""

    def __init__(self, bus: MessageBus, user: User) -> None:
        self._berth = Berth(bus)
        self._bus = bus
        self._user = user

    async def _run(self, call: Any) -> Any:
        try:
            return await call
        except CoreError as exc:
            raise ToolFailure(core_error_text(exc)) from exc

    async def list_servers(self) -> Any:
        servers = await self._run(self._berth.servers(self._user))
        return _json(ServerListOut(servers=[server_out(s) for s in servers]))

    async def list_installations(self, server_id: str, include_removed: bool) -> Any:
        listing = await self._run(
            self._berth.installations(self._user, server_id, include_removed=include_removed)
        )
        return _json(
            InstallationListOut(
                server_id=listing.server.id,
                installations=installations_out(listing.server, listing.installations),
            )
        )

    async def list_containers(self, server_id: str) -> Any:
        result = await self._run(self._berth.containers(self._user, server_id))
        return _json(
            ContainerListOut(
                server_id=result.server_id,
                observed_at=result.observed_at,
                server_status=result.server_status,
                containers=[container_out(x) for x in result.containers],
            )
        )

    async def _queued(self, result: DeployResult) -> Any:
        server = result.server
        if server is None:
            server = await self._run(self._berth.server(self._user, result.deployment.server_id))
        return _json(
            DeployOut(
                deployment=deployment_out(result.deployment),
                installation=installation_out(server, result.installation),
            )
        )

    async def deploy(self, fields: dict[str, Any], wait: int, idempotency_key: str | None) -> Any:
        result = await self._run(
            self._berth.deploy(self._user, **fields, wait=wait, idempotency_key=idempotency_key)
        )
        return await self._queued(result)

    async def get_deployment(self, deployment_id: str) -> Any:
        return _json(
            deployment_out(await self._run(self._berth.deployment(self._user, deployment_id)))
        )

    async def list_revisions(self, installation_id: str, limit: int) -> Any:
        page = await self._run(self._berth.revisions(self._user, installation_id, limit=limit))
        return _json(
            DeploymentListOut(
                installation_id=page.installation_id,
                deployments=[deployment_out(d) for d in page.deployments],
                next_before=page.next_before,
            )
        )

    async def logs(self, installation_id: str, tail: int) -> Any:
        logs = await self._run(self._berth.logs(self._user, installation_id, tail=tail))
        return _json(
            LogsOut(
                installation_id=logs.installation_id,
                container_id=logs.container_id,
                lines=logs.lines,
            )
        )

    async def get_stats(self, installation_id: str) -> Any:
        usage = await self._run(self._berth.stats(self._user, installation_id))
        return _json(installation_stats_out(usage))

    async def get_disk_usage(self, server_id: str) -> Any:
        disk = await self._run(self._berth.disk_usage(self._user, server_id))
        return _json(server_disk_out(disk))

    async def rollback(
        self, installation_id: str, to: str | None, wait: int, key: str | None
    ) -> Any:
        result = await self._run(
            self._berth.rollback(
                self._user, installation_id, deployment_id=to, wait=wait, idempotency_key=key
            )
        )
        return await self._queued(result)

    async def cancel(self, deployment_id: str) -> Any:
        return _json(deployment_out(await self._run(self._berth.cancel(self._user, deployment_id))))

    async def change(self, installation_id: str, action: str) -> Any:
        async def act() -> Any:
            key = parse_id(installation_id, "Installation")
            command = c.ChangeInstallation(installation_id=key, action=c.InstallationAction(action))
            return await self._bus.handle(command, self._user)

        server, found = await self._run(act())
        return _json(installation_out(server, found))

    async def remove_installation(self, installation_id: str) -> None:
        await self._run(self._berth.remove_installation(self._user, installation_id))


def _user_of(ctx: Context) -> User:
    """The user ``bearer_auth`` put in the HTTP request's scope."""
    request = ctx.request_context.request  # the starlette Request of this call
    if request is None:  # only over HTTP, behind bearer_auth, are tools called here
        raise Unauthorized()
    user: User = request.scope["user"]
    return user


def session_manager(bus: MessageBus, *, max_body_bytes: int) -> StreamableHTTPSessionManager:
    """The MCP server's session manager, which answers ``/mcp`` requests (``run()`` it for
    as long as it serves: ``entrypoints.mcp.MountedMcp`` does, from the first request)."""
    server: MCPServer = build_server(lambda ctx: BusBackend(bus, _user_of(ctx)))
    # Stateless: any replica answers any request. No DNS-rebinding Host check: every
    # request needs the Bearer token, which a rebinding page cannot have, and berth
    # is served under its own public names.
    server.streamable_http_app(
        stateless_http=True,
        json_response=True,
        max_request_body_size=max_body_bytes,  # the API's limit (413 past it)
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    return server.session_manager
