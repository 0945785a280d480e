"""A deployment run and its steps, each with its deadline and its event.

``DeploymentRun`` is one run of one deployment: its job, its state (why it was
stopped, whether the previous revision serves) and the primitives every deploy
strategy is built from: run a step under its deadline, record an event, start a
container and wait until it answers, and clean up a container whose run failed or
was stopped. Runs never share state: each has its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from datetime import timedelta
from typing import TypeVar
from uuid import UUID

import msgspec
import structlog

from ..errors import RuntimeFailure, ServerUnreachable, StoreUnavailable
from ..models import DeploymentEvent, Job
from ..outages import ThrottledWarning
from ..ports import (
    BARE_TCP,
    CALL_LANE,
    BuildSources,
    Clock,
    ContainerRuntime,
    JobQueue,
    ServerConnection,
    ServerGateway,
)
from .container_spec import LOG_LINES, scrub
from .holders import host_port_of
from .host_ports import logged_port, logged_port_hint
from .pulling import pull_image
from .routes import RouteTable
from .watch import WatchContainers

__all__ = [
    "ABANDON_SECONDS",
    "CANCELED",
    "LOST",
    "RESTORING",
    "DeploymentRun",
    "RunDependencies",
    "StepFailed",
    "StepTimeouts",
    "answered",
]

log = structlog.get_logger()

T = TypeVar("T")

ABANDON_SECONDS = 10.0

#: A health wait ends early once the app's output has said for this long that it listens
#: on another port than the deployed one, and that port still does not answer (an app
#: may open a side port first: it has these seconds to open its own too).
WRONG_PORT_SECONDS = 5.0
#: How often the health wait reads the app's last lines for the port it logged.
LOG_CHECK_SECONDS = 0.5

# A store write of a run tried again: one line per interval in the process, not per try.
_write_retried = ThrottledWarning("store_write_retried")

#: Why a run was stopped from inside berth: the user asked (``CANCELED``: put the previous
#: revision back, end ``canceled``) or its lease is another worker's (``LOST``: touch
#: nothing more, the taker carries on). Absent: berth is shutting down.
CANCELED = "canceled"
LOST = "lost"
#: Not a reason to stop: the run is putting the previous revision back and a cancel
#: request must not cut that short (it would end as canceled anyway).
RESTORING = "restoring"

_GOOD_STATUS = re.compile(r"HTTP [23]\d\d\b")


def answered(answer: str | None, health_path: str | None, before: str | None = None) -> bool:
    """The health rule: with a health path, an HTTP 2xx or 3xx; without, any answer -- an
    answer that is no HTTP (``"TCP"``) only when the probe ``before`` it said so too.

    A port can look held and silent for a moment when nothing listens behind it: Docker's
    userland proxy accepts the connection and closes it once its own connect inside has
    failed, which on a busy machine (or through a slow SSH channel) can come after the
    probe has stopped waiting. Two silent probes in a row are a listener; one is not
    (seen in CI: a container that never listened passed its health check)."""
    if health_path is None:
        return bool(answer) and (answer != BARE_TCP or before == BARE_TCP)
    return answer is not None and _GOOD_STATUS.match(answer) is not None


class StepTimeouts(msgspec.Struct, frozen=True, kw_only=True):
    """Seconds each step may take."""

    pull: float = 120.0
    build: float = 600.0  # fetching (or reading) the source and the build itself
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


def _unhealthy(job: Job, reason: str, logs: list[str]) -> StepFailed:
    """The health step failed for ``reason``; when the app's output names another port
    than the one it was deployed with, the reason says so (from the output with the
    job's env values redacted, as every captured line is)."""
    hint = logged_port_hint(scrub(logs, job.env), job.deployment.spec.port)
    if hint is not None:
        reason = f"{reason} Note: {hint}."
    return StepFailed("health", reason, logs)


@dataclass(eq=False)
class _WrongPort:
    """Within a health wait: whether the app said it listens on another port than its
    own, and has said so for ``WRONG_PORT_SECONDS``; then the wait ends, saying so. Its
    last lines are read beside the probes (a task started at most every
    ``LOG_CHECK_SECONDS``), never delaying them."""

    job: Job
    seen_at: float | None = None
    started_at: float = field(default_factory=time.monotonic)
    reading: asyncio.Task[list[str]] | None = None

    def check(self, docker: ContainerRuntime, container_id: str) -> None:
        """Look at the last read if it ended, start the next one when due; raises
        ``StepFailed`` once the app has named another port for long enough."""
        now = time.monotonic()
        if self.reading is not None and self.reading.done():
            done, self.reading = self.reading, None
            if not done.cancelled() and done.exception() is None:
                self._judge(scrub(done.result(), self.job.env), now)
        if self.reading is None and now - self.started_at >= LOG_CHECK_SECONDS:
            self.started_at = now
            self.reading = asyncio.ensure_future(docker.logs(container_id, LOG_LINES))

    def _judge(self, lines: list[str], now: float) -> None:
        port = self.job.deployment.spec.port
        found = logged_port(lines, port)
        if found is None:
            self.seen_at = None
            return
        if self.seen_at is None:
            self.seen_at = now
        if now - self.seen_at >= WRONG_PORT_SECONDS:
            words, logged = found
            raise StepFailed(
                "health",
                f"The app logged {words!r}; it was deployed with port {port}: set port to "
                f"{logged}, or make the app listen on {port}.",
                lines,
            )

    def close(self) -> None:
        if self.reading is not None:
            self.reading.cancel()
            self.reading = None


@dataclass(eq=False)
class RunDependencies:
    """What every run of one worker uses: its job queue, the gateway, the clock, the
    step deadlines, the route table (``RunDeployment``, which holds them, documents
    each). Data only: the steps are the run's own."""

    jobs: JobQueue
    gateway: ServerGateway
    clock: Clock
    _: KW_ONLY
    worker_id: str
    timeouts: StepTimeouts = field(default_factory=StepTimeouts)
    lease: timedelta = timedelta(seconds=15)
    routes: RouteTable | None = None
    #: Where build contexts are made ready; without, a build fails at step ``build``.
    sources: BuildSources | None = None
    drain_seconds: float = 1.0
    #: Apps under watch: what a succeeded run's container does is recorded before its
    #: end (a monitor pass may have seen it created but not yet started: ``exited``).
    watch: WatchContainers | None = None
    #: berth's own paths on this machine (data dir, database): no volume of a deployment
    #: to the server that is this machine may reach them (``container_spec.refused_volumes``).
    berth_paths: tuple[str, ...] = ()
    #: How long a store write is retried (with backoff) before the run gives up on it:
    #: as long as the lease, which another worker takes over once it runs out.
    store_patience: float = field(init=False)
    #: A pull's progress is an event at most once per this many seconds.
    progress_seconds: float = field(default=1.0, init=False)

    def __post_init__(self) -> None:
        self.store_patience = self.lease.total_seconds()


@dataclass(eq=False)
class DeploymentRun:
    """One run of one claimed deployment: its job, why it was stopped (if it was) and
    whether the previous revision serves, and the steps and events it writes — each
    under its deadline, each write to the store retried for a while. ``deps`` are the
    worker's, shared by its runs (``RunDeployment`` builds one run per job).

    ``stopping`` is why the run was stopped from inside berth (``CANCELED`` | ``LOST``,
    set by the lease keeper), or ``RESTORING`` while it puts the previous revision
    back; ``serving`` whether that revision serves after the run (``None``: the server
    was never touched).
    """

    job: Job
    deps: RunDependencies
    stopping: str | None = field(default=None, init=False)
    serving: bool | None = field(default=None, init=False)
    #: Events (and step entries) logged and not yet written, in order; each entry with
    #: whether it enters its step. One writer task writes them (``_write_journal``).
    _journal: list[tuple[DeploymentEvent, bool]] = field(default_factory=list, init=False)
    _writer: asyncio.Task[None] | None = field(default=None, init=False)
    _settled: bool = field(default=False, init=False)  # the end takes what is left

    @property
    def deployment_id(self) -> UUID:
        return self.job.deployment.id

    @property
    def stop_reason(self) -> str | None:
        """Why the run was stopped (``CANCELED`` | ``LOST``), or ``None`` (shutdown)."""
        return None if self.stopping == RESTORING else self.stopping

    async def persist(self, write: Callable[[], Awaitable[T]]) -> T:
        """``write()`` to the store, tried again with backoff: while the store is out of
        reach (``StoreUnavailable``) for as long as that lasts -- the lease's clock stands
        still meanwhile (``JobQueue.pause_leases``) -- and after any other error for up to
        ``store_patience`` seconds. A store that is gone for a while (a restart, a
        failover, a full disk) does not fail a deployment whose server work went fine. The
        lease keeper stops the run if the lease is lost meanwhile; a shutdown cancels it."""
        deadline = time.monotonic() + self.deps.store_patience
        delay = 0.05
        while True:
            try:
                return await write()
            except StoreUnavailable as exc:
                _write_retried.warn(error=type(exc).__name__, reason=exc.detail)
            except Exception as exc:  # the store's errors are the adapter's own types
                if time.monotonic() + delay > deadline:
                    raise
                _write_retried.warn(error=type(exc).__name__)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def pull(self, docker: ContainerRuntime, image: str) -> None:
        """Pull ``image`` for the job (``pulling.pull_image``): its registry credentials,
        its progress as events at a bounded rate, a failure that names its cause."""

        async def report(message: str) -> None:
            await self.event("pull", message)

        await pull_image(self.job, docker, image, report, interval=self.deps.progress_seconds)

    async def start_healthy(self, conn: ServerConnection, container_id: str) -> int:
        """Start the container and wait until it answers; the host port it answers on."""
        await self.enter("start", f"Starting container {container_id[:12]}.")
        await self.step("start", self.deps.timeouts.start, conn.docker.start(container_id))
        port = self.job.deployment.spec.port
        await self.enter("health", f"Waiting for port {port} to answer.")
        return await self.health(conn, container_id)

    async def checked(self, docker: ContainerRuntime, container_id: str, work: Awaitable[T]) -> T:
        """``work`` on the new container; if it fails the container goes (``discard``), if
        the run is stopped it is abandoned (``abandon``) -- unless the run's lease is
        another worker's now: that worker carries on with it."""
        try:
            return await work
        except StepFailed as failed:
            await self.discard(docker, container_id, failed)
            raise
        except asyncio.CancelledError:
            if self.stop_reason != LOST:
                await self.abandon(docker, container_id)
            raise

    async def discard(
        self, docker: ContainerRuntime, container_id: str, failed: StepFailed
    ) -> None:
        """Keep the failed container's last lines for the events, then remove it."""
        with contextlib.suppress(Exception):
            failed.logs = failed.logs or await docker.logs(container_id, LOG_LINES)
        with contextlib.suppress(Exception):
            await docker.remove(container_id)
            await self.event(failed.step, "Removed the container that failed.")

    async def abandon(self, docker: ContainerRuntime, container_id: str) -> None:
        """The run was stopped before its container was checked (canceled, shutdown):
        remove that container, within a bounded time, as a failure would."""
        with contextlib.suppress(Exception):
            async with asyncio.timeout(ABANDON_SECONDS):  # shutdown waits for this
                await docker.remove(container_id)

    async def health(self, conn: ServerConnection, container_id: str) -> int:
        """Wait until the container answers on its host port (by ``answered``); the port.
        Fails when it exits first, when the deadline passes, or early when its output has
        said for ``WRONG_PORT_SECONDS`` that it listens on another port (``_WrongPort``)."""
        wrong = _WrongPort(self.job)
        try:
            return await self._wait_healthy(conn, container_id, wrong)
        finally:
            wrong.close()

    async def _wait_healthy(
        self, conn: ServerConnection, container_id: str, wrong: _WrongPort
    ) -> int:
        job = self.job
        docker = conn.docker
        path = job.deployment.spec.health_path
        last: str | None = None
        answer: str | None = None  # the last probe's
        deadline = time.monotonic() + self.deps.timeouts.health
        delay = 0.05
        while True:
            state = await self.step("health", 15.0, docker.inspect(container_id))
            if state is None:
                raise StepFailed("health", "The container disappeared.")
            # With restart policy unless-stopped, a container that exits is "restarting"
            # (then briefly running again), never "exited": each is an exit before answering.
            if not state.running and state.status in ("exited", "dead", "restarting"):
                raise _unhealthy(
                    job,
                    f"The container exited with code {state.exit_code} before answering.",
                    await docker.logs(container_id, LOG_LINES),
                )
            port = host_port_of(state)
            before, answer = answer, None
            if port is not None:
                answer = await self.step("health", 5.0, conn.probe(port, path))
                if answered(answer, path, before):
                    what = f"GET {path} on port {port}" if path else f"Port {port}"
                    await self.event("health", f"{what} answered: {answer}.")
                    return port
                last = answer or last
            wrong.check(docker, container_id)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if path is None:
                    reason = (
                        f"Port {job.deployment.spec.port} did not answer within "
                        f"{self.deps.timeouts.health:g} s."
                    )
                else:
                    reason = (
                        f"GET {path} on port {job.deployment.spec.port} did not answer 2xx or "
                        f"3xx within {self.deps.timeouts.health:g} s"
                        + (f" (last answer: {last})." if last else ".")
                    )
                raise _unhealthy(job, reason, await docker.logs(container_id, LOG_LINES))
            await asyncio.sleep(min(delay, remaining))  # the last probe comes at the deadline
            delay = min(delay * 1.5, 0.5)

    async def step(self, step: str, seconds: float, work: Awaitable[T]) -> T:
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
            await self.deps.gateway.disconnect(self.job.server.id)
            raise StepFailed(step, f"The server is unreachable: {exc.detail}") from None

    async def proxy_step(self, step: str, seconds: float, work: Awaitable[T]) -> T:
        """Like ``step`` for a call to the proxy: a proxy that cannot be reached (Caddy
        stopped) says nothing about the connection, which Docker still uses."""
        try:
            async with asyncio.timeout(seconds):
                return await work
        except TimeoutError:
            raise StepFailed(step, f"The proxy did not answer within {seconds:g} s.") from None
        except (RuntimeFailure, ServerUnreachable) as exc:
            raise StepFailed(step, exc.detail) from None

    async def enter(self, step: str, message: str) -> None:
        """Enter ``step``, with ``message`` as its event (written as ``event`` says)."""
        self._log(step, message, enters=True)

    async def event(self, step: str, message: str) -> None:
        """Log ``message`` as an event of ``step``, stamped now. The run does not wait for
        the store: the run's writer writes its events in order, at once when it is idle,
        else those logged meanwhile together; what is left at the end goes with it
        (``settle``)."""
        self._log(step, message, enters=False)

    def _log(self, step: str, message: str, *, enters: bool) -> None:
        event = DeploymentEvent(at=self.deps.clock.now(), step=step, message=message)
        self._journal.append((event, enters))
        if not self._settled and (self._writer is None or self._writer.done()):
            self._writer = asyncio.create_task(self._write_journal())

    async def _write_journal(self) -> None:
        """Write the journal until it is empty: each write the entries logged so far, up
        to the first that enters a step (one step entry per write, its last event). A
        write the store refused for ``store_patience`` puts its entries back for the end.

        Its writes are of the ``journal`` lane (this task's own context): at SQLite's
        write lock they come after every write a run waits for (its image, its port, its
        end) and before the monitor's. Twenty runs' events had queued in the ``deploy``
        lane ahead of those; waiting, more events go in one write."""
        CALL_LANE.set("journal")
        jobs, worker = self.deps.jobs, self.deps.worker_id
        while self._journal and not self._settled:
            entries = self._journal
            cut = next((i + 1 for i, (_, enters) in enumerate(entries) if enters), len(entries))
            batch, self._journal = entries[:cut], entries[cut:]
            events = [event for event, _ in batch]
            step = events[-1].step if batch[-1][1] else None
            write = functools.partial(jobs.progress, self.deployment_id, worker, events, step=step)
            try:
                await self.persist(write)
            except Exception as exc:  # the store's: given up on; the end tries them again
                self._journal[:0] = batch
                log.warning("deployment_events_not_written", error=type(exc).__name__)
                return

    async def settle(self) -> tuple[tuple[DeploymentEvent, ...], str | None]:
        """Stop writing (after the write under way) and hand out the events not written,
        with the step the last of them entered if one did: for the run's end to write in
        its own transaction. Nothing logged later is written."""
        self._settled = True
        if self._writer is not None:
            await asyncio.wait([self._writer])  # never cancels it: a write is whole or not
        journal, self._journal = self._journal, []
        entered = [event.step for event, enters in journal if enters]
        return tuple(event for event, _ in journal), (entered[-1] if entered else None)

    def stop_writing(self) -> None:
        """Write nothing more, not even the write under way (berth is stopping)."""
        self._settled = True
        if self._writer is not None:
            self._writer.cancel()
