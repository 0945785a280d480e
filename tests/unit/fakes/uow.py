"""``UnitOfWork`` and its factory over ``FakeStore``."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Self

from berth.core.events import Event
from berth.core.unit_of_work import EventHandlers, RecordedEvents

from .store import (
    FakeAccessTokenRepository,
    FakeAuditRepository,
    FakeDeployHookRepository,
    FakeDeploymentRepository,
    FakeGitCredentialRepository,
    FakeInstallationRepository,
    FakeInviteRepository,
    FakeOAuthRepository,
    FakeRegistryRepository,
    FakeServerRepository,
    FakeSessionRepository,
    FakeStore,
    FakeTeamRepository,
    FakeTokenRepository,
    FakeUserRepository,
    FakeWebhookRepository,
)

__all__ = ["FakeUnitOfWork", "FakeUnitOfWorkFactory"]


class FakeUnitOfWork:
    """A transaction over a :class:`FakeStore`: copy on enter, publish on commit."""

    def __init__(self, store: FakeStore, events: EventHandlers | None = None) -> None:
        self.store = store
        self.recorded = RecordedEvents(events)
        self.box = store.box
        self.working = store.state.copy()
        self.committed = False
        self._held: list[asyncio.Lock] = []
        self.users = FakeUserRepository(self)
        self.tokens = FakeTokenRepository(self)
        self.servers = FakeServerRepository(self)
        self.installations = FakeInstallationRepository(self)
        self.deployments = FakeDeploymentRepository(self)
        self.sessions = FakeSessionRepository(self)
        self.invites = FakeInviteRepository(self)
        self.registries = FakeRegistryRepository(self)
        self.webhooks = FakeWebhookRepository(self)
        self.git_credentials = FakeGitCredentialRepository(self)
        self.deploy_hooks = FakeDeployHookRepository(self)
        self.teams = FakeTeamRepository(self)
        self.access_tokens = FakeAccessTokenRepository(self)
        self.audit = FakeAuditRepository(self)
        self.oauth = FakeOAuthRepository(self)

    async def __aenter__(self) -> Self:
        self.working = self.store.state.copy()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.working = self.store.state.copy()  # whatever was not committed is gone
        while self._held:
            self._held.pop().release()

    async def hold(self, lock: asyncio.Lock) -> None:
        """Take ``lock`` until the unit of work ends, and start over from the committed state."""
        if lock not in self._held:
            await lock.acquire()
            self._held.append(lock)
        self.working = self.store.state.copy()

    def record(self, event: Event) -> None:
        self.recorded.record(event)

    async def commit(self) -> None:
        await self.recorded.commit(self, self._publish)

    async def _publish(self) -> None:
        self.store.state = self.working
        self.working = self.store.state.copy()
        self.store.commits += 1
        self.committed = True


class FakeUnitOfWorkFactory:
    """A ``UnitOfWorkFactory``: each call opens a new unit of work on the same store."""

    def __init__(self, store: FakeStore | None = None, events: EventHandlers | None = None) -> None:
        self.store = store or FakeStore()
        self.events = events

    def __call__(self) -> FakeUnitOfWork:
        return FakeUnitOfWork(self.store, self.events)
