"""Rate limits: one algorithm (GCRA), one port, shared by every limit berth keeps.

GCRA — the generic cell rate algorithm — keeps one number per key, the
*theoretical arrival time* (``tat``): when the key's budget would be full
again. A fresh key may spend ``count`` events at once (its burst), then one
every ``period / count`` seconds, exactly as a token bucket of ``count``
tokens refilled evenly over ``period``. One number per key makes the store's
version a single atomic upsert (``adapters/ratelimit``), so limits hold across
API replicas on PostgreSQL.
"""

from __future__ import annotations

import hashlib
import math
from typing import Protocol

import msgspec

__all__ = [
    "Decision",
    "Limit",
    "LoginThrottle",
    "Quota",
    "RateLimiter",
    "gcra",
    "peek",
    "quota",
    "spend",
]


class Limit(msgspec.Struct, frozen=True):
    """``count`` events per ``period`` seconds, ``count`` of them at once at most."""

    count: int
    period: float

    @property
    def interval(self) -> float:
        """Seconds one event costs."""
        return self.period / max(self.count, 1)

    @property
    def burst(self) -> float:
        """How far ahead of now a key's ``tat`` may run: the whole budget."""
        return self.period

    def tolerance(self, now: float) -> float:
        """Floating-point slack for a clock reading ``now`` (seconds): a few ulps of a
        ``tat`` (now plus up to a period) per event of the budget, never half a slot.
        Without it a frozen clock at epoch seconds (~1.7e9, ulp 2.4e-7) refuses the last
        event of some bursts, as adding ``interval`` ``count`` times rounds above
        ``period``."""
        ulp = math.ulp(max(abs(now) + abs(self.period), 1.0))
        return min(self.interval / 2, 4 * (self.count + 1) * ulp)


class Decision(msgspec.Struct, frozen=True):
    """Whether an event is allowed, the ``tat`` to store, and how long to wait if not."""

    allowed: bool
    tat: float
    retry_after: int


def gcra(tat: float | None, now: float, limit: Limit, cost: int = 1) -> Decision:
    """Spend ``cost`` events of ``limit`` for a key whose stored ``tat`` is given
    (``None``: never seen). Refused, nothing changes: the stored ``tat`` stays. A
    ``cost`` above the whole budget is never allowed (its ``retry_after`` means nothing)."""
    start = now if tat is None else max(tat, now)
    new_tat = start + limit.interval * cost
    if new_tat - now <= limit.burst + limit.tolerance(now):
        return Decision(allowed=True, tat=new_tat, retry_after=0)
    wait = new_tat - now - limit.burst
    return Decision(allowed=False, tat=start, retry_after=max(1, math.ceil(wait)))


def peek(tat: float | None, now: float, limit: Limit) -> int:
    """Whole seconds until one event would be allowed (0: now); spends nothing."""
    decision = gcra(tat, now, limit)
    return 0 if decision.allowed else decision.retry_after


class Quota(msgspec.Struct, frozen=True):
    """What one ``spend`` left of a key's budget: ``retry_after`` (0: the event was
    counted; else the whole seconds to wait, nothing counted), the events still
    ``remaining`` now, and the whole seconds until the whole budget is back (``reset``)."""

    retry_after: int
    remaining: int
    reset: int


def quota(tat: float | None, now: float, limit: Limit, retry_after: int = 0) -> Quota:
    """The ``Quota`` of a key whose stored ``tat`` is given, after a spend that waited
    ``retry_after`` (0: it was counted)."""
    ahead = 0.0 if tat is None else max(tat - now, 0.0)
    tolerance = limit.tolerance(now)
    room = limit.burst - ahead + tolerance
    remaining = max(0, min(limit.count, math.floor(room / limit.interval)))
    reset = max(0, math.ceil(ahead - tolerance))  # 1.0000002 s is 1 s
    return Quota(retry_after=retry_after, remaining=remaining, reset=reset)


def spend(tat: float | None, now: float, limit: Limit) -> tuple[float | None, Quota]:
    """One event of ``limit`` for a key whose stored ``tat`` is given: the ``tat`` to store
    (``None``: refused, the stored one stays) and the ``Quota`` left -- exactly
    ``gcra`` then ``quota`` (a test holds them equal), in one pass that works out the
    interval and the tolerance once: every API request pays it (a quarter of the cost).
    """
    period = limit.period
    interval = period / max(limit.count, 1)
    ulp = math.ulp(max(abs(now) + abs(period), 1.0))
    tolerance = min(interval / 2, 4 * (limit.count + 1) * ulp)
    start = now if tat is None else max(tat, now)
    new_tat = start + interval
    if new_tat - now <= period + tolerance:
        stored, retry_after, ahead = new_tat, 0, max(new_tat - now, 0.0)
    else:
        stored, ahead = None, max(start - now, 0.0)
        retry_after = max(1, math.ceil(new_tat - now - period))
    remaining = max(0, min(limit.count, math.floor((period - ahead + tolerance) / interval)))
    reset = max(0, math.ceil(ahead - tolerance))
    return stored, Quota(retry_after=retry_after, remaining=remaining, reset=reset)


class RateLimiter(Protocol):
    """Counts events per key against a ``Limit``.

    On PostgreSQL every method is one atomic statement on a shared table: two API
    replicas taking the last slot of a key at once never both get it. In memory
    (SQLite, tests) the counts are this process's.
    """

    async def take(self, key: str, limit: Limit) -> int:
        """Count one event: 0 when allowed; else the whole seconds to wait, nothing counted."""
        ...

    async def spend(self, key: str, limit: Limit) -> Quota:
        """``take``, saying what is left of the key's budget too."""
        ...

    async def peek(self, key: str, limit: Limit) -> int:
        """Seconds until ``take`` would be allowed (0: now); counts nothing."""
        ...

    async def reset(self, key: str) -> None:
        """Forget the key's events."""
        ...


class LoginThrottle:
    """Failed sign-ins, counted on the one ``RateLimiter``: at most ``per_email`` failures
    for one email from one client address, and ``per_address`` from one client address
    over every email, within ``window`` seconds (budgets refilled evenly over the window).

    So failures from elsewhere never lock a user out of their own address, and one
    address cannot try its luck on many accounts. A success forgets the failures of that
    email from that address (the address keeps its count). Keys hold a digest of the
    email, never the email itself.
    """

    def __init__(
        self,
        limiter: RateLimiter,
        *,
        per_email: int = 5,
        per_address: int = 20,
        window: float = 300.0,
    ) -> None:
        self._limiter = limiter
        self._pair = Limit(count=max(per_email, 1), period=window)
        self._address = Limit(count=max(per_address, 1), period=window)

    @staticmethod
    def _pair_key(address: str, email: str) -> str:
        digest = hashlib.sha256(email.encode("utf-8")).hexdigest()[:32]
        return f"sign-in:{digest}:{address}"

    async def retry_after(self, address: str, email: str) -> int:
        """Seconds before another attempt from ``address`` for ``email``; 0: now."""
        by_address = await self._limiter.peek(f"sign-in-address:{address}", self._address)
        by_pair = await self._limiter.peek(self._pair_key(address, email), self._pair)
        return max(by_address, by_pair)

    async def failed(self, address: str, email: str) -> None:
        """Count one failed attempt against the address and against the email from it."""
        await self._limiter.take(f"sign-in-address:{address}", self._address)
        await self._limiter.take(self._pair_key(address, email), self._pair)

    async def succeeded(self, address: str, email: str) -> None:
        """Forget the email's failures from ``address`` (the address keeps its count)."""
        await self._limiter.reset(self._pair_key(address, email))
