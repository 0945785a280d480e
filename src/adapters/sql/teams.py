"""Teams, their members and invitations, named tokens, and the audit log."""

from __future__ import annotations

from datetime import datetime
from functools import partial
from typing import Any, cast
from uuid import UUID

import msgspec
from berth.core.access import Role, TokenScope
from berth.core.models import User
from berth.core.teams import (
    AccessToken,
    AuditActor,
    AuditEntry,
    AuditFilter,
    AuditOutcome,
    AuditTarget,
    Member,
    Team,
    TeamInvitation,
)
from sqlalchemy import Table, and_, bindparam, case, delete, func, insert, or_, select, update

from .rows import AnyRow, _Repository, from_row, users_t
from .tables import AccessTokenRow, AuditEntryRow, TeamInvitationRow, TeamMemberRow, TeamRow

__all__ = [
    "SqlAccessTokenRepository",
    "SqlAuditRepository",
    "SqlTeamRepository",
    "personal_team_rows",
]

teams_t = cast(Table, TeamRow.__table__)
members_t = cast(Table, TeamMemberRow.__table__)
invitations_t = cast(Table, TeamInvitationRow.__table__)
access_tokens_t = cast(Table, AccessTokenRow.__table__)
audit_t = cast(Table, AuditEntryRow.__table__)


def personal_team_rows(user: User) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``team`` and ``team_member`` rows of ``user``'s personal team."""
    team = {
        "id": user.id,
        "name": user.email,
        "personal_of": user.id,
        "created_at": user.created_at,
    }
    member = {
        "team_id": user.id,
        "user_id": user.id,
        "role": Role.OWNER.value,
        "joined_at": user.created_at,
    }
    return team, member


def _team_to_core(row: AnyRow, role: str | None = None) -> Team:
    return from_row(Team, row, {"role": Role(role) if role is not None else None})


class SqlTeamRepository(_Repository):
    """``TeamRepository``."""

    async def add(self, team: Team, owner_id: UUID) -> None:
        await self._tx.write(
            insert(teams_t).values(
                id=team.id, name=team.name, personal_of=None, created_at=team.created_at
            )
        )
        await self._tx.write(
            insert(members_t).values(
                team_id=team.id, user_id=owner_id, role=Role.OWNER.value, joined_at=team.created_at
            )
        )

    async def get(self, team_id: UUID) -> Team | None:
        row = (await self._tx.read(select(teams_t).where(teams_t.c.id == team_id))).first()
        return _team_to_core(row) if row else None

    async def of_user(self, user_id: UUID) -> list[Team]:
        t, m = teams_t.c, members_t.c
        stmt = (
            select(t.id, t.name, t.created_at, t.personal_of, m.role)
            .join_from(teams_t, members_t, m.team_id == t.id)
            .where(m.user_id == user_id)
            .order_by(case((t.personal_of == user_id, 0), else_=1), t.created_at, t.id)
        )
        return [_team_to_core(row, row.role) for row in await self._tx.read(stmt)]

    async def role(self, team_id: UUID, user_id: UUID) -> Role | None:
        m = members_t.c
        stmt = select(m.role).where(m.team_id == team_id, m.user_id == user_id)
        found = (await self._tx.read(stmt)).scalar_one_or_none()
        return Role(found) if found is not None else None

    async def members(self, team_id: UUID) -> list[Member]:
        m, u = members_t.c, users_t.c
        stmt = (
            select(m.team_id, m.user_id, u.email, m.role, m.joined_at)
            .join_from(members_t, users_t, u.id == m.user_id)
            .where(m.team_id == team_id)
            .order_by(m.joined_at, u.email)
        )
        return [
            from_row(Member, row, {"role": Role(row.role)}) for row in await self._tx.read(stmt)
        ]

    async def add_member(self, member: Member) -> bool:
        if await self.role(member.team_id, member.user_id) is not None:
            return False
        await self._tx.write(
            insert(members_t).values(
                team_id=member.team_id,
                user_id=member.user_id,
                role=member.role.value,
                joined_at=member.joined_at,
            )
        )
        return True

    async def set_role(self, team_id: UUID, user_id: UUID, role: Role) -> bool:
        m = members_t.c
        return await self._changed(
            update(members_t)
            .where(m.team_id == team_id, m.user_id == user_id)
            .values(role=role.value)
        )

    async def remove_member(self, team_id: UUID, user_id: UUID) -> bool:
        a, m = access_tokens_t.c, members_t.c
        await self._tx.write(
            delete(access_tokens_t).where(a.team_id == team_id, a.user_id == user_id)
        )
        return await self._changed(
            delete(members_t).where(m.team_id == team_id, m.user_id == user_id)
        )

    async def add_invitation(self, invitation: TeamInvitation) -> None:
        values = msgspec.structs.asdict(invitation) | {"role": invitation.role.value}
        await self._tx.write(insert(invitations_t).values(values))

    async def invitation(self, token_hash: str) -> TeamInvitation | None:
        stmt = select(invitations_t).where(invitations_t.c.token_hash == token_hash)
        row = (await self._tx.read(stmt)).first()
        if row is None:
            return None
        return from_row(TeamInvitation, row, {"role": Role(row.role)})

    async def accept_invitation(self, invitation_id: UUID, at: datetime) -> bool:
        i = invitations_t.c
        return await self._changed(
            update(invitations_t)
            .where(i.id == invitation_id, i.accepted_at.is_(None))
            .values(accepted_at=at)
        )


def _access_token_to_core(row: AnyRow) -> AccessToken:
    given = {
        "scopes": frozenset(TokenScope(s) for s in row.scopes),
        "server_ids": (
            frozenset(UUID(s) for s in row.server_ids) if row.server_ids is not None else None
        ),
    }
    return from_row(AccessToken, row, given)


