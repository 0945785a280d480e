"""``/api/agent/teams``, ``/invitations``, ``/tokens`` and ``/audit``: teams and their
members, named tokens and the audit log (SPEC.md, "Teams, roles and scoped tokens")."""

from __future__ import annotations

from typing import Any

from berth.core import commands as c
from berth.core.commands import AUDIT_PAGE_DEFAULT
from litestar import Controller, Request, Response, delete, get, patch, post
from litestar.di import NamedDependency
from litestar.params import JSONBody

from ...settings import Settings
from ..openapi import documented
from ..parameters import (
    AuditBefore,
    AuditLimit,
    InvitationToken,
    TeamId,
    TeamQuery,
    TokenId,
    UserId,
)
from ..schemas import (
    AuditPageOut,
    CurrentTokenOut,
    InvitationOut,
    MemberListOut,
    MemberOut,
    TeamListOut,
    TeamOut,
    TokenCreatedOut,
    TokenListOut,
    audit_page_out,
    current_token_out,
    invitation_out,
    member_out,
    team_out,
    token_created_out,
    token_out,
)
from ..urls import base_url
from .common import AUTH, READ, WRITE, Caller

__all__ = ["AuditController", "TeamController", "TokenController"]

Req = Request[Any, Any, Any]


class TeamController(Controller):
    path = "/"

    @documented(get, "/teams", "listTeams", responses=AUTH)
    async def list_teams(self, caller: NamedDependency[Caller]) -> TeamListOut:
        """List your teams

        Every team the token's user is a member of, with their role in it: their personal
        team (made with the account) first, then the others, oldest first.

        Returns:
            Your teams.
        """
        return TeamListOut(teams=[team_out(t) for t in await caller(c.ListTeams())])

    @documented(post, "/teams", "createTeam", responses=WRITE)
    async def create_team(
        self, caller: NamedDependency[Caller], data: JSONBody[c.CreateTeam]
    ) -> Response[TeamOut]:
        """Create a team

        A new team whose owner you are. Needs a token with the `admin` scope that is not
        limited to servers (or the main token).

        Returns:
            The new team.
        """
        team = await caller(data)
        return Response(team_out(team), status_code=201, headers={"Location": "/api/agent/teams"})

    @documented(get, "/teams/{teamId:str}/members", "listMembers", responses=READ)
    async def list_members(self, caller: NamedDependency[Caller], team_id: TeamId) -> MemberListOut:
        """List a team's members

        Every member of one of your teams with their role, oldest first. Any role reads
        it. A team you are not in is a 404; a named token reads only its own team.

        Returns:
            The team's members.
        """
        found = await caller(c.ListMembers(team_id=team_id))
        return MemberListOut(members=[member_out(m) for m in found])

    @documented(
        post, "/teams/{teamId:str}/invitations", "inviteMember", status_code=201, responses=WRITE
    )
    async def invite_member(
        self,
        request: Req,
        caller: NamedDependency[Caller],
        settings: NamedDependency[Settings],
        team_id: TeamId,
        data: JSONBody[c.InviteMember],
    ) -> InvitationOut:
        """Invite someone to the team

        A one-time invitation, valid 7 days, for `email` to join with `role`: the person
        signs in with that email and accepts it (POST
        /api/agent/invitations/{invitationToken}/accept, or `url` in the dashboard). Needs
        the role `admin` or `owner`; inviting an `owner` needs the role `owner`. The token
        is shown only in this answer.

        Returns:
            The invitation and its one-time token.
        """
        made = await caller(data)
        return invitation_out(made, base_url(request, settings))

    @documented(
        patch, "/teams/{teamId:str}/members/{userId:str}", "changeMemberRole", responses=WRITE
    )
    async def change_member_role(
        self,
        caller: NamedDependency[Caller],
        team_id: TeamId,
        user_id: UserId,
        data: JSONBody[c.ChangeMemberRole],
    ) -> MemberOut:
        """Change a member's role

        Needs the role `admin` or `owner`; an owner's role, or making someone owner, needs
        the role `owner`. A team keeps at least one owner, and a personal team's user stays
        its owner.

        Returns:
            The member with the new role.

        Raises:
            409: The team would have no owner left (`last-owner`).
        """
        return member_out(await caller(data))

    @documented(delete, "/teams/{teamId:str}/members/{userId:str}", "removeMember", responses=READ)
    async def remove_member(
        self, caller: NamedDependency[Caller], team_id: TeamId, user_id: UserId
    ) -> None:
        """Remove a member from the team

        Their tokens for this team stop working at once. Needs the role `admin` or `owner`
        (`owner` to remove an owner); a team keeps at least one owner.

        Returns:
            Removed: their tokens for this team stop working.

        Raises:
            409: The team would have no owner left (`last-owner`).
        """
        await caller(c.RemoveMember(team_id=team_id, user_id=user_id))

    @documented(
        post,
        "/invitations/{invitationToken:str}/accept",
        "acceptInvitation",
        status_code=200,
        responses=READ,
    )
    async def accept_invitation(
        self, caller: NamedDependency[Caller], invitation_token: InvitationToken
    ) -> MemberOut:
        """Accept an invitation to a team

        The token's user joins the invitation's team with its role, if the invitation was
        made for their email, is unused and has not expired (else 404). Needs a token with
        the `admin` scope not limited to servers (or the main token).

        Returns:
            Your membership of the team.

        Raises:
            409: The invitation is for another email (`invitation-for-another-user`), or
                you are in the team already (`already-member`).
        """
        return member_out(await caller(c.AcceptInvitation(token=invitation_token)))


