"""``/api/agent/install`` and ``/api/agent/installations``: your apps on a server, their
output, usage, revisions, rollback, stop/start/restart and removal."""

from __future__ import annotations

from typing import Any

import msgspec
from berth.core import commands as c
from berth.core.models import InstallationStatus
from berth.core.paging import page
from litestar import Controller, Request, Response, delete, get, post
from litestar.di import NamedDependency
from litestar.params import JSONBody
from litestar.response import Stream

from ...settings import Settings
from ..errors import problem_response as problem
from ..events import log_stream
from ..openapi import documented
from ..parameters import (
    PAGE_DEFAULT,
    Before,
    Cursor,
    Follow,
    IdempotencyKey,
    Include,
    InstallationId,
    InstallationStatusQuery,
    ListLimit,
    NameQuery,
    PageLimit,
    ServerQuery,
    Tail,
    Wait,
)
from ..schemas import (
    DeployHookCreatedOut,
    DeployHookOut,
    DeploymentListOut,
    DeployOut,
    InstallationListOut,
    InstallationOut,
    InstallationStatsOut,
    ListingResponse,
    LogsOut,
    deploy_hook_out,
    deployment_list_out,
    installation_list_out,
    installation_out,
    installation_stats_out,
    logs_out,
)
from .common import DOCKER, READ, WRITE, Caller, answer, queued
from .hooks import hook_url

__all__ = ["InstallationController"]

_CHANGE = {
    **READ,
    409: problem(
        "Refused, nothing changed; `type` says why: `deployment-running` (a deployment of it "
        "is queued or running: wait for it), `installation-removed`, or "
        "`revision-unavailable` (no succeeded revision, so no container, to act on)."
    ),
    502: problem("Docker refused."),
    503: problem("The server is unreachable."),
}


def _lifecycle(action: c.InstallationAction, summary: str, description: str) -> Any:
    """The route ``POST /installations/{installationId}/<action>``: stop, start or restart.

    Each gets a name of its own: Litestar orders a controller's handlers by name, then by
    their objects' addresses, so three handlers named alike came in a different order in
    each process (and the OpenAPI document with them)."""

    async def change(
        self: Any, caller: NamedDependency[Caller], installation_id: InstallationId
    ) -> InstallationOut:
        command = c.ChangeInstallation(installation_id=installation_id, action=action)
        server, found = await caller(command)
        return installation_out(server, found)

    change.__name__ = change.__qualname__ = f"{action.value}_installation"
    return documented(
        post,
        f"/installations/{{installationId:str}}/{action.value}",
        f"{action.value}Installation",
        status_code=200,
        responses=_CHANGE,
        summary=summary,
        description=description + " Recorded as an event of that revision.",
        response_description="The installation.",
    )(change)


