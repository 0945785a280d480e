"""Users and their API tokens."""

from __future__ import annotations

from datetime import datetime
from functools import partial
from uuid import UUID

import msgspec
from berth.core.models import ApiToken, User
from sqlalchemy import delete, insert, select, update

from ..cache import MISSING
from ..rows import (
    _TOKEN_WITH_USER,
    _Repository,
    _token_to_core,
    _user_to_core,
    from_row,
    tokens_t,
    users_t,
)
from ..teams import members_t, named_token_key, personal_team_rows, teams_t

__all__ = ["SqlTokenRepository", "SqlUserRepository"]


class SqlUserRepository(_Repository):
    """``UserRepository``: emails are stored and compared lowercased."""

    async def add(self, user: User) -> None:
        """The user with their personal team (the user's id), of which they are owner."""
        values = msgspec.structs.asdict(user) | {"email": user.email.lower()}
        await self._insert(
            users_t, values, {"uq_user_account_email": "This email address is already taken."}
        )
        team, member = personal_team_rows(msgspec.structs.replace(user, email=values["email"]))
        await self._tx.write(insert(teams_t).values(team))
        await self._tx.write(insert(members_t).values(member))

    async def get(self, user_id: UUID) -> User | None:
        """The user, or ``None``."""
        row = (await self._tx.read(select(users_t).where(users_t.c.id == user_id))).first()
        return _user_to_core(row) if row else None

    async def get_by_email(self, email: str) -> User | None:
        stmt = select(users_t).where(users_t.c.email == email.strip().lower())
        row = (await self._tx.read(stmt)).first()
        return _user_to_core(row) if row else None

    async def first(self) -> User | None:
        stmt = select(users_t).order_by(users_t.c.created_at, users_t.c.id).limit(1)
        row = (await self._tx.read(stmt)).first()
        return _user_to_core(row) if row else None


class SqlTokenRepository(_Repository):
    """``TokenRepository``: at most one token per user, found by its hash."""

    async def replace(self, token: ApiToken) -> None:
        await self._tx.write(delete(tokens_t).where(tokens_t.c.user_id == token.user_id))
        await self._insert(
            tokens_t,
            msgspec.structs.asdict(token),
            {"ix_api_token_token_hash": "This token is already in use."},
        )

    async def get(self, user_id: UUID) -> ApiToken | None:
        """The user's token, or ``None``."""
        stmt = select(tokens_t).where(tokens_t.c.user_id == user_id)
        row = (await self._tx.read(stmt)).first()
        return _token_to_core(row) if row else None

    async def find(self, token_hash: str) -> tuple[User, ApiToken] | None:
        """The token with this hash and its user, in one query; ``None`` if unknown.

        Cached (every request authenticates) until the next commit that changes an
        account, a token or a membership (``marks.ACCESS``) anywhere: a replaced token is
        unknown at once, whichever process replaced it. A hash whose named token's
        look-up is cached is no main token's (each is 256 random bits): ``None`` without
        a query, as a named token is looked for here first at every request (a miss is
        never cached, so each request with a named token had sent this query).
        """
        if self._tx.peek(named_token_key(token_hash)) is not MISSING:
            return None
        return await self._tx.cached(
            ("token", token_hash), partial(self._find, token_hash), mark="access"
        )

    async def _find(self, token_hash: str) -> tuple[User, ApiToken] | None:
        found = await self._tx.read(_TOKEN_WITH_USER, {"token_hash": token_hash})
        row = found.first()
        if row is None:
            return None
        token = from_row(ApiToken, row, created_at="token_created_at")
        return _user_to_core(row), token

    async def touch(self, user_id: UUID, at: datetime) -> None:
        await self._tx.write(
            update(tokens_t).where(tokens_t.c.user_id == user_id).values(last_used_at=at)
        )
