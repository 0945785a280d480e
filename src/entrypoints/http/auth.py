"""Authentication of the API, once for every route under it: ASGI middleware.

``bearer_auth`` guards every ``/api/agent`` route but the public ones, which are
mounted outside its router (``PublicController``) — so a new API route cannot
forget it. ``OPTIONS`` passes (it answers only the route's ``Allow``, as a 405 does).
It runs after routing (an unknown route is 404, a wrong method 405,
before any 401) and before anything reads the body (401 before 415/413/400/422).
``enrollment_auth`` does the same for the install script's two routes with a
server's one-time enrollment token, and ``server_signature_auth`` for its routes
after enrollment, with a request signed by the server's SSH host key. All count
failures per client address and requests per token on the one rate limiter
(``HttpLimits``).

The credential is checked first, the address's failures after: a valid credential is
never refused because others failed from its address (behind a proxy that is not
trusted, every client shares one), only its own request budget applies. A bad one
from an address that failed too often is a 429 — at once, with no look-up, when its
form alone shows it cannot be valid.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from berth.core import tokens
from berth.core.access import Actor
from berth.core.bus import MessageBus
from berth.core.commands import (
    Authenticate,
    Command,
    EnrollmentStatus,
    ServerSelfStatus,
    ServerSignature,
)
from berth.core.errors import ENROLLMENT_REFUSED, SIGNATURE_REFUSED, RateLimited, Unauthorized
from berth.core.limits import Limit, Quota, RateLimiter
from berth.core.models import Server
from litestar.types import ASGIApp, Receive, Scope, Send

from .streams import CREDENTIAL, token_credential

__all__ = [
    "RATE_LIMITED",
    "EnrollmentRefused",
    "HttpLimits",
    "RequestsLimited",
    "SignatureRefused",
    "bearer_auth",
    "enrollment_auth",
    "parse_signature",
    "server_signature_auth",
    "user_of",
]


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """Requests per token and failed authentications per client address."""

    limiter: RateLimiter
    requests: Limit
    auth_failures: Limit

    async def throttled(self, address: str) -> int:
        """Seconds until ``address`` may fail again (0: now); spends nothing."""
        return await self.limiter.peek(f"auth-failures:{address}", self.auth_failures)

    async def failed(self, address: str) -> None:
        """Count one failed authentication against ``address``."""
        await self.limiter.take(f"auth-failures:{address}", self.auth_failures)

    async def request(self, key: str, detail: str) -> dict[str, str]:
        """Count one request against ``key``: the ``RateLimit-Policy`` and ``RateLimit``
        headers its answer carries; ``RequestsLimited`` (429) past the limit."""
        left = await self.limiter.spend(f"requests:{key}", self.requests)
        headers = rate_limit_headers(self.requests, left)
        if left.retry_after:
            raise RequestsLimited(left.retry_after, detail, headers)
        return headers


#: The scope key of a request to a route that admits rate-limited requests
#: (``admit_limited``): the ``RequestsLimited`` it would have been refused with.
RATE_LIMITED = "berth_rate_limited"


class RequestsLimited(RateLimited):
    """A token's request limit reached: the 429 carries the limit's headers too."""

    def __init__(self, retry_after: int, detail: str, headers: dict[str, str]) -> None:
        super().__init__(retry_after, detail)
        self.headers = headers


def rate_limit_headers(limit: Limit, left: Quota) -> dict[str, str]:
    """The IETF draft's ``RateLimit-Policy`` (the budget: ``q`` requests per ``w``
    seconds) and ``RateLimit`` (``r`` remaining, ``t`` seconds until the budget is whole
    again, or until a refused request may be retried) for a spend of ``limit``."""
    policy = f'"requests";q={limit.count};w={math.ceil(limit.period)}'
    later = left.retry_after or left.reset
    return {"RateLimit-Policy": policy, "RateLimit": f'"requests";r={left.remaining};t={later}'}


def _with_headers(send: Send, headers: dict[str, str]) -> Send:
    """``send`` adding ``headers`` to the response's start."""
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]

    async def sending(message: Any) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *raw]}
        await send(message)

    return sending


class EnrollmentRefused(Unauthorized):
    """An enrollment token that is missing, malformed, unknown, expired or (to enroll) used."""

    def __init__(self) -> None:
        super().__init__(
            f"{ENROLLMENT_REFUSED} Send `Authorization: Bearer <enrollment token>`; "
            "a new server gets a new token (POST /api/agent/servers)."
        )


