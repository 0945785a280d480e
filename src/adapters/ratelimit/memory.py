"""``RateLimiter`` in this process's memory: one ``tat`` per key."""

from __future__ import annotations

import time
from collections.abc import Callable

from berth.core.limits import Limit, gcra, peek

__all__ = ["MemoryRateLimiter"]

MAX_KEYS = 20_000


class MemoryRateLimiter:
    """GCRA per key; keys whose budget is full again are dropped when there are many."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._tats: dict[str, float] = {}

    async def take(self, key: str, limit: Limit) -> int:
        now = self._clock()
        decision = gcra(self._tats.get(key), now, limit)
        if not decision.allowed:
            return decision.retry_after
        self._tats[key] = decision.tat
        if len(self._tats) > MAX_KEYS:
            self._tats = {k: t for k, t in self._tats.items() if t > now}
        return 0

    async def peek(self, key: str, limit: Limit) -> int:
        return peek(self._tats.get(key), self._clock(), limit)

    async def reset(self, key: str) -> None:
        self._tats.pop(key, None)
