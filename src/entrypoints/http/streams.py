"""Streams as the HTTP app serves them: each through the process's ``OpenStreams``
(``core.streams``), with the credential that admitted its request.

Whoever authenticates a request puts its ``Credential`` in the ASGI scope under
``CREDENTIAL``: ``bearer_auth`` for an API token (asked again with ``Authenticate``),
the dashboard's session middleware for a session (asked again with ``ResolveSession``).
``guarded`` is what every streaming response iterates, so a stream of the API and a
live region of the dashboard are counted and re-checked alike.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypeVar
from uuid import UUID

from berth.core.access import Actor
from berth.core.bus import MessageBus
from berth.core.commands import ActAs, Authenticate, ResolveSession
from berth.core.errors import NotFound, Unauthorized
from berth.core.models import User
from berth.core.streams import Credential, OpenStreams

__all__ = ["CREDENTIAL", "STREAMS", "guarded", "session_credential", "token_credential"]

T = TypeVar("T")

#: The scope key of the request's ``Credential``.
CREDENTIAL = "berth_credential"
#: The app state key of the process's ``OpenStreams``.
STREAMS = "berth_streams"


def guarded(request: Any, items: AsyncIterator[T]) -> AsyncIterator[T]:
    """``items`` as a stream of the request's credential: a slot taken now (429
    ``too-many-streams`` if none is free), the credential asked again every 5 s, the
    stream ended once it no longer holds."""
    streams: OpenStreams = request.app.state[STREAMS]
    credential: Credential = request.scope[CREDENTIAL]
    return streams.open(credential, items)


def token_credential(bus: MessageBus, token: str, actor: Actor) -> Credential:
    """An API token that authenticated ``actor``: it holds while it still names its user
    in its team (a named token revoked, expired, or whose user left the team does not)."""

    async def still_valid() -> bool:
        try:
            again = await bus.handle(Authenticate(token=token))
        except Unauthorized:
            return False
        return again.user.id == actor.user.id and again.team_id == actor.team_id

    return Credential(user_id=actor.user.id, still_valid=still_valid)


def session_credential(
    bus: MessageBus, session_id: str, user: User, team_id: UUID | None = None
) -> Credential:
    """A dashboard session of ``user`` acting in ``team_id`` (default: their personal
    team): it holds until signed out or expired, or until the user leaves that team."""

    async def still_valid() -> bool:
        found = await bus.handle(ResolveSession(session_id=session_id))
        if found is None or found[0].id != user.id:
            return False
        if team_id is None or team_id == user.id:
            return True
        try:
            await bus.handle(ActAs(team_id=team_id), Actor.personal(found[0]))
        except NotFound:
            return False
        return True

    return Credential(user_id=user.id, still_valid=still_valid)
