"""Questions of one kind asked by many at once, answered by one read."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["AskedTogether"]

K = TypeVar("K", bound=Hashable)


class AskedTogether(Generic[K]):
    """Whether each key is in a set the store holds, asked key by key, read for many.

    ``read(keys)`` answers which of ``keys`` are in it. The first question starts a
    read; the questions asked while it is under way wait for the next one, which
    answers them all. So twenty running deployments that each ask twice a second
    whether a cancel was requested send a few reads, not forty transactions. A read that
    fails fails each question it was to answer; a question whose caller is cancelled
    leaves the others be. Single event loop.
    """

    def __init__(self, read: Callable[[list[K]], Awaitable[set[K]]]) -> None:
        self._read = read
        self._asked: list[tuple[K, asyncio.Future[bool]]] = []
        self._reading: asyncio.Task[None] | None = None

    async def __call__(self, key: K) -> bool:
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._asked.append((key, answer))
        if self._reading is None:
            self._reading = asyncio.create_task(self._answer_all())
        return await answer

    async def _answer_all(self) -> None:
        try:
            while self._asked:
                asked, self._asked = self._asked, []
                try:
                    found = await self._read(list(dict.fromkeys(key for key, _ in asked)))
                except Exception as exc:  # each question it was to answer gets it
                    for _, answer in asked:
                        if not answer.done():
                            answer.set_exception(exc)
                    continue
                except BaseException:  # cancelled (shutting down): so is every question left
                    for _, answer in asked + self._asked:
                        answer.cancel()
                    self._asked = []
                    raise
                for key, answer in asked:
                    if not answer.done():
                        answer.set_result(key in found)
        finally:
            self._reading = None
