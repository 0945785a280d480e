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
from typing import Any, Literal, Protocol, TypeVar, cast, overload
from uuid import UUID

from .access import Actor, Right, needed_words
from .commands import Command
from .errors import InsufficientScope, NotFound, Unauthorized
from .events import Event
from .models import User
from .unit_of_work import EventHandlers

__all__ = ["Access", "Handler", "MessageBus"]

R = TypeVar("R")
C = TypeVar("C", bound=Command[Any])
E = TypeVar("E", bound=Event)

#: A command's handler: ``(actor, command) -> result``.
Handler = Callable[[Actor | None, Any], Awaitable[Any]]


class Access(Protocol):
    """What the bus asks the store about actors (``berth.core.use_cases.TeamAccess``)."""

    async def act_in(self, actor: Actor, team_id: UUID) -> Actor:
        """``actor``'s user acting in ``team_id`` with their role there and the same
        credential; ``NotFound`` if they are not a member, or the credential is a named
        token of another team."""
        ...

    async def refused(self, actor: Actor, command: Command[Any], needed: Right) -> None:
        """Record in the audit log that ``actor`` was refused ``command``."""
        ...


class MessageBus:
    """Commands to their one handler; events (through ``events``) to their handlers.

    ``access`` is how the bus learns an actor's role in another team and records a
    refusal (without it, a bus built for a test alone: no team but the actor's own, and
    refusals are not recorded).
    """

    def __init__(self, events: EventHandlers | None = None, access: Access | None = None) -> None:
        self.events = events or EventHandlers()
        self.access = access
        self._handlers: dict[type[Command[Any]], Handler] = {}

    @overload
    def register(self, command: type[C], handler: Callable[[Actor, C], Awaitable[Any]]) -> None: ...

    @overload
    def register(
        self,
        command: type[C],
        handler: Callable[[Actor | None, C], Awaitable[Any]],
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
        """``handler`` handles ``command``. The right the command needs is its own
        (``command.right``; a class without one cannot be registered); ``public`` must
        say what a ``Right.PUBLIC`` command's handler gets: ``None`` when nobody is
        signed in. Any other gets the signed-in ``Actor``, as :meth:`handle` refuses a
        missing one (and one without the right) before it runs."""
        if command in self._handlers:
            raise ValueError(f"{command.__name__} already has a handler")
        right = getattr(command, "right", None)
        if not isinstance(right, Right):
            raise TypeError(f"{command.__name__} declares no right (Command.right)")
        if public != (right is Right.PUBLIC):
            raise TypeError(f"{command.__name__}: public= must match its right ({right})")
        self._handlers[command] = cast(Handler, handler)

    def registered(self) -> list[type[Command[Any]]]:
        """Every command with a handler, as registered."""
        return list(self._handlers)

    def subscribe(self, event: type[E], subscriber: Callable[[E], None]) -> None:
        """Call ``subscriber`` with every ``event`` committed (or published) from now on."""
        self.events.subscribe(event, subscriber)

    async def handle(self, command: Command[R], actor: Actor | User | None = None) -> R:
        """Run ``command``'s handler for ``actor``; its errors are the caller's to map.

        A ``User`` acts with every right in their personal team (the library's way). A
        command that is not public refuses a missing actor (``Unauthorized``) and one
        whose effective rights lack the command's (``InsufficientScope``, recorded in
        the audit log; nothing else happens). A command naming a ``team_id`` acts in
        that team. What the actor may see is the store's: every repository query
        takes its scope.
        """
        kind = type(command)
        handler = self._handlers.get(kind)
        if handler is None:
            raise LookupError(f"no handler for {kind.__name__}")
        if isinstance(actor, User):
            actor = Actor.personal(actor, token_name="library")  # noqa: S106 (a name)
        if actor is not None and kind.right is not Right.PUBLIC:
            actor = await self._in_team(command, actor)
        try:
            self._admit(kind, actor)
            return cast(R, await handler(actor, command))
        except InsufficientScope as exc:  # the bus's refusal, or a handler's finer one
            await self._refused(actor, command, Right(exc.needed))
            raise

    async def _in_team(self, command: Command[Any], actor: Actor) -> Actor:
        """The actor acting in the team ``command`` names, if it names another."""
        team_id = getattr(command, "team_id", None)
        if team_id is None or team_id == actor.team_id:
            return actor
        if self.access is None:
            raise NotFound("Team not found.")
        return await self.access.act_in(actor, team_id)

    def _admit(self, kind: type[Command[Any]], actor: Actor | None) -> None:
        """Whether ``actor`` may send a ``kind`` at all, before its handler runs: the one
        place a command's required right is checked."""
        if kind.right is Right.PUBLIC:
            return
        if actor is None:
            raise Unauthorized()
        if not actor.may(kind.right):
            raise InsufficientScope(needed_words(kind.right), needed=kind.right.value)

    async def _refused(self, actor: Actor | None, command: Command[Any], needed: Right) -> None:
        if actor is not None and self.access is not None:
            await self.access.refused(actor, command, needed)

    def publish(self, event: Event) -> None:
        """Hand ``event`` to its subscribers now, as a commit that recorded it would."""
        self.events.publish(event)
