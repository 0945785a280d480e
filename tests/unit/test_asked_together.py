"""``AskedTogether``: many questions asked at once, one read for them (the cancel checks
of the running deployments, ``SqlJobQueue.cancel_requested``)."""

from __future__ import annotations

import asyncio

import pytest
from berth.adapters.sql.together import AskedTogether
from berth.core.errors import StoreUnavailable


class Reads:
    """A store holding ``held``, that records each read's keys and answers when told."""

    def __init__(self, held: set[int]) -> None:
        self.held = held
        self.reads: list[list[int]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.failing: Exception | None = None

    async def __call__(self, keys: list[int]) -> set[int]:
        self.reads.append(keys)
        await self.gate.wait()
        if self.failing is not None:
            raise self.failing
        return self.held & set(keys)


async def test_questions_asked_during_a_read_are_answered_by_the_next_one() -> None:
    """The first question reads alone; the nine asked while it is under way are answered
    together by one more read, each with its own answer."""
    reads = Reads(held={2, 5})
    ask = AskedTogether(reads)
    reads.gate.clear()
    first = asyncio.create_task(ask(1))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    others = [asyncio.create_task(ask(n)) for n in range(2, 11)]
    await asyncio.sleep(0)
    reads.gate.set()
    answers = await asyncio.gather(first, *others)
    assert answers == [n in {2, 5} for n in range(1, 11)]
    assert reads.reads == [[1], list(range(2, 11))]


async def test_one_key_asked_twice_is_read_once_and_both_answered() -> None:
    reads = Reads(held={7})
    ask = AskedTogether(reads)
    assert await asyncio.gather(ask(7), ask(7), ask(8)) == [True, True, False]
    assert reads.reads == [[7, 8]]


async def test_a_failed_read_fails_its_questions_and_the_next_read_goes_on() -> None:
    """A store outage reaches each question of that read; later questions read again."""
    reads = Reads(held={1})
    ask = AskedTogether(reads)
    reads.failing = StoreUnavailable("The store is unreachable.")
    results = await asyncio.gather(ask(1), ask(2), return_exceptions=True)
    assert all(isinstance(r, StoreUnavailable) for r in results)
    reads.failing = None
    assert await ask(1) is True
    assert len(reads.reads) == 2


async def test_a_cancelled_question_leaves_the_others_be() -> None:
    reads = Reads(held={1, 2})
    ask = AskedTogether(reads)
    reads.gate.clear()
    gone, kept = asyncio.create_task(ask(1)), asyncio.create_task(ask(2))
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.sleep(0)
    reads.gate.set()
    assert await kept is True
    with pytest.raises(asyncio.CancelledError):
        await gone
