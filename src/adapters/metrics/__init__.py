"""berth's metrics in Prometheus' text format, with prometheus-client.

Two kinds of numbers, on purpose:

* counted by this process (``PrometheusMetrics``): API requests by route template and
  status, the duration of each deployment step this process's worker ran, the leases
  it took over. A scrape of each process adds up across replicas, as Prometheus does.
* read from the store at scrape time (``render(counts)``): deployments by final
  state, servers by status, the queue's depth and the age of its oldest entry. Every
  replica reports the same values, however many there are.

``MeteredJobQueue`` wraps a ``JobQueue`` to time the steps and count the takeovers of
the runs it hands out, so the core needs to know nothing about metrics.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterator, Sequence
from datetime import datetime
from uuid import UUID

from berth.core.models import (
    DeploymentEvent,
    DeploymentState,
    Ending,
    Job,
    StoreCounts,
    TlsStatus,
)
from berth.core.ports import JobQueue
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

__all__ = ["CONTENT_TYPE", "MeteredJobQueue", "PrometheusMetrics"]

#: The text format generate_latest writes (Litestar adds the charset).
CONTENT_TYPE = "text/plain; version=0.0.4"

#: Seconds: a step takes from milliseconds (create) to minutes (a large pull).
_STEP_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

_FINAL = [s for s in DeploymentState if s.is_final]


class PrometheusMetrics:
    """This process's counters and histograms, in a registry of its own (not the
    library's global one: two berths in one process keep apart)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._requests = Counter(
            "berth_http_requests",
            "API and dashboard requests answered by this process, by route template "
            "(unmatched: no route) and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        #: Each label set's child as ``labels`` gave it once (it checks and locks on every
        #: call, a few microseconds per request); the registry holds them all anyway.
        self._request_counts: dict[tuple[str, str | None, int], Counter] = {}
        self._steps = Histogram(
            "berth_deployment_step_duration_seconds",
            "Time a deployment spent in each step, as run by this process's worker.",
            ["step"],
            buckets=_STEP_BUCKETS,
            registry=self.registry,
        )
        self._takeovers = Counter(
            "berth_lease_takeovers",
            "Running deployments this process's worker took over after their worker's "
            "lease expired.",
            registry=self.registry,
        )

    def request(self, method: str, route: str | None, status: int) -> None:
        """Count one answered request; ``route`` is its template, ``None`` when none
        matched (an unknown path must not make a label of its own)."""
        key = (method, route, status)
        child = self._request_counts.get(key)
        if child is None:
            child = self._request_counts[key] = self._requests.labels(
                method, route or "unmatched", str(status)
            )
        child.inc()

    def step(self, step: str, seconds: float) -> None:
        self._steps.labels(step).observe(seconds)

    def takeover(self) -> None:
        self._takeovers.inc()

    def render(self, counts: StoreCounts, now: datetime) -> bytes:
        """The whole exposition: this process's metrics, then the store's ``counts``."""
        store = CollectorRegistry(auto_describe=False)
        store.register(_StoreCollector(counts, now))
        return generate_latest(self.registry) + generate_latest(store)


class _StoreCollector(Collector):
    def __init__(self, counts: StoreCounts, now: datetime) -> None:
        self._counts = counts
        self._now = now

    def collect(self) -> Iterator[Metric]:
        c = self._counts
        finished = GaugeMetricFamily(
            "berth_deployments_finished",
            "Deployments in each final state, as stored (the same on every replica).",
            labels=["state"],
        )
        for state in _FINAL:
            finished.add_metric([state.value], c.deployments.get(state, 0))
        yield finished
        servers = GaugeMetricFamily(
            "berth_servers", "Servers by status, as stored.", labels=["status"]
        )
        for status, count in sorted(c.servers.items()):
            servers.add_metric([status.value], count)
        yield servers
        yield GaugeMetricFamily(
            "berth_queue_depth",
            "Deployments queued and not yet claimed by a worker.",
            value=c.queued,
        )
        age = 0.0
        if c.oldest_queued_at is not None:
            age = max(0.0, (self._now - c.oldest_queued_at).total_seconds())
        yield GaugeMetricFamily(
            "berth_queue_oldest_age_seconds",
            "Age of the oldest queued deployment (0 when none is queued).",
            value=age,
        )
        yield GaugeMetricFamily(
            "berth_deployments_running",
            "Deployments a worker is running now.",
            value=c.deployments.get(DeploymentState.RUNNING, 0),
        )


