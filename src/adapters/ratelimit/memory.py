"""``RateLimiter`` in this process's memory: one ``tat`` per key."""

from __future__ import annotations

import time
from collections.abc import Callable

from berth.core.limits import Limit, Quota, peek, spend

__all__ = ["MemoryRateLimiter"]

MAX_KEYS = 20_000


class MemoryRateLimiter:
    """GCRA per key; keys whose budget is full again are dropped when there are many.

    A sweep runs when the keys outgrow ``MAX_KEYS`` or twice what the last sweep
    kept, so a crowd of keys that are all still counting costs one sweep per
    doubling, not one per take.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._tats: dict[str, float] = {}
        self._sweep_above = MAX_KEYS

    async def take(self, key: str, limit: Limit) -> int:
        return (await self.spend(key, limit)).retry_after

    async def spend(self, key: str, limit: Limit) -> Quota:
        now = self._clock()
        tat, left = spend(self._tats.get(key), now, limit)
        if tat is None:
            return left
        self._tats[key] = tat
        if len(self._tats) > self._sweep_above:
            self._tats = {k: t for k, t in self._tats.items() if t > now}
            self._sweep_above = max(MAX_KEYS, 2 * len(self._tats))
        return left

    async def peek(self, key: str, limit: Limit) -> int:
        tat = self._tats.get(key)
        if tat is None:  # never counted (the usual address: none of its requests failed)
            return 0
        return peek(tat, self._clock(), limit)

    async def reset(self, key: str) -> None:
        self._tats.pop(key, None)
