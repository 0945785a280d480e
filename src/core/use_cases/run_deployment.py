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

This module is the run's frame (lease, outcome, the closing write) and the factory of
runs, which holds their dependencies; each run is a ``DeploymentRun`` of its own
(``steps.py``: its state and its steps), how the new container replaces the old one
is ``strategies.py``'s, and what the container is made of ``container_spec.py``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

import msgspec
import structlog

from ..errors import NotFound, RuntimeFailure
from ..models import BuildSpec, DeploymentState, Ending, Job, Transport
from ..ports import CALL_LANE, ContainerRuntime, ServerConnection
from .building import BuildLog, build_image, prune_built_images
from .container_spec import refused_volumes, scrub
from .leases import LeaseKeeper
from .steps import (
    ABANDON_SECONDS,
    CANCELED,
    LOST,
    DeploymentRun,
    RunDependencies,
    StepFailed,
    StepTimeouts,
)
from .strategies import PortPrelude, deploy_domain_app, deploy_port_app

CANCELED_ERROR = "canceled on request"
#: How long a succeeded run waits to record what its container does (``_seen_running``).
WATCH_SECONDS = 5.0
#: How long pruning an app's old built images may take, after its deployment ended.
PRUNE_SECONDS = 30.0

__all__ = ["RunDeployment", "StepTimeouts"]

log = structlog.get_logger()


class _LeaseLost(Exception):
    pass


