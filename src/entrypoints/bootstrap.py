"""The composition root: the one place that knows every package.

``bootstrap(settings)`` builds the engine, runs migrations, and wires the use
cases to their adapters. Tests pass fakes through ``Services`` directly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from berth.core import ports, use_cases

from .settings import Settings

__all__ = ["Runtime", "Services", "SystemClock", "bootstrap", "build_services", "database_url"]


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Services:
    """Every use case, built once; entrypoints take this and nothing else."""

    uow: ports.UnitOfWorkFactory
    clock: ports.Clock
    create_user: use_cases.CreateUser
    regenerate_token: use_cases.RegenerateToken
    token_info: use_cases.TokenInfo
    authenticate: use_cases.Authenticate
    create_server: use_cases.CreateServer
    list_servers: use_cases.ListServers
    get_server: use_cases.GetServer
    deploy: use_cases.Deploy
    get_deployment: use_cases.GetDeployment
    get_installation: use_cases.GetInstallation
    list_installations: use_cases.ListInstallations
    list_containers: use_cases.ListContainers


def build_services(
    uow: ports.UnitOfWorkFactory,
    *,
    clock: ports.Clock,
    hasher: ports.PasswordHasher,
    box: ports.SecretBox,
    gateway: ports.ServerGateway | None = None,
) -> Services:
    """Wire the use cases to whatever adapters (or fakes) are given."""
    return Services(
        uow=uow,
        clock=clock,
        create_user=use_cases.CreateUser(uow, hasher, clock),
        regenerate_token=use_cases.RegenerateToken(uow, clock),
        token_info=use_cases.TokenInfo(uow),
        authenticate=use_cases.Authenticate(uow, clock),
        create_server=use_cases.CreateServer(uow, clock),
        list_servers=use_cases.ListServers(uow),
        get_server=use_cases.GetServer(uow),
        deploy=use_cases.Deploy(uow, clock, box),
        get_deployment=use_cases.GetDeployment(uow),
        get_installation=use_cases.GetInstallation(uow),
        list_installations=use_cases.ListInstallations(uow),
        list_containers=use_cases.ListContainers(uow, clock, gateway),
    )


@dataclass(frozen=True, slots=True)
class Runtime:
    """Built services plus what must be closed on shutdown."""

    services: Services
    close: Callable[[], Awaitable[None]]


def database_url(settings: Settings) -> str:
    """The configured database, else SQLite in the data dir."""
    from berth.adapters.sql import sqlite_url

    return settings.database_url or sqlite_url(settings.data_dir)


async def bootstrap(settings: Settings) -> Runtime:
    """Build everything from settings; the caller awaits ``close()`` when done.

    Migrations run first (in a thread: Alembic drives its own event loop).
    Adapters are imported here, so building services from fakes needs none of them.
    """
    from berth.adapters.secrets import Argon2Hasher, KeyBox, load_or_create_key
    from berth.adapters.sql import SqlUnitOfWorkFactory, create_engine, migrate

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    url = database_url(settings)
    await asyncio.to_thread(migrate, url)
    engine = create_engine(url)
    box = KeyBox(load_or_create_key(settings.data_dir, settings.secret_key))
    services = build_services(
        SqlUnitOfWorkFactory(engine, box),
        clock=SystemClock(),
        hasher=Argon2Hasher(),
        box=box,
    )
    return Runtime(services=services, close=engine.dispose)
