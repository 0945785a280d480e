"""The use cases and the message bus, wired by the composition root to in-memory fakes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID, uuid4

from berth.adapters.ratelimit import MemoryRateLimiter
from berth.core.bus import MessageBus
from berth.core.handlers import UseCases, register
from berth.core.limits import Limit
from berth.core.models import DeploymentEvent, DeploymentState, User
from berth.core.outbound import OutboundGuard
from berth.core.use_cases import NewSession, Waiters
from berth.entrypoints.bootstrap import build_use_cases
from fakes import (
    FakeBox,
    FakeClock,
    FakeGateway,
    FakeHasher,
    FakeKeys,
    FakeResolver,
    FakeStore,
    FakeUnitOfWorkFactory,
)

__all__ = ["App", "build_app", "finish", "first_sign_up", "unique_email"]


@dataclass(frozen=True, slots=True)
class App:
    """The use cases (``app.deploy``, ``app.list_servers``, …), the bus over them, the fakes."""

    use_cases: UseCases
    bus: MessageBus
    waiters: Waiters
    uow: FakeUnitOfWorkFactory
    clock: FakeClock
    box: FakeBox
    hasher: FakeHasher
    gateway: FakeGateway
    resolver: FakeResolver

    def __getattr__(self, name: str) -> Any:
        return getattr(self.use_cases, name)

    @property
    def store(self) -> FakeStore:
        return self.uow.store


def build_app(
    *,
    deploy_limit: Limit | None = None,
    local_managed: bool = False,
    berth_paths: tuple[str, ...] = (),
    allow_private: bool = False,
    refuse_local_servers: bool = False,
) -> App:
    """The use cases over fresh fakes; ``local_managed`` as under ``serve --local``;
    ``berth_paths`` berth's own paths on this machine (``bootstrap.berth_paths``);
    ``allow_private`` and ``refuse_local_servers`` as ``BERTH_ALLOW_PRIVATE_TARGETS`` 1
    and 0 make them."""
    clock, box, hasher, gateway = FakeClock(), FakeBox(), FakeHasher(), FakeGateway()
    resolver = FakeResolver()
    uow = FakeUnitOfWorkFactory(FakeStore(box))
    waiters = Waiters()
    use_cases = build_use_cases(
        uow,
        clock=clock,
        hasher=hasher,
        box=box,
        keys=FakeKeys(),
        gateway=gateway,
        waiters=waiters,
        local_managed=local_managed,
        berth_paths=berth_paths,
        outbound=OutboundGuard(resolver, allow_private=allow_private),
        refuse_local_servers=refuse_local_servers,
    )
    bus = register(
        MessageBus(),
        use_cases,
        waiters=waiters,
        limiter=MemoryRateLimiter(),
        deploy_limit=deploy_limit or Limit(count=30, period=60.0),
    )
    return App(
        use_cases=use_cases,
        bus=bus,
        waiters=waiters,
        uow=uow,
        clock=clock,
        box=box,
        hasher=hasher,
        gateway=gateway,
        resolver=resolver,
    )


def unique_email(tag: str = "user") -> str:
    return f"{tag}-{uuid4().hex[:12]}@example.com"


async def first_sign_up(
    app: App, email: str, password: str = "correct horse battery staple"
) -> NewSession:
    """The first account's sign-up, with the setup code ``berth serve`` would print."""
    code = await app.use_cases.issue_setup_code()
    assert code is not None, "there is an account already"
    return await app.use_cases.sign_up(email, password, code)


async def finish(
    app: App,
    owner: User,
    deployment_id: UUID,
    state: DeploymentState = DeploymentState.SUCCEEDED,
) -> None:
    """What a worker does at the end of a deployment: claimed first (if still queued, as
    the state table requires), then ended with a closing event, in a unit of work."""
    now = app.clock.advance(1)
    if app.store.state.deployments[deployment_id].deployment.state is DeploymentState.QUEUED:
        app.store.mark_running(deployment_id, now)
    async with app.uow() as uow:
        await uow.deployments.finish(
            owner.id,
            deployment_id,
            state,
            now,
            None,
            DeploymentEvent(at=now, step="done", message="."),
        )
        await uow.commit()
