"""How a deployment replaces what runs: the two strategies, and putting back the
previous revision when a deployment does not succeed.

* An app without a domain has one host port, so old and new cannot answer at once:
  the new container is created beside the old one under a temporary name, the old one
  is **stopped, not removed**, the new one started at once and checked. On success the old one
  is removed and the new one takes the installation's name; on any failure (or a
  cancel) the new one is removed and the old one started again and checked: a failed
  deployment never takes down a healthy revision. The host port is its port holder's
  (``holders``), which both join: it stays open throughout.
* An app with a domain is replaced without downtime: the new container starts beside
  the old one (under a temporary name, on an ephemeral ``127.0.0.1`` port), the proxy
  is switched to it only once it answers, and the old one is drained, then removed.
  Until the switch, a failure removes the new container alone: the old one keeps
  serving.
* A first deployment (no container of the installation on the server) creates its
  container under the installation's name at once: nothing to rename afterwards.

Both start from what the server actually has (``survey``), so a run taken over from a
worker that died carries on where it stood: container names are deterministic, a
container of this deployment is reused, one of another deployment of the installation
that is not its serving revision is a leftover and goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

import structlog

from ..errors import CoreError, RuntimeFailure
from ..models import ContainerState, Job, ProxyRoute
from ..ports import ContainerRuntime, ServerConnection
from .container_spec import container_spec, labels_for
from .holders import (
    HOLDER_LABEL,
    HolderLook,
    Holders,
    host_port_of,
    look_for_holders,
    prepare_holder,
    remove_holders,
)
from .steps import ABANDON_SECONDS, LOST, RESTORING, DeploymentRun, StepFailed, answered
from .tls import check_tls

__all__ = [
    "PortPrelude",
    "Survey",
    "deploy_domain_app",
    "deploy_port_app",
    "survey",
    "temporary_name",
]

log = structlog.get_logger()

_DEPLOYMENT_LABEL = "berth.deployment"


def temporary_name(job: Job) -> str:
    """The name a deployment's container has until it replaces the old one: the same
    for every attempt of the deployment, so a takeover finds it."""
    return f"{job.container_name}-{job.deployment.id.hex[:8]}"


@dataclass
class Survey:
    """The installation's containers on the server, as this deployment sees them."""

    ours: ContainerState | None = None  # made by an earlier attempt of this deployment
    previous: list[ContainerState] = field(default_factory=list)  # the serving revision
    leftovers: list[ContainerState] = field(default_factory=list)  # runs that did not succeed


async def survey(job: Job, docker: ContainerRuntime) -> Survey:
    """Sort the installation's containers; refuse if a container that is not the
    installation's holds its name.

    A container labelled with this deployment is ``ours``; one labelled with another
    deployment that is neither the installation's current revision nor named as the
    installation is a leftover (a run that failed or died before its rename); any other
    is the previous revision, to stop and put back."""
    found, clash = await asyncio.gather(  # at once: a deployment's first two calls
        docker.find({"berth.installation": str(job.installation_id)}),
        docker.inspect(job.container_name),
    )
    if clash is not None and clash.labels.get("berth.installation") != str(job.installation_id):
        raise StepFailed(
            "create",
            f"A container named {job.container_name} exists and is not this "
            "installation's; remove or rename it.",
        )
    mine, current = str(job.deployment.id), job.current_deployment_id
    seen = Survey()
    for container in found:
        label = container.labels.get(_DEPLOYMENT_LABEL)
        if label == mine and seen.ours is None:
            seen.ours = container
        elif (
            label is None
            or container.name == job.container_name
            or (current is not None and label == str(current))
        ):
            seen.previous.append(container)
        else:
            seen.leftovers.append(container)
    return seen


async def _clear_leftovers(run: DeploymentRun, docker: ContainerRuntime, seen: Survey) -> None:
    for container in seen.leftovers:
        await run.step("create", run.deps.timeouts.create, docker.remove(container.id))
        await run.event(
            "create",
            f"Removed container {container.name} ({container.id[:12]}) left by a deployment "
            "that did not succeed.",
        )


