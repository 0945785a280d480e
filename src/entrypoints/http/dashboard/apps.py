"""An app's page (an installation): its revision and status, URL and HTTPS, revision
history with what changed, actions, CPU and memory, and its logs, followed live.

The page renders whole without JavaScript (forms post back here with ``from=app``); its
script refreshes ``…/live`` when a deployment's event stream has a step or the app's status
changes (``live_status``), and follows the output through ``…/logs/events`` (the API's
``logs?follow=1`` command).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from berth.core import commands as c
from berth.core.errors import NotFound, RuntimeFailure, ServerUnreachable
from berth.core.models import DeployHook, Installation, Server, User
from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency, Provide
from litestar.params import FromPath, URLEncodedBody
from litestar.response import ServerSentEvent

from ...settings import Settings
from ..controllers.common import Caller
from ..controllers.hooks import hook_url
from ..events import log_events
from .app_view import LogLine, log_line, revisions
from .confirming import Ask, confirm_then_act
from .forms import ActionForm, ConfirmForm
from .live_status import status_key
from .servers import app_url, back
from .web import FRAGMENT, Html, SeeOther, uuid_or_404

__all__ = ["AppPage"]

Req = Request[User, Any, Any]

LOG_LINES = 200
REVISIONS = 20  # revisions listed on an app's page, newest first
MAX_DOWNLOAD = 5000  # lines in a downloaded log


@dataclass(frozen=True, slots=True)
class App:
    """The caller's installation named by the path, with its server."""

    server: Server
    installation: Installation

    @property
    def path(self) -> str:
        return f"/servers/{self.server.id}/installations/{self.installation.id}"


async def _provide_app(
    caller: NamedDependency[Caller],
    server_id: FromPath[str],
    installation_id: FromPath[str],
) -> App:
    """The caller's installation, only if it is on the server the path names."""
    sid = uuid_or_404(server_id, "Server")
    server, installation = await caller(
        c.GetInstallation(installation_id=uuid_or_404(installation_id, "Installation"))
    )
    if server.id != sid:
        raise NotFound("Installation not found.")
    return App(server, installation)