class InstallationController(Controller):
    path = "/"

    @documented(
        get, "/install", "listInstallations", responses=READ, response_class=ListingResponse
    )
    async def list_installations(
        self,
        caller: NamedDependency[Caller],
        server_id: ServerQuery,
        include: Include = None,
        status: InstallationStatusQuery = None,
        name: NameQuery = None,
        limit: ListLimit = None,
        cursor: Cursor = None,
    ) -> InstallationListOut:
        """Installations on one of your servers

        The apps berth manages on the server `serverId`, each with its status and its last
        deployment. Env values are never returned, only `envKeys`. Removed installations are
        left out unless `include=removed`.

        Returns:
            The server's installations.
        """
        listing = c.ListInstallations(
            server_id=server_id,
            include_removed=include is not None,
            status=None if status is None else InstallationStatus(status),
            name=name,
        )
        found = await caller(listing)
        if limit is None and cursor is None:  # the whole list: encoded once (ListingResponse)
            return installation_list_out(found.server, found.installations)
        shown = page(
            found.installations, limit=limit, cursor=cursor, key=lambda i: i.id, what="installation"
        )
        listed = installation_list_out(found.server, shown.items)
        return msgspec.structs.replace(listed, next_cursor=shown.next_cursor)

    @documented(get, "/installations/{installationId:str}", "getInstallation", responses=READ)
    async def get_installation(
        self, caller: NamedDependency[Caller], installation_id: InstallationId
    ) -> InstallationOut:
        """One installation

        An app of yours by id, with its status, URL and last deployment.

        Returns:
            The installation.
        """
        server, found = await caller(c.GetInstallation(installation_id=installation_id))
        return installation_out(server, found)

    @documented(
        get, "/installations/{installationId:str}/logs", "getInstallationLogs", responses=DOCKER
    )
    async def installation_logs(
        self,
        request: Request[Any, Any, Any],
        caller: NamedDependency[Caller],
        installation_id: InstallationId,
        tail: Tail = c.TAIL_DEFAULT,
        follow: Follow = 0,
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
            command = c.FollowInstallationLogs(installation_id=installation_id, tail=tail)
            return log_stream(request, await caller(command))
        logs = await caller(c.InstallationLogs(installation_id=installation_id, tail=tail))
        return logs_out(logs)

    @documented(
        get,
        "/installations/{installationId:str}/logs/follow",
        "followInstallationLogs",
        responses=DOCKER,
        media_type="text/plain",
    )
    async def follow_installation_logs(
        self,
        request: Request[Any, Any, Any],
        caller: NamedDependency[Caller],
        installation_id: InstallationId,
        tail: Tail = c.TAIL_DEFAULT,
    ) -> Stream:
        """An installation's container output as a live stream

        The output as it is written (`text/plain`, one line each, UTF-8): the last `tail`
        lines (default 100), then each new line as the container writes it, until the
        container stops or is replaced (the stream then ends); env values redacted line by
        line. An installation without a container, or removed, streams nothing and ends. A
        stream ends within 5 s of its token's revocation. The same stream as
        `GET /api/agent/installations/{installationId}/logs?follow=1`, as an operation of
        its own: its answer is always text, never the JSON of the last lines.

        Returns:
            The container's output, a line each, as it is written: a text stream.

        Raises:
            429: As many streams are open as allowed, yours or this berth's
                (`too-many-streams`, detail names the limit).
        """
        command = c.FollowInstallationLogs(installation_id=installation_id, tail=tail)
        return log_stream(request, await caller(command))

    @documented(
        get, "/installations/{installationId:str}/stats", "getInstallationStats", responses=DOCKER
    )
    async def installation_stats(
        self, caller: NamedDependency[Caller], installation_id: InstallationId
    ) -> InstallationStatsOut:
        """CPU and memory of an installation's container, sampled now

        One sample from the server's Docker Engine (as `docker stats --no-stream`; it takes
        about a second): CPU in percent of one CPU, memory without the page cache, and the
        memory limit. The installation's running container, else its newest; `containerId`
        and `stats` are null when it has none (never deployed, or removed), and the figures
        null when it is not running. An unreachable server is a 503.

        Returns:
            The installation's container and what it uses.
        """
        result = await caller(c.GetInstallationStats(installation_id=installation_id))
        return installation_stats_out(result)

    @documented(delete, "/installations/{installationId:str}", "removeInstallation", responses=READ)
    async def remove_installation(
        self, caller: NamedDependency[Caller], installation_id: InstallationId
    ) -> None:
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
        await caller(c.RemoveInstallation(installation_id=installation_id))

    @documented(
        get,
        "/installations/{installationId:str}/deployments",
        "listInstallationDeployments",
        responses=READ,
    )
    async def list_revisions(
        self,
        caller: NamedDependency[Caller],
        installation_id: InstallationId,
        limit: PageLimit = PAGE_DEFAULT,
        before: Before = None,
    ) -> DeploymentListOut:
        """An installation's deployments (its revisions), newest first

        Every deployment of the installation, newest first, a page at a time: `limit` per
        page (1-100, default 20), and `before` = the previous page's `nextBefore`. Kept
        after the installation is removed. A succeeded one is a revision you can roll back
        to.

        Returns:
            A page of deployments; `nextBefore` is null on the last page.
        """
        page = c.ListRevisions(installation_id=installation_id, limit=limit, before=before)
        return deployment_list_out(await caller(page))

    @documented(
        post,
        "/installations/{installationId:str}/rollback",
        "rollback",
        status_code=202,
        responses={
            **WRITE,
            200: answer(
                DeployOut,
                "With `?wait`: the rollback reached a final state within the wait "
                "(`deployment.state` says which).",
            ),
        },
    )
    async def rollback(
        self,
        caller: NamedDependency[Caller],
        installation_id: InstallationId,
        wait: Wait = None,
        idempotency_key: IdempotencyKey = None,
        data: JSONBody[c.Rollback | None] = None,
    ) -> Response[DeployOut]:
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
        command = c.Rollback(
            installation_id=installation_id,
            deployment_id=data.deployment_id if data else None,
            idempotency_key=idempotency_key,
            wait=float(wait or 0),
        )
        return await queued(caller, await caller(command), wait)

    @documented(
        post,
        "/installations/{installationId:str}/deploy-hook",
        "createDeployHook",
        responses={
            **WRITE,
            409: problem(
                "No hook: `not-built-from-git` (the app is deployed from an image or an "
                "upload) or `installation-removed`."
            ),
        },
    )
    async def create_deploy_hook(
        self,
        caller: NamedDependency[Caller],
        installation_id: InstallationId,
        request: Request[Any, Any, Any],
        settings: NamedDependency[Settings],
    ) -> DeployHookCreatedOut:
        """Make (or rotate) an installation's push-to-deploy hook

        Gives the installation, built from Git, a URL to add as a webhook of its repository
        (GitHub: Settings → Webhooks, content type `application/json`, the push event;
        Gitea/Forgejo: Settings → Webhooks → Gitea, the push event) and a secret to sign its
        deliveries with. A push to the branch the app is built from (`build.git.ref`, or the
        repository's default branch) deploys the pushed commit with the app's last spec and
        env; see `receivePush`. The secret is in this answer only: a new POST gives a new
        one (the URL stays, the old secret stops signing).

        Returns:
            The hook: its URL and its secret (shown once).
        """
        created = await caller(c.CreateDeployHook(installation_id=installation_id))
        out = deploy_hook_out(created.hook, hook_url(request, settings, created.hook.id))
        return DeployHookCreatedOut(**msgspec.structs.asdict(out), secret=created.secret)

    @documented(
        get, "/installations/{installationId:str}/deploy-hook", "getDeployHook", responses=READ
    )
    async def get_deploy_hook(
        self,
        caller: NamedDependency[Caller],
        installation_id: InstallationId,
        request: Request[Any, Any, Any],
        settings: NamedDependency[Settings],
    ) -> DeployHookOut:
        """An installation's push-to-deploy hook

        Its URL and when it was made; never its secret (make a new one with a POST). A 404
        when the installation has none.

        Returns:
            The app's hook: its URL (its secret is never shown again).
        """
        hook = await caller(c.GetDeployHook(installation_id=installation_id))
        return deploy_hook_out(hook, hook_url(request, settings, hook.id))

    @documented(
        delete,
        "/installations/{installationId:str}/deploy-hook",
        "removeDeployHook",
        responses=READ,
    )
    async def remove_deploy_hook(
        self, caller: NamedDependency[Caller], installation_id: InstallationId
    ) -> None:
        """Remove an installation's push-to-deploy hook

        Its URL deploys nothing from then on (a 404); a deployment it queued goes on.

        Returns:
            Removed: its URL deploys nothing from now on.
        """
        await caller(c.RemoveDeployHook(installation_id=installation_id))

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
