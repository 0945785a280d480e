"""``LoginThrottle`` in memory: failed sign-ins per client address and per email.

A sliding window per key: after ``limit`` failures within ``window``, the key
waits until the oldest of them leaves the window. Per process, like the API's
rate limits (several ``berth serve`` replicas each count their own).
"""

from __future__ import annotations

import math
from collections import deque
from datetime import datetime, timedelta

from berth.core.ports import Clock

__all__ = ["MemoryLoginThrottle"]

MAX_KEYS = 20_000


class _Window:
    """Failure times per key, forgetting those older than ``window``."""

    def __init__(self, limit: int, window: timedelta) -> None:
        self.limit = max(1, limit)
        self.window = window
        self._failures: dict[str, deque[datetime]] = {}

    def _recent(self, key: str, now: datetime) -> deque[datetime]:
        times = self._failures.get(key)
        if times is None:
            return deque()
        while times and times[0] <= now - self.window:
            times.popleft()
        if not times:
            del self._failures[key]
        return times

    def wait(self, key: str, now: datetime) -> int:
        times = self._recent(key, now)
        if len(times) < self.limit:
            return 0
        free_at = times[-self.limit] + self.window
        return max(1, math.ceil((free_at - now).total_seconds()))

    def add(self, key: str, now: datetime) -> None:
        times = self._recent(key, now)
        if not times:
            if len(self._failures) >= MAX_KEYS:
                self._prune(now)
            self._failures[key] = times
        times.append(now)
        while len(times) > self.limit:  # older ones can no longer change the answer
            times.popleft()

    def forget(self, key: str) -> None:
        self._failures.pop(key, None)

    def _prune(self, now: datetime) -> None:
        for key in list(self._failures):
            self._recent(key, now)
        while len(self._failures) >= MAX_KEYS:  # still full: drop the oldest keys
            del self._failures[next(iter(self._failures))]


class MemoryLoginThrottle:
    """At most ``per_address`` failures per client address and ``per_email`` per email
    address within ``window``; a success forgets the email's failures only."""

    def __init__(
        self,
        clock: Clock,
        *,
        per_email: int = 5,
        per_address: int = 20,
        window: timedelta = timedelta(minutes=5),
    ) -> None:
        self._clock = clock
        self._addresses = _Window(per_address, window)
        self._emails = _Window(per_email, window)

    def retry_after(self, address: str, email: str) -> int:
        now = self._clock.now()
        return max(self._addresses.wait(address, now), self._emails.wait(email, now))

    def failed(self, address: str, email: str) -> None:
        now = self._clock.now()
        self._addresses.add(address, now)
        self._emails.add(email, now)

    def succeeded(self, address: str, email: str) -> None:
        self._emails.forget(email)
