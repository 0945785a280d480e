"""The message bus: the one application layer every entrypoint goes through.

An entrypoint parses its input into a command and calls
``await bus.handle(command, actor)``; the bus runs the command's one handler
(registered once, by the composition root) and the handler records the events of
what it did on its unit of work, which hands them on when it commits
(:mod:`berth.core.unit_of_work`). Subscribers react to events — the worker's
wake-up, waiters — so no entrypoint has to remember to wake anything. This is the
shape of cosmicpython's ``messagebus.py``, with async handlers and the caller
(``actor``) passed beside the command rather than inside it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar, cast, overload

from .commands import Command
from .errors import Unauthorized
from .events import Event
from .models import User
from .unit_of_work import EventHandlers

__all__ = ["Handler", "MessageBus"]

R = TypeVar("R")
C = TypeVar("C", bound=Command[Any])
E = TypeVar("E", bound=Event)

#: A command's handler: ``(actor, command) -> result``.
Handler = Callable[[User | None, Any], Awaitable[Any]]


class MessageBus:
    """Commands to their one handler; events (through ``events``) to their handlers."""

    def __init__(self, events: EventHandlers | None = None) -> None:
        self.events = events or EventHandlers()
        self._handlers: dict[type[Command[Any]], Handler] = {}
        self._public: set[type[Command[Any]]] = set()

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
        """Call ``subscriber`` with every ``event`` committed (or published) from now on."""
        self.events.subscribe(event, subscriber)

    async def handle(self, command: Command[R], actor: User | None = None) -> R:
        """Run ``command``'s handler for ``actor``; its errors are the caller's to map.

        A command that is not public refuses a missing actor (``Unauthorized``): the
        ownership of every id is checked against the actor in the store's queries.
        """
        kind = type(command)
        handler = self._handlers.get(kind)
        if handler is None:
            raise LookupError(f"no handler for {kind.__name__}")
        self._admit(kind, actor)
        return cast(R, await handler(actor, command))

    def _admit(self, kind: type[Command[Any]], actor: User | None) -> None:
        """Whether ``actor`` may send a ``kind`` at all, before its handler runs (the one
        place a command's required right would be checked)."""
        if actor is None and kind not in self._public:
            raise Unauthorized()

    def publish(self, event: Event) -> None:
        """Hand ``event`` to its subscribers now, as a commit that recorded it would."""
        self.events.publish(event)
