"""An installation's container logs, and removing an installation."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from uuid import UUID

import structlog

from .. import commands as c
from ..access import Actor
from ..commands import InstallationAction
from ..errors import Conflict, NotFound, RuntimeFailure, ServerUnreachable
from ..models import (
    ContainerState,
    DeploymentEvent,
    DeploymentState,
    Installation,
    Server,
    ServerStatus,
)
from ..ports import Clock, ContainerRuntime, UnitOfWork
from ..redaction import redact_line
from ..results import Logs, LogStream
from .deployments import cancel_queued
from .holders import HOLDER_LABEL
from .owned import UsesServers, audit, owned_installation
from .revisions import CancelDeployment
from .routes import RouteTable, routes_of
from .watch import WatchContainers

__all__ = [
    "ChangeInstallation",
    "FollowInstallationLogs",
    "InstallationLogs",
    "RemoveInstallation",
]

log = structlog.get_logger()

#: How long removing an installation waits for a running deployment of it to be canceled.
CANCEL_WAIT = 60.0
#: Beyond its grace, how long a stop on request may take before the installation stops
#: saying ``stopping`` (a stop cut short by a crash says it no longer).
STOPPING_MARGIN = 30


class _ContainerLogs(UsesServers):
    """Reads an installation's container output, whose env values it must redact."""

    async def _env_of(
        self, owner: Actor, container: ContainerState, installation: Installation
    ) -> dict[str, str]:
        """The env ``container`` was created with: its deployment's (from its label),
        else the installation's last deployment's."""
        label = container.labels.get("berth.deployment")
        candidates = [label] if label else []
        if installation.last_deployment is not None:
            candidates.append(str(installation.last_deployment.id))
        async with self._uow() as uow:
            for candidate in candidates:
                try:
                    return await uow.deployments.env(owner.scope, UUID(candidate))
                except (NotFound, ValueError):
                    continue
        return {}


class InstallationLogs(_ContainerLogs):
    """The last ``tail`` lines of the installation's container (none if it has none)."""

    async def __call__(self, owner: Actor, cmd: c.InstallationLogs) -> Logs:
        timestamps = cmd.timestamps
        installation, found = await self._current_container(owner, cmd.installation_id)
        if found is None:
            return Logs(installation_id=installation.id, container_id=None, lines=[])
        conn, current = found
        lines = await conn.docker.logs(current.id, cmd.tail, timestamps=timestamps)
        env = await self._env_of(owner, current, installation)
        return Logs(
            installation_id=installation.id,
            container_id=current.id,
            # env values are never returned, logs included
            lines=[redact_line(line, env, timestamps) for line in lines],
        )


