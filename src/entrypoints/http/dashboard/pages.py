"""The dashboard's pages: sign-up and sign-in, servers, a server's apps, deploys, the token.

Every handler calls the same use cases as the API, for the signed-in user only,
so the two agree at every moment and ownership is the store's (another user's
server is a 404 page, like one that does not exist). Pages render without
JavaScript; ``static/berth.js`` only adds copy buttons, confirmation dialogs and
live updates through the ``…/live`` fragments.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from berth.core import commands as c
from berth.core.access import Actor
from berth.core.bus import MessageBus
from berth.core.errors import (
    NO_SETUP_CODE,
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
    RateLimited,
    RuntimeFailure,
    ServerUnreachable,
    TooManyAttempts,
    Unauthorized,
)
from berth.core.models import (
    Deployment,
    DeploymentState,
    Installation,
    InstallationStatus,
    Server,
    Transport,
)
from berth.core.results import CreatedServer, SignUpMode
from berth.core.types import RuleError, check_email, check_password
from litestar import Controller, Request, Response, get, post
from litestar.datastructures import State
from litestar.di import Provide
from litestar.params import FromPath
from litestar.response import ServerSentEvent

from ...install import install_command, plain_http
from ...settings import Settings
from ..events import event_stream, last_event_id_of, log_events
from ..urls import base_url
from .app_view import LogLine, log_line, revisions
from .forms import (
    SERVER_FIELDS,
    DeployForm,
    RegistryForm,
    ServerForm,
    parse_deploy_form,
    parse_registry_form,
    parse_server_form,
    place_deploy_errors,
)
from .web import (
    SECURITY_HEADERS,
    SESSION_COOKIE,
    Form,
    clear_session_cookie,
    deploy_blocked,
    page,
    read_form,
    redirect,
    safe_next,
    set_session_cookie,
    visitor_of,
)

__all__ = ["Accounts", "AppPages", "ServerPages", "SettingsPages"]

Req = Request[Any, Any, State]
Page = Response[Any]

PUBLIC = {"public": True}
USAGE_APPS = 50  # apps sampled on a server page's Resources, at most
FRAGMENT = {"fragment": True}
RECENT_DEPLOYMENTS = 15
LOG_LINES = 200
REVISIONS = 20  # revisions listed on an app's page, newest first
MAX_DOWNLOAD = 5000  # lines in a downloaded log

# Messages shown after a redirect (``?done=``): fixed texts, never echoed input.
DONE = {
    "signed-out": "You are signed out.",
    "server-deleted": "The server was removed from berth. Its containers keep running.",
    "host-keys-repinned": "The new host key is pinned; berth reconnects to the server now.",
    "installation-removed": (
        "The app was removed: its containers are gone from the server; its deployments stay "
        "in the history."
    ),
    "stopped": "The app was stopped. Start runs it again.",
    "started": "The app was started.",
    "restarted": "The app was restarted.",
    "canceled": "The deployment was canceled (a running one puts the previous version back).",
    "registry-added": "The registry was saved: deploys of its images pull with it.",
    "registry-removed": "The registry's credentials were removed.",
}


def _user(request: Req) -> Actor:
    """Who the signed-in visitor acts as (``Visitor.actor``)."""
    actor = visitor_of(request).actor
    assert actor is not None  # load_visitor let only signed-in visitors through
    return actor


def _id(value: str, what: str) -> UUID:
    try:
        return UUID(value)
    except ValueError:
        raise NotFound(f"{what} not found.") from None


def rule_errors(*fields: tuple[str, Callable[[object], object], object]) -> dict[str, str]:
    """``{location: message}`` for each ``(location, check, value)`` whose core rule
    ``check`` refuses ``value``."""
    errors: dict[str, str] = {}
    for location, check, value in fields:
        try:
            check(value)
        except RuleError as exc:
            errors[location] = str(exc)
    return errors


def _done(request: Req) -> str | None:
    return DONE.get(request.query_params.get("done", ""))


def _confirm(request: Req, form: Form, **context: Any) -> Page:
    """The confirmation step of a destructive form posted without ``confirm=yes``.

    With JavaScript a dialog asks first; without, this page does.
    """
    hidden = [(k, v) for k, v in form.pairs if k not in ("csrf_token", "confirm")]
    return page(request, "confirm.html", action=request.url.path, hidden=hidden, **context)


# --- accounts --------------------------------------------------------------------------


class Accounts(Controller):
    """Sign up, sign in, sign out; ``/`` sends each visitor where they belong."""

    path = "/"

    @get("/", opt=PUBLIC)
    async def home(self, request: Req) -> Page:
        if visitor_of(request).user is not None:
            return redirect(request, "/servers")
        return redirect(request, "/login")

    @get("/login", opt=PUBLIC)
    async def login_form(self, request: Req, bus: MessageBus) -> Page:
        if visitor_of(request).user is not None:
            return redirect(request, safe_next(request.query_params.get("next")))
        mode = await bus.handle(c.SignUpPolicy())
        if mode is SignUpMode.FIRST:
            return redirect(request, "/signup")
        return page(
            request,
            "login.html",
            email="",
            next=safe_next(request.query_params.get("next")),
            mode=mode.value,
            error=None,
            done=_done(request),
        )

    @post("/login", opt=PUBLIC)
    async def login(self, request: Req, bus: MessageBus) -> Page:
        form = await read_form(request)
        email, target = form.get("email").strip(), safe_next(form.get("next"))
        address = request.client.host if request.client else "unknown"
        mode = (await bus.handle(c.SignUpPolicy())).value

        def again(status: int, error: str, headers: dict[str, str] | None = None) -> Page:
            return page(
                request,
                "login.html",
                status=status,
                headers=headers,
                email=email,
                next=target,
                mode=mode,
                error=error,
                done=None,
            )

        try:
            started = await bus.handle(
                c.SignIn(email=email, password=form.get("password"), address=address)
            )
        except TooManyAttempts as exc:
            return again(429, exc.detail, {"Retry-After": str(exc.retry_after)})
        except Unauthorized:
            return again(400, "Wrong email or password.")
        await _end_current_session(request, bus)
        set_session_cookie(request, started.session_id)
        return redirect(request, target)

    @get("/signup", opt=PUBLIC)
    async def signup_form(self, request: Req, bus: MessageBus, settings: Settings) -> Page:
        if visitor_of(request).user is not None:
            return redirect(request, "/servers")
        mode = await bus.handle(c.SignUpPolicy())
        invite = request.query_params.get("invite", "")
        status = 403 if mode is SignUpMode.INVITE and not invite else 200
        return _signup_page(request, settings, status, mode, invite)

    @post("/signup", opt=PUBLIC)
    async def signup(self, request: Req, bus: MessageBus, settings: Settings) -> Page:
        form = await read_form(request)
        email, password = form.get("email").strip(), form.get("password")
        invite = form.get("invite").strip()
        mode = await bus.handle(c.SignUpPolicy())
        errors: dict[str, str] = {}
        status = 422
        if mode is SignUpMode.INVITE and not invite:
            status = 403  # closed: whatever was typed, nobody signs up without an invitation
        else:
            # Every broken field at once: the core's rules for email and password, and the
            # second password, before anything is asked of the store.
            errors = rule_errors(
                ("email", check_email, email), ("password", check_password, password)
            )
            if password != form.get("password_again"):
                errors["password_again"] = "The two passwords differ."  # noqa: S105
            if mode is SignUpMode.FIRST and not invite:
                errors["invite"] = NO_SETUP_CODE
                status = 403
        if not errors and status != 403:
            try:
                started = await bus.handle(
                    c.SignUp(email=email, password=password, invite=invite or None)
                )
            except InvalidInput as exc:
                for error in exc.errors:
                    errors.setdefault(error.location, error.message)
            except Conflict as exc:
                errors["email"], status = exc.detail, 409
            except Forbidden as exc:  # closed; or the first account's code, beside its field
                errors[exc.field or "form"], status = exc.detail, 403
            else:
                await _end_current_session(request, bus)
                set_session_cookie(request, started.session_id)
                return redirect(request, "/servers")
        return _signup_page(request, settings, status, mode, invite, email, errors)

    @post("/logout")
    async def logout(self, request: Req, bus: MessageBus) -> Page:
        await read_form(request)
        await _end_current_session(request, bus)
        clear_session_cookie(request)
        return redirect(request, "/login?done=signed-out")


async def _end_current_session(request: Req, bus: MessageBus) -> None:
    session_id = request.cookies.get(SESSION_COOKIE)
    if session_id:
        await bus.handle(c.SignOut(session_id=session_id))


# --- servers ---------------------------------------------------------------------------


def _install_page(request: Req, settings: Settings, created: CreatedServer, *, status: int) -> Page:
    """The install command of a new (or still pending) server, at the server's address."""
    base = base_url(request, settings)
    install = install_command(base, created.enrollment_token, created.server.ssh_port)
    return page(
        request,
        "server_added.html",
        status=status,
        server=created.server,
        install_command=install,
        script_url=f"{base}/api/deploy",
        insecure=plain_http(base),
        replace_url=f"/servers/{created.server.id}",
    )


