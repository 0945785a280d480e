"""What the API's controllers share: the caller, the error responses their routes
document, and the answer of a queued deployment (a deploy's and a rollback's)."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from berth.core import commands as c
from berth.core.access import Actor
from berth.core.bus import MessageBus
from berth.core.commands import Command
from berth.core.results import DeployResult
from litestar import Request, Response
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec

from ..auth import user_of
from ..errors import problem_response as problem
from ..schemas import DeployOut, deploy_out

__all__ = [
    "AUTH",
    "DOCKER",
    "READ",
    "SERVER_READ",
    "WRITE",
    "Caller",
    "answer",
    "caller_of",
    "queued",
]

R = TypeVar("R")


class Caller:
    """``await caller(command)`` is ``bus.handle(command, actor)`` for the actor the token
    ``auth.bearer_auth`` authenticated acts as; the API router provides it (``caller_of``)
    to every handler that names it, and the dashboard's router for the signed-in visitor."""

    __slots__ = ("bus", "user")

    def __init__(self, bus: MessageBus, user: Actor) -> None:
        self.bus = bus
        self.user = user

    async def __call__(self, command: Command[R]) -> R:
        return await self.bus.handle(command, self.user)


def caller_of(request: Request[Any, Any, Any], bus: NamedDependency[MessageBus]) -> Caller:
    """The bus for the authenticated user of this request."""
    return Caller(bus, user_of(request.scope))


AUTH = {
    401: problem("Missing, malformed, unknown or revoked token."),
    403: problem(
        "Your role in the team, or the token's scopes or servers, do not allow this "
        "(insufficient-scope): `detail` names what is needed; nothing was done."
    ),
    429: problem("Rate limit reached; see Retry-After."),
}
READ = {
    **AUTH,
    400: problem("The request could not be parsed."),
    404: problem("No such resource among yours."),
    422: problem(
        "A parameter or field breaks its rules (invalid-input): `errors` names every one "
        "(`query.<name>`, `header.<name>`, `body.<field>`) with a message and the value seen."
    ),
}
WRITE = {
    **READ,
    400: problem("The body is not valid JSON."),
    409: problem("Another request changed the same record at the same moment (conflict); retry."),
    413: problem("The body is over 1 MiB."),
    415: problem("The body is not application/json."),
}
#: A read that asks the server itself: a server that has not enrolled has nothing to ask.
SERVER_READ = {
    **READ,
    409: problem("The server has not enrolled yet (server-pending): run its install command."),
}
DOCKER = {**SERVER_READ, 502: problem("Docker refused."), 503: problem("Unreachable.")}


def answer(data: type[msgspec.Struct], description: str) -> ResponseSpec:
    """A success answer besides the route's own status (no generated examples: they are
    random, so the document would change at every start)."""
    return ResponseSpec(data_container=data, description=description, generate_examples=False)


async def queued(caller: Caller, result: DeployResult, wait: int | None) -> Response[DeployOut]:
    """A queued deployment (a deploy's or a rollback's) as the API answers it: ``202``
    (``200`` once ``?wait`` saw it end) with its ``Location``."""
    deployment = result.deployment
    server = result.server
    if server is None:  # the flow reads it; a bus of other handlers may not
        server = await caller(c.GetServer(server_id=deployment.server_id))
    headers = {"Location": f"/api/agent/deployments/{deployment.id}"}
    if result.replayed:
        headers["Idempotent-Replayed"] = "true"
    return Response(
        deploy_out(server, result),
        status_code=200 if wait and deployment.state.is_final else 202,
        headers=headers,
    )
