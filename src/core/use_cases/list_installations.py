"""List the installations on one of the caller's servers."""

from __future__ import annotations

from uuid import UUID

import msgspec

from ..models import Installation, Server, User
from .owned import UsesStore, owned_server

__all__ = ["InstallationList", "ListInstallations"]


class InstallationList(msgspec.Struct, frozen=True, kw_only=True):
    server: Server
    installations: list[Installation]


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
