"""The steps of a deployment run, each with its deadline and its event.

``Steps`` holds what a run needs (the job queue, the gateway, the clock, the step
deadlines, the route table) and the primitives every deploy strategy is built from:
run a step under its deadline, record an event, start a container and wait until it
answers, and clean up a container whose run failed or was stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable
from typing import TypeVar

import msgspec
import structlog

from ..errors import RuntimeFailure, ServerUnreachable
from ..models import Job
from ..ports import Clock, ContainerRuntime, JobQueue, ServerConnection, ServerGateway
from .container_spec import LOG_LINES
from .routes import RouteTable

__all__ = ["ABANDON_SECONDS", "StepFailed", "StepTimeouts", "Steps"]

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


class StepFailed(Exception):
    """A step did not get done: which, why, and the container's last lines if any."""

    def __init__(self, step: str, reason: str, logs: list[str] | None = None) -> None:
        super().__init__(reason)
        self.step = step
        self.reason = reason
        self.logs = logs or []


class Steps:
    """A run's dependencies and its step primitives (``RunDeployment`` is one)."""

    def __init__(
        self,
        jobs: JobQueue,
        gateway: ServerGateway,
        clock: Clock,
        *,
        worker_id: str,
        timeouts: StepTimeouts | None = None,
        routes: RouteTable | None = None,
        drain_seconds: float = 1.0,
    ) -> None:
        self.jobs = jobs
        self.gateway = gateway
        self.clock = clock
        self.worker = worker_id
        self.timeouts = timeouts or StepTimeouts()
        self.routes = routes
        self.drain = drain_seconds

    async def start_healthy(self, job: Job, conn: ServerConnection, container_id: str) -> int:
        """Start the container and wait until it answers; the host port it answers on."""
        await self.enter(job, "start", f"Starting container {container_id[:12]}.")
        await self.step(job, "start", self.timeouts.start, conn.docker.start(container_id))
        await self.enter(job, "health", f"Waiting for port {job.deployment.spec.port} to answer.")
        return await self.health(job, conn, container_id)

    async def checked(
        self, job: Job, docker: ContainerRuntime, container_id: str, work: Awaitable[T]
    ) -> T:
        """``work`` on the new container; if it fails the container goes (``_discard``), if
        the run is stopped it is abandoned (``_abandon``)."""
        try:
            return await work
        except StepFailed as failed:
            await self.discard(job, docker, container_id, failed)
            raise
        except asyncio.CancelledError:
            await self.abandon(docker, container_id)
            raise

    async def discard(
        self, job: Job, docker: ContainerRuntime, container_id: str, failed: StepFailed
    ) -> None:
        """Keep the failed container's last lines for the events, then remove it."""
        with contextlib.suppress(Exception):
            failed.logs = failed.logs or await docker.logs(container_id, LOG_LINES)
        with contextlib.suppress(Exception):
            await docker.remove(container_id)
            await self.event(job, failed.step, "Removed the container that failed.")

    async def abandon(self, docker: ContainerRuntime, container_id: str) -> None:
        """The run was stopped before its container was checked (lease lost, shutdown):
        remove that container, within a bounded time, as a failure would. Nothing is
        written: the deployment is no longer this run's to write."""
        with contextlib.suppress(Exception):
            async with asyncio.timeout(ABANDON_SECONDS):  # shutdown waits for this
                await docker.remove(container_id)

    async def clear_name(self, job: Job, docker: ContainerRuntime) -> None:
        """Remove the installation's previous containers; refuse to touch anyone else's."""
        previous = await docker.find({"berth.installation": str(job.installation_id)})
        for container in previous:
            await docker.remove(container.id)
            await self.event(job, "create", f"Removed previous container {container.id[:12]}.")
        clash = await docker.inspect(job.container_name)
        if clash is not None:
            if clash.labels.get("berth.installation") != str(job.installation_id):
                raise StepFailed(
                    "create",
                    f"A container named {job.container_name} exists and is not this "
                    "installation's; remove or rename it.",
                )
            await docker.remove(clash.id)

    async def health(self, job: Job, conn: ServerConnection, container_id: str) -> int:
        docker = conn.docker
        deadline = time.monotonic() + self.timeouts.health
        delay = 0.05
        while True:
            state = await self.step(job, "health", 15.0, docker.inspect(container_id))
            if state is None:
                raise StepFailed("health", "The container disappeared.")
            # With restart policy unless-stopped, a container that exits is "restarting"
            # (then briefly running again), never "exited": each is an exit before answering.
            if not state.running and state.status in ("exited", "dead", "restarting"):
                raise StepFailed(
                    "health",
                    f"The container exited with code {state.exit_code} before answering.",
                    await docker.logs(container_id, LOG_LINES),
                )
            port = state.host_port
            if port is not None:
                answer = await self.step(job, "health", 5.0, conn.probe(port))
                if answer:
                    await self.event(job, "health", f"Port {port} answered: {answer}.")
                    return port
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise StepFailed(
                    "health",
                    f"Port {job.deployment.spec.port} did not answer within "
                    f"{self.timeouts.health:g} s.",
                    await docker.logs(container_id, LOG_LINES),
                )
            await asyncio.sleep(min(delay, remaining))  # the last probe comes at the deadline
            delay = min(delay * 1.5, 0.5)

    async def step(self, job: Job, step: str, seconds: float, work: Awaitable[T]) -> T:
        """Run ``work`` under the step's deadline, turning failures into ``StepFailed``.

        The server unreachable drops its pooled connection (the next one reconnects)."""
        try:
            async with asyncio.timeout(seconds):
                return await work
        except TimeoutError:
            raise StepFailed(step, f"Did not finish within {seconds:g} s.") from None
        except RuntimeFailure as exc:
            raise StepFailed(step, exc.detail) from None
        except ServerUnreachable as exc:
            await self.gateway.disconnect(job.server.id)
            raise StepFailed(step, f"The server is unreachable: {exc.detail}") from None

    async def proxy_step(self, job: Job, step: str, seconds: float, work: Awaitable[T]) -> T:
        """Like ``_step`` for a call to the proxy: a proxy that cannot be reached (Caddy
        stopped) says nothing about the connection, which Docker still uses."""
        try:
            async with asyncio.timeout(seconds):
                return await work
        except TimeoutError:
            raise StepFailed(step, f"The proxy did not answer within {seconds:g} s.") from None
        except (RuntimeFailure, ServerUnreachable) as exc:
            raise StepFailed(step, exc.detail) from None

    async def enter(self, job: Job, step: str, message: str) -> None:
        await self.jobs.step(job.deployment.id, self.worker, step, message, self.clock.now())

    async def event(self, job: Job, step: str, message: str) -> None:
        await self.jobs.event(job.deployment.id, self.worker, step, message, self.clock.now())
