"""The one rate-limit rule (GCRA, ``core/limits.py``) and its in-memory limiter."""

from __future__ import annotations

from berth.adapters.ratelimit import MemoryRateLimiter
from berth.core.limits import Limit, gcra, peek
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
    @given(limits, times)
    def test_never_more_than_the_budget_in_any_window(self, limit: Limit, at: list[float]) -> None:
        """In any window of length w, at most count + w * count / period events pass."""
        allowed = _run(limit, at)
        for i, start in enumerate(allowed):
            for j in range(i, len(allowed)):
                window = allowed[j] - start
                assert j - i + 1 <= limit.count + window / limit.interval + 1e-6

    @given(limits, st.floats(min_value=0, max_value=1000, allow_nan=False))
    def test_a_fresh_key_has_its_whole_burst(self, limit: Limit, now: float) -> None:
        """``count`` events at one instant pass; the next is refused."""
        assert len(_run(limit, [now] * (limit.count + 1))) == limit.count

    @given(limits, times)
    def test_a_refusal_changes_nothing_and_its_wait_is_honest(
        self, limit: Limit, at: list[float]
    ) -> None:
        """A refused event keeps the state; after ``retry_after`` seconds one passes."""
        tat: float | None = None
        for now in at:
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
