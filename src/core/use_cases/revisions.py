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

from .. import commands as c
from ..access import Actor
from ..commands import DeployCommand
from ..errors import Conflict, NotFound, WriteConflict
from ..models import Deployment, DeploymentSpec, DeploymentState, Installation
from ..paging import check_cursor
from ..ports import UnitOfWork
from ..results import DeploymentPage, DeployResult
from .deploy import DeployLimit, Queued, QueueDeployment
from .deployments import cancel_queued
from .owned import UsesStore, UsesStoreAndClock, audit, owned_installation
from .wait import WaitForDeployment

__all__ = ["CancelDeployment", "ListRevisions", "Rollback", "not_removed", "redeploy"]

log = structlog.get_logger()


def not_removed(installation: Installation) -> None:
    """A 409 ``installation-removed`` for a removed installation: nothing deploys it
    again (a rollback, a push) but a deploy by name."""
    if installation.removed_at is not None:
        raise Conflict(
            "This installation was removed; deploy it again by name instead.",
            kind="installation-removed",
        )


def redeploy(
    installation: Installation,
    spec: DeploymentSpec,
    env: dict[str, str],
    *,
    idempotency_key: str | None = None,
) -> DeployCommand:
    """The deploy of ``installation`` again as ``spec`` (a revision's, or its current
    one), with the values of its env keys, ``env``."""
    fields = msgspec.structs.asdict(spec)
    del fields["env_keys"]  # the command carries the values themselves
    return DeployCommand(
        server_id=installation.server_id,
        name=installation.name,
        container_name=installation.container_name,
        env=env,
        idempotency_key=idempotency_key,
        **fields,
    )


class ListRevisions(UsesStore):
    """An installation's deployments, newest first, a page at a time (also once removed)."""

    async def __call__(self, owner: Actor, cmd: c.ListRevisions) -> DeploymentPage:
        limit = cmd.limit
        async with self._uow() as uow:
            _, installation = await owned_installation(uow, owner, cmd.installation_id)
            if cmd.before is not None:  # a stale or foreign cursor is said, not an empty page
                anchor = await uow.deployments.get(owner.scope, cmd.before)
                known = anchor is not None and anchor.installation_id == installation.id
                check_cursor(known, cmd.before, loc="before", what="deployment")
            found = await uow.deployments.of_installation(
                owner.scope, installation.id, limit + 1, cmd.before
            )
        page = found[:limit]
        return DeploymentPage(
            installation_id=installation.id,
            deployments=page,
            next_before=page[-1].id if len(found) > limit else None,
        )


@dataclass(eq=False)
class Rollback(UsesStore):
    """Queue a deployment of an earlier succeeded revision of the caller's installation:
    the caller's installation (``NotFound`` otherwise) before the deploy limit, then the
    revision, then answer as a deploy does (``Queued``)."""

    _queue: QueueDeployment
    _limit: DeployLimit
    _answer: Queued

    async def __call__(self, owner: Actor, cmd: c.Rollback) -> DeployResult:
        async with self._uow() as uow:
            await owned_installation(uow, owner, cmd.installation_id)  # 404 before 429
        await self._limit.check(owner)
        deploy, target = await self._revision(owner, cmd)
        result = await self._queue(owner, deploy, revision=target)
        await self._limit.queued(owner, result)
        log.info(
            "rollback_queued",
            installation_id=str(cmd.installation_id),
            revision=str(target.id),
            deployment_id=str(result.deployment.id),
        )
        return await self._answer(owner, result, cmd.wait)

    async def _revision(self, owner: Actor, cmd: c.Rollback) -> tuple[DeployCommand, Deployment]:
        """The deploy command that puts the revision asked for back, and that revision."""
        async with self._uow() as uow:
            _, installation = await owned_installation(uow, owner, cmd.installation_id)
            not_removed(installation)
            target = await self._target(uow, owner, installation, cmd.deployment_id)
            env = await uow.deployments.env(owner.scope, target.id)
        deploy = redeploy(installation, target.spec, env, idempotency_key=cmd.idempotency_key)
        return deploy, target

    async def _target(
        self,
        uow: UnitOfWork,
        owner: Actor,
        installation: Installation,
        deployment_id: UUID | None,
    ) -> Deployment:
        """The revision asked for (a succeeded deployment of this installation), or the
        newest succeeded one before the current revision."""
        if deployment_id is not None:
            target = await uow.deployments.get(owner.scope, deployment_id)
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
            page = await uow.deployments.of_installation(owner.scope, installation.id, 50, before)
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


@dataclass(eq=False)
class CancelDeployment(UsesStoreAndClock):
    """Cancel one of the caller's deployments: a queued one ends ``canceled`` at once; a
    running one is asked to stop (its worker stops it where it is, puts the previous
    revision back, and ends it ``canceled``; the worker, in whatever process, sees the
    request in the store within ``leases.CANCEL_CHECK_SECONDS``). A final one is a 409.
    With ``cmd.wait``, the deployment once it ended, or as it stands after that long."""

    _wait: WaitForDeployment

    async def __call__(self, owner: Actor, cmd: c.CancelDeployment) -> Deployment:
        deployment = await self._cancel_once_more(owner, cmd.deployment_id)
        if cmd.wait > 0 and not deployment.state.is_final:
            until = c.WaitForDeployment(deployment_id=deployment.id, seconds=cmd.wait)
            deployment = await self._wait(owner, until)
        return deployment

    async def _cancel_once_more(self, owner: Actor, deployment_id: UUID) -> Deployment:
        for _ in range(2):  # a claim between the read and the write: decide once more
            try:
                return await self._cancel(owner, deployment_id)
            except WriteConflict:
                continue
        return await self._cancel(owner, deployment_id)

    async def _cancel(self, owner: Actor, deployment_id: UUID) -> Deployment:
        async with self._uow() as uow:
            deployment = await uow.deployments.get(owner.scope, deployment_id)
            if deployment is None:
                raise NotFound("Deployment not found.")
            now = self._clock.now()
            if deployment.state is DeploymentState.QUEUED:
                error = "Canceled on request before it started."
                await cancel_queued(uow, owner, deployment, now, error, "Canceled on request.")
            elif deployment.state is DeploymentState.RUNNING:
                if not await uow.deployments.request_cancel(owner.scope, deployment.id, now):
                    raise WriteConflict("The deployment is no longer running.")
            else:
                raise Conflict(
                    f"Deployment {deployment.id} already ended {deployment.state.value}; "
                    "there is nothing to cancel.",
                    kind="deployment-finished",
                )
            audit(uow, owner, "deployment.cancel", "deployment", deployment.id)
            await uow.commit()
            found = await uow.deployments.get(owner.scope, deployment.id)
        log.info("deployment_cancel_requested", deployment_id=str(deployment_id))
        return found or deployment
