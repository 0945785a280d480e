"""The team's pages: the team switcher's form, Members (invite, change a role, remove),
Tokens (make one — its secret shown once —, list, revoke), the Audit log (admins and
owners), and the page an invitation's link opens (``/invitations/<token>``).

Each page acts in the session's acting team (``acting.py``) and goes through the same
commands as the API: the bus refuses what the visitor's role does not allow (a 403 page,
recorded in the audit log); the pages only leave out the controls that would be refused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import msgspec
from berth.core import commands as c
from berth.core.access import Actor, Right, Role
from berth.core.bus import MessageBus
from berth.core.commands import (
    parse_change_role,
    parse_create_team,
    parse_create_token,
    parse_invite_member,
)
from berth.core.errors import Conflict, InvalidInput, NotFound
from berth.core.models import User
from berth.core.results import SignUpMode
from berth.core.teams import AuditOutcome, Member, Team
from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, URLEncodedBody

from ...settings import Settings
from ..controllers.common import Caller
from ..schemas import invitation_out
from ..urls import base_url
from .acting import TEAM_NAV, TeamNav, team_cookie
from .confirming import Ask, Removal, confirm_then_act, one_of, removal_route
from .forms import ConfirmForm
from .web import PUBLIC, Html, SeeOther, safe_next, uuid_or_404

__all__ = ["InvitationPage", "TeamPages"]

Req = Request[Any, Any, Any]

#: What a new token's "Expires" offers: days from now (``""``: never).
EXPIRIES = [("", "Never"), ("1", "In 1 day"), ("7", "In 7 days"), ("30", "In 30 days")]
EXPIRIES += [("90", "In 90 days"), ("365", "In 1 year")]
#: The scopes a new token may have, each with what it allows.
SCOPES = [
    ("read", "Read: servers, apps, deployments, logs; never env values"),
    ("deploy", "Deploy: read, and deploy, roll back, stop, start, restart, remove apps"),
    ("admin", "Admin: everything your role allows, members and tokens included"),
]
#: The audit log's page size in the dashboard.
AUDIT_PAGE = 50

Many = list[str] | str


class SwitchForm(msgspec.Struct):
    team: str = ""
    next: str = ""


class InviteForm(msgspec.Struct):
    email: str = ""
    role: str = "deployer"
    errors: dict[str, str] = {}


class TeamForm(msgspec.Struct):
    name: str = ""
    errors: dict[str, str] = {}


class RoleForm(msgspec.Struct):
    role: str = ""


class TokenForm(msgspec.Struct):
    name: str = ""
    scope: str = "read"
    servers: Many = []
    expires: str = "30"
    errors: dict[str, str] = {}

    @property
    def server_list(self) -> list[str]:
        return [self.servers] if isinstance(self.servers, str) else self.servers


#: Where a core error's field lands on the token form.
_TOKEN_FIELDS = {"name": "name", "scopes": "scope", "server_ids": "servers"}
_TOKEN_FIELDS["expires_at"] = "expires"
#: The pages of the team a switch may return to (any other: the server list).
_TEAM_NEUTRAL = ("/servers", "/settings", "/team/members", "/team/tokens")


def _team(request: Req, actor: Actor) -> Team:
    """The acting team, as the switcher's list has it (with the user's role there)."""
    nav: TeamNav | None = request.scope.get("state", {}).get(TEAM_NAV)
    for team in nav.teams if nav else ():
        if team.id == actor.team_id:
            return team
    raise NotFound("Team not found.")  # left it since the request began


def _rights(actor: Actor) -> dict[str, bool]:
    """Which controls a page offers: those the bus would not refuse."""
    return {
        "members": actor.may(Right.MEMBERS),
        "owner": actor.may(Right.OWNER),
        "audit": actor.may(Right.ADMIN),
    }


def _roles(actor: Actor) -> list[str]:
    """The roles ``actor`` may give: ``owner`` only by an owner."""
    return [r.value for r in Role if r is not Role.OWNER or actor.may(Right.OWNER)]


def _team_page(template: str, request: Req, actor: Actor, **context: Any) -> Html:
    team = _team(request, actor)
    return Html(
        template,
        team=team,
        can=_rights(actor),
        personal=team.personal_of is not None,
        **context,
    )


async def _members_page(
    caller: Caller,
    request: Req,
    *,
    status: int = 200,
    invite: InviteForm | None = None,
    invitation_url: str | None = None,
    alert: str | None = None,
    new_team: TeamForm | None = None,
) -> Html:
    actor = caller.user
    members = await caller(c.ListMembers(team_id=actor.team_id))
    team = _team(request, actor)
    return _team_page(
        "team_members.html",
        request,
        actor,
        status_code=status,
        members=members,
        me=actor.user.id,
        editable={m.user_id: _editable(actor, team, m) for m in members},
        roles=_roles(actor),
        invite=invite or InviteForm(),
        invitation_url=invitation_url,
        alert=alert,
        new_team=new_team or TeamForm(),
        replace_url="/team/members" if invitation_url else None,
    )


def _members_alert(caller: Caller, request: Req) -> Callable[[Conflict], Awaitable[Html]]:
    """How a refusal (``Conflict``) of a member's change is shown: on the Members page,
    above its list, with a 409."""

    async def shown(exc: Conflict) -> Html:
        return await _members_page(caller, request, status=409, alert=exc.detail)

    return shown


def _editable(actor: Actor, team: Team, member: Member) -> bool:
    """Whether the page offers to change ``member``'s role or remove them: an owner's
    membership is an owner's to change; a personal team's user stays its owner."""
    if not actor.may(Right.MEMBERS) or team.personal_of == member.user_id:
        return False
    return member.role is not Role.OWNER or actor.may(Right.OWNER)


async def _tokens_page(
    caller: Caller,
    request: Req,
    *,
    status: int = 200,
    form: TokenForm | None = None,
    secret: str | None = None,
) -> Html:
    actor = caller.user
    tokens = [t for t in await caller(c.ListTokens()) if t.team_id == actor.team_id]
    servers = await caller(c.ListServers())
    return _team_page(
        "team_tokens.html",
        request,
        actor,
        status_code=status,
        tokens=tokens,
        servers=servers,
        server_names={s.id: s.name for s in servers},
        form=form or TokenForm(),
        secret=secret,
        scopes=SCOPES,
        expiries=EXPIRIES,
        role=actor.role.value,
        replace_url="/team/tokens" if secret else None,
    )


def _token_command(form: TokenForm, team_id: UUID) -> c.CreateToken | None:
    """The command the form asks for (``None``: ``form.errors`` says why), checked by the
    core's own parser: the API's rules and messages."""
    form.name = form.name.strip()
    raw: dict[str, object] = {"name": form.name, "scopes": [form.scope], "team_id": str(team_id)}
    if form.server_list:
        raw["server_ids"] = form.server_list
    if form.expires not in dict(EXPIRIES):
        form.errors["expires"] = "Choose one of the offered times."
    elif form.expires:
        raw["expires_at"] = (datetime.now(UTC) + timedelta(days=int(form.expires))).isoformat()
    try:
        command = parse_create_token(raw)
    except InvalidInput as exc:
        for error in exc.errors:
            form.errors.setdefault(_TOKEN_FIELDS.get(error.location, "form"), error.message)
        return None
    return None if form.errors else command


def _audit_filters(action: str, outcome: str, actor: str) -> dict[str, Any]:
    """The log's filters as typed: blanks and unknown outcomes are "any"."""
    return {
        "action": action.strip()[:64] or None,
        "outcome": AuditOutcome(outcome) if outcome in AuditOutcome.__members__.values() else None,
        "actor": actor.strip()[:254] or None,
    }


