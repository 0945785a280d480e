"""Run one claimed deployment on its server: pull → create → start → health.

Success means the container answers on its port, not that Docker accepted it.
Every step has its own deadline and logs an event; a failure names the step
and the reason (quoting Docker), carries the container's last log lines, and
removes the container it created. The worker holds a lease while this runs;
if the lease is lost, the run stops and writes nothing more.
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
from ..models import ContainerSpec, DeploymentState, Job
from ..ports import Clock, ContainerRuntime, JobQueue, ServerConnection, ServerGateway
from ..types import check_volume

__all__ = ["APPS_DIR", "RunDeployment", "StepTimeouts"]

log = structlog.get_logger()

T = TypeVar("T")

APPS_DIR = "/var/lib/berth/apps"
LOG_LINES = 20


class StepTimeouts(msgspec.Struct, frozen=True, kw_only=True):
    """Seconds each step may take."""

    pull: float = 120.0
    create: float = 30.0
    start: float = 30.0
    health: float = 60.0


class _StepFailed(Exception):
    def __init__(self, step: str, reason: str, logs: list[str] | None = None) -> None:
        super().__init__(reason)
        self.step = step
        self.reason = reason
        self.logs = logs or []


class _LeaseLost(Exception):
    pass


def labels_for(job: Job) -> dict[str, str]:
    return {
        "berth.managed": "true",
        "berth.installation": str(job.installation_id),
        "berth.deployment": str(job.deployment.id),
    }


def binds_for(job: Job) -> tuple[str, ...]:
    """Docker ``Binds``; relative host paths live under the installation's data dir."""
    binds = []
    for raw in job.deployment.spec.volumes:
        volume = check_volume(raw)
        host = volume.host_path
        if volume.is_relative:
            host = f"{APPS_DIR}/{job.container_name}" + ("" if host == "." else f"/{host}")
        binds.append(f"{host}:{volume.container_path}" + (":ro" if volume.read_only else ""))
    return tuple(binds)


def _scrub(lines: list[str], env: dict[str, str]) -> list[str]:
    """Container output may echo env values; they never reach a deployment's events."""
    # Values shorter than 6 characters would mangle ordinary words and are no secrets.
    secrets = sorted((v for v in env.values() if len(v) >= 6), key=len, reverse=True)
    cleaned = []
    for line in lines[-LOG_LINES:]:
        for value in secrets:
            line = line.replace(value, "[redacted]")
        cleaned.append(line[:500])
    return cleaned


class RunDeployment:
    """Execute a claimed ``Job`` to a final state."""

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
    ) -> None:
        self._jobs = jobs
        self._gateway = gateway
        self._clock = clock
        self._worker = worker_id
        self._timeouts = timeouts or StepTimeouts()
        self._lease = lease
        self._on_finished = on_finished

    async def __call__(self, job: Job) -> DeploymentState:
        renewer = asyncio.create_task(self._keep_lease(job))
        state = DeploymentState.FAILED
        try:
            state, error, message = await self._run(job)
            await self._finish(job, state, error, message)
        except _LeaseLost:
            log.warning("deployment_lease_lost", deployment_id=str(job.deployment.id))
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
        if self._on_finished is not None:
            await self._on_finished(job, state)
        return state

    async def _run(self, job: Job) -> tuple[DeploymentState, str | None, str]:
        try:
            conn = await self._step(job, "connect", 15.0, self._gateway.connect(job.server))
            container_id, port = await self._deploy(job, conn)
        except _StepFailed as failed:
            for line in _scrub(failed.logs, job.env):
                await self._event(job, failed.step, f"log: {line}")
            error = f"{failed.step}: {failed.reason}"
            return DeploymentState.FAILED, error, f"Failed at {failed.step}: {failed.reason}"
        return (
            DeploymentState.SUCCEEDED,
            None,
            f"Container {job.container_name} ({container_id[:12]}) is answering on port {port}.",
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
        await self._enter(job, "create", f"Creating container {job.container_name}.")
        await self._step(job, "create", self._timeouts.create, self._clear_name(job, docker))
        container_id = await self._step(
            job,
            "create",
            self._timeouts.create,
            docker.create(
                ContainerSpec(
                    name=job.container_name,
                    image=spec.image,
                    env=job.env,
                    container_port=spec.port,
                    host_ip="127.0.0.1" if spec.domain else "0.0.0.0",  # noqa: S104
                    host_port=None if spec.domain else spec.port,
                    binds=binds_for(job),
                    labels=labels_for(job),
                )
            ),
        )
        try:
            await self._enter(job, "start", f"Starting container {container_id[:12]}.")
            await self._step(job, "start", self._timeouts.start, docker.start(container_id))
            await self._enter(job, "health", f"Waiting for port {spec.port} to answer.")
            port = await self._health(job, conn, container_id)
        except _StepFailed as failed:
            with contextlib.suppress(Exception):
                failed.logs = failed.logs or await docker.logs(container_id, LOG_LINES)
            with contextlib.suppress(Exception):
                await docker.remove(container_id)
                await self._event(job, failed.step, "Removed the container that failed.")
            raise
        await self._jobs.set_host_port(job.deployment.id, port)
        return container_id, port

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
            if time.monotonic() + delay > deadline:
                raise _StepFailed(
                    "health",
                    f"Port {job.deployment.spec.port} did not answer within "
                    f"{self._timeouts.health:g} s.",
                    await docker.logs(container_id, LOG_LINES),
                )
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, 0.5)

    async def _step(self, job: Job, step: str, seconds: float, work: Awaitable[T]) -> T:
        """Run ``work`` under the step's deadline, turning failures into ``_StepFailed``."""
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

    async def _enter(self, job: Job, step: str, message: str) -> None:
        await self._jobs.step(job.deployment.id, self._worker, step, message, self._clock.now())

    async def _event(self, job: Job, step: str, message: str) -> None:
        await self._jobs.event(job.deployment.id, self._worker, step, message, self._clock.now())

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

    async def _keep_lease(self, job: Job) -> None:
        interval = self._lease.total_seconds() / 3
        while True:
            await asyncio.sleep(interval)
            held = await self._jobs.renew(
                job.deployment.id, self._worker, self._clock.now() + self._lease
            )
            if not held:
                log.warning("deployment_lease_not_renewed", deployment_id=str(job.deployment.id))
                return
