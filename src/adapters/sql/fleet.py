"""Every server across owners (``berth.core.ports.Fleet``): the monitor's and worker's view.

Unlike the repositories, nothing here filters on an owner: the fleet is never
reachable from a request handler and takes no user input. It is the only
place that unseals a server's SSH private key.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import partial
from typing import Any
from uuid import UUID

import msgspec
import structlog
from berth.core.events import ServerStatusChanged
from berth.core.models import (
    ContainerSnapshot,
    ProxyRoute,
    Server,
    ServerObservation,
    ServerStatus,
    SshCredentials,
)
from berth.core.ports import SecretBox
from berth.core.unit_of_work import EventHandlers
from berth.core.use_cases.routes import proxy_routes
from sqlalchemy import bindparam, literal, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from . import dialect
from .rows import (
    _SERVER_COLUMNS,
    _server_to_core,
    installations_t,
    servers_t,
    snapshots_t,
)
from .transaction import transaction
from .uow import SqlUnitOfWork, unit_of_work

__all__ = ["SqlFleet"]

log = structlog.get_logger()

_ENROLLED = (
    select(*_SERVER_COLUMNS)
    .where(servers_t.c.status.not_in([ServerStatus.PENDING.value, ServerStatus.REMOVED.value]))
    .order_by(servers_t.c.created_at, servers_t.c.id)
)
_CREDENTIALS = select(servers_t.c.private_key_sealed, servers_t.c.host_keys).where(
    servers_t.c.id == bindparam("server_id")
)

# Candidates only (the index on domain serves it); the rule is the core's ``proxy_routes``.
_ROUTES = select(installations_t.c.domain, installations_t.c.host_port).where(
    installations_t.c.server_id == bindparam("server_id"),
    installations_t.c.domain.is_not(None),
    installations_t.c.removed_at.is_(None),
)


class SqlFleet:
    """``Fleet`` over the server and snapshot tables; each method is its own transaction.

    ``events``: where the status changes ``record`` makes go (``berth.core.unit_of_work``).
    """

    def __init__(
        self, engine: AsyncEngine, box: SecretBox, events: EventHandlers | None = None
    ) -> None:
        self._engine = engine
        self._box = box
        self._unit = partial(unit_of_work, engine, box, events)

    async def servers(self) -> list[Server]:
        """Of every owner, oldest first."""
        async with transaction(self._engine) as tx:
            return [_server_to_core(row) for row in await tx.read(_ENROLLED)]

    async def credentials(self, server_id: UUID) -> SshCredentials | None:
        """berth's private key for the server (unsealed) and its pinned host keys.

        ``None`` if the server is unknown, has no key, or its key cannot be unsealed
        (sealed with another secret key: logged).
        """
        async with transaction(self._engine) as tx:
            row = (await tx.read(_CREDENTIALS, {"server_id": server_id})).first()
        if row is None or row.private_key_sealed is None:
            return None
        try:
            private_key = self._box.open(row.private_key_sealed)
        except ValueError:
            log.error("server_key_unreadable", server_id=str(server_id))
            return None
        return SshCredentials(private_key=private_key, host_keys=tuple(row.host_keys or ()))

    async def routes(self, server_id: UUID) -> list[ProxyRoute]:
        """The server's routes by the core's rule (an unknown server has none)."""
        async with transaction(self._engine) as tx:
            rows = await tx.read(_ROUTES, {"server_id": server_id})
            return proxy_routes((row.domain, row.host_port) for row in rows)

    async def save_snapshot(self, snapshot: ContainerSnapshot) -> None:
        """Replace the server's container snapshot (owned by the server's owner); an unknown
        server is ignored."""
        s = servers_t.c
        row = select(
            literal(snapshot.server_id, snapshots_t.c.server_id.type).label("server_id"),
            s.owner_id,
            literal(snapshot.observed_at, snapshots_t.c.observed_at.type).label("observed_at"),
            literal(msgspec.to_builtins(snapshot.containers), snapshots_t.c.containers.type).label(
                "containers"
            ),
        ).where(s.id == snapshot.server_id)
        async with transaction(self._engine) as tx:
            await tx.write(
                dialect.upsert_from_select(
                    tx.dialect,
                    snapshots_t,
                    ["server_id", "owner_id", "observed_at", "containers"],
                    row,
                    key=["server_id"],
                )
            )

    async def record(self, observations: Sequence[ServerObservation]) -> None:
        """One statement per kind of change, run for every row at once."""
        statuses = [(seen, seen.status) for seen in observations if seen.status is not None]
        last_seen = [
            {"b_id": seen.server_id, "b_at": seen.at} for seen in observations if seen.seen
        ]
        facts = [
            {"b_id": seen.server_id, "b_facts": msgspec.to_builtins(seen.facts)}
            for seen in observations
            if seen.facts is not None
        ]
        snapshots = [
            {
                "b_id": seen.server_id,
                "b_at": seen.at,
                "b_containers": msgspec.to_builtins(seen.containers),
            }
            for seen in observations
            if seen.containers is not None
        ]
        if not (statuses or last_seen or facts or snapshots):
            return
        by_id = servers_t.c.id == bindparam("b_id")
        async with self._unit() as uow:
            tx = uow.tx
            # A statement each: status changes are rare (a server going on- or offline),
            # and each must be told of to webhooks once, in this transaction.
            for seen, status in statuses:
                values: dict[str, Any] = {"status": status.value, "status_detail": None}
                if status is ServerStatus.ONLINE:
                    values["offered_host_key"] = None
                else:
                    values["status_detail"] = seen.detail
                if status is ServerStatus.HOST_KEY_MISMATCH:
                    values["offered_host_key"] = seen.offered_host_key
                await _write_status(uow, seen.server_id, status, seen.at, values)
            if last_seen:
                await tx.write(_SET_SEEN.where(by_id), last_seen)
            if facts:
                await tx.write(_SET_FACTS.where(by_id), facts)
            if snapshots:
                await tx.write(_snapshot_upsert(tx.dialect), snapshots)


async def _write_status(
    uow: SqlUnitOfWork,
    server_id: UUID,
    status: ServerStatus,
    at: datetime,
    values: dict[str, Any],
) -> None:
    """Set the server's status (with ``values``); a removed server stays removed. Only one
    writer changes the status (the WHERE is re-checked under the row's lock), so a change
    is recorded once (``ServerStatusChanged``), in the transaction that makes it."""
    tx = uow.tx
    s = servers_t.c
    kept = s.status != ServerStatus.REMOVED.value
    changed = await tx.write(
        update(servers_t).where(s.id == server_id, s.status != status.value, kept).values(values)
    )
    if changed.rowcount:
        owner = (await tx.read(select(s.owner_id).where(s.id == server_id))).scalar_one()
        detail = values["status_detail"]
        uow.record(
            ServerStatusChanged(
                server_id=server_id, owner_id=owner, status=status, detail=detail, at=at
            )
        )
    else:
        await tx.write(update(servers_t).where(s.id == server_id, kept).values(values))


_SET_SEEN = update(servers_t).values(last_seen_at=bindparam("b_at"))
_SET_FACTS = update(servers_t).values(facts=bindparam("b_facts", type_=servers_t.c.facts.type))


def _snapshot_upsert(sql_dialect: Any) -> Any:
    """The snapshot upsert of ``save_snapshot``, with bound parameters for ``executemany``."""
    s = servers_t.c
    row = select(
        bindparam("b_id", type_=snapshots_t.c.server_id.type).label("server_id"),
        s.owner_id,
        bindparam("b_at", type_=snapshots_t.c.observed_at.type).label("observed_at"),
        bindparam("b_containers", type_=snapshots_t.c.containers.type).label("containers"),
    ).where(s.id == bindparam("b_id"))
    return dialect.upsert_from_select(
        sql_dialect,
        snapshots_t,
        ["server_id", "owner_id", "observed_at", "containers"],
        row,
        key=["server_id"],
    )
