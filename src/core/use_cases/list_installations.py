"""List the installations on one of the caller's servers."""

from __future__ import annotations

from uuid import UUID

from ..models import User
from ..results import InstallationList
from .owned import UsesStore, owned_server

__all__ = ["ListInstallations"]


class ListInstallations(UsesStore):
    """The installations on one of the caller's servers, with the server."""

    async def __call__(
        self, owner: User, server_id: UUID, *, include_removed: bool = False
    ) -> InstallationList:
        async with self._uow() as uow:
            server = await owned_server(uow, owner, server_id)
            installations = await uow.installations.list(
                owner.id, server_id, include_removed=include_removed
            )
        return InstallationList(server=server, installations=installations)