def _new_server_page(
    request: Req, settings: Settings, form: ServerForm, *, status: int = 200
) -> Page:
    """The add-server form, with what berth (and whoever deploys) can do on a server."""
    return page(
        request,
        "server_new.html",
        status=status,
        form=form,
        local_managed=settings.local,
        insecure=plain_http(base_url(request, settings)),
    )


class ServerPages(Controller):
    """The caller's servers, one server's apps, containers and deployments, and deploys."""

    path = "/servers"

    @get("/")
    async def servers(self, request: Req, bus: MessageBus) -> Page:
        servers = await bus.handle(c.ListServers(), _user(request))
        return page(request, "servers.html", servers=servers, done=_done(request))

    @get("/live", opt=FRAGMENT)
    async def servers_live(self, request: Req, bus: MessageBus) -> Page:
        servers = await bus.handle(c.ListServers(), _user(request))
        return page(request, "_servers_table.html", servers=servers)

    @get("/new")
    async def new_server(self, request: Req, settings: Settings) -> Page:
        return _new_server_page(request, settings, ServerForm())

    @post("/")
    async def create_server(self, request: Req, bus: MessageBus, settings: Settings) -> Page:
        form = await read_form(request)
        shown, command = parse_server_form(form)
        if command is None:
            return _new_server_page(request, settings, shown, status=422)
        try:
            created = await bus.handle(command, _user(request))
        except InvalidInput as exc:  # where the address leads (BERTH_ALLOW_PRIVATE_TARGETS=0)
            shown.place(exc.errors, SERVER_FIELDS)
            return _new_server_page(request, settings, shown, status=422)
        return _install_page(request, settings, created, status=201)

    @post("/{server_id:str}/enrollment-token")
    async def new_enrollment_token(
        self, request: Req, bus: MessageBus, settings: Settings, server_id: FromPath[str]
    ) -> Page:
        """A pending server's new install command (through the same command as the API),
        shown at the server's own address: a reload shows the server, issues nothing."""
        await read_form(request)  # the CSRF check
        created = await bus.handle(
            c.NewEnrollmentToken(server_id=_id(server_id, "Server")), _user(request)
        )
        return _install_page(request, settings, created, status=200)

    @get("/{server_id:str}")
    async def server(
        self, request: Req, bus: MessageBus, settings: Settings, server_id: FromPath[str]
    ) -> Page:
        sid = _id(server_id, "Server")
        live = await _server_live(request, bus, sid)
        local_managed = settings.local and live["server"].transport is Transport.LOCAL
        return page(
            request, "server.html", done=_done(request), local_managed=local_managed, **live
        )

    @get("/{server_id:str}/live", opt=FRAGMENT)
    async def server_live(self, request: Req, bus: MessageBus, server_id: FromPath[str]) -> Page:
        live = await _server_live(request, bus, _id(server_id, "Server"))
        return page(request, "_server_live.html", **live)

    @get("/{server_id:str}/usage", opt=FRAGMENT)
    async def server_usage(self, request: Req, bus: MessageBus, server_id: FromPath[str]) -> Page:
        """CPU and memory of the server's running apps and Docker's disk, asked now (the
        apps sampled at once, at most ``USAGE_APPS``); an unreachable server says so."""
        sid = _id(server_id, "Server")
        user = _user(request)
        listing = await bus.handle(c.ListInstallations(server_id=sid), user)
        running = [i for i in listing.installations if i.status is InstallationStatus.RUNNING][
            :USAGE_APPS
        ]
        try:
            disk = await bus.handle(c.GetServerDiskUsage(server_id=sid), user)
            samples = await asyncio.gather(
                *(bus.handle(c.GetInstallationStats(installation_id=i.id), user) for i in running)
            )
        except ServerUnreachable:
            error = "the server cannot be reached now."
            return page(request, "_server_usage.html", error=error, rows=[], disk=None)
        except RuntimeFailure as exc:
            error = f"Docker refused: {exc}"
            return page(request, "_server_usage.html", error=error, rows=[], disk=None)
        rows = list(zip(running, samples, strict=True))
        return page(request, "_server_usage.html", error=None, rows=rows, disk=disk)

    @get("/{server_id:str}/status", opt=FRAGMENT)
    async def server_status(self, request: Req, bus: MessageBus, server_id: FromPath[str]) -> Page:
        server = await bus.handle(c.GetServer(server_id=_id(server_id, "Server")), _user(request))
        return page(request, "_server_status.html", server=server)

    @post("/{server_id:str}/delete")
    async def delete_server(self, request: Req, bus: MessageBus, server_id: FromPath[str]) -> Page:
        form = await read_form(request)
        sid = _id(server_id, "Server")
        server = await bus.handle(c.GetServer(server_id=sid), _user(request))
        if form.get("confirm") != "yes":
            return _confirm(
                request,
                form,
                title=f"Remove server {server.name}?",
                message=(
                    "berth forgets this server with its apps and deployment history. "
                    "Nothing on the server is touched: its containers keep running."
                ),
                button="Remove server",
                back=f"/servers/{sid}",
            )
        await bus.handle(c.DeleteServer(server_id=sid), _user(request))
        return redirect(request, "/servers?done=server-deleted")

    @post("/{server_id:str}/host-keys")
    async def repin_host_keys(
        self, request: Req, bus: MessageBus, settings: Settings, server_id: FromPath[str]
    ) -> Page:
        """The re-pin form: the keys (prefilled with the offered one) and the fingerprint
        the user checked on the server; through the same command as the API."""
        form = await read_form(request)
        sid = _id(server_id, "Server")
        user = _user(request)
        keys = [line.strip() for line in form.get("host_keys").splitlines() if line.strip()]
        shown = {"host_keys": form.get("host_keys"), "fingerprint": form.get("fingerprint")}
        errors: dict[str, str] = {}
        try:
            command = c.parse_repin(
                {"host_keys": keys, "fingerprint": form.get("fingerprint").strip()}, sid
            )
            await bus.handle(command, user)
        except InvalidInput as exc:
            errors = {e.location or "form": e.message for e in exc.errors}
            status = 422
        except Conflict as exc:
            errors = {exc.field or "form": exc.detail}
            status = 409
        else:
            return redirect(request, f"/servers/{sid}?done=host-keys-repinned")
        live = await _server_live(request, bus, sid)
        local_managed = settings.local and live["server"].transport is Transport.LOCAL
        return page(
            request,
            "server.html",
            status=status,
            done=None,
            local_managed=local_managed,
            repin=shown,
            repin_errors=errors,
            **live,
        )

    @get("/{server_id:str}/deploy")
    async def deploy_form(self, request: Req, bus: MessageBus, server_id: FromPath[str]) -> Page:
        sid = _id(server_id, "Server")
        server = await bus.handle(c.GetServer(server_id=sid), _user(request))
        shown, notice = DeployForm.blank(), None
        wanted = request.query_params.get("installation")
        if wanted:
            found_server, installation = await bus.handle(
                c.GetInstallation(installation_id=_id(wanted, "Installation")), _user(request)
            )
            if found_server.id != sid:
                raise NotFound("Installation not found.")
            shown, notice = await _redeploy_form(bus, _user(request), installation)
        return page(request, "deploy.html", server=server, form=shown, notice=notice)

    @post("/{server_id:str}/deploy")
    async def deploy(self, request: Req, bus: MessageBus, server_id: FromPath[str]) -> Page:
        form = await read_form(request)
        sid = _id(server_id, "Server")
        user = _user(request)
        server = await bus.handle(c.GetServer(server_id=sid), user)
        shown, command = parse_deploy_form(sid, form)

        def again(status: int) -> Page:
            return page(
                request, "deploy.html", status=status, server=server, form=shown, notice=None
            )

        if command is None or deploy_blocked(server):
            return again(409 if command else 422)
        try:
            result = await bus.handle(command, user)
        except RateLimited as exc:
            shown.errors["form"] = f"Deploy rate limit reached; try again in {exc.retry_after} s."
            return again(429)
        except Conflict as exc:  # a port or domain held: beside that field
            shown.errors[exc.field if exc.field in ("port", "domain") else "form"] = exc.detail
            return again(409)
        except InvalidInput as exc:  # a kept env value gone, a volume of berth's own data
            place_deploy_errors(shown, exc.errors)
            return again(422)
        deployment_id = result.deployment.id
        return redirect(
            request, f"/servers/{sid}?deployment={deployment_id}#deployment-{deployment_id}"
        )

    @post("/{server_id:str}/installations/{installation_id:str}/remove")
    async def remove_installation(
        self,
        request: Req,
        bus: MessageBus,
        server_id: FromPath[str],
        installation_id: FromPath[str],
    ) -> Page:
        form = await read_form(request)
        server, installation = await _installation(request, bus, server_id, installation_id)
        if form.get("confirm") != "yes":
            return _confirm(
                request,
                form,
                title=f"Remove {installation.name}?",
                message=(
                    f"Its containers are stopped and removed from {server.name}; its "
                    "deployments stay in the history. Volumes on the server's disk stay."
                ),
                button="Remove app",
                back=f"/servers/{server.id}",
            )
        try:
            await bus.handle(c.RemoveInstallation(installation_id=installation.id), _user(request))
        except ServerUnreachable as exc:
            return page(
                request,
                "error.html",
                status=503,
                title=f"{installation.name} was not removed",
                detail=(
                    f"berth cannot reach {server.name} now, so it could not remove the app's "
                    f"containers from it; nothing was changed. Try again once the server is "
                    f"back online. ({exc.detail})"
                ),
            )
        return redirect(request, f"/servers/{server.id}?done=installation-removed")

    @post("/{server_id:str}/installations/{installation_id:str}/{action:str}")
    async def change_installation(
        self,
        request: Req,
        bus: MessageBus,
        server_id: FromPath[str],
        installation_id: FromPath[str],
        action: FromPath[str],
    ) -> Page:
        """Stop, start or restart the app (the form's button), or roll it back."""
        form = await read_form(request)  # the CSRF check
        server, installation = await _installation(request, bus, server_id, installation_id)
        if action not in {a.value for a in c.InstallationAction}:
            raise NotFound("Not found.")
        chosen = c.InstallationAction(action)
        await bus.handle(
            c.ChangeInstallation(installation_id=installation.id, action=chosen), _user(request)
        )
        done = {"stop": "stopped", "start": "started", "restart": "restarted"}[chosen.value]
        return redirect(request, _back(form, server.id, installation.id, f"done={done}"))

    @post("/{server_id:str}/installations/{installation_id:str}/rollback/{deployment_id:str}")
    async def rollback(
        self,
        request: Req,
        bus: MessageBus,
        server_id: FromPath[str],
        installation_id: FromPath[str],
        deployment_id: FromPath[str],
    ) -> Page:
        """Deploy that earlier revision again; the page then follows the new deployment."""
        form = await read_form(request)
        server, installation = await _installation(request, bus, server_id, installation_id)
        result = await bus.handle(
            c.Rollback(
                installation_id=installation.id,
                deployment_id=_id(deployment_id, "Deployment"),
            ),
            _user(request),
        )
        new = result.deployment.id
        return redirect(request, _back(form, server.id, installation.id, f"deployment={new}", new))

    @get("/{server_id:str}/deployments/{deployment_id:str}/events", opt=FRAGMENT)
    async def deployment_events(
        self,
        request: Req,
        bus: MessageBus,
        server_id: FromPath[str],
        deployment_id: FromPath[str],
    ) -> ServerSentEvent:
        """The deployment's feed, as the API streams it, for the server page's script: it
        refreshes the page's live region when a step arrives instead of polling."""
        deployment = await _deployment(request, bus, server_id, deployment_id)
        after = last_event_id_of(request)
        follow = c.FollowDeployment(deployment_id=deployment.id, after=after)
        return event_stream(request, await bus.handle(follow, _user(request)))

    @post("/{server_id:str}/deployments/{deployment_id:str}/cancel")
    async def cancel(
        self,
        request: Req,
        bus: MessageBus,
        server_id: FromPath[str],
        deployment_id: FromPath[str],
    ) -> Page:
        form = await read_form(request)
        deployment = await _deployment(request, bus, server_id, deployment_id)
        await bus.handle(c.CancelDeployment(deployment_id=deployment.id), _user(request))
        query = f"done=canceled&deployment={deployment.id}"
        back = _back(form, deployment.server_id, deployment.installation_id, query, deployment.id)
        return redirect(request, back)