async def _ours_or_new(
    run: DeploymentRun,
    docker: ContainerRuntime,
    seen: Survey,
    image: str,
    holder: ContainerState | None = None,
) -> tuple[str, str]:
    """The new container's id and name: this deployment's from an earlier attempt, or one
    created now -- under a temporary name beside the previous revision, under the
    installation's own when there is none -- joining the port ``holder``, if any.

    An earlier attempt's container is carried on with only if it joins ``holder`` (Docker
    keeps the id of the holder a container joins): an attempt cut off while Docker made
    its container (its lease ran out) drops the holder it made, and the container left
    joining it could never start (``No such container``); it is removed and made again."""
    ours = seen.ours
    joins = None if holder is None else holder.name
    if ours is not None and ours.joins not in ({None} if holder is None else {holder.id, joins}):
        await run.step("create", run.deps.timeouts.create, docker.remove(ours.id))
        await run.event(
            "create",
            f"Removed container {ours.name} ({ours.id[:12]}) an earlier attempt made: it "
            "joins a port holder that is gone.",
        )
        ours = None
    if ours is not None:
        await run.event(
            "create",
            f"Container {ours.name} ({ours.id[:12]}) of this deployment is already "
            "on the server (an earlier attempt made it); carrying on with it.",
        )
        return ours.id, ours.name
    name = temporary_name(run.job) if seen.previous else run.job.container_name
    spec = container_spec(run.job, name, image, joins=joins)
    return await run.step("create", run.deps.timeouts.create, docker.create(spec)), name


async def _take_the_name(
    run: DeploymentRun, docker: ContainerRuntime, container_id: str, name: str
) -> None:
    """Give the new container the installation's name, unless it has it already."""
    if name != run.job.container_name:
        await run.step(
            "retire", run.deps.timeouts.retire, docker.rename(container_id, run.job.container_name)
        )


async def _holders(
    run: DeploymentRun, docker: ContainerRuntime, looked: HolderLook
) -> Holders | str:
    """The installation's port holders (from what was ``looked`` up), the new revision's
    made if missing; why there is none when the server can have none (its
    architecture): the container publishes its port then."""

    async def prepare() -> Holders | str:
        try:
            return await prepare_holder(run.job, docker, labels_for(run.job), looked)
        except RuntimeFailure as exc:
            if exc.kind != "holder-unsupported":
                raise
            return exc.detail

    return await run.step("create", run.deps.timeouts.create, prepare())


class PortPrelude:
    """What a port app's deployment asks and makes before its image is there, begun
    beside the pull or the build: the installation's containers (``seen``), its holders
    -- the new revision's made if missing and, when nothing of the app runs (a first
    deployment), opened (started) in a task of its own, so the app's container is made
    meanwhile -- or why it can have none (``unheld``). Filled in as it goes: a run that
    ends before using it removes what it made (``abandon``)."""

    def __init__(self, run: DeploymentRun, docker: ContainerRuntime) -> None:
        self.seen: Survey | None = None
        self.holders: Holders | None = None
        self.unheld: str | None = None
        self._opening: asyncio.Task[StepFailed | None] | None = None
        self._made = asyncio.create_task(self._prepare(run, docker))

    async def _prepare(self, run: DeploymentRun, docker: ContainerRuntime) -> Survey:
        timeout = run.deps.timeouts.create
        seen, looked = await asyncio.gather(  # asked at once: no write before both
            run.step("create", timeout, survey(run.job, docker)),
            run.step("create", timeout, look_for_holders(run.job, docker)),
        )
        self.seen = seen
        holders = await _holders(run, docker, looked)
        if isinstance(holders, str):
            self.unheld = holders
            return seen
        self.holders = holders
        if _nothing_holds(seen, holders):  # its port is free: it can open now
            self._opening = asyncio.create_task(_open(run, docker, holders))
        return seen

    async def made(self) -> Survey:
        """The survey, once the holder is made (``StepFailed`` as the look-ups or the
        make failed)."""
        return await self._made

    async def opened(self) -> bool:
        """Whether the holder was started here (waiting for its start); its start's
        failure is raised here, at the step ``start``, where it belongs."""
        if self._opening is None:
            return False
        failed = await self._opening
        if failed is not None:
            raise failed
        return True

    async def stop(self) -> None:
        """Cancel what still runs of it, and wait for that."""
        self._made.cancel()
        await asyncio.gather(self._made, return_exceptions=True)
        if self._opening is not None:  # begun as the make ended
            self._opening.cancel()
            await asyncio.gather(self._opening, return_exceptions=True)

    async def abandon(self, docker: ContainerRuntime, *, remove: bool = True) -> None:
        """The run ended before it used the prelude (its pull or build failed or was
        canceled): stop it, and (``remove``) remove the holder it made (best effort,
        bounded). A make under way is let finish first (bounded): Docker makes the holder
        whether or not its answer is awaited, and only the answer names it — a pull that
        fails at once (a missing image) otherwise left it behind."""
        try:
            if remove:
                with contextlib.suppress(Exception):  # its failure is not the run's any more
                    async with asyncio.timeout(ABANDON_SECONDS):
                        await self._made
        finally:
            await self.stop()
        if remove and self.holders is not None and self.holders.made:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(ABANDON_SECONDS):
                    await remove_holders(docker, [self.holders.mine])


