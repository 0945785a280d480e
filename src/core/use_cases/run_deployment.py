"""Run one claimed deployment on its server: pull → create → start → health, and for an
app with a domain → route → retire.

Success means the container answers on its port, not that Docker accepted it.
Every step has its own deadline and logs an event; a failure names the step
and the reason (quoting Docker), carries the container's last log lines, and
removes the container it created. The worker holds a lease while this runs
(``leases.py``); if the lease is lost, the run stops and writes nothing more.

This module is the run's frame (lease, outcome, the closing write); the steps are
``steps.py``'s, how the new container replaces the old one ``strategies.py``'s, and
what the container is made of ``container_spec.py``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import timedelta

import structlog

from ..models import DeploymentState, Job
from ..ports import Clock, JobQueue, ServerConnection, ServerGateway
from .container_spec import scrub
from .leases import LeaseKeeper
from .routes import RouteTable
from .steps import ABANDON_SECONDS, StepFailed, Steps, StepTimeouts
from .strategies import deploy_domain_app, deploy_port_app

__all__ = ["RunDeployment", "StepTimeouts"]

log = structlog.get_logger()


class _LeaseLost(Exception):
    pass


class RunDeployment(Steps):
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
        super().__init__(
            jobs,
            gateway,
            clock,
            worker_id=worker_id,
            timeouts=timeouts,
            routes=routes,
            drain_seconds=drain_seconds,
        )
        self._leases = LeaseKeeper(jobs, clock, worker_id, lease)
        self._on_finished = on_finished

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
            conn = await self.step(job, "connect", 15.0, self.gateway.connect(job.server))
            container_id, port = await self._deploy(job, conn)
        except StepFailed as failed:
            for line in scrub(failed.logs, job.env):
                await self.event(job, failed.step, f"log: {line}")
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
        await self.enter(job, "pull", f"Looking for image {spec.image}.")
        if await self.step(job, "pull", 15.0, docker.image_exists(spec.image)):
            await self.event(job, "pull", "Image is present; no pull needed.")
        else:
            await self.event(job, "pull", f"Image {spec.image} is not on the server; pulling.")
            await self.step(job, "pull", self.timeouts.pull, docker.pull(spec.image))
        if spec.domain is not None:
            return await deploy_domain_app(self, job, conn, spec.domain)
        return await deploy_port_app(self, job, conn)

    async def _interrupted(self, job: Job) -> None:
        """berth is stopping mid-run (the run stopped, its container removed): say so and
        end the deployment ``failed`` now rather than ``running`` until its lease expires.
        Best effort and bounded: if the store cannot take it, the lease expiry still ends
        it (``timed_out``)."""
        reason = "interrupted: berth was stopped before the deployment finished; deploy again"
        with contextlib.suppress(Exception):
            async with asyncio.timeout(ABANDON_SECONDS):
                await self.jobs.finish(
                    job.deployment.id,
                    self.worker,
                    DeploymentState.FAILED,
                    self.clock.now(),
                    reason,
                    "berth was stopped before the deployment finished.",
                )
                log.warning("deployment_interrupted", deployment_id=str(job.deployment.id))

    async def _finish(
        self, job: Job, state: DeploymentState, error: str | None, message: str
    ) -> None:
        held = await self.jobs.finish(
            job.deployment.id, self.worker, state, self.clock.now(), error, message
        )
        if not held:
            raise _LeaseLost()
        log.info(
            "deployment_finished",
            deployment_id=str(job.deployment.id),
            state=state.value,
            error=error,
        )
