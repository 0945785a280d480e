"""Every server across owners (``berth.core.ports.Fleet``): the monitor's and worker's view.

Unlike the repositories, nothing here filters on an owner: the fleet is never
reachable from a request handler and takes no user input. It is the only
place that unseals a server's SSH private key.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any
from uuid import UUID

import msgspec
import structlog
from berth.core.events import InstallationStatusChanged, ServerStatusChanged
from berth.core.models import (
    ContainerSnapshot,
    FleetCensus,
    ProxyRoute,
    RunState,
    Server,
    ServerObservation,
    ServerStatus,
    SshCredentials,
)
from berth.core.ports import SecretBox
from berth.core.unit_of_work import EventHandlers
from berth.core.use_cases.routes import proxy_routes
from berth.core.watch import AppWatch, PassView, Seen, WatchChange, WatchTarget
from sqlalchemy import ColumnElement, bindparam, delete, exists, func, literal, or_, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from . import dialect
from .rows import (
    _ACTIVE_STATES,
    _SERVER_COLUMNS,
    _insert_if,
    _server_to_core,
    deployments_t,
    events_t,
    installations_t,
    servers_t,
    snapshots_t,
    watches_t,
    workers_t,
)
from .transaction import transaction
from .uow import SqlUnitOfWork, unit_of_work

__all__ = ["SqlFleet"]

log = structlog.get_logger()

_IS_ENROLLED = servers_t.c.status.not_in([ServerStatus.PENDING.value, ServerStatus.REMOVED.value])
_ENROLLED = (
    select(*_SERVER_COLUMNS).where(_IS_ENROLLED).order_by(servers_t.c.created_at, servers_t.c.id)
)
_WATCHED_BY = _ENROLLED.where(servers_t.c.watched_by == bindparam("worker_id"))

#: A worker row is deleted this long after its heartbeat ran out (its servers are free
#: from the moment it ran out; the row only names it meanwhile).
_FORGET_WORKERS_AFTER = timedelta(hours=1)

#: Server ids per statement of ``stood_by`` (SQLite's bound parameters are limited).
_IDS_PER_STATEMENT = 5000
_CREDENTIALS = select(servers_t.c.private_key_sealed, servers_t.c.host_keys).where(
    servers_t.c.id == bindparam("server_id")
)

# Candidates only (the index on domain serves it); the rule is the core's ``proxy_routes``.
_ROUTES = select(installations_t.c.domain, installations_t.c.host_port).where(
    installations_t.c.server_id == bindparam("server_id"),
    installations_t.c.domain.is_not(None),
    installations_t.c.removed_at.is_(None),
)


def _watch_targets(of_servers: ColumnElement[bool]) -> Any:
    i, w, d = installations_t.c, watches_t.c, deployments_t.c
    active = select(d.id).where(d.installation_id == i.id, d.state.in_(_ACTIVE_STATES)).exists()
    return (
        select(
            i.id,
            i.server_id,
            i.owner_id,
            i.container_name,
            i.current_deployment_id,
            i.stopped_at,
            i.stopping_until,
            active.label("any_active"),
            *(c.label(f"w_{c.name}") for c in watches_t.c if c.name != "installation_id"),
        )
        .outerjoin_from(installations_t, watches_t, w.installation_id == i.id)
        .where(of_servers, i.removed_at.is_(None))
        .order_by(i.created_at, i.id)
    )


_OF_SERVERS = installations_t.c.server_id.in_(bindparam("server_ids", expanding=True))

#: A server's installations with what the watch needs of each (``Fleet.watch_targets``).
_WATCH_TARGETS = _watch_targets(installations_t.c.server_id == bindparam("server_id"))
#: The same of several servers (``Fleet.pass_view``).
_WATCH_TARGETS_OF = _watch_targets(_OF_SERVERS)
_ROUTES_OF = select(
    installations_t.c.server_id, installations_t.c.domain, installations_t.c.host_port
).where(_OF_SERVERS, installations_t.c.domain.is_not(None), installations_t.c.removed_at.is_(None))


def _target_of(row: Any, now: datetime) -> WatchTarget:
    """A row of ``_watch_targets`` as the watch needs it (``now``: a stop or restart on
    request runs until ``stopping_until``)."""
    return WatchTarget(
        installation_id=row.id,
        owner_id=row.owner_id,
        container_name=row.container_name,
        current_deployment_id=row.current_deployment_id,
        quiet=bool(row.any_active)
        or row.stopped_at is not None
        or (row.stopping_until is not None and row.stopping_until > now)
        or row.current_deployment_id is None,
        watch=_watch_of(row),
    )


def _watch_of(row: Any) -> AppWatch | None:
    if row.w_state is None:
        return None
    return AppWatch(
        installation_id=row.id,
        seen=Seen(
            state=RunState(row.w_state),
            container_id=row.w_container_id,
            exit_code=row.w_exit_code,
            exited_at=row.w_exited_at,
            restart_count=row.w_restart_count,
            started_at=row.w_started_at,
        ),
        observed_at=row.w_observed_at,
        down_since=row.w_down_since,
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

    async def servers(self, watched_by: str | None = None) -> list[Server]:
        """Of every owner, oldest first."""
        async with transaction(self._engine) as tx:
            if watched_by is None:
                rows = await tx.read(_ENROLLED)
            else:
                rows = await tx.read(_WATCHED_BY, {"worker_id": watched_by})
            return [_server_to_core(row) for row in rows]

    # -- the fleet divided among workers --------------------------------------------------

    async def heartbeat(self, worker_id: str, now: datetime, until: datetime) -> FleetCensus:
        """One transaction: the counts, then the worker's row renewed (made on its first
        beat) and rows of workers dead for long deleted. Counted before writing, so the
        store's single writer (SQLite) is held for the writes alone: counted after them,
        a beat every 2 s held it through three more round trips, up to a second on a
        busy event loop while deployments waited for it (``fleet_bench``). The worker
        counts itself, as its row is renewed in the same transaction."""
        w, s = workers_t.c, servers_t.c
        async with transaction(self._engine) as tx:
            counted = await tx.read(
                select(func.count(), func.count().filter(s.watched_by == worker_id)).where(
                    _IS_ENROLLED
                )
            )
            row: Any = counted.one()
            servers, held = int(row[0]), int(row[1])
            others = await tx.read(
                select(func.count()).where(w.expires_at >= now, w.id != worker_id)
            )
            workers = int(others.scalar_one()) + 1
            beat = await tx.write(
                update(workers_t).where(w.id == worker_id).values(expires_at=until)
            )
            if not beat.rowcount:
                await tx.write(
                    workers_t.insert().values(id=worker_id, started_at=now, expires_at=until)
                )
            await tx.write(delete(workers_t).where(w.expires_at < now - _FORGET_WORKERS_AFTER))
        return FleetCensus(servers=servers, workers=workers, held=held)

    async def claim_servers(self, worker_id: str, now: datetime, count: int) -> int:
        """``UPDATE server SET watched_by = … WHERE id IN (the oldest free ones)`` with the
        freedom checked again on each row it writes (on PostgreSQL the candidates are read
        ``FOR UPDATE SKIP LOCKED``: two claimers pass over each other's)."""
        if count <= 0:
            return 0
        s = servers_t.c
        candidates = dialect.claimable(
            self._engine.dialect,
            select(s.id)
            .where(_IS_ENROLLED, _unwatched(now))
            .order_by(s.created_at, s.id)
            .limit(count),
            servers_t,
        )
        async with transaction(self._engine) as tx:
            taken = await tx.write(
                update(servers_t)
                .where(s.id.in_(candidates.scalar_subquery()), _unwatched(now))
                .values(watched_by=worker_id)
                .execution_options(synchronize_session=False)
            )
            return int(taken.rowcount)

    async def release_servers(
        self, worker_id: str, count: int, keep: Collection[UUID] = ()
    ) -> list[UUID]:
        """The newest of its servers first (the oldest stay where they are)."""
        if count <= 0:
            return []
        s = servers_t.c
        kept = set(keep)
        async with transaction(self._engine) as tx:
            rows = await tx.read(
                select(s.id)
                .where(s.watched_by == worker_id)
                .order_by(s.created_at.desc(), s.id.desc())
                .limit(count + len(kept))
            )
            ids = [row.id for row in rows if row.id not in kept][:count]
            if ids:
                await tx.write(
                    update(servers_t)
                    .where(s.id.in_(ids), s.watched_by == worker_id)
                    .values(watched_by=None)
                )
        return ids

    async def stood_by(self, worker_id: str, server_ids: Sequence[UUID], at: datetime) -> None:
        s = servers_t.c
        ids = list(server_ids)
        if not ids:
            return
        async with transaction(self._engine) as tx:
            for start in range(0, len(ids), _IDS_PER_STATEMENT):
                chunk = ids[start : start + _IDS_PER_STATEMENT]
                await tx.write(
                    update(servers_t)
                    .where(s.watched_by == worker_id, s.id.in_(chunk))
                    .values(checked_at=at)
                )

    async def leave(self, worker_id: str) -> None:
        s = servers_t.c
        async with transaction(self._engine) as tx:
            await tx.write(
                update(servers_t).where(s.watched_by == worker_id).values(watched_by=None)
            )
            await tx.write(delete(workers_t).where(workers_t.c.id == worker_id))

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

    async def watch_targets(self, server_id: UUID) -> list[WatchTarget]:
        """One query: the installations, whether any deployment of each is active, and
        its watch row."""
        now = datetime.now(UTC)
        async with transaction(self._engine) as tx:
            rows = await tx.read(_WATCH_TARGETS, {"server_id": server_id})
            return [_target_of(row, now) for row in rows]

    async def pass_view(self, server_ids: Collection[UUID]) -> PassView:
        """Two statements per ``_IDS_PER_STATEMENT`` servers, in one transaction."""
        ids = list(server_ids)
        now = datetime.now(UTC)
        found: dict[UUID, list[tuple[str, int | None]]] = {}
        targets: dict[UUID, list[WatchTarget]] = {}
        async with transaction(self._engine) as tx:
            for start in range(0, len(ids), _IDS_PER_STATEMENT):
                chunk = {"server_ids": ids[start : start + _IDS_PER_STATEMENT]}
                for row in await tx.read(_ROUTES_OF, chunk):
                    found.setdefault(row.server_id, []).append((row.domain, row.host_port))
                for row in await tx.read(_WATCH_TARGETS_OF, chunk):
                    targets.setdefault(row.server_id, []).append(_target_of(row, now))
        routes = {server_id: proxy_routes(pairs) for server_id, pairs in found.items()}
        return PassView(routes=routes, targets=targets)

    async def save_watches(self, changes: Sequence[WatchChange]) -> None:
        """Each watch replaced (deleted, then inserted if its installation is not removed),
        each report an event on the current revision's log and an event of the unit."""
        if not changes:
            return
        i, w = installations_t.c, watches_t.c
        async with self._unit() as uow:
            tx = uow.tx
            for change in changes:
                watch, seen, target = change.watch, change.watch.seen, change.target
                await tx.write(delete(watches_t).where(w.installation_id == target.installation_id))
                values = {
                    "installation_id": target.installation_id,
                    "owner_id": target.owner_id,
                    "state": seen.state.value,
                    "container_id": seen.container_id,
                    "exit_code": seen.exit_code,
                    "exited_at": seen.exited_at,
                    "restart_count": seen.restart_count,
                    "started_at": seen.started_at,
                    "observed_at": watch.observed_at,
                    "down_since": watch.down_since,
                }
                present = (
                    select(i.id)
                    .where(i.id == target.installation_id, i.removed_at.is_(None))
                    .exists()
                )
                written = await tx.write(_insert_if(watches_t, values, present))
                report = change.report
                if report is None or not written.rowcount:
                    continue
                if target.current_deployment_id is not None:
                    step = "down" if report.event.value.endswith("down") else "up"
                    await tx.write(
                        events_t.insert().values(
                            deployment_id=target.current_deployment_id,
                            at=watch.observed_at,
                            step=step,
                            message=report.message,
                        )
                    )
                uow.record(
                    InstallationStatusChanged(
                        installation_id=target.installation_id,
                        owner_id=target.owner_id,
                        server_id=change.server_id,
                        event=report.event,
                        state=seen.state,
                        exit_code=seen.exit_code,
                        restart_count=seen.restart_count,
                        message=report.message,
                        at=watch.observed_at,
                    )
                )

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
        # Observations that write the same values, written together: a fleet coming back
        # online at once (the network's fault over) is a statement per few hundred servers,
        # not two per server. Each change is still told of once, in this transaction.
        groups: dict[tuple[ServerStatus, str | None, str | None], list[ServerObservation]] = {}
        for seen, status in statuses:
            detail = None if status is ServerStatus.ONLINE else seen.detail
            offered = seen.offered_host_key if status is ServerStatus.HOST_KEY_MISMATCH else None
            groups.setdefault((status, detail, offered), []).append(seen)
        async with self._unit() as uow:
            tx = uow.tx
            for (status, detail, offered), group in groups.items():
                values: dict[str, Any] = {"status": status.value, "status_detail": detail}
                if status in (ServerStatus.ONLINE, ServerStatus.HOST_KEY_MISMATCH):
                    values["offered_host_key"] = offered
                await _write_statuses(uow, group, status, values)
            if last_seen:
                await tx.write(_SET_SEEN.where(by_id), last_seen)
            if facts:
                await tx.write(_SET_FACTS.where(by_id), facts)
            if snapshots:
                await tx.write(_snapshot_upsert(tx.dialect), snapshots)


def _unwatched(now: datetime) -> ColumnElement[bool]:
    """The server has no watcher, or its watcher's heartbeat ran out before ``now``."""
    s, w = servers_t.c, workers_t.c
    alive = exists().where(w.id == s.watched_by, w.expires_at >= now)
    return or_(s.watched_by.is_(None), ~alive)


async def _write_statuses(
    uow: SqlUnitOfWork,
    observations: Sequence[ServerObservation],
    status: ServerStatus,
    values: dict[str, Any],
) -> None:
    """Set these servers' status (with ``values``); a removed server stays removed. Only one
    writer changes a status (the WHERE is re-checked under the row's lock), so each change
    is recorded once (``ServerStatusChanged``, at its observation's time), in the
    transaction that makes it; the servers whose status it already was get ``values``
    (a new detail)."""
    tx = uow.tx
    s = servers_t.c
    kept = s.status != ServerStatus.REMOVED.value
    at = {seen.server_id: seen.at for seen in observations}
    ids = list(at)
    changed: dict[UUID, UUID] = {}
    for start in range(0, len(ids), _IDS_PER_STATEMENT):
        chunk = ids[start : start + _IDS_PER_STATEMENT]
        rows = await tx.write(
            update(servers_t)
            .where(s.id.in_(chunk), s.status != status.value, kept)
            .values(values)
            .returning(s.id, s.owner_id)
        )
        changed.update((UUID(str(row.id)), UUID(str(row.owner_id))) for row in rows)
    for server_id, owner in changed.items():
        uow.record(
            ServerStatusChanged(
                server_id=server_id,
                owner_id=owner,
                status=status,
                detail=values["status_detail"],
                at=at[server_id],
            )
        )
    same = [server_id for server_id in ids if server_id not in changed]
    for start in range(0, len(same), _IDS_PER_STATEMENT):
        await tx.write(
            update(servers_t)
            .where(s.id.in_(same[start : start + _IDS_PER_STATEMENT]), kept)
            .values(values)
        )


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