async def _open(
    run: DeploymentRun, docker: ContainerRuntime, holders: Holders
) -> StepFailed | None:
    """Start the new revision's holder; its failure returned, for the step ``start``."""
    try:
        await _start_holder(run, docker, holders)
    except StepFailed as failed:
        return failed
    return None


async def deploy_port_app(
    run: DeploymentRun,
    conn: ServerConnection,
    image: str,
    prelude: PortPrelude | None = None,
) -> tuple[str, int]:
    """Create the new container beside the old one (both join the app's port holder,
    which keeps the host port open), stop the old one and start the new one at once
    (a connection meanwhile is refused at once), check it; then remove the old one and
    give the new one the installation's name. What can be asked and made before the
    image is there (``PortPrelude``) was begun beside the pull or the build, if
    ``prelude`` is given.

    Any failure or cancel after the old one was stopped removes the new one and starts
    the old one again (``restore``)."""
    docker = conn.docker
    await run.enter("create", f"Creating a new container for {run.job.container_name}.")
    ready = prelude or PortPrelude(run, docker)
    try:
        seen = await ready.made()
    except (StepFailed, asyncio.CancelledError):
        await ready.stop()
        if ready.seen is not None:
            await _drop_holders(docker, ready.holders, ready.seen.previous)
        raise
    holders = ready.holders
    if ready.unheld is not None:
        await run.event("create", f"{ready.unheld} The app's container publishes its port.")
    if holders is not None and holders.made:
        await run.event("create", f"Created port holder {holders.name} ({holders.mine.id[:12]}).")
    run.serving = bool(seen.previous)  # untouched so far: as it was
    await _clear_leftovers(run, docker, seen)
    try:
        container_id, name = await _ours_or_new(
            run, docker, seen, image, holders.mine if holders else None
        )
    except (StepFailed, asyncio.CancelledError):
        await ready.stop()
        await _drop_holders(docker, holders, seen.previous)
        raise
    # A run taken over: an old container that is not running was stopped by the attempt
    # that died (the likeliest reason), so a failure from here puts it back too.
    taken_over = run.job.deployment.attempts > 1
    stopped = [old for old in seen.previous if taken_over and not old.running]
    if stopped:
        run.serving = False

    async def replace() -> int:
        await run.enter("start", f"Starting container {container_id[:12]}.")
        # Only a container an earlier attempt made can be running already: asked before
        # the old one stops, so nothing stands between the stop and the start.
        earlier = seen.ours is not None
        current = (
            await run.step("start", run.deps.timeouts.start, docker.inspect(container_id))
            if earlier
            else None
        )
        halted: list[ContainerState] = []
        for old in seen.previous:
            if old.running:
                stopped.append(old)
                halted.append(old)
                run.serving = False  # until it is back (``restore``)
                grace = run.job.deployment.spec.stop_grace_seconds
                await run.step("start", run.deps.timeouts.start + grace, docker.stop(old.id, grace))
        if not await ready.opened() and holders is not None:
            await _hold(run, docker, holders)

        async def say_stopped() -> None:  # after the start: the app is down between the two
            for old in halted:
                await run.event(
                    "start",
                    f"Stopped previous container {old.id[:12]} (kept until the new one answers).",
                )

        try:
            if current is None or not current.running:
                await run.step("start", run.deps.timeouts.start, docker.start(container_id))
        except StepFailed:
            await say_stopped()
            raise
        await say_stopped()
        await run.enter("health", f"Waiting for port {run.job.deployment.spec.port} to answer.")
        return await run.health(conn, container_id)

    try:
        port = await replace()
    except StepFailed as failed:
        await ready.stop()  # (a step before the holder's start was awaited failed)
        await run.discard(docker, container_id, failed)
        await _drop_holders(docker, holders, seen.previous)
        await restore(run, conn, seen.previous, stopped)
        raise
    except asyncio.CancelledError:
        await ready.stop()
        if run.stop_reason != LOST:  # a lost lease: the taker carries on from here
            with contextlib.suppress(Exception):
                async with asyncio.timeout(ABANDON_SECONDS):
                    await docker.remove(container_id)
                    await _drop_holders(docker, holders, seen.previous)
            await restore(run, conn, seen.previous, stopped, within=ABANDON_SECONDS)
        raise
    await run.persist(lambda: run.deps.jobs.set_host_port(run.job.deployment.id, port))
    await _retire_stopped(run, docker, container_id, name, seen.previous)
    if holders is not None:
        for gone in await remove_holders(docker, holders.others):
            await run.event("retire", f"Removed port holder {gone.name} (another port).")
    return container_id, port


