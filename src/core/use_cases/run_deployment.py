"""Run one claimed deployment on its server: pull → create → start → health, and for an
app with a domain → route → retire.

Success means the container answers on its port (or its health path answers 2xx/3xx),
not that Docker accepted it. Every step has its own deadline and logs an event; a
failure names the step and the reason (quoting Docker), carries the container's last
log lines, removes the container it created and puts the previous revision back
(``strategies.restore``). The worker holds a lease while this runs (``leases.py``),
which also watches for a cancel request: the run then stops where it stands, puts the
previous revision back and ends ``canceled``. If the lease is lost, the run stops,
touches nothing more and writes nothing more: the worker that took it over carries on.

This module is the run's frame (lease, outcome, the closing write); the steps are
``steps.py``'s, how the new container replaces the old one ``strategies.py``'s, and
what the container is made of ``container_spec.py``'s.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from ..errors import RuntimeFailure
from ..models import DeploymentState, Ending, Job, Transport
from ..ports import ContainerRuntime, ServerConnection
from .container_spec import refused_volumes, scrub
from .leases import LeaseKeeper
from .steps import ABANDON_SECONDS, CANCELED, StepFailed, Steps, StepTimeouts
from .strategies import deploy_domain_app, deploy_port_app

CANCELED_ERROR = "canceled on request"

__all__ = ["RunDeployment", "StepTimeouts"]

log = structlog.get_logger()


class _LeaseLost(Exception):
    pass


class RunDeployment(Steps):
    """Execute a claimed ``Job`` to a final state.

    ``routes`` is the process's shared :class:`RouteTable`; without one, apps with a
    domain fail at step ``route`` (and their old container keeps serving).
    ``drain_seconds`` is how long a replaced container of a domain app keeps running
    after the switch, so requests already sent to it can finish; for an app without a
    domain, how long the old container has to stop on SIGTERM (whole seconds, at least
    one) before it is killed and the new one started.
    """

    async def __call__(self, job: Job) -> DeploymentState:
        deployment_id = job.deployment.id
        run = asyncio.create_task(self._run(job))
        stop = asyncio.Event()
        leases = LeaseKeeper(self.jobs, self.clock, self.worker_id, self.lease)
        renewer = asyncio.create_task(leases.keep(job, run, stop, self.stopping))
        state = DeploymentState.FAILED
        try:
            try:
                state, error, message = await run
            finally:
                renewer.cancel()  # before finish: a finished deployment has no lease to renew
                with contextlib.suppress(asyncio.CancelledError):
                    await renewer
            await self._finish(job, state, error, message)
        except _LeaseLost:  # finish() found the lease gone: another worker owns it now
            log.warning("deployment_lease_lost", deployment_id=str(deployment_id))
        except Exception:  # e.g. the store gone for longer than the lease: a taker carries on
            self._forget(job)
            raise
        except asyncio.CancelledError:
            current = asyncio.current_task()
            outside = current is not None and current.cancelling() > 0
            reason = self.stop_reason(job)
            if outside or reason is None:
                await self._interrupted(job)
                self._forget(job)
                raise  # cancelled from outside (shutdown): not ours to swallow
            if reason == CANCELED:
                state = DeploymentState.CANCELED
                with contextlib.suppress(_LeaseLost):
                    await self._finish(job, state, CANCELED_ERROR, self._canceled_message(job))
            else:
                log.warning("deployment_lease_lost", deployment_id=str(deployment_id))
        self._forget(job)
        if self.on_finished is not None:
            await self.on_finished(job, state)
        return state

    def _forget(self, job: Job) -> None:
        self.stopping.pop(job.deployment.id, None)
        self.serving.pop(job.deployment.id, None)

    def _canceled_message(self, job: Job) -> str:
        serving = self.serving.get(job.deployment.id)
        if serving:
            return "Canceled on request; the previous revision is serving."
        if serving is None:
            return "Canceled on request before the server was touched."
        return "Canceled on request; no previous revision serves the app."

    async def _run(self, job: Job) -> tuple[DeploymentState, str | None, str]:
        try:
            self._refuse_volumes(job)
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

    def _refuse_volumes(self, job: Job) -> None:
        """The deploy use case refused these already; a deployment queued before a rule
        was made (or by a process that does not know this machine's paths) meets it here,
        before the server is touched."""
        local = job.server.transport is Transport.LOCAL
        refused = refused_volumes(
            job.deployment.spec.volumes, job.container_name, self.berth_paths if local else ()
        )
        if refused:
            raise StepFailed("create", refused[0][1])

    async def _deploy(self, job: Job, conn: ServerConnection) -> tuple[str, int]:
        spec = job.deployment.spec
        image = await self._image(job, conn.docker)
        if spec.domain is not None:
            return await deploy_domain_app(self, job, conn, spec.domain, image)
        return await deploy_port_app(self, job, conn, image)

    async def _image(self, job: Job, docker: ContainerRuntime) -> str:
        """Step ``pull``: make the image present and record its id; what to create from.

        A deployment that arrives with an image id (a rollback, or a run taken over after
        the id was recorded) runs exactly that image: its tag if the tag still names it,
        else the id itself; if neither is on the server, the tag is pulled and used only
        if it names that image again."""
        spec = job.deployment.spec
        await self.enter(job, "pull", f"Looking for image {spec.image}.")
        wanted = job.deployment.image_id
        if wanted is not None:
            return await self._pinned(job, docker, wanted)
        found = await self.step(job, "pull", 15.0, docker.image_id(spec.image))
        if found is not None:
            await self.event(job, "pull", "Image is present; no pull needed.")
        else:
            await self.event(job, "pull", f"Image {spec.image} is not on the server; pulling.")
            await self.step(job, "pull", self.timeouts.pull, self.pull(job, docker, spec.image))
            found = await self.step(job, "pull", 15.0, docker.image_id(spec.image))
        if found is not None:
            image_id = found
            await self.persist(
                lambda: self.jobs.set_image_id(job.deployment.id, self.worker_id, image_id)
            )
            await self.event(job, "pull", f"Image {spec.image} is {found[:19]}.")
        return spec.image

    async def _pinned(self, job: Job, docker: ContainerRuntime, wanted: str) -> str:
        spec = job.deployment.spec
        short = wanted[:19]
        if await self.step(job, "pull", 15.0, docker.image_id(spec.image)) == wanted:
            await self.event(job, "pull", f"Image {spec.image} is still {short}; no pull needed.")
            return spec.image
        if await self.step(job, "pull", 15.0, docker.image_id(wanted)) is not None:
            await self.event(
                job, "pull", f"Running image {short}: {spec.image} names another image now."
            )
            return wanted
        revision = job.deployment.rollback_of or job.deployment.id
        await self.event(job, "pull", f"Image {short} is not on the server; pulling {spec.image}.")
        pulled: str | None = None
        try:
            async with asyncio.timeout(self.timeouts.pull):
                await self.pull(job, docker, spec.image)
            pulled = await self.step(job, "pull", 15.0, docker.image_id(spec.image))
        except (RuntimeFailure, TimeoutError):
            pulled = None
        if pulled != wanted:
            raise StepFailed(
                "pull",
                f"the image of revision {revision} ({short}) is no longer on the server and "
                f"{spec.image} now names another image",
            )
        return spec.image

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
                    self.worker_id,
                    Ending(
                        state=DeploymentState.FAILED,
                        at=self.clock.now(),
                        error=reason,
                        message="berth was stopped before the deployment finished.",
                    ),
                    serving=self.serving.get(job.deployment.id),
                )
                log.warning("deployment_interrupted", deployment_id=str(job.deployment.id))

    async def _finish(
        self, job: Job, state: DeploymentState, error: str | None, message: str
    ) -> None:
        succeeded = state is DeploymentState.SUCCEEDED
        serving = None if succeeded else self.serving.get(job.deployment.id)
        at = self.clock.now()
        held = await self.persist(
            lambda: self.jobs.finish(
                job.deployment.id,
                self.worker_id,
                Ending(state=state, at=at, error=error, message=message),
                serving=serving,
            )
        )
        if not held:
            raise _LeaseLost()
        log.info(
            "deployment_finished",
            deployment_id=str(job.deployment.id),
            state=state.value,
            error=error,
        )
