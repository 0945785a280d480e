"""Waiting for a deployment to end: written once, for ``?wait``, the CLI, MCP and the library."""

from __future__ import annotations

import asyncio
import contextlib
from uuid import UUID

from .. import commands as c
from ..access import Actor
from ..events import DeploymentFinished
from ..models import Deployment
from .deployments import GetDeployment

__all__ = ["WaitForDeployment", "Waiters"]


class Waiters:
    """In-process wake-ups for callers waiting on a deployment (``DeploymentFinished``)."""

    def __init__(self) -> None:
        self._events: dict[UUID, asyncio.Event] = {}

    def finished(self, ended: DeploymentFinished) -> None:
        """Wake everyone waiting on the deployment that ``ended``."""
        event = self._events.pop(ended.deployment_id, None)
        if event is not None:
            event.set()

    async def pause(self, deployment_id: UUID, seconds: float) -> None:
        """Return when ``deployment_id`` finishes in this process, or after ``seconds``."""
        event = self._events.setdefault(deployment_id, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await event.wait()


class WaitForDeployment:
    """The deployment once final, or as it stands when ``seconds`` have passed.

    A worker in this process wakes the waiter at once; the store is read again at
    least every ``poll`` seconds all the same, for a worker in another process and
    for an end that came just before the waiter began to listen.
    """

    def __init__(self, get: GetDeployment, waiters: Waiters, *, poll: float = 0.5) -> None:
        self._get = get
        self._waiters = waiters
        self._poll = poll

    async def __call__(self, owner: Actor, cmd: c.WaitForDeployment) -> Deployment:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + cmd.seconds
        read = c.GetDeployment(deployment_id=cmd.deployment_id)
        deployment = await self._get(owner, read)
        while not deployment.state.is_final:
            left = deadline - loop.time()
            if left <= 0:
                break
            await self._waiters.pause(deployment.id, min(self._poll, left))
            deployment = await self._get(owner, read)
        return deployment
