"""Deploy: record the desired installation and queue a durable deployment.

Executing it on the server is the worker's job; this use case promises only
that the deployment is durably queued, or that nothing was written at all.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from uuid import UUID, uuid4

import msgspec
import structlog

from ..commands import DeployCommand
from ..errors import Conflict, FieldError, InvalidInput, NotFound, WriteConflict
from ..models import (
    Deployment,
    DeploymentEvent,
    DeploymentRef,
    DeploymentSpec,
    DeploymentState,
    Installation,
    InstallationStatus,
    Server,
    User,
)
from ..ports import Clock, SecretBox, UnitOfWork, UnitOfWorkFactory

__all__ = ["Deploy", "DeployResult"]

log = structlog.get_logger()


class DeployResult(msgspec.Struct, frozen=True, kw_only=True):
    deployment: Deployment
    installation: Installation
    replayed: bool = False  # True when an Idempotency-Key returned an earlier deployment
    server: Server | None = None  # the server, as the deploy flow read it last


class Deploy:
    """Deploy or redeploy ``cmd.name`` on one of the caller's servers."""

    def __init__(self, uow: UnitOfWorkFactory, clock: Clock, box: SecretBox) -> None:
        self._uow = uow
        self._clock = clock
        self._box = box

    async def __call__(self, owner: User, cmd: DeployCommand) -> DeployResult:
        """Queue the deployment. ``cmd.keep_env`` names env keys (present in ``cmd.env``)
        whose value is the installation's current one rather than the one given: a redeploy
        from the dashboard, which never shows env values, keeps them without seeing them."""
        fingerprint = self._fingerprint(cmd)
        keep_env = cmd.keep_env
        try:
            return await self._deploy(owner, cmd, keep_env, fingerprint)
        except WriteConflict as exc:
            # Something committed between this deploy's reads and its writes (a writer
            # that does not lock the server: the worker's claim, a removal). Decide once
            # more on what is committed now; a second clash is a real conflict.
            log.info("deploy_retried", server_id=str(cmd.server_id), reason=exc.detail)
            return await self._deploy(owner, cmd, keep_env, fingerprint)

    async def _deploy(
        self, owner: User, cmd: DeployCommand, keep_env: Collection[str], fingerprint: str
    ) -> DeployResult:
        """One attempt, in one transaction that holds the server's lock from its first read:
        concurrent deploys to a server (retries with one Idempotency-Key, the same name
        twice) take turns, each deciding on what the previous one committed."""
        async with self._uow() as uow:
            server = await uow.servers.lock(owner.id, cmd.server_id)
            if server is None:
                raise NotFound("Server not found.")
            if cmd.idempotency_key is not None:
                earlier = await self._replay(uow, owner, cmd.idempotency_key, fingerprint)
                if earlier is not None:
                    return earlier
            now = self._clock.now()
            spec = DeploymentSpec(
                image=cmd.image,
                port=cmd.port,
                domain=cmd.domain,
                env_keys=tuple(sorted(cmd.env)),
                volumes=cmd.volumes,
            )
            current = await uow.installations.get_by_container_name(
                owner.id, server.id, cmd.container_name
            )
            if keep_env:
                cmd = await self._keep(uow, owner, cmd, current, keep_env)
            deployment_id = uuid4()
            if current is not None:
                await self._supersede(uow, owner, current, deployment_id, now)
            await self._check_conflicts(uow, owner, cmd, current)
            installation = Installation(
                id=current.id if current else uuid4(),
                server_id=server.id,
                name=cmd.name,
                container_name=cmd.container_name,
                spec=spec,
                # With a domain, the port of the container serving now stays recorded (so
                # its route stays) until the new one is healthy and the route switches.
                host_port=(current.host_port if current else None) if cmd.domain else cmd.port,
                status=InstallationStatus.DEPLOYING,
                created_at=current.created_at if current else now,
                updated_at=now,
            )
            await uow.installations.save(owner.id, installation, cmd.env)
            deployment = Deployment(
                id=deployment_id,
                installation_id=installation.id,
                server_id=server.id,
                spec=spec,
                state=DeploymentState.QUEUED,
                step=None,
                error=None,
                created_at=now,
                events=(DeploymentEvent(at=now, step="queued", message="Deployment queued."),),
            )
            await uow.deployments.add(
                owner.id, deployment, cmd.env, cmd.idempotency_key, fingerprint
            )
            await uow.commit()
        log.info(
            "deploy_queued",
            deployment_id=str(deployment.id),
            installation_id=str(installation.id),
            server_id=str(server.id),
        )
        installation = msgspec.structs.replace(
            installation,
            last_deployment=DeploymentRef(
                id=deployment.id, state=deployment.state, finished_at=None
            ),
        )
        return DeployResult(deployment=deployment, installation=installation)

    async def _keep(
        self,
        uow: UnitOfWork,
        owner: User,
        cmd: DeployCommand,
        current: Installation | None,
        keep: Collection[str],
    ) -> DeployCommand:
        """``cmd`` with the kept keys' values taken from the installation's last deployment."""
        stored: dict[str, str] = {}
        if current is not None and current.last_deployment is not None:
            stored = await uow.deployments.env(owner.id, current.last_deployment.id)
        env = dict(cmd.env)
        errors = []
        for key in sorted(keep):
            if key in env and key in stored:
                env[key] = stored[key]
            elif key in env:
                errors.append(FieldError(f"env.{key}", "There is no current value to keep.", None))
        if errors:
            raise InvalidInput(errors)
        return msgspec.structs.replace(cmd, env=env)

    def _fingerprint(self, cmd: DeployCommand) -> str:
        """A keyed digest of the whole request, env values included, for Idempotency-Key."""
        body = msgspec.structs.replace(cmd, idempotency_key=None, keep_env=frozenset(), wait=0.0)
        return self._box.digest(msgspec.json.encode(body, order="sorted"))

    async def _replay(
        self, uow: UnitOfWork, owner: User, key: str, fingerprint: str
    ) -> DeployResult | None:
        found = await uow.deployments.by_idempotency_key(owner.id, key)
        if found is None:
            return None
        deployment, earlier_fingerprint = found
        if earlier_fingerprint != fingerprint:
            raise Conflict(
                "This Idempotency-Key was already used with a different request.",
                kind="idempotency-key-reused",
            )
        installation = await uow.installations.get(owner.id, deployment.installation_id)
        if installation is None:  # removed since: the key no longer names anything
            raise Conflict("This Idempotency-Key names a deployment whose installation is gone.")
        return DeployResult(deployment=deployment, installation=installation, replayed=True)

    async def _supersede(
        self,
        uow: UnitOfWork,
        owner: User,
        current: Installation,
        new_id: UUID,
        now: datetime,
    ) -> None:
        """A running deployment blocks a redeploy (409); a queued one is canceled."""
        for active in await uow.deployments.active(owner.id, current.id):
            if active.state is DeploymentState.RUNNING:
                raise Conflict(
                    f"Deployment {active.id} of this installation is running; "
                    "wait for it to finish.",
                    kind="deployment-running",
                )
            await uow.deployments.finish(
                owner.id,
                active.id,
                DeploymentState.CANCELED,
                now,
                f"Superseded by deployment {new_id}.",
                DeploymentEvent(at=now, step="canceled", message=f"Superseded by {new_id}."),
                queued_only=True,  # claimed meanwhile: WriteConflict, and the retry sees it
            )

    async def _check_conflicts(
        self, uow: UnitOfWork, owner: User, cmd: DeployCommand, current: Installation | None
    ) -> None:
        """Domain and host port are each held by one installation per server."""
        for other in await uow.installations.list(owner.id, cmd.server_id):
            if current is not None and other.id == current.id:
                continue
            if cmd.domain is not None and other.spec.domain == cmd.domain:
                raise Conflict(
                    f"Domain {cmd.domain} is already used by installation {other.name!r} "
                    "on this server: choose another domain, or remove that installation.",
                    kind="domain-in-use",
                    field="domain",
                )
            if cmd.domain is None and other.host_port == cmd.port:
                raise Conflict(
                    f"Host port {cmd.port} is already used by installation {other.name!r} "
                    "on this server: choose another port, or give a domain.",
                    kind="port-in-use",
                    field="port",
                )
