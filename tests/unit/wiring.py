"""The message bus, its use cases built by the composition root from in-memory fakes."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID, uuid4

from berth.core.bus import MessageBus
from berth.core.events import DeploymentFinished
from berth.core.limits import Limit, LoginThrottle
from berth.core.models import DeploymentEvent, DeploymentState, User
from berth.core.unit_of_work import EventHandlers
from berth.core.use_cases import Waiters
from berth.entrypoints.bootstrap import Adapters, Policy, build_bus
from fakes import (
    FakeBox,
    FakeClock,
    FakeGateway,
    FakeHasher,
    FakeKeys,
    FakeStore,
    FakeUnitOfWorkFactory,
)

__all__ = ["App", "build_app", "finish", "unique_email"]


@dataclass(frozen=True, slots=True)
class App:
    """The bus (``await app.bus.handle(command, actor)``), the waiters, the fakes."""

    bus: MessageBus
    waiters: Waiters
    uow: FakeUnitOfWorkFactory
    clock: FakeClock
    box: FakeBox
    hasher: FakeHasher
    gateway: FakeGateway

    @property
    def store(self) -> FakeStore:
        return self.uow.store


def build_app(
    *,
    deploy_limit: Limit | None = None,
    local_managed: bool = False,
    open_signup: bool = False,
    throttle: LoginThrottle | None = None,
    clock: FakeClock | None = None,
) -> App:
    """The bus over fresh fakes; ``local_managed`` as under ``serve --local``,
    ``open_signup`` and ``throttle`` (sign-in limits) as the operator set them."""
    clock, box, hasher, gateway = clock or FakeClock(), FakeBox(), FakeHasher(), FakeGateway()
    events = EventHandlers()
    uow = FakeUnitOfWorkFactory(FakeStore(box), events)
    waiters = Waiters()
    adapters = Adapters(
        uow=uow,
        clock=clock,
        hasher=hasher,
        box=box,
        keys=FakeKeys(),
        gateway=gateway,
        throttle=throttle,
    )
    policy = Policy(
        local_managed=local_managed,
        open_signup=open_signup,
        deploy_limit=deploy_limit or Limit(count=30, period=60.0),
    )
    bus = build_bus(adapters, policy, events=events, waiters=waiters)
    return App(bus, waiters, uow, clock, box, hasher, gateway)


def unique_email(tag: str = "user") -> str:
    return f"{tag}-{uuid4().hex[:12]}@example.com"


async def finish(
    app: App,
    owner: User,
    deployment_id: UUID,
    state: DeploymentState = DeploymentState.SUCCEEDED,
) -> None:
    """What a worker does at the end of a deployment: claimed first (if still queued, as
    the state table requires), then ended with a closing event and recorded as finished,
    in a unit of work (as the job queue's ``finish``)."""
    now = app.clock.advance(1)
    ended = app.store.state.deployments[deployment_id].deployment
    if ended.state is DeploymentState.QUEUED:
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
        uow.record(DeploymentFinished.of(ended, owner.id, state, now))
        await uow.commit()
