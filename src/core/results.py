"""Results: what handling a command returns, when it is more than a model.

``Command[R]`` names its result here (``DeployCommand`` is a ``Command[DeployResult]``),
so commands and use cases need not import each other, and an entrypoint renders a
result without knowing the use case that made it.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime
from uuid import UUID

import msgspec
import structlog

from .errors import RuntimeFailure, ServerUnreachable, StoreUnavailable
from .models import (
    Container,
    ContainerStats,
    DeployHook,
    Deployment,
    DeploymentEvent,
    DeploymentState,
    DiskUsage,
    Installation,
    Server,
    ServerStatus,
    User,
    Webhook,
    WebSession,
)
from .redaction import redact_line

__all__ = [
    "ContainerList",
    "CreatedDeployHook",
    "CreatedServer",
    "CreatedWebhook",
    "DeployResult",
    "DeploymentFeed",
    "DeploymentPage",
    "FeedEnd",
    "FeedEvent",
    "FeedHeartbeat",
    "FeedItem",
    "FeedPage",
    "InstallationList",
    "InstallationUsage",
    "LogStream",
    "Logs",
    "NewSession",
    "PushOutcome",
    "ServerDisk",
    "SignUpMode",
    "WebhookTestResult",
]

log = structlog.get_logger()


# --- deployments ---------------------------------------------------------------------------


class DeployResult(msgspec.Struct, frozen=True, kw_only=True):
    """A deployment queued (or replayed), as it stands when the flow answers, with its
    installation and server."""

    deployment: Deployment
    installation: Installation
    replayed: bool = False  # True when an Idempotency-Key returned an earlier deployment
    server: Server | None = None  # the server, as the deploy flow read it last


class CreatedDeployHook(msgspec.Struct, frozen=True, kw_only=True):
    """An installation's deploy hook, made or rotated, and its signing secret: the one time
    the secret is shown."""

    hook: DeployHook
    secret: str

    def __repr__(self) -> str:
        return f"CreatedDeployHook(hook={self.hook!r}, secret=<hidden>)"

    __str__ = __repr__


class PushOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What a push told to a deploy hook did: the deployment it queued, or ``None`` and
    ``detail`` saying why it was ignored (another branch, a tag, a ping)."""

    deployment: Deployment | None
    detail: str


class DeploymentPage(msgspec.Struct, frozen=True, kw_only=True):
    """A page of an installation's deployments, newest first; ``next_before`` asks for the
    next (older) page, ``None`` on the last one."""

    installation_id: UUID
    deployments: list[Deployment]
    next_before: UUID | None


class FeedEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One event of the deployment's log, with its id (the resume point)."""

    id: int
    event: DeploymentEvent


class FeedHeartbeat(msgspec.Struct, frozen=True, kw_only=True):
    """Nothing happened for a while: something to send so proxies keep the stream open."""


class FeedEnd(msgspec.Struct, frozen=True, kw_only=True):
    """The deployment is final and every event of it was sent: the feed's last item."""

    state: DeploymentState


FeedItem = FeedEvent | FeedHeartbeat | FeedEnd
#: A deployment's state and its next events (with their ids), as the store reads them.
FeedPage = tuple[DeploymentState, list[tuple[int, DeploymentEvent]]]


@dataclass(eq=False)
class DeploymentFeed:
    """The items of one deployment's log after ``after_id``: events, heartbeats, its end.

    Iterate it once. It ends after ``FeedEnd``, or with nothing more if the deployment
    disappears meanwhile (its server was deleted: ``read`` gives ``None``). A store that
    fails a read is read again at the next poll; heartbeats go on meanwhile. ``first``
    is the page read already; ``read`` returns the events after an id, at most ``page``
    of them; ``pause`` waits up to a number of seconds (less when the deployment ends
    in this process).
    """

    deployment_id: UUID
    after_id: int
    first: FeedPage | None
    _: KW_ONLY
    read: Callable[[int], Awaitable[FeedPage | None]]
    pause: Callable[[float], Awaitable[None]]
    page: int
    poll: float
    heartbeat: float

    @property
    def spent(self) -> bool:
        """Whether the deployment has ended and no event follows ``after_id``: all a
        reader resuming there could get is the end it has seen (so, before iterating)."""
        return self.first is not None and self.first[0].is_final and not self.first[1]

    def __aiter__(self) -> AsyncIterator[FeedItem]:
        return self._items()

    async def _items(self) -> AsyncIterator[FeedItem]:
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        while True:
            page = self.first
            self.first = None
            if page is None:
                try:
                    page = await self.read(self.after_id)
                except StoreUnavailable:
                    log.warning("feed_read_failed", deployment_id=str(self.deployment_id))
                    page = (DeploymentState.RUNNING, [])  # nothing known: poll again
                else:
                    if page is None:
                        return  # gone (its server was deleted)
            state, events = page
            for event_id, event in events:
                self.after_id = event_id
                yield FeedEvent(id=event_id, event=event)
            if events:
                quiet_since = loop.time()
            if len(events) >= self.page:
                continue  # more may be waiting: read on at once
            if state.is_final:
                yield FeedEnd(state=state)
                return
            if loop.time() - quiet_since >= self.heartbeat:
                quiet_since = loop.time()
                yield FeedHeartbeat()
            await self.pause(self.poll)


