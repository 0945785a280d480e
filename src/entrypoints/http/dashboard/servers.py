"""The servers' pages: the caller's servers, adding one, and a server's page — its apps,
containers, deployments (followed live), resources, host keys and the deploy form.

Every handler calls the same use cases as the API, for the signed-in user only, so the
two agree at every moment and ownership is the store's: another user's server is a 404
page, like one that does not exist.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any
from uuid import UUID

from berth.core import commands as c
from berth.core.errors import (
    Conflict,
    InvalidInput,
    NotFound,
    RateLimited,
    RuntimeFailure,
    ServerUnreachable,
)
from berth.core.models import (
    Deployment,
    DeploymentState,
    Installation,
    InstallationStatus,
    Server,
    ServerStatus,
    Transport,
    User,
)
from berth.core.results import ContainerList, CreatedServer
from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency, Provide
from litestar.params import FromPath, HeaderParameter, QueryParameter, URLEncodedBody
from litestar.response import ServerSentEvent

from ...install import install_command, loopback, plain_http
from ...settings import Settings
from ..controllers.common import Caller
from ..events import event_stream
from ..urls import base_url
from .confirming import Ask, confirm_then_act
from .forms import (
    SERVER_FIELDS,
    ActionForm,
    ConfirmForm,
    DeployForm,
    RepinForm,
    ServerEditForm,
    ServerForm,
    parse_deploy_form,
    parse_server_form,
    place_deploy_errors,
)
from .live_status import status_key
from .web import FRAGMENT, Html, SeeOther, deploy_blocked, uuid_or_404

__all__ = ["ServerList", "ServerPage", "app_url", "back"]

Req = Request[User, Any, Any]
Redeploy = Annotated[str, QueryParameter(name="installation")]

USAGE_APPS = 50  # apps sampled on a server page's Resources, at most
RECENT_DEPLOYMENTS = 15


def _install_page(request: Req, settings: Settings, created: CreatedServer, *, status: int) -> Html:
    """The install command of a new (or still pending) server, at the server's address."""
    base = base_url(request, settings)
    install = install_command(base, created.enrollment_token, created.server.ssh_port)
    return Html(
        "server_added.html",
        status_code=status,
        server=created.server,
        install_command=install,
        script_url=f"{base}/api/deploy",
        insecure=plain_http(base),
        loopback_url=base if loopback(base) else None,
        replace_url=f"/servers/{created.server.id}",
    )


def _new_server_page(
    request: Req, settings: Settings, form: ServerForm, *, status: int = 200
) -> Html:
    """The add-server form, with what berth (and whoever deploys) can do on a server."""
    base = base_url(request, settings)
    return Html(
        "server_new.html",
        status_code=status,
        form=form,
        local_managed=settings.local,
        insecure=plain_http(base),
        loopback_url=base if loopback(base) else None,
    )


class ServerList(Controller):
    """The caller's servers, and adding one."""

    path = "/servers"

    @get("/")
    async def servers(self, caller: NamedDependency[Caller]) -> Html:
        return Html("servers.html", **await _servers_list(caller))

    @get("/live", opt=FRAGMENT)
    async def servers_live(self, caller: NamedDependency[Caller]) -> Html:
        return Html("_servers_table.html", **await _servers_list(caller))

    @get("/new")
    async def new_server(self, request: Req, settings: NamedDependency[Settings]) -> Html:
        return _new_server_page(request, settings, ServerForm())

    @post("/")
    async def create_server(
        self,
        request: Req,
        caller: NamedDependency[Caller],
        settings: NamedDependency[Settings],
        data: URLEncodedBody[ServerForm],
    ) -> Html:
        shown, command = parse_server_form(data)
        if command is None:
            return _new_server_page(request, settings, shown, status=422)
        try:
            created = await caller(command)
        except InvalidInput as exc:  # where the address leads (BERTH_ALLOW_PRIVATE_TARGETS=0)
            shown.place(exc.errors, SERVER_FIELDS)
            return _new_server_page(request, settings, shown, status=422)
        return _install_page(request, settings, created, status=201)


async def _provide_sid(server_id: FromPath[str]) -> UUID:
    return uuid_or_404(server_id, "Server")


async def _provide_server(caller: NamedDependency[Caller], sid: NamedDependency[UUID]) -> Server:
    return await caller(c.GetServer(server_id=sid))


async def _provide_deployment(
    caller: NamedDependency[Caller],
    sid: NamedDependency[UUID],
    deployment_id: FromPath[str],
) -> Deployment:
    """The caller's deployment, only if it is on the server the path names."""
    deployment = await caller(
        c.GetDeployment(deployment_id=uuid_or_404(deployment_id, "Deployment"))
    )
    if deployment.server_id != sid:
        raise NotFound("Deployment not found.")
    return deployment