def _back(
    form: Form, server_id: UUID, installation_id: UUID, query: str, deployment: UUID | None = None
) -> str:
    """Where an app's action returns: the app's page when its form says it was posted
    there (``from=app``), else the server page; at the deployment it names, if any."""
    if form.get("from") == "app":
        anchor = f"#revision-{deployment}" if deployment else ""
        return f"/servers/{server_id}/installations/{installation_id}?{query}{anchor}"
    anchor = f"#deployment-{deployment}" if deployment else ""
    return f"/servers/{server_id}?{query}{anchor}"


async def _installation(
    request: Req, bus: MessageBus, server_id: FromPath[str], installation_id: str
) -> tuple[Server, Installation]:
    """The caller's installation, only if it is on the server the path names."""
    sid = _id(server_id, "Server")
    server, installation = await bus.handle(
        c.GetInstallation(installation_id=_id(installation_id, "Installation")), _user(request)
    )
    if server.id != sid:
        raise NotFound("Installation not found.")
    return server, installation


def _signup_page(
    request: Req,
    settings: Settings,
    status: int,
    mode: SignUpMode,
    invite: str,
    email: str = "",
    errors: dict[str, str] | None = None,
) -> Page:
    """The sign-up form (``status``: 200, 403 closed, 409/422 with ``errors`` by field)."""
    shown: dict[str, Any] = {"mode": mode.value, "invite": invite, "email": email}
    return page(
        request,
        "signup.html",
        status=status,
        errors=errors or {},
        local_managed=settings.local,
        **shown,
    )


