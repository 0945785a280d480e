"""List the installations on one of the caller's servers."""

from __future__ import annotations

from uuid import UUID

import msgspec

from ..errors import NotFound
from ..models import Installation, Server, User
from ..ports import UnitOfWorkFactory

__all__ = ["InstallationList", "ListInstallations"]


class InstallationList(msgspec.Struct, frozen=True, kw_only=True):
    server: Server
    installations: list[Installation]


class ListInstallations:
    def __init__(self, uow: UnitOfWorkFactory) -> None:
        self._uow = uow

    async def __call__(self, owner: User, server_id: UUID) -> InstallationList:
        async with self._uow() as uow:
            server = await uow.servers.get(owner.id, server_id)
            if server is None:
                raise NotFound("Server not found.")
            installations = await uow.installations.list(owner.id, server_id)
        return InstallationList(server=server, installations=installations)
