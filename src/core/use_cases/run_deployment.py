"""Run one claimed deployment on its server: pull → create → start → health, and for an
app with a domain → route → retire.

Success means the container answers on its port, not that Docker accepted it.
Every step has its own deadline and logs an event; a failure names the step
and the reason (quoting Docker), carries the container's last log lines, and
removes the container it created. The worker holds a lease while this runs
(``leases.py``); if the lease is lost, the run stops and writes nothing more. What
the container is made of is ``container_spec.py``'s.

An app with a domain is replaced without downtime: the new container starts beside
the old one (under a temporary name, on an ephemeral ``127.0.0.1`` port), the proxy
is switched to it only once it answers, and the old one is drained, then removed.
Until the switch, a failure removes the new container alone: the old one keeps
serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

import msgspec
import structlog

from ..errors import RuntimeFailure, ServerUnreachable
from ..models import ContainerState, DeploymentState, Job, ProxyRoute
from ..ports import Clock, ContainerRuntime, JobQueue, ServerConnection, ServerGateway
from .container_spec import LOG_LINES, container_spec, scrub
from .leases import LeaseKeeper
from .routes import RouteTable

__all__ = ["RunDeployment", "StepTimeouts"]

log = structlog.get_logger()

T = TypeVar("T")

ABANDON_SECONDS = 10.0


class StepTimeouts(msgspec.Struct, frozen=True, kw_only=True):
    """Seconds each step may take."""

    pull: float = 120.0
    create: float = 30.0
    start: float = 30.0
    health: float = 60.0
    route: float = 30.0
    retire: float = 30.0


class _StepFailed(Exception):
    def __init__(self, step: str, reason: str, logs: list[str] | None = None) -> None:
        super().__init__(reason)
        self.step = step
        self.reason = reason
        self.logs = logs or []


class _LeaseLost(Exception):
    pass


class RunDeployment:
    """Execute a claimed ``Job`` to a final state.

    ``routes`` is the process's shared :class:`RouteTable`; without one, apps with a
    domain fail at step ``route`` (and their old container keeps serving).
    ``drain_seconds`` is how long a replaced container of a domain app keeps running
    after the switch, so requests already sent to it can finish.
    """

    def __init__(
        self,
        jobs: JobQueue,
        gateway: ServerGateway,
        clock: Clock,
        *,
        worker_id: str,
        timeouts: StepTimeouts | None = None,
        lease: timedelta = timedelta(seconds=15),
        on_finished: Callable[[Job, DeploymentState], Awaitable[None]] | None = None,
        routes: RouteTable | None = None,
        drain_seconds: float = 1.0,
    ) -> None:
        self._jobs = jobs
        self._gateway = gateway
        self._clock = clock
        self._worker = worker_id
        self._timeouts = timeouts or StepTimeouts()
        self._leases = LeaseKeeper(jobs, clock, worker_id, lease)
        self._on_finished = on_finished
        self._routes = routes
        self._drain = drain_seconds

    async def __call__(self, job: Job) -> DeploymentState:
        run = asyncio.create_task(self._run(job))
        lost = asyncio.Event()
        renewer = asyncio.create_task(self._leases.keep(job, run, lost))
        state = DeploymentState.FAILED
        try:
            try:
                state, error, message = await run
            finally:
                renewer.cancel()  # before finish: a finished deployment has no lease to renew
                with contextlib.suppress(asyncio.CancelledError):
                    await renewer
            await self._finish(job, state, error, message)
        except _LeaseLost:  # finish() found the lease gone: another worker or the reaper owns it
            log.warning("deployment_lease_lost", deployment_id=str(job.deployment.id))
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not lost.is_set() or (current is not None and current.cancelling()):
                await self._interrupted(job)
                raise  # cancelled from outside (shutdown): not ours to swallow
            log.warning("deployment_lease_lost", deployment_id=str(job.deployment.id))
        if self._on_finished is not None:
            await self._on_finished(job, state)
        return state

    async def _run(self, job: Job) -> tuple[DeploymentState, str | None, str]:
        try:
            conn = await self._step(job, "connect", 15.0, self._gateway.connect(job.server))
            container_id, port = await self._deploy(job, conn)
        except _StepFailed as failed:
            for line in scrub(failed.logs, job.env):
                await self._event(job, failed.step, f"log: {line}")
            error = f"{failed.step}: {failed.reason}"
            return DeploymentState.FAILED, error, f"Failed at {failed.step}: {failed.reason}"
        domain = job.deployment.spec.domain
        routed = f"; {domain} is routed to it" if domain else ""
        return (
            DeploymentState.SUCCEEDED,
            None,
            f"Container {job.container_name} ({container_id[:12]}) is answering on port "
            f"{port}{routed}.",
        )

    async def _deploy(self, job: Job, conn: ServerConnection) -> tuple[str, int]:
        spec = job.deployment.spec
        docker = conn.docker
        await self._enter(job, "pull", f"Looking for image {spec.image}.")
        if await self._step(job, "pull", 15.0, docker.image_exists(spec.image)):
            await self._event(job, "pull", "Image is present; no pull needed.")
        else:
            await self._event(job, "pull", f"Image {spec.image} is not on the server; pulling.")
            await self._step(job, "pull", self._timeouts.pull, docker.pull(spec.image))
        if spec.domain is not None:
            return await self._deploy_beside(job, conn, spec.domain)
        await self._enter(job, "create", f"Creating container {job.container_name}.")
        await self._step(job, "create", self._timeouts.create, self._clear_name(job, docker))
        container_id = await self._step(
            job,
            "create",
            self._timeouts.create,
            docker.create(container_spec(job, job.container_name)),
        )
        port = await self._checked(
            job, docker, container_id, self._start_healthy(job, conn, container_id)
        )
        await self._jobs.set_host_port(job.deployment.id, port)
        return container_id, port

    async def _deploy_beside(
        self, job: Job, conn: ServerConnection, domain: str
    ) -> tuple[str, int]:
        """The zero-downtime path of an app with a domain: create and check the new
        container beside the old one, switch the route, then retire the old one."""
        docker = conn.docker
        temporary = f"{job.container_name}-{job.deployment.id.hex[:8]}"
        await self._enter(job, "create", f"Creating container {temporary} beside the current one.")
        previous = await self._step(
            job, "create", self._timeouts.create, self._previous(job, docker)
        )
        container_id = await self._step(
            job,
            "create",
            self._timeouts.create,
            docker.create(container_spec(job, temporary)),
        )

        async def start_and_switch() -> int:
            port = await self._start_healthy(job, conn, container_id)
            await self._switch(job, conn, domain, port, previous)
            return port

        port = await self._checked(job, docker, container_id, start_and_switch())
        await self._retire(job, conn, container_id, previous)
        return container_id, port

    async def _start_healthy(self, job: Job, conn: ServerConnection, container_id: str) -> int:
        """Start the container and wait until it answers; the host port it answers on."""
        await self._enter(job, "start", f"Starting container {container_id[:12]}.")
        await self._step(job, "start", self._timeouts.start, conn.docker.start(container_id))
        await self._enter(job, "health", f"Waiting for port {job.deployment.spec.port} to answer.")
        return await self._health(job, conn, container_id)

    async def _checked(
        self, job: Job, docker: ContainerRuntime, container_id: str, work: Awaitable[T]
    ) -> T:
        """``work`` on the new container; if it fails the container goes (``_discard``), if
        the run is stopped it is abandoned (``_abandon``)."""
        try:
            return await work
        except _StepFailed as failed:
            await self._discard(job, docker, container_id, failed)
            raise
        except asyncio.CancelledError:
            await self._abandon(docker, container_id)
            raise

    async def _discard(
        self, job: Job, docker: ContainerRuntime, container_id: str, failed: _StepFailed
    ) -> None:
        """Keep the failed container's last lines for the events, then remove it."""
        with contextlib.suppress(Exception):
            failed.logs = failed.logs or await docker.logs(container_id, LOG_LINES)
        with contextlib.suppress(Exception):
            await docker.remove(container_id)
            await self._event(job, failed.step, "Removed the container that failed.")

    async def _abandon(self, docker: ContainerRuntime, container_id: str) -> None:
        """The run was stopped before its container was checked (lease lost, shutdown):
        remove that container, within a bounded time, as a failure would. Nothing is
        written: the deployment is no longer this run's to write."""
        with contextlib.suppress(Exception):
            async with asyncio.timeout(ABANDON_SECONDS):  # shutdown waits for this
                await docker.remove(container_id)

    async def _previous(self, job: Job, docker: ContainerRuntime) -> list[ContainerState]:
        """The installation's current containers (left running); refuse if a container
        that is not the installation's holds its name."""
        previous = await docker.find({"berth.installation": str(job.installation_id)})
        clash = await docker.inspect(job.container_name)
        if clash is not None and clash.labels.get("berth.installation") != str(job.installation_id):
            raise _StepFailed(
                "create",
                f"A container named {job.container_name} exists and is not this "
                "installation's; remove or rename it.",
            )
        return previous

    async def _switch(
        self,
        job: Job,
        conn: ServerConnection,
        domain: str,
        port: int,
        previous: list[ContainerState],
    ) -> None:
        """Step ``route``: record the new port, then load the server's routes with it.

        On failure the old port is recorded again and the proxy is put back (best
        effort: the monitor converges it otherwise)."""
        await self._enter(job, "route", f"Routing {domain} to port {port}.")
        if self._routes is None:
            raise _StepFailed("route", "This worker has no route table; it cannot route domains.")
        routes = self._routes
        old_port = next((c.host_port for c in previous if c.running), None)
        await self._jobs.set_host_port(job.deployment.id, port)
        try:
            await self._proxy_step(
                job,
                "route",
                self._timeouts.route,
                routes.apply(
                    job.server.id,
                    conn.proxy,
                    expect=ProxyRoute(domain=domain, upstream_port=port),
                ),
            )
        except (_StepFailed, asyncio.CancelledError):  # stopped mid-switch too: put it back
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self._timeouts.route):
                    await self._jobs.set_host_port(job.deployment.id, old_port)
                    await routes.apply(job.server.id, conn.proxy)
            raise
        await self._event(job, "route", f"The proxy sends {domain} to port {port}.")

    async def _retire(
        self,
        job: Job,
        conn: ServerConnection,
        container_id: str,
        previous: list[ContainerState],
    ) -> None:
        """Step ``retire``: drain and remove the old containers, then give the new one the
        installation's name. The new container already serves, so a failure here is
        an event, not a failed deployment (the next deployment removes what is left)."""
        docker = conn.docker
        old = [c for c in previous if c.id != container_id]
        await self._enter(
            job,
            "retire",
            f"Draining {len(old)} previous container(s) for {self._drain:g} s."
            if old
            else "No previous container to retire.",
        )
        try:
            if old:
                await asyncio.sleep(self._drain)
                if self._routes is not None and await self._proxy_step(
                    job,
                    "retire",
                    self._timeouts.retire,
                    self._routes.converge(job.server.id, conn.proxy),
                ):
                    await self._event(
                        job, "retire", "The proxy's configuration had changed; loaded it again."
                    )
                for container in old:
                    await self._step(
                        job, "retire", self._timeouts.retire, docker.remove(container.id)
                    )
                    await self._event(
                        job, "retire", f"Removed previous container {container.id[:12]}."
                    )
            await self._step(
                job,
                "retire",
                self._timeouts.retire,
                docker.rename(container_id, job.container_name),
            )
        except _StepFailed as failed:
            await self._event(job, "retire", f"Not finished: {failed.reason}")

    async def _clear_name(self, job: Job, docker: ContainerRuntime) -> None:
        """Remove the installation's previous containers; refuse to touch anyone else's."""
        previous = await docker.find({"berth.installation": str(job.installation_id)})
        for container in previous:
            await docker.remove(container.id)
            await self._event(job, "create", f"Removed previous container {container.id[:12]}.")
        clash = await docker.inspect(job.container_name)
        if clash is not None:
            if clash.labels.get("berth.installation") != str(job.installation_id):
                raise _StepFailed(
                    "create",
                    f"A container named {job.container_name} exists and is not this "
                    "installation's; remove or rename it.",
                )
            await docker.remove(clash.id)

    async def _health(self, job: Job, conn: ServerConnection, container_id: str) -> int:
        docker = conn.docker
        deadline = time.monotonic() + self._timeouts.health
        delay = 0.05
        while True:
            state = await self._step(job, "health", 15.0, docker.inspect(container_id))
            if state is None:
                raise _StepFailed("health", "The container disappeared.")
            # With restart policy unless-stopped, a container that exits is "restarting"
            # (then briefly running again), never "exited": each is an exit before answering.
            if not state.running and state.status in ("exited", "dead", "restarting"):
                raise _StepFailed(
                    "health",
                    f"The container exited with code {state.exit_code} before answering.",
                    await docker.logs(container_id, LOG_LINES),
                )
            port = state.host_port
            if port is not None:
                answer = await self._step(job, "health", 5.0, conn.probe(port))
                if answer:
                    await self._event(job, "health", f"Port {port} answered: {answer}.")
                    return port
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _StepFailed(
                    "health",
                    f"Port {job.deployment.spec.port} did not answer within "
                    f"{self._timeouts.health:g} s.",
                    await docker.logs(container_id, LOG_LINES),
                )
            await asyncio.sleep(min(delay, remaining))  # the last probe comes at the deadline
            delay = min(delay * 1.5, 0.5)

    async def _step(self, job: Job, step: str, seconds: float, work: Awaitable[T]) -> T:
        """Run ``work`` under the step's deadline, turning failures into ``_StepFailed``.

        The server unreachable drops its pooled connection (the next one reconnects)."""
        try:
            async with asyncio.timeout(seconds):
                return await work
        except TimeoutError:
            raise _StepFailed(step, f"Did not finish within {seconds:g} s.") from None
        except RuntimeFailure as exc:
            raise _StepFailed(step, exc.detail) from None
        except ServerUnreachable as exc:
            await self._gateway.disconnect(job.server.id)
            raise _StepFailed(step, f"The server is unreachable: {exc.detail}") from None

    async def _proxy_step(self, job: Job, step: str, seconds: float, work: Awaitable[T]) -> T:
        """Like ``_step`` for a call to the proxy: a proxy that cannot be reached (Caddy
        stopped) says nothing about the connection, which Docker still uses."""
        try:
            async with asyncio.timeout(seconds):
                return await work
        except TimeoutError:
            raise _StepFailed(step, f"The proxy did not answer within {seconds:g} s.") from None
        except (RuntimeFailure, ServerUnreachable) as exc:
            raise _StepFailed(step, exc.detail) from None

    async def _enter(self, job: Job, step: str, message: str) -> None:
        await self._jobs.step(job.deployment.id, self._worker, step, message, self._clock.now())

    async def _event(self, job: Job, step: str, message: str) -> None:
        await self._jobs.event(job.deployment.id, self._worker, step, message, self._clock.now())

    async def _interrupted(self, job: Job) -> None:
        """berth is stopping mid-run (the run stopped, its container removed): say so and
        end the deployment ``failed`` now rather than ``running`` until its lease expires.
        Best effort and bounded: if the store cannot take it, the lease expiry still ends
        it (``timed_out``)."""
        reason = "interrupted: berth was stopped before the deployment finished; deploy again"
        with contextlib.suppress(Exception):
            async with asyncio.timeout(ABANDON_SECONDS):
                await self._jobs.finish(
                    job.deployment.id,
                    self._worker,
                    DeploymentState.FAILED,
                    self._clock.now(),
                    reason,
                    "berth was stopped before the deployment finished.",
                )
                log.warning("deployment_interrupted", deployment_id=str(job.deployment.id))

    async def _finish(
        self, job: Job, state: DeploymentState, error: str | None, message: str
    ) -> None:
        held = await self._jobs.finish(
            job.deployment.id, self._worker, state, self._clock.now(), error, message
        )
        if not held:
            raise _LeaseLost()
        log.info(
            "deployment_finished",
            deployment_id=str(job.deployment.id),
            state=state.value,
            error=error,
        )
