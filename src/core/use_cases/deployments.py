"""Read the caller's deployments (one, or a server's newest) and installations."""

from __future__ import annotations

from .. import commands as c
from ..errors import NotFound
from ..models import Deployment, Installation, Server, User
from .owned import UsesStore, owned_installation, owned_server

__all__ = ["GetDeployment", "GetInstallation", "ListDeployments"]


class GetDeployment(UsesStore):
    """One deployment of the caller's, with its events."""

    async def __call__(self, owner: User, cmd: c.GetDeployment) -> Deployment:
        async with self._uow() as uow:
            deployment = await uow.deployments.get(owner.id, cmd.deployment_id)
        if deployment is None:
            raise NotFound("Deployment not found.")
        return deployment


class GetInstallation(UsesStore):
    """Read one installation of the caller, with the server it lives on."""

    async def __call__(self, owner: User, cmd: c.GetInstallation) -> tuple[Server, Installation]:
        async with self._uow() as uow:
            return await owned_installation(uow, owner, cmd.installation_id)


class ListDeployments(UsesStore):
    """The newest deployments on one of the caller's servers, newest first, with events."""

    async def __call__(self, owner: User, cmd: c.ListDeployments) -> list[Deployment]:
        async with self._uow() as uow:
            await owned_server(uow, owner, cmd.server_id)
            return await uow.deployments.recent(owner.id, cmd.server_id, cmd.limit)
