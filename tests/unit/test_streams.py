"""``OpenStreams``: slots per user and per process, and streams that end once their
credential no longer holds."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from uuid import UUID, uuid4

import pytest
from berth.core.errors import StoreUnavailable, TooManyStreams
from berth.core.streams import Credential, OpenStreams

RECHECK = 0.05


class Revocable:
    """A credential that holds until ``revoke()``; counts how often it was asked."""

    def __init__(self, user_id: UUID | None = None) -> None:
        self.user_id = user_id or uuid4()
        self.valid = True
        self.asked = 0
        self.failing = False

    async def still_valid(self) -> bool:
        self.asked += 1
        if self.failing:
            raise StoreUnavailable("the store is down")
        return self.valid

    def credential(self) -> Credential:
        return Credential(user_id=self.user_id, still_valid=self.still_valid)


class Endless:
    """An iterator that yields ``first`` items at once, then waits forever; records
    whether it was closed."""

    def __init__(self, first: int = 0) -> None:
        self.first = first
        self.closed = False

    def __aiter__(self) -> AsyncIterator[int]:
        return self._items()

    async def _items(self) -> AsyncIterator[int]:
        try:
            for i in range(self.first):
                yield i
            await asyncio.Event().wait()
            yield -1  # never
        finally:
            self.closed = True


async def _drain(items: AsyncIterator[int]) -> list[int]:
    return [item async for item in items]


class TestSlots:
    async def test_past_the_users_limit_a_stream_is_refused(self) -> None:
        """The user's next stream past ``per_user`` is TooManyStreams naming that limit;
        another user still gets one."""
        streams = OpenStreams(per_user=2, per_process=10, recheck=RECHECK)
        alice = Revocable()
        held = [streams.open(alice.credential(), aiter(Endless())) for _ in range(2)]
        with pytest.raises(TooManyStreams) as refused:
            streams.open(alice.credential(), aiter(Endless()))
        assert "BERTH_STREAMS_PER_USER" in refused.value.detail
        assert refused.value.retry_after > 0
        held.append(streams.open(Revocable().credential(), aiter(Endless())))
        assert streams.count(alice.user_id) == 2
        assert streams.count() == 3

    async def test_past_the_processs_limit_a_stream_is_refused(self) -> None:
        """Past ``per_process`` streams in all, anyone's next is refused naming that limit."""
        streams = OpenStreams(per_user=5, per_process=2, recheck=RECHECK)
        held = [streams.open(Revocable().credential(), aiter(Endless())) for _ in range(2)]
        with pytest.raises(TooManyStreams) as refused:
            streams.open(Revocable().credential(), aiter(Endless()))
        assert "BERTH_STREAMS_PER_PROCESS" in refused.value.detail
        assert len(held) == 2

    async def test_a_slot_comes_back_however_the_stream_ends(self) -> None:
        """Read to its end, closed by its reader, or never read at all: each stream gives
        its slot back."""
        streams = OpenStreams(per_user=1, per_process=1, recheck=RECHECK)
        user = Revocable()

        async def three() -> AsyncIterator[int]:
            for i in range(3):
                yield i

        assert await _drain(streams.open(user.credential(), three())) == [0, 1, 2]
        assert streams.count() == 0
        inner = Endless(first=1)
        read = streams.open(user.credential(), aiter(inner))
        assert await anext(read) == 0
        await read.aclose()  # type: ignore[attr-defined]
        assert inner.closed
        assert streams.count() == 0
        never = streams.open(user.credential(), aiter(Endless()))
        assert streams.count() == 1
        del never
        gc.collect()
        assert streams.count() == 0
        streams.open(user.credential(), aiter(Endless()))  # the slot is free again


class TestRecheck:
    async def test_a_revoked_credential_ends_a_waiting_stream(self) -> None:
        """A stream waiting for its next item goes on while its credential holds, and
        ends within the re-check interval once it is revoked, closing what it read."""
        streams = OpenStreams(per_user=1, per_process=1, recheck=RECHECK)
        user = Revocable()
        inner = Endless(first=2)
        stream = streams.open(user.credential(), aiter(inner))
        reading = asyncio.ensure_future(_drain(stream))
        for _ in range(200):  # still open after several checks
            await asyncio.sleep(RECHECK / 5)
            if user.asked >= 3:
                break
        assert user.asked >= 3
        assert not reading.done()
        user.valid = False
        items = await asyncio.wait_for(reading, timeout=10)
        assert items == [0, 1]
        assert inner.closed
        assert streams.count() == 0

    async def test_a_busy_stream_is_checked_too(self) -> None:
        """A stream whose items never stop coming is still asked, and ended when revoked."""
        streams = OpenStreams(per_user=1, per_process=1, recheck=RECHECK)
        user = Revocable()

        async def busy() -> AsyncIterator[int]:
            i = 0
            while True:
                await asyncio.sleep(0)
                i += 1
                yield i

        stream = streams.open(user.credential(), busy())
        seen = 0
        async for _ in stream:
            seen += 1
            if seen == 50:
                user.valid = False
        assert user.asked >= 1
        assert streams.count() == 0

    async def test_an_unanswered_check_keeps_the_stream(self) -> None:
        """While the store cannot say, the stream goes on and is asked again."""
        streams = OpenStreams(per_user=1, per_process=1, recheck=RECHECK)
        user = Revocable()
        user.failing = True
        stream = streams.open(user.credential(), aiter(Endless()))
        reading = asyncio.ensure_future(_drain(stream))
        for _ in range(200):
            await asyncio.sleep(RECHECK / 5)
            if user.asked >= 3:
                break
        assert user.asked >= 3
        assert not reading.done()
        user.failing, user.valid = False, False
        assert await asyncio.wait_for(reading, timeout=10) == []
