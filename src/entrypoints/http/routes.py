"""The public API (``/api/agent``, version 1) and the public, unauthenticated routes.

Each handler is *inputs → ``caller(command)`` (the bus, bound to the authenticated
user) → wire body*: its signature names every input (provided by ``deps.py``,
authenticated by ``auth.py``), and no flow is written here that another entrypoint
would repeat.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any
from uuid import UUID

import msgspec
from berth.core import commands as c
from berth.core.bus import MessageBus
from berth.core.errors import StoreUnavailable
from berth.core.results import CreatedServer, DeployResult
from litestar import Controller, HttpMethod, MediaType, Request, Response, delete, get, post, route
from litestar.enums import OpenAPIMediaType
from litestar.handlers import HTTPRouteHandler
from litestar.openapi.datastructures import ResponseSpec
from litestar.response import ServerSentEvent, Stream

from ..install import install_command, render_install_script
from ..settings import Settings
from .deps import (
    DELIVERIES_DEFAULT,
    EVENT_ID_MAX,
    PAGE_DEFAULT,
    PAGE_MAX,
    TAIL_DEFAULT,
    TAIL_MAX,
    WAIT_MAX,
    Caller,
)
from .errors import problem_response as _problem
from .events import event_stream, log_stream
from .openapi import API_SCHEME, Parameter, complete, declared_inputs, documented
from .schemas import (
    ContainerListOut,
    CreatedServerOut,
    CreateServerRequest,
    DeploymentListOut,
    DeploymentOut,
    DeployOut,
    DeployRequest,
    Health,
    InstallationListOut,
    InstallationOut,
    InstallationStatsOut,
    ListingResponse,
    LogsOut,
    Readiness,
    RegistryListOut,
    RegistryOut,
    RegistryRequest,
    RepinRequest,
    RollbackRequest,
    ServerDiskOut,
    ServerListOut,
    ServerOut,
    WebhookCreatedOut,
    WebhookDeliveryListOut,
    WebhookListOut,
    WebhookRequest,
    container_out,
    delivery_out,
    deployment_out,
    installation_list_out,
    installation_out,
    installation_stats_out,
    registry_out,
    server_disk_out,
    server_out,
    webhook_out,
)
from .urls import base_url

__all__ = ["AgentApi", "PublicRoutes"]

Req = Request[Any, Any, Any]

_AUTH = {
    401: _problem("Missing, malformed, unknown or revoked token."),
    429: _problem("Rate limit reached; see Retry-After."),
}
_READ = {
    **_AUTH,
    400: _problem("The request could not be parsed."),
    404: _problem("No such resource among yours."),
    422: _problem(
        "A parameter or field breaks its rules (invalid-input): `errors` names every one "
        "(`query.<name>`, `header.<name>`, `body.<field>`) with a message and the value seen."
    ),
}
_WRITE = {
    **_READ,
    400: _problem("The body is not valid JSON."),
    409: _problem("Another request changed the same record at the same moment (conflict); retry."),
    413: _problem("The body is over 1 MiB."),
    415: _problem("The body is not application/json."),
}

_DOCKER = {**_READ, 502: _problem("Docker refused."), 503: _problem("Unreachable.")}


def _whole(
    name: str, description: str, high: int, default: int | None = None, *, where: str = "query"
) -> Parameter:
    """A whole number from 1 to ``high`` (``deps.py`` reads it: ``query_int``)."""
    schema: dict[str, Any] = {"type": "integer", "minimum": 1, "maximum": high}
    if default is not None:
        schema["default"] = default
    return Parameter(name, where, description, schema)


_DIGITS = "in plain digits without a leading zero, given once."
_UUID = {"type": "string", "format": "uuid"}

_WAIT = _whole("wait", f"Seconds to wait for a final state: 1-{WAIT_MAX}, {_DIGITS}", WAIT_MAX)
_IDEMPOTENCY_KEY = Parameter(
    "Idempotency-Key",
    "header",
    "Retry-safe key, 1-255 printable ASCII characters without spaces (a UUID does): a "
    "retried request with the same key and body returns the first request's deployment "
    "instead of deploying twice; the same key with another body is a 409.",
    {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]+$"},
)
_SERVER_ID = Parameter("serverId", "query", "A server id (UUID), given once.", _UUID, required=True)
_TAIL = _whole("tail", f"Lines: 1-{TAIL_MAX}, {_DIGITS}", TAIL_MAX, TAIL_DEFAULT)

_LAST_EVENT_ID = _whole(
    "Last-Event-ID",
    "Resume after this event id (an `EventSource` sends it when it reconnects).",
    EVENT_ID_MAX,
    where="header",
)
_LAST_EVENT_ID_QUERY = _whole(
    "lastEventId",
    "Resume after this event id, as `Last-Event-ID` (the header wins when both are given).",
    EVENT_ID_MAX,
)
_FOLLOW = Parameter(
    "follow",
    "query",
    "`1`: stream the output live (`text/plain`) until the container stops.",
    {"type": "integer", "enum": [0, 1]},
)

#: Seconds a cancel of a running deployment waits for it to end, unless ``?wait`` says.
CANCEL_WAIT = 15.0

_INCLUDE = Parameter(
    "include",
    "query",
    "`removed` lists removed installations too (their history is kept).",
    {"type": "string", "enum": ["removed"]},
)
_LIMIT = _whole("limit", f"Deployments per page: 1-{PAGE_MAX}, {_DIGITS}", PAGE_MAX, PAGE_DEFAULT)
_BEFORE = Parameter(
    "before",
    "query",
    "The previous page's `nextBefore`: only deployments older than that one.",
    _UUID,
)
_DELIVERY_LIMIT = _whole(
    "limit",
    f"Deliveries: 1-{PAGE_MAX} (default {DELIVERIES_DEFAULT}), newest first; {_DIGITS}",
    PAGE_MAX,
    DELIVERIES_DEFAULT,
)


def _answer(data: type[msgspec.Struct], description: str) -> ResponseSpec:
    """A success answer besides the route's own status (no generated examples: they are
    random, so the document would change at every start)."""
    return ResponseSpec(data_container=data, description=description, generate_examples=False)


def _queueing(body: type[msgspec.Struct], ended: str) -> dict[str, Any]:
    """What a route that queues a deployment (a deploy, a rollback) declares: ``202``, or
    ``200`` once ``?wait`` saw it end (``ended`` says so); its ``body``, ``?wait`` and
    ``Idempotency-Key``."""
    return {
        "status_code": 202,
        "responses": {**_WRITE, 200: _answer(DeployOut, ended)},
        "body": body,
        "query": (_WAIT,),
        "headers": (_IDEMPOTENCY_KEY,),
    }


_DEPLOY_ENDED = (
    "With `?wait`: the deployment reached a final state within the wait (`deployment.state` "
    "says which: `succeeded` means the app answered on its port)."
)
_ROLLBACK_ENDED = (
    "With `?wait`: the rollback reached a final state within the wait (`deployment.state` "
    "says which)."
)
_CHANGE = {
    **_READ,
    409: _problem(
        "Refused, nothing changed; `type` says why: `deployment-running` (a deployment of it "
        "is queued or running: wait for it), `installation-removed`, or "
        "`revision-unavailable` (no succeeded revision, so no container, to act on)."
    ),
    502: _problem("Docker refused."),
    503: _problem("The server is unreachable."),
}


def _lifecycle(action: c.InstallationAction, summary: str, description: str) -> Any:
    """The route ``POST /installations/{installationId}/<action>``: stop, start or restart."""

    @documented(
        post,
        f"/installations/{{installationId:str}}/{action.value}",
        f"{action.value}Installation",
        status_code=200,
        responses=_CHANGE,
        summary=summary,
        description=description + " Recorded as an event of that revision.",
        response_description="The installation.",
    )
    async def change(self: Any, caller: Caller, installation: UUID) -> InstallationOut:
        server, found = await caller(
            c.ChangeInstallation(installation_id=installation, action=action)
        )
        return installation_out(server, found)

    return change


class AgentApi(Controller):
    """Everything under ``/api/agent`` that needs ``Authorization: Bearer <token>``
    (``auth.bearer_auth``, mounted on this controller's router)."""

    path = "/"
    tags = ["agent"]
    security = [{API_SCHEME: []}]

    @documented(get, "/servers", "listServers", responses=_AUTH)
    async def list_servers(self, caller: Caller) -> ServerListOut:
        """List your servers

        Every server of the token's user, with its status (`pending` until its install
        script enrolls it, then `online` or `offline`; `host_key_mismatch` when it offered
        an SSH host key other than the pinned ones: see `offeredHostKeyFingerprint` and POST
        /api/agent/servers/{serverId}/host-keys) and facts.

        Returns:
            Your servers.
        """
        servers = await caller(c.ListServers())
        return ServerListOut(servers=[server_out(s) for s in servers])

    @documented(post, "/servers", "createServer", responses=_WRITE, body=CreateServerRequest)
    async def create_server(
        self,
        request: Req,
        caller: Caller,
        settings: Settings,
        new_server: c.CreateServerCommand,
    ) -> Response[CreatedServerOut]:
        """Add a server (returns a one-time enrollment token and the install command)

        Creates a `pending` server. Run `installCommand` on it, as root or as a user with
        sudo (it carries the enrollment token, valid once, for one hour, in the script's
        environment, and `--ssh-port` when `sshPort` is not 22); or give `hostKeys` with an
        `address` and it is reachable at once. `sshPort` is the port berth connects to
        (default 22).

        Returns:
            The new server, its enrollment token and its install command.

        Raises:
            409: You have as many servers as one user may add (`server-limit`): delete one
                first.
        """
        body = _created_out(request, settings, await caller(new_server))
        return Response(
            body, status_code=201, headers={"Location": f"/api/agent/servers/{body.id}"}
        )

    @documented(
        post,
        "/servers/{serverId:str}/enrollment-token",
        "newEnrollmentToken",
        status_code=200,
        responses=_READ,
    )
    async def new_enrollment_token(
        self, request: Req, caller: Caller, settings: Settings, server: UUID
    ) -> CreatedServerOut:
        """A new install command for a pending server

        For a server still `pending` (its install script has not enrolled it): issues a new
        one-time enrollment token, valid once, for one hour, and its install command, as
        POST /api/agent/servers does. The server's previous enrollment token stops working
        at once. No body. A server that is not `pending` is a 409 `server-not-pending`, and
        nothing changes.

        Returns:
            The server, its new enrollment token and its install command.

        Raises:
            409: The server has enrolled already, or was added with its host keys
                (server-not-pending): it needs no install command.
        """
        return _created_out(request, settings, await caller(c.NewEnrollmentToken(server_id=server)))

    @documented(get, "/servers/{serverId:str}", "getServer", responses=_READ)
    async def get_server(self, caller: Caller, server: UUID) -> ServerOut:
        """One of your servers

        A server of yours by id; another user's server is a 404, like a missing one.

        Returns:
            The server.
        """
        return server_out(await caller(c.GetServer(server_id=server)))

    @documented(
        post,
        "/servers/{serverId:str}/host-keys",
        "repinHostKeys",
        status_code=200,
        responses=_WRITE,
        body=RepinRequest,
    )
    async def repin_host_keys(self, caller: Caller, repin: c.RepinHostKeys) -> ServerOut:
        """Re-pin a server's SSH host keys after a legitimate change

        For a server in status `host_key_mismatch` (it offered an SSH host key other than
        the pinned ones, so berth does not connect and refuses deploys): `hostKeys` replace
        every pinned key and must include the key it offered (`offeredHostKey`, else 409
        `fingerprint-mismatch` naming `body.hostKeys`); `fingerprint` is that key's SHA-256
        fingerprint as you checked it on the server (`ssh-keygen -lf
        /etc/ssh/ssh_host_ed25519_key.pub`) and must equal `offeredHostKeyFingerprint` (else
        409 `fingerprint-mismatch`). A server not in `host_key_mismatch` is a 409
        `no-host-key-change`. The server then goes `offline` and berth reconnects with the
        new keys at its next check.

        Returns:
            The server, `offline` with its new pinned keys.

        Raises:
            409: The server has not offered a new host key (`no-host-key-change`), or
                `fingerprint` is not the offered key's, or `hostKeys` lack it
                (`fingerprint-mismatch`, naming `body.fingerprint` or `body.hostKeys`).
        """
        return server_out(await caller(repin))

    @documented(get, "/servers/{serverId:str}/containers", "listContainers", responses=_READ)
    async def list_containers(self, caller: Caller, server: UUID) -> ContainerListOut:
        """Every container on one of your servers

        Live from the server when it answers; otherwise the last list seen, with
        `observedAt` and `serverStatus: offline`. Includes containers berth does not manage
        (`installationId: null`).

        Returns:
            The server's containers.
        """
        result = await caller(c.ListContainers(server_id=server))
        return ContainerListOut(
            server_id=result.server_id,
            observed_at=result.observed_at,
            server_status=result.server_status,
            containers=[container_out(x) for x in result.containers],
        )

    @documented(get, "/servers/{serverId:str}/disk", "getServerDiskUsage", responses=_DOCKER)
    async def server_disk(self, caller: Caller, server: UUID) -> ServerDiskOut:
        """What Docker keeps on one of your servers' disk

        Asked now of the server's Docker Engine (its `/system/df`, as `docker system df`):
        images (shared layers counted once), containers' writable layers, volumes and the
        build cache, in bytes. Can take a few seconds on a server with many images. An
        unreachable server is a 503.

        Returns:
            The server's Docker disk usage.
        """
        return server_disk_out(await caller(c.GetServerDiskUsage(server_id=server)))

    @documented(
        get,
        "/install",
        "listInstallations",
        responses=_READ,
        query=(_SERVER_ID, _INCLUDE),
        response_class=ListingResponse,
    )
    async def list_installations(
        self, caller: Caller, listing: c.ListInstallations
    ) -> InstallationListOut:
        """Installations on one of your servers

        The apps berth manages on the server `serverId`, each with its status and its last
        deployment. Env values are never returned, only `envKeys`. Removed installations are
        left out unless `include=removed`.

        Returns:
            The server's installations.
        """
        found = await caller(listing)
        return installation_list_out(found.server, found.installations)

    @documented(post, "/docker/deploy", "deploy", **_queueing(DeployRequest, _DEPLOY_ENDED))
    async def deploy(self, caller: Caller, deploy: c.DeployCommand) -> Response[DeployOut]:
        """Deploy a Docker application on one of your servers

        Queues a deployment of `image` as the app `name` (a name that exists on the server
        redeploys it). Without a domain the container port is also the published host port;
        with one, Caddy routes the domain to it over HTTPS. `?wait=N` waits up to N seconds
        for a final state; `Idempotency-Key` makes a retry return the first deployment.
        Follow it at the `Location` URL.

        Returns:
            Accepted: the deployment is queued (state `queued`), or still running when
            `?wait` ended. The body is the deployment and its installation; poll `Location`
            (GET /api/agent/deployments/{deploymentId}) or stream its events until `state`
            is final. A queued deployment of the same app is superseded (canceled).

        Raises:
            409: Refused, nothing written; `type` says why: `port-in-use` (another
                domain-less installation on the server publishes this host port, or, on an
                `online` server, a container or process holds it: checked by a TCP connect
                over the server's transport, and named in `detail`; errors: `body.port`),
                `domain-in-use` (`body.domain`), `deployment-running` (a
                deployment of this app is running: wait for it), `server-pending` (the
                server has not enrolled: `body.serverId`), `host-key-mismatch` (the server's
                host key changed: `body.serverId`), `idempotency-key-reused` (the key was
                used with another body: `header.Idempotency-Key`).
        """
        return await _queued(caller, await caller(deploy), deploy.wait)

    @documented(get, "/deployments/{deploymentId:str}", "getDeployment", responses=_READ)
    async def get_deployment(self, caller: Caller, deployment: UUID) -> DeploymentOut:
        """A deployment and its log

        Its `state` (`queued`, `running`, then one of `succeeded`, `failed`, `timed_out`,
        `canceled`), its current `step` and its `events`, oldest first.

        Returns:
            The deployment.
        """
        return deployment_out(await caller(c.GetDeployment(deployment_id=deployment)))

    @documented(
        get,
        "/deployments/{deploymentId:str}/events",
        "streamDeploymentEvents",
        responses=_READ,
        media_type="text/event-stream",
        query=(_LAST_EVENT_ID_QUERY,),
        headers=(_LAST_EVENT_ID,),
    )
    async def deployment_events(
        self, request: Req, caller: Caller, deployment: UUID, last_event_id: int
    ) -> ServerSentEvent:
        """A deployment's events as a live stream (Server-Sent Events)

        `text/event-stream`: the deployment's past events, then its live ones as they are
        written, then an `end` message with its final state, and the stream closes. Each
        event is a message `id: <event id>`, `event: step`, `data: {"at","step","message"}`
        (JSON). The `end` message is `event: end`, `data: {"state"}`. A comment (`:
        keep-alive`) is sent after 15 s without an event. `Last-Event-ID` (sent by an
        `EventSource` when it reconnects) or `?lastEventId` resumes after that event. A
        finished deployment's stream replays its events and ends at once. A stream ends
        within 5 s of its token's revocation.

        Returns:
            The stream of the deployment's events.

        Raises:
            429: As many streams are open as allowed, yours or this berth's
                (`too-many-streams`, detail names the limit): close one, or retry later.
        """
        feed = await caller(c.FollowDeployment(deployment_id=deployment, after=last_event_id))
        return event_stream(request, feed)

    @documented(get, "/installations/{installationId:str}", "getInstallation", responses=_READ)
    async def get_installation(self, caller: Caller, installation: UUID) -> InstallationOut:
        """One installation

        An app of yours by id, with its status, URL and last deployment.

        Returns:
            The installation.
        """
        server, found = await caller(c.GetInstallation(installation_id=installation))
        return installation_out(server, found)

    @documented(delete, "/servers/{serverId:str}", "deleteServer", responses=_READ)
    async def delete_server(self, caller: Caller, server: UUID) -> None:
        """Forget a server: its record, installations and deployments; its containers run on

        Nothing on the server is touched. Refused (409) while a deployment on it runs, and
        for this machine under `berth serve --local`.

        Returns:
            Forgotten: the server, its installations and deployments are gone from berth;
            nothing on the server was touched.

        Raises:
            409: Refused, nothing forgotten (conflict): a deployment on the server is
                running (wait for it), or it is this machine under `berth serve --local`.
        """
        await caller(c.DeleteServer(server_id=server))

    @documented(
        get,
        "/installations/{installationId:str}/logs",
        "getInstallationLogs",
        responses=_DOCKER,
        query=(_TAIL, _FOLLOW),
    )
    async def installation_logs(
        self, request: Req, caller: Caller, installation: UUID, tail: int, follow: bool
    ) -> LogsOut | Stream:
        """The last lines of an installation's container output

        `tail` lines (default 100) of the app's container, with env values redacted. With
        `follow=1`, the output as a live stream instead (`text/plain`, one line each,
        UTF-8): the last `tail` lines, then each new line as the container writes it, until
        the container stops or is replaced (the stream then ends); env values redacted line
        by line. An installation without a container, or removed, streams nothing and ends.
        A stream ends within 5 s of its token's revocation.

        Returns:
            The container's last lines (with `follow=1`: a text stream).

        Raises:
            429: With `follow=1`: as many streams are open as allowed, yours or this
                berth's (`too-many-streams`, detail names the limit).
        """
        if follow:
            stream = await caller(c.FollowInstallationLogs(installation_id=installation, tail=tail))
            return log_stream(request, stream)
        logs = await caller(c.InstallationLogs(installation_id=installation, tail=tail))
        return LogsOut(
            installation_id=logs.installation_id, container_id=logs.container_id, lines=logs.lines
        )

    @documented(
        get, "/installations/{installationId:str}/stats", "getInstallationStats", responses=_DOCKER
    )
    async def installation_stats(self, caller: Caller, installation: UUID) -> InstallationStatsOut:
        """CPU and memory of an installation's container, sampled now

        One sample from the server's Docker Engine (as `docker stats --no-stream`; it takes
        about a second): CPU in percent of one CPU, memory without the page cache, and the
        memory limit. The installation's running container, else its newest; `containerId`
        and `stats` are null when it has none (never deployed, or removed), and the figures
        null when it is not running. An unreachable server is a 503.

        Returns:
            The installation's container and what it uses.
        """
        result = await caller(c.GetInstallationStats(installation_id=installation))
        return installation_stats_out(result)

    @documented(
        delete, "/installations/{installationId:str}", "removeInstallation", responses=_READ
    )
    async def remove_installation(self, caller: Caller, installation: UUID) -> None:
        """Remove an installation: its containers and route; its history stays

        Stops and removes its containers and its route; volumes on the server stay. The
        installation is marked `removed`: its deployments stay readable, lists leave it out
        unless `include=removed`, and deploying the name again starts a new installation. A
        queued deployment of it is canceled; a running one is canceled first (the previous
        revision put back) and waited for, up to a minute, then the app is removed (409 if
        it has not ended by then); nothing is removed while the server cannot be reached
        (503).

        Returns:
            Removed: its containers and route are gone, its status is `removed`, its
            deployments stay readable.

        Raises:
            409: Not removed (deployment-running): a deployment of it was still running a
                minute after its cancel; retry once it ended.
            502: Docker refused.
            503: The server is unreachable; nothing was removed.
        """
        await caller(c.RemoveInstallation(installation_id=installation))

    @documented(
        get,
        "/installations/{installationId:str}/deployments",
        "listInstallationDeployments",
        responses=_READ,
        query=(_LIMIT, _BEFORE),
    )
    async def list_revisions(
        self, caller: Caller, installation: UUID, page: tuple[int, UUID | None]
    ) -> DeploymentListOut:
        """An installation's deployments (its revisions), newest first

        Every deployment of the installation, newest first, a page at a time: `limit` per
        page (1-100, default 20), and `before` = the previous page's `nextBefore`. Kept
        after the installation is removed. A succeeded one is a revision you can roll back
        to.

        Returns:
            A page of deployments; `nextBefore` is null on the last page.
        """
        limit, before = page
        found = await caller(
            c.ListRevisions(installation_id=installation, limit=limit, before=before)
        )
        return DeploymentListOut(
            installation_id=found.installation_id,
            deployments=[deployment_out(d) for d in found.deployments],
            next_before=found.next_before,
        )

    @documented(
        post,
        "/installations/{installationId:str}/rollback",
        "rollback",
        **_queueing(RollbackRequest, _ROLLBACK_ENDED),
    )
    async def rollback(self, caller: Caller, rollback: c.Rollback) -> Response[DeployOut]:
        """Roll an installation back to an earlier revision

        Queues a new deployment of an earlier succeeded revision: its spec, its env and the
        very image it ran (`imageId`). The body is optional: `deploymentId` names the
        revision (a succeeded deployment of this installation); without it, the revision
        before the current one. `?wait` and `Idempotency-Key` as for a deploy.

        Returns:
            Accepted: the rollback is queued as a new deployment (`rollbackOf` names the
            revision), or still running when `?wait` ended; the body is it and its
            installation. Poll `Location` until `state` is final.

        Raises:
            409: Refused, nothing written; `type` says why: `revision-unavailable` (the
                target did not succeed: `body.deploymentId`; or there is no earlier
                revision), `deployment-running` (wait for it), `installation-removed`,
                `server-pending` or `host-key-mismatch` (the server cannot take deploys),
                `idempotency-key-reused` (`header.Idempotency-Key`).
        """
        return await _queued(caller, await caller(rollback), rollback.wait)

    @documented(
        post,
        "/deployments/{deploymentId:str}/cancel",
        "cancelDeployment",
        status_code=200,
        responses={
            **_READ,
            202: _answer(
                DeploymentOut,
                "Accepted: the cancel is recorded but the deployment was still running when "
                "the wait ended; its worker stops it shortly and puts the previous revision "
                "back. Poll `Location` until `state` is `canceled`.",
            ),
        },
        description="A queued deployment ends `canceled` at once. A running one is stopped "
        "where it is and the previous revision is put back; the call waits for that, up to "
        f"`wait` seconds (default {CANCEL_WAIT:g}), and answers `200` once it ended "
        "`canceled` (or `202` if it still runs). A deployment that already ended is a 409.",
        query=(_WAIT,),
    )
    async def cancel_deployment(
        self, caller: Caller, deployment: UUID, wait: float
    ) -> Response[DeploymentOut]:
        """Cancel a queued or running deployment

        Returns:
            The deployment, canceled.

        Raises:
            409: Nothing to cancel (deployment-finished): the deployment already ended; its
                `state` is final.
        """
        found = await caller(c.CancelDeployment(deployment_id=deployment, wait=wait or CANCEL_WAIT))
        return Response(
            deployment_out(found),
            status_code=200 if found.state.is_final else 202,
            headers={"Location": f"/api/agent/deployments/{found.id}"},
        )

    @documented(get, "/registries", "listRegistries", responses=_AUTH)
    async def list_registries(self, caller: Caller) -> RegistryListOut:
        """List your private registries

        The registries you saved credentials for, by host: `host`, `username` and when it
        was added. A password is never returned.

        Returns:
            Your registries.
        """
        found = await caller(c.ListRegistries())
        return RegistryListOut(registries=[registry_out(r) for r in found])

    @documented(post, "/registries", "addRegistry", responses=_WRITE, body=RegistryRequest)
    async def add_registry(self, caller: Caller, new_registry: c.AddRegistry) -> RegistryOut:
        """Save credentials for a private registry

        A deploy of an image whose registry is `host` (the image reference's first
        component, when it has a `.` or a `:` or is `localhost`, as Docker reads it) pulls
        with these credentials (Docker's `X-Registry-Auth`), over SSH and local alike.
        `host` is `hostname[:port]` with no scheme, path or whitespace, stored lowercased
        (`index.docker.io` is `docker.io`); one entry per host per user. `password` is a
        password or an access token: sealed at rest, never returned, never logged.

        Returns:
            The saved registry (never its password).

        Raises:
            409: You already have credentials for this host (`registry-exists`: remove them
                first to replace them), or you have 100 registries (`registry-limit`).
        """
        return registry_out(await caller(new_registry))

    @documented(delete, "/registries/{registryId:str}", "removeRegistry", responses=_READ)
    async def remove_registry(self, caller: Caller, registry: UUID) -> None:
        """Forget a private registry's credentials

        Deploys of images from its host pull without credentials from then on (a deployment
        already claimed by a worker keeps the ones it read). Another user's registry is a
        404, like a missing one.

        Returns:
            Forgotten: deploys from that host pull without credentials.
        """
        await caller(c.RemoveRegistry(registry_id=registry))

    @documented(post, "/webhooks", "createWebhook", responses=_WRITE, body=WebhookRequest)
    async def create_webhook(
        self, caller: Caller, new_webhook: c.CreateWebhook
    ) -> Response[WebhookCreatedOut]:
        """Add a webhook (returns its signing secret, once)

        berth POSTs each of `events` (of your deployments and servers) to `url`. Each
        delivery is a POST of JSON `{"type", "timestamp", "data"}` with the Standard
        Webhooks headers `webhook-id` (the same on every retry: deduplicate on it),
        `webhook-timestamp` (Unix seconds of the attempt) and `webhook-signature` = `v1,` +
        base64(HMAC-SHA256(base64-decoded secret after `whsec_`,
        `{webhook-id}.{webhook-timestamp}.{body}`)). A 2xx answer within the timeout (10 s
        by default) delivers it; anything else (a redirect too: they are not followed) is
        retried with exponential backoff and jitter, by default up to 8 attempts over a few
        hours. The secret is generated by berth, returned only in this answer and stored
        sealed, as is the URL (lists show only its scheme, host and port). The URL's host
        must resolve to public IP addresses only, checked now and on every delivery. At
        most 20 webhooks per user.

        Returns:
            The webhook and its secret (`whsec_…`): keep it, it is not shown again.

        Raises:
            409: You have 20 webhooks already (webhook-limit): delete one first.
            422: A field breaks the rules, or the URL's host is (or resolves to) an inside
                address: loopback, private, link-local… (errors: `body.url`).
        """
        created = await caller(new_webhook)
        out = webhook_out(created.webhook)
        body = WebhookCreatedOut(
            **{f: getattr(out, f) for f in out.__struct_fields__}, secret=created.secret
        )
        return Response(
            body,
            headers={"Location": f"/api/agent/webhooks/{out.id}/deliveries"},
        )

    @documented(get, "/webhooks", "listWebhooks", responses=_AUTH)
    async def list_webhooks(self, caller: Caller) -> WebhookListOut:
        """List your webhooks

        Every webhook of the token's user, oldest first; secrets are never returned.

        Returns:
            Your webhooks.
        """
        return WebhookListOut(webhooks=[webhook_out(w) for w in await caller(c.ListWebhooks())])

    @documented(delete, "/webhooks/{webhookId:str}", "deleteWebhook", responses=_READ)
    async def delete_webhook(self, caller: Caller, webhook: UUID) -> None:
        """Delete a webhook; its deliveries not yet made are dropped

        A webhook of yours by id; another user's is a 404, like a missing one. Nothing more
        is sent to it, retries included.

        Returns:
            Deleted: its deliveries not yet made are dropped.
        """
        await caller(c.DeleteWebhook(webhook_id=webhook))

    @documented(
        get,
        "/webhooks/{webhookId:str}/deliveries",
        "listWebhookDeliveries",
        responses=_READ,
        query=(_DELIVERY_LIMIT,),
    )
    async def list_webhook_deliveries(
        self, caller: Caller, webhook: UUID, delivery_limit: int
    ) -> WebhookDeliveryListOut:
        """A webhook's delivery log, newest first

        Each event sent (or to be sent) to the webhook: its `messageId` (the `webhook-id`
        header), `state` (`pending`, `delivered`, `failed`), every attempt with the
        endpoint's status code or the error, and when the next attempt is due.

        Returns:
            The webhook's newest deliveries.
        """
        found = await caller(c.ListWebhookDeliveries(webhook_id=webhook, limit=delivery_limit))
        return WebhookDeliveryListOut(
            webhook_id=webhook, deliveries=[delivery_out(d) for d in found]
        )

    stop_installation = _lifecycle(
        c.InstallationAction.STOP,
        "Stop an installation's container",
        "Stops the container of its current revision (kept, not removed); its status "
        "becomes `stopped` until it is started or deployed again.",
    )
    start_installation = _lifecycle(
        c.InstallationAction.START,
        "Start an installation's container again",
        "Starts the container of its current revision.",
    )
    restart_installation = _lifecycle(
        c.InstallationAction.RESTART,
        "Restart an installation's container",
        "Stops and starts the container of its current revision.",
    )


async def _queued(caller: Caller, result: DeployResult, wait: float) -> Response[DeployOut]:
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
        DeployOut(
            deployment=deployment_out(deployment),
            installation=installation_out(server, result.installation),
        ),
        status_code=200 if wait and deployment.state.is_final else 202,
        headers=headers,
    )