class ServerPage(Controller):
    """One server: its apps, containers and deployments, its resources, its host keys,
    and deploys to it. Every route gets the server's id from the path (``sid``), the
    caller's server (``server``) and deployment on it (``deployment``): another user's
    is a 404."""

    path = "/servers/{server_id:str}"
    dependencies = {
        "sid": Provide(_provide_sid),
        "server": Provide(_provide_server),
        "deployment": Provide(_provide_deployment),
    }

    @get("/")
    async def server(
        self,
        request: Req,
        caller: NamedDependency[Caller],
        settings: NamedDependency[Settings],
        sid: NamedDependency[UUID],
    ) -> Html:
        return await _server_page(request, caller, settings, sid)

    @get("/live", opt=FRAGMENT)
    async def server_live(
        self,
        request: Req,
        caller: NamedDependency[Caller],
        sid: NamedDependency[UUID],
    ) -> Html:
        return Html("_server_live.html", **await _server_live(request, caller, sid))

    @get("/usage", opt=FRAGMENT)
    async def server_usage(
        self,
        caller: NamedDependency[Caller],
        sid: NamedDependency[UUID],
    ) -> Html:
        """CPU and memory of the server's running apps and Docker's disk, asked now (the
        apps sampled at once, at most ``USAGE_APPS``); an unreachable server says so."""
        listing = await caller(c.ListInstallations(server_id=sid))
        running = [i for i in listing.installations if i.status is InstallationStatus.RUNNING]
        running = running[:USAGE_APPS]
        error, rows, disk = None, [], None
        try:
            disk = await caller(c.GetServerDiskUsage(server_id=sid))
            samples = await asyncio.gather(
                *(caller(c.GetInstallationStats(installation_id=i.id)) for i in running)
            )
            rows = list(zip(running, samples, strict=True))
        except ServerUnreachable:
            error, disk = "the server cannot be reached now.", None
        except Conflict as exc:  # server-pending: it has not enrolled, nothing to ask
            error, disk = str(exc), None
        except RuntimeFailure as exc:
            error, disk = f"Docker refused: {exc}", None
        return Html("_server_usage.html", error=error, rows=rows, disk=disk)

    @get("/status", opt=FRAGMENT)
    async def server_status(self, server: NamedDependency[Server]) -> Html:
        return Html("_server_status.html", server=server)

    @post("/enrollment-token")
    async def new_enrollment_token(
        self,
        request: Req,
        caller: NamedDependency[Caller],
        settings: NamedDependency[Settings],
        sid: NamedDependency[UUID],
    ) -> Html:
        """A pending server's new install command (through the same command as the API),
        shown at the server's own address: a reload shows the server, issues nothing."""
        created = await caller(c.NewEnrollmentToken(server_id=sid))
        return _install_page(request, settings, created, status=200)

    @post("/delete")
    async def delete_server(
        self,
        caller: NamedDependency[Caller],
        server: NamedDependency[Server],
        data: URLEncodedBody[ConfirmForm],
    ) -> Response[Any]:
        ask = Ask(
            data,
            title=f"Remove server {server.name}?",
            message=(
                "berth forgets this server with its apps and deployment history. "
                "Nothing on the server is touched: its containers keep running."
            ),
            button="Remove server",
            back=f"/servers/{server.id}",
        )
        removal = c.DeleteServer(server_id=server.id)
        return await confirm_then_act(caller, removal, "/servers?done=server-deleted", ask=ask)

    @post("/edit")
    async def change_server(
        self,
        request: Req,
        caller: NamedDependency[Caller],
        settings: NamedDependency[Settings],
        sid: NamedDependency[UUID],
        data: URLEncodedBody[ServerEditForm],
    ) -> Response[Any]:
        """The server's edit form: name, address and SSH port, through the same command as
        the API (PATCH); a field left empty is kept."""
        raw: dict[str, object] = {}
        if data.name.strip():
            raw["name"] = data.name.strip()
        if data.address.strip():
            raw["address"] = data.address.strip()
        if data.ssh_port.strip():
            port = data.ssh_port.strip()
            raw["ssh_port"] = int(port) if port.isdigit() and len(port) <= 6 else port
        try:
            await caller(c.parse_change_server(raw, sid))
        except InvalidInput as exc:
            errors = {e.location or "form": e.message for e in exc.errors}
        else:
            return SeeOther(f"/servers/{sid}?done=server-changed")
        shown = {"name": data.name, "address": data.address, "ssh_port": data.ssh_port}
        return await _server_page(
            request, caller, settings, sid, status=422, edit=shown, edit_errors=errors
        )

    @post("/host-keys")
    async def repin_host_keys(
        self,
        request: Req,
        caller: NamedDependency[Caller],
        settings: NamedDependency[Settings],
        sid: NamedDependency[UUID],
        data: URLEncodedBody[RepinForm],
    ) -> Response[Any]:
        """The re-pin form: the keys (prefilled with the offered one) and the fingerprint
        the user checked on the server; through the same command as the API."""
        keys = [line.strip() for line in data.host_keys.splitlines() if line.strip()]
        try:
            command = c.parse_repin(
                {"host_keys": keys, "fingerprint": data.fingerprint.strip()}, sid
            )
            await caller(command)
        except InvalidInput as exc:
            errors, status = {e.location or "form": e.message for e in exc.errors}, 422
        except Conflict as exc:
            errors, status = {exc.field or "form": exc.detail}, 409
        else:
            return SeeOther(f"/servers/{sid}?done=host-keys-repinned")
        shown = {"host_keys": data.host_keys, "fingerprint": data.fingerprint}
        return await _server_page(
            request, caller, settings, sid, status=status, repin=shown, repin_errors=errors
        )

    @get("/deploy")
    async def deploy_form(
        self,
        caller: NamedDependency[Caller],
        server: NamedDependency[Server],
        redeploy: Redeploy = "",
    ) -> Html:
        """The deploy form, blank or (``?installation=``) a redeploy of an app."""
        shown, notice = DeployForm.blank(), None
        if redeploy:
            found_server, found = await caller(
                c.GetInstallation(installation_id=uuid_or_404(redeploy, "Installation"))
            )
            if found_server.id != server.id:
                raise NotFound("Installation not found.")
            shown, notice = await _redeploy_form(caller, found)
        return Html("deploy.html", server=server, form=shown, notice=notice)

    @post("/deploy")
    async def deploy(
        self,
        caller: NamedDependency[Caller],
        server: NamedDependency[Server],
        data: URLEncodedBody[DeployForm],
    ) -> Response[Any]:
        shown, command = parse_deploy_form(server.id, data)

        def again(status: int) -> Html:
            return Html("deploy.html", status_code=status, server=server, form=shown, notice=None)

        if command is None or deploy_blocked(server):
            return again(409 if command else 422)
        try:
            result = await caller(command)
        except RateLimited as exc:
            shown.errors["form"] = f"Deploy rate limit reached; try again in {exc.retry_after} s."
            return again(429)
        except Conflict as exc:  # a port or domain held: beside that field
            shown.errors[exc.field if exc.field in ("port", "domain") else "form"] = exc.detail
            return again(409)
        except InvalidInput as exc:  # a kept env value gone, a volume of berth's own data
            place_deploy_errors(shown, exc.errors)
            return again(422)
        new = result.deployment.id
        if shown.source == "app":  # a Redeploy goes back to the app's page, as Roll back does
            return SeeOther(
                f"/servers/{server.id}/installations/{result.installation.id}"
                f"?deployment={new}#revision-{new}"
            )
        return SeeOther(f"/servers/{server.id}?deployment={new}#deployment-{new}")

    @get("/deployments/{deployment_id:str}/events", opt=FRAGMENT)
    async def deployment_events(
        self,
        request: Req,
        caller: NamedDependency[Caller],
        deployment: NamedDependency[Deployment],
        after: Annotated[int, HeaderParameter(name="Last-Event-ID", ge=0, le=2**63 - 1)] = 0,
    ) -> ServerSentEvent:
        """The deployment's feed, as the API streams it, for the server page's script: it
        refreshes the page's live region when a step arrives instead of polling."""
        follow = c.FollowDeployment(deployment_id=deployment.id, after=after)
        return event_stream(request, await caller(follow))

    @post("/deployments/{deployment_id:str}/cancel")
    async def cancel(
        self,
        caller: NamedDependency[Caller],
        deployment: NamedDependency[Deployment],
        data: URLEncodedBody[ActionForm],
    ) -> SeeOther:
        await caller(c.CancelDeployment(deployment_id=deployment.id))
        _, app = await caller(c.GetInstallation(installation_id=deployment.installation_id))
        # A first deployment has no earlier version to put back: the notice says so.
        done = "canceled" if app.current_deployment_id is not None else "canceled-first"
        query = f"done={done}&deployment={deployment.id}"
        return SeeOther(
            back(data, deployment.server_id, deployment.installation_id, query, deployment.id)
        )