async def _deployment(
    request: Req, bus: MessageBus, server_id: str, deployment_id: str
) -> Deployment:
    """The caller's deployment, only if it is on the server the path names."""
    sid = _id(server_id, "Server")
    deployment = await bus.handle(
        c.GetDeployment(deployment_id=_id(deployment_id, "Deployment")), _user(request)
    )
    if deployment.server_id != sid:
        raise NotFound("Deployment not found.")
    return deployment


async def _redeploy_form(
    bus: MessageBus, user: Actor, installation: Installation
) -> tuple[DeployForm, str | None]:
    """The deploy form for a redeploy: the settings of the revision serving now. After a
    failed redeploy those are not the last ones tried, and a notice says so."""
    current = installation.current_deployment_id
    last = installation.last_deployment
    if current is None or last is None or last.id == current:
        return DeployForm.redeploy(installation), None
    serving = await bus.handle(c.GetDeployment(deployment_id=current), user)
    notice = (
        f"The last deployment of {installation.name} did not succeed: the form shows the "
        "settings of the version that runs now."
    )
    return DeployForm.redeploy(installation, serving.spec), notice


async def _server_live(request: Req, bus: MessageBus, server_id: UUID) -> dict[str, Any]:
    """What the server page shows, read through the same commands as the API."""
    user = _user(request)
    listing = await bus.handle(c.ListInstallations(server_id=server_id), user)
    containers = await bus.handle(c.ListContainers(server_id=server_id), user)
    deployments = await bus.handle(
        c.ListDeployments(server_id=server_id, limit=RECENT_DEPLOYMENTS), user
    )
    names = {i.id: i.name for i in listing.installations}
    wanted = request.query_params.get("deployment", "")
    open_id = next((d.id for d in deployments if str(d.id) == wanted), None)
    if open_id is None:
        open_id = next((d.id for d in deployments if not d.state.is_final), None)
    return {
        "server": listing.server,
        "installations": listing.installations,
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
        "urls": {i.id: _app_url(listing.server, i) for i in listing.installations},
        # A succeeded deployment of an app still here, not its current revision, can be
        # rolled back to.
        "current": {i.id: i.current_deployment_id for i in listing.installations},
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


def _app_url(server: Server, installation: Installation) -> str | None:
    """Where the app answers, as the API's installation ``url`` says."""
    if installation.spec.domain:
        return f"https://{installation.spec.domain}"
    if server.address and installation.host_port:
        host = f"[{server.address}]" if ":" in server.address else server.address
        return f"http://{host}:{installation.host_port}"
    return None


# --- an app's page ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class App:
    """The caller's installation named by the path, with its server."""

    server: Server
    installation: Installation


async def _provide_app(request: Req, bus: MessageBus, server_id: str, installation_id: str) -> App:
    return App(*await _installation(request, bus, server_id, installation_id))


class AppPages(Controller):
    """One app (installation): its revision and status, URL and HTTPS, revision history
    with what changed, actions, CPU and memory, and its logs, followed live.

    The page renders whole without JavaScript (forms post back here with ``from=app``);
    its script refreshes ``…/live`` when a deployment's event stream has a step, and
    follows the output through ``…/logs/events`` (the API's ``logs?follow=1`` command).
    Every route gets the caller's app from the path (``app``): another user's is a 404."""

    path = "/servers/{server_id:str}/installations/{installation_id:str}"
    dependencies = {"app": Provide(_provide_app)}

    @get("/")
    async def app_page(self, request: Req, bus: MessageBus, app: App) -> Page:
        live = await _app_live(request, bus, app)
        logs = await _app_logs(request, bus, live)
        return page(request, "app.html", done=_done(request), **live, **logs)

    @get("/live", opt=FRAGMENT)
    async def app_live(self, request: Req, bus: MessageBus, app: App) -> Page:
        return page(request, "_app_live.html", **await _app_live(request, bus, app))

    @get("/stats", opt=FRAGMENT)
    async def app_stats(self, request: Req, bus: MessageBus, app: App) -> Page:
        """CPU and memory of the app's container, sampled now."""
        error, usage = None, None
        try:
            usage = await bus.handle(
                c.GetInstallationStats(installation_id=app.installation.id), _user(request)
            )
        except ServerUnreachable:
            error = "the server cannot be reached now."
        except RuntimeFailure as exc:
            error = f"Docker refused: {exc}"
        return page(request, "_app_stats.html", error=error, usage=usage)

    @get("/logs")
    async def logs(self, request: Req, app: App) -> Page:
        """The former logs page: its logs are a section of the app's page now."""
        return redirect(request, f"{_app_path(app)}#logs")

    @get("/logs/events", opt=FRAGMENT)
    async def log_events(self, request: Req, bus: MessageBus, app: App) -> ServerSentEvent:
        """The app's output followed, as Server-Sent Events for the page's script (the
        same command as the API's ``logs?follow=1``): the last lines, then each new one."""
        stream = await bus.handle(
            c.FollowInstallationLogs(
                installation_id=app.installation.id, tail=LOG_LINES, timestamps=True
            ),
            _user(request),
        )

        def shape(raw: str) -> tuple[str, str | None]:
            line = log_line(raw)
            return line.text, line.at

        return log_events(request, stream, shape)

    @get("/logs/download")
    async def download_logs(self, request: Req, bus: MessageBus, app: App) -> Response[str]:
        """The output as a text file: the container's last lines with Docker's times, or,
        without a container, what its last failed deployment captured."""
        live = await _app_live(request, bus, app)
        logs = await _app_logs(request, bus, live, tail=MAX_DOWNLOAD)
        if logs["log_lines"]:
            text = "".join(f"{line.at or ''} {line.text}\n".lstrip() for line in logs["log_lines"])
        else:
            text = "".join(f"{line}\n" for line in logs["captured"])
        return Response(
            text,
            media_type="text/plain",
            headers={
                **SECURITY_HEADERS,
                # The container name ([a-z0-9_.-]), not the app's name: no quote or
                # newline can reach the header.
                "Content-Disposition": (
                    f'attachment; filename="{app.installation.container_name}.log"'
                ),
            },
        )


def _app_path(app: App) -> str:
    return f"/servers/{app.server.id}/installations/{app.installation.id}"


async def _app_live(request: Req, bus: MessageBus, app: App) -> dict[str, Any]:
    """What the app page's live part shows, read through the same commands as the API."""
    server, installation = app.server, app.installation
    user = _user(request)
    listed = await bus.handle(
        c.ListRevisions(installation_id=installation.id, limit=REVISIONS + 1), user
    )
    shown, older = listed.deployments[:REVISIONS], listed.deployments[REVISIONS:]
    revs = revisions(
        shown, older[0] if older else None, installation.current_deployment_id, datetime.now(UTC)
    )
    active = [r.deployment for r in revs if not r.deployment.state.is_final]
    wanted = request.query_params.get("deployment", "")
    open_id = next((r.deployment.id for r in revs if str(r.deployment.id) == wanted), None)
    if open_id is None and active:
        open_id = active[0].id
    status = installation.status.value.replace("_", " ")
    newest = revs[0].deployment if revs else None
    announce = f"{installation.name}: {status}."
    if newest is not None and not newest.state.is_final:
        announce = f"{installation.name}: deployment {newest.state.value}" + (
            f" ({newest.step})." if newest.step else "."
        )
    return {
        "server": server,
        "installation": installation,
        "url": _app_url(server, installation),
        "revisions": revs,
        "more": older != [],
        "open_id": open_id,
        "active": active,
        "busy": bool(active),
        "follow": [d.id for d in active],
        "announce": announce,
        "current": next((r for r in revs if r.current), None),
    }


async def _app_logs(
    request: Req, bus: MessageBus, live: dict[str, Any], tail: int = LOG_LINES
) -> dict[str, Any]:
    """The app's last output lines (``?q=`` marks the lines that contain it); with no
    container, the output its newest failed deployment captured, and what it hints."""
    installation: Installation = live["installation"]
    query = request.query_params.get("q", "").strip()[:200]
    lines: list[LogLine] = []
    error = None
    container = None
    try:
        logs = await bus.handle(
            c.InstallationLogs(installation_id=installation.id, tail=tail, timestamps=True),
            _user(request),
        )
        lines, container = [log_line(raw, query) for raw in logs.lines], logs.container_id
    except ServerUnreachable:
        error = "The server cannot be reached now: no output to show."
    except RuntimeFailure as exc:
        error = f"Docker refused: {exc}"
    failed = None
    if container is None:
        failed = next((r for r in live["revisions"] if r.output), None)
    return {
        "log_lines": lines,
        "log_query": query,
        "log_error": error,
        "log_matches": sum(line.matches for line in lines),
        "has_container": container is not None,
        "failed": failed,
        "captured": failed.output if failed else [],
    }


# --- settings --------------------------------------------------------------------------


class SettingsPages(Controller):
    """Settings → API Token: its first characters and last use; generate or regenerate.
    Settings → Registries: private registries' credentials: list, add, remove."""

    path = "/settings"

    @get("/")
    async def settings(self, request: Req, bus: MessageBus) -> Page:
        return await self._page(request, bus)

    async def _page(
        self,
        request: Req,
        bus: MessageBus,
        *,
        status: int = 200,
        new_token: str | None = None,
        registry_form: RegistryForm | None = None,
        replace_url: str | None = None,
    ) -> Page:
        user = _user(request)
        token = await bus.handle(c.TokenInfo(), user)
        registries = await bus.handle(c.ListRegistries(), user)
        return page(
            request,
            "settings.html",
            status=status,
            token=token,
            new_token=new_token,
            registries=registries,
            registry_form=registry_form or RegistryForm(),
            done=_done(request),
            replace_url=replace_url,
        )

    @post("/registries")
    async def add_registry(self, request: Req, bus: MessageBus) -> Page:
        form = await read_form(request)
        shown, command = parse_registry_form(form)
        if command is None:
            return await self._page(request, bus, status=422, registry_form=shown)
        try:
            await bus.handle(command, _user(request))
        except Conflict as exc:
            shown.errors["host"] = exc.detail
            return await self._page(request, bus, status=409, registry_form=shown)
        return redirect(request, "/settings?done=registry-added#registries")

    @post("/registries/{registry_id:str}/delete")
    async def remove_registry(
        self, request: Req, bus: MessageBus, registry_id: FromPath[str]
    ) -> Page:
        form = await read_form(request)
        rid = _id(registry_id, "Registry")
        user = _user(request)
        found = [r for r in await bus.handle(c.ListRegistries(), user) if r.id == rid]
        if not found:
            raise NotFound("Registry not found.")
        if form.get("confirm") != "yes":
            return _confirm(
                request,
                form,
                title=f"Remove the credentials for {found[0].host}?",
                message="Deploys of images from this registry pull without credentials "
                "from now on.",
                button="Remove registry",
                back="/settings#registries",
            )
        await bus.handle(c.RemoveRegistry(registry_id=rid), user)
        return redirect(request, "/settings?done=registry-removed#registries")

    @post("/token")
    async def token(self, request: Req, bus: MessageBus) -> Page:
        form = await read_form(request)
        user = _user(request)
        current = await bus.handle(c.TokenInfo(), user)
        if current is not None and form.get("confirm") != "yes":
            return _confirm(
                request,
                form,
                title="Regenerate the API token?",
                message=(
                    f"The current token ({current.prefix}…) stops working at once: "
                    "scripts and agents that use it get 401 until they have the new one."
                ),
                button="Regenerate token",
                back="/settings",
            )
        new_token = await bus.handle(c.RegenerateToken(), user)
        return await self._page(
            request, bus, status=201, new_token=new_token, replace_url="/settings"
        )

    @get("/token")
    async def token_address(self, request: Req) -> Page:
        """The address a new token's page stood at: reached again (reload, back, a link),
        it is the settings page, never a form sent twice nor a bare 405."""
        return redirect(request, "/settings")