class AppPage(Controller):
    """One app, its fragments and its actions. Every route gets the caller's app from the
    path (``app``): another user's is a 404."""

    path = "/servers/{server_id:str}/installations/{installation_id:str}"
    dependencies = {"app": Provide(_provide_app)}

    @get("/")
    async def app_page(
        self,
        request: Req,
        caller: NamedDependency[Caller],
        app: NamedDependency[App],
        settings: NamedDependency[Settings],
    ) -> Html:
        return await _app_page(request, caller, app, settings)

    @post("/deploy-hook")
    async def deploy_hook(
        self,
        request: Req,
        caller: NamedDependency[Caller],
        app: NamedDependency[App],
        settings: NamedDependency[Settings],
        data: URLEncodedBody[ConfirmForm],
    ) -> Response[Any]:
        """Make the app's deploy hook, or (confirmed) give it a new secret: the page then
        shows its URL and secret, the secret this once."""
        hook = await _hook_of(caller, app)
        if hook is not None and data.confirm != "yes":
            return Html(
                "confirm.html",
                title=f"Give the deploy hook of {app.installation.name} a new secret?",
                message="Pushes signed with the current secret stop deploying at once: paste "
                "the new one into the repository's webhook.",
                button="New secret",
                back=f"{app.path}#push",
            )
        created = await caller(c.CreateDeployHook(installation_id=app.installation.id))
        return await _app_page(request, caller, app, settings, status=201, new_hook=created.secret)

    @post("/deploy-hook/delete")
    async def remove_deploy_hook(
        self,
        caller: NamedDependency[Caller],
        app: NamedDependency[App],
        data: URLEncodedBody[ConfirmForm],
    ) -> Response[Any]:
        ask = Ask(
            data,
            title=f"Remove the deploy hook of {app.installation.name}?",
            message="Pushes to its repository no longer deploy it; its URL answers 404.",
            button="Remove hook",
            back=f"{app.path}#push",
        )
        removal = c.RemoveDeployHook(installation_id=app.installation.id)
        return await confirm_then_act(
            caller, removal, f"{app.path}?done=hook-removed#push", ask=ask
        )

    @get("/live", opt=FRAGMENT)
    async def app_live(
        self,
        request: Req,
        caller: NamedDependency[Caller],
        app: NamedDependency[App],
    ) -> Html:
        return Html("_app_live.html", **await _app_live(request, caller, app))

    @get("/stats", opt=FRAGMENT)
    async def app_stats(
        self,
        caller: NamedDependency[Caller],
        app: NamedDependency[App],
    ) -> Html:
        """CPU and memory of the app's container, sampled now."""
        error, usage = None, None
        try:
            usage = await caller(c.GetInstallationStats(installation_id=app.installation.id))
        except ServerUnreachable:
            error = "the server cannot be reached now."
        except RuntimeFailure as exc:
            error = f"Docker refused: {exc}"
        return Html("_app_stats.html", error=error, usage=usage)

    @get("/logs")
    async def logs(self, app: NamedDependency[App]) -> SeeOther:
        """The former logs page: its logs are a section of the app's page now."""
        return SeeOther(f"{app.path}#logs")

    @get("/logs/events", opt=FRAGMENT)
    async def log_events(
        self,
        request: Req,
        caller: NamedDependency[Caller],
        app: NamedDependency[App],
    ) -> ServerSentEvent:
        """The app's output followed, as Server-Sent Events for the page's script (the
        same command as the API's ``logs?follow=1``): the last lines, then each new one."""
        stream = await caller(
            c.FollowInstallationLogs(
                installation_id=app.installation.id, tail=LOG_LINES, timestamps=True
            )
        )

        def shape(raw: str) -> tuple[str, str | None]:
            line = log_line(raw)
            return line.text, line.at

        return log_events(request, stream, shape)

    @get("/logs/download")
    async def download_logs(
        self,
        request: Req,
        caller: NamedDependency[Caller],
        app: NamedDependency[App],
    ) -> Response[str]:
        """The output as a text file: the container's last lines with Docker's times, or,
        without a container, what its last failed deployment captured."""
        live = await _app_live(request, caller, app)
        logs = await _app_logs(request, caller, live, tail=MAX_DOWNLOAD)
        if logs["log_lines"]:
            text = "".join(f"{line.at or ''} {line.text}\n".lstrip() for line in logs["log_lines"])
        else:
            text = "".join(f"{line}\n" for line in logs["captured"])
        # The container name ([a-z0-9_.-]), not the app's name: no quote or newline can
        # reach the header.
        name = app.installation.container_name
        disposition = {"Content-Disposition": f'attachment; filename="{name}.log"'}
        return Response(text, media_type="text/plain", headers=disposition)

    @post("/remove")
    async def remove(
        self,
        caller: NamedDependency[Caller],
        app: NamedDependency[App],
        data: URLEncodedBody[ConfirmForm],
    ) -> Response[Any]:
        server, installation = app.server, app.installation
        ask = Ask(
            data,
            title=f"Remove {installation.name}?",
            message=(
                f"Its containers are stopped and removed from {server.name}; its "
                "deployments stay in the history. Volumes on the server's disk stay."
            ),
            button="Remove app",
            back=f"/servers/{server.id}",
        )
        removal = c.RemoveInstallation(installation_id=installation.id)
        done = f"/servers/{server.id}?done=installation-removed"
        try:
            return await confirm_then_act(caller, removal, done, ask=ask)
        except ServerUnreachable as exc:
            return Html(
                "error.html",
                status_code=503,
                title=f"{installation.name} was not removed",
                detail=(
                    f"berth cannot reach {server.name} now, so it could not remove the app's "
                    f"containers from it; nothing was changed. Try again once the server is "
                    f"back online. ({exc.detail})"
                ),
            )

    @post("/{action:str}")
    async def change(
        self,
        caller: NamedDependency[Caller],
        app: NamedDependency[App],
        action: FromPath[str],
        data: URLEncodedBody[ActionForm],
    ) -> SeeOther:
        """Stop, start or restart the app (the form's button)."""
        if action not in {a.value for a in c.InstallationAction}:
            raise NotFound("Not found.")
        chosen = c.InstallationAction(action)
        await caller(c.ChangeInstallation(installation_id=app.installation.id, action=chosen))
        done = {"stop": "stopped", "start": "started", "restart": "restarted"}[chosen.value]
        return SeeOther(back(data, app.server.id, app.installation.id, f"done={done}"))

    @post("/rollback/{deployment_id:str}")
    async def rollback(
        self,
        caller: NamedDependency[Caller],
        app: NamedDependency[App],
        deployment_id: FromPath[str],
        data: URLEncodedBody[ActionForm],
    ) -> SeeOther:
        """Deploy that earlier revision again; the page then follows the new deployment."""
        result = await caller(
            c.Rollback(
                installation_id=app.installation.id,
                deployment_id=uuid_or_404(deployment_id, "Deployment"),
            )
        )
        new = result.deployment.id
        return SeeOther(back(data, app.server.id, app.installation.id, f"deployment={new}", new))


