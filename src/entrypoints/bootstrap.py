"""The composition root: the one place that knows every package.

``bootstrap(settings)`` builds the engine, runs migrations, and wires the use
cases to their adapters. Tests pass fakes to ``build_services`` directly.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

from berth.core import ports, use_cases
from berth.core.models import DeploymentState, Job, Server, Transport

from .settings import Settings
from .worker import Background, Notifier

__all__ = [
    "Runtime",
    "Services",
    "SystemClock",
    "TransportRouter",
    "bootstrap",
    "build_services",
    "database_url",
]


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class TransportRouter:
    """``ServerGateway`` that hands each server to the gateway of its transport."""

    def __init__(self, gateways: dict[Transport, ports.ServerGateway]) -> None:
        self._gateways = gateways

    async def connect(self, server: Server) -> ports.ServerConnection:
        return await self._gateways[server.transport].connect(server)

    async def disconnect(self, server_id: UUID) -> None:
        for gateway in self._gateways.values():
            await gateway.disconnect(server_id)

    async def close(self) -> None:
        for gateway in self._gateways.values():
            await gateway.close()


@dataclass(frozen=True, slots=True)
class Services:
    """Every request-facing use case, built once; entrypoints take this and nothing else."""

    uow: ports.UnitOfWorkFactory
    clock: ports.Clock
    notifier: Notifier
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
    installation_logs: use_cases.InstallationLogs
    remove_installation: use_cases.RemoveInstallation


class _NoServers:
    """The gateway of a berth built without transports (tests of the API alone)."""

    async def connect(self, server: Server) -> ports.ServerConnection:
        from berth.core.errors import ServerUnreachable

        raise ServerUnreachable("This berth has no transport to reach servers.")

    async def disconnect(self, server_id: UUID) -> None:
        return None

    async def close(self) -> None:
        return None


def build_services(
    uow: ports.UnitOfWorkFactory,
    *,
    clock: ports.Clock,
    hasher: ports.PasswordHasher,
    box: ports.SecretBox,
    keys: ports.KeyGenerator,
    gateway: ports.ServerGateway | None = None,
    notifier: Notifier | None = None,
) -> Services:
    """Wire the use cases to whatever adapters (or fakes) are given."""
    reach = gateway or _NoServers()
    return Services(
        uow=uow,
        clock=clock,
        notifier=notifier or Notifier(),
        create_user=use_cases.CreateUser(uow, hasher, clock),
        regenerate_token=use_cases.RegenerateToken(uow, clock),
        token_info=use_cases.TokenInfo(uow),
        authenticate=use_cases.Authenticate(uow, clock),
        create_server=use_cases.CreateServer(uow, clock, keys),
        list_servers=use_cases.ListServers(uow),
        get_server=use_cases.GetServer(uow),
        deploy=use_cases.Deploy(uow, clock, box),
        get_deployment=use_cases.GetDeployment(uow),
        get_installation=use_cases.GetInstallation(uow),
        list_installations=use_cases.ListInstallations(uow),
        list_containers=use_cases.ListContainers(uow, clock, gateway),
        installation_logs=use_cases.InstallationLogs(uow, reach),
        remove_installation=use_cases.RemoveInstallation(uow, reach),
    )


@dataclass(frozen=True, slots=True)
class Runtime:
    """Built services, the background loops (if any) and what must be closed on shutdown."""

    services: Services
    background: Background | None
    close: Callable[[], Awaitable[None]]


def database_url(settings: Settings) -> str:
    """The configured database, else SQLite in the data dir."""
    from berth.adapters.sql import sqlite_url

    return settings.database_url or sqlite_url(settings.data_dir)


class _SshKeys:
    def generate(self, comment: str) -> tuple[bytes, str]:
        from berth.adapters.ssh import generate_keypair

        return generate_keypair(comment)


async def bootstrap(settings: Settings, *, background: bool = False) -> Runtime:
    """Build everything from settings; the caller awaits ``close()`` when done.

    Migrations run first (in a thread: Alembic drives its own event loop).
    Adapters are imported here, so building services from fakes needs none of them.
    With ``background``, the worker and monitor are built (started by the caller).
    """
    from berth.adapters.docker import DockerRuntime
    from berth.adapters.local import LocalGateway
    from berth.adapters.secrets import Argon2Hasher, KeyBox, load_or_create_key
    from berth.adapters.sql import (
        SqlFleet,
        SqlJobQueue,
        SqlUnitOfWorkFactory,
        create_engine,
        migrate,
    )
    from berth.adapters.ssh import SshGateway

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    url = database_url(settings)
    await asyncio.to_thread(migrate, url)
    engine = create_engine(url)
    box = KeyBox(load_or_create_key(settings.data_dir, settings.secret_key))
    clock = SystemClock()
    fleet = SqlFleet(engine, box)
    socket_dir = Path(tempfile.mkdtemp(prefix="berth-ssh-"))
    gateway = TransportRouter(
        {
            Transport.LOCAL: LocalGateway(DockerRuntime, docker_socket=settings.docker_socket),
            Transport.SSH: SshGateway(
                fleet.credentials,
                DockerRuntime,
                socket_dir=socket_dir,
            ),
        }
    )
    notifier = Notifier()
    uow = SqlUnitOfWorkFactory(engine, box)
    services = build_services(
        uow,
        clock=clock,
        hasher=Argon2Hasher(),
        box=box,
        keys=_SshKeys(),
        gateway=gateway,
        notifier=notifier,
    )
    loops: Background | None = None
    if background:
        jobs = SqlJobQueue(engine, box, queue_timeout=settings.queue_timeout)
        timeouts = use_cases.StepTimeouts(health=settings.health_timeout)

        def run_factory(
            worker_id: str, on_finished: Callable[[Job, DeploymentState], Awaitable[None]]
        ) -> use_cases.RunDeployment:
            return use_cases.RunDeployment(
                jobs,
                gateway,
                clock,
                worker_id=worker_id,
                timeouts=timeouts,
                on_finished=on_finished,
            )

        loops = Background(
            jobs,
            clock,
            run_factory,
            use_cases.MonitorServers(fleet, gateway, clock),
            notifier,
            ensure_local=use_cases.EnsureLocalServer(uow, clock) if settings.local else None,
            monitor_seconds=settings.monitor_seconds,
        )

    async def close() -> None:
        if loops is not None:
            await loops.stop()
        await gateway.close()
        await engine.dispose()

    return Runtime(services=services, background=loops, close=close)
