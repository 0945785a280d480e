"""``Fleet``: the servers the monitor and the SSH gateway see, in memory."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from uuid import UUID

import msgspec
from berth.core.models import (
    ContainerSnapshot,
    Job,
    ProxyRoute,
    Server,
    ServerObservation,
    ServerStatus,
    SshCredentials,
)

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

    async def servers(self) -> list[Server]:
        gone = (ServerStatus.PENDING, ServerStatus.REMOVED)
        return [s for s in self.by_id.values() if s.status not in gone]

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

    async def routes(self, server_id: UUID) -> list[ProxyRoute]:
        return sorted(
            (
                ProxyRoute(domain=domain, upstream_port=port)
                for srv, domain, port in self.installations.values()
                if srv == server_id and domain is not None and port is not None
            ),
            key=lambda route: route.domain,
        )
