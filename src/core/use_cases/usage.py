"""What apps use on their server: an installation's CPU and memory, a server's Docker disk.

Read live from the server's Docker Engine (its stats and ``/system/df`` endpoints) over
the server's transport, nothing run in a shell and nothing installed there. An
unreachable server is a ``ServerUnreachable`` (the API's 503), as for logs.
"""

from __future__ import annotations

from uuid import UUID

import msgspec

from ..models import ContainerStats, DiskUsage, User
from ..ports import ServerGateway, UnitOfWorkFactory
from .owned import owned_installation, owned_server

__all__ = ["InstallationStats", "InstallationUsage", "ServerDisk", "ServerDiskUsage"]


class InstallationUsage(msgspec.Struct, frozen=True, kw_only=True):
    """An installation's container (its running one, else its newest) and one sample of
    what it uses; both ``None`` when it has no container (never deployed, or removed)."""

    installation_id: UUID
    container_id: str | None
    stats: ContainerStats | None


class ServerDisk(msgspec.Struct, frozen=True, kw_only=True):
    """What Docker keeps on a server's disk."""

    server_id: UUID
    usage: DiskUsage


class InstallationStats:
    """CPU and memory of the installation's container, sampled now."""

    def __init__(self, uow: UnitOfWorkFactory, gateway: ServerGateway) -> None:
        self._uow = uow
        self._gateway = gateway

    async def __call__(self, owner: User, installation_id: UUID) -> InstallationUsage:
        async with self._uow() as uow:
            server, installation = await owned_installation(uow, owner, installation_id)
        none = InstallationUsage(installation_id=installation.id, container_id=None, stats=None)
        if installation.removed_at is not None:  # its containers are gone: nothing to ask
            return none
        conn = await self._gateway.connect(server)
        containers = await conn.docker.find({"berth.installation": str(installation.id)})
        if not containers:
            return none
        current = next((c for c in containers if c.running), containers[0])
        stats = await conn.docker.stats(current.id)
        return InstallationUsage(
            installation_id=installation.id,
            container_id=current.id if stats is not None else None,
            stats=stats,
        )


class ServerDiskUsage:
    """Docker's disk usage on the server, asked now."""

    def __init__(self, uow: UnitOfWorkFactory, gateway: ServerGateway) -> None:
        self._uow = uow
        self._gateway = gateway

    async def __call__(self, owner: User, server_id: UUID) -> ServerDisk:
        async with self._uow() as uow:
            server = await owned_server(uow, owner, server_id)
        conn = await self._gateway.connect(server)
        return ServerDisk(server_id=server.id, usage=await conn.docker.disk_usage())
