"""An installation's container logs, and removing an installation."""

from __future__ import annotations

from collections.abc import AsyncIterator
from uuid import UUID

import msgspec
import structlog

from ..commands import InstallationAction
from ..errors import Conflict, NotFound, RuntimeFailure, ServerUnreachable
from ..models import DeploymentEvent, DeploymentState, Installation, Server, ServerStatus, User
from ..ports import Clock, ServerGateway, UnitOfWork, UnitOfWorkFactory
from ..redaction import redact_env
from .owned import owned_installation
from .routes import RouteTable, routes_of

__all__ = [
    "MAX_TAIL",
    "ChangeInstallation",
    "FollowInstallationLogs",
    "InstallationLogs",
    "LogStream",
    "Logs",
    "RemoveInstallation",
]

log = structlog.get_logger()

MAX_TAIL = 5000


class Logs(msgspec.Struct, frozen=True, kw_only=True):
    """The last lines of an installation's container, env values redacted."""

    installation_id: UUID
    container_id: str | None
    lines: list[str]


class InstallationLogs:
    """The last ``tail`` lines of the installation's container (none if it has none)."""

    def __init__(self, uow: UnitOfWorkFactory, gateway: ServerGateway) -> None:
        self._uow = uow
        self._gateway = gateway

    async def __call__(self, owner: User, installation_id: UUID, tail: int) -> Logs:
        async with self._uow() as uow:
            server, installation = await owned_installation(uow, owner, installation_id)
        if installation.removed_at is not None:  # its containers are gone: nothing to ask
            return Logs(installation_id=installation.id, container_id=None, lines=[])
        conn = await self._gateway.connect(server)
        containers = await conn.docker.find({"berth.installation": str(installation.id)})
        if not containers:
            return Logs(installation_id=installation.id, container_id=None, lines=[])
        current = next((c for c in containers if c.running), containers[0])
        lines = await conn.docker.logs(current.id, max(1, min(tail, MAX_TAIL)))
        env = await self._env_of(owner, current.labels.get("berth.deployment"), installation)
        return Logs(
            installation_id=installation.id,
            container_id=current.id,
            lines=redact_env(lines, env),  # env values are never returned, logs included
        )

    async def _env_of(
        self, owner: User, label: str | None, installation: Installation
    ) -> dict[str, str]:
        """The env the container was created with: its deployment's (from its label),
        else the installation's last deployment's."""
        candidates = [label] if label else []
        if installation.last_deployment is not None:
            candidates.append(str(installation.last_deployment.id))
        async with self._uow() as uow:
            for candidate in candidates:
                try:
                    return await uow.deployments.env(owner.id, UUID(candidate))
                except (NotFound, ValueError):
                    continue
        return {}


class RemoveInstallation:
    """Remove the installation's containers from its server, then its record, then (if
    it has a domain) its route from the server's proxy.

    A running deployment makes it a 409; an unreachable server removes nothing. The
    route goes last, from the routes the store holds once the record is gone, so the
    monitor (which loads what the store holds) never puts it back. A proxy that cannot
    be reached or refuses does not undo the removal: it is logged, and the monitor
    drops the route once the proxy answers.
    """

    def __init__(
        self,
        uow: UnitOfWorkFactory,
        gateway: ServerGateway,
        clock: Clock,
        routes: RouteTable | None = None,
    ) -> None:
        """``routes``: the process's shared route table, whose per-server lock keeps this
        process's monitor from loading the routes of a moment ago over this change."""
        self._uow = uow
        self._gateway = gateway
        self._clock = clock
        self._routes = routes

    async def __call__(self, owner: User, installation_id: UUID) -> None:
        async with self._uow() as uow:
            server, installation = await owned_installation(uow, owner, installation_id)
            if installation.removed_at is not None:
                raise NotFound("Installation not found.")
            active = await uow.deployments.active(owner.id, installation.id)
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
        async with self._uow() as uow:
            now = self._clock.now()
            for deployment in active:  # queued: it will never run now
                await uow.deployments.finish(
                    owner.id,
                    deployment.id,
                    DeploymentState.CANCELED,
                    now,
                    "Canceled: the installation was removed.",
                    DeploymentEvent(
                        at=now, step="canceled", message="The installation was removed."
                    ),
                    queued_only=True,
                )
            removed = await uow.installations.remove(owner.id, installation.id, now)
            remaining = await uow.installations.list(owner.id, server.id)
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