def _client(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


def _bearer(scope: Scope) -> str | None:
    """The token of ``Authorization: Bearer <token>``, or None."""
    for key, value in scope.get("headers", ()):
        if key == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else None
    return None


#: What a token check gives: the key its requests are counted under, the 429's words,
#: and what to put in the ASGI scope for the handlers.
Admitted = tuple[str, str, dict[str, Any]]


Middleware = Callable[[ASGIApp], ASGIApp]


def _address_throttled(wait: int) -> RateLimited:
    return RateLimited(wait, "Too many failed authentications from this address.")


def _token_auth(
    limits: HttpLimits,
    check: Callable[[Scope, str | None], Awaitable[Admitted]],
    well_formed: Callable[[Scope, str | None], bool],
    *,
    admit_limited: bool = False,
) -> Middleware:
    """Middleware: ``check`` the Bearer token, then count the request against its key;
    its answer carries the limit's ``RateLimit-Policy`` and ``RateLimit`` headers. Past
    the limit it is a 429, or with ``admit_limited`` it goes on with the refusal in the
    scope (``RATE_LIMITED``) for the app to answer in its own terms (MCP: a tool error).

    A refused token (``Unauthorized``) counts as a failure of the client address; from
    an address that failed too often it is a 429 instead of a 401, and one that is not
    even ``well_formed`` (no look-up needed to know) is refused so before ``check``.

    A closure, not a ``DefineMiddleware`` with arguments: Litestar deep-copies a
    router's middleware arguments, and the bus must stay the one bus.
    """

    def wrap(app: ASGIApp) -> ASGIApp:
        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            if scope.get("method") == "OPTIONS":
                # The route's methods (``Allow``), as a 405 tells anyone: nothing to guard,
                # and a CORS preflight never carries a token.
                await app(scope, receive, send)
                return
            address = _client(scope)
            token = _bearer(scope)
            wait = await limits.throttled(address)
            if wait and not well_formed(scope, token):
                raise _address_throttled(wait)
            try:
                key, detail, found = await check(scope, token)
            except Unauthorized:
                if wait:
                    raise _address_throttled(wait) from None
                await limits.failed(address)
                raise
            try:
                headers = await limits.request(key, detail)
            except RequestsLimited as exc:
                if not admit_limited:
                    raise
                headers, found = exc.headers, {**found, RATE_LIMITED: exc}
            scope.update(found)  # type: ignore[typeddict-item]
            await app(scope, receive, _with_headers(send, headers))

        return middleware

    return wrap


def bearer_auth(bus: MessageBus, limits: HttpLimits, *, admit_limited: bool = False) -> Middleware:
    """The API token → ``scope["user"]``, the ``Actor`` it acts as (and the
    ``Credential`` an open stream asks again); 401 (no hint why) or 429 otherwise
    (``admit_limited``: see ``_token_auth``)."""

    async def check(scope: Scope, token: str | None) -> Admitted:
        if token is None:
            raise Unauthorized()
        actor = await bus.handle(Authenticate(token=token, client_address=_client(scope)))
        found = {"user": actor, CREDENTIAL: token_credential(bus, token, actor)}
        key = str(actor.token_id or actor.user.id)  # each named token has its own budget
        return key, "Request rate limit reached for this token.", found

    def well_formed(scope: Scope, token: str | None) -> bool:
        return token is not None and tokens.is_well_formed(token)

    return _token_auth(limits, check, well_formed, admit_limited=admit_limited)


async def _server_of(
    bus: MessageBus, command: Command[Server], refused: type[Unauthorized]
) -> Server:
    """The server a server's own credential names; ``refused`` (which says what to send)
    when the bus refuses the credential."""
    try:
        return await bus.handle(command)
    except Unauthorized:
        raise refused() from None


def enrollment_auth(bus: MessageBus, limits: HttpLimits) -> Middleware:
    """The enrollment token → ``scope["auth"]``; 401 (saying why it is refused) or 429.

    The server must still be pending (a used token opens nothing) and the token not
    expired. ``EnrollServer`` checks again, atomically: this is so that a refusal says
    why here, before the body is read.
    """

    async def check(scope: Scope, token: str | None) -> Admitted:
        if token is None:
            raise EnrollmentRefused()
        server = await _server_of(bus, EnrollmentStatus(token=token), EnrollmentRefused)
        detail = "Request rate limit reached for this enrollment token."
        return f"enrollment:{server.id}", detail, {"auth": token}

    def well_formed(scope: Scope, token: str | None) -> bool:
        return token is not None and tokens.is_well_formed(token, tokens.ENROLL_PREFIX)

    return _token_auth(limits, check, well_formed)


#: ``Authorization: Bearer berth_sig.<server id>.<unix time>.<base64 SSHSIG>``.
SIGNATURE_PREFIX = "berth_sig."


class SignatureRefused(Unauthorized):
    """A server signature that is missing, malformed, stale or not by a pinned host key."""

    def __init__(self) -> None:
        super().__init__(
            f"{SIGNATURE_REFUSED} Send `Authorization: Bearer "
            "berth_sig.<server id>.<unix time>.<base64 SSHSIG>` (the install script does)."
        )


def parse_signature(token: str | None, method: str, path: str) -> ServerSignature:
    """The signed request a ``berth_sig.`` bearer token describes; ``SignatureRefused``
    if it is not one."""
    if token is None or not token.startswith(SIGNATURE_PREFIX) or len(token) > 8192:
        raise SignatureRefused()
    parts = token[len(SIGNATURE_PREFIX) :].split(".")
    if len(parts) != 3 or not parts[1].isascii() or not parts[1].isdigit():
        raise SignatureRefused()
    try:
        server_id = UUID(parts[0])
        signature = base64.b64decode(parts[2], validate=True)
    except (ValueError, binascii.Error):
        raise SignatureRefused() from None
    return ServerSignature(
        server_id=server_id, signed_at=int(parts[1]), signature=signature, method=method, path=path
    )


def server_signature_auth(bus: MessageBus, limits: HttpLimits) -> Middleware:
    """A request signed with the server's host key → ``scope["auth"]`` (the
    ``ServerSignature``); 401 (saying what to send) or 429."""

    async def check(scope: Scope, token: str | None) -> Admitted:
        signature = parse_signature(token, str(scope.get("method", "")), str(scope["path"]))
        server = await _server_of(bus, ServerSelfStatus(signature=signature), SignatureRefused)
        detail = "Request rate limit reached for this server."
        return f"server-self:{server.id}", detail, {"auth": signature}

    def well_formed(scope: Scope, token: str | None) -> bool:
        try:
            parse_signature(token, "", "")
        except SignatureRefused:
            return False
        return True

    return _token_auth(limits, check, well_formed)


def user_of(scope: Any) -> Actor:
    """Who the token ``bearer_auth`` authenticated for this request acts as."""
    actor: Actor = scope["user"]
    return actor