#: Every request with a named token authenticates: its token, user and role in one query.
_TOKEN_USER_ROLE = (
    select(
        access_tokens_t,
        users_t.c.email,
        users_t.c.password_hash,
        users_t.c.created_at.label("user_created_at"),
        members_t.c.role.label("member_role"),
    )
    .join_from(access_tokens_t, users_t, users_t.c.id == access_tokens_t.c.user_id)
    .join(
        members_t,
        and_(
            members_t.c.team_id == access_tokens_t.c.team_id,
            members_t.c.user_id == access_tokens_t.c.user_id,
        ),
    )
    .where(access_tokens_t.c.token_hash == bindparam("token_hash"))
)


def named_token_key(token_hash: str) -> tuple[str, str]:
    """The read cache's key of a named token's look-up (``SqlAccessTokenRepository.find``)."""
    return ("access-token", token_hash)


class SqlAccessTokenRepository(_Repository):
    """``AccessTokenRepository``."""

    async def add(self, token: AccessToken) -> None:
        listed = {
            "scopes": sorted(s.value for s in token.scopes),
            "server_ids": (
                sorted(str(s) for s in token.server_ids) if token.server_ids is not None else None
            ),
        }
        await self._tx.write(insert(access_tokens_t).values(msgspec.structs.asdict(token) | listed))

    async def of_user(self, user_id: UUID) -> list[AccessToken]:
        a = access_tokens_t.c
        stmt = (
            select(access_tokens_t)
            .where(a.user_id == user_id)
            .order_by(a.created_at.desc(), a.id.desc())
        )
        return [_access_token_to_core(row) for row in await self._tx.read(stmt)]

    async def find(self, token_hash: str) -> tuple[User, AccessToken, Role] | None:
        """Cached (every request authenticates) until the next commit that changes an
        account, a token or a membership (``marks.ACCESS``) anywhere: a revoked token, or
        a member removed, is refused at once, whichever process did it."""
        return await self._tx.cached(
            named_token_key(token_hash), partial(self._find, token_hash), mark="access"
        )

    async def _find(self, token_hash: str) -> tuple[User, AccessToken, Role] | None:
        row = (await self._tx.read(_TOKEN_USER_ROLE, {"token_hash": token_hash})).first()
        if row is None:
            return None
        user = from_row(User, row, id="user_id", created_at="user_created_at")
        return user, _access_token_to_core(row), Role(row.member_role)

    async def revoke(self, user_id: UUID, token_id: UUID) -> AccessToken | None:
        a = access_tokens_t.c
        stmt = select(access_tokens_t).where(a.id == token_id, a.user_id == user_id)
        row = (await self._tx.read(stmt)).first()
        if row is None:
            return None
        if not await self._changed(delete(access_tokens_t).where(a.id == token_id)):
            return None
        return _access_token_to_core(row)

    async def touch(self, token_id: UUID, at: datetime) -> None:
        await self._tx.write(
            update(access_tokens_t).where(access_tokens_t.c.id == token_id).values(last_used_at=at)
        )


def _audit_to_core(row: AnyRow) -> AuditEntry:
    given = {
        "actor": AuditActor(
            user_id=row.actor_user_id,
            email=row.actor_email,
            token_id=row.token_id,
            token_name=row.token_name,
        ),
        "target": AuditTarget(type=row.target_type, id=row.target_id, name=row.target_name),
        "outcome": AuditOutcome(row.outcome),
    }
    return from_row(AuditEntry, row, given)


def _cut(text: str | None, size: int) -> str | None:
    return text if text is None or len(text) <= size else text[: size - 1] + "…"


class SqlAuditRepository(_Repository):
    """``AuditRepository``: ``add`` inserts, ``prune`` deletes old entries; nothing else
    writes to the table."""

    async def add(self, entry: AuditEntry) -> None:
        await self._tx.write(
            insert(audit_t).values(
                id=entry.id,
                team_id=entry.team_id,
                at=entry.at,
                actor_user_id=entry.actor.user_id,
                actor_email=entry.actor.email,
                token_id=entry.actor.token_id,
                token_name=_cut(entry.actor.token_name, 100),
                action=entry.action,
                target_type=entry.target.type,
                target_id=_cut(entry.target.id, 64),
                target_name=_cut(entry.target.name, 300),
                client_address=_cut(entry.client_address, 64),
                outcome=entry.outcome.value,
                detail=_cut(entry.detail, 300),
            )
        )

    async def page(
        self,
        team_id: UUID,
        limit: int,
        before: UUID | None = None,
        where: AuditFilter | None = None,
    ) -> list[AuditEntry]:
        e = audit_t.c
        conditions = [e.team_id == team_id]
        if where is not None and where.action is not None:
            conditions.append(e.action == where.action)
        if where is not None and where.outcome is not None:
            conditions.append(e.outcome == where.outcome.value)
        if where is not None and where.actor is not None:
            conditions.append(func.lower(e.actor_email) == where.actor.lower())
        if before is not None:
            anchor = select(e.at, e.id).where(e.id == before, e.team_id == team_id)
            mark = (await self._tx.read(anchor)).first()
            if mark is None:
                return []
            conditions.append(or_(e.at < mark.at, and_(e.at == mark.at, e.id < mark.id)))
        stmt = select(audit_t).where(*conditions).order_by(e.at.desc(), e.id.desc()).limit(limit)
        return [_audit_to_core(row) for row in await self._tx.read(stmt)]

    async def prune(self, older_than: datetime) -> int:
        found = await self._tx.write(delete(audit_t).where(audit_t.c.at < older_than))
        return int(found.rowcount or 0)