async def _ever_ran(uow: UnitOfWork, owner: User, installation_id: UUID) -> bool:
    """Whether any deployment of the installation ever started on its server."""
    before: UUID | None = None
    while True:
        page = await uow.deployments.of_installation(owner.id, installation_id, 100, before)
        if any(d.started_at is not None or d.attempts for d in page):
            return True
        if len(page) < 100:
            return False
        before = page[-1].id


class ChangeInstallation:
    """Stop, start or restart the container of the caller's installation's current
    revision; the change is an event in that revision's log, and a stopped app is
    ``stopped`` (not ``failed``) until it is started or deployed again."""

    def __init__(self, uow: UnitOfWorkFactory, gateway: ServerGateway, clock: Clock) -> None:
        self._uow = uow
        self._gateway = gateway
        self._clock = clock

    async def __call__(
        self, owner: User, installation_id: UUID, action: InstallationAction
    ) -> tuple[Server, Installation]:
        async with self._uow() as uow:
            server, installation = await owned_installation(uow, owner, installation_id)
            active = await uow.deployments.active(owner.id, installation.id)
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
        conn = await self._gateway.connect(server)
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
        if action is not InstallationAction.START:
            await conn.docker.stop(container.id)
        if action is not InstallationAction.STOP:
            await conn.docker.start(container.id)
        now = self._clock.now()
        stopped = now if action is InstallationAction.STOP else None
        message = {
            InstallationAction.STOP: "Stopped on request.",
            InstallationAction.START: "Started on request.",
            InstallationAction.RESTART: "Restarted on request.",
        }[action]
        async with self._uow() as uow:
            await uow.installations.set_stopped(owner.id, installation.id, stopped)
            await uow.deployments.add_event(
                owner.id, current, DeploymentEvent(at=now, step=action.value, message=message)
            )
            await uow.commit()
            return await owned_installation(uow, owner, installation.id)


class LogStream:
    """An installation's container output, followed: its last lines, then new ones until
    the container stops (env values redacted, line by line). Iterate it once; closing
    the iteration (the client went away) stops the reading on the server."""

    def __init__(
        self,
        installation_id: UUID,
        container_id: str | None,
        lines: AsyncIterator[str] | None,
        env: dict[str, str],
    ) -> None:
        self.installation_id = installation_id
        self.container_id = container_id
        self._lines = lines
        self._env = env

    def __aiter__(self) -> AsyncIterator[str]:
        return self._redacted()

    async def _redacted(self) -> AsyncIterator[str]:
        if self._lines is None:
            return
        lines = self._lines
        try:
            async for line in lines:
                yield redact_env([line], self._env)[0]
        except (RuntimeFailure, ServerUnreachable) as exc:  # the stream broke: its end
            log.info("log_stream_ended", installation_id=str(self.installation_id), reason=str(exc))
        finally:
            close = getattr(lines, "aclose", None)
            if close is not None:
                await close()


class FollowInstallationLogs:
    """The installation's container (its running one, else its newest) followed from its
    last ``tail`` lines; nothing to follow if it has none, or was removed. The same
    container and env as ``InstallationLogs`` shows."""

    def __init__(self, uow: UnitOfWorkFactory, gateway: ServerGateway) -> None:
        self._uow = uow
        self._gateway = gateway
        self._logs = InstallationLogs(uow, gateway)

    async def __call__(self, owner: User, installation_id: UUID, tail: int) -> LogStream:
        async with self._uow() as uow:
            server, installation = await owned_installation(uow, owner, installation_id)
        if installation.removed_at is not None:
            return LogStream(installation.id, None, None, {})
        conn = await self._gateway.connect(server)
        containers = await conn.docker.find({"berth.installation": str(installation.id)})
        if not containers:
            return LogStream(installation.id, None, None, {})
        current = next((c for c in containers if c.running), containers[0])
        label = current.labels.get("berth.deployment")
        env = await self._logs._env_of(owner, label, installation)
        lines = conn.docker.follow_logs(current.id, max(1, min(tail, MAX_TAIL)))
        return LogStream(installation.id, current.id, lines, env)
