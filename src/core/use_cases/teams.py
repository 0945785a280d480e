"""Teams, members, invitations, named tokens and the audit log.

The bus checks each command's right before these run (``berth.core.bus``); what is
left here is what depends on the data: an owner's membership needs the role ``owner``,
a team keeps at least one owner, a token is made only for a team its user is in and
servers of that team. Every change records an ``Audited`` event on its unit of work,
written in its transaction by ``write_audit``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import msgspec
import structlog

from .. import commands as c
from .. import tokens
from ..access import Actor, Right, Role, TokenScope, needed_words, scope_closure
from ..errors import Conflict, FieldError, InsufficientScope, InvalidInput, NotFound
from ..events import Audited
from ..ports import Clock, UnitOfWork
from ..teams import (
    INVITATION_DAYS,
    AccessToken,
    AuditEntry,
    AuditOutcome,
    AuditPage,
    AuditTarget,
    CreatedInvitation,
    CreatedToken,
    InvitationPreview,
    Member,
    Team,
    TeamInvitation,
)
from ..types import RuleError, check_email
from ..unit_of_work import EventHandlers
from .owned import UsesStore, UsesStoreAndClock

__all__ = [
    "TEAM_INVITE_PREFIX",
    "AcceptInvitation",
    "ActAs",
    "ChangeMemberRole",
    "CreateTeam",
    "CreateToken",
    "CurrentToken",
    "InviteMember",
    "ListAudit",
    "ListMembers",
    "ListTeams",
    "ListTokens",
    "PruneAudit",
    "RemoveMember",
    "RevokeToken",
    "ShowInvitation",
    "TeamAccess",
    "check_team_servers",
    "scope_words",
    "target_of",
    "token_created",
    "token_scopes",
    "write_audit",
]

log = structlog.get_logger()

#: What a team invitation's one-time token starts with.
TEAM_INVITE_PREFIX = "berth_join_"

#: The command fields that name what a command acts on, in the order they are looked for.
_TARGET_FIELDS = (
    ("installation_id", "installation"),
    ("deployment_id", "deployment"),
    ("server_id", "server"),
    ("webhook_id", "webhook"),
    ("registry_id", "registry"),
    ("token_id", "token"),
    ("user_id", "member"),
    ("team_id", "team"),
)


def target_of(command: Any) -> AuditTarget:
    """What ``command`` acts on, as far as its fields say (for a refused call)."""
    for name, kind in _TARGET_FIELDS:
        value = getattr(command, name, None)
        if value is not None:
            return AuditTarget(type=kind, id=str(value))
    return AuditTarget(type=type(command).__name__)


def write_audit(events: EventHandlers, clock: Clock) -> None:
    """Write each ``Audited`` event as an entry of its team's audit log, in the
    transaction of the unit of work that recorded it."""

    async def write(event: Audited, uow: UnitOfWork) -> None:
        await uow.audit.add(
            AuditEntry(
                id=uuid4(),
                team_id=event.team_id,
                at=clock.now(),
                actor=event.actor,
                action=event.action,
                target=event.target,
                outcome=event.outcome,
                client_address=event.client_address,
                detail=event.detail,
            )
        )

    events.in_transaction(Audited, write)


class TeamAccess(UsesStore):
    """What the bus asks: an actor's role in another team; a refusal, recorded."""

    async def act_in(self, actor: Actor, team_id: UUID) -> Actor:
        if actor.token_id is not None:  # a named token acts in its own team only
            raise NotFound("Team not found.")
        async with self._uow() as uow:
            role = await uow.teams.role(team_id, actor.user.id)
        if role is None:
            raise NotFound("Team not found.")
        return Actor(
            user=actor.user,
            team_id=team_id,
            role=role,
            scopes=actor.scopes,
            token_name=actor.token_name,
            client_address=actor.client_address,
        )

    async def refused(self, actor: Actor, command: c.Command[Any], needed: Right) -> None:
        action = command.audit_action() or f"read.{type(command).__name__}"
        async with self._uow() as uow:
            uow.record(
                Audited.of(
                    actor,
                    action,
                    target_of(command),
                    outcome=AuditOutcome.DENIED,
                    detail=f"needs {needed.value}",
                )
            )
            await uow.commit()
        log.info("call_refused", action=action, user_id=str(actor.user.id), needed=needed.value)


