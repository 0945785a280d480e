"""The worker's loop (``Background``) and the leases of the runs it has going."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Collection
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from berth.core.bus import MessageBus
from berth.core.events import DeploymentFinished, DeploymentQueued
from berth.core.models import DeploymentState, Job
from berth.entrypoints.worker.runner import Background
from fakes import FakeClock, FakeJobQueue
from test_run_deployment import a_job, a_server


class ExpiringQueue(FakeJobQueue):
    """One deployment whose lease the test lets run out: once ``expired``, a claim takes
    it over (one more attempt), as the SQL queue does -- unless it is one of the claiming
    worker's ``running``."""

    def __init__(self, job: Job) -> None:
        super().__init__()
        self.job = job
        self.claimed = False
        self.expired = False
        self.claims = 0
        self.attempts = 0

    def take(self, limit: int, running: Collection[UUID]) -> list[Job]:
        self.claims += 1
        if self.claimed and not (self.expired and self.job.deployment.id not in running):
            return []
        self.claimed, self.expired = True, False
        self.attempts += 1
        return [self.job]


async def _until(condition: Any, what: str) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not reached within 5 s: {what}")


class CountingMonitor:
    """A monitor that counts its passes over the fleet and records what it rechecks."""

    def __init__(self) -> None:
        self.passes = 0
        self.rechecked: list[set[UUID]] = []

    async def __call__(self) -> None:
        self.passes += 1

    async def recheck(self, server_ids: Collection[UUID]) -> None:
        self.rechecked.append(set(server_ids))


Run = Callable[[Job], Any]


@asynccontextmanager
async def _running(
    queue: FakeJobQueue,
    run: Run,
    *,
    monitor: Any = None,
    bus: MessageBus | None = None,
    **options: Any,
) -> AsyncIterator[Background]:
    """A started ``Background`` over ``queue`` that runs each job with ``run`` (a
    ``CountingMonitor`` and a bus of its own unless given; polls and passes hourly unless
    ``options`` say otherwise), stopped on the way out."""
    background = Background(
        queue,
        FakeClock(),
        lambda worker_id: run,
        monitor if monitor is not None else CountingMonitor(),
        bus if bus is not None else MessageBus(),
        **{"poll_seconds": 3600, "monitor_seconds": 3600, **options},
    )
    await background.start()
    try:
        yield background
    finally:
        await background.stop()


def _announce_queued(bus: MessageBus, job: Job) -> None:
    bus.publish(
        DeploymentQueued(
            deployment_id=job.deployment.id,
            installation_id=job.installation_id,
            server_id=job.server.id,
        )
    )


async def test_a_lease_that_ran_out_is_not_taken_over_while_its_run_goes_on() -> None:
    """A run whose lease ran out (renewals late on a busy machine) is not claimed again by
    its own worker beside it -- two runs of one deployment would undo each other's
    containers; once that run ended without finishing the deployment, it is."""
    queue = ExpiringQueue(a_job(a_server()))
    started: list[int] = []
    release = asyncio.Event()

    async def run(job: Job) -> DeploymentState:
        started.append(queue.attempts)
        await release.wait()
        raise RuntimeError("the store went away for longer than the lease")

    async def monitor() -> None:
        return None

    async with _running(queue, run, monitor=monitor, poll_seconds=0.01):
        try:
            await _until(lambda: started == [1], "the first run started")
            queue.expired = True
            claims = queue.claims
            await _until(lambda: queue.claims >= claims + 5, "five more claims")
            assert started == [1]
            assert queue.attempts == 1
            release.set()  # the run ends (crashes) with its deployment unfinished
            await _until(lambda: started == [1, 2], "the deployment taken over")
        finally:
            release.set()


