"""Read one deployment of the caller, with its events."""

from __future__ import annotations

from uuid import UUID

from ..errors import NotFound
from ..models import Deployment, Installation, Server, User
from ..ports import UnitOfWorkFactory

__all__ = ["GetDeployment", "GetInstallation"]


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
