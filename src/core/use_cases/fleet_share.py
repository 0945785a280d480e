"""A worker's share of the fleet: the servers it alone watches, under a lease.

Each worker (``berth worker``, or ``berth serve``'s own) beats every ``beat`` seconds
(``FleetShare.beat``): its row in the store is renewed until ``now + lease``, which is
also its lease on every server it watches. From the census the beat returns it takes
its fair share -- the servers divided among the live workers, rounded up -- from the
servers nobody watches (none yet, or a watcher whose heartbeat ran out: a dead
worker's servers are taken within ``lease`` plus one beat), and gives back what it
holds beyond that share (a worker joined), choosing servers its monitor is not
checking at that moment. Each server so has one watcher at a time.

A worker whose beat fails (the store is gone) stops watching once the lease it last
renewed ran out here (``holding``): another worker may have taken its servers by then.
Stopping gives every server back at once (``leave``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from datetime import datetime, timedelta
from uuid import UUID

import structlog

from ..models import FleetCensus
from ..ports import Clock, Fleet

__all__ = ["BEAT_SECONDS", "SERVER_LEASE", "FleetShare"]

log = structlog.get_logger()

#: How long a worker's heartbeat (and so its lease on its servers) lasts unrenewed.
SERVER_LEASE = timedelta(seconds=10)
#: How often a worker beats: several beats fit in a lease, so one late beat loses nothing.
BEAT_SECONDS = 2.0


class FleetShare:
    """``worker_id``'s servers: renewed, taken and given back by ``beat``."""

    def __init__(
        self, fleet: Fleet, clock: Clock, worker_id: str, *, lease: timedelta = SERVER_LEASE
    ) -> None:
        self.worker_id = worker_id
        self._fleet = fleet
        self._clock = clock
        self._lease = lease
        self._valid_until: datetime | None = None
        self.census: FleetCensus | None = None

    def holding(self) -> bool:
        """Whether the lease this worker last renewed still runs (by this process's clock,
        counted from before the renewal was sent)."""
        return self._valid_until is not None and self._clock.now() < self._valid_until

    async def beat(
        self, busy: Callable[[], Collection[UUID]] = frozenset
    ) -> tuple[int, list[UUID]]:
        """Renew the lease, then take servers up to the fair share or give back those
        beyond it (never one of ``busy()``, being checked now). How many it took, and the
        ids it gave back (the monitor forgets them)."""
        now = self._clock.now()
        census = await self._fleet.heartbeat(self.worker_id, now, now + self._lease)
        self._valid_until = now + self._lease
        self.census = census
        taken, released = 0, []
        if census.held < census.share:
            taken = await self._fleet.claim_servers(self.worker_id, now, census.share - census.held)
        elif census.held > census.share:
            released = await self._fleet.release_servers(
                self.worker_id, census.held - census.share, keep=busy()
            )
        if taken or released:
            self.census = FleetCensus(
                servers=census.servers,
                workers=census.workers,
                held=census.held + taken - len(released),
            )
            log.info(
                "fleet_share_changed",
                worker_id=self.worker_id,
                taken=taken,
                released=len(released),
                held=self.census.held,
                servers=census.servers,
                workers=census.workers,
            )
        return taken, released

    async def leave(self) -> None:
        """Give every server back (a graceful stop): others take them at their next beat."""
        self._valid_until = None
        await self._fleet.leave(self.worker_id)