async def test_a_deployment_that_ended_has_its_server_rechecked_not_the_fleet() -> None:
    """When a deployment ends, the monitor checks its server alone soon after, not every
    server (a pass over a thousand per deployment starved the others); a pass asked for
    (``check_servers``) still covers the fleet."""
    job = a_job(a_server())
    monitor = CountingMonitor()
    bus = MessageBus()
    async with _running(ExpiringQueue(job), _never_run, monitor=monitor, bus=bus) as background:
        await _until(lambda: monitor.passes == 1, "the first pass")
        bus.publish(
            DeploymentFinished(
                deployment_id=job.deployment.id,
                owner_id=job.owner_id,
                installation_id=job.deployment.installation_id,
                server_id=job.server.id,
                state=DeploymentState.SUCCEEDED,
                at=datetime.now(UTC),
            )
        )
        await _until(lambda: monitor.rechecked == [{job.server.id}], "the server rechecked")
        assert monitor.passes == 1
        background.check_servers()
        await _until(lambda: monitor.passes == 2, "a pass asked for")


async def _never_run(job: Job) -> DeploymentState:
    await asyncio.Event().wait()
    return DeploymentState.FAILED


class LateQueue(FakeJobQueue):
    """Nothing to claim at the first claim; a deployment is queued, and announced on the
    bus, while that claim is being answered (another request's commit meanwhile)."""

    def __init__(self, job: Job, bus: MessageBus) -> None:
        super().__init__()
        self.job = job
        self.bus = bus
        self.claims = 0

    def take(self, limit: int, running: Collection[UUID]) -> list[Job]:
        self.claims += 1
        if self.queued:
            return [self.queued.pop()]
        if self.claims == 1:
            self.queued.append(self.job)
            _announce_queued(self.bus, self.job)
        return []


async def test_a_deployment_queued_while_a_claim_is_answered_is_claimed_without_a_poll() -> None:
    """A deployment announced while the worker's claim found nothing is claimed at once,
    not at the next poll: the wake-up is not lost."""
    bus = MessageBus()
    job = a_job(a_server())
    started: list[Job] = []

    async def run(job: Job) -> DeploymentState:
        started.append(job)
        return DeploymentState.SUCCEEDED

    async with _running(LateQueue(job, bus), run, bus=bus):
        await _until(lambda: started == [job], "the deployment queued meanwhile started")


async def test_a_worker_fills_its_free_slots_with_one_claim() -> None:
    """Deployments waiting while slots are free are claimed together, up to the free
    slots, in one claim (not one claim per slot), in the claim lane; a slot freed later
    is filled again."""
    server = a_server()
    jobs = [a_job(server) for _ in range(5)]
    queue = FakeJobQueue(jobs)
    started: list[Job] = []
    release = asyncio.Event()

    async def run(job: Job) -> DeploymentState:
        started.append(job)
        if len(started) == 1:
            return DeploymentState.SUCCEEDED  # the first ends at once: its slot is free again
        await release.wait()
        return DeploymentState.SUCCEEDED

    async with _running(queue, run, concurrency=3):
        try:
            await _until(lambda: len(started) == 4, "a fourth run in the slot the first freed")
            assert started == jobs[:4]
            assert queue.claim_limits[:2] == [3, 1]
            assert set(queue.claim_lanes) == {"claim"}  # its write goes first at the store
        finally:
            release.set()


async def test_a_queued_deployment_is_claimed_without_an_expiry_pass_first() -> None:
    """A deployment queued in this process is claimed as soon as it is told of: the pass
    that ends expired deployments runs once per poll interval, not before every claim (a
    write of its own in front of each deployment)."""
    job = a_job(a_server())
    queue = FakeJobQueue()
    ran: list[Job] = []

    async def run(job: Job) -> DeploymentState:
        ran.append(job)
        return DeploymentState.SUCCEEDED

    bus = MessageBus()
    async with _running(queue, run, bus=bus):
        await _until(lambda: queue.expires == 1, "the first pass")
        queue.queued.append(job)
        _announce_queued(bus, job)
        await _until(lambda: ran == [job], "the queued deployment run")
        assert queue.expires == 1
