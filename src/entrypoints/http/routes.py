"""The public API (``/api/agent``, version 1) and the public, unauthenticated routes."""

from __future__ import annotations

import re
import time
from types import SimpleNamespace
from typing import Annotated, Any
from uuid import UUID

from berth.core.errors import NotFound
from berth.core.models import User
from litestar import Controller, HttpMethod, MediaType, Request, Response, delete, get, post, route
from litestar._openapi.utils import default_operation_id_creator
from litestar.datastructures import State
from litestar.enums import OpenAPIMediaType
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import Parameter

from ..bootstrap import Services
from .context import context_of
from .errors import TooManyRequests
from .errors import problem_response as _problem
from .hooks import (
    TAIL_DEFAULT,
    TAIL_MAX,
    WAIT_MAX,
    authenticated,
    create_server_body,
    deploy_body,
    install_query,
    logs_query,
)
from .install_script import render_install_script
from .openapi import complete as complete_openapi
from .schemas import (
    ContainerListOut,
    CreatedServerOut,
    CreateServerRequest,
    DeploymentOut,
    DeployOut,
    DeployRequest,
    Health,
    InstallationListOut,
    InstallationOut,
    LogsOut,
    ServerListOut,
    ServerOut,
    container_out,
    deployment_out,
    installation_out,
    installations_out,
    server_out,
)

__all__ = ["AgentApi", "PublicRoutes"]

Req = Request[Any, Any, State]


_AUTH = {
    401: _problem("Missing, malformed, unknown or revoked token."),
    429: _problem("Rate limit reached; see Retry-After."),
}
_READ = {
    **_AUTH,
    400: _problem("The request could not be parsed."),  # replaces Litestar's own 400 schema
    404: _problem("No such resource among yours."),
    422: _problem("Bad parameter."),
}
_WRITE = {
    **_READ,
    400: _problem("The body is not valid JSON."),
    409: _problem("Conflicts with the current state."),
    413: _problem("The body is over 1 MiB."),
    415: _problem("The body is not application/json."),
}


def _uuid_or_404(value: str, what: str) -> UUID:
    """Path ids that are not UUIDs name nothing: 404, like an unknown id."""
    try:
        return UUID(value)
    except ValueError:
        raise NotFound(f"{what} not found.") from None


def _user(request: Req) -> User:
    user: User = request.state.user
    return user


def _base_url(request: Req) -> str:
    configured = context_of(request).settings.base_url
    if configured:
        return configured.rstrip("/")
    netloc = request.url.netloc
    if not _SAFE_NETLOC.match(netloc):  # a hostile Host header never reaches the script
        settings = context_of(request).settings
        netloc = f"{settings.listen_host}:{settings.listen_port}"
    return f"{request.url.scheme}://{netloc}"


_SAFE_NETLOC = re.compile(r"^[A-Za-z0-9.\-]+(?::[0-9]{1,5})?$|^\[[0-9A-Fa-f:.]+\](?::[0-9]{1,5})?$")


