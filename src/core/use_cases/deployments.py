"""Read the caller's deployments (one, or a server's newest) and installations."""

from __future__ import annotations

from uuid import UUID

from ..errors import NotFound
from ..models import Deployment, Installation, Server, User
from .owned import UsesStore, owned_installation, owned_server

__all__ = ["GetDeployment", "GetInstallation", "ListDeployments"]


class GetDeployment(UsesStore):
    """One deployment of the caller's, with its events."""

    async def __call__(self, owner: User, deployment_id: UUID) -> Deployment:
        async with self._uow() as uow:
            deployment = await uow.deployments.get(owner.id, deployment_id)
        if deployment is None:
            raise NotFound("Deployment not found.")
        return deployment


class GetInstallation(UsesStore):
    """Read one installation of the caller, with the server it lives on."""

    async def __call__(self, owner: User, installation_id: UUID) -> tuple[Server, Installation]:
        async with self._uow() as uow:
            return await owned_installation(uow, owner, installation_id)


class ListDeployments(UsesStore):
    """The newest deployments on one of the caller's servers, newest first, with events."""

    MAX_LIMIT = 100

    async def __call__(self, owner: User, server_id: UUID, limit: int = 20) -> list[Deployment]:
        async with self._uow() as uow:
            await owned_server(uow, owner, server_id)
            return await uow.deployments.recent(
                owner.id, server_id, max(1, min(limit, self.MAX_LIMIT))
            )