class TeamPages(Controller):
    """The acting team's Members, Tokens and Audit pages, and the team switcher."""

    path = "/team"

    @get("/")
    async def team(self) -> SeeOther:
        return SeeOther("/team/members")

    @post("/switch")
    async def switch(
        self,
        request: Req,
        caller: NamedDependency[Caller],
        data: URLEncodedBody[SwitchForm],
    ) -> SeeOther:
        """The session acts in the chosen team from now on (one of the user's, else a
        404), back on the page it came from if that page is the team's."""
        team_id = uuid_or_404(data.team, "Team")
        acting = await caller(c.ActAs(team_id=team_id))  # NotFound if not theirs
        came_from = safe_next(data.next).split("?")[0]
        back = came_from if came_from in _TEAM_NEUTRAL else "/servers"
        if came_from.startswith("/team/") and back == "/servers":
            back = "/team/members"  # e.g. the audit log, which the new role may not read
        cookie = team_cookie(request, None if acting.team_id == caller.user.user.id else team_id)
        return SeeOther(f"{back}?done=team-switched", cookies=[cookie])

    @post("/new")
    async def create_team(
        self,
        request: Req,
        caller: NamedDependency[Caller],
        data: URLEncodedBody[TeamForm],
    ) -> Response[Any]:
        """A new team, its owner the visitor; the session acts in it from now on."""
        try:
            team = await caller(parse_create_team({"name": data.name}))
        except InvalidInput as exc:
            data.errors["team_name"] = exc.errors[0].message
            return await _members_page(caller, request, status=422, new_team=data)
        return SeeOther("/team/members?done=team-created", cookies=[team_cookie(request, team.id)])

    @get("/members")
    async def members(self, request: Req, caller: NamedDependency[Caller]) -> Html:
        return await _members_page(caller, request)

    @post("/members/invite")
    async def invite(
        self,
        request: Req,
        caller: NamedDependency[Caller],
        settings: NamedDependency[Settings],
        data: URLEncodedBody[InviteForm],
    ) -> Html:
        data.email = data.email.strip()
        try:
            command = parse_invite_member(
                {"email": data.email, "role": data.role}, caller.user.team_id
            )
            made = await caller(command)
        except InvalidInput as exc:
            for error in exc.errors:
                data.errors.setdefault(error.location.split(".")[-1], error.message)
            return await _members_page(caller, request, status=422, invite=data)
        url = invitation_out(made, base_url(request, settings)).url
        return await _members_page(caller, request, status=201, invitation_url=url)

    @post("/members/{member_id:str}/role")
    async def change_role(
        self,
        request: Req,
        caller: NamedDependency[Caller],
        member_id: FromPath[str],
        data: URLEncodedBody[RoleForm],
    ) -> Response[Any]:
        member = uuid_or_404(member_id, "Member")
        command = parse_change_role({"role": data.role}, caller.user.team_id, member)
        done = "/team/members?done=role-changed"
        return await confirm_then_act(
            caller, command, done, refused=_members_alert(caller, request)
        )

    @post("/members/{member_id:str}/remove")
    async def remove(
        self,
        request: Req,
        caller: NamedDependency[Caller],
        member_id: FromPath[str],
        data: URLEncodedBody[ConfirmForm],
    ) -> Response[Any]:
        user = caller.user
        members = c.ListMembers(team_id=user.team_id)
        member = await one_of(caller, members, member_id, "Member", lambda m: m.user_id)
        ask = Ask(
            data,
            title=f"Remove {member.email} from the team?",
            message="Their tokens for this team stop working at once.",
            button="Remove member",
            back="/team/members",
        )
        removal = c.RemoveMember(team_id=user.team_id, user_id=member.user_id)
        left = member.user_id == user.user.id  # back to the personal team
        done = (
            SeeOther("/servers", cookies=[team_cookie(request, None)])
            if left
            else SeeOther("/team/members?done=member-removed")
        )
        return await confirm_then_act(
            caller, removal, done, ask=ask, refused=_members_alert(caller, request)
        )

    @get("/tokens")
    async def tokens(self, request: Req, caller: NamedDependency[Caller]) -> Html:
        return await _tokens_page(caller, request)

    @post("/tokens")
    async def create_token(
        self,
        request: Req,
        caller: NamedDependency[Caller],
        data: URLEncodedBody[TokenForm],
    ) -> Html:
        command = _token_command(data, caller.user.team_id)
        if command is None:
            return await _tokens_page(caller, request, status=422, form=data)
        try:
            made = await caller(command)
        except (InvalidInput, NotFound) as exc:  # a server gone since the page was shown
            errors = exc.errors if isinstance(exc, InvalidInput) else ()
            for error in errors:
                data.errors.setdefault(_TOKEN_FIELDS.get(error.location, "form"), error.message)
            if isinstance(exc, NotFound):
                data.errors["servers"] = exc.detail
            return await _tokens_page(caller, request, status=422, form=data)
        return await _tokens_page(caller, request, status=201, secret=made.secret)

    revoke_token = removal_route(
        "/tokens/{item_id:str}/revoke",
        Removal(
            listing=c.ListTokens(),
            what="Token",
            title=lambda token: f"Revoke the token {token.name}?",
            message="Requests with it are refused at once; its open streams end.",
            button="Revoke token",
            back="/team/tokens",
            command=lambda token: c.RevokeToken(token_id=token.id),
            done="/team/tokens?done=token-revoked",
        ),
    )

    @get("/audit")
    async def audit(
        self,
        request: Req,
        caller: NamedDependency[Caller],
        action: FromQuery[str] = "",
        outcome: FromQuery[str] = "",
        actor: FromQuery[str] = "",
        before: FromQuery[str] = "",
    ) -> Html:
        filters = _audit_filters(action, outcome, actor)
        try:
            anchor = UUID(before) if before else None
        except ValueError:
            anchor = None
        page = await caller(c.ListAudit(limit=AUDIT_PAGE, before=anchor, **filters))
        actions = sorted({a for k in caller.bus.registered() if (a := getattr(k, "audited", None))})
        shown = {"action": action, "outcome": outcome, "actor": actor}
        return _team_page(
            "team_audit.html",
            request,
            caller.user,
            page=page,
            actions=actions,
            query=shown,
            filtered=any(v is not None for v in filters.values()),
            first=anchor is None,
        )


