"""Users and their API token: create a user, regenerate the token, authenticate."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID, uuid4

import structlog

from .. import commands as c
from .. import tokens
from ..access import Actor
from ..errors import FieldError, InvalidInput, NotFound, StoreUnavailable, Unauthorized
from ..events import Audited
from ..models import ApiToken, User
from ..outages import ThrottledWarning
from ..ports import Clock, PasswordHasher, UnitOfWork
from ..teams import AuditTarget
from ..types import RuleError, check_email, check_password
from .owned import UsesStore, UsesStoreAndClock
from .servers import EnsureLocalServer, register_local

__all__ = ["MAIN_TOKEN", "Authenticate", "CreateUser", "RegenerateToken", "ResetToken", "TokenInfo"]

log = structlog.get_logger()

TOUCH_EVERY = timedelta(seconds=60)
#: How the audit log names the user's main token (Settings → API token).
MAIN_TOKEN = "main token"  # noqa: S105 (a name, not a secret)

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

    async def __call__(self, actor: Actor | None, cmd: c.CreateUser) -> User:
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


async def _replace_token(uow: UnitOfWork, user: User, clock: Clock) -> str:
    token = tokens.generate()
    await uow.tokens.replace(
        ApiToken(
            user_id=user.id,
            token_hash=tokens.hash_token(token),
            prefix=tokens.display_prefix(token),
            created_at=clock.now(),
        )
    )
    return token


class RegenerateToken(UsesStoreAndClock):
    """Issue the actor's user's new main API token; the previous one is revoked in the
    same transaction. Returns the token in clear text: the only moment it exists outside
    the caller."""

    async def __call__(self, actor: Actor, cmd: c.RegenerateToken) -> str:
        user = actor.user
        async with self._uow() as uow:
            token = await _replace_token(uow, user, self._clock)
            target = AuditTarget(type="token", name="main token")
            uow.record(Audited.of(actor, "token.regenerate", target, team_id=user.id))
            await uow.commit()
        log.info("token_regenerated", user_id=str(user.id))
        return token


class ResetToken(UsesStoreAndClock):
    """The operator's ``berth token regenerate --email``: the user ``email``'s new main
    token, the old one revoked."""

    async def __call__(self, actor: Actor | None, cmd: c.ResetToken) -> str:
        async with self._uow() as uow:
            user = await uow.users.get_by_email(cmd.email.strip().lower())
            if user is None:
                raise NotFound("No such user.")
            token = await _replace_token(uow, user, self._clock)
            await uow.commit()
        log.info("token_regenerated", user_id=str(user.id), by="operator")
        return token


class TokenInfo(UsesStore):
    """What may be shown about a user's main token: its first characters and last use."""

    async def __call__(self, actor: Actor, cmd: c.TokenInfo) -> ApiToken | None:
        async with self._uow() as uow:
            return await uow.tokens.get(actor.user.id)


class Authenticate(UsesStoreAndClock):
    """Turn a bearer token into who it acts as, or raise ``Unauthorized`` (never saying
    why): the main token acts as its user with every right in their personal team; a
    named token as its user in its team, with their role there, narrowed to its scopes
    and servers — while it is not revoked, not expired, and its user still a member.

    A token's "last used" time is bookkeeping, recorded (at most every ``TOUCH_EVERY``)
    in a transaction of its own after the look-up: when the store cannot take that
    write (full, locked, unreachable for writes) the request goes on and a warning is
    logged, at most once per interval. Only a look-up that fails raises
    ``StoreUnavailable``.
    """

    async def __call__(self, actor: Actor | None, cmd: c.Authenticate) -> Actor:
        token = cmd.token
        if not tokens.is_well_formed(token):
            raise Unauthorized()
        digest = tokens.hash_token(token)
        async with self._uow() as uow:
            found = await uow.tokens.find(digest)
            named = await uow.access_tokens.find(digest) if found is None else None
        now = self._clock.now()
        if found is not None and tokens.same_hash(found[1].token_hash, digest):
            user, stored = found
            if stored.last_used_at is None or now - stored.last_used_at >= TOUCH_EVERY:
                await self._touch(user.id, None, now)
            return Actor.personal(user, token_name=MAIN_TOKEN, client_address=cmd.client_address)
        if named is None or not tokens.same_hash(named[1].token_hash, digest):
            raise Unauthorized()
        user, access, role = named
        if access.expires_at is not None and access.expires_at <= now:
            raise Unauthorized()
        if access.last_used_at is None or now - access.last_used_at >= TOUCH_EVERY:
            await self._touch(user.id, access.id, now)
        return Actor(
            user=user,
            team_id=access.team_id,
            role=role,
            scopes=access.scopes,
            server_ids=access.server_ids,
            token_id=access.id,
            token_name=access.name,
            expires_at=access.expires_at,
            client_address=cmd.client_address,
        )

    async def _touch(self, user_id: UUID, token_id: UUID | None, now: datetime) -> None:
        try:
            async with self._uow() as uow:
                if token_id is None:
                    await uow.tokens.touch(user_id, now)
                else:
                    await uow.access_tokens.touch(token_id, now)
                await uow.commit()
        except StoreUnavailable as exc:
            _touch_skipped.warn(user_id=str(user_id), reason=exc.detail)