class ActAs(UsesStore):
    """The actor's user in another of their teams (the dashboard's team switcher)."""

    async def __call__(self, actor: Actor, cmd: c.ActAs) -> Actor:
        return actor  # the bus made it act in ``cmd.team_id`` already (it names a team)


class CurrentToken(UsesStore):
    """Who the caller is (``GET /tokens/current``): the actor itself."""

    async def __call__(self, actor: Actor, cmd: c.CurrentToken) -> Actor:
        return actor


class ListTeams(UsesStore):
    async def __call__(self, actor: Actor, cmd: c.ListTeams) -> list[Team]:
        async with self._uow() as uow:
            return await uow.teams.of_user(actor.user.id)


class CreateTeam(UsesStoreAndClock):
    async def __call__(self, actor: Actor, cmd: c.CreateTeam) -> Team:
        team = Team(id=uuid4(), name=cmd.name, created_at=self._clock.now(), role=Role.OWNER)
        async with self._uow() as uow:
            await uow.teams.add(team, actor.user.id)
            target = AuditTarget(type="team", id=str(team.id), name=team.name)
            uow.record(Audited.of(actor, "team.create", target, team_id=team.id))
            await uow.commit()
        log.info("team_created", team_id=str(team.id), user_id=str(actor.user.id))
        return team


class ListMembers(UsesStore):
    async def __call__(self, actor: Actor, cmd: c.ListMembers) -> list[Member]:
        async with self._uow() as uow:
            return await uow.teams.members(actor.team_id)


def token_scopes(given: frozenset[TokenScope]) -> frozenset[TokenScope]:
    """The scopes a token (or an OAuth grant) is made with: ``given`` closed under "⊂"
    (``deploy`` holds ``read``); none is ``InvalidInput`` at ``scopes``."""
    scopes = scope_closure(given)
    if not scopes:
        raise InvalidInput([FieldError("scopes", "Give at least one scope.", None)])
    return scopes


async def check_team_servers(
    uow: UnitOfWork, team_id: UUID, server_ids: frozenset[UUID] | None
) -> None:
    """A token (or an OAuth grant) limited to ``server_ids`` (``None``: not limited)
    names servers of its team only: another is a 404, as for any server not the team's."""
    if server_ids is None:
        return
    theirs = {s.id for s in await uow.servers.list(team_id)}
    unknown = sorted(str(s) for s in server_ids - theirs)
    if unknown:
        raise NotFound(f"No such server in the team: {', '.join(unknown)}.")


def token_created(actor: Actor, token: AccessToken, how: str = "") -> Audited:
    """The audit log's line for a named token ``actor`` just made (``how``: `` (OAuth)``)."""
    target = AuditTarget(type="token", id=str(token.id), name=token.name)
    return Audited.of(actor, "token.create", target, detail=f"{scope_words(token.scopes)}{how}")


def scope_words(scopes: frozenset[TokenScope]) -> str:
    """Scopes as the audit log's detail names them (``scopes deploy,read``)."""
    return "scopes " + ",".join(sorted(s.value for s in scopes))


def _needs_owner(actor: Actor) -> None:
    """Refuse (403) an actor who is not an owner of its team: owners' membership is an
    owner's to change."""
    if not actor.may(Right.OWNER):
        raise InsufficientScope(needed_words(Right.OWNER), needed=Right.OWNER.value)


def _member_target(member: Member | None, user_id: UUID) -> AuditTarget:
    return AuditTarget(type="member", id=str(user_id), name=member.email if member else None)


class InviteMember(UsesStoreAndClock):
    """A one-time invitation for an email to join the actor's team with a role."""

    async def __call__(self, actor: Actor, cmd: c.InviteMember) -> CreatedInvitation:
        if cmd.role is Role.OWNER:
            _needs_owner(actor)
        try:
            email = check_email(cmd.email)
        except RuleError as exc:
            raise InvalidInput([FieldError("email", str(exc), None)]) from None
        token = tokens.generate(TEAM_INVITE_PREFIX)
        now = self._clock.now()
        invitation = TeamInvitation(
            id=uuid4(),
            team_id=actor.team_id,
            email=email,
            role=cmd.role,
            token_hash=tokens.hash_token(token),
            created_at=now,
            expires_at=now + INVITATION_DAYS,
            invited_by=actor.user.id,
        )
        async with self._uow() as uow:
            await uow.teams.add_invitation(invitation)
            target = AuditTarget(type="invitation", id=str(invitation.id), name=email)
            uow.record(Audited.of(actor, "member.invite", target, detail=f"role {cmd.role}"))
            await uow.commit()
        log.info("member_invited", team_id=str(actor.team_id), invitation_id=str(invitation.id))
        return CreatedInvitation(invitation=invitation, token=token)