class AgentApi(Controller):
    """Everything under ``/api/agent`` that needs ``Authorization: Bearer <token>``."""

    path = "/api/agent"
    tags = ["agent"]
    security = [{"BearerToken": []}]
    before_request = authenticated

    @get("/servers", responses=_AUTH, summary="List your servers")
    async def list_servers(self, request: Req, services: Services) -> ServerListOut:
        servers = await services.list_servers(_user(request))
        return ServerListOut(servers=[server_out(s) for s in servers])

    @post(
        "/servers",
        before_request=create_server_body,
        status_code=201,
        responses=_WRITE,
        summary="Add a server (returns a one-time enrollment token and the install command)",
    )
    async def create_server(
        self, request: Req, services: Services, data: CreateServerRequest
    ) -> Response[CreatedServerOut]:
        created = await services.create_server(_user(request), request.state.command)
        server = server_out(created.server)
        expires = created.server.enrollment_expires_at
        assert expires is not None
        command = (
            f"curl -fsSL {_base_url(request)}/api/deploy"
            f" | sudo sh -s -- --token {created.enrollment_token}"
        )
        body = CreatedServerOut(
            **{f: getattr(server, f) for f in server.__struct_fields__},
            enrollment_token=created.enrollment_token,
            enrollment_expires_at=expires,
            install_command=command,
        )
        return Response(
            body, status_code=201, headers={"Location": f"/api/agent/servers/{server.id}"}
        )

    @get("/servers/{server_id:str}", responses=_READ, summary="One of your servers")
    async def get_server(self, request: Req, services: Services, server_id: str) -> ServerOut:
        server = await services.get_server(_user(request), _uuid_or_404(server_id, "Server"))
        return server_out(server)

    @get(
        "/servers/{server_id:str}/containers",
        responses=_READ,
        summary="Every container on one of your servers",
    )
    async def list_containers(
        self, request: Req, services: Services, server_id: str
    ) -> ContainerListOut:
        result = await services.list_containers(_user(request), _uuid_or_404(server_id, "Server"))
        return ContainerListOut(
            server_id=result.server_id,
            observed_at=result.observed_at,
            server_status=result.server_status.value,
            containers=[container_out(c) for c in result.containers],
        )

    @get(
        "/install",
        before_request=install_query,
        responses=_READ,
        summary="Installations on one of your servers",
    )
    async def list_installations(
        self,
        request: Req,
        services: Services,
        server_id: Annotated[
            str,
            Parameter(query="serverId", description="A server id (UUID), given once."),
        ],
    ) -> InstallationListOut:
        # ``server_id`` documents the parameter; ``install_query`` read and checked it.
        listing = await services.list_installations(_user(request), request.state.server_id)
        return InstallationListOut(
            server_id=listing.server.id,
            installations=installations_out(listing.server, listing.installations),
        )

    @post(
        "/docker/deploy",
        before_request=deploy_body,
        status_code=202,
        responses={
            **_WRITE,
            200: ResponseSpec(
                data_container=DeployOut,
                description="With ?wait: the deployment finished.",
                generate_examples=False,
            ),
        },
        summary="Deploy a Docker application on one of your servers",
    )
    async def deploy(
        self,
        request: Req,
        services: Services,
        data: DeployRequest,
        wait: Annotated[
            int | None,
            Parameter(
                ge=1,
                le=WAIT_MAX,
                description=(
                    "Seconds to wait for a final state: 1-300, in plain digits without a "
                    "leading zero, given once."
                ),
            ),
        ] = None,
        idempotency_key: Annotated[
            str | None,
            Parameter(header="Idempotency-Key", description="Retry-safe key (1-255 chars)."),
        ] = None,
    ) -> Response[DeployOut]:
        # ``wait`` documents the parameter; ``deploy_body`` read and checked it.
        seconds: int | None = request.state.wait
        user = _user(request)
        ctx = context_of(request)
        # Check order (docs/decisions.md): 404 (ownership) before 429 (deploy limit).
        await services.get_server(user, request.state.command.server_id)
        retry_after = ctx.deploys.take(user.id)
        if retry_after:
            raise TooManyRequests(retry_after, "Deploy rate limit reached for this token.")
        result = await services.deploy(user, request.state.command)
        services.notifier.queued()
        deployment = result.deployment
        if seconds:
            deadline = time.monotonic() + seconds
            while not deployment.state.is_final and time.monotonic() < deadline:
                # Woken at once by a worker in this process; polls for workers elsewhere.
                await services.notifier.wait_finished(
                    deployment.id, min(0.5, max(0.0, deadline - time.monotonic()))
                )
                deployment = await services.get_deployment(user, deployment.id)
        server, installation = await services.get_installation(user, deployment.installation_id)
        headers = {"Location": f"/api/agent/deployments/{deployment.id}"}
        if result.replayed:
            headers["Idempotent-Replayed"] = "true"
        return Response(
            DeployOut(
                deployment=deployment_out(deployment),
                installation=installation_out(server, installation),
            ),
            status_code=200 if seconds and deployment.state.is_final else 202,
            headers=headers,
        )

    @get("/deployments/{deployment_id:str}", responses=_READ, summary="A deployment and its log")
    async def get_deployment(
        self, request: Req, services: Services, deployment_id: str
    ) -> DeploymentOut:
        deployment = await services.get_deployment(
            _user(request), _uuid_or_404(deployment_id, "Deployment")
        )
        return deployment_out(deployment)

    @get("/installations/{installation_id:str}", responses=_READ, summary="One installation")
    async def get_installation(
        self, request: Req, services: Services, installation_id: str
    ) -> InstallationOut:
        server, installation = await services.get_installation(
            _user(request), _uuid_or_404(installation_id, "Installation")
        )
        return installation_out(server, installation)

    @delete(
        "/servers/{server_id:str}",
        status_code=204,
        responses={
            **_READ,
            409: _problem("A deployment on it is running, or it is this machine under --local."),
        },
        summary="Forget a server: its record, installations and deployments; its containers run on",
    )
    async def delete_server(self, request: Req, services: Services, server_id: str) -> None:
        await services.delete_server(_user(request), _uuid_or_404(server_id, "Server"))

    @get(
        "/installations/{installation_id:str}/logs",
        before_request=logs_query,
        responses={**_READ, 502: _problem("Docker refused."), 503: _problem("Unreachable.")},
        summary="The last lines of an installation's container output",
    )
    async def installation_logs(
        self,
        request: Req,
        services: Services,
        installation_id: str,
        tail: Annotated[
            int,
            Parameter(
                ge=1,
                le=TAIL_MAX,
                description="Lines: 1-5000, in plain digits without a leading zero, given once.",
            ),
        ] = TAIL_DEFAULT,
    ) -> LogsOut:
        # ``tail`` documents the parameter; ``logs_query`` read and checked it.
        logs = await services.installation_logs(
            _user(request), _uuid_or_404(installation_id, "Installation"), request.state.tail
        )
        return LogsOut(
            installation_id=logs.installation_id, container_id=logs.container_id, lines=logs.lines
        )

    @delete(
        "/installations/{installation_id:str}",
        status_code=204,
        responses={
            **_READ,
            409: _problem("A deployment of it is running."),
            502: _problem("Docker refused."),
            503: _problem("The server is unreachable; nothing was removed."),
        },
        summary="Remove an installation: its containers, then its record",
    )
    async def remove_installation(
        self, request: Req, services: Services, installation_id: str
    ) -> None:
        await services.remove_installation(
            _user(request), _uuid_or_404(installation_id, "Installation")
        )


