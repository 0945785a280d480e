"""What apps use on their server: an installation's CPU and memory, a server's Docker disk.

Read live from the server's Docker Engine (its stats and ``/system/df`` endpoints) over
the server's transport, nothing run in a shell and nothing installed there. An
unreachable server is a ``ServerUnreachable`` (the API's 503), as for logs.
"""

from __future__ import annotations

from .. import commands as c
from ..access import Actor
from ..results import InstallationUsage, ServerDisk
from .owned import UsesServers, owned_server

__all__ = ["InstallationStats", "ServerDiskUsage"]


class InstallationStats(UsesServers):
    """CPU and memory of the installation's container, sampled now."""

    async def __call__(self, owner: Actor, cmd: c.GetInstallationStats) -> InstallationUsage:
        installation, found = await self._current_container(owner, cmd.installation_id)
        if found is None:
            return InstallationUsage(installation_id=installation.id, container_id=None, stats=None)
        conn, current = found
        stats = await conn.docker.stats(current.id)
        return InstallationUsage(
            installation_id=installation.id,
            container_id=current.id if stats is not None else None,
            stats=stats,
        )


class ServerDiskUsage(UsesServers):
    """Docker's disk usage on the server, asked now."""

    async def __call__(self, owner: Actor, cmd: c.GetServerDiskUsage) -> ServerDisk:
        async with self._uow() as uow:
            server = await owned_server(uow, owner, cmd.server_id)
        conn = await self._connect(server)
        return ServerDisk(server_id=server.id, usage=await conn.docker.disk_usage())