# --- the invitation's page ---------------------------------------------------------------


class InvitationPage(Controller):
    """What ``<base>/invitations/<token>`` (the ``url`` the API answers) opens."""

    path = "/invitations"

    @get("/{token:str}", opt=PUBLIC)
    async def show(
        self, request: Req, bus: NamedDependency[MessageBus], token: FromPath[str]
    ) -> Html:
        """The team and the role; a button for the invited user, else how to become them."""
        preview = await bus.handle(c.ShowInvitation(token=token))
        visitor: User | None = request.user
        return Html(
            "invitation.html",
            invitation=preview,
            here=request.url.path,
            signup_open=await bus.handle(c.SignUpPolicy()) is SignUpMode.OPEN,
            for_visitor=visitor is not None and visitor.email.lower() == preview.email,
            error=None,
        )

    @post("/{token:str}/accept")
    async def accept(
        self,
        request: Req,
        caller: NamedDependency[Caller],
        token: FromPath[str],
    ) -> Response[Any]:
        """Join the team; the session acts in it from now on."""
        try:
            member = await caller(c.AcceptInvitation(token=token))
        except Conflict as exc:
            preview = await caller.bus.handle(c.ShowInvitation(token=token))
            return Html(
                "invitation.html",
                status_code=409,
                invitation=preview,
                here=f"/invitations/{token}",
                signup_open=False,
                for_visitor=False,
                error=exc.detail,
            )
        cookie = team_cookie(request, member.team_id)
        return SeeOther("/team/members?done=joined", cookies=[cookie])
