"""The message bus, its use cases built by the composition root from in-memory fakes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID, uuid4

import pytest
from berth.core import commands as c
from berth.core.bus import MessageBus
from berth.core.errors import NotFound
from berth.core.events import DeploymentFinished
from berth.core.limits import Limit, LoginThrottle
from berth.core.models import DeploymentEvent, DeploymentState, User
from berth.core.outbound import OutboundGuard
from berth.core.results import NewSession
from berth.core.unit_of_work import EventHandlers
from berth.core.use_cases import SERVERS_MAX, Waiters
from berth.entrypoints.bootstrap import Adapters, Policy, build_bus
from fakes import (
    FakeBox,
    FakeClock,
    FakeGateway,
    FakeHasher,
    FakeKeys,
    FakeResolver,
    FakeSender,
    FakeStore,
    FakeUnitOfWorkFactory,
)

__all__ = ["App", "assert_hidden", "build_app", "finish", "first_sign_up", "unique_email"]


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
    resolver: FakeResolver
    sender: FakeSender

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
    berth_paths: tuple[str, ...] = (),
    allow_private: bool = False,
    refuse_local_servers: bool = False,
    local_owner: str | None = None,
    max_servers: int = SERVERS_MAX,
) -> App:
    """The bus over fresh fakes; ``local_managed`` as under ``serve --local``,
    ``open_signup`` and ``throttle`` (sign-in limits) as the operator set them;
    ``berth_paths`` berth's own paths on this machine (``bootstrap.berth_paths``);
    ``allow_private`` and ``refuse_local_servers`` as ``BERTH_ALLOW_PRIVATE_TARGETS`` 1
    and 0 make them; ``local_owner`` as ``BERTH_LOCAL_OWNER``, ``max_servers`` as
    ``BERTH_SERVERS_PER_USER``."""
    clock, box, hasher, gateway = clock or FakeClock(), FakeBox(), FakeHasher(), FakeGateway()
    resolver, sender = FakeResolver(), FakeSender()
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
        outbound=OutboundGuard(resolver, allow_private=allow_private),
        sender=sender,
    )
    policy = Policy(
        local_managed=local_managed,
        open_signup=open_signup,
        deploy_limit=deploy_limit or Limit(count=30, period=60.0),
        berth_paths=berth_paths,
        refuse_local_servers=refuse_local_servers,
        local_owner=local_owner,
        max_servers=max_servers,
    )
    bus = build_bus(adapters, policy, events=events, waiters=waiters)
    return App(bus, waiters, uow, clock, box, hasher, gateway, resolver, sender)


def unique_email(tag: str = "user") -> str:
    return f"{tag}-{uuid4().hex[:12]}@example.com"


async def first_sign_up(
    app: App, email: str, password: str = "correct horse battery staple"
) -> NewSession:
    """The first account's sign-up, with the setup code ``berth serve`` would print."""
    code = await app.bus.handle(c.IssueSetupCode(), None)
    assert code is not None, "there is an account already"
    return await app.bus.handle(c.SignUp(email=email, password=password, invite=code), None)


async def assert_hidden(
    app: App, actor: User, command: Callable[[UUID], Any], theirs: UUID
) -> None:
    """``command`` on another user's ``theirs`` is NotFound with the very detail a random
    id gets, so an answer never tells that the id exists."""
    with pytest.raises(NotFound) as foreign:
        await app.bus.handle(command(theirs), actor)
    with pytest.raises(NotFound) as missing:
        await app.bus.handle(command(uuid4()), actor)
    assert foreign.value.detail == missing.value.detail


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
