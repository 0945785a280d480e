"""List the installations on one of the caller's servers."""

from __future__ import annotations

from .. import commands as c
from ..access import Actor
from ..paging import matches_name
from ..results import InstallationList
from .owned import ShowsServers, owned_server

__all__ = ["ListInstallations"]


class ListInstallations(ShowsServers):
    """The installations on one of the caller's servers, with the server (as shown: its
    status may read ``checking``); only those in ``cmd.status`` and whose name holds
    ``cmd.name`` (any case), when given."""

    async def __call__(self, owner: Actor, cmd: c.ListInstallations) -> InstallationList:
        async with self._uow() as uow:
            server = await owned_server(uow, owner, cmd.server_id)
            installations = await uow.installations.list(
                owner.scope, server.id, include_removed=cmd.include_removed
            )
        if cmd.status is not None or cmd.name is not None:
            installations = [
                i
                for i in installations
                if (cmd.status is None or i.status is cmd.status) and matches_name(i.name, cmd.name)
            ]
        return InstallationList(server=self._shown(server), installations=installations)