# --- installations and servers -------------------------------------------------------------


class InstallationList(msgspec.Struct, frozen=True, kw_only=True):
    server: Server
    installations: list[Installation]


class ContainerList(msgspec.Struct, frozen=True, kw_only=True):
    server_id: UUID
    observed_at: datetime | None
    server_status: ServerStatus  # online or offline, never pending
    containers: tuple[Container, ...]


class Logs(msgspec.Struct, frozen=True, kw_only=True):
    """The last lines of an installation's container, env values redacted."""

    installation_id: UUID
    container_id: str | None
    lines: list[str]


@dataclass(eq=False)
class LogStream:
    """An installation's container output, followed: its last lines, then new ones until
    the container stops (env values redacted, line by line: ``env`` is the container's,
    never shown). Iterate it once; closing the iteration (the client went away) stops
    the reading on the server."""

    installation_id: UUID
    container_id: str | None
    lines: AsyncIterator[str] | None = field(repr=False)
    env: dict[str, str] = field(repr=False)
    timestamps: bool = False

    def __aiter__(self) -> AsyncIterator[str]:
        return self._redacted()

    async def _redacted(self) -> AsyncIterator[str]:
        if self.lines is None:
            return
        lines = self.lines
        try:
            async for line in lines:
                yield redact_line(line, self.env, self.timestamps)
        except (RuntimeFailure, ServerUnreachable) as exc:  # the stream broke: its end
            log.info("log_stream_ended", installation_id=str(self.installation_id), reason=str(exc))
        finally:
            close = getattr(lines, "aclose", None)
            if close is not None:
                await close()


class InstallationUsage(msgspec.Struct, frozen=True, kw_only=True):
    """An installation's container (its running one, else its newest) and one sample of
    what it uses; both ``None`` when it has no container (never deployed, or removed)."""

    installation_id: UUID
    container_id: str | None
    stats: ContainerStats | None


class ServerDisk(msgspec.Struct, frozen=True, kw_only=True):
    """What Docker keeps on a server's disk."""

    server_id: UUID
    usage: DiskUsage


class CreatedServer(msgspec.Struct, frozen=True, kw_only=True):
    """A server just added (or a pending one's new token) and its one-time enrollment
    token: the one time it is shown."""

    server: Server
    enrollment_token: str


# --- webhooks and accounts -----------------------------------------------------------------


class CreatedWebhook(msgspec.Struct, frozen=True, kw_only=True):
    """A new webhook and its signing secret: the one time the secret is shown."""

    webhook: Webhook
    secret: str


class WebhookTestResult(msgspec.Struct, frozen=True, kw_only=True):
    """How a webhook's endpoint answered a test event sent now: its status code (``None``:
    no answer) and, unless ``delivered`` (a 2xx), what went wrong in words."""

    webhook_id: UUID
    event: str
    at: datetime
    delivered: bool
    status_code: int | None
    error: str | None


class NewSession(msgspec.Struct, frozen=True, kw_only=True):
    """A session just begun: ``session_id`` goes into the cookie and exists nowhere else."""

    user: User
    session_id: str
    session: WebSession

    def __repr__(self) -> str:  # never print the id, e.g. in a traceback
        return f"NewSession(user={self.user.id}, expires_at={self.session.expires_at})"


class SignUpMode(enum.StrEnum):
    """Who may create an account right now."""

    FIRST = "first"  # nobody has: the first account of this install (with the setup code)
    OPEN = "open"  # anybody (the operator turned open sign-up on)
    INVITE = "invite"  # only the holder of an invitation
