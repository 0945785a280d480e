"""``JobQueue``: one scripted job, its lease and what the worker reported."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from uuid import UUID

from berth.core.models import DeploymentEvent, DeploymentState, Ending, Job, TlsStatus
from berth.core.ports import CALL_LANE

from .fleet import FakeFleet

__all__ = ["FakeJobQueue"]


class FakeJobQueue:
    """A JobQueue for one worker's runs: records what the worker writes, in order.

    Like the SQL queue, nothing is written once the lease is lost (``held`` is
    false) or the deployment is finished: such writes land in ``dropped``.
    """

    def __init__(self, jobs: Iterable[Job] = (), fleet: FakeFleet | None = None) -> None:
        self.paused: list[tuple[datetime, datetime]] = []  # what pause_leases was told
        self.queued = list(jobs)
        self.fleet = fleet  # the same store: a recorded host port changes the fleet's routes
        self._known: dict[UUID, Job] = {j.deployment.id: j for j in self.queued}
        self.held = True
        self.writes: list[tuple[str, str, str]] = []  # (kind, step, message): "step" | "event"
        self.progress_writes = 0  # writes of events (``progress``), the end's not counted
        self.progress_lanes: list[str] = []  # the ``CALL_LANE`` of each of those writes
        self.write_gate: asyncio.Event | None = None  # set: ``progress`` waits for it
        self.dropped: list[tuple[str, str, str]] = []
        self.finished: list[tuple[DeploymentState, str | None, str]] = []
        self.host_ports: list[int | None] = []
        self.tls: list[TlsStatus] = []
        self.serving: list[bool | None] = []  # what each finish said of the previous revision
        self.image_ids: list[str] = []
        self.commits: list[str] = []
        self.cancel = False  # the user asked the running deployment to stop
        self.cancel_checks = 0
        self.failing_writes = 0  # the next this many writes raise, as a store outage would
        self.renewals = 0
        self.claim_limits: list[int] = []  # the ``limit`` of each claim
        self.claim_lanes: list[str] = []  # the ``CALL_LANE`` of each claim
        self.expires = 0  # passes over expired deployments

    @property
    def steps(self) -> list[str]:
        return [step for kind, step, _ in self.writes if kind == "step"]

    @property
    def events(self) -> list[str]:
        """Every message written, steps' and events', in order."""
        return [message for _, _, message in self.writes]

    def _holds(self) -> bool:
        return self.held and not self.finished

    def track(self, job: Job) -> None:
        """Know a job handed to the worker directly, as if it had been claimed."""
        self._known[job.deployment.id] = job
        if self.fleet is not None:
            self.fleet.hold(job)

    async def claim(
        self,
        worker_id: str,
        now: datetime,
        lease_until: datetime,
        *,
        running: Collection[UUID] = (),
    ) -> Job | None:
        jobs = await self.claim_many(worker_id, now, lease_until, limit=1, running=running)
        return jobs[0] if jobs else None

    async def claim_many(
        self,
        worker_id: str,
        now: datetime,
        lease_until: datetime,
        *,
        limit: int,
        running: Collection[UUID] = (),
    ) -> list[Job]:
        self.claim_limits.append(limit)
        self.claim_lanes.append(CALL_LANE.get())
        jobs = self.take(limit, running)
        for job in jobs:
            self.track(job)
        return jobs

    def take(self, limit: int, running: Collection[UUID]) -> list[Job]:
        """The jobs a claim hands out: the first ``limit`` queued (a test may script others)."""
        jobs, self.queued = self.queued[:limit], self.queued[limit:]
        return jobs

    async def renew(self, deployment_id: UUID, worker_id: str, lease_until: datetime) -> bool:
        self.renewals += 1
        return self._holds()

    async def cancel_requested(self, deployment_id: UUID) -> bool:
        self.cancel_checks += 1
        return self.cancel

    async def set_image_id(
        self, deployment_id: UUID, worker_id: str, image_id: str, commit: str | None = None
    ) -> None:
        self._outage()
        if self._holds():
            self.image_ids.append(image_id)
            if commit is not None:
                self.commits.append(commit)

    def _outage(self) -> None:
        if self.failing_writes > 0:
            self.failing_writes -= 1
            raise ConnectionError("the store is unreachable")

    async def progress(
        self,
        deployment_id: UUID,
        worker_id: str,
        events: Sequence[DeploymentEvent],
        *,
        step: str | None = None,
    ) -> None:
        self._outage()
        if self.write_gate is not None:  # the store is slow to answer until the test opens it
            await self.write_gate.wait()
        self.progress_writes += 1
        self.progress_lanes.append(CALL_LANE.get())
        self._record(events, step, self.writes if self._holds() else self.dropped)

    @staticmethod
    def _record(
        events: Sequence[DeploymentEvent], step: str | None, into: list[tuple[str, str, str]]
    ) -> None:
        """``events`` as ``(kind, step, message)``: the last one a "step" if it enters one."""
        for n, event in enumerate(events, 1):
            enters = step is not None and n == len(events)
            into.append(("step" if enters else "event", event.step, event.message))

    async def finish(
        self, deployment_id: UUID, worker_id: str, ending: Ending, *, serving: bool | None = None
    ) -> bool:
        state, error, message = ending.state, ending.error, ending.message
        self._outage()
        if not state.is_final:
            raise ValueError(f"{state} is not a final state")
        if not self._holds():
            self._record(ending.events, ending.step, self.dropped)
            self.dropped.append(("finish", state.value, message))
            return False
        self._record(ending.events, ending.step, self.writes)
        self.finished.append((state, error, message))
        self.serving.append(serving)
        return True

    async def set_host_port(self, deployment_id: UUID, host_port: int | None) -> None:
        self.host_ports.append(host_port)
        job = self._known.get(deployment_id)
        if self.fleet is not None and job is not None:
            self.fleet.record_port(job.installation_id, host_port)

    async def record_tls(self, deployment_id: UUID, tls: TlsStatus) -> None:
        self.tls.append(tls)

    async def expire(self, now: datetime) -> list[tuple[UUID, DeploymentState]]:
        self.expires += 1
        return []

    async def pause_leases(self, since: datetime, now: datetime) -> bool:
        self.paused.append((since, now))
        return True