@dataclass(eq=False)
class RunDeployment(RunDependencies):
    """Execute a claimed ``Job`` to a final state, as a ``DeploymentRun`` of its own.

    Holds what every run needs. ``lease`` is how long the worker holds a deployment it
    claimed. ``routes`` is the process's shared :class:`RouteTable`; without one, apps
    with a domain fail at step ``route`` (and their old container keeps serving).
    ``drain_seconds`` is how long a replaced container of a domain app keeps running
    after the switch, so requests already sent to it can finish; for an app without a
    domain, how long the old container has to stop on SIGTERM (whole seconds, at least
    one) before it is killed and the new one started. The run's end is recorded by the
    job queue's ``finish`` as ``DeploymentFinished`` (waiters, webhooks).
    """

    async def __call__(self, job: Job) -> DeploymentState:
        CALL_LANE.set("deploy")  # this task's (and its children's) calls: the deploy threads
        run = DeploymentRun(job, self)
        deployment_id = job.deployment.id
        work = asyncio.create_task(self._run(run))
        stop = asyncio.Event()
        leases = LeaseKeeper(self.jobs, self.clock, self.worker_id, self.lease)
        renewer = asyncio.create_task(leases.keep(run, work, stop))
        state = DeploymentState.FAILED
        ended: DeploymentState | None = None  # the state this run ended the deployment in
        try:
            try:
                state, error, message = await work
            finally:
                renewer.cancel()  # before finish: a finished deployment has no lease to renew
                with contextlib.suppress(asyncio.CancelledError):
                    await renewer
            await self._finish(run, state, error, message)
            ended = state
        except _LeaseLost:  # finish() found the lease gone: another worker owns it now
            log.warning("deployment_lease_lost", deployment_id=str(deployment_id))
        except asyncio.CancelledError:
            current = asyncio.current_task()
            outside = current is not None and current.cancelling() > 0
            reason = run.stop_reason
            if outside or reason is None:
                await self._interrupted(run)
                raise  # cancelled from outside (shutdown): not ours to swallow
            if reason == CANCELED:
                state = DeploymentState.CANCELED
                with contextlib.suppress(_LeaseLost):
                    await self._finish(run, state, CANCELED_ERROR, _canceled_message(run))
            else:
                await run.settle()  # what is left is not this worker's to write
                log.warning("deployment_lease_lost", deployment_id=str(deployment_id))
        if ended is DeploymentState.SUCCEEDED and job.deployment.spec.build is not None:
            await self._prune(run)  # after the end: no one waits for housekeeping
        return state

    async def _run(self, run: DeploymentRun) -> tuple[DeploymentState, str | None, str]:
        job = run.job
        conn: ServerConnection | None = None
        try:
            self._refuse_volumes(job)
            began = time.monotonic()
            conn = await run.step("connect", 15.0, self.gateway.connect(job.server))
            log.debug(
                "deployment_connected",
                deployment_id=str(run.deployment_id),
                seconds=round(time.monotonic() - began, 3),
            )
            container_id, port = await self._deploy(run, conn)
            await self._seen_running(run, conn)
        except StepFailed as failed:
            for line in scrub(failed.logs, job.env):
                await run.event(failed.step, f"log: {line}")
            if conn is not None and run.serving:  # the previous revision was started again
                await self._seen_running(run, conn)
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

    async def _seen_running(self, run: DeploymentRun, conn: ServerConnection) -> None:
        """Record what the app's container does now that it answered, before the run ends:
        a monitor pass may have seen the new container between its create and its start
        (``exited``), and the deployment's answer says the status. Also after a failure
        that started the previous revision again (it was seen stopped meanwhile). Best
        effort, bounded: the watch sees it again soon anyway."""
        if self.watch is None:
            return
        job = run.job
        try:
            async with asyncio.timeout(WATCH_SECONDS):
                await self.watch.refresh(job.server.id, conn.docker, {job.installation_id})
        except Exception as exc:  # Docker's, the store's, a timeout: the next look records it
            log.info(
                "deployment_watch_skipped",
                deployment_id=str(run.deployment_id),
                error=type(exc).__name__,
            )

    async def _deploy(self, run: DeploymentRun, conn: ServerConnection) -> tuple[str, int]:
        spec = run.job.deployment.spec
        if spec.domain is not None:
            return await deploy_domain_app(run, conn, spec.domain, await self._image_of(run, conn))
        # A port app's survey and holder (started, if nothing of the app runs) need no
        # image: begun now, beside the pull or the build, not after it.
        prelude = PortPrelude(run, conn.docker)
        try:
            image = await self._image_of(run, conn)
        except BaseException:
            # A lost lease: the taker carries on from what is there.
            await prelude.abandon(conn.docker, remove=run.stop_reason != LOST)
            raise
        return await deploy_port_app(run, conn, image, prelude)

    async def _image_of(self, run: DeploymentRun, conn: ServerConnection) -> str:
        """The image to create from: built (step ``build``), or pulled if missing."""
        deployment = run.job.deployment
        build = deployment.spec.build
        if build is None or deployment.image_id is not None:
            # an image, or a build's image again (a rollback, a run taken over)
            return await self._image(run, conn.docker)
        if build.git is not None and deployment.commit is not None:
            # A pushed commit (a deploy hook's): that commit, not the ref's newest.
            build = msgspec.structs.replace(
                build, git=msgspec.structs.replace(build.git, ref=deployment.commit)
            )
        return await self._build(run, conn.docker, build)

    async def _build(self, run: DeploymentRun, docker: ContainerRuntime, build: BuildSpec) -> str:
        """Step ``build``: make the context ready here, have the server's Engine build it
        (its output as events, secrets redacted), record the image id and the commit."""
        job = run.job
        tag = job.deployment.spec.image
        origin = (
            f"{build.git.url}" + (f" at {build.git.ref}" if build.git.ref else "")
            if build.git is not None
            else f"the uploaded source {build.source_id}"
        )
        await run.enter("build", f"Building {tag} from {origin}.")
        if self.sources is None:
            raise StepFailed("build", "This berth has no build sources configured.")
        log = BuildLog(job.env.values())

        async def report(message: str) -> None:
            await run.event("build", message)

        async def work() -> tuple[str, str | None]:
            assert self.sources is not None
            async with self.sources.prepare(job.owner_id, build, log.add_secret) as context:
                if context.commit is not None:
                    await run.event("build", f"Building commit {context.commit}.")
                image_id = await build_image(
                    docker, context, build, tag, log, report, interval=self.progress_seconds
                )
                return image_id, context.commit

        try:
            image_id, commit = await run.step("build", self.timeouts.build, work())
        except StepFailed as failed:
            failed.reason = log.redact(failed.reason)
            raise
        except NotFound as exc:
            raise StepFailed("build", exc.detail) from None
        await run.persist(
            lambda: self.jobs.set_image_id(run.deployment_id, self.worker_id, image_id, commit)
        )
        await run.event("build", f"Built {tag} ({image_id[:19]}).")
        return tag

    async def _prune(self, run: DeploymentRun) -> None:
        """Built images beyond the app's newest few go: housekeeping once the deployment
        is final, which no one waits for (best effort: a failure to remove one is logged,
        the next build's prune tries again)."""
        job = run.job
        try:
            async with asyncio.timeout(PRUNE_SECONDS):
                conn = await self.gateway.connect(job.server)  # pooled: the run's own
                removed = await prune_built_images(conn.docker, job.container_name)
        except Exception as exc:  # Docker's, the connection's, a timeout: never the run's
            log.info("prune_skipped", deployment_id=str(run.deployment_id), reason=str(exc))
            return
        if removed:
            log.info("built_images_pruned", deployment_id=str(run.deployment_id), tags=removed)

    async def _image(self, run: DeploymentRun, docker: ContainerRuntime) -> str:
        """Step ``pull``: make the image present and record its id; what to create from.

        A deployment that arrives with an image id (a rollback, or a run taken over after
        the id was recorded) runs exactly that image: its tag if the tag still names it,
        else the id itself; if neither is on the server, the tag is pulled and used only
        if it names that image again."""
        spec = run.job.deployment.spec
        await run.enter("pull", f"Looking for image {spec.image}.")
        wanted = run.job.deployment.image_id
        if wanted is not None:
            return await self._pinned(run, docker, wanted)
        found = await run.step("pull", 15.0, docker.image_id(spec.image))
        if found is not None:
            await run.event("pull", "Image is present; no pull needed.")
        else:
            await run.event("pull", f"Image {spec.image} is not on the server; pulling.")
            await run.step("pull", self.timeouts.pull, run.pull(docker, spec.image))
            found = await run.step("pull", 15.0, docker.image_id(spec.image))
        if found is not None:
            image_id = found
            await run.persist(
                lambda: self.jobs.set_image_id(run.deployment_id, self.worker_id, image_id)
            )
            await run.event("pull", f"Image {spec.image} is {found[:19]}.")
        return spec.image

    async def _pinned(self, run: DeploymentRun, docker: ContainerRuntime, wanted: str) -> str:
        deployment = run.job.deployment
        spec = deployment.spec
        short = wanted[:19]
        if await run.step("pull", 15.0, docker.image_id(spec.image)) == wanted:
            await run.event("pull", f"Image {spec.image} is still {short}; no pull needed.")
            return spec.image
        if await run.step("pull", 15.0, docker.image_id(wanted)) is not None:
            await run.event("pull", f"Running image {short}: {spec.image} names another image now.")
            return wanted
        revision = deployment.rollback_of or deployment.id
        await run.event("pull", f"Image {short} is not on the server; pulling {spec.image}.")
        pulled: str | None = None
        try:
            async with asyncio.timeout(self.timeouts.pull):
                await run.pull(docker, spec.image)
            pulled = await run.step("pull", 15.0, docker.image_id(spec.image))
        except (RuntimeFailure, TimeoutError):
            pulled = None
        if pulled != wanted:
            raise StepFailed(
                "pull",
                f"the image of revision {revision} ({short}) is no longer on the server and "
                f"{spec.image} now names another image",
            )
        return spec.image

    async def _interrupted(self, run: DeploymentRun) -> None:
        """berth is stopping mid-run (the run stopped, its container removed): say so and
        end the deployment ``failed`` now rather than ``running`` until its lease expires.
        Best effort and bounded: if the store cannot take it, the lease expiry still ends
        it (``timed_out``)."""
        reason = "interrupted: berth was stopped before the deployment finished; deploy again"
        at = self.clock.now()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(ABANDON_SECONDS):
                events, step = await run.settle()
                await self.jobs.finish(
                    run.deployment_id,
                    self.worker_id,
                    Ending(
                        state=DeploymentState.FAILED,
                        at=at,
                        error=reason,
                        message="berth was stopped before the deployment finished.",
                        events=events,
                        step=step,
                    ),
                    serving=run.serving,
                )
                log.warning("deployment_interrupted", deployment_id=str(run.deployment_id))
        run.stop_writing()

    async def _finish(
        self, run: DeploymentRun, state: DeploymentState, error: str | None, message: str
    ) -> None:
        succeeded = state is DeploymentState.SUCCEEDED
        serving = None if succeeded else run.serving
        at = self.clock.now()
        events, step = await run.settle()  # the events not yet written go with the end
        ending = Ending(state=state, at=at, error=error, message=message, events=events, step=step)
        held = await run.persist(
            lambda: self.jobs.finish(run.deployment_id, self.worker_id, ending, serving=serving)
        )
        if not held:
            raise _LeaseLost()
        log.info(
            "deployment_finished",
            deployment_id=str(run.deployment_id),
            state=state.value,
            error=error,
        )


def _canceled_message(run: DeploymentRun) -> str:
    if run.serving:
        return "Canceled on request; the previous revision is serving."
    if run.serving is None:
        return "Canceled on request before the server was touched."
    return "Canceled on request; no previous revision serves the app."
