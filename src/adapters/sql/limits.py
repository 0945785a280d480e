"""``RateLimiter`` in PostgreSQL: the counts every API replica shares.

One row per key holds its GCRA state (``core/limits.py``), the theoretical
arrival time in the database's clock (so replicas with skewed clocks agree).
Taking a slot is one atomic statement: an upsert whose update only happens
when the event is allowed, so two replicas racing for the last slot of a key
never both get it. Keys whose budget is full again are deleted now and then,
after the take's transaction and skipping rows another transaction holds, so a
clean-up never makes a request wait.
"""

from __future__ import annotations

import hashlib
import random
import time

from berth.core.limits import Limit, Quota, peek, quota
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from .faults import store_errors

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
    RETURNING tat, (SELECT now FROM n) AS now
    """
)
_STATE = text(
    "SELECT tat, extract(epoch FROM clock_timestamp())::double precision AS now"
    " FROM rate_limit WHERE key = :key"
)
_RESET = text("DELETE FROM rate_limit WHERE key = :key")
_PRUNE = text(
    """
    DELETE FROM rate_limit WHERE key IN (
        SELECT key FROM rate_limit
        WHERE tat < extract(epoch FROM clock_timestamp())::double precision
        LIMIT :batch FOR UPDATE SKIP LOCKED
    )
    """
)

PRUNE_ONE_IN = 1000
PRUNE_BATCH = 10_000
KEY_MAX = 300  # tables.RateLimit.key: a longer key is stored as a prefix and its digest


def _row_key(key: str) -> str:
    if len(key) <= KEY_MAX:
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()
    return f"{key[: KEY_MAX - len(digest) - 1]}#{digest}"


class SqlRateLimiter:
    """GCRA per key in the ``rate_limit`` table (PostgreSQL). An unreachable database
    raises ``StoreUnavailable`` (``faults.store_errors``), as the units of work do."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def take(self, key: str, limit: Limit) -> int:
        return (await self.spend(key, limit)).retry_after

    async def spend(self, key: str, limit: Limit) -> Quota:
        # The database's clock counts epoch seconds like time.time(): same rounding.
        ceiling = limit.burst + limit.tolerance(time.time())
        params = {"key": _row_key(key), "interval": limit.interval, "burst": ceiling}
        with store_errors():
            async with self._engine.begin() as conn:
                taken = (await conn.execute(_TAKE, params)).first()
                if taken is not None:
                    left = quota(float(taken.tat), float(taken.now), limit)
                else:
                    row = (await conn.execute(_STATE, {"key": _row_key(key)})).first()
                    tat, now = (None, 0.0) if row is None else (float(row.tat), float(row.now))
                    wait = max(1, 0 if tat is None else peek(tat, now, limit))
                    left = quota(tat, now, limit, wait)
            if random.randrange(PRUNE_ONE_IN) == 0:
                async with self._engine.begin() as conn:
                    await conn.execute(_PRUNE, {"batch": PRUNE_BATCH})
        return left

    async def peek(self, key: str, limit: Limit) -> int:
        with store_errors():
            async with self._engine.connect() as conn:
                return await self._peek(conn, key, limit)

    async def reset(self, key: str) -> None:
        with store_errors():
            async with self._engine.begin() as conn:
                await conn.execute(_RESET, {"key": _row_key(key)})

    @staticmethod
    async def _peek(conn: AsyncConnection, key: str, limit: Limit) -> int:
        row = (await conn.execute(_STATE, {"key": _row_key(key)})).first()
        if row is None:
            return 0
        return peek(float(row.tat), float(row.now), limit)
