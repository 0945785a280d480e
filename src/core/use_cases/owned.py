"""What many use cases share: the store, and "the caller's X, or NotFound".

Ownership is the store's (every repository method takes the owner); these only
turn "not found among yours" into the one ``NotFound`` the API answers 404 with.
"""

from __future__ import annotations

from uuid import UUID

from ..errors import NotFound
from ..models import Installation, Server, User
from ..ports import UnitOfWork, UnitOfWorkFactory

__all__ = ["UsesStore", "owned_installation", "owned_server"]


class UsesStore:
    """A use case that needs the store and nothing else."""

    def __init__(self, uow: UnitOfWorkFactory) -> None:
        self._uow = uow


async def owned_server(uow: UnitOfWork, owner: User, server_id: UUID) -> Server:
    """The owner's server ``server_id``; ``NotFound`` if it is not theirs."""
    server = await uow.servers.get(owner.id, server_id)
    if server is None:
        raise NotFound("Server not found.")
    return server


async def owned_installation(
    uow: UnitOfWork, owner: User, installation_id: UUID
) -> tuple[Server, Installation]:
    """The owner's installation ``installation_id`` and its server; ``NotFound`` if not theirs."""
    installation = await uow.installations.get(owner.id, installation_id)
    server = await uow.servers.get(owner.id, installation.server_id) if installation else None
    if installation is None or server is None:
        raise NotFound("Installation not found.")
    return server, installation
