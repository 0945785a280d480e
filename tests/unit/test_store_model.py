"""The store state machine (store_model.py) against the in-memory fakes."""

from __future__ import annotations

from uuid import UUID

from fakes import FakeBox, FakeClock, FakeStore, FakeUnitOfWorkFactory
from hypothesis import settings
from store_model import StoreMachine


class FakeBackend:
    """The fake store, plus the worker's claim done directly on it."""

    def __init__(self) -> None:
        self.box = FakeBox()
        self.uow = FakeUnitOfWorkFactory(FakeStore(self.box))

    async def start(self, owner_id: UUID, deployment_id: UUID, clock: FakeClock) -> None:
        assert self.uow.store.state.deployments[deployment_id].owner_id == owner_id
        self.uow.store.mark_running(deployment_id, clock.now())

    async def close(self) -> None:
        pass


async def make_fake_backend() -> FakeBackend:
    return FakeBackend()


class FakeStoreMachine(StoreMachine):
    make_backend = staticmethod(make_fake_backend)


TestFakeStore = FakeStoreMachine.TestCase
TestFakeStore.settings = settings(
    settings.default, max_examples=max(settings.default.max_examples, 60), stateful_step_count=30
)
