"""One map from exceptions to RFC 9457 problem+json responses, registered once on the
app (``EXCEPTION_HANDLERS``, as litestar-fullstack's ``lib/exceptions.py``). Nothing
else builds errors; internal errors are logged once, with the request id, never shown."""

from __future__ import annotations

import re
from http import HTTPStatus
from typing import Any

import msgspec
import structlog
from berth.core import errors as core
from berth.core.errors import (
    CoreError,
    FieldError,
    InvalidInput,
    RateLimited,
    StoreUnavailable,
    Unauthorized,
)
from berth.core.outages import ThrottledWarning
from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.openapi.datastructures import ResponseSpec
from litestar.types import ExceptionHandlersMap

from .schemas import Problem, ProblemField

__all__ = [
    "EXCEPTION_HANDLERS",
    "KINDS",
    "KIND_DOCS",
    "PROBLEM_JSON",
    "PROBLEM_TYPE",
    "BadJson",
    "UnsupportedMediaType",
    "problem",
    "problem_response",
    "status_of",
]

log = structlog.get_logger()

PROBLEM_JSON = "application/problem+json"

#: A problem's ``type``: one URI per kind, so a client can branch on it.
PROBLEM_TYPE = "urn:berth:problem:{kind}"

Req = Request[Any, Any, Any]


def problem_response(description: str) -> ResponseSpec:
    """An OpenAPI response of problem+json, for a route's ``responses``. No generated
    examples: they are random, so the document would change at every start."""
    return ResponseSpec(
        data_container=Problem,
        media_type=PROBLEM_JSON,
        description=description,
        generate_examples=False,
    )


class UnsupportedMediaType(Exception):
    """The body is not ``application/json`` (or, where the route says, not of its types:
    the message then says which)."""


class BadJson(Exception):
    """The body is not valid JSON."""


_STATUS: dict[type[CoreError], int] = {
    core.InvalidInput: 422,
    core.NotFound: 404,
    core.TooLarge: 413,
    core.Conflict: 409,
    core.Unauthorized: 401,
    core.Forbidden: 403,
    core.RateLimited: 429,
    core.StoreUnavailable: 503,  # berth's own database
    core.ServerUnreachable: 503,
    core.RuntimeFailure: 502,
}


def status_of(exc: CoreError) -> int:
    """The HTTP status of a core error, for the API's problems and the dashboard's pages
    alike: the first of its classes in ``_STATUS``, else 400."""
    return next((s for t, s in _STATUS.items() if isinstance(exc, t)), 400)


#: The kind of a problem that no core error names, by status.
_KINDS = {
    400: "bad-request",
    401: "unauthorized",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    409: "conflict",
    413: "body-too-large",
    415: "unsupported-media-type",
    422: "invalid-input",
    429: "rate-limited",
    500: "internal-error",
    502: "runtime-failure",
    503: "server-unreachable",
}