_NO_INVITATION = "Invitation not found, already used, or expired."


async def _live_invitation(uow: UnitOfWork, token: object, now: datetime) -> TeamInvitation:
    """The unused, unexpired invitation whose one-time token is ``token``; else
    ``NotFound`` (a malformed token too: a library caller's argument is not checked by
    msgspec)."""
    if not isinstance(token, str) or not tokens.is_well_formed(token, TEAM_INVITE_PREFIX):
        raise NotFound(_NO_INVITATION)
    invitation = await uow.teams.invitation(tokens.hash_token(token))
    if invitation is None or invitation.accepted_at is not None or invitation.expires_at <= now:
        raise NotFound(_NO_INVITATION)
    return invitation


class ShowInvitation(UsesStoreAndClock):
    """What an invitation's link opens on: its team, role and email; nothing changes."""

    async def __call__(self, actor: Actor | None, cmd: c.ShowInvitation) -> InvitationPreview:
        async with self._uow() as uow:
            invitation = await _live_invitation(uow, cmd.token, self._clock.now())
            team = await uow.teams.get(invitation.team_id)
        if team is None:
            raise NotFound(_NO_INVITATION)
        return InvitationPreview(
            team_id=team.id,
            team_name=team.name,
            email=invitation.email,
            role=invitation.role,
            expires_at=invitation.expires_at,
        )


class AcceptInvitation(UsesStoreAndClock):
    """The actor's user joins the team of an invitation made for their email."""

    async def __call__(self, actor: Actor, cmd: c.AcceptInvitation) -> Member:
        now = self._clock.now()
        async with self._uow() as uow:
            invitation = await _live_invitation(uow, cmd.token, now)
            if invitation.email != actor.user.email.lower():
                raise Conflict(
                    "This invitation is for another email address: sign in as that user.",
                    kind="invitation-for-another-user",
                )
            if await uow.teams.role(invitation.team_id, actor.user.id) is not None:
                raise Conflict("You are a member of this team already.", kind="already-member")
            if not await uow.teams.accept_invitation(invitation.id, now):
                raise NotFound(_NO_INVITATION)
            member = Member(
                team_id=invitation.team_id,
                user_id=actor.user.id,
                email=actor.user.email,
                role=invitation.role,
                joined_at=now,
            )
            await uow.teams.add_member(member)
            target = _member_target(member, actor.user.id)
            uow.record(
                Audited.of(
                    actor,
                    "member.join",
                    target,
                    team_id=invitation.team_id,
                    detail=f"role {invitation.role}",
                )
            )
            await uow.commit()
        log.info("member_joined", team_id=str(invitation.team_id), user_id=str(actor.user.id))
        return member


async def _member(uow: UnitOfWork, team_id: UUID, user_id: UUID) -> Member:
    for member in await uow.teams.members(team_id):
        if member.user_id == user_id:
            return member
    raise NotFound("Member not found.")


async def _keeps_an_owner(uow: UnitOfWork, team_id: UUID, leaving: Member) -> None:
    if leaving.role is not Role.OWNER:
        return
    owners = [m for m in await uow.teams.members(team_id) if m.role is Role.OWNER]
    if len(owners) <= 1:
        raise Conflict(
            "A team keeps at least one owner: make another member owner first.",
            kind="last-owner",
        )


def _personal(uow_team: Team | None, user_id: UUID) -> bool:
    return uow_team is not None and uow_team.personal_of == user_id