def _get_or_head_id(handler: Any, method: Any, path_components: list[Any]) -> str:
    """Litestar's operationId, except that the GET of a GET-and-HEAD route keeps the id it
    had as a GET-only route (clients generated from the document keep their names)."""
    if method == HttpMethod.GET:
        handler = SimpleNamespace(handler_name=handler.handler_name, http_methods={method})
    return default_operation_id_creator(handler, method, path_components)


def _get_and_head(path: str, **kwargs: Any) -> route:
    """A GET route that answers HEAD too: the GET's status and headers, without the body."""
    return route(
        path,
        http_method=[HttpMethod.GET, HttpMethod.HEAD],
        operation_id=_get_or_head_id,
        **kwargs,
    )


class PublicRoutes(Controller):
    """Routes without authentication: the install script, the API document, health probes.

    Each answers HEAD as well as GET (docs/decisions.md).
    """

    path = "/"
    tags = ["public"]

    @_get_and_head(
        "/api/deploy",
        media_type="text/x-shellscript",
        summary="The server install script (POSIX sh)",
    )
    async def install_script(self, request: Req) -> Response[str]:
        return Response(
            render_install_script(_base_url(request)),
            media_type="text/x-shellscript",
        )

    @_get_and_head(
        "/api/agent/openapi.json",
        media_type=OpenAPIMediaType.OPENAPI_JSON,
        summary="This document: the OpenAPI 3.1 description of every public endpoint",
    )
    async def openapi_document(self, request: Req) -> dict[str, Any]:
        ctx = context_of(request)
        if ctx.openapi_document is None:  # built once: Litestar's, completed (openapi.py)
            ctx.openapi_document = complete_openapi(request.app.openapi_schema.to_schema())
        return ctx.openapi_document

    @_get_and_head("/healthz", summary="Liveness", media_type=MediaType.JSON)
    async def healthz(self) -> Health:
        return Health(status="ok")

    @_get_and_head(
        "/readyz",
        summary="Readiness: the store answers",
        responses={503: _problem("The store does not answer.")},
    )
    async def readyz(self, services: Services) -> Health:
        async with services.uow() as uow:
            await uow.users.get(UUID(int=0))
        return Health(status="ready")