def _get_and_head(path: str, name: str, **kwargs: Any) -> Callable[[Any], HTTPRouteHandler]:
    """A GET route that answers HEAD too: the GET's status and headers, without the body."""
    return documented(route, path, name, http_method=[HttpMethod.GET, HttpMethod.HEAD], **kwargs)


class PublicRoutes(Controller):
    """Routes without authentication: the install script, the API document, health probes.

    Each answers HEAD as well as GET (docs/decisions/2026-11-22-problem-details.md).
    """

    path = "/"
    tags = ["public"]

    @_get_and_head("/api/deploy", "getInstallScript", media_type="text/x-shellscript")
    async def install_script(self, request: Req, settings: Settings) -> Response[str]:
        """The server install script (POSIX sh)

        Run on a server as root with the enrollment token of `POST /api/agent/servers` (its
        `installCommand`): installs Docker and Caddy if missing, creates the `berth` user,
        authorizes berth's forward-only key and enrolls the server. `--dry-run` shows what
        it would do; `--uninstall` undoes it. Embeds no secret.

        Returns:
            The script (shellcheck-clean POSIX sh).
        """
        return Response(
            render_install_script(base_url(request, settings)),
            media_type="text/x-shellscript",
        )

    @_get_and_head(
        "/api/agent/openapi.json", "getOpenApiDocument", media_type=OpenAPIMediaType.OPENAPI_JSON
    )
    async def openapi_document(self, request: Req) -> dict[str, Any]:
        """This document: the OpenAPI 3.1 description of every public endpoint

        Describes what this server does, always; no token needed. Problem kinds are the enum
        of `Problem.type`.

        Returns:
            The OpenAPI 3.1 document.
        """
        app = request.app
        document: dict[str, Any] | None = app.state.get("openapi_document")
        if document is None:  # built once: Litestar's, completed (openapi.py)
            document = complete(app.openapi_schema.to_schema(), declared_inputs(app))
            app.state["openapi_document"] = document
        return document

    @_get_and_head("/healthz", "getLiveness", media_type=MediaType.JSON)
    async def healthz(self) -> Health:
        """Liveness

        Answers while the process serves requests; says nothing of the store.

        Returns:
            The process is alive.
        """
        return Health(status="ok")

    @_get_and_head("/readyz", "getReadiness")
    async def readyz(self, bus: MessageBus, settings: Settings) -> Readiness:
        """Readiness: the store answers

        Ready when one read of the database answers within 2 s; the answer names the kind of
        database (a replica of a scaled-out berth: postgresql).

        Returns:
            Ready: the store answered.

        Raises:
            503: Not ready (store-unavailable): the store did not answer; retry after
                `Retry-After`.
        """
        # Ready when one read of the store answers within ``timeout`` seconds; else 503
        # store-unavailable with Retry-After (the map in errors.py). /healthz: liveness only.
        timeout = 2.0
        try:
            async with asyncio.timeout(timeout):
                await bus.handle(c.SignUpPolicy())  # one read of the store, never cached
        except TimeoutError:
            raise StoreUnavailable(
                f"The database did not answer within {timeout:g} s; try again shortly."
            ) from None
        url = settings.database_url or "sqlite"
        return Readiness(
            status="ready", database="postgresql" if url.startswith("postgresql") else "sqlite"
        )


def _created_out(request: Req, settings: Settings, created: CreatedServer) -> CreatedServerOut:
    """A server with its one-time enrollment token and the install command carrying it."""
    server = server_out(created.server)
    expires = created.server.enrollment_expires_at
    assert expires is not None
    return CreatedServerOut(
        **{f: getattr(server, f) for f in server.__struct_fields__},
        enrollment_token=created.enrollment_token,
        enrollment_expires_at=expires,
        install_command=install_command(
            base_url(request, settings), created.enrollment_token, created.server.ssh_port
        ),
    )
