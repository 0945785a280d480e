"""``RateLimiter`` in PostgreSQL: the counts every API replica shares.

One row per key holds its GCRA state (``core/limits.py``), the theoretical
arrival time in the database's clock (so replicas with skewed clocks agree).
Taking a slot is one atomic statement: an upsert whose update only happens
when the event is allowed, so two replicas racing for the last slot of a key
never both get it. Keys whose budget is full again are deleted now and then.
"""

from __future__ import annotations

import random

from berth.core.limits import Limit, peek
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

__all__ = ["SqlRateLimiter"]

# ``core.limits.gcra`` as one statement. Allowed: the row's new tat is returned.
# Refused: the WHERE keeps the row as it is and nothing is returned.
_TAKE = text(
    """
    WITH n AS (SELECT extract(epoch FROM clock_timestamp())::double precision AS now)
    INSERT INTO rate_limit (key, tat)
    SELECT :key, n.now + :interval FROM n
    ON CONFLICT (key) DO UPDATE
        SET tat = GREATEST(rate_limit.tat, (SELECT now FROM n)) + :interval
        WHERE GREATEST(rate_limit.tat, (SELECT now FROM n)) + :interval
            - (SELECT now FROM n) <= :burst
    RETURNING tat
    """
)
_STATE = text(
    "SELECT tat, extract(epoch FROM clock_timestamp())::double precision AS now"
    " FROM rate_limit WHERE key = :key"
)
_RESET = text("DELETE FROM rate_limit WHERE key = :key")
_PRUNE = text(
    "DELETE FROM rate_limit WHERE tat < extract(epoch FROM clock_timestamp())::double precision"
)

PRUNE_ONE_IN = 1000


class SqlRateLimiter:
    """GCRA per key in the ``rate_limit`` table (PostgreSQL)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def take(self, key: str, limit: Limit) -> int:
        params = {"key": key, "interval": limit.interval, "burst": limit.burst + 1e-9}
        async with self._engine.begin() as conn:
            taken = (await conn.execute(_TAKE, params)).first()
            waited = 0 if taken is not None else max(1, await self._peek(conn, key, limit))
            if random.randrange(PRUNE_ONE_IN) == 0:
                await conn.execute(_PRUNE)
        return waited

    async def peek(self, key: str, limit: Limit) -> int:
        async with self._engine.connect() as conn:
            return await self._peek(conn, key, limit)

    async def reset(self, key: str) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(_RESET, {"key": key})

    @staticmethod
    async def _peek(conn: AsyncConnection, key: str, limit: Limit) -> int:
        row = (await conn.execute(_STATE, {"key": key})).first()
        if row is None:
            return 0
        return peek(float(row.tat), float(row.now), limit)
