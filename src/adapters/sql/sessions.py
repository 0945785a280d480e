"""The dashboard's repositories: web sessions and sign-up invitations.

Both are found by the SHA-256 hash of a random secret the browser (or the
invitee) holds; the secrets themselves are never stored. Nothing here is
cached: a signed-out session is refused at once.
"""

from __future__ import annotations

from datetime import datetime
from typing import cast

import msgspec
from berth.core.errors import Conflict
from berth.core.models import Invite, User, WebSession
from sqlalchemy import Table, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from .rows import _Repository, from_row
from .tables import InviteRow, UserRow, WebSessionRow
from .transaction import Transaction

__all__ = ["SqlInviteRepository", "SqlSessionRepository"]

sessions_t = cast(Table, WebSessionRow.__table__)
invites_t = cast(Table, InviteRow.__table__)
users_t = cast(Table, UserRow.__table__)

_SESSION_WITH_USER = select(
    users_t.c.id.label("uid"),
    users_t.c.email,
    users_t.c.password_hash,
    users_t.c.created_at.label("user_created_at"),
    *sessions_t.c,
).join_from(sessions_t, users_t, sessions_t.c.user_id == users_t.c.id)


async def _insert(tx: Transaction, table: Table, row: msgspec.Struct, taken: str) -> None:
    """Insert ``row`` (the Struct's fields are the table's columns); ``Conflict`` if taken."""
    try:
        await tx.write(insert(table).values(msgspec.structs.asdict(row)))
    except IntegrityError as exc:
        raise Conflict(taken) from exc


class SqlSessionRepository(_Repository):
    """``SessionRepository`` over the ``web_session`` table."""

    async def add(self, session: WebSession) -> None:
        """Store a new session. Raises ``Conflict`` if its hash is taken (never in practice)."""
        await _insert(self._tx, sessions_t, session, "This session id is already in use.")

    async def get(self, id_hash: str) -> tuple[User, WebSession] | None:
        """In one query."""
        stmt = _SESSION_WITH_USER.where(sessions_t.c.id_hash == id_hash)
        row = (await self._tx.read(stmt)).first()
        if row is None:
            return None
        user = from_row(User, row, id="uid", created_at="user_created_at")
        return user, from_row(WebSession, row)

    async def touch(self, id_hash: str, last_seen_at: datetime, expires_at: datetime) -> None:
        await self._tx.write(
            update(sessions_t)
            .where(sessions_t.c.id_hash == id_hash)
            .values(last_seen_at=last_seen_at, expires_at=expires_at)
        )

    async def delete(self, id_hash: str) -> None:
        await self._tx.write(delete(sessions_t).where(sessions_t.c.id_hash == id_hash))

    async def delete_expired(self, now: datetime) -> int:
        """An index range scan."""
        result = await self._tx.write(delete(sessions_t).where(sessions_t.c.expires_at <= now))
        return int(result.rowcount or 0)


class SqlInviteRepository(_Repository):
    """``InviteRepository`` over the ``invite`` table."""

    async def add(self, invite: Invite) -> None:
        """Store a new invitation. Raises ``Conflict`` if its hash is taken."""
        await _insert(self._tx, invites_t, invite, "This invitation already exists.")

    async def get(self, token_hash: str) -> Invite | None:
        """The invitation with this hash, used or not, or ``None``."""
        stmt = select(invites_t).where(invites_t.c.token_hash == token_hash)
        row = (await self._tx.read(stmt)).first()
        if row is None:
            return None
        return from_row(Invite, row)

    async def use(self, token_hash: str, at: datetime) -> bool:
        return await self._changed(
            update(invites_t)
            .where(invites_t.c.token_hash == token_hash, invites_t.c.used_at.is_(None))
            .values(used_at=at)
        )
