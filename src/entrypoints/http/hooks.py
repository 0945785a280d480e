"""Before-request hooks: authenticate, rate-limit, and check the body and query strictly.

They run before Litestar decodes anything, so a request gets 401 before any
body error, and a body gets every broken rule at once (the core's parsers),
never Litestar's lenient first-error decoding. Query parameters are read here too
(``inputs.py``), so Litestar's parsing of them, which only documents them, can no
longer fail.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from berth.core.commands import parse_create_server, parse_deploy
from berth.core.errors import FieldError, InvalidInput, Unauthorized
from berth.core.types import RuleError, check_idempotency_key

from .context import context_of
from .errors import BadJson, TooManyRequests, UnsupportedMediaType
from .inputs import NotJson, decode_json, echo, query_int, query_uuid

__all__ = [
    "TAIL_DEFAULT",
    "TAIL_MAX",
    "WAIT_MAX",
    "authenticated",
    "create_server_body",
    "deploy_body",
    "install_query",
    "json_body",
    "logs_query",
]

WAIT_MAX = 300  # ?wait: whole seconds, 1-300
TAIL_MAX = 5000  # ?tail: log lines, 1-5000
TAIL_DEFAULT = 100

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

    JSON nested too deeply to decode is valid JSON that no schema here allows: 422; so
    are numbers beyond a float's range, which decode to ``±inf`` (``inputs.decode_json``).
    """
    media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        raise UnsupportedMediaType()
    raw = await request.body()
    try:
        return decode_json(raw)
    except NotJson as exc:
        raise BadJson(str(exc) if raw.strip() else "the body is empty") from None
    except RecursionError:  # valid JSON, but no body of this API nests that deep
        raise InvalidInput([FieldError("body", "The JSON nests too deeply.", None)]) from None


def _query(request: Req, name: str) -> list[str]:
    values: list[str] = request.query_params.getall(name, [])
    return values


async def deploy_body(request: Req) -> None:
    """Authenticate, then parse the deploy body, ``?wait`` and Idempotency-Key into a
    command (``request.state.command``, ``request.state.wait``); every error at once."""
    await authenticated(request)
    raw = await json_body(request)
    errors: list[FieldError] = []
    keys = request.headers.getall("idempotency-key", [])
    key = keys[0] if len(keys) == 1 else None
    if len(keys) > 1:
        errors.append(
            FieldError(
                "header.Idempotency-Key",
                f"Given {len(keys)} times; give it at most once.",
                None,
            )
        )
    elif key is not None:
        try:
            check_idempotency_key(key)
        except RuleError as exc:
            errors.append(FieldError("header.Idempotency-Key", str(exc), echo(key)))
    request.state.wait = query_int(
        "wait", _query(request, "wait"), errors, low=1, high=WAIT_MAX, what="whole seconds"
    )
    try:
        request.state.command = parse_deploy(raw, idempotency_key=key)
    except InvalidInput as exc:
        errors[:0] = exc.errors
    if errors:
        raise InvalidInput(errors)


async def logs_query(request: Req) -> None:
    """Authenticate, then read ``?tail`` (``request.state.tail``, default 100)."""
    await authenticated(request)
    errors: list[FieldError] = []
    tail = query_int(
        "tail", _query(request, "tail"), errors, low=1, high=TAIL_MAX, what="a number of lines"
    )
    if errors:
        raise InvalidInput(errors)
    request.state.tail = TAIL_DEFAULT if tail is None else tail


async def install_query(request: Req) -> None:
    """Authenticate, then read the required ``?serverId`` (``request.state.server_id``)."""
    await authenticated(request)
    errors: list[FieldError] = []
    request.state.server_id = query_uuid("serverId", _query(request, "serverId"), errors)
    if errors:
        raise InvalidInput(errors)


async def create_server_body(request: Req) -> None:
    """Authenticate, then parse the create-server body into a command."""
    await authenticated(request)
    request.state.command = parse_create_server(await json_body(request))