def _nothing_holds(seen: Survey, holders: Holders) -> bool:
    """Whether no container of the app runs (none publishes a port, none holds one): its
    new holder may start before the new container is made."""
    return not any(c.running for c in [*seen.previous, *holders.others]) and not (
        seen.ours is not None and seen.ours.running
    )


async def _start_holder(run: DeploymentRun, docker: ContainerRuntime, holders: Holders) -> None:
    """Start the new revision's holder unless it runs (the step ``start`` fails if its port
    is taken)."""
    if not holders.mine.running:
        await run.step("start", run.deps.timeouts.start, docker.start(holders.mine.id))


async def _hold(run: DeploymentRun, docker: ContainerRuntime, holders: Holders) -> None:
    """Right after the old container stopped: the holders of other ports (a ``hostPort``
    change) stop, the new revision's runs (a no-op when it ran already: a redeploy)."""
    for other in holders.others:
        if other.running:
            await run.step("start", run.deps.timeouts.start, docker.stop(other.id, 0))
    await _start_holder(run, docker, holders)


async def _drop_holders(
    docker: ContainerRuntime, holders: Holders | None, previous: list[ContainerState]
) -> None:
    """After a failure: the holders no previous container joins go (the new revision's,
    made for another port or for a first deployment); the previous revision's holder is
    started again by ``restore``."""
    if holders is None:
        return
    needed = {c.joins for c in previous if c.joins is not None}
    await remove_holders(docker, [holders.mine, *holders.others], keep=needed)


async def _retire_stopped(
    run: DeploymentRun,
    docker: ContainerRuntime,
    container_id: str,
    name: str,
    old: list[ContainerState],
) -> None:
    """Step ``retire`` of a port app: remove the stopped old containers, then give the
    new one the installation's name. The new one serves already: a failure here is an
    event, not a failed deployment (the next deployment removes what is left)."""
    await run.enter(
        "retire",
        f"Removing {len(old)} previous container(s)." if old else "No previous container.",
    )
    try:
        for container in old:
            await run.step("retire", run.deps.timeouts.retire, docker.remove(container.id))
            await run.event("retire", f"Removed previous container {container.id[:12]}.")
        await _take_the_name(run, docker, container_id, name)
    except StepFailed as failed:
        await run.event("retire", f"Not finished: {failed.reason}")


async def restore(
    run: DeploymentRun,
    conn: ServerConnection,
    previous: list[ContainerState],
    stopped: list[ContainerState],
    *,
    within: float | None = None,
) -> bool:
    """Put the previous revision back as it was: start again what this run stopped and
    check that it answers. Records (``DeploymentRun.serving``) and returns whether the previous
    revision serves. Takes at most ``within`` seconds (a stopped run: shutdown waits for
    it), by default ``ABANDON_SECONDS`` plus the health deadline; never raises (but for a
    cancel from outside)."""
    if not previous:
        run.serving = False
        return False
    if not stopped:  # never touched: it is as it was
        run.serving = True
        return True
    docker = conn.docker
    revision = stopped[0].labels.get(_DEPLOYMENT_LABEL, "unknown")
    run.stopping = run.stopping or RESTORING  # a cancel now would cut it short
    try:
        async with asyncio.timeout(within or ABANDON_SECONDS + run.deps.timeouts.health):
            for old in stopped:
                if old.joins is not None:  # its port holder first (stopped by a port change)
                    await docker.start(old.joins)
                await docker.start(old.id)
            port = await _answering(run, conn, stopped[0].id)
    except (CoreError, TimeoutError, OSError) as exc:
        detail = getattr(exc, "detail", None) or str(exc) or type(exc).__name__
        run.serving = False
        with contextlib.suppress(Exception):
            await run.event(
                "restore",
                f"Could not put back revision {revision}: {detail}; nothing serves the app.",
            )
        return False
    run.serving = True
    with contextlib.suppress(Exception):
        if port is not None:
            await run.persist(lambda: run.deps.jobs.set_host_port(run.job.deployment.id, port))
        await run.event(
            "restore",
            f"rolled back to revision {revision}: the app is serving the previous version.",
        )
    return True