class ChangeMemberRole(UsesStore):
    async def __call__(self, actor: Actor, cmd: c.ChangeMemberRole) -> Member:
        async with self._uow() as uow:
            member = await _member(uow, actor.team_id, cmd.user_id)
            if member.role is Role.OWNER or cmd.role is Role.OWNER:
                _needs_owner(actor)
            if _personal(await uow.teams.get(actor.team_id), cmd.user_id):
                raise Conflict("A personal team's user stays its owner.", kind="last-owner")
            if cmd.role is not Role.OWNER:
                await _keeps_an_owner(uow, actor.team_id, member)
            await uow.teams.set_role(actor.team_id, cmd.user_id, cmd.role)
            target = _member_target(member, cmd.user_id)
            detail = f"role {member.role} → {cmd.role}"
            uow.record(Audited.of(actor, "member.role", target, detail=detail))
            await uow.commit()
        return msgspec.structs.replace(member, role=cmd.role)


class RemoveMember(UsesStore):
    async def __call__(self, actor: Actor, cmd: c.RemoveMember) -> None:
        async with self._uow() as uow:
            member = await _member(uow, actor.team_id, cmd.user_id)
            if member.role is Role.OWNER:
                _needs_owner(actor)
            if _personal(await uow.teams.get(actor.team_id), cmd.user_id):
                raise Conflict("A personal team's user stays its owner.", kind="last-owner")
            await _keeps_an_owner(uow, actor.team_id, member)
            await uow.teams.remove_member(actor.team_id, cmd.user_id)
            uow.record(Audited.of(actor, "member.remove", _member_target(member, cmd.user_id)))
            await uow.commit()
        log.info("member_removed", team_id=str(actor.team_id), user_id=str(cmd.user_id))


class ListTokens(UsesStore):
    async def __call__(self, actor: Actor, cmd: c.ListTokens) -> list[AccessToken]:
        async with self._uow() as uow:
            return await uow.access_tokens.of_user(actor.user.id)


class CreateToken(UsesStoreAndClock):
    """A named token for the actor's team (the bus made the actor act in ``team_id``,
    if given), limited to servers of that team."""

    async def __call__(self, actor: Actor, cmd: c.CreateToken) -> CreatedToken:
        now = self._clock.now()
        if cmd.expires_at is not None and cmd.expires_at <= now:
            raise InvalidInput([FieldError("expires_at", "Must be in the future.", None)])
        scopes = token_scopes(cmd.scopes)
        secret = tokens.generate()
        token = AccessToken(
            id=uuid4(),
            user_id=actor.user.id,
            team_id=actor.team_id,
            name=cmd.name,
            scopes=scopes,
            token_hash=tokens.hash_token(secret),
            prefix=tokens.display_prefix(secret),
            created_at=now,
            server_ids=cmd.server_ids,
            expires_at=cmd.expires_at,
        )
        async with self._uow() as uow:
            await check_team_servers(uow, actor.team_id, cmd.server_ids)
            await uow.access_tokens.add(token)
            uow.record(token_created(actor, token))
            await uow.commit()
        log.info("token_created", token_id=str(token.id), user_id=str(actor.user.id))
        return CreatedToken(token=token, secret=secret)


class RevokeToken(UsesStore):
    async def __call__(self, actor: Actor, cmd: c.RevokeToken) -> None:
        async with self._uow() as uow:
            revoked = await uow.access_tokens.revoke(actor.user.id, cmd.token_id)
            if revoked is None:
                raise NotFound("Token not found.")
            target = AuditTarget(type="token", id=str(revoked.id), name=revoked.name)
            uow.record(Audited.of(actor, "token.revoke", target, team_id=revoked.team_id))
            await uow.commit()
        log.info("token_revoked", token_id=str(cmd.token_id), user_id=str(actor.user.id))


class ListAudit(UsesStore):
    async def __call__(self, actor: Actor, cmd: c.ListAudit) -> AuditPage:
        async with self._uow() as uow:
            page = await uow.audit.page(actor.team_id, cmd.limit + 1, cmd.before, cmd.where)
        more = len(page) > cmd.limit
        entries = tuple(page[: cmd.limit])
        return AuditPage(entries=entries, next_before=entries[-1].id if more else None)


@dataclass(eq=False)
class PruneAudit(UsesStoreAndClock):
    """Forget audit entries older than ``days`` (``BERTH_AUDIT_DAYS``): the background
    loop's, never a request's."""

    days: int = 365

    async def __call__(self) -> int:
        async with self._uow() as uow:
            gone = await uow.audit.prune(self._clock.now() - timedelta(days=self.days))
            await uow.commit()
        if gone:
            log.info("audit_pruned", entries=gone, days=self.days)
        return gone
