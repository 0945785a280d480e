"""Before-request hooks: authenticate, rate-limit, and check the body strictly.

They run before Litestar decodes anything, so a request gets 401 before any
body error, and a body gets every broken rule at once (the core's parsers),
never Litestar's lenient first-error decoding.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from berth.core.commands import parse_create_server, parse_deploy
from berth.core.errors import FieldError, InvalidInput, Unauthorized
from berth.core.types import RuleError, check_idempotency_key

from .context import context_of
from .errors import BadJson, TooManyRequests, UnsupportedMediaType

__all__ = ["authenticated", "create_server_body", "deploy_body"]

Req = Any  # litestar.Request[Any, Any, Any]
Hook = Callable[[Req], Awaitable[None]]


async def authenticated(request: Req) -> None:
    """Bearer token → ``request.state.user``; throttles failures per client address."""
    ctx = context_of(request)
    address = request.client.host if request.client else "unknown"
    wait = ctx.auth_failures.exhausted(address)
    if wait:
        raise TooManyRequests(wait, "Too many failed authentications from this address.")
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    try:
        if scheme.lower() != "bearer":
            raise Unauthorized()
        user = await ctx.services.authenticate(token.strip())
    except Unauthorized:
        ctx.auth_failures.take(address)
        raise
    wait = ctx.requests.take(user.id)
    if wait:
        raise TooManyRequests(wait, "Request rate limit reached for this token.")
    request.state.user = user


async def json_body(request: Req) -> object:
    """The body as JSON: 415 unless ``application/json``, 413 over the limit, 400 if malformed.

    JSON nested too deeply to decode is valid JSON that no schema here allows: 422.
    """
    media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        raise UnsupportedMediaType()
    raw = await request.body()
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # msgspec: bad UTF-8 → the latter
        raise BadJson(str(exc) if raw.strip() else "the body is empty") from None
    except RecursionError:  # valid JSON, but no body of this API nests that deep
        raise InvalidInput([FieldError("body", "The JSON nests too deeply.", None)]) from None


async def deploy_body(request: Req) -> None:
    """Authenticate, then parse the deploy body and Idempotency-Key into a command."""
    await authenticated(request)
    raw = await json_body(request)
    key = request.headers.get("idempotency-key")
    errors: list[FieldError] = []
    if key is not None:
        try:
            check_idempotency_key(key)
        except RuleError as exc:
            errors.append(FieldError("header.Idempotency-Key", str(exc), key[:200]))
    wait = request.query_params.get("wait")
    if wait is not None and not (wait.isascii() and wait.isdigit() and 1 <= int(wait) <= 300):
        errors.append(FieldError("query.wait", "Expected whole seconds from 1 to 300.", wait[:200]))
    try:
        request.state.command = parse_deploy(raw, idempotency_key=key)
    except InvalidInput as exc:
        errors[:0] = exc.errors
    if errors:
        raise InvalidInput(errors)


async def create_server_body(request: Req) -> None:
    """Authenticate, then parse the create-server body into a command."""
    await authenticated(request)
    request.state.command = parse_create_server(await json_body(request))
