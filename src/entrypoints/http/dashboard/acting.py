"""The team a dashboard session acts in: its **acting team**, chosen with the team switcher.

Every page acts as :func:`acting_actor` says: the signed-in user in the team the
session chose (the ``berth_team`` cookie), with their role there — else in their
personal team. The cookie only *names* a team: each request asks the bus again
(``ActAs``), so a team the user left, or one they never were in, is their personal
team instead, never a right they lack. A page added later (a consent page that picks
a team, say) calls :func:`acting_actor` and :func:`user_teams` and nothing else.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import msgspec
from berth.core import commands as c
from berth.core.access import Actor
from berth.core.bus import MessageBus
from berth.core.errors import NotFound
from berth.core.models import User
from berth.core.teams import Team
from litestar import Request
from litestar.connection import ASGIConnection
from litestar.datastructures import Cookie

__all__ = [
    "ACTING",
    "TEAM_COOKIE",
    "TEAM_NAV",
    "TeamNav",
    "acting_actor",
    "team_cookie",
    "user_teams",
]

#: The cookie naming the session's acting team (a team id; nothing else).
TEAM_COOKIE = "berth_team"
#: Where a request's scope keeps the ``Actor`` the visitor acts as (``session_auth``).
ACTING = "berth_acting"
#: Where a page's request keeps its ``TeamNav`` for the layout (the ASGI scope's state).
TEAM_NAV = "berth_team_nav"


class TeamNav(msgspec.Struct, frozen=True, kw_only=True):
    """What the layout's team switcher shows: the user's teams and the acting one."""

    teams: list[Team]
    current: UUID


def _chosen_team(connection: ASGIConnection[Any, Any, Any, Any]) -> UUID | None:
    try:
        return UUID(connection.cookies.get(TEAM_COOKIE, ""))
    except ValueError:
        return None


async def acting_actor(
    bus: MessageBus, connection: ASGIConnection[Any, Any, Any, Any], user: User
) -> Actor:
    """``user`` acting in the session's acting team with their role there (their personal
    team when the session chose none, or chose one they are not a member of)."""
    address = connection.client.host if connection.client else None
    personal = Actor.personal(user, token_name="dashboard", client_address=address)  # noqa: S106 (a name)
    team_id = _chosen_team(connection)
    if team_id is None or team_id == personal.team_id:
        return personal
    try:
        return await bus.handle(c.ActAs(team_id=team_id), personal)
    except NotFound:
        return personal


async def user_teams(bus: MessageBus, actor: Actor) -> TeamNav:
    """The teams ``actor``'s user may switch to (only theirs), and the acting one."""
    return TeamNav(teams=await bus.handle(c.ListTeams(), actor), current=actor.team_id)


def team_cookie(request: Request[Any, Any, Any], team_id: UUID | None) -> Cookie:
    """The cookie that makes ``team_id`` the session's acting team (``None``: forget it,
    back to the personal team). Like the session cookie: HttpOnly, SameSite=Lax, Secure
    over HTTPS."""
    csrf = request.app.csrf_config
    return Cookie(
        key=TEAM_COOKIE,
        value=str(team_id) if team_id else "",
        max_age=None if team_id else 0,
        path="/",
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https" or bool(csrf and csrf.cookie_secure),
    )
