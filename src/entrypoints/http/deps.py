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

from typing import Any, TypeVar
from uuid import UUID

from berth.core.bus import MessageBus
from berth.core.commands import (
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

WAIT_MAX = 300  # ?wait: whole seconds, 1-300
TAIL_MAX = 5000  # ?tail: log lines, 1-5000
TAIL_DEFAULT = 100
PAGE_MAX = 100  # ?limit: deployments per page
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
    raw = await json_body(request)
    errors: list[FieldError] = []
    wait, key = _wait_and_key(request, errors)
    return parse_body(
        raw,
        DeployRequest,
        lambda body: parse_deploy(body, idempotency_key=key, wait=wait),
        extra=errors,
    )


def _wait_and_key(request: Req, errors: list[FieldError]) -> tuple[float, str | None]:
    """``?wait`` (whole seconds) and ``Idempotency-Key``, as a deploy reads them."""
    key = _idempotency_key(request, errors)
    wait = query_int(
        "wait", _query(request, "wait"), errors, low=1, high=WAIT_MAX, what="whole seconds"
    )
    return float(wait or 0), key


async def optional_json_body(request: Req) -> object:
    """The body as JSON, or ``None`` when there is none (no bytes, no content type)."""
    if not request.headers.get("content-type") and not await request.body():
        return None
    return await json_body(request)


async def provide_rollback(request: Req, caller: Caller, installation: UUID) -> Rollback:
    """The optional rollback body, ``?wait`` and ``Idempotency-Key``; every error at once."""
    raw = await optional_json_body(request)
    errors: list[FieldError] = []
    wait, key = _wait_and_key(request, errors)
    return parse_body(
        raw,
        RollbackRequest,
        lambda body: parse_rollback(body, installation, idempotency_key=key, wait=wait),
        extra=errors,
    )


def provide_wait(request: Req, caller: Caller) -> float:
    """``?wait``: whole seconds, 1-300; 0 when absent."""
    errors: list[FieldError] = []
    wait = query_int(
        "wait", _query(request, "wait"), errors, low=1, high=WAIT_MAX, what="whole seconds"
    )
    if errors:
        raise InvalidInput(errors)
    return float(wait or 0)


def provide_page(request: Req, caller: Caller) -> tuple[int, UUID | None]:
    """``?limit`` (1-100, default 20) and ``?before`` (the last deployment id of the
    previous page)."""
    errors: list[FieldError] = []
    limit = query_int(
        "limit", _query(request, "limit"), errors, low=1, high=PAGE_MAX, what="an integer"
    )
    before: UUID | None = None
    if _query(request, "before"):
        before = query_uuid("before", _query(request, "before"), errors)
    if errors:
        raise InvalidInput(errors)
    return (PAGE_DEFAULT if limit is None else limit), before


async def provide_create_server(request: Req, caller: Caller) -> CreateServerCommand:
    return parse_body(await json_body(request), CreateServerRequest, parse_create_server)


async def provide_new_registry(request: Req, caller: Caller) -> AddRegistry:
    return parse_body(await json_body(request), RegistryRequest, parse_add_registry)


async def provide_new_webhook(request: Req, caller: Caller) -> CreateWebhook:
    return parse_body(await json_body(request), WebhookRequest, parse_create_webhook)


def provide_delivery_limit(request: Req, caller: Caller) -> int:
    """``?limit``: 1-100 deliveries, default 50."""
    errors: list[FieldError] = []
    limit = query_int(
        "limit", _query(request, "limit"), errors, low=1, high=PAGE_MAX, what="an integer"
    )
    if errors:
        raise InvalidInput(errors)
    return DELIVERIES_DEFAULT if limit is None else limit


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
    errors: list[FieldError] = []
    tail = query_int(
        "tail", _query(request, "tail"), errors, low=1, high=TAIL_MAX, what="a number of lines"
    )
    if errors:
        raise InvalidInput(errors)
    return TAIL_DEFAULT if tail is None else tail


def provide_follow(request: Req, caller: Caller) -> bool:
    """``?follow``: ``1`` streams the logs, ``0`` (or nothing) does not."""
    errors: list[FieldError] = []
    raw = single("follow", _query(request, "follow"), errors)
    if raw is not None and raw not in ("0", "1"):
        errors.append(FieldError("query.follow", "Expected 0 or 1.", echo(raw)))
    if errors:
        raise InvalidInput(errors)
    return raw == "1"


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
        found = query_int(
            "lastEventId",
            _query(request, "lastEventId"),
            errors,
            low=1,
            high=EVENT_ID_MAX,
            what="an event id",
        )
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


#: The API's request inputs, by the name a handler declares.
API_INPUTS: dict[str, Provide] = {
    "caller": Provide(provide_caller, sync_to_thread=False),
    "deploy": Provide(provide_deploy),
    "new_server": Provide(provide_create_server),
    "new_registry": Provide(provide_new_registry),
    "registry": Provide(provide_registry, sync_to_thread=False),
    "repin": Provide(provide_repin),
    "enrollment": Provide(provide_enrollment),
    "enrollment_token": Provide(provide_enrollment_token, sync_to_thread=False),
    "server_signature": Provide(provide_server_signature, sync_to_thread=False),
    "listing": Provide(provide_listing, sync_to_thread=False),
    "tail": Provide(provide_tail, sync_to_thread=False),
    "server": Provide(provide_server, sync_to_thread=False),
    "installation": Provide(provide_installation, sync_to_thread=False),
    "deployment": Provide(provide_deployment, sync_to_thread=False),
    "rollback": Provide(provide_rollback),
    "wait": Provide(provide_wait, sync_to_thread=False),
    "page": Provide(provide_page, sync_to_thread=False),
    "last_event_id": Provide(provide_last_event_id, sync_to_thread=False),
    "follow": Provide(provide_follow, sync_to_thread=False),
    "new_webhook": Provide(provide_new_webhook),
    "webhook": Provide(provide_webhook, sync_to_thread=False),
    "delivery_limit": Provide(provide_delivery_limit, sync_to_thread=False),
}