#: What each kind berth answers with means, and what to do about it: the document's
#: ``Problem.type``.
KIND_DOCS: dict[str, str] = {
    "already-member": "409: you are a member of this team already; the invitation stays unused.",
    "bad-json": "400: the body is not valid JSON; fix its syntax.",
    "bad-request": "400: the request could not be parsed.",
    "body-too-large": "413: the body is over 1 MiB.",
    "conflict": "409: the request clashes with the current state (see detail).",
    "deployment-finished": "409: the deployment already ended; there is nothing to cancel.",
    "deployment-running": "409: a deployment of this installation is running; wait for it "
    "to end (GET its deployment), then retry.",
    "domain-in-use": "409: another installation on this server has this domain (errors: "
    "`body.domain`); choose another domain or remove that installation.",
    "error": "An error with no more specific kind; read detail.",
    "fingerprint-mismatch": "409: the fingerprint you confirmed is not the offered host "
    "key's, or `hostKeys` lack the offered key (errors: `body.fingerprint` or "
    "`body.hostKeys`); check the key on the server (`ssh-keygen -lf`) and send it again.",
    "forbidden": "403: you may not do this.",
    "host-key-mismatch": "409 (deploy) or 503: the server presented an SSH host key other "
    "than the pinned one; re-pin it after checking it (POST /servers/{serverId}/host-keys).",
    "idempotency-key-reused": "409: this Idempotency-Key was used with a different request "
    "(errors: `header.Idempotency-Key`); use a new key for a new request.",
    "installation-removed": "409: the installation was removed; deploy the name again to "
    "start a new one.",
    "insufficient-scope": "403: your role in the team, or your token's scopes or servers, "
    "do not allow this; detail names what is needed. Nothing was done. Ask an owner or "
    "admin of the team for a role, or use a token with that scope.",
    "invitation-for-another-user": "409: the invitation was made for another email "
    "address; sign in as the user it was made for.",
    "last-owner": "409: the team would be left without an owner; make another member owner first.",
    "internal-error": "500: a bug; quote requestId when reporting it.",
    "invalid-input": "422: fields break the rules; errors lists every one (location, message, "
    "value). Fix them all and retry.",
    "method-not-allowed": "405: the path does not take this method; `Allow` lists those it takes.",
    "no-host-key-change": "409: the server offers no new host key to confirm; nothing to re-pin.",
    "not-found": "404: no such route, or no such id among yours (another team's ids, and "
    "for a token limited to servers the other servers, are not found too).",
    "port-in-use": "409: another domain-less installation on this server publishes this "
    "host port, or (on an online server) a container or a process holds it; detail names "
    "it (errors: `body.hostPort`, or `body.port` when no host port was given). Choose another "
    "port, stop what holds it, or give a domain.",
    "rate-limited": "429: too many requests (or deploys, or failed authentications); retry "
    "after `Retry-After` seconds.",
    "registry-exists": "409: you already saved credentials for this registry host; "
    "remove them (DELETE /registries/{registryId}) first to replace them.",
    "registry-limit": "409: you have 100 registries saved; remove one first.",
    "git-credential-exists": "409: your team saved credentials for this Git host already; "
    "remove them (DELETE /git-credentials/{gitCredentialId}) first to replace them.",
    "git-credential-limit": "409: your team saved credentials for 100 Git hosts; remove one first.",
    "not-built-from-git": "409: the app is not built from a Git repository (it was deployed "
    "from an image or an upload), so a push has nothing to deploy; deploy it with build.git "
    "first.",
    "webhook-limit": "409: you have 20 webhooks; delete one first.",
    "revision-unavailable": "409: no revision to roll back to (the target did not succeed, "
    "or there is no earlier one), or no succeeded revision (container) to act on.",
    "runtime-failure": "502: Docker on the server refused the operation (detail quotes it).",
    "server-not-pending": "409: the server has enrolled already (or was added with its host "
    "keys); it needs no install command and no enrollment token.",
    "server-pending": "409: the server has not enrolled yet (errors: `body.serverId`); run "
    "its install command on it, then retry.",
    "response-too-large": "502: the server's Docker answered with more bytes than berth "
    "reads (`BERTH_DOCKER_MAX_BYTES`, 16 MiB by default); detail says which call. For logs, "
    "ask for fewer lines.",
    "server-limit": "409: you have as many servers as one user may add "
    "(`BERTH_SERVERS_PER_USER`, 1000 by default); delete one first.",
    "too-many-streams": "429: as many streams (deployment events, log follows) are open as "
    "allowed, yours (`BERTH_STREAMS_PER_USER`) or this berth's (`BERTH_STREAMS_PER_PROCESS`): "
    "detail says which. Close one, or retry after `Retry-After` seconds.",
    "server-unreachable": "503: the server did not answer over SSH; retry later, or check "
    "that it runs and that berth can reach it.",
    "server-removed": "409: the server's install script uninstalled berth (its key is gone); "
    "add the server again and run its new install command, or delete it.",
    "store-unavailable": "503: berth's database is unavailable; retry after `Retry-After`.",
    "unauthorized": "401: the token is missing, malformed, unknown or revoked (which one is "
    "never said); send `Authorization: Bearer <token>`.",
    "unsupported-media-type": "415: send the body as `application/json`.",
}

#: Every kind berth answers with, for the document (``Problem.type``).
KINDS = sorted(KIND_DOCS)

#: While the database is down every request fails alike: one line per interval, with
#: how many were kept quiet, instead of a traceback per request.
_store_down = ThrottledWarning("store_unavailable")


def problem(
    status: int,
    detail: str,
    *,
    kind: str | None = None,
    errors: list[FieldError] | tuple[FieldError, ...] = (),
    request_id: str | None = None,
    headers: dict[str, str] | None = None,
) -> Response[bytes]:
    """A problem+json response for ``status``; ``kind`` defaults to the status's."""
    body = Problem(
        type=PROBLEM_TYPE.format(kind=kind or _KINDS.get(status, "error")),
        title=HTTPStatus(status).phrase,
        status=status,
        detail=detail,
        errors=[
            ProblemField(location=e.location, message=e.message, value=e.value) for e in errors
        ],
        request_id=request_id,
    )
    return Response(
        content=msgspec.json.encode(body),
        status_code=status,
        media_type=PROBLEM_JSON,
        headers=headers or {},
    )


def _request_id(request: Req) -> str | None:
    found: str | None = request.scope.get("state", {}).get("request_id")
    return found


def _invalid_input(request: Req, exc: InvalidInput) -> Response[bytes]:
    errors = [_on_the_wire(e) for e in exc.errors]
    return problem(422, exc.detail, errors=errors, request_id=_request_id(request))


def _unauthorized(request: Req, exc: Unauthorized) -> Response[bytes]:
    # The API token's refusal never says why; an enrollment token's says what to do.
    detail = "A valid API token is required: Authorization: Bearer <token>."
    return problem(
        401,
        exc.detail if type(exc) is not Unauthorized else detail,
        kind=exc.kind,
        request_id=_request_id(request),
        headers={"WWW-Authenticate": "Bearer"},
    )


