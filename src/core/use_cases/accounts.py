"""Users and their API token: create a user, regenerate the token, authenticate."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import uuid4

import structlog

from .. import commands as c
from .. import tokens
from ..errors import FieldError, InvalidInput, NotFound, StoreUnavailable, Unauthorized
from ..models import ApiToken, User
from ..outages import ThrottledWarning
from ..ports import Clock, PasswordHasher
from ..types import RuleError, check_email, check_password
from .owned import UsesStore, UsesStoreAndClock
from .servers import EnsureLocalServer, register_local

__all__ = ["Authenticate", "CreateUser", "RegenerateToken", "TokenInfo"]

log = structlog.get_logger()

TOUCH_EVERY = timedelta(seconds=60)

_touch_skipped = ThrottledWarning("token_last_used_not_recorded")


def check_credentials(email: str, password: str) -> str:
    """The normalized email, if it and the password follow the rules; else ``InvalidInput``
    naming both (the password never echoed)."""
    errors: list[FieldError] = []
    try:
        email = check_email(email)
    except RuleError as exc:
        errors.append(FieldError("email", str(exc), email[:200]))
    try:
        check_password(password)
    except RuleError as exc:
        errors.append(FieldError("password", str(exc), None))
    if errors:
        raise InvalidInput(errors)
    return email


@dataclass(eq=False)
class UsesPasswords(UsesStore):
    """A use case that hashes or verifies passwords."""

    _hasher: PasswordHasher
    _clock: Clock


@dataclass(eq=False)
class CreateUser(UsesPasswords):
    """Create a user with an email and a password (argon2id-hashed); under ``serve
    --local`` the first one gets this machine as a server at once (``register_local``)."""

    _local: EnsureLocalServer | None = None

    async def __call__(self, actor: User | None, cmd: c.CreateUser) -> User:
        email = check_credentials(cmd.email, cmd.password)
        user = User(
            id=uuid4(),
            email=email,
            password_hash=self._hasher.hash(cmd.password),
            created_at=self._clock.now(),
        )
        async with self._uow() as uow:
            await uow.users.add(user)
            await uow.commit()
        log.info("user_created", user_id=str(user.id))
        await register_local(self._local)
        return user


class RegenerateToken(UsesStoreAndClock):
    """Issue the user's new API token; the previous one is revoked in the same transaction.

    The actor's own token, or (the admin CLI, with no actor) the user ``cmd.email``'s.
    Returns the token in clear text: the only moment it exists outside the caller.
    """

    async def __call__(self, user: User | None, cmd: c.RegenerateToken) -> str:
        email = cmd.email
        token = tokens.generate()
        async with self._uow() as uow:
            if user is None:
                found = await uow.users.get_by_email((email or "").strip().lower())
                if found is None:
                    raise NotFound("No such user.")
                user = found
            await uow.tokens.replace(
                ApiToken(
                    user_id=user.id,
                    token_hash=tokens.hash_token(token),
                    prefix=tokens.display_prefix(token),
                    created_at=self._clock.now(),
                )
            )
            await uow.commit()
        log.info("token_regenerated", user_id=str(user.id))
        return token


class TokenInfo(UsesStore):
    """What may be shown about a user's token: its first characters and last use."""

    async def __call__(self, user: User, cmd: c.TokenInfo) -> ApiToken | None:
        async with self._uow() as uow:
            return await uow.tokens.get(user.id)


class Authenticate(UsesStoreAndClock):
    """Turn a bearer token into its user, or raise ``Unauthorized`` (never saying why).

    The token's "last used" time is bookkeeping, recorded (at most every
    ``TOUCH_EVERY``) in a transaction of its own after the look-up: when the store
    cannot take that write (full, locked, unreachable for writes) the request goes on
    and a warning is logged, at most once per interval. Only a look-up that fails
    raises ``StoreUnavailable``.
    """

    async def __call__(self, actor: User | None, cmd: c.Authenticate) -> User:
        token = cmd.token
        if not tokens.is_well_formed(token):
            raise Unauthorized()
        digest = tokens.hash_token(token)
        async with self._uow() as uow:
            found = await uow.tokens.find(digest)
        if found is None or not tokens.same_hash(found[1].token_hash, digest):
            raise Unauthorized()
        user, stored = found
        now = self._clock.now()
        if stored.last_used_at is None or now - stored.last_used_at >= TOUCH_EVERY:
            await self._touch(user, now)
        return user

    async def _touch(self, user: User, now: datetime) -> None:
        try:
            async with self._uow() as uow:
                await uow.tokens.touch(user.id, now)
                await uow.commit()
        except StoreUnavailable as exc:
            _touch_skipped.warn(user_id=str(user.id), reason=exc.detail)
