"""Apps' statuses as they change, for the app page and the server page's app list: an
event stream their script listens to instead of polling (issue 24).

``GET /servers/{id}/apps/events`` (``?installation=`` for one app) reads the server's
installations through the same command as the API (``ListInstallations``) every ``POLL``
seconds -- the store is what every replica and worker share, as a deployment's feed
reads it -- and sends ``event: status`` with their ``status_key`` each time it changed
(first on connecting). The page renders the same key in its live region
(``data-status-key``): its script fetches the region again only when the two differ.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Annotated, Any

from berth.core import commands as c
from berth.core.errors import NotFound
from berth.core.models import Installation, Server, User
from berth.core.results import InstallationList
from litestar import Controller, Request, get
from litestar.di import NamedDependency
from litestar.params import FromPath, QueryParameter
from litestar.response import ServerSentEvent
from litestar.response.sse import ServerSentEventMessage

from ..controllers.common import Caller
from ..events import RETRY_MS
from ..streams import guarded
from .web import FRAGMENT, uuid_or_404

__all__ = ["POLL", "LiveStatus", "status_key"]

#: Seconds between two reads of the store by one stream.
POLL = 1.0
#: Seconds without a change after which a comment keeps proxies from closing the stream.
HEARTBEAT = 15.0


def status_key(installations: Iterable[Installation], server: Server | None = None) -> str:
    """What a page's live region shows of apps' statuses, as one string: each app's
    status, exit code, restart count and last deployment (and the server's status, for
    the server page). Two renderings with the same key show the same statuses."""
    parts = [f"server:{server.status.value}"] if server is not None else []
    for app in sorted(installations, key=lambda i: str(i.id)):
        last = app.last_deployment
        fields = (app.status.value, app.exit_code, app.restart_count)
        deployment = (last.id, last.state.value) if last is not None else ("", "")
        parts.append(":".join(str(f) for f in (app.id, *fields, *deployment)))
    return " ".join(parts)


def _key(listed: InstallationList, installation: str | None) -> str:
    if installation is None:
        return status_key(listed.installations, listed.server)
    return status_key(i for i in listed.installations if str(i.id) == installation)


class LiveStatus(Controller):
    """The statuses of one of the caller's servers' apps, streamed (another user's server
    is a 404, before anything is streamed)."""

    path = "/servers/{server_id:str}/apps/events"

    @get("/", opt=FRAGMENT)
    async def app_statuses(
        self,
        request: Request[User, Any, Any],
        caller: NamedDependency[Caller],
        server_id: FromPath[str],
        installation: Annotated[str | None, QueryParameter(name="installation")] = None,
    ) -> ServerSentEvent:
        """``event: status`` with the apps' ``status_key`` whenever it changes."""
        listing = c.ListInstallations(
            server_id=uuid_or_404(server_id, "Server"), include_removed=True
        )
        first = await caller(listing)

        async def messages() -> AsyncIterator[ServerSentEventMessage]:
            yield ServerSentEventMessage(data=None, retry=RETRY_MS)
            sent, quiet, listed = None, 0.0, first
            while True:
                key = _key(listed, installation)
                if key != sent:
                    yield ServerSentEventMessage(event="status", data=key)
                    sent, quiet = key, 0.0
                elif quiet >= HEARTBEAT:
                    yield ServerSentEventMessage(data=None, comment="keep-alive")
                    quiet = 0.0
                await asyncio.sleep(POLL)
                quiet += POLL
                try:
                    listed = await caller(listing)
                except NotFound:  # the server was deleted meanwhile
                    return

        return ServerSentEvent(guarded(request, messages()))
