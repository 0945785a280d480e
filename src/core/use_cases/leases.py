"""Keeping a running deployment's lease, and stopping the run where it stands when it is
lost or the user cancels it.

The worker that claimed a deployment holds it for ``lease``; it renews every third
of that while the run goes on. A renewal that fails (the store busy or briefly gone)
is tried again at the next interval: only the store saying the lease is someone
else's stops the run. Between renewals it asks, every ``CANCEL_CHECK_SECONDS`` (or
sooner for a short lease), whether a cancel was requested: a cancel stops the run
within about a second.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import structlog

from ..ports import Clock, JobQueue
from .steps import CANCELED, LOST, RESTORING, DeploymentRun

__all__ = ["CANCEL_CHECK_SECONDS", "LeaseKeeper"]

CANCEL_CHECK_SECONDS = 0.5

log = structlog.get_logger()


class LeaseKeeper:
    """Renews ``worker``'s leases on ``jobs`` until a run ends or its lease is lost."""

    def __init__(self, jobs: JobQueue, clock: Clock, worker: str, lease: timedelta) -> None:
        self._jobs = jobs
        self._clock = clock
        self._worker = worker
        self._lease = lease

    async def keep(self, run: DeploymentRun, work: asyncio.Task[Any], stop: asyncio.Event) -> None:
        """Renew until ``work`` (the run) is done; when the lease is lost or a cancel is
        requested, record why on the run (``LOST`` | ``CANCELED``), set ``stop`` and
        cancel ``work``. A run putting the previous revision back (``RESTORING``) is not
        canceled: it ends failed with the previous revision serving, which is what the
        cancel asked for."""
        deployment_id = run.deployment_id
        interval = self._lease.total_seconds() / 3
        tick = min(CANCEL_CHECK_SECONDS, interval)
        renew_at = time.monotonic() + interval
        while True:
            await asyncio.sleep(tick)
            if work.done():
                return
            try:
                if run.stopping != RESTORING and await self._jobs.cancel_requested(deployment_id):
                    log.info("deployment_cancel_requested", deployment_id=str(deployment_id))
                    _stop(run, work, stop, CANCELED)
                    return
            except Exception as exc:  # the store briefly gone: ask again at the next tick
                log.warning(
                    "deployment_cancel_check_failed",
                    deployment_id=str(deployment_id),
                    error=type(exc).__name__,
                )
            if time.monotonic() < renew_at:
                continue
            renew_at = time.monotonic() + interval
            try:
                held = await self._jobs.renew(
                    deployment_id, self._worker, self._clock.now() + self._lease
                )
            except Exception as exc:  # any store error: retry at the next interval
                log.warning(
                    "deployment_lease_renewal_failed",
                    deployment_id=str(deployment_id),
                    error=type(exc).__name__,
                )
                continue
            if not held:
                _stop(run, work, stop, LOST)
                return


def _stop(run: DeploymentRun, work: asyncio.Task[Any], stop: asyncio.Event, reason: str) -> None:
    run.stopping = reason
    stop.set()
    work.cancel()