@dataclass(eq=False)
class RemoveInstallation(UsesServers):
    """Remove the installation's containers (and port holders) from its server, then its
    record, then (if it has a domain) its route from the server's proxy.

    A running deployment of it is canceled first (its worker puts the previous revision
    back) and waited for, up to ``CANCEL_WAIT`` seconds; if it still runs, a 409. An
    unreachable server removes nothing. The
    route goes last, from the routes the store holds once the record is gone, so the
    monitor (which loads what the store holds) never puts it back. A proxy that cannot
    be reached or refuses does not undo the removal: it is logged, and the monitor
    drops the route once the proxy answers.
    """

    _clock: Clock
    _cancel: CancelDeployment
    # The process's shared route table, whose per-server lock keeps this process's
    # monitor from loading the routes of a moment ago over this change.
    _routes: RouteTable | None = None

    async def __call__(self, owner: Actor, cmd: c.RemoveInstallation) -> None:
        try:
            return await self._remove(owner, cmd.installation_id)
        except Conflict as exc:
            if exc.kind != "deployment-running":
                raise
        async with self._uow() as uow:
            active = await uow.deployments.active(owner.scope, cmd.installation_id)
        for running in active:
            if running.state is DeploymentState.RUNNING:
                stop = c.CancelDeployment(deployment_id=running.id, wait=CANCEL_WAIT)
                await self._cancel(owner, stop)
        return await self._remove(owner, cmd.installation_id)

    async def _remove(self, owner: Actor, installation_id: UUID) -> None:
        async with self._uow() as uow:
            server, installation = await owned_installation(uow, owner, installation_id)
            if installation.removed_at is not None:
                raise NotFound("Installation not found.")
            active = await uow.deployments.active(owner.scope, installation.id)
            ran = await _ever_ran(uow, owner, installation.id)
        for deployment in active:
            if deployment.state is DeploymentState.RUNNING:
                raise Conflict(
                    f"Deployment {deployment.id} of this installation is running.",
                    kind="deployment-running",
                )
        conn = None
        if server.status is not ServerStatus.PENDING:
            # Its containers go first (an unreachable server removes nothing). A server
            # that never enrolled has had nothing deployed on it: nothing to reach; nor
            # has an unreachable one for an app none of whose deployments ever started
            # (queued while the server was offline).
            try:
                conn = await self._gateway.connect(server)
            except ServerUnreachable:
                if ran:
                    raise
            else:
                labels = {"berth.installation": str(installation.id)}
                for container in await conn.docker.find(labels):
                    await conn.docker.remove(container.id)
                # Then its port holders, which its containers joined.
                for holder in await conn.docker.find({HOLDER_LABEL: str(installation.id)}):
                    await conn.docker.remove(holder.id)
        async with self._uow() as uow:
            now = self._clock.now()
            for deployment in active:  # queued: it will never run now
                error = "Canceled: the installation was removed."
                await cancel_queued(
                    uow, owner, deployment, now, error, "The installation was removed."
                )
            removed = await uow.installations.remove(owner.scope, installation.id, now)
            remaining = await uow.installations.list(owner.scope, server.id)
            name = installation.name
            audit(uow, owner, "installation.remove", "installation", installation.id, name)
            await uow.commit()
        if not removed:
            raise RuntimeFailure("The installation changed while it was being removed.")
        log.info("installation_removed", installation_id=str(installation.id))
        if conn is not None and installation.spec.domain is not None:
            try:
                if self._routes is not None:
                    await self._routes.load(server.id, conn.proxy, routes_of(remaining))
                else:
                    await conn.proxy.apply(routes_of(remaining))
            except (ServerUnreachable, RuntimeFailure) as exc:
                log.warning(
                    "proxy_route_not_removed",
                    installation_id=str(installation.id),
                    server_id=str(server.id),
                    detail=exc.detail,
                )


async def _ever_ran(uow: UnitOfWork, owner: Actor, installation_id: UUID) -> bool:
    """Whether any deployment of the installation ever started on its server."""
    before: UUID | None = None
    while True:
        page = await uow.deployments.of_installation(owner.scope, installation_id, 100, before)
        if any(d.started_at is not None or d.attempts for d in page):
            return True
        if len(page) < 100:
            return False
        before = page[-1].id


