"""The one rate-limit rule (GCRA, ``core/limits.py``) and its in-memory limiter."""

from __future__ import annotations

import math

import pytest
from berth.adapters.ratelimit import MemoryRateLimiter, memory
from berth.core.limits import Limit, Quota, gcra, peek, quota, spend
from hypothesis import given
from hypothesis import strategies as st

limits = st.builds(
    Limit,
    count=st.integers(min_value=1, max_value=50),
    period=st.floats(min_value=0.5, max_value=3600, allow_nan=False),
)
# Event times: a sorted list of offsets, several at the same instant allowed.
times = st.lists(st.floats(min_value=0, max_value=10_000, allow_nan=False), max_size=120).map(
    sorted
)
# Clocks: a monotonic clock near zero, or epoch seconds (``time.time()``, PostgreSQL's).
origins = st.sampled_from([0.0, 1.7e9, 2.2e9])


def _run(limit: Limit, at: list[float]) -> list[float]:
    """The instants at which events were allowed."""
    tat: float | None = None
    allowed = []
    for now in at:
        decision = gcra(tat, now, limit)
        if decision.allowed:
            tat = decision.tat
            allowed.append(now)
    return allowed


class TestGcra:
    @given(limits, times, origins)
    def test_never_more_than_the_budget_in_any_window(
        self, limit: Limit, at: list[float], origin: float
    ) -> None:
        """In any window of length w, at most count + w * count / period events pass
        (give or take the rounding tolerance of the clock's floats)."""
        allowed = _run(limit, [origin + t for t in at])
        slack = limit.tolerance(origin + 10_000)
        for i, start in enumerate(allowed):
            for j in range(i, len(allowed)):
                window = allowed[j] - start
                assert j - i + 1 <= limit.count + (window + slack) / limit.interval + 1e-6

    @given(limits, st.floats(min_value=0, max_value=1000, allow_nan=False), origins)
    def test_a_fresh_key_has_its_whole_burst(self, limit: Limit, now: float, origin: float) -> None:
        """``count`` events at one instant pass, at epoch seconds too; the next is refused."""
        assert len(_run(limit, [origin + now] * (limit.count + 1))) == limit.count

    def test_the_burst_survives_rounding_at_epoch_seconds(self) -> None:
        """9 per 10 minutes at a frozen ``time.time()``: 9 pass (adding 66.7 s nine times
        rounds above 600 s there)."""
        assert len(_run(Limit(count=9, period=600.0), [1.7e9] * 10)) == 9

    @given(limits, times, origins)
    def test_a_refusal_changes_nothing_and_its_wait_is_honest(
        self, limit: Limit, at: list[float], origin: float
    ) -> None:
        """A refused event keeps the state; after ``retry_after`` seconds one passes."""
        tat: float | None = None
        for now in (origin + t for t in at):
            decision = gcra(tat, now, limit)
            if decision.allowed:
                tat = decision.tat
                continue
            assert decision.tat == max(tat or now, now)
            assert decision.retry_after >= 1
            assert peek(tat, now, limit) == decision.retry_after
            assert gcra(tat, now + decision.retry_after, limit).allowed

    def test_refill_is_even(self) -> None:
        """6 a minute: after the burst, one more every 10 seconds."""
        limit = Limit(count=6, period=60.0)
        assert _run(limit, [0.0] * 7 + [9.0, 10.0, 15.0, 20.0]) == [0.0] * 6 + [10.0, 20.0]


class TestSpend:
    @given(
        st.one_of(
            limits,
            st.builds(Limit, count=st.integers(min_value=1, max_value=10**9), period=st.just(60.0)),
        ),
        st.one_of(st.none(), st.floats(min_value=-4000, max_value=4000, allow_nan=False)),
        st.floats(min_value=0, max_value=10_000, allow_nan=False),
        origins,
    )
    def test_is_gcra_then_quota(
        self, limit: Limit, ahead: float | None, now: float, origin: float
    ) -> None:
        """``spend``, the limiter's one pass, stores and answers exactly what ``gcra``
        followed by ``quota`` do, allowed or refused, at epoch seconds too."""
        at = origin + now
        tat = None if ahead is None else at + ahead
        decision = gcra(tat, at, limit)
        expected = quota(decision.tat, at, limit, decision.retry_after)
        assert spend(tat, at, limit) == (decision.tat if decision.allowed else None, expected)


class TestMemoryRateLimiter:
    async def test_keys_are_counted_apart_and_reset(self) -> None:
        """Each key has its own budget; reset forgets a key; peek spends nothing."""
        now = [0.0]
        limiter = MemoryRateLimiter(clock=lambda: now[0])
        limit = Limit(count=2, period=60.0)
        assert [await limiter.take("a", limit) for _ in range(3)] == [0, 0, 30]
        assert await limiter.take("b", limit) == 0
        assert await limiter.peek("a", limit) == 30
        assert await limiter.peek("a", limit) == 30
        await limiter.reset("a")
        assert await limiter.take("a", limit) == 0
        now[0] = 60.0
        assert await limiter.take("b", limit) == 0

    async def test_peek_agrees_with_take(self) -> None:
        """What ``peek`` says is what the next ``take`` answers."""
        now = [1.7e9]
        limiter = MemoryRateLimiter(clock=lambda: now[0])
        limit = Limit(count=3, period=60.0)
        for step in range(12):
            now[0] += 7.0 * (step % 3)
            assert await limiter.peek("k", limit) == await limiter.take("k", limit)

    async def test_many_keys_are_swept_when_their_budget_is_full_again(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Past ``MAX_KEYS`` keys, those whose budget is full again are forgotten; the
        others keep their counts."""
        monkeypatch.setattr(memory, "MAX_KEYS", 10)
        now = [0.0]
        limiter = MemoryRateLimiter(clock=lambda: now[0])
        limit = Limit(count=1, period=60.0)
        for n in range(9):
            assert await limiter.take(f"old-{n}", limit) == 0
        now[0] = 30.0
        assert await limiter.take("live", limit) == 0  # 10 keys: no sweep yet
        now[0] = 61.0  # the old keys are full again; "live" still counts
        assert await limiter.take("new", limit) == 0  # 11 keys: a sweep
        assert set(limiter._tats) == {"live", "new"}
        assert await limiter.take("live", limit) == 29


class TestQuota:
    @given(count=st.integers(1, 50), period=st.sampled_from([1.0, 60.0, 3600.0]))
    async def test_spends_count_down_the_remaining_then_refuse(
        self, count: int, period: float
    ) -> None:
        """On a frozen clock each spend leaves one fewer (count-1 … 0), with the whole
        budget back after the time spent so far; the next is refused, 0 left, its wait
        the reset."""
        limiter = MemoryRateLimiter(clock=lambda: 1_700_000_000.0)
        limit = Limit(count=count, period=period)
        for spent in range(1, count + 1):
            left = await limiter.spend("k", limit)
            assert left.retry_after == 0
            assert left.remaining == count - spent
            assert left.reset == math.ceil(round(limit.interval * spent, 6))
        refused = await limiter.spend("k", limit)
        assert refused.retry_after >= 1
        assert refused.remaining == 0

    def test_a_fresh_key_has_its_whole_budget(self) -> None:
        """Never seen: everything remains, nothing to wait for."""
        assert quota(None, 5.0, Limit(count=7, period=60.0)) == Quota(0, 7, 0)
