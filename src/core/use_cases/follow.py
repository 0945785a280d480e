"""Follow a deployment: its past events, then its live ones, until it ends.

The store is the only source (so a stream served by one API replica shows what a
worker in another process writes): the feed reads the events after the last one it
sent every ``poll`` seconds. A worker in this process makes it read sooner when the
deployment ends (``Waiters``, woken by ``DeploymentFinished``).
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from functools import partial
from uuid import UUID

from .. import commands as c
from ..access import Actor
from ..errors import NotFound
from ..results import DeploymentFeed, FeedPage
from .owned import UsesStore
from .wait import Waiters

__all__ = ["PAGE", "FollowDeployment"]

#: Events read from the store at once; a full page is followed at once by the next.
PAGE = 100


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

    async def _read(self, owner: Actor, deployment_id: UUID, after_id: int) -> FeedPage | None:
        """The deployment's state and its next page of events, or ``None`` if not the owner's."""
        async with self._uow() as uow:
            return await uow.deployments.events_after(owner.scope, deployment_id, after_id, PAGE)

    async def __call__(self, owner: Actor, cmd: c.FollowDeployment) -> DeploymentFeed:
        deployment_id, after_id = cmd.deployment_id, cmd.after
        first = await self._read(owner, deployment_id, after_id)
        if first is None:
            raise NotFound("Deployment not found.")
        return DeploymentFeed(
            deployment_id,
            after_id,
            first,
            read=partial(self._read, owner, deployment_id),
            pause=partial(self.waiters.pause, deployment_id),
            page=PAGE,
            poll=self.poll,
            heartbeat=self.heartbeat,
        )
