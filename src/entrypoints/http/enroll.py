"""The install script's two routes, authenticated by the server's one-time enrollment token.

``POST /api/agent/servers/enroll`` registers the server's SSH host keys and facts (once);
``GET /api/agent/servers/enroll`` tells the script its server's status while it waits for
``online`` (until the token expires). Neither accepts an API token, and an API token's
hook never sees them: the enrollment token grants these two things and nothing else.
"""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

import msgspec
from berth.core.commands import parse_enroll
from berth.core.errors import Unauthorized
from berth.core.models import Server, ServerStatus
from berth.core.types import Port, authorized_keys_line
from berth.core.use_cases.enroll import REFUSED
from litestar import Controller, Request, Response, get, post
from litestar.datastructures import State
from litestar.openapi.spec import SecurityScheme

from ..bootstrap import Services
from .context import context_of
from .errors import TooManyRequests, problem
from .errors import problem_response as _problem
from .hooks import json_body

__all__ = ["ENROLLMENT_SCHEME", "EnrollmentApi", "enrollment_security_scheme"]

Req = Request[Any, Any, State]

#: The OpenAPI security scheme of these routes (the API token's is ``BearerToken``).
ENROLLMENT_SCHEME = "EnrollmentToken"


def enrollment_security_scheme() -> SecurityScheme:
    return SecurityScheme(
        type="http",
        scheme="bearer",
        bearer_format="berth_enroll_<49 base62 characters>",
        description=(
            "The one-time enrollment token of a server (returned by POST /api/agent/servers, "
            "valid for one hour). Only the install script's two enrollment routes accept it."
        ),
    )


class _Wire(msgspec.Struct, rename="camel", kw_only=True):
    pass


_Text = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class EnrollFactsIn(_Wire, forbid_unknown_fields=True):
    """What the server says about itself; every fact is optional (null: unknown)."""

    os: _Text | None = None
    arch: _Text | None = None
    docker_version: _Text | None = None
    cpus: Annotated[int, msgspec.Meta(ge=1)] | None = None
    memory_bytes: Annotated[int, msgspec.Meta(ge=1)] | None = None


class EnrollRequest(_Wire, forbid_unknown_fields=True):
    """The server's SSH host public keys (as in ``/etc/ssh/ssh_host_*_key.pub``; pinned
    before berth first connects), the SSH port berth should connect to (default: the
    server's), and its facts."""

    host_keys: Annotated[list[str], msgspec.Meta(min_length=1, max_length=10)]
    ssh_port: Port | None = None
    facts: EnrollFactsIn | None = None


class EnrolledOut(_Wire):
    """The enrolled server: authorize ``authorizedKeysLine`` for ``sshUser``."""

    server_id: UUID
    ssh_user: str
    public_key: str | None
    authorized_keys_line: str | None
    status: str


class EnrollmentStatusOut(_Wire):
    """Only what the waiting install script needs; nothing else about the server."""

    server_id: UUID
    status: str
    status_detail: str | None


_AUTH = {
    401: _problem("Missing, malformed, unknown or expired enrollment token (or, to enroll, used)."),
    429: _problem("Too many failed attempts from this address, or too many requests."),
}


def _refused(request: Req) -> Response[bytes]:
    return problem(
        401,
        f"{REFUSED} Send `Authorization: Bearer <enrollment token>`; "
        "a new server gets a new token (POST /api/agent/servers).",
        request_id=request.scope.get("state", {}).get("request_id"),
        headers={"WWW-Authenticate": "Bearer"},
    )


async def _enrollment(request: Req, *, to_enroll: bool) -> Server | Response[bytes]:
    """The server of the request's enrollment token (not expired; pending ``to_enroll``),
    or the 401/429 answer. ``EnrollServer`` checks again, atomically: this is so that a
    refusal says why here, not in the API token's words.

    Failures count against the client address, like failed API-token authentications.
    """
    ctx = context_of(request)
    address = request.client.host if request.client else "unknown"
    wait = ctx.auth_failures.exhausted(address)
    if wait:
        raise TooManyRequests(wait, "Too many failed authentications from this address.")
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    try:
        if scheme.lower() != "bearer":
            raise Unauthorized(REFUSED)
        server = await ctx.services.enrollment_status(token.strip())
        if to_enroll and server.status is not ServerStatus.PENDING:
            raise Unauthorized(REFUSED)
    except Unauthorized:
        ctx.auth_failures.take(address)
        return _refused(request)
    wait = ctx.requests.take(("enrollment", server.id))
    if wait:
        raise TooManyRequests(wait, "Request rate limit reached for this enrollment token.")
    request.state.enrollment_token = token.strip()
    return server


async def enroll_body(request: Req) -> Response[bytes] | None:
    """401 before anything else, then the body: 415, 413, 400, and every broken rule (422)."""
    found = await _enrollment(request, to_enroll=True)
    if isinstance(found, Response):
        return found
    request.state.command = parse_enroll(await json_body(request))
    return None


async def enrollment_token(request: Req) -> Response[bytes] | None:
    found = await _enrollment(request, to_enroll=False)
    if isinstance(found, Response):
        return found
    request.state.server = found
    return None


class EnrollmentApi(Controller):
    """The install script's routes; ``Authorization: Bearer <enrollment token>``."""

    path = "/api/agent/servers/enroll"
    tags = ["enrollment"]
    security = [{ENROLLMENT_SCHEME: []}]

    @post(
        "/",
        before_request=enroll_body,
        status_code=200,
        responses={
            **_AUTH,
            400: _problem("The body is not valid JSON."),
            413: _problem("The body is over 1 MiB."),
            415: _problem("The body is not application/json."),
            422: _problem("Bad field(s), all listed."),
        },
        summary="Enroll a server: pin its SSH host keys, record its facts (install script)",
        description=(
            "Once per enrollment token, within its hour: a used or expired token gets 401. "
            "The server keeps the address it was created with; without one, berth uses the "
            "address this request came from. `sshPort` replaces the server's SSH port. "
            "The server is then `offline` until berth first reaches it."
        ),
    )
    async def enroll(self, request: Req, services: Services, data: EnrollRequest) -> EnrolledOut:
        server = await services.enroll_server(
            request.state.enrollment_token,
            request.state.command,
            request.client.host if request.client else None,
        )
        return EnrolledOut(
            server_id=server.id,
            ssh_user=server.ssh_user,
            public_key=server.public_key,
            authorized_keys_line=(
                authorized_keys_line(server.public_key) if server.public_key else None
            ),
            status=server.status.value,
        )

    @get(
        "/",
        before_request=enrollment_token,
        responses=_AUTH,
        summary="The enrolling server's status (install script)",
        description=(
            "Until the enrollment token expires, used or not: the server's id, status "
            "(`pending`, `offline`, `online`) and why it is offline. Nothing else."
        ),
    )
    async def status(self, request: Req) -> EnrollmentStatusOut:
        server: Server = request.state.server
        return EnrollmentStatusOut(
            server_id=server.id, status=server.status.value, status_detail=server.status_detail
        )
