"""Open streams: how many one user and one process hold, and that each one's credential
still holds while it runs.

A stream — a deployment's events, a container's followed output, a dashboard page's
live region — stays open for as long as its reader wants, on one authentication.
``OpenStreams.open`` is the one place every stream goes through:

* it takes a slot first: past ``per_user`` streams of one user, or ``per_process`` in
  all, the stream is refused (``TooManyStreams``, naming the limit) before anything is
  sent; the slot is given back however the stream ends (its end, its reader leaving,
  or never being read at all);
* while the stream runs, it asks the credential again every ``recheck`` seconds (5),
  also while the stream waits for its next item, and ends the stream the first time
  the answer is no: the token was regenerated, the session signed out or expired.
  While the store cannot answer, the stream goes on and is asked again at the next
  tick (every other request fails meanwhile anyway).

Slots are this process's: they bound what one process holds (sockets, memory, the
store's re-checks), and an API replica counts its own.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar
from uuid import UUID

import structlog

from .errors import StoreUnavailable, TooManyStreams

__all__ = ["RECHECK_SECONDS", "Credential", "OpenStreams"]

log = structlog.get_logger()

T = TypeVar("T")

#: Seconds between two checks of an open stream's credential, at most.
RECHECK_SECONDS = 5.0

#: What a refused stream's client is told to wait before trying again, in seconds.
RETRY_AFTER = 5


@dataclass(frozen=True, slots=True)
class Credential:
    """Whom a request acts for, and how to ask again whether its credential still holds
    (``True``: it does; ``False``: revoked or expired; ``StoreUnavailable``: unknown now)."""

    user_id: UUID
    still_valid: Callable[[], Awaitable[bool]]


class _Slot:
    """One open stream's place in the counts; given back once."""

    def __init__(self, streams: OpenStreams, user_id: UUID) -> None:
        self._streams = streams
        self.user_id = user_id
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._streams._release(self.user_id)


class OpenStreams:
    """The streams this process serves: at most ``per_user`` for one user and
    ``per_process`` in all, each ended within ``recheck`` seconds of its credential's
    revocation."""

    def __init__(
        self, *, per_user: int, per_process: int, recheck: float = RECHECK_SECONDS
    ) -> None:
        self.per_user = max(per_user, 1)
        self.per_process = max(per_process, 1)
        self._recheck = recheck
        self._by_user: Counter[UUID] = Counter()
        self._total = 0

    def count(self, user_id: UUID | None = None) -> int:
        """Streams open now: ``user_id``'s, or all of them."""
        return self._total if user_id is None else self._by_user[user_id]

    def open(self, credential: Credential, items: AsyncIterator[T]) -> AsyncIterator[T]:
        """``items`` as a stream of ``credential``'s user: its slot is taken now
        (``TooManyStreams`` if none is free), its credential asked again while it runs.
        Iterate the result once; closing it closes ``items``."""
        slot = self._take(credential.user_id)
        guarded = self._guarded(slot, credential, items)
        # A stream never iterated (its response never started) gives its slot back too.
        weakref.finalize(guarded, slot.release)
        return guarded

    def _take(self, user_id: UUID) -> _Slot:
        if self._by_user[user_id] >= self.per_user:
            raise TooManyStreams(
                RETRY_AFTER,
                f"You have {self.per_user} streams open, the most one user may have at once "
                "(BERTH_STREAMS_PER_USER); close one, then retry.",
            )
        if self._total >= self.per_process:
            raise TooManyStreams(
                RETRY_AFTER,
                f"This berth serves {self.per_process} streams, the most it serves at once "
                "(BERTH_STREAMS_PER_PROCESS); retry later.",
            )
        self._by_user[user_id] += 1
        self._total += 1
        return _Slot(self, user_id)

    def _release(self, user_id: UUID) -> None:
        self._by_user[user_id] -= 1
        if self._by_user[user_id] <= 0:
            del self._by_user[user_id]
        self._total -= 1

    async def _guarded(
        self, slot: _Slot, credential: Credential, items: AsyncIterator[T]
    ) -> AsyncIterator[T]:
        loop = asyncio.get_running_loop()
        checked = loop.time()
        pending: asyncio.Future[T] | None = None
        try:
            while True:
                if pending is None:
                    pending = asyncio.ensure_future(_next(items))
                wait = max(0.0, checked + self._recheck - loop.time())
                done, _ = await asyncio.wait({pending}, timeout=wait)
                if done:
                    ready, pending = pending, None
                    try:
                        item = ready.result()
                    except StopAsyncIteration:
                        return
                    yield item
                if loop.time() - checked >= self._recheck:
                    checked = loop.time()
                    if not await _checked(credential):
                        log.info("stream_credential_revoked", user_id=str(credential.user_id))
                        return
        finally:
            if pending is not None:
                pending.cancel()
                await asyncio.wait({pending})
                if not pending.cancelled():
                    pending.exception()  # seen: not reported as never retrieved
            close = getattr(items, "aclose", None)
            if close is not None:
                await close()
            slot.release()


async def _next(items: AsyncIterator[T]) -> T:
    return await anext(items)


#: Checks still running after the stream that asked them ended (held, so they finish).
_finishing: set[asyncio.Task[bool]] = set()


async def _checked(credential: Credential) -> bool:
    """Whether ``credential`` still holds. The check runs to its end even if the stream
    ends meanwhile (its reader left): a store read cut short is logged as an error."""
    check = asyncio.ensure_future(_still_valid(credential))
    _finishing.add(check)
    check.add_done_callback(_finishing.discard)
    return await asyncio.shield(check)


async def _still_valid(credential: Credential) -> bool:
    try:
        return await credential.still_valid()
    except StoreUnavailable:
        return True  # unknown now: asked again at the next tick
