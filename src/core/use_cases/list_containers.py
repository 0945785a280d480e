"""List every container on one of the caller's servers (managed by berth or not).

A server that has not enrolled is a 409 ``server-pending``. Live from the server when a
gateway reaches it; otherwise the last snapshot, with the
time it was observed and the server reported offline. Without a gateway (a process
that connects to no server on its own: ``serve --no-worker``) the snapshot the worker
watching the server keeps, with the server's stored status.

A container is berth's (it has an ``installation_id``) only when its
``berth.installation`` label names an installation of this server in this berth's
store: another berth sharing the Docker Engine labels its containers the same way, with
ids of its own (docs/decisions/2026-11-27-whose-containers.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from uuid import UUID

import msgspec
import structlog

from .. import commands as c
from ..access import Actor
from ..errors import ServerUnreachable
from ..models import Container, ContainerSnapshot, ServerStatus
from ..ports import ServerGateway
from ..results import ContainerList
from .owned import UsesStoreAndClock, owned_server, refuse_pending

__all__ = ["ListContainers"]

log = structlog.get_logger()


@dataclass(eq=False)
class ListContainers(UsesStoreAndClock):
    """Every container on one of the caller's servers: live if it answers, else the last
    snapshot."""

    _gateway: ServerGateway | None = None

    async def __call__(self, owner: Actor, cmd: c.ListContainers) -> ContainerList:
        server_id = cmd.server_id
        async with self._uow() as uow:
            server = await owned_server(uow, owner, server_id)
            refuse_pending(server)
            snapshot = await uow.servers.snapshot(owner.scope, server_id)
            ours = {
                i.id
                for i in await uow.installations.list(owner.scope, server_id, include_removed=True)
            }
        if self._gateway is not None and server.status is not ServerStatus.REMOVED:
            try:
                conn = await self._gateway.connect(server)
                live = await conn.docker.list_containers()
            except ServerUnreachable as exc:
                log.info("containers_unreachable", server_id=str(server_id), reason=exc.detail)
            else:
                fresh = ContainerSnapshot(
                    server_id=server_id, observed_at=self._clock.now(), containers=tuple(live)
                )
                async with self._uow() as uow:
                    await uow.servers.save_snapshot(owner.scope, fresh)
                    await uow.commit()
                return ContainerList(
                    server_id=server_id,
                    observed_at=fresh.observed_at,
                    server_status=ServerStatus.ONLINE,
                    containers=_whose(fresh.containers, ours),
                )
            status = ServerStatus.OFFLINE  # it did not answer just now
        else:  # a process that connects to no server on its own: the watcher's snapshot
            online = server.status is ServerStatus.ONLINE
            status = ServerStatus.ONLINE if online else ServerStatus.OFFLINE
        return ContainerList(
            server_id=server_id,
            observed_at=snapshot.observed_at if snapshot else None,
            server_status=status,
            containers=_whose(snapshot.containers if snapshot else (), ours),
        )


def _whose(containers: Iterable[Container], ours: set[UUID]) -> tuple[Container, ...]:
    """``containers``, each labelled with an installation that is not one of ``ours``
    (another berth's, sharing the Engine) shown as nobody's."""
    return tuple(
        c
        if c.installation_id is None or c.installation_id in ours
        else msgspec.structs.replace(c, installation_id=None)
        for c in containers
    )