class MeteredJobQueue:
    """A ``JobQueue`` that times each step of the runs it hands out (from entering it
    to entering the next, or to the end) and counts the runs taken over."""

    def __init__(self, inner: JobQueue, metrics: PrometheusMetrics) -> None:
        self._inner = inner
        self._metrics = metrics
        self._entered: dict[UUID, tuple[str, float]] = {}  # deployment → (step, since)

    def _close_step(self, deployment_id: UUID) -> None:
        entered = self._entered.pop(deployment_id, None)
        if entered is not None:
            step, since = entered
            self._metrics.step(step, time.monotonic() - since)

    async def claim(
        self,
        worker_id: str,
        now: datetime,
        lease_until: datetime,
        *,
        running: Collection[UUID] = (),
    ) -> Job | None:
        job = await self._inner.claim(worker_id, now, lease_until, running=running)
        if job is not None and job.deployment.attempts > 1:
            self._metrics.takeover()
        return job

    async def claim_many(
        self,
        worker_id: str,
        now: datetime,
        lease_until: datetime,
        *,
        limit: int,
        running: Collection[UUID] = (),
    ) -> list[Job]:
        jobs = await self._inner.claim_many(
            worker_id, now, lease_until, limit=limit, running=running
        )
        for job in jobs:
            if job.deployment.attempts > 1:
                self._metrics.takeover()
        return jobs

    async def cancel_requested(self, deployment_id: UUID) -> bool:
        return await self._inner.cancel_requested(deployment_id)

    async def set_image_id(
        self, deployment_id: UUID, worker_id: str, image_id: str, commit: str | None = None
    ) -> None:
        await self._inner.set_image_id(deployment_id, worker_id, image_id, commit)

    async def renew(self, deployment_id: UUID, worker_id: str, lease_until: datetime) -> bool:
        return await self._inner.renew(deployment_id, worker_id, lease_until)

    async def progress(
        self,
        deployment_id: UUID,
        worker_id: str,
        events: Sequence[DeploymentEvent],
        *,
        step: str | None = None,
    ) -> None:
        await self._inner.progress(deployment_id, worker_id, events, step=step)
        if step is not None:
            self._enter(deployment_id, step)

    def _enter(self, deployment_id: UUID, step: str) -> None:
        self._close_step(deployment_id)
        self._entered[deployment_id] = (step, time.monotonic())

    async def finish(
        self, deployment_id: UUID, worker_id: str, ending: Ending, *, serving: bool | None = None
    ) -> bool:
        """``JobQueue.finish``, passed on; then the last step's time is taken (a step the
        end's own events entered counts from the end's write)."""
        done = await self._inner.finish(deployment_id, worker_id, ending, serving=serving)
        if ending.step is not None:
            self._enter(deployment_id, ending.step)
        self._close_step(deployment_id)
        return done

    async def set_host_port(self, deployment_id: UUID, host_port: int | None) -> None:
        await self._inner.set_host_port(deployment_id, host_port)

    async def record_tls(self, deployment_id: UUID, tls: TlsStatus) -> None:
        await self._inner.record_tls(deployment_id, tls)

    async def expire(self, now: datetime) -> list[tuple[UUID, DeploymentState]]:
        return await self._inner.expire(now)

    async def pause_leases(self, since: datetime, now: datetime) -> bool:
        return await self._inner.pause_leases(since, now)
