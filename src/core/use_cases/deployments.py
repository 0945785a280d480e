"""Read the caller's deployments (one, or a server's newest), with their events."""

from __future__ import annotations

from uuid import UUID

from ..errors import NotFound
from ..models import Deployment, Installation, Server, User
from ..ports import UnitOfWorkFactory

__all__ = ["GetDeployment", "GetInstallation", "ListDeployments"]


class GetDeployment:
    def __init__(self, uow: UnitOfWorkFactory) -> None:
        self._uow = uow

    async def __call__(self, owner: User, deployment_id: UUID) -> Deployment:
        async with self._uow() as uow:
            deployment = await uow.deployments.get(owner.id, deployment_id)
        if deployment is None:
            raise NotFound("Deployment not found.")
        return deployment


class GetInstallation:
    """Read one installation of the caller, with the server it lives on."""

    def __init__(self, uow: UnitOfWorkFactory) -> None:
        self._uow = uow

    async def __call__(self, owner: User, installation_id: UUID) -> tuple[Server, Installation]:
        async with self._uow() as uow:
            installation = await uow.installations.get(owner.id, installation_id)
            server = (
                await uow.servers.get(owner.id, installation.server_id) if installation else None
            )
        if installation is None or server is None:
            raise NotFound("Installation not found.")
        return server, installation


class ListDeployments:
    """The newest deployments on one of the caller's servers, newest first, with events."""

    MAX_LIMIT = 100

    def __init__(self, uow: UnitOfWorkFactory) -> None:
        self._uow = uow

    async def __call__(self, owner: User, server_id: UUID, limit: int = 20) -> list[Deployment]:
        async with self._uow() as uow:
            if await uow.servers.get(owner.id, server_id) is None:
                raise NotFound("Server not found.")
            return await uow.deployments.recent(
                owner.id, server_id, max(1, min(limit, self.MAX_LIMIT))
            )
