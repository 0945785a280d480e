"""Servers (owned by a user), their keys and container snapshots."""

from __future__ import annotations

import builtins
from datetime import datetime
from functools import partial
from uuid import UUID

import msgspec
from berth.core.access import Owner, team_of
from berth.core.errors import WriteConflict
from berth.core.models import (
    WATCHED_STATUSES,
    ContainerSnapshot,
    DeploymentState,
    Server,
    ServerFacts,
    ServerStatus,
    Transport,
)
from sqlalchemy import case, delete, func, select, update

from .. import dialect
from ..rows import (
    _SERVER_BY_ID,
    _SERVER_COLUMNS,
    _limited,
    _owned,
    _Repository,
    _row_if,
    _scoped,
    _server_to_core,
    _snapshot_to_core,
    deployments_t,
    events_t,
    installations_t,
    servers_t,
    snapshots_t,
)
from ..server_rows import rows_statement, server_rows

__all__ = ["SqlServerRepository"]

#: The statuses a new address or SSH port sends back to ``offline`` to be checked again.
_RECHECKED = sorted(status.value for status in WATCHED_STATUSES)


class SqlServerRepository(_Repository):
    """``ServerRepository``: servers and their last container snapshot, per owner."""

    async def add(
        self,
        server: Server,
        enrollment_token_hash: str | None,
        private_key: bytes | None = None,
    ) -> None:
        """Keeps the hash of its one-time enrollment token; the sealed key is never read
        back through this repository."""
        values = {
            "id": server.id,
            "owner_id": server.owner_id,
            "name": server.name,
            "transport": server.transport.value,
            "address": server.address,
            "ssh_port": server.ssh_port,
            "ssh_user": server.ssh_user,
            "status": server.status.value,
            "status_detail": server.status_detail,
            "created_at": server.created_at,
            "last_seen_at": server.last_seen_at,
            "facts": msgspec.to_builtins(server.facts),
            "enrollment_token_hash": enrollment_token_hash,
            "enrollment_expires_at": server.enrollment_expires_at,
            "private_key_sealed": self._box.seal(private_key) if private_key else None,
            "public_key": server.public_key,
            "host_keys": list(server.host_keys),
        }
        await self._insert(
            servers_t,
            values,
            {"uq_server_enrollment_token_hash": "This enrollment token is already in use."},
        )

    async def get(self, owner_id: Owner, server_id: UUID) -> Server | None:
        """The owner's server, or ``None`` (also when it belongs to someone else).

        Cached per (owner, server) until the next commit that changes a server.
        """
        return await self._tx.cached(
            ("server", owner_id, server_id), partial(self._get, owner_id, server_id), mark="fleet"
        )

    async def _get(self, owner_id: Owner, server_id: UUID) -> Server | None:
        stmt = _limited(_SERVER_BY_ID, servers_t.c.id, owner_id)
        found = await self._tx.read(stmt, {"server_id": server_id, "owner_id": team_of(owner_id)})
        row = found.first()
        return _server_to_core(row) if row else None

    async def lock(self, owner_id: Owner, server_id: UUID) -> Server | None:
        """The owner's server, or ``None``, read fresh and locked until the transaction ends.

        Deploys lock their server before they read its installations and deployments, so
        concurrent deploys to one server take turns (``dialect.read_locked``). Never cached.
        """
        found = await self._tx.read_locked(
            _limited(_SERVER_BY_ID, servers_t.c.id, owner_id),
            {"server_id": server_id, "owner_id": team_of(owner_id)},
        )
        row = found.first()
        return _server_to_core(row) if row else None

    async def list(self, owner_id: Owner) -> builtins.list[Server]:
        """From the read cache while no server changed since: a fleet's list is asked often
        and, once the monitor writes only changes, changes seldom."""
        found = await self._tx.cached(
            ("servers", owner_id),
            partial(self._list, owner_id),
            weight=lambda servers: 1 + len(servers),
            mark="fleet",  # kept while deployments commit: only a server's change drops it
        )
        return builtins.list(found)

    async def _list(self, owner_id: Owner) -> tuple[Server, ...]:
        """On SQLite, the rows are read as stored and only the servers that changed since
        the last read are converted (``server_rows``): a monitor's pass changes a few."""
        if self._tx.dialect.name == "sqlite":
            found = await self._tx.read(rows_statement(*_scoped(servers_t, owner_id)))
            return server_rows(self._tx.dialect).servers_of(found.scalar_one())
        order = (servers_t.c.created_at, servers_t.c.id)
        stmt = select(*_SERVER_COLUMNS).where(*_scoped(servers_t, owner_id)).order_by(*order)
        return tuple(_server_to_core(row) for row in await self._tx.read(stmt))

    async def count(self, owner_id: Owner) -> int:
        stmt = select(func.count()).select_from(servers_t).where(*_scoped(servers_t, owner_id))
        return int((await self._tx.read(stmt)).scalar_one())

    async def snapshot(self, owner_id: Owner, server_id: UUID) -> ContainerSnapshot | None:
        stmt = select(snapshots_t).where(
            snapshots_t.c.server_id == server_id, *_scoped(snapshots_t, owner_id)
        )
        row = (await self._tx.read(stmt)).first()
        return _snapshot_to_core(row) if row else None

    async def save_snapshot(self, owner_id: Owner, snapshot: ContainerSnapshot) -> None:
        """Replace the server's snapshot. Writes nothing unless the server is the owner's."""
        values = {
            "server_id": snapshot.server_id,
            "owner_id": team_of(owner_id),
            "observed_at": snapshot.observed_at,
            "containers": msgspec.to_builtins(snapshot.containers),
        }
        owned_server = (
            select(servers_t.c.id).where(*_owned(servers_t, owner_id, snapshot.server_id)).exists()
        )
        stmt = dialect.upsert_from_select(
            self._tx.dialect,
            snapshots_t,
            list(values),
            _row_if(snapshots_t, values, owned_server),
            key=["server_id"],
        )
        await self._tx.write(stmt)

    async def delete(self, owner_id: Owner, server_id: UUID) -> bool:
        d = deployments_t.c
        of_server = (d.server_id == server_id, *_scoped(deployments_t, owner_id))
        # Locked, so no worker claims one of them before they are gone; and checked
        # under that lock, as the caller's check may predate a claim.
        states = await self._tx.read_locked(select(d.state).where(*of_server), {})
        if any(state == DeploymentState.RUNNING.value for (state,) in states):
            raise WriteConflict("A deployment on this server is running; wait for it to finish.")
        await self._tx.write(
            delete(events_t).where(events_t.c.deployment_id.in_(select(d.id).where(*of_server)))
        )
        await self._tx.write(delete(deployments_t).where(*of_server))
        i = installations_t.c
        await self._tx.write(
            delete(installations_t).where(
                i.server_id == server_id, *_scoped(installations_t, owner_id)
            )
        )
        snap = snapshots_t.c
        await self._tx.write(
            delete(snapshots_t).where(snap.server_id == server_id, *_scoped(snapshots_t, owner_id))
        )
        return await self._changed(delete(servers_t).where(*_owned(servers_t, owner_id, server_id)))

    async def by_enrollment(self, token_hash: str) -> Server | None:
        """Never cached: it is read once per enrollment or status poll."""
        stmt = select(*_SERVER_COLUMNS).where(servers_t.c.enrollment_token_hash == token_hash)
        row = (await self._tx.read(stmt)).first()
        return _server_to_core(row) if row else None

    async def speaking_for_itself(self, server_id: UUID) -> Server | None:
        """Never cached."""
        stmt = select(*_SERVER_COLUMNS).where(servers_t.c.id == server_id)
        row = (await self._tx.read(stmt)).first()
        return _server_to_core(row) if row else None

    async def of_this_machine(self) -> builtins.list[Server]:
        """Never cached."""
        stmt = (
            select(*_SERVER_COLUMNS)
            .where(servers_t.c.transport == Transport.LOCAL.value)
            .order_by(servers_t.c.created_at, servers_t.c.id)
        )
        return [_server_to_core(row) for row in await self._tx.read(stmt)]

    async def mark_removed(self, server_id: UUID, detail: str) -> bool:
        """One conditional UPDATE."""
        s = servers_t.c
        return await self._changed(
            update(servers_t)
            .where(s.id == server_id, s.status != ServerStatus.REMOVED.value)
            .values(status=ServerStatus.REMOVED.value, status_detail=detail)
        )

    async def enroll(
        self,
        server_id: UUID,
        *,
        host_keys: tuple[str, ...],
        facts: ServerFacts,
        address: str | None,
        ssh_port: int,
    ) -> bool:
        """One conditional UPDATE."""
        s = servers_t.c
        return await self._changed(
            update(servers_t)
            .where(s.id == server_id, s.status == ServerStatus.PENDING.value)
            .values(
                status=ServerStatus.OFFLINE.value,
                status_detail=None,
                host_keys=list(host_keys),
                facts=msgspec.to_builtins(facts),
                address=address,
                ssh_port=ssh_port,
            )
        )

    async def renew_enrollment(
        self, owner_id: Owner, server_id: UUID, token_hash: str, expires_at: datetime
    ) -> bool:
        """A new enrollment token hash and expiry, in one conditional UPDATE on the owner
        and the ``pending`` status."""
        s = servers_t.c
        updated = await self._tx.write(
            update(servers_t)
            .where(
                *_owned(servers_t, owner_id, server_id),
                s.status == ServerStatus.PENDING.value,
            )
            .values(enrollment_token_hash=token_hash, enrollment_expires_at=expires_at)
        )
        return bool(updated.rowcount)

    async def change(
        self,
        owner_id: Owner,
        server_id: UUID,
        *,
        name: str,
        address: str | None,
        ssh_port: int,
        recheck: bool,
    ) -> bool:
        """One UPDATE; the status moves in the same statement (a ``CASE``), so a monitor
        writing meanwhile cannot leave a new target marked as checked."""
        s = servers_t.c
        values: dict[str, object] = {"name": name, "address": address, "ssh_port": ssh_port}
        if recheck:
            watched = s.status.in_(_RECHECKED)
            values |= {
                "status": case((watched, ServerStatus.OFFLINE.value), else_=s.status),
                "status_detail": case((watched, None), else_=s.status_detail),
                "offered_host_key": case((watched, None), else_=s.offered_host_key),
                "checked_at": case((watched, None), else_=s.checked_at),
            }
        return await self._changed(
            update(servers_t).where(*_owned(servers_t, owner_id, server_id)).values(values)
        )

    async def repin(
        self, owner_id: Owner, server_id: UUID, *, host_keys: tuple[str, ...], offered: str
    ) -> bool:
        """One conditional UPDATE on the status and the offered key."""
        s = servers_t.c
        return await self._changed(
            update(servers_t)
            .where(
                *_owned(servers_t, owner_id, server_id),
                s.status == ServerStatus.HOST_KEY_MISMATCH.value,
                s.offered_host_key == offered,
            )
            .values(
                status=ServerStatus.OFFLINE.value,
                status_detail="Host keys re-pinned; berth reconnects with the new key.",
                host_keys=list(host_keys),
                offered_host_key=None,
            )
        )
