"""``Fleet``: the servers the monitor and the SSH gateway see, in memory."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from uuid import UUID

import msgspec
from berth.core.models import (
    ContainerSnapshot,
    FleetCensus,
    Job,
    ProxyRoute,
    Server,
    ServerObservation,
    ServerStatus,
    SshCredentials,
)
from berth.core.watch import AppWatch, PassView, WatchChange, WatchTarget

__all__ = ["FakeFleet"]


class FakeFleet:
    """The monitor's view of every server, recording what it is told."""

    def __init__(self, servers: Iterable[Server] = ()) -> None:
        self.by_id: dict[UUID, Server] = {s.id: s for s in servers}
        self.credentials_by_id: dict[UUID, SshCredentials] = {}
        self.snapshots: dict[UUID, ContainerSnapshot] = {}
        self.statuses: list[tuple[UUID, ServerStatus, str | None]] = []
        self.batches: list[list[ServerObservation]] = []  # what each ``record`` wrote
        # installation id -> (server id, domain, host port): what ``routes`` is derived from
        self.installations: dict[UUID, tuple[UUID, str | None, int | None]] = {}
        self.watcher: dict[UUID, str] = {}  # server id -> the worker watching it
        self.workers: dict[str, datetime] = {}  # worker id -> when its heartbeat runs out
        # server id -> the installations the watch sees there (``watch_targets``), and
        # what ``save_watches`` wrote: each installation's watch, and every change.
        self.targets: dict[UUID, list[WatchTarget]] = {}
        self.watches: dict[UUID, AppWatch] = {}
        self.watch_changes: list[WatchChange] = []
        self.views = 0  # how many times ``pass_view`` was read

    async def servers(self, watched_by: str | None = None) -> list[Server]:
        gone = (ServerStatus.PENDING, ServerStatus.REMOVED)
        return [
            s
            for s in self.by_id.values()
            if s.status not in gone and (watched_by is None or self.watcher.get(s.id) == watched_by)
        ]

    # -- the fleet divided among workers (a worker's heartbeat: ``workers``) ---------------

    def _free(self, server_id: UUID, now: datetime) -> bool:
        watcher = self.watcher.get(server_id)
        return watcher is None or self.workers.get(watcher, now) < now

    async def heartbeat(self, worker_id: str, now: datetime, until: datetime) -> FleetCensus:
        self.workers[worker_id] = until
        enrolled = await self.servers()
        return FleetCensus(
            servers=len(enrolled),
            workers=sum(1 for expires in self.workers.values() if expires >= now),
            held=sum(1 for s in enrolled if self.watcher.get(s.id) == worker_id),
        )

    async def claim_servers(self, worker_id: str, now: datetime, count: int) -> int:
        free = [s.id for s in await self.servers() if self._free(s.id, now)][: max(0, count)]
        for server_id in free:
            self.watcher[server_id] = worker_id
        return len(free)

    async def release_servers(
        self, worker_id: str, count: int, keep: Collection[UUID] = ()
    ) -> list[UUID]:
        mine = [s.id for s in await self.servers(worker_id) if s.id not in keep]
        given = list(reversed(mine))[: max(0, count)]
        for server_id in given:
            del self.watcher[server_id]
        return given

    async def stood_by(self, worker_id: str, server_ids: Sequence[UUID], at: datetime) -> None:
        for server_id in server_ids:
            server = self.by_id.get(server_id)
            if server is not None and self.watcher.get(server_id) == worker_id:
                self.by_id[server_id] = msgspec.structs.replace(server, checked_at=at)

    async def leave(self, worker_id: str) -> None:
        for server_id in [sid for sid, w in self.watcher.items() if w == worker_id]:
            del self.watcher[server_id]
        self.workers.pop(worker_id, None)

    async def credentials(self, server_id: UUID) -> SshCredentials | None:
        return self.credentials_by_id.get(server_id)

    async def save_snapshot(self, snapshot: ContainerSnapshot) -> None:
        self.snapshots[snapshot.server_id] = snapshot

    async def record(self, observations: Sequence[ServerObservation]) -> None:
        self.batches.append(list(observations))
        for seen in observations:
            server = self.by_id.get(seen.server_id)
            if server is None:
                continue
            if server.status is ServerStatus.REMOVED:
                continue  # a removed server stays removed, as the SQL fleet keeps it
            if seen.status is not None:
                self.statuses.append((server.id, seen.status, seen.detail))
                server = msgspec.structs.replace(
                    server, status=seen.status, status_detail=seen.detail
                )
                if seen.status is ServerStatus.ONLINE:  # the pinned key answered again
                    server = msgspec.structs.replace(server, offered_host_key=None)
                elif seen.status is ServerStatus.HOST_KEY_MISMATCH:
                    server = msgspec.structs.replace(server, offered_host_key=seen.offered_host_key)
            if seen.seen:
                server = msgspec.structs.replace(server, last_seen_at=seen.at)
            if seen.facts is not None:
                server = msgspec.structs.replace(server, facts=seen.facts)
            if seen.containers is not None:
                self.snapshots[server.id] = ContainerSnapshot(
                    server_id=server.id, observed_at=seen.at, containers=seen.containers
                )
            self.by_id[server.id] = server

    def hold(self, job: Job) -> None:
        """Know the job's installation (as the store does once it is deployed)."""
        self.installations.setdefault(
            job.installation_id, (job.server.id, job.deployment.spec.domain, None)
        )

    def record_port(self, installation_id: UUID, host_port: int | None) -> None:
        server_id, domain, _ = self.installations[installation_id]
        self.installations[installation_id] = (server_id, domain, host_port)

    async def watch_targets(self, server_id: UUID) -> list[WatchTarget]:
        return [
            msgspec.structs.replace(t, watch=self.watches.get(t.installation_id))
            for t in self.targets.get(server_id, [])
        ]

    async def pass_view(self, server_ids: Collection[UUID]) -> PassView:
        self.views += 1
        # This class's own reads (a subclass may slow down or count those of the checks).
        routes = {sid: found for sid in server_ids if (found := await FakeFleet.routes(self, sid))}
        targets = {
            sid: found for sid in server_ids if (found := await FakeFleet.watch_targets(self, sid))
        }
        return PassView(routes=routes, targets=targets)

    async def save_watches(self, changes: Sequence[WatchChange]) -> None:
        for change in changes:
            self.watches[change.target.installation_id] = change.watch
            self.watch_changes.append(change)

    async def routes(self, server_id: UUID) -> list[ProxyRoute]:
        return sorted(
            (
                ProxyRoute(domain=domain, upstream_port=port)
                for srv, domain, port in self.installations.values()
                if srv == server_id and domain is not None and port is not None
            ),
            key=lambda route: route.domain,
        )
