"""The use cases wired to in-memory fakes, as an entrypoint would see them."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import uuid4

from berth.core import use_cases
from fakes import (
    FakeBox,
    FakeClock,
    FakeGateway,
    FakeHasher,
    FakeStore,
    FakeUnitOfWorkFactory,
)

__all__ = ["App", "build_app", "unique_email"]


@dataclass(frozen=True, slots=True)
class App:
    """The use cases as an entrypoint sees them, plus the fakes behind them."""

    uow: FakeUnitOfWorkFactory
    clock: FakeClock
    box: FakeBox
    hasher: FakeHasher
    gateway: FakeGateway
    create_user: use_cases.CreateUser
    regenerate_token: use_cases.RegenerateToken
    token_info: use_cases.TokenInfo
    authenticate: use_cases.Authenticate
    create_server: use_cases.CreateServer
    list_servers: use_cases.ListServers
    get_server: use_cases.GetServer
    deploy: use_cases.Deploy
    get_deployment: use_cases.GetDeployment
    list_installations: use_cases.ListInstallations
    list_containers: use_cases.ListContainers

    @property
    def store(self) -> FakeStore:
        return self.uow.store


def build_app() -> App:
    clock, box, hasher, gateway = FakeClock(), FakeBox(), FakeHasher(), FakeGateway()
    uow = FakeUnitOfWorkFactory(FakeStore(box))
    return App(
        uow=uow,
        clock=clock,
        box=box,
        hasher=hasher,
        gateway=gateway,
        create_user=use_cases.CreateUser(uow, hasher, clock),
        regenerate_token=use_cases.RegenerateToken(uow, clock),
        token_info=use_cases.TokenInfo(uow),
        authenticate=use_cases.Authenticate(uow, clock),
        create_server=use_cases.CreateServer(uow, clock),
        list_servers=use_cases.ListServers(uow),
        get_server=use_cases.GetServer(uow),
        deploy=use_cases.Deploy(uow, clock, box),
        get_deployment=use_cases.GetDeployment(uow),
        list_installations=use_cases.ListInstallations(uow),
        list_containers=use_cases.ListContainers(uow, clock, gateway),
    )


def unique_email(tag: str = "user") -> str:
    return f"{tag}-{uuid4().hex[:12]}@example.com"
