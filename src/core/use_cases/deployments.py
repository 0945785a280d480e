"""Read the caller's deployments (one, or a server's newest) and installations; cancel a
queued one."""

from __future__ import annotations

from datetime import datetime

from .. import commands as c
from ..access import Actor
from ..errors import NotFound
from ..events import DeploymentFinished
from ..models import Deployment, DeploymentEvent, DeploymentState, Installation, Server
from ..ports import UnitOfWork
from .owned import UsesStore, owned_installation, owned_server

__all__ = ["GetDeployment", "GetInstallation", "ListDeployments", "cancel_queued"]


class GetDeployment(UsesStore):
    """One deployment of the caller's, with its events."""

    async def __call__(self, owner: Actor, cmd: c.GetDeployment) -> Deployment:
        async with self._uow() as uow:
            deployment = await uow.deployments.get(owner.scope, cmd.deployment_id)
        if deployment is None:
            raise NotFound("Deployment not found.")
        return deployment


class GetInstallation(UsesStore):
    """Read one installation of the caller, with the server it lives on."""

    async def __call__(self, owner: Actor, cmd: c.GetInstallation) -> tuple[Server, Installation]:
        async with self._uow() as uow:
            return await owned_installation(uow, owner, cmd.installation_id)


class ListDeployments(UsesStore):
    """The newest deployments on one of the caller's servers, newest first, with events."""

    async def __call__(self, owner: Actor, cmd: c.ListDeployments) -> list[Deployment]:
        async with self._uow() as uow:
            await owned_server(uow, owner, cmd.server_id)
            return await uow.deployments.recent(owner.scope, cmd.server_id, cmd.limit)


async def cancel_queued(
    uow: UnitOfWork, owner: Actor, deployment: Deployment, at: datetime, error: str, message: str
) -> None:
    """End the owner's queued ``deployment`` ``canceled`` in ``uow`` (``error``, and a
    closing event saying ``message``), and record that it finished. A deployment claimed
    (or removed) meanwhile is a ``WriteConflict``: the caller decides again."""
    state = DeploymentState.CANCELED
    event = DeploymentEvent(at=at, step="canceled", message=message)
    await uow.deployments.finish(
        owner.scope, deployment.id, state, at, error, event, queued_only=True
    )
    uow.record(DeploymentFinished.of(deployment, owner.team_id, state, at, error))