async def _hook_of(caller: Caller, app: App) -> DeployHook | None:
    """The app's deploy hook; ``None`` if it has none (or is not built from Git)."""
    build = app.installation.spec.build
    if build is None or build.git is None or app.installation.removed_at is not None:
        return None
    try:
        return await caller(c.GetDeployHook(installation_id=app.installation.id))
    except NotFound:
        return None


async def _app_page(
    request: Req,
    caller: Caller,
    app: App,
    settings: Settings,
    *,
    status: int = 200,
    new_hook: str | None = None,
) -> Html:
    """The whole page: live part, logs, and push to deploy (``new_hook``: a secret just
    made, shown this once)."""
    live = await _app_live(request, caller, app)
    logs = await _app_logs(request, caller, live)
    hook = await _hook_of(caller, app)
    build = app.installation.spec.build
    push: dict[str, Any] = {
        "pushable": build is not None
        and build.git is not None
        and app.installation.removed_at is None,
        "hook": hook,
        "hook_url": hook_url(request, settings, hook.id) if hook is not None else None,
        "new_hook": new_hook,
    }
    extra: dict[str, Any] = {"replace_url": f"{app.path}#push"} if new_hook else {}
    return Html("app.html", status_code=status, **live, **logs, **push, **extra)


async def _app_live(request: Req, caller: Caller, app: App) -> dict[str, Any]:
    """What the app page's live part shows, read through the same commands as the API."""
    server, installation = app.server, app.installation
    listed = await caller(c.ListRevisions(installation_id=installation.id, limit=REVISIONS + 1))
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
        "url": app_url(server, installation),
        "revisions": revs,
        "more": older != [],
        "open_id": open_id,
        "active": active,
        "busy": bool(active),
        "follow": [d.id for d in active],
        "announce": announce,
        "current": next((r for r in revs if r.current), None),
        "status_key": status_key([installation]),
    }


async def _app_logs(
    request: Req, caller: Caller, live: dict[str, Any], tail: int = LOG_LINES
) -> dict[str, Any]:
    """The app's last output lines (``?q=`` marks the lines that contain it); with no
    container, the output its newest failed deployment captured, and what it hints."""
    installation: Installation = live["installation"]
    query = request.query_params.get("q", "").strip()[:200]
    lines: list[LogLine] = []
    error = None
    container = None
    try:
        logs = await caller(
            c.InstallationLogs(installation_id=installation.id, tail=tail, timestamps=True)
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
