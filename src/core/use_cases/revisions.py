"""An installation's revisions: listing them, rolling back to one, canceling a deployment.

Every deployment is a revision: the full spec it deployed, its sealed env, and the
image id it ran. A rollback is a new deployment of an earlier succeeded revision —
same spec, same env, same image — queued like any deploy.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

import msgspec
import structlog

from ..commands import DeployCommand
from ..errors import Conflict, NotFound, WriteConflict
from ..models import Deployment, DeploymentEvent, DeploymentState, Installation, User
from ..ports import UnitOfWork
from ..results import DeploymentPage, DeployResult
from .deploy import Deploy
from .owned import UsesStore, UsesStoreAndClock, owned_installation

__all__ = ["MAX_PAGE", "CancelDeployment", "ListRevisions", "Rollback"]

log = structlog.get_logger()

MAX_PAGE = 100


class ListRevisions(UsesStore):
    """An installation's deployments, newest first, a page at a time (also once removed)."""

    async def __call__(
        self, owner: User, installation_id: UUID, limit: int, before: UUID | None
    ) -> DeploymentPage:
        limit = max(1, min(limit, MAX_PAGE))
        async with self._uow() as uow:
            _, installation = await owned_installation(uow, owner, installation_id)
            found = await uow.deployments.of_installation(
                owner.id, installation.id, limit + 1, before
            )
        page = found[:limit]
        return DeploymentPage(
            installation_id=installation.id,
            deployments=page,
            next_before=page[-1].id if len(found) > limit else None,
        )


@dataclass(eq=False)
class Rollback(UsesStore):
    """Queue a deployment of an earlier succeeded revision of the caller's installation."""

    _deploy: Deploy

    async def __call__(
        self,
        owner: User,
        installation_id: UUID,
        deployment_id: UUID | None,
        *,
        idempotency_key: str | None = None,
    ) -> DeployResult:
        async with self._uow() as uow:
            _, installation = await owned_installation(uow, owner, installation_id)
            if installation.removed_at is not None:
                raise Conflict(
                    "This installation was removed; deploy it again by name instead.",
                    kind="installation-removed",
                )
            target = await self._target(uow, owner, installation, deployment_id)
            env = await uow.deployments.env(owner.id, target.id)
        spec = msgspec.structs.asdict(target.spec)
        del spec["env_keys"]  # the command carries the values themselves
        cmd = DeployCommand(
            server_id=installation.server_id,
            name=installation.name,
            container_name=installation.container_name,
            env=env,
            idempotency_key=idempotency_key,
            **spec,
        )
        result = await self._deploy(owner, cmd, revision=target)
        log.info(
            "rollback_queued",
            installation_id=str(installation.id),
            revision=str(target.id),
            deployment_id=str(result.deployment.id),
        )
        return result

    async def _target(
        self,
        uow: UnitOfWork,
        owner: User,
        installation: Installation,
        deployment_id: UUID | None,
    ) -> Deployment:
        """The revision asked for (a succeeded deployment of this installation), or the
        newest succeeded one before the current revision."""
        if deployment_id is not None:
            target = await uow.deployments.get(owner.id, deployment_id)
            if target is None or target.installation_id != installation.id:
                raise NotFound("Deployment not found.", field="deployment_id")
            if target.state is not DeploymentState.SUCCEEDED:
                raise Conflict(
                    f"Deployment {target.id} ended {target.state.value}; only a succeeded "
                    "deployment is a revision to roll back to.",
                    kind="revision-unavailable",
                    field="deployment_id",
                )
            return target
        current = installation.current_deployment_id
        seen_current = current is None
        before: UUID | None = None
        while True:  # newest first, a page at a time: the history may be long
            page = await uow.deployments.of_installation(owner.id, installation.id, 50, before)
            for deployment in page:
                if deployment.id == current:
                    seen_current = True
                elif seen_current and deployment.state is DeploymentState.SUCCEEDED:
                    return deployment
            if len(page) < 50:
                break
            before = page[-1].id
        raise Conflict(
            "There is no earlier succeeded revision of this installation to roll back to.",
            kind="revision-unavailable",
        )


class CancelDeployment(UsesStoreAndClock):
    """Cancel one of the caller's deployments: a queued one ends ``canceled`` at once; a
    running one is asked to stop (its worker stops it where it is, puts the previous
    revision back, and ends it ``canceled``). A final one is a 409."""

    async def __call__(self, owner: User, deployment_id: UUID) -> Deployment:
        for _ in range(2):  # a claim between the read and the write: decide once more
            try:
                return await self._cancel(owner, deployment_id)
            except WriteConflict:
                continue
        return await self._cancel(owner, deployment_id)

    async def _cancel(self, owner: User, deployment_id: UUID) -> Deployment:
        async with self._uow() as uow:
            deployment = await uow.deployments.get(owner.id, deployment_id)
            if deployment is None:
                raise NotFound("Deployment not found.")
            now = self._clock.now()
            if deployment.state is DeploymentState.QUEUED:
                await uow.deployments.finish(
                    owner.id,
                    deployment.id,
                    DeploymentState.CANCELED,
                    now,
                    "Canceled on request before it started.",
                    DeploymentEvent(at=now, step="canceled", message="Canceled on request."),
                    queued_only=True,
                )
            elif deployment.state is DeploymentState.RUNNING:
                if not await uow.deployments.request_cancel(owner.id, deployment.id, now):
                    raise WriteConflict("The deployment is no longer running.")
            else:
                raise Conflict(
                    f"Deployment {deployment.id} already ended {deployment.state.value}; "
                    "there is nothing to cancel.",
                    kind="deployment-finished",
                )
            await uow.commit()
            found = await uow.deployments.get(owner.id, deployment.id)
        log.info("deployment_cancel_requested", deployment_id=str(deployment_id))
        return found or deployment
