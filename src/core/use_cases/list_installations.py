"""List the installations on one of the caller's servers."""

from __future__ import annotations

from .. import commands as c
from ..access import Actor
from ..results import InstallationList
from .owned import UsesStore, owned_server

__all__ = ["ListInstallations"]


class ListInstallations(UsesStore):
    """The installations on one of the caller's servers, with the server."""

    async def __call__(self, owner: Actor, cmd: c.ListInstallations) -> InstallationList:
        async with self._uow() as uow:
            server = await owned_server(uow, owner, cmd.server_id)
            installations = await uow.installations.list(
                owner.scope, server.id, include_removed=cmd.include_removed
            )
        return InstallationList(server=server, installations=installations)