async def _answering(run: DeploymentRun, conn: ServerConnection, container_id: str) -> int | None:
    """Wait until the restarted container answers (by the same rule as a new one, with
    the health path its own revision was deployed with unknown here: any answer)."""
    delay = 0.05
    deadline = time.monotonic() + run.deps.timeouts.health
    answer: str | None = None  # the last probe's
    while True:
        state = await conn.docker.inspect(container_id)
        if state is None:
            raise TimeoutError("the previous container disappeared")
        port = host_port_of(state) if state.running else None
        before, answer = answer, await conn.probe(port) if port is not None else None
        if port is not None and answered(answer, None, before):
            return port
        if time.monotonic() >= deadline:
            raise TimeoutError(f"it did not answer within {run.deps.timeouts.health:g} s")
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, 0.5)


async def deploy_domain_app(
    run: DeploymentRun, conn: ServerConnection, domain: str, image: str
) -> tuple[str, int]:
    """The zero-downtime path of an app with a domain: create and check the new
    container beside the old one, switch the route, retire the old one, then check
    HTTPS through the proxy (reported, never failing the deployment)."""
    docker = conn.docker
    await run.enter("create", f"Creating a new container for {run.job.container_name}.")
    seen = await run.step("create", run.deps.timeouts.create, survey(run.job, docker))
    run.serving = bool(seen.previous)  # the old one is never stopped
    await _clear_leftovers(run, docker, seen)
    previous = seen.previous
    container_id, name = await _ours_or_new(run, docker, seen, image)

    async def start_and_switch() -> int:
        port = await run.start_healthy(conn, container_id)
        await _switch(run, conn, domain, port, previous)
        return port

    port = await run.checked(docker, container_id, start_and_switch())
    await _retire(run, conn, container_id, name, previous)
    await check_tls(run, conn, domain)
    return container_id, port


async def _switch(
    run: DeploymentRun,
    conn: ServerConnection,
    domain: str,
    port: int,
    previous: list[ContainerState],
) -> None:
    """Step ``route``: record the new port, then load the server's routes with it.

    On failure the old port is recorded again and the proxy is put back (best
    effort: the monitor converges it otherwise)."""
    await run.enter("route", f"Routing {domain} to port {port}.")
    if run.deps.routes is None:
        raise StepFailed("route", "This worker has no route table; it cannot route domains.")
    routes = run.deps.routes
    old_port = next((c.host_port for c in previous if c.running), None)
    await run.deps.jobs.set_host_port(run.job.deployment.id, port)
    try:
        await run.proxy_step(
            "route",
            run.deps.timeouts.route,
            routes.apply(
                run.job.server.id,
                conn.proxy,
                expect=ProxyRoute(domain=domain, upstream_port=port),
            ),
        )
    except (StepFailed, asyncio.CancelledError):  # stopped mid-switch too: put it back
        with contextlib.suppress(Exception):
            async with asyncio.timeout(run.deps.timeouts.route):
                await run.deps.jobs.set_host_port(run.job.deployment.id, old_port)
                await routes.apply(run.job.server.id, conn.proxy)
        raise
    await run.event("route", f"The proxy sends {domain} to port {port}.")


async def _retire(
    run: DeploymentRun,
    conn: ServerConnection,
    container_id: str,
    name: str,
    previous: list[ContainerState],
) -> None:
    """Step ``retire``: drain and remove the old containers, then give the new one the
    installation's name. The new container already serves, so a failure here is
    an event, not a failed deployment (the next deployment removes what is left)."""
    docker = conn.docker
    old = [c for c in previous if c.id != container_id]
    await run.enter(
        "retire",
        f"Draining {len(old)} previous container(s) for {run.deps.drain_seconds:g} s."
        if old
        else "No previous container to retire.",
    )
    try:
        if old:
            await asyncio.sleep(run.deps.drain_seconds)
            if run.deps.routes is not None and await run.proxy_step(
                "retire",
                run.deps.timeouts.retire,
                run.deps.routes.converge(run.job.server.id, conn.proxy),
            ):
                await run.event("retire", "The proxy's configuration had changed; loaded it again.")
            for container in old:
                await run.step("retire", run.deps.timeouts.retire, docker.remove(container.id))
                await run.event("retire", f"Removed previous container {container.id[:12]}.")
            if any(c.joins is not None for c in old):  # it had no domain: its port goes
                found = await run.step(
                    "retire",
                    run.deps.timeouts.retire,
                    docker.find({HOLDER_LABEL: str(run.job.installation_id)}),
                )
                for gone in await remove_holders(docker, found):
                    await run.event("retire", f"Removed port holder {gone.name}.")
        await _take_the_name(run, docker, container_id, name)
    except StepFailed as failed:
        await run.event("retire", f"Not finished: {failed.reason}")
