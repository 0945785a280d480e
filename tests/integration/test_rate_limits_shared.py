"""One rate limiter whose counts hold across API replicas on PostgreSQL.

The SQL limiter itself, raced from two engines (two "replicas") on a real
PostgreSQL; then two real ``berth serve --no-worker`` processes on one database:
a user's budget is the sum of what both answer, not twice it.
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from berth.adapters.sql import create_engine, limits, migrate
from berth.adapters.sql.limits import SqlRateLimiter
from berth.core.limits import Limit
from harness import BerthProcess
from infra import postgres_database
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine


@pytest.fixture
def db_url() -> Iterator[str]:
    with postgres_database("berth_limits") as url:
        migrate(url)
        yield url


@pytest.fixture
async def engines(db_url: str) -> AsyncIterator[tuple[AsyncEngine, AsyncEngine]]:
    first, second = create_engine(db_url), create_engine(db_url)
    yield first, second
    await first.dispose()
    await second.dispose()


class TestSqlRateLimiter:
    async def test_two_replicas_never_exceed_the_limit_together(
        self, engines: tuple[AsyncEngine, AsyncEngine]
    ) -> None:
        """60 concurrent takes of one key, split over two engines, allow exactly 10."""
        limiters = [SqlRateLimiter(engine) for engine in engines]
        limit = Limit(count=10, period=3600.0)  # no refill during the test
        results = await asyncio.gather(
            *(limiters[n % 2].take("requests:shared", limit) for n in range(60))
        )
        allowed = [r for r in results if r == 0]
        assert len(allowed) == 10
        assert all(r >= 1 for r in results if r)  # refused ones say when to retry

    async def test_a_refused_take_counts_nothing_and_says_when(
        self, engines: tuple[AsyncEngine, AsyncEngine]
    ) -> None:
        """Past the budget a take is refused with the seconds to the next slot; peek agrees."""
        limiter = SqlRateLimiter(engines[0])
        limit = Limit(count=2, period=60.0)  # a slot every 30 s
        assert [await limiter.take("k", limit) for _ in range(2)] == [0, 0]
        refused = await limiter.take("k", limit)
        assert 1 <= refused <= 30
        assert await limiter.peek("k", limit) == refused
        assert await limiter.peek("other", limit) == 0
        await limiter.reset("k")
        assert await limiter.take("k", limit) == 0

    async def test_the_budget_refills(self, engines: tuple[AsyncEngine, AsyncEngine]) -> None:
        """After the retry time a refused key is allowed again (the database's clock)."""
        limiter = SqlRateLimiter(engines[0])
        limit = Limit(count=1, period=1.0)
        assert await limiter.take("refill", limit) == 0
        assert await limiter.take("refill", limit) == 1
        await asyncio.sleep(1.05)
        assert await limiter.take("refill", limit) == 0

    async def test_keys_longer_than_the_column_are_counted_apart(
        self, engines: tuple[AsyncEngine, AsyncEngine]
    ) -> None:
        """Keys past 300 characters work, and two that share a long prefix don't collide."""
        limiter = SqlRateLimiter(engines[0])
        limit = Limit(count=1, period=3600.0)
        first, second = "sign-in-email:" + "a" * 400, "sign-in-email:" + "a" * 399 + "b"
        assert await limiter.take(first, limit) == 0
        assert await limiter.take(first, limit) >= 1
        assert await limiter.take(second, limit) == 0
        await limiter.reset(first)
        assert await limiter.peek(first, limit) == 0

    async def test_rows_whose_budget_is_full_again_are_deleted(
        self, engines: tuple[AsyncEngine, AsyncEngine], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A take's clean-up deletes the keys that are full again and keeps the others."""
        limiter = SqlRateLimiter(engines[0])
        await limiter.take("spent", Limit(count=1, period=0.2))
        await limiter.take("counting", Limit(count=1, period=3600.0))
        await asyncio.sleep(0.3)
        monkeypatch.setattr(limits, "PRUNE_ONE_IN", 1)
        assert await limiter.take("trigger", Limit(count=1, period=3600.0)) == 0
        async with engines[1].connect() as conn:
            keys = set((await conn.execute(text("SELECT key FROM rate_limit"))).scalars())
        assert keys == {"counting", "trigger"}


def test_two_serve_replicas_share_a_users_budget(tmp_path: Path, db_url: str) -> None:
    """Two ``serve --no-worker`` on one PostgreSQL: 6 requests a minute in all, not 12."""
    env = {
        "BERTH_DATABASE_URL": db_url,
        "BERTH_SECRET_KEY": base64.b64encode(os.urandom(32)).decode(),
        "BERTH_RATE_LIMIT": "6",
    }
    replicas = [
        BerthProcess(tmp_path / f"replica-{n}", env=dict(env), args=["--no-worker"]).start()
        for n in range(2)
    ]
    try:
        ((_, token),) = replicas[0].new_users(1, "shared")
        statuses = []
        for n in range(12):
            response = httpx.get(
                f"{replicas[n % 2].url}/api/agent/servers",
                headers={"Authorization": f"Bearer {token}"},
                timeout=10,
            )
            statuses.append(response.status_code)
        assert statuses.count(200) == 6, statuses
        assert statuses.count(429) == 6, statuses
        assert set(statuses[:6]) == {200}  # the first six, whichever replica answered
    finally:
        for replica in replicas:
            replica.stop()