def back(
    form: ActionForm,
    server_id: UUID,
    installation_id: UUID,
    query: str,
    deployment: UUID | None = None,
) -> str:
    """Where an app's action returns: the app's page when its form says it was posted
    there (``from=app``), else the server page; at the deployment it names, if any."""
    if form.source == "app":
        anchor = f"#revision-{deployment}" if deployment else ""
        return f"/servers/{server_id}/installations/{installation_id}?{query}{anchor}"
    anchor = f"#deployment-{deployment}" if deployment else ""
    return f"/servers/{server_id}?{query}{anchor}"


async def _redeploy_form(
    caller: Caller, installation: Installation
) -> tuple[DeployForm, str | None]:
    """The deploy form for a redeploy: the settings of the revision serving now. After a
    failed redeploy those are not the last ones tried, and a notice says so."""
    current = installation.current_deployment_id
    last = installation.last_deployment
    if current is None or last is None or last.id == current:
        return DeployForm.redeploy(installation), None
    serving = await caller(c.GetDeployment(deployment_id=current))
    notice = (
        f"The last deployment of {installation.name} did not succeed: the form shows the "
        "settings of the version that runs now."
    )
    return DeployForm.redeploy(installation, serving.spec), notice


async def _server_page(
    request: Req,
    caller: Caller,
    settings: Settings,
    sid: UUID,
    *,
    status: int = 200,
    **extra: Any,
) -> Html:
    live = await _server_live(request, caller, sid)
    local_managed = settings.local and live["server"].transport is Transport.LOCAL
    return Html("server.html", status_code=status, local_managed=local_managed, **live, **extra)