@dataclass(eq=False)
class ChangeInstallation(UsesServers):
    """Stop, start or restart the container of the caller's installation's current
    revision; the change is an event in that revision's log, and a stopped app is
    ``stopped`` (not ``failed``) until it is started or deployed again. With ``watch``,
    what its container does afterwards is recorded at once (``berth.core.watch``)."""

    _clock: Clock
    _watch: WatchContainers | None = None

    async def __call__(
        self, owner: Actor, cmd: c.ChangeInstallation
    ) -> tuple[Server, Installation]:
        action = cmd.action
        async with self._uow() as uow:
            server, installation = await owned_installation(uow, owner, cmd.installation_id)
            active = await uow.deployments.active(owner.scope, installation.id)
        if installation.removed_at is not None:
            raise Conflict("This installation was removed.", kind="installation-removed")
        if active:
            raise Conflict(
                f"Deployment {active[0].id} of this installation is {active[0].state.value}; "
                "wait for it to finish (or cancel it) first.",
                kind="deployment-running",
            )
        current = installation.current_deployment_id
        if current is None:
            raise Conflict(
                "This installation has no succeeded revision to run; deploy it first.",
                kind="revision-unavailable",
            )
        conn = await self._connect(server)
        containers = await conn.docker.find({"berth.installation": str(installation.id)})
        container = next(
            (c for c in containers if c.name.lstrip("/") == installation.container_name),
            next(iter(containers), None),
        )
        if container is None:
            raise Conflict(
                "No container of this installation is on the server; deploy it again.",
                kind="revision-unavailable",
            )
        starts = action is not InstallationAction.STOP
        if starts and container.joins and await conn.docker.inspect(container.joins) is None:
            raise Conflict(
                "The port holder this installation's container joins is gone from the server "
                "(removed outside berth); deploy the app again.",
                kind="revision-unavailable",
            )
        if action is not InstallationAction.START:
            await self._stop(owner, installation, conn.docker, container.id)
        if action is not InstallationAction.STOP:
            if container.joins is not None:  # its port holder runs (a no-op when it does)
                await conn.docker.start(container.joins)
            await conn.docker.start(container.id)
        now = self._clock.now()
        stopped = now if action is InstallationAction.STOP else None
        message = {
            InstallationAction.STOP: "Stopped on request.",
            InstallationAction.START: "Started on request.",
            InstallationAction.RESTART: "Restarted on request.",
        }[action]
        async with self._uow() as uow:
            if action is not InstallationAction.START:
                await uow.installations.set_stopping(owner.scope, installation.id, None)
            await uow.installations.set_stopped(owner.scope, installation.id, stopped)
            await uow.deployments.add_event(
                owner.scope, current, DeploymentEvent(at=now, step=action.value, message=message)
            )
            name = installation.name
            audit(uow, owner, f"installation.{action}", "installation", installation.id, name)
            await uow.commit()
        if self._watch is not None:  # what it does now, not what it did before (told if so)
            await self._watch.refresh(server.id, conn.docker, {installation.id})
        async with self._uow() as uow:
            return await owned_installation(uow, owner, installation.id)

    async def _stop(
        self,
        owner: Actor,
        installation: Installation,
        docker: ContainerRuntime,
        container_id: str,
    ) -> None:
        """Stop the container with the app's grace (``stopGraceSeconds``); meanwhile the
        installation is ``stopping`` (at most the grace and ``STOPPING_MARGIN`` long)."""
        grace = installation.spec.stop_grace_seconds
        until = self._clock.now() + timedelta(seconds=grace + STOPPING_MARGIN)
        async with self._uow() as uow:
            await uow.installations.set_stopping(owner.scope, installation.id, until)
            await uow.commit()
        try:
            await docker.stop(container_id, grace)
        except BaseException:
            async with self._uow() as uow:
                await uow.installations.set_stopping(owner.scope, installation.id, None)
                await uow.commit()
            raise
        # On success ``stopping`` ends in the caller's transaction that records the stop
        # (or the start): never a moment in between where the watch would see an app that
        # exited by itself.


class FollowInstallationLogs(_ContainerLogs):
    """The installation's container (its running one, else its newest) followed from its
    last ``tail`` lines; nothing to follow if it has none, or was removed. The same
    container and env as ``InstallationLogs`` shows."""

    async def __call__(self, owner: Actor, cmd: c.FollowInstallationLogs) -> LogStream:
        installation, found = await self._current_container(owner, cmd.installation_id)
        if found is None:
            return LogStream(installation.id, None, None, {})
        conn, current = found
        env = await self._env_of(owner, current, installation)
        lines = conn.docker.follow_logs(current.id, cmd.tail, timestamps=cmd.timestamps)
        return LogStream(installation.id, current.id, lines, env, cmd.timestamps)
