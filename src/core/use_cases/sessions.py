"""Dashboard accounts: sign up, sign in, resolve and end a web session, invitations.

A web session is a random id held in the browser's cookie; the store keeps only
its SHA-256 hash, with a CSRF token every form of the session sends back. A
session ends after ``SESSION_IDLE`` without use, or ``SESSION_MAX`` after it
began, whichever comes first.

Who may sign up: the first account of a fresh install with the one-time setup code
``berth serve`` printed when it started (or an invitation); later ones only when the
operator turned open sign-up on, or with an invitation from ``berth user invite``
(one-time, expiring, optionally for one email address).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime, timedelta
from uuid import uuid4

import msgspec
import structlog

from .. import commands as c
from .. import tokens
from ..access import Actor
from ..errors import (
    NO_SETUP_CODE,
    FieldError,
    Forbidden,
    InvalidInput,
    StoreUnavailable,
    TooManyAttempts,
    Unauthorized,
)
from ..limits import LoginThrottle
from ..models import SESSION_IDLE, SESSION_MAX, Invite, User, WebSession
from ..outages import ThrottledWarning
from ..ports import Clock, UnitOfWork
from ..results import NewSession, SignUpMode
from ..types import RuleError, check_email
from .accounts import UsesPasswords, check_credentials
from .owned import UsesStore, UsesStoreAndClock
from .servers import EnsureLocalServer, register_local

__all__ = [
    "INVITE_TTL",
    "SESSION_IDLE",
    "SESSION_MAX",
    "SETUP_TTL",
    "CreateInvite",
    "IssueSetupCode",
    "ResolveSession",
    "SignIn",
    "SignOut",
    "SignUp",
    "SignUpPolicy",
    "session_hash",
]

log = structlog.get_logger()

SESSION_TOUCH_EVERY = timedelta(seconds=60)
INVITE_TTL = timedelta(days=7)
#: How long a setup code works; every start of ``berth serve`` prints a new one.
SETUP_TTL = timedelta(hours=24)

_session_write_skipped = ThrottledWarning("session_bookkeeping_not_recorded")

# What ``secrets.token_urlsafe(32)`` produces: 43 characters of the URL-safe alphabet.
_SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{43}$")


def session_hash(session_id: str) -> str:
    """What is stored for a session id: its SHA-256, hex."""
    return hashlib.sha256(session_id.encode("ascii")).hexdigest()


@dataclass(eq=False)
class SignUpPolicy(UsesStore):
    """Says who may sign up now (the sign-in page offers sign-up accordingly)."""

    _: KW_ONLY
    open_signup: bool

    async def __call__(self, actor: Actor | None, cmd: c.SignUpPolicy) -> SignUpMode:
        async with self._uow() as uow:
            first = await uow.users.first()
        if first is None:
            return SignUpMode.FIRST
        return SignUpMode.OPEN if self.open_signup else SignUpMode.INVITE


async def _begin(uow: UnitOfWork, user: User, now_clock: Clock) -> NewSession:
    """Store a new session of ``user`` in ``uow`` (the caller commits)."""
    now = now_clock.now()
    session_id = secrets.token_urlsafe(32)
    session = WebSession(
        id_hash=session_hash(session_id),
        user_id=user.id,
        csrf_token=secrets.token_urlsafe(32),
        created_at=now,
        last_seen_at=now,
        expires_at=now + SESSION_IDLE,
    )
    await uow.sessions.delete_expired(now)
    await uow.sessions.add(session)
    return NewSession(user=user, session_id=session_id, session=session)


@dataclass(eq=False)
class SignUp(UsesPasswords):
    """Create an account and sign it in, if sign-up is open to the caller.

    The first account needs a setup code (``IssueSetupCode``) or an invitation, open
    sign-up or not: whoever reaches a fresh berth first must not own it (and, under
    ``serve --local``, this machine). The code is spent by that sign-up; codes left over
    are worth nothing once an account exists.

    Raises ``InvalidInput`` (fields ``email``, ``password``), ``Conflict`` when the
    email is taken, and ``Forbidden`` when sign-up is closed or the code or invitation
    is missing (``field`` ``invite``, for the first account), unknown, used, expired or
    for another address. Under ``serve --local`` this machine's owner gets it as a
    server at once (``register_local``).
    """

    _: KW_ONLY
    open_signup: bool
    local: EnsureLocalServer | None = None

    async def __call__(self, actor: Actor | None, cmd: c.SignUp) -> NewSession:
        email = check_credentials(cmd.email, cmd.password)
        password_hash = await asyncio.to_thread(self._hasher.hash, cmd.password)
        now = self._clock.now()
        user = User(id=uuid4(), email=email, password_hash=password_hash, created_at=now)
        async with self._uow() as uow:
            first = await uow.users.first()
            if first is None:
                kinds = (tokens.SETUP_PREFIX, tokens.INVITE_PREFIX)
                await self._spend(uow, cmd.invite, email, kinds)
            elif not self.open_signup:
                await self._spend(uow, cmd.invite, email, (tokens.INVITE_PREFIX,))
            await uow.users.add(user)
            winner = await uow.users.first()
            if first is None and (winner is None or winner.id != user.id):
                # Another sign-up won the race to be the first account.
                raise Forbidden("Sign-up is closed: ask the operator for an invitation.")
            started = await _begin(uow, user, self._clock)
            await uow.commit()
        log.info("user_signed_up", user_id=str(user.id), first=first is None)
        await register_local(self.local)
        return started

    async def _spend(
        self, uow: UnitOfWork, invite: str | None, email: str, kinds: tuple[str, ...]
    ) -> None:
        """Use the one-time ``invite`` (a token of one of ``kinds``) for ``email``."""
        setup = tokens.SETUP_PREFIX in kinds
        field = "invite" if setup else None
        if not invite:
            raise Forbidden(
                NO_SETUP_CODE
                if setup
                else "Sign-up is closed: ask the operator for an invitation.",
                field=field,
            )
        what = "setup code" if invite.startswith(tokens.SETUP_PREFIX) else "invitation"
        invalid = Forbidden(
            f"This {what} is unknown, used or expired."
            + (" A restart of `berth serve` prints a new setup code." if setup else ""),
            field=field,
        )
        if not any(tokens.is_well_formed(invite, kind) for kind in kinds):
            raise invalid
        digest = tokens.hash_token(invite)
        found = await uow.invites.get(digest)
        now = self._clock.now()
        if found is None or found.used_at is not None or found.expires_at <= now:
            raise invalid
        if found.email is not None and found.email != email:
            raise Forbidden("This invitation is for another email address.", field=field)
        if not await uow.invites.use(digest, now):
            raise invalid


@dataclass(eq=False)
class SignIn(UsesPasswords):
    """Check an email and password and begin a session; failures are throttled.

    Raises ``TooManyAttempts`` while the client address, or this email from this
    address, has too many recent failures (checked before the password, so guessing
    stops; failures from other addresses never lock the email out), and
    ``Unauthorized`` for a wrong email or password, never saying which. An unknown
    email costs the same hash verification as a known one.
    """

    _throttle: LoginThrottle
    _dummy_hash: str | None = field(default=None, init=False)

    async def __call__(self, actor: Actor | None, cmd: c.SignIn) -> NewSession:
        password, address = cmd.password, cmd.address
        key = cmd.email.strip().lower()[:254]
        wait = await self._throttle.retry_after(address, key)
        if wait:
            raise TooManyAttempts(
                wait, f"Too many failed sign-ins. Try again in {_duration(wait)}."
            )
        async with self._uow() as uow:
            user = await uow.users.get_by_email(key) if key else None
        if user is not None:
            stored = user.password_hash
        else:
            if self._dummy_hash is None:
                self._dummy_hash = await asyncio.to_thread(
                    self._hasher.hash, secrets.token_urlsafe(16)
                )
            stored = self._dummy_hash
        matches = await asyncio.to_thread(self._hasher.verify, stored, password[:1024])
        if user is None or not matches:
            await self._throttle.failed(address, key)
            log.info("sign_in_failed")
            raise Unauthorized("Wrong email or password.")
        await self._throttle.succeeded(address, key)
        async with self._uow() as uow:
            started = await _begin(uow, user, self._clock)
            await uow.commit()
        log.info("user_signed_in", user_id=str(user.id))
        return started


def _duration(seconds: int) -> str:
    if seconds < 90:
        return f"{seconds} seconds"
    return f"{(seconds + 59) // 60} minutes"


class ResolveSession(UsesStoreAndClock):
    """The user and session behind a session id, or ``None`` if unknown or expired.

    A session used after ``SESSION_TOUCH_EVERY`` has its idle expiry moved forward;
    an expired one is deleted when seen. Both writes are bookkeeping, each in a
    transaction of its own after the look-up: when the store cannot take them the
    answer stands (the session as read; ``None`` for an expired one) and a warning is
    logged, at most once per interval.
    """

    async def __call__(
        self, actor: Actor | None, cmd: c.ResolveSession
    ) -> tuple[User, WebSession] | None:
        session_id = cmd.session_id
        if not _SESSION_ID.fullmatch(session_id):
            return None
        digest = session_hash(session_id)
        now = self._clock.now()
        async with self._uow() as uow:
            found = await uow.sessions.get(digest)
        if found is None:
            return None
        user, session = found
        if session.expires_at <= now or session.created_at + SESSION_MAX <= now:
            await self._bookkeeping(_delete_session(digest), user)
            return None
        if now - session.last_seen_at >= SESSION_TOUCH_EVERY:
            expires = min(now + SESSION_IDLE, session.created_at + SESSION_MAX)
            if await self._bookkeeping(_touch_session(digest, now, expires), user):
                session = msgspec.structs.replace(session, last_seen_at=now, expires_at=expires)
        return user, session

    async def _bookkeeping(
        self, write: Callable[[UnitOfWork], Awaitable[None]], user: User
    ) -> bool:
        """Run ``write`` and commit, in a unit of work of its own; ``False`` if the store
        could not take it (logged, at most once per interval)."""
        try:
            async with self._uow() as uow:
                await write(uow)
                await uow.commit()
        except StoreUnavailable as exc:
            _session_write_skipped.warn(user_id=str(user.id), reason=exc.detail)
            return False
        return True


def _delete_session(digest: str) -> Callable[[UnitOfWork], Awaitable[None]]:
    async def write(uow: UnitOfWork) -> None:
        await uow.sessions.delete(digest)

    return write


def _touch_session(
    digest: str, now: datetime, expires: datetime
) -> Callable[[UnitOfWork], Awaitable[None]]:
    async def write(uow: UnitOfWork) -> None:
        await uow.sessions.touch(digest, now, expires)

    return write


class SignOut(UsesStore):
    """End a session: its id stops working at once."""

    async def __call__(self, actor: Actor | None, cmd: c.SignOut) -> None:
        session_id = cmd.session_id
        if not _SESSION_ID.fullmatch(session_id):
            return
        async with self._uow() as uow:
            await uow.sessions.delete(session_hash(session_id))
            await uow.commit()


class IssueSetupCode(UsesStoreAndClock):
    """A one-time code for the first account, while there is none; ``None`` after.

    Shown once (``berth serve`` prints it at start); only its hash is stored, as an
    invitation's is. It works once, within ``SETUP_TTL``, and only while no account
    exists (``SignUp``): every start issues a new one, and none is worth anything once
    the first account exists.
    """

    async def __call__(self, actor: Actor | None, cmd: c.IssueSetupCode) -> str | None:
        now = self._clock.now()
        async with self._uow() as uow:
            if await uow.users.first() is not None:
                return None
            code = await _invite(uow, tokens.SETUP_PREFIX, None, now, SETUP_TTL)
            await uow.commit()
        log.info("setup_code_issued", expires_at=(now + SETUP_TTL).isoformat())
        return code


class CreateInvite(UsesStoreAndClock):
    """An invitation to sign up (the operator's ``berth user invite``); returns its token.

    The token is shown once; only its hash is stored. It works once, within
    ``INVITE_TTL``, and only for ``email`` when one is given.
    """

    async def __call__(self, actor: Actor | None, cmd: c.CreateInvite) -> str:
        email = cmd.email
        if email is not None:
            try:
                email = check_email(email)
            except RuleError as exc:
                raise InvalidInput([FieldError("email", str(exc), email[:200])]) from None
        now = self._clock.now()
        async with self._uow() as uow:
            token = await _invite(uow, tokens.INVITE_PREFIX, email, now, INVITE_TTL)
            await uow.commit()
        log.info("invite_created", for_email=email is not None)
        return token


async def _invite(
    uow: UnitOfWork, prefix: str, email: str | None, now: datetime, ttl: timedelta
) -> str:
    """A new one-time token with ``prefix``, its hash stored in ``uow`` (the caller
    commits) as an invitation valid for ``ttl``; returns the token itself."""
    token = tokens.generate(prefix)
    await uow.invites.add(
        Invite(
            token_hash=tokens.hash_token(token),
            email=email,
            created_at=now,
            expires_at=now + ttl,
        )
    )
    return token