class TokenController(Controller):
    path = "/tokens"

    @documented(get, "/", "listTokens", responses=AUTH)
    async def list_tokens(self, caller: NamedDependency[Caller]) -> TokenListOut:
        """List your named tokens

        Every named token of the token's user, newest first, revoked ones not. A secret is
        never returned.

        Returns:
            Your named tokens.
        """
        return TokenListOut(tokens=[token_out(t) for t in await caller(c.ListTokens())])

    @documented(post, "/", "createToken", responses=WRITE)
    async def create_token(
        self, caller: NamedDependency[Caller], data: JSONBody[c.CreateToken]
    ) -> Response[TokenCreatedOut]:
        """Make a named token

        A token of yours for one team (`teamId`, default the calling token's), narrowed to
        `scopes` (within your role there: a scope never widens it), to `serverIds` when
        given (any other server is a 404 to it) and until `expiresAt`. Needs a token with
        the `admin` scope not limited to servers (or the main token). The secret is shown
        only in this answer.

        Returns:
            The new token and its secret.
        """
        made = await caller(data)
        return Response(
            token_created_out(made),
            status_code=201,
            headers={"Location": f"/api/agent/tokens/{made.token.id}"},
        )

    @documented(get, "/current", "currentToken", responses=AUTH)
    async def current_token(self, caller: NamedDependency[Caller]) -> CurrentTokenOut:
        """Who the calling token is

        Its id and name (`main token`, id null, for the main one), team, scopes, servers,
        expiry, its user's role in the team, and the user.

        Returns:
            The calling token.
        """
        return current_token_out(await caller(c.CurrentToken()))

    @documented(delete, "/{tokenId:str}", "revokeToken", responses=READ)
    async def revoke_token(self, caller: NamedDependency[Caller], token_id: TokenId) -> None:
        """Revoke a named token

        Requests with it fail at once (401); its open streams end within 5 seconds. Needs a
        token with the `admin` scope not limited to servers (or the main token).

        Returns:
            Revoked: requests with it are refused from now on.
        """
        await caller(c.RevokeToken(token_id=token_id))


class AuditController(Controller):
    path = "/audit"

    @documented(get, "/", "listAudit", responses=READ)
    async def list_audit(
        self,
        caller: NamedDependency[Caller],
        team_id: TeamQuery = None,
        limit: AuditLimit = AUDIT_PAGE_DEFAULT,
        before: AuditBefore = None,
    ) -> AuditPageOut:
        """A team's audit log

        Every change and every refused call in the team (`teamId`, default the token's),
        newest first, a page at a time: `before` = the previous page's `nextBefore`. Needs
        the role `admin` or `owner` and a token with the `admin` scope.

        Returns:
            A page of the audit log; `nextBefore` is null on the last page.
        """
        page = c.ListAudit(team_id=team_id, limit=limit, before=before)
        return audit_page_out(await caller(page))