async def _server_live(request: Req, caller: Caller, server_id: UUID) -> dict[str, Any]:
    """What the server page shows, read through the same commands as the API."""
    listing = await caller(c.ListInstallations(server_id=server_id, include_removed=True))
    removed = [i for i in listing.installations if i.status is InstallationStatus.REMOVED]
    apps = [i for i in listing.installations if i.status is not InstallationStatus.REMOVED]
    if listing.server.status is ServerStatus.PENDING:  # nothing to ask it (the API's 409)
        containers = ContainerList(
            server_id=server_id, observed_at=None, server_status=ServerStatus.PENDING, containers=()
        )
    else:
        containers = await caller(c.ListContainers(server_id=server_id))
    deployments = await caller(c.ListDeployments(server_id=server_id, limit=RECENT_DEPLOYMENTS))
    names = {i.id: i.name for i in listing.installations}
    wanted = request.query_params.get("deployment", "")
    open_id = next((d.id for d in deployments if str(d.id) == wanted), None)
    if open_id is None:
        open_id = next((d.id for d in deployments if not d.state.is_final), None)
    return {
        "server": listing.server,
        "installations": apps,
        "removed": removed,  # their pages keep their history
        "containers": containers,
        "deployments": deployments,
        "names": names,
        "open_id": open_id,
        # The containers list shows berth's own unless the visitor asked for every one.
        "all_containers": request.query_params.get("containers") == "all",
        "busy": any(not d.state.is_final for d in deployments),
        # The deployments whose event streams the page's script follows.
        "follow": [d.id for d in deployments if not d.state.is_final],
        "announce": _announce(deployments, names),
        "urls": {i.id: app_url(listing.server, i) for i in apps},
        # A succeeded deployment of an app still here, not its current revision, can be
        # rolled back to.
        "current": {i.id: i.current_deployment_id for i in apps},
        "status_key": status_key(listing.installations, listing.server),
    }


def _announce(deployments: list[Deployment], names: dict[UUID, str]) -> str:
    """A one-line summary of the newest deployment, for screen readers' live region."""
    if not deployments:
        return ""
    newest = deployments[0]
    name = names.get(newest.installation_id, "app")
    state = newest.state.value.replace("_", " ")
    if newest.state is DeploymentState.RUNNING and newest.step:
        state = f"running ({newest.step})"
    return f"Deployment of {name}: {state}."


def app_url(server: Server, installation: Installation) -> str | None:
    """Where the app answers, as the API's installation ``url`` says."""
    if installation.spec.domain:
        return f"https://{installation.spec.domain}"
    if server.address and installation.host_port:
        host = f"[{server.address}]" if ":" in server.address else server.address
        return f"http://{host}:{installation.host_port}"
    return None


async def _servers_list(caller: Caller) -> dict[str, Any]:
    """The caller's servers, and how many apps on each are down (their container exited,
    restarts or is gone: ``InstallationStatus.down``)."""
    servers = await caller(c.ListServers())
    down: dict[UUID, int] = {}
    for server in servers:
        listed = await caller(c.ListInstallations(server_id=server.id))
        down[server.id] = sum(1 for i in listed.installations if i.status.down)
    return {"servers": servers, "apps_down": down}
