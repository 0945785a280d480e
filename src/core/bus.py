"""The message bus: the one application layer every entrypoint goes through.

An entrypoint parses its input into a command and calls
``await bus.handle(command, actor)``; the bus runs the command's one handler
(registered once, in :func:`berth.core.handlers.register`) and the handler
publishes the events of what it did. Subscribers react to events — the
worker's wake-up, waiters — so no entrypoint has to remember to wake anything.
This is the shape of cosmicpython's ``messagebus.py``, with async handlers and
the caller (``actor``) passed beside the command rather than inside it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar, cast, overload

import structlog

from .commands import Command
from .errors import Unauthorized
from .events import Event
from .models import User

__all__ = ["Handler", "MessageBus", "Subscriber"]

log = structlog.get_logger()

R = TypeVar("R")
C = TypeVar("C", bound=Command[Any])
E = TypeVar("E", bound=Event)

#: A command's handler: ``(actor, command) -> result``.
Handler = Callable[[User | None, Any], Awaitable[Any]]
#: An event's subscriber: called at once, in this process; it must not block.
Subscriber = Callable[[Any], None]


class MessageBus:
    """Commands to their one handler; events to every subscriber."""

    def __init__(self) -> None:
        self._handlers: dict[type[Command[Any]], Handler] = {}
        self._public: set[type[Command[Any]]] = set()
        self._subscribers: defaultdict[type[Event], list[Subscriber]] = defaultdict(list)

    @overload
    def register(self, command: type[C], handler: Callable[[User, C], Awaitable[Any]]) -> None: ...

    @overload
    def register(
        self,
        command: type[C],
        handler: Callable[[User | None, C], Awaitable[Any]],
        *,
        public: Literal[True],
    ) -> None: ...

    def register(
        self,
        command: type[C],
        handler: Callable[[Any, C], Awaitable[Any]],
        *,
        public: bool = False,
    ) -> None:
        """``handler`` handles ``command``; a ``public`` one needs no signed-in actor (it
        gets ``None`` when nobody is signed in); any other gets the signed-in ``User``, as
        :meth:`handle` refuses a missing one before it runs."""
        if command in self._handlers:
            raise ValueError(f"{command.__name__} already has a handler")
        self._handlers[command] = cast(Handler, handler)
        if public:
            self._public.add(command)

    def subscribe(self, event: type[E], subscriber: Callable[[E], None]) -> None:
        """Call ``subscriber`` with every ``event`` published from now on."""
        self._subscribers[event].append(cast(Subscriber, subscriber))

    async def handle(self, command: Command[R], actor: User | None = None) -> R:
        """Run ``command``'s handler for ``actor``; its errors are the caller's to map.

        A command that is not public refuses a missing actor (``Unauthorized``): the
        ownership of every id is checked against the actor in the store's queries.
        """
        kind = type(command)
        handler = self._handlers.get(kind)
        if handler is None:
            raise LookupError(f"no handler for {kind.__name__}")
        if actor is None and kind not in self._public:
            raise Unauthorized()
        return cast(R, await handler(actor, command))

    def publish(self, event: Event) -> None:
        """Hand ``event`` to its subscribers now; one that fails is logged and skipped."""
        for subscriber in self._subscribers.get(type(event), ()):
            try:
                subscriber(event)
            except Exception:
                log.exception("event_subscriber_failed", event_type=type(event).__name__)
