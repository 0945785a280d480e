"""The inputs of the API's handlers, read strictly, each provided by name (Litestar DI).

A handler's signature is the whole truth: ``caller: Caller`` (the bus, bound to the
authenticated user), ``deploy: DeployCommand``, ``listing: ListInstallations``, ``tail: int``.
Bodies and query parameters are read here rather than by Litestar, because the API promises more
than Litestar's lenient decoding gives (SPEC.md): strict types, every broken
rule at once in one problem, ``query.<name>`` locations with the raw value, a
parameter given twice refused. The body is decoded once. What OpenAPI says of
these inputs is declared beside each route (``openapi.py``'s ``Inputs``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar
from uuid import UUID

import msgspec
from berth.core.bus import MessageBus
from berth.core.commands import (
    PAGE_MAX,
    TAIL_DEFAULT,
    TAIL_MAX,
    WAIT_MAX,
    AddRegistry,
    Command,
    CreateServerCommand,
    CreateWebhook,
    DeployCommand,
    EnrollCommand,
    ListInstallations,
    RepinHostKeys,
    Rollback,
    ServerSignature,
    parse_add_registry,
    parse_create_server,
    parse_create_webhook,
    parse_deploy,
    parse_enroll,
    parse_repin,
    parse_rollback,
)
from berth.core.errors import FieldError, InvalidInput, NotFound
from berth.core.models import User
from berth.core.types import RuleError, check_idempotency_key
from litestar import Request
from litestar.di import Provide

from .errors import BadJson, UnsupportedMediaType
from .inputs import NotJson, decode_json, echo, query_int, query_uuid, single
from .schemas import (
    CreateServerRequest,
    DeployRequest,
    EnrollRequest,
    RegistryRequest,
    RepinRequest,
    RollbackRequest,
    WebhookRequest,
)
from .wire import parse_body

__all__ = [
    "API_INPUTS",
    "DELIVERIES_DEFAULT",
    "EVENT_ID_MAX",
    "PAGE_DEFAULT",
    "PAGE_MAX",
    "TAIL_DEFAULT",
    "TAIL_MAX",
    "WAIT_MAX",
    "Caller",
    "json_body",
    "last_event_id_of",
]

# ?wait (1-WAIT_MAX), ?tail (1-TAIL_MAX, default TAIL_DEFAULT) and ?limit (1-PAGE_MAX):
# the core's commands' limits, read here to document the query parameters.
PAGE_DEFAULT = 20
DELIVERIES_DEFAULT = 50  # ?limit of a webhook's deliveries (1-PAGE_MAX)

Req = Request[Any, Any, Any]
R = TypeVar("R")


class Caller:
    """The message bus, bound to the user ``bearer_auth`` authenticated: ``await
    caller(command)`` is ``bus.handle(command, user)``."""

    __slots__ = ("bus", "user")

    def __init__(self, bus: MessageBus, user: User) -> None:
        self.bus = bus
        self.user = user

    async def __call__(self, command: Command[R]) -> R:
        return await self.bus.handle(command, self.user)


def provide_caller(request: Req, bus: MessageBus) -> Caller:
    """The bus for the authenticated user of this request."""
    user: User = request.scope["user"]
    return Caller(bus, user)


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


def _query_int(
    request: Req, name: str, errors: list[FieldError], high: int, what: str
) -> int | None:
    """``?<name>``: a whole number from 1 to ``high`` given once, or None (errors collected)."""
    return query_int(name, _query(request, name), errors, low=1, high=high, what=what)


def _one_int(request: Req, name: str, high: int, what: str, default: int) -> int:
    """``_query_int`` of a parameter read alone: 422 if it is wrong, ``default`` if absent."""
    errors: list[FieldError] = []
    found = _query_int(request, name, errors, high, what)
    if errors:
        raise InvalidInput(errors)
    return default if found is None else found


def _one_of(request: Req, name: str, values: tuple[str, ...], message: str) -> str | None:
    """``?<name>``, given at most once, as one of ``values`` (or absent); 422 otherwise."""
    errors: list[FieldError] = []
    raw = single(name, _query(request, name), errors)
    if raw is not None and raw not in values:
        errors.append(FieldError(f"query.{name}", message, echo(raw)))
    if errors:
        raise InvalidInput(errors)
    return raw


def _idempotency_key(request: Req, errors: list[FieldError]) -> str | None:
    keys: list[str] = request.headers.getall("idempotency-key", [])
    if len(keys) > 1:
        errors.append(
            FieldError(
                "header.Idempotency-Key", f"Given {len(keys)} times; give it at most once.", None
            )
        )
        return None
    key = keys[0] if keys else None
    if key is not None:
        try:
            check_idempotency_key(key)
        except RuleError as exc:
            errors.append(FieldError("header.Idempotency-Key", str(exc), echo(key)))
            return None
    return key


# Each input provider takes ``caller`` (unused): the dependencies then resolve in a chain,
# one at a time, instead of in a task group per request (Litestar runs a level of two
# or more independent dependencies concurrently, which costs more than they do).


async def provide_deploy(request: Req, caller: Caller) -> DeployCommand:
    """The deploy body, ``?wait`` and ``Idempotency-Key`` as one command; every error at once."""
    return _queueing(
        request,
        await json_body(request),
        DeployRequest,
        lambda body, wait, key: parse_deploy(body, idempotency_key=key, wait=wait),
    )


def _queueing(
    request: Req,
    raw: object,
    struct: type[msgspec.Struct],
    parse: Callable[[object, float, str | None], R],
) -> R:
    """A body that queues a deployment, with ``?wait`` (whole seconds) and
    ``Idempotency-Key``, parsed as one command; every error at once."""
    errors: list[FieldError] = []
    key = _idempotency_key(request, errors)
    wait = float(_query_int(request, "wait", errors, WAIT_MAX, "whole seconds") or 0)
    return parse_body(raw, struct, lambda body: parse(body, wait, key), extra=errors)


async def optional_json_body(request: Req) -> object:
    """The body as JSON, or ``None`` when there is none (no bytes, no content type)."""
    if not request.headers.get("content-type") and not await request.body():
        return None
    return await json_body(request)


async def provide_rollback(request: Req, caller: Caller, installation: UUID) -> Rollback:
    """The optional rollback body, ``?wait`` and ``Idempotency-Key``; every error at once."""
    return _queueing(
        request,
        await optional_json_body(request),
        RollbackRequest,
        lambda body, wait, key: parse_rollback(body, installation, idempotency_key=key, wait=wait),
    )


def provide_wait(request: Req, caller: Caller) -> float:
    """``?wait``: whole seconds, 1-300; 0 when absent."""
    return float(_one_int(request, "wait", WAIT_MAX, "whole seconds", 0))


def provide_page(request: Req, caller: Caller) -> tuple[int, UUID | None]:
    """``?limit`` (1-100, default 20) and ``?before`` (the last deployment id of the
    previous page)."""
    errors: list[FieldError] = []
    limit = _query_int(request, "limit", errors, PAGE_MAX, "an integer")
    before: UUID | None = None
    if _query(request, "before"):
        before = query_uuid("before", _query(request, "before"), errors)
    if errors:
        raise InvalidInput(errors)
    return (PAGE_DEFAULT if limit is None else limit), before


async def provide_new_server(request: Req, caller: Caller) -> CreateServerCommand:
    return parse_body(await json_body(request), CreateServerRequest, parse_create_server)


async def provide_new_registry(request: Req, caller: Caller) -> AddRegistry:
    return parse_body(await json_body(request), RegistryRequest, parse_add_registry)


async def provide_new_webhook(request: Req, caller: Caller) -> CreateWebhook:
    return parse_body(await json_body(request), WebhookRequest, parse_create_webhook)


def provide_delivery_limit(request: Req, caller: Caller) -> int:
    """``?limit``: 1-100 deliveries, default 50."""
    return _one_int(request, "limit", PAGE_MAX, "an integer", DELIVERIES_DEFAULT)


async def provide_repin(request: Req, caller: Caller, server: UUID) -> RepinHostKeys:
    return parse_body(
        await json_body(request), RepinRequest, lambda body: parse_repin(body, server)
    )


async def provide_enrollment(request: Req) -> EnrollCommand:
    return parse_body(await json_body(request), EnrollRequest, parse_enroll)


def _uuid_or_404(value: str, what: str) -> UUID:
    """Path ids that are not UUIDs name nothing: 404, like an unknown id."""
    try:
        return UUID(value)
    except ValueError:
        raise NotFound(f"{what} not found.") from None


# Path ids: named in camelCase on the wire (``{serverId}``), UUIDs in the handler.
def provide_server(serverId: str, caller: Caller) -> UUID:
    return _uuid_or_404(serverId, "Server")


def provide_installation(installationId: str, caller: Caller) -> UUID:
    return _uuid_or_404(installationId, "Installation")


def provide_deployment(deploymentId: str, caller: Caller) -> UUID:
    return _uuid_or_404(deploymentId, "Deployment")


def provide_registry(registryId: str, caller: Caller) -> UUID:
    return _uuid_or_404(registryId, "Registry")


def provide_webhook(webhookId: str, caller: Caller) -> UUID:
    return _uuid_or_404(webhookId, "Webhook")


def provide_listing(request: Req, caller: Caller) -> ListInstallations:
    """``?serverId`` (required, a canonical UUID given once) and ``?include=removed``
    (nothing else is a value): one provider, so the handler's inputs resolve in a row
    (two at one level would cost an anyio task group per request)."""
    errors: list[FieldError] = []
    server_id = query_uuid("serverId", _query(request, "serverId"), errors)
    raw = single("include", _query(request, "include"), errors)
    if raw is not None and raw != "removed":
        errors.append(FieldError("query.include", "The only value is removed.", echo(raw)))
    if errors or server_id is None:
        raise InvalidInput(errors)
    return ListInstallations(server_id=server_id, include_removed=raw == "removed")


def provide_tail(request: Req, caller: Caller) -> int:
    """``?tail``: 1-5000 lines, default 100."""
    return _one_int(request, "tail", TAIL_MAX, "a number of lines", TAIL_DEFAULT)


def provide_follow(request: Req, caller: Caller) -> bool:
    """``?follow``: ``1`` streams the logs, ``0`` (or nothing) does not."""
    return _one_of(request, "follow", ("0", "1"), "Expected 0 or 1.") == "1"


EVENT_ID_MAX = 2**63 - 1  # the event table's BIGINT key


def provide_last_event_id(request: Req, caller: Caller) -> int:
    """``last_event_id_of`` the request, once ``caller`` (its token) is checked."""
    return last_event_id_of(request)


def last_event_id_of(request: Req) -> int:
    """Where an event stream resumes: the ``Last-Event-ID`` header (what an ``EventSource``
    sends when it reconnects) or ``?lastEventId``, an event id; 0 (from the first) when
    neither is given. A value that is not an id is a 422, ``header.Last-Event-ID`` or
    ``query.lastEventId``."""
    errors: list[FieldError] = []
    headers: list[str] = request.headers.getall("last-event-id", [])
    if headers:
        found = query_int(
            "Last-Event-ID", headers, errors, low=1, high=EVENT_ID_MAX, what="an event id"
        )
        errors = [
            FieldError(e.location.replace("query.", "header.", 1), e.message, e.value)
            for e in errors
        ]
    else:
        found = _query_int(request, "lastEventId", errors, EVENT_ID_MAX, "an event id")
    if errors:
        raise InvalidInput(errors)
    return found or 0


def provide_enrollment_token(request: Req) -> str:
    """The enrollment token ``enrollment_auth`` checked."""
    token: str = request.scope["auth"]
    return token


def provide_server_signature(request: Req) -> ServerSignature:
    """The signed request ``server_signature_auth`` checked."""
    signature: ServerSignature = request.scope["auth"]
    return signature


def _provided(dependency: Callable[..., Any]) -> Provide:
    # A sync provider only reads the request: it runs on the event loop, not in a thread.
    sync = not inspect.iscoroutinefunction(dependency)
    return Provide(dependency, sync_to_thread=False if sync else None)


#: The API's request inputs, by the name a handler declares: each ``provide_<name>`` of
#: this module, as ``<name>``.
API_INPUTS: dict[str, Provide] = {
    name.removeprefix("provide_"): _provided(dependency)
    for name, dependency in list(globals().items())
    if name.startswith("provide_") and callable(dependency)
}
