"""What a unit of work does with the events recorded in it (cosmicpython's
``collect_new_events``, with the outbox in the transaction).

A use case records what happened on the unit of work it changes the store in
(``uow.record(DeploymentQueued(…))``). When that unit of work commits, the events go
to their handlers in two waves:

* **in the transaction**, before the commit: the handlers whose writes must stand or
  fall with the change (the webhook outbox; an audit log would be one more). They get
  the same unit of work; an error in one rolls the change back with it.
* **after the commit**, in this process: the subscribers that make things happen
  sooner (a worker's wake-up, ``?wait`` waiters, a monitor pass). One that fails is
  logged and skipped; nothing that must not be lost rides on them alone.

A unit of work left without a commit hands nothing to anyone. Every implementation of
:class:`~berth.core.ports.UnitOfWork` (the SQL store's, the job queue's and the
fleet's transactions, the test fakes) keeps its events in a :class:`RecordedEvents`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import structlog

from .events import Event
from .ports import UnitOfWork

__all__ = ["EventHandlers", "InTransaction", "RecordedEvents", "Subscriber"]

log = structlog.get_logger()

E = TypeVar("E", bound=Event)

#: A handler run in the recording unit of work's transaction, before it commits.
InTransaction = Callable[[Any, UnitOfWork], Awaitable[None]]
#: A subscriber, called once the recording unit of work committed; it must not block.
Subscriber = Callable[[Any], None]


class EventHandlers:
    """Each kind of event to its handlers in the transaction and its subscribers after it."""

    def __init__(self) -> None:
        self._in_transaction: defaultdict[type[Event], list[InTransaction]] = defaultdict(list)
        self._subscribers: defaultdict[type[Event], list[Subscriber]] = defaultdict(list)

    def in_transaction(
        self, event: type[E], handler: Callable[[E, UnitOfWork], Awaitable[None]]
    ) -> None:
        """Run ``handler`` with every ``event`` and the unit of work that recorded it,
        before that unit of work commits."""
        self._in_transaction[event].append(cast(InTransaction, handler))

    def subscribe(self, event: type[E], subscriber: Callable[[E], None]) -> None:
        """Call ``subscriber`` with every ``event`` once it is committed (or published)."""
        self._subscribers[event].append(cast(Subscriber, subscriber))

    async def before_commit(self, event: Event, uow: UnitOfWork) -> None:
        """Run ``event``'s in-transaction handlers in ``uow``; the first error stops them
        (and the commit: the caller rolls back)."""
        for handler in self._in_transaction.get(type(event), ()):
            await handler(event, uow)

    def publish(self, event: Event) -> None:
        """Hand ``event`` to its subscribers now; one that fails is logged and skipped."""
        for subscriber in self._subscribers.get(type(event), ()):
            try:
                subscriber(event)
            except Exception:
                log.exception("event_subscriber_failed", event_type=type(event).__name__)


class RecordedEvents:
    """The events of one unit of work, from ``record`` to its ``commit``.

    Without ``handlers`` (a store used on its own, e.g. in a test of its repositories)
    events are recorded and dropped at the commit.
    """

    def __init__(self, handlers: EventHandlers | None) -> None:
        self._handlers = handlers
        self._new: list[Event] = []

    def record(self, event: Event) -> None:
        self._new.append(event)

    async def commit(self, uow: UnitOfWork, commit: Callable[[], Awaitable[None]]) -> None:
        """Run the in-transaction handlers of the events recorded since the last commit
        (and of any they record), ``commit()``, then hand the events to the subscribers."""
        handled = 0
        while self._handlers is not None and handled < len(self._new):
            await self._handlers.before_commit(self._new[handled], uow)
            handled += 1
        committed, self._new = self._new, []  # a commit that fails drops them with the change
        await commit()
        if self._handlers is not None:
            for event in committed:
                self._handlers.publish(event)