def _retry_later(request: Req, exc: RateLimited | StoreUnavailable) -> Response[bytes]:
    """429 or 503, both with ``Retry-After`` (and a token's request limit's 429 with
    its ``RateLimit-Policy`` and ``RateLimit``)."""
    request_id = _request_id(request)
    if isinstance(exc, StoreUnavailable):
        _store_down.warn(path=request.url.path, reason=exc.detail, request_id=request_id)
    more: dict[str, str] = getattr(exc, "headers", {})
    return problem(
        429 if isinstance(exc, RateLimited) else 503,
        exc.detail,
        kind=exc.kind,
        request_id=request_id,
        headers={**more, "Retry-After": str(exc.retry_after)},
    )


def _core_error(request: Req, exc: CoreError) -> Response[bytes]:
    # A conflict caused by one input names it, as a 422 would (``body.port``).
    errors = [FieldError(_location(exc.field), exc.detail, None)] if exc.field else []
    return problem(
        status_of(exc), exc.detail, kind=exc.kind, errors=errors, request_id=_request_id(request)
    )


#: Fields whose keys are the user's (never renamed in a path): ``env.MY_KEY``.
_USER_KEYS = {"env", "args"}


def _camel(path: str) -> str:
    """A core field path as the wire spells it (``ssh_port`` → ``sshPort``,
    ``build.source_id`` → ``build.sourceId``), a user's key after ``env.`` kept as it is."""
    names = path.split(".")
    for i, name in enumerate(names):
        first, *others = name.split("_")
        names[i] = first + "".join(o.capitalize() for o in others)
        if name in _USER_KEYS:
            break
    return ".".join(names)


#: Core fields that are not in the body, by where the request carries them.
_NOT_IN_BODY = {
    "idempotency_key": "header.Idempotency-Key",
    "cursor": "query.cursor",  # a list's page (core.paging)
    "before": "query.before",
}


def _location(field: str) -> str:
    """Where the wire carries a core field: ``body.port``, ``header.Idempotency-Key``."""
    return _NOT_IN_BODY.get(field) or f"body.{_camel(field)}"


#: Where a request carries what: a field error's location starting with one of these is
#: already the wire's; any other is a core path (a use case's check: ``url``).
_WIRE_PLACES = {"body", "query", "header", "path", "request"}


def _on_the_wire(error: FieldError) -> FieldError:
    """``error`` at its API location: a core path (``url``) becomes ``body.url``."""
    if re.split(r"[.\[]", error.location, maxsplit=1)[0] in _WIRE_PLACES:
        return error
    return FieldError(_location(error.location), error.message, error.value)


def _unsupported(request: Req, exc: UnsupportedMediaType) -> Response[bytes]:
    detail = str(exc) or "Send the body as application/json."
    return problem(415, detail, request_id=_request_id(request))


def _bad_json(request: Req, exc: BadJson) -> Response[bytes]:
    detail = f"The body is not valid JSON: {exc}"
    return problem(400, detail, kind="bad-json", request_id=_request_id(request))


def _refused_by_litestar(request: Req, exc: ValidationException) -> Response[bytes]:
    """A parameter Litestar itself refused (``inputs.read_inputs`` reads every declared
    one first, so this is a safety net): each at its source and key, in Litestar's words."""
    items: Any = exc.extra if isinstance(exc.extra, list) else []
    errors = [
        FieldError(f"{getattr(source, 'value', source)}.{i.get('key')}", str(i["message"]), None)
        for i in items
        if isinstance(i, dict) and (source := i.get("source"))
    ] or [FieldError("request", exc.detail or "Invalid request.", None)]
    detail = f"{len(errors)} invalid field(s)."
    return problem(422, detail, errors=errors, request_id=_request_id(request))


def _http_error(request: Req, exc: HTTPException) -> Response[bytes]:
    """Litestar's own refusals (no route, a wrong method, a body over the limit), by status."""
    status = exc.status_code
    detail = exc.detail if status != 500 else "Internal error."
    headers = dict(exc.headers or {})
    if status == 405:
        # The same list, in the same order, as the route's OPTIONS answer.
        allowed = {m.strip() for m in headers.pop("allow", headers.pop("Allow", "")).split(",")}
        headers["Allow"] = ", ".join(sorted(m for m in allowed if m))
    if status == 413:
        detail = "The body is larger than 1 MiB."
    return problem(status, detail, request_id=_request_id(request), headers=headers)


def _internal(request: Req, exc: Exception) -> Response[bytes]:
    request_id = _request_id(request)
    log.exception("unhandled_error", path=request.url.path)
    detail = f"Internal error; quote request id {request_id} when reporting it."
    return problem(500, detail, request_id=request_id)


#: The app's exception handlers: Litestar answers each exception with the handler of its
#: closest class here.
EXCEPTION_HANDLERS: ExceptionHandlersMap = {
    InvalidInput: _invalid_input,
    Unauthorized: _unauthorized,
    RateLimited: _retry_later,
    StoreUnavailable: _retry_later,
    CoreError: _core_error,
    UnsupportedMediaType: _unsupported,
    BadJson: _bad_json,
    ValidationException: _refused_by_litestar,
    HTTPException: _http_error,
    Exception: _internal,
}
