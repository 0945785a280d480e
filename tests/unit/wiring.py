"""The use cases wired by the composition root (``build_services``) to in-memory fakes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import uuid4

from berth.entrypoints.bootstrap import Services, build_services
from fakes import (
    FakeBox,
    FakeClock,
    FakeGateway,
    FakeHasher,
    FakeKeys,
    FakeStore,
    FakeUnitOfWorkFactory,
)

__all__ = ["App", "build_app", "unique_email"]


@dataclass(frozen=True, slots=True)
class App:
    """The services an entrypoint gets (``app.deploy``, ``app.list_servers``, …) plus the fakes."""

    services: Services
    uow: FakeUnitOfWorkFactory
    clock: FakeClock
    box: FakeBox
    hasher: FakeHasher
    gateway: FakeGateway

    def __getattr__(self, name: str) -> Any:
        return getattr(self.services, name)

    @property
    def store(self) -> FakeStore:
        return self.uow.store


def build_app() -> App:
    clock, box, hasher, gateway = FakeClock(), FakeBox(), FakeHasher(), FakeGateway()
    uow = FakeUnitOfWorkFactory(FakeStore(box))
    services = build_services(
        uow, clock=clock, hasher=hasher, box=box, keys=FakeKeys(), gateway=gateway
    )
    return App(services=services, uow=uow, clock=clock, box=box, hasher=hasher, gateway=gateway)


def unique_email(tag: str = "user") -> str:
    return f"{tag}-{uuid4().hex[:12]}@example.com"
