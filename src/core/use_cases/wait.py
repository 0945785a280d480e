"""Waiting for a deployment to end: written once, for ``?wait``, the CLI, MCP and the library."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from uuid import UUID

from .. import commands as c
from ..access import Actor
from ..events import DeploymentFinished
from ..models import Deployment
from .deployments import GetDeployment

__all__ = ["WaitForDeployment", "Waiters"]


class Waiters:
    """In-process wake-ups for callers waiting on a deployment (``DeploymentFinished``),
    and which deployments a worker of this process runs (``running``): a waiter on one
    of those needs the store only now and then, as its end is told here."""

    def __init__(self) -> None:
        self._events: dict[UUID, asyncio.Event] = {}
        self._here: set[UUID] = set()

    def finished(self, ended: DeploymentFinished) -> None:
        """Wake everyone waiting on the deployment that ``ended``."""
        self._wake(ended.deployment_id)

    @contextlib.contextmanager
    def running(self, deployment_id: UUID) -> Iterator[None]:
        """A worker of this process runs ``deployment_id`` inside the block; its waiters
        are woken when it leaves (finished, or given up: they read the store then)."""
        self._here.add(deployment_id)
        try:
            yield
        finally:
            self._here.discard(deployment_id)
            self._wake(deployment_id)

    async def pause(self, deployment_id: UUID, seconds: float, poll: float | None = None) -> None:
        """Return when ``deployment_id`` finishes in this process, or after ``seconds`` --
        after ``poll`` seconds at the most unless a worker of this process runs it."""
        event = self._events.setdefault(deployment_id, asyncio.Event())
        if poll is not None and deployment_id not in self._here:
            seconds = min(seconds, poll)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await event.wait()

    def _wake(self, deployment_id: UUID) -> None:
        event = self._events.pop(deployment_id, None)
        if event is not None:
            event.set()


class WaitForDeployment:
    """The deployment once final, or as it stands when ``seconds`` have passed.

    A worker in this process wakes the waiter at once. The store is read again every
    ``poll`` seconds while the deployment is not run here (queued, or run by a worker
    in another process), and every ``here_poll`` seconds while it is: a safety net
    only, as the run here tells its end (``Waiters.running``). Twenty deploys waited
    on had read the store forty times a second.
    """

    def __init__(
        self, get: GetDeployment, waiters: Waiters, *, poll: float = 0.5, here_poll: float = 5.0
    ) -> None:
        self._get = get
        self._waiters = waiters
        self._poll = poll
        self._here_poll = here_poll

    async def __call__(self, owner: Actor, cmd: c.WaitForDeployment) -> Deployment:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + cmd.seconds
        read = c.GetDeployment(deployment_id=cmd.deployment_id)
        deployment = await self._get(owner, read)
        while not deployment.state.is_final:
            left = deadline - loop.time()
            if left <= 0:
                break
            await self._waiters.pause(deployment.id, min(self._here_poll, left), self._poll)
            deployment = await self._get(owner, read)
        return deployment
