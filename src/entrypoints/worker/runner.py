"""Background loops: claim and run deployments; watch servers; deliver webhooks.

``berth serve`` runs them in-process (unless ``--no-worker``: then nothing here runs,
and that process never connects to a server on its own); ``berth worker`` runs them
alone. Several workers may share one database: claims are atomic and leased, so each
deployment runs once, each server is watched by one worker (its ``FleetShare``) and
each webhook delivery is attempted by one worker at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable, Collection
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable
from uuid import UUID

import structlog
from berth.core.bus import MessageBus
from berth.core.errors import StoreUnavailable
from berth.core.events import DeploymentFinished, DeploymentQueued, ServerRegistered
from berth.core.models import DeploymentState, Job, Server
from berth.core.outages import ThrottledWarning
from berth.core.ports import CALL_LANE, Clock, JobQueue

__all__ = ["Background"]

log = structlog.get_logger()

# While the database is down the loops fail at every pass: a warning per interval.
_store_down = ThrottledWarning("background_store_unavailable")

AFTER_FINISH_SECONDS = 0.25
#: How often the background forgets audit entries past ``BERTH_AUDIT_DAYS``.
PRUNE_EVERY_SECONDS = 3600.0

#: Runs a claimed deployment to its final state (``RunDeployment``).
Run = Callable[[Job], Awaitable[DeploymentState]]
#: One pass of the monitor over every server (``MonitorServers``).
Pass = Callable[[], Awaitable[None]]
#: One pass over the outbox; how many deliveries it attempted (``DeliverWebhooks``).
Deliver = Callable[[], Awaitable[int]]


async def _woken(event: asyncio.Event, seconds: float) -> None:
    """Wait until ``event`` is set, or for ``seconds`` at the most (a loop's nap)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()


class Share(Protocol):
    """This worker's share of the fleet (``FleetShare``): renewed, taken and given back
    at each ``beat``."""

    worker_id: str

    async def beat(
        self, busy: Callable[[], Collection[UUID]]
    ) -> tuple[int, list[UUID]]: ...  # taken, given back

    async def leave(self) -> None: ...


@runtime_checkable
class Rechecking(Protocol):
    """A monitor that checks a few servers on request (``MonitorServers.recheck``)."""

    async def recheck(self, server_ids: Collection[UUID]) -> None: ...


@runtime_checkable
class Watching(Protocol):
    """What a monitor tells its share (``MonitorServers``): the servers it is checking
    now, and forgetting those given back."""

    @property
    def checking(self) -> frozenset[UUID]: ...

    async def forget(self, server_ids: Collection[UUID]) -> None: ...


class RunsHere(Protocol):
    """Told which deployments this process runs (``Waiters``): a waiter on one of them
    is woken when its run ends, and reads the store meanwhile only now and then."""

    def running(self, deployment_id: UUID) -> AbstractContextManager[None]: ...


class Background:
    """The worker and the monitor, as tasks started and stopped with the app."""

    def __init__(
        self,
        jobs: JobQueue,
        clock: Clock,
        run_factory: Callable[[str], Run],
        monitor: Pass,
        bus: MessageBus,
        *,
        share: Share | None = None,
        beat_seconds: float = 2.0,
        ensure_local: Callable[[], Awaitable[Server | None]] | None = None,
        prune_audit: Callable[[], Awaitable[int]] | None = None,
        deliver_factory: Callable[[str], Deliver] | None = None,
        lease: timedelta = timedelta(seconds=15),
        concurrency: int = 8,
        poll_seconds: float = 1.0,
        monitor_seconds: float = 5.0,
        delivery_poll_seconds: float = 1.0,
        waiters: RunsHere | None = None,
    ) -> None:
        self.worker_id = share.worker_id if share else f"worker-{uuid.uuid4().hex[:12]}"
        self._share = share
        self._beat_every = beat_seconds
        self._jobs = jobs
        self._clock = clock
        self._run = run_factory(self.worker_id)
        self._waiters = waiters  # the API's of this process (``?wait``), if it has one
        self._monitor = monitor
        self._bus = bus
        self._work = asyncio.Event()  # set: look for work now, not at the next poll
        bus.subscribe(DeploymentQueued, lambda _: self._work.set())
        bus.subscribe(ServerRegistered, lambda _: self.check_servers())
        self._ensure_local = ensure_local
        self._prune_audit = prune_audit
        self._pruned_at: float | None = None  # loop time of the last pruning
        self._lease = lease
        self._concurrency = concurrency
        self._poll = poll_seconds
        self._monitor_every = monitor_seconds
        self._tasks: set[asyncio.Task[object]] = set()
        # The deployments this worker is running, and the server of each: a lease of one of
        # them that ran out (a renewal late on a busy machine) is not taken over here -- the
        # run goes on; a server deployed to keeps its connection when given away.
        self._servers: dict[UUID, UUID] = {}
        self._loops: list[asyncio.Task[None]] = []
        self._monitor_pass = asyncio.Event()  # set: the monitor has work now
        self._full_pass = True  # ... a pass over the fleet (else only ``_recheck``)
        self._recheck: set[UUID] = set()  # servers whose deployment just ended
        self._stopping = asyncio.Event()
        self._monitor_task: asyncio.Task[None] | None = None
        self._deliver = deliver_factory(self.worker_id) if deliver_factory else None
        self._delivery_poll = delivery_poll_seconds
        self._deliveries_due = asyncio.Event()  # set: look at the outbox now
        bus.subscribe(DeploymentFinished, self._finished)

    async def start(self) -> None:
        """Start the loops; the first beat of the share first (bounded), so that the first
        monitor pass already watches this worker's servers."""
        if self._share is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self._beat_every * 2):
                    await self._beat()
            self._loops.append(asyncio.create_task(self._beat_loop(), name="berth-share"))
        self._monitor_task = asyncio.create_task(self._monitor_loop(), name="berth-monitor")
        self._loops.append(self._monitor_task)
        self._loops.append(asyncio.create_task(self._worker_loop(), name="berth-worker"))
        if self._deliver is not None:
            self._loops.append(asyncio.create_task(self._delivery_loop(), name="berth-webhooks"))
        log.info("background_started", worker_id=self.worker_id)

    def deploying_to(self, server_id: UUID) -> bool:
        """Whether a deployment this worker runs is on ``server_id`` (its connection is
        kept when the server is given to another worker's watch)."""
        return server_id in self._servers.values()

    async def stop(self) -> None:
        """Stop claiming; let running deployments finish for a moment, then cancel them.

        A canceled run puts the previous revision back and ends ``failed`` as
        interrupted (``RunDeployment``); one that cannot write that keeps its lease until
        it expires and is then taken over by another worker (or this one, restarted). A
        monitor pass under way may finish (up to 5 s), so it is not cut off in the middle
        of a database statement.
        """
        self._stopping.set()
        self._monitor_pass.set()
        if self._monitor_task is not None:
            await asyncio.wait([self._monitor_task], timeout=5)
        for loop in self._loops:
            loop.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5)
        for task in list(self._tasks) + self._loops:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._loops, return_exceptions=True)
        if self._share is not None:  # its servers are free to take at once, not in 10 s
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2):
                    await self._share.leave()

    def check_servers(self) -> None:
        """Start a monitor pass now (registering this machine under ``--local``), not at
        the next tick; a pass under way is followed by another."""
        self._full_pass = True
        self._monitor_pass.set()

    def _finished(self, ended: DeploymentFinished) -> None:
        """A deployment ended (committed in this process): its webhooks' deliveries are
        due, and a fresh container list of its server soon -- that server's alone (a pass
        over the fleet per deployment would keep the event loop from the others still
        running), after the waiters it woke have answered: a check at once would take the
        event loop from their responses."""
        self._deliveries_due.set()
        self._recheck.add(ended.server_id)
        asyncio.get_running_loop().call_later(AFTER_FINISH_SECONDS, self._monitor_pass.set)

    async def _worker_loop(self) -> None:
        """Claim what can run, at each wake (a deployment queued or ended here) and every
        ``poll_seconds``; the deployments no worker will carry on are ended once per
        ``poll_seconds`` at most, not before every claim (a write in front of each)."""
        CALL_LANE.set("deploy")  # claims are a deployment's: its lane, ahead of the monitor
        loop = asyncio.get_running_loop()
        reached = self._clock.now()  # when this loop last had the store answer
        lost: datetime | None = None  # since when it has not (the store is out of reach)
        expired_at: float | None = None  # loop time of the last pass over expired ones
        while True:
            # Before looking, not after: a deployment queued while a claim is answered
            # sets it again, and is claimed at once rather than at the next poll.
            self._work.clear()
            try:
                if lost is not None:  # back: the leases' clocks stood still meanwhile
                    await self._jobs.pause_leases(lost, self._clock.now())
                    lost = None
                if expired_at is None or loop.time() - expired_at >= self._poll:
                    await self._expire()
                    expired_at = loop.time()
                while await self._claim():
                    pass
                reached = self._clock.now()
            except StoreUnavailable as exc:
                lost = lost or reached
                _store_down.warn(loop="worker", reason=exc.detail)
            except Exception:
                log.exception("worker_loop_error")
            await _woken(self._work, self._poll)

    async def _expire(self) -> None:
        expired = await self._jobs.expire(self._clock.now())
        for deployment_id, state in expired:  # each recorded as DeploymentFinished
            log.warning("deployment_expired", deployment_id=str(deployment_id), state=state.value)

    async def _claim(self) -> bool:
        """Claim as many deployments as this worker has free slots, in one transaction
        (``claim_many``), and start each; whether it filled them all (more may be
        waiting). With no slot free it claims nothing: a run's end wakes the loop."""
        free = self._concurrency - len(self._servers)
        if free <= 0:
            return False
        now = self._clock.now()
        lane = CALL_LANE.set("claim")  # ahead of every other writer at the store
        try:
            jobs = await self._jobs.claim_many(
                self.worker_id, now, now + self._lease, limit=free, running=frozenset(self._servers)
            )
        finally:
            CALL_LANE.reset(lane)
        claimed = self._clock.now()
        for job in jobs:
            self._servers[job.deployment.id] = job.server.id
            log.info(
                "deployment_claimed",
                deployment_id=str(job.deployment.id),
                queued_seconds=round((claimed - job.deployment.created_at).total_seconds(), 3),
                claim_seconds=round((claimed - now).total_seconds(), 3),
                batch=len(jobs),
            )
            task = asyncio.create_task(self._execute(job), name=f"deploy-{job.deployment.id}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return len(jobs) == free

    async def _execute(self, job: Job) -> None:
        try:
            with (
                structlog.contextvars.bound_contextvars(deployment_id=str(job.deployment.id)),
                self._waiters.running(job.deployment.id) if self._waiters else nullcontext(),
            ):
                await self._run(job)
        except StoreUnavailable as exc:  # a known outage: no traceback; its lease expires
            _store_down.warn(loop="deployment", reason=exc.detail)
        except Exception:
            log.exception("deployment_crashed", deployment_id=str(job.deployment.id))
        finally:
            self._servers.pop(job.deployment.id, None)
            self._work.set()  # a slot is free

    async def _beat_loop(self) -> None:
        """Keep this worker's lease on its servers, take its fair share, give back the
        rest (``FleetShare.beat``); a pass comes at once when it took servers."""
        while not self._stopping.is_set():
            await _woken(self._stopping, self._beat_every)
            if self._stopping.is_set():
                return
            try:
                await self._beat()
            except StoreUnavailable as exc:
                _store_down.warn(loop="share", reason=exc.detail)
            except Exception:
                log.exception("share_loop_error")

    async def _beat(self) -> None:
        assert self._share is not None
        monitor = self._monitor if isinstance(self._monitor, Watching) else None
        busy = (lambda: monitor.checking) if monitor is not None else frozenset
        taken, released = await self._share.beat(busy)
        if released and monitor is not None:
            await monitor.forget(released)
        if taken:
            self.check_servers()

    async def _monitor_loop(self) -> None:
        """A pass over the fleet every ``monitor_seconds`` (from the end of the last) or
        when asked (``check_servers``); between them, the servers of the deployments that
        ended (``_finished``), alone, when the monitor can check a few."""
        loop = asyncio.get_running_loop()
        rechecks = self._monitor if isinstance(self._monitor, Rechecking) else None
        next_pass = loop.time()
        while not self._stopping.is_set():
            self._monitor_pass.clear()  # before the pass: a request during it is kept
            full = self._full_pass or loop.time() >= next_pass or rechecks is None
            recheck, self._recheck = self._recheck, set()
            if full:
                self._full_pass = False
            try:
                if full:
                    if self._ensure_local is not None:
                        await self._ensure_local()
                    await self._prune_if_due()
                    await self._monitor()
                elif recheck and rechecks is not None:
                    await rechecks.recheck(recheck)
                self._work.set()  # a server may have come online
                self._deliveries_due.set()  # ... or gone offline: the outbox has news
            except StoreUnavailable as exc:
                _store_down.warn(loop="monitor", reason=exc.detail)
            except Exception:
                log.exception("monitor_loop_error")
            if full:
                next_pass = loop.time() + self._monitor_every
            if self._stopping.is_set():
                return
            await _woken(self._monitor_pass, max(0.0, next_pass - loop.time()))

    async def _prune_if_due(self) -> None:
        """Forget the audit entries past ``BERTH_AUDIT_DAYS``: at start, then hourly."""
        now = asyncio.get_running_loop().time()
        if self._prune_audit is None or (
            self._pruned_at is not None and now - self._pruned_at < PRUNE_EVERY_SECONDS
        ):
            return
        self._pruned_at = now
        await self._prune_audit()

    async def _delivery_loop(self) -> None:
        """Attempt the webhook deliveries that are due, then wait for more (a poll, or a
        deployment ending here). A pass cut short by ``stop`` leaves its deliveries
        leased: they are attempted again once the lease runs out (at least once)."""
        assert self._deliver is not None
        while not self._stopping.is_set():
            self._deliveries_due.clear()
            try:
                if await self._deliver():
                    continue  # a full batch, or retries made due by it: look again now
            except StoreUnavailable as exc:
                _store_down.warn(loop="webhooks", reason=exc.detail)
            except Exception:
                log.exception("webhook_loop_error")
            await _woken(self._deliveries_due, self._delivery_poll)
