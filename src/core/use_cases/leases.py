"""Keeping a running deployment's lease, and stopping the run where it stands when it is lost.

The worker that claimed a deployment holds it for ``lease``; it renews every third
of that while the run goes on. A renewal that fails (the store busy or briefly gone)
is tried again at the next interval: only the store saying the lease is someone
else's stops the run.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import structlog

from ..models import Job
from ..ports import Clock, JobQueue

__all__ = ["LeaseKeeper"]

log = structlog.get_logger()


class LeaseKeeper:
    """Renews ``worker``'s leases on ``jobs`` until a run ends or its lease is lost."""

    def __init__(self, jobs: JobQueue, clock: Clock, worker: str, lease: timedelta) -> None:
        self._jobs = jobs
        self._clock = clock
        self._worker = worker
        self._lease = lease

    async def keep(self, job: Job, run: asyncio.Task[Any], lost: asyncio.Event) -> None:
        """Renew until ``run`` is done; if the lease is lost, set ``lost`` and cancel ``run``."""
        interval = self._lease.total_seconds() / 3
        while True:
            await asyncio.sleep(interval)
            if run.done():
                return
            try:
                held = await self._jobs.renew(
                    job.deployment.id, self._worker, self._clock.now() + self._lease
                )
            except Exception as exc:  # any store error: retry at the next interval
                log.warning(
                    "deployment_lease_renewal_failed",
                    deployment_id=str(job.deployment.id),
                    error=type(exc).__name__,
                )
                continue
            if not held:
                lost.set()
                run.cancel()
                return
