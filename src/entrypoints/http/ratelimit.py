"""In-process token buckets: requests and deploys per user, failed logins per address."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable

__all__ = ["Buckets"]


class Buckets:
    """One token bucket per key: ``per_minute`` capacity, refilled evenly over a minute."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._capacity = float(max(per_minute, 1))
        self._rate = self._capacity / 60.0
        self._clock = clock
        self._state: dict[Hashable, tuple[float, float]] = {}

    def _level(self, key: Hashable, now: float) -> float:
        tokens, at = self._state.get(key, (self._capacity, now))
        return min(self._capacity, tokens + (now - at) * self._rate)

    def take(self, key: Hashable) -> int:
        """Spend one token; 0 if allowed, else the whole seconds to wait (Retry-After)."""
        now = self._clock()
        tokens = self._level(key, now)
        if tokens >= 1.0:
            self._state[key] = (tokens - 1.0, now)
            if len(self._state) > 10_000:
                self._prune(now)
            return 0
        self._state[key] = (tokens, now)
        return max(1, math.ceil((1.0 - tokens) / self._rate))

    def exhausted(self, key: Hashable) -> int:
        """Like ``take`` but spends nothing: seconds until one token is there, or 0."""
        tokens = self._level(key, self._clock())
        return 0 if tokens >= 1.0 else max(1, math.ceil((1.0 - tokens) / self._rate))

    def _prune(self, now: float) -> None:
        full = [k for k in self._state if self._level(k, now) >= self._capacity]
        for k in full:
            del self._state[k]
