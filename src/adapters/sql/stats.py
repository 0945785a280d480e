"""Counts over the whole store (``berth.core.ports.StoreStats``) for ``/metrics``.

Three aggregate queries in one transaction, each served by an index or a small table:
every replica reads the same numbers from the shared database.
"""

from __future__ import annotations

from datetime import datetime

from berth.core.models import DeploymentState, ServerStatus, StoreCounts
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from .rows import deployments_t, marks_t, servers_t
from .transaction import transaction

__all__ = ["SqlStoreStats"]

_d = deployments_t.c
_BY_STATE = select(_d.state.label("key"), func.count().label("n")).group_by(_d.state)
_QUEUE = select(func.count().label("n"), func.min(_d.created_at).label("oldest")).where(
    _d.state == DeploymentState.QUEUED.value
)
_BY_STATUS = select(servers_t.c.status.label("key"), func.count().label("n")).group_by(
    servers_t.c.status
)


class SqlStoreStats:
    """``StoreStats`` over the deployment and server tables."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def counts(self) -> StoreCounts:
        async with transaction(self._engine) as tx:
            by_state = {row.key: int(row.n) for row in await tx.read(_BY_STATE)}
            queue = (await tx.read(_QUEUE)).one()
            by_status = {row.key: int(row.n) for row in await tx.read(_BY_STATUS)}
        return StoreCounts(
            deployments={s: by_state.get(s.value, 0) for s in DeploymentState},
            # Stored statuses: ``checking`` is a reader's view of them, never stored.
            servers={
                s: by_status.get(s.value, 0) for s in ServerStatus if s is not ServerStatus.CHECKING
            },
            queued=int(queue.n),
            oldest_queued_at=queue.oldest,
        )

    async def check(self, at: datetime) -> None:
        """A read, then the ``probe`` mark stamped in a transaction committed: on a full
        disk the read answers and the commit fails (``StoreUnavailable``)."""
        async with transaction(self._engine) as tx:
            await tx.read(select(marks_t.c.name).where(marks_t.c.name == "probe"))
            await tx.write(update(marks_t).where(marks_t.c.name == "probe").values(at=at))
