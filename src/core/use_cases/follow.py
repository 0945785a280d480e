"""Follow a deployment: its past events, then its live ones, until it ends.

The store is the only source (so a stream served by one API replica shows what a
worker in another process writes): the feed reads the events after the last one it
sent every ``poll`` seconds. A worker in this process makes it read sooner when the
deployment ends (``Waiters``, woken by ``DeploymentFinished``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import KW_ONLY, dataclass
from uuid import UUID

import msgspec
import structlog

from ..errors import NotFound, StoreUnavailable
from ..models import DeploymentEvent, DeploymentState, User
from .owned import UsesStore
from .wait import Waiters

__all__ = ["DeploymentFeed", "FeedEnd", "FeedEvent", "FeedHeartbeat", "FollowDeployment"]

log = structlog.get_logger()

#: Events read from the store at once; a full page is followed at once by the next.
PAGE = 100


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


class DeploymentFeed:
    """The items of one deployment's log after ``after_id``: events, heartbeats, its end.

    Iterate it once. It ends after ``FeedEnd``, or with nothing more if the deployment
    disappears meanwhile (its server was deleted). A store that fails a read is read
    again at the next poll; heartbeats go on meanwhile.
    """

    def __init__(
        self,
        follow: FollowDeployment,
        owner: User,
        deployment_id: UUID,
        after_id: int,
        first: tuple[DeploymentState, list[tuple[int, DeploymentEvent]]],
    ) -> None:
        self._follow = follow
        self._owner = owner
        self.deployment_id = deployment_id
        self._after = after_id
        self._first: tuple[DeploymentState, list[tuple[int, DeploymentEvent]]] | None = first

    def __aiter__(self) -> AsyncIterator[FeedItem]:
        return self._items()

    async def _items(self) -> AsyncIterator[FeedItem]:
        loop = asyncio.get_running_loop()
        follow = self._follow
        quiet_since = loop.time()
        while True:
            page = self._first
            self._first = None
            if page is None:
                try:
                    page = await follow.read(self._owner, self.deployment_id, self._after)
                except StoreUnavailable:
                    log.warning("feed_read_failed", deployment_id=str(self.deployment_id))
                    page = (DeploymentState.RUNNING, [])  # nothing known: poll again
                else:
                    if page is None:
                        return  # gone (its server was deleted)
            state, events = page
            for event_id, event in events:
                self._after = event_id
                yield FeedEvent(id=event_id, event=event)
            if events:
                quiet_since = loop.time()
            if len(events) >= PAGE:
                continue  # more may be waiting: read on at once
            if state.is_final:
                yield FeedEnd(state=state)
                return
            if loop.time() - quiet_since >= follow.heartbeat:
                quiet_since = loop.time()
                yield FeedHeartbeat()
            await follow.waiters.pause(self.deployment_id, follow.poll)


@dataclass(eq=False)
class FollowDeployment(UsesStore):
    """A feed of one of the caller's deployments, from the event after ``after_id``.

    The deployment is read once here, so a deployment that is not the caller's is a
    ``NotFound`` before anything is streamed.
    """

    waiters: Waiters
    _: KW_ONLY
    poll: float = 0.25
    heartbeat: float = 15.0

    async def read(
        self, owner: User, deployment_id: UUID, after_id: int
    ) -> tuple[DeploymentState, list[tuple[int, DeploymentEvent]]] | None:
        """The deployment's state and its next page of events, or ``None`` if not the owner's."""
        async with self._uow() as uow:
            return await uow.deployments.events_after(owner.id, deployment_id, after_id, PAGE)

    async def __call__(self, owner: User, deployment_id: UUID, after_id: int = 0) -> DeploymentFeed:
        first = await self.read(owner, deployment_id, max(0, after_id))
        if first is None:
            raise NotFound("Deployment not found.")
        return DeploymentFeed(self, owner, deployment_id, max(0, after_id), first)
