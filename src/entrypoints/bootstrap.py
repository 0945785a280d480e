"""The composition root: the one place that knows every package.

``bootstrap(settings)`` builds the engine, runs migrations, wires the use cases
to their adapters and registers them on the message bus, which is all an
entrypoint gets. Tests pass fakes to ``build_bus`` (or ``build_use_cases``).
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from uuid import UUID

from berth.core import ports, use_cases
from berth.core.bus import MessageBus
from berth.core.handlers import UseCases, register
from berth.core.limits import Limit, LoginThrottle, RateLimiter
from berth.core.models import (
    DeploymentState,
    Job,
    Server,
    ServerStatus,
    StoreArchiveInfo,
    StoreCounts,
    Transport,
)

from .settings import Settings
from .worker import Background

if TYPE_CHECKING:
    from berth.adapters.metrics import PrometheusMetrics

__all__ = [
    "Runtime",
    "SystemClock",
    "TransportRouter",
    "bootstrap",
    "build_bus",
    "build_use_cases",
    "database_url",
    "restore_store",
    "store_archive",
]

#: The monitor's limits (see ``MonitorServers``): reaching a server (the SSH handshake,
#: whose own timeouts are 5 s), Docker's answers once connected, and checks at once.
MONITOR_CONNECT_TIMEOUT = 10.0
MONITOR_CALL_TIMEOUT = 10.0
MONITOR_CONCURRENCY = 64
#: Deployments one worker runs at once: they mostly wait (pulls, health checks, servers).
WORKER_CONCURRENCY = 32


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


class _NoServers:
    """The gateway of a berth built without transports (tests of the API alone)."""

    async def connect(self, server: Server) -> ports.ServerConnection:
        from berth.core.errors import ServerUnreachable

        raise ServerUnreachable("This berth has no transport to reach servers.")

    async def disconnect(self, server_id: UUID) -> None:
        return None

    async def close(self) -> None:
        return None


class _NoStats:
    """The store counts of a berth built without a stats adapter (tests of the API alone)."""

    async def counts(self) -> StoreCounts:
        return StoreCounts(
            deployments=dict.fromkeys(DeploymentState, 0),
            servers=dict.fromkeys(ServerStatus, 0),
            queued=0,
            oldest_queued_at=None,
        )


def build_use_cases(
    uow: ports.UnitOfWorkFactory,
    *,
    clock: ports.Clock,
    hasher: ports.PasswordHasher,
    box: ports.SecretBox,
    keys: ports.KeyGenerator,
    gateway: ports.ServerGateway | None = None,
    waiters: use_cases.Waiters | None = None,
    throttle: LoginThrottle | None = None,
    open_signup: bool = False,
    local_managed: bool = False,
    routes: use_cases.RouteTable | None = None,
    stats: ports.StoreStats | None = None,
    signatures: ports.HostKeySignatures | None = None,
) -> UseCases:
    """Wire the use cases to whatever adapters (or fakes) are given.

    Without a ``throttle``, failed sign-ins are counted in memory with the defaults.
    ``open_signup`` lets anyone create an account; ``local_managed`` says this process
    manages this machine as a server (``serve --local``), which then cannot be deleted.
    ``routes`` is the process's route table, shared with its worker and monitor.
    Without ``stats``, the store's counts (``/metrics``) are all zero.
    ``signatures`` checks host-key signatures (default: SSHSIG through asyncssh,
    imported on first use).
    """
    reach = gateway or _NoServers()
    if signatures is None:
        from berth.adapters.host_signatures import SshSignatures

        signatures = SshSignatures()
    if throttle is None:
        from berth.adapters.ratelimit import MemoryRateLimiter

        throttle = LoginThrottle(MemoryRateLimiter())
    get_deployment = use_cases.GetDeployment(uow)
    deploy = use_cases.Deploy(uow, clock, box, gateway)
    waiters = waiters or use_cases.Waiters()
    return UseCases(
        create_user=use_cases.CreateUser(uow, hasher, clock),
        regenerate_token=use_cases.RegenerateToken(uow, clock),
        token_info=use_cases.TokenInfo(uow),
        authenticate=use_cases.Authenticate(uow, clock),
        create_server=use_cases.CreateServer(uow, clock, keys),
        enroll_server=use_cases.EnrollServer(uow, clock),
        enrollment_status=use_cases.EnrollmentStatus(uow, clock),
        server_self_status=use_cases.ServerSelfStatus(uow, clock, signatures),
        report_uninstalled=use_cases.ReportUninstalled(uow, clock, signatures, reach),
        list_servers=use_cases.ListServers(uow),
        get_server=use_cases.GetServer(uow),
        deploy=deploy,
        get_deployment=get_deployment,
        wait_for_deployment=use_cases.WaitForDeployment(get_deployment, waiters),
        get_installation=use_cases.GetInstallation(uow),
        list_installations=use_cases.ListInstallations(uow),
        list_containers=use_cases.ListContainers(uow, clock, gateway),
        installation_logs=use_cases.InstallationLogs(uow, reach),
        remove_installation=use_cases.RemoveInstallation(uow, reach, clock, routes),
        change_installation=use_cases.ChangeInstallation(uow, reach, clock),
        list_revisions=use_cases.ListRevisions(uow),
        rollback=use_cases.Rollback(uow, deploy),
        cancel_deployment=use_cases.CancelDeployment(uow, clock),
        delete_server=use_cases.DeleteServer(uow, gateway, local_managed=local_managed),
        repin_host_keys=use_cases.RepinHostKeys(uow, gateway),
        new_enrollment_token=use_cases.NewEnrollmentToken(uow, clock),
        list_deployments=use_cases.ListDeployments(uow),
        signup_policy=use_cases.SignUpPolicy(uow, open_signup=open_signup),
        sign_up=use_cases.SignUp(uow, hasher, clock, open_signup=open_signup),
        ensure_local=use_cases.EnsureLocalServer(uow, clock) if local_managed else None,
        sign_in=use_cases.SignIn(uow, hasher, clock, throttle),
        resolve_session=use_cases.ResolveSession(uow, clock),
        sign_out=use_cases.SignOut(uow),
        create_invite=use_cases.CreateInvite(uow, clock),
        follow_deployment=use_cases.FollowDeployment(uow, waiters),
        follow_installation_logs=use_cases.FollowInstallationLogs(uow, reach),
        installation_stats=use_cases.InstallationStats(uow, reach),
        server_disk_usage=use_cases.ServerDiskUsage(uow, reach),
        count_store=use_cases.CountStore(stats or _NoStats()),
        add_registry=use_cases.AddRegistry(uow, clock),
        list_registries=use_cases.ListRegistries(uow),
        remove_registry=use_cases.RemoveRegistry(uow),
        create_webhook=use_cases.CreateWebhook(uow, clock),
        list_webhooks=use_cases.ListWebhooks(uow),
        delete_webhook=use_cases.DeleteWebhook(uow),
        list_webhook_deliveries=use_cases.ListWebhookDeliveries(uow),
    )


def build_bus(
    uow: ports.UnitOfWorkFactory,
    *,
    limiter: RateLimiter | None = None,
    deploy_limit: Limit | None = None,
    **adapters: Any,
) -> MessageBus:
    """The message bus over ``build_use_cases(uow, **adapters)``: what entrypoints get.

    Without a ``limiter``, limits are counted in this process's memory.
    """
    from berth.adapters.ratelimit import MemoryRateLimiter

    waiters = use_cases.Waiters()
    found = build_use_cases(uow, waiters=waiters, **adapters)
    return register(
        MessageBus(),
        found,
        waiters=waiters,
        limiter=limiter or MemoryRateLimiter(),
        deploy_limit=deploy_limit or Limit(count=30, period=60.0),
    )


@dataclass(frozen=True, slots=True)
class Runtime:
    """The bus, the rate limiter, the background loops (if any), this process's metrics
    and what must be closed on shutdown."""

    bus: MessageBus
    limiter: RateLimiter
    background: Background | None
    close: Callable[[], Awaitable[None]]
    metrics: PrometheusMetrics | None = None
    #: Signs the dashboard's CSRF tokens: derived from the secret key, so the same in
    #: every process of one installation and across restarts.
    csrf_secret: str | None = None


def database_url(settings: Settings) -> str:
    """The configured database, else SQLite in the data dir."""
    from berth.adapters.sql import sqlite_url

    return settings.database_url or sqlite_url(settings.data_dir)


class _SshKeys:
    def generate(self, comment: str) -> tuple[bytes, str]:
        from berth.adapters.ssh import generate_keypair

        return generate_keypair(comment)


def _docker_runtime(base_url: str) -> ports.ContainerRuntime:
    """A ``DockerRuntime``; the docker SDK is imported on the first connection, not at start."""
    from berth.adapters.docker import DockerRuntime

    return DockerRuntime(base_url)


def _caddy_factory(settings: Settings) -> Callable[[str], ports.ReverseProxy]:
    """Builds a server's ``CaddyAdmin`` from the socket berth connects to (the server's
    admin socket itself, or a local one forwarded to it over SSH)."""

    def build(socket_path: str) -> ports.ReverseProxy:
        from berth.adapters.caddy import CaddyAdmin

        return CaddyAdmin(
            socket_path,
            admin_socket=settings.caddy_admin_socket,
            https_port=settings.proxy_https_port,
            http_port=settings.proxy_http_port,
            issuer=_issuer(settings.tls_issuer),
            acme_email=settings.acme_email,
        )

    return build


def _issuer(value: str) -> Literal["auto", "acme", "internal"]:
    if value == "acme":
        return "acme"
    if value == "internal":
        return "internal"
    return "auto"


class _LazyGateway:
    """A ``ServerGateway`` built on its first ``connect``.

    Its adapter (asyncssh, the docker SDK: some 15 MiB) is imported then, not at
    start, so a berth that reaches no server over it never loads them.
    """

    def __init__(self, build: Callable[[], ports.ServerGateway]) -> None:
        self._build = build
        self._gateway: ports.ServerGateway | None = None

    async def connect(self, server: Server) -> ports.ServerConnection:
        if self._gateway is None:
            self._gateway = self._build()
        return await self._gateway.connect(server)

    async def disconnect(self, server_id: UUID) -> None:
        if self._gateway is not None:
            await self._gateway.disconnect(server_id)

    async def close(self) -> None:
        if self._gateway is not None:
            await self._gateway.close()


async def bootstrap(settings: Settings, *, background: bool = False) -> Runtime:
    """Build everything from settings; the caller awaits ``close()`` when done.

    Migrations run first (in a thread: Alembic drives its own event loop).
    Adapters are imported here, so building services from fakes needs none of them.
    With ``background``, the worker and monitor are built (started by the caller).
    """
    from berth.adapters.local import LocalGateway
    from berth.adapters.metrics import MeteredJobQueue, PrometheusMetrics
    from berth.adapters.ratelimit import MemoryRateLimiter
    from berth.adapters.secrets import Argon2Hasher, KeyBox, load_or_create_key
    from berth.adapters.sql import (
        SqlFleet,
        SqlJobQueue,
        SqlStoreStats,
        SqlUnitOfWorkFactory,
        SqlWebhookOutbox,
        create_engine,
        migrate,
    )
    from berth.adapters.webhooks import HttpWebhookSender

    settings.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # secrets live here
    url = database_url(settings)
    await asyncio.to_thread(migrate, url)
    engine = create_engine(url)
    box = KeyBox(load_or_create_key(settings.data_dir, settings.secret_key))
    clock = SystemClock()
    fleet = SqlFleet(engine, box)

    def ssh_gateway() -> ports.ServerGateway:
        from berth.adapters.ssh import SshGateway

        return SshGateway(
            fleet.credentials,
            _docker_runtime,
            # Made when the first server is reached over SSH; the gateway's close removes it.
            socket_dir=Path(tempfile.mkdtemp(prefix="berth-ssh-")),
            proxy_factory=proxy_factory,
            remote_caddy_socket=settings.caddy_admin_socket,
            host_key_check_interval=settings.host_key_check_seconds,
        )

    proxy_factory = _caddy_factory(settings)
    proxy_factory(settings.caddy_admin_socket)  # refuse bad proxy settings at start
    gateway = TransportRouter(
        {
            Transport.LOCAL: LocalGateway(
                _docker_runtime,
                docker_socket=settings.docker_socket,
                proxy_factory=proxy_factory,
                caddy_socket=settings.caddy_admin_socket,
            ),
            Transport.SSH: _LazyGateway(ssh_gateway),
        }
    )
    routes = use_cases.RouteTable(fleet)  # one per process: its worker's, monitor's and API's
    uow = SqlUnitOfWorkFactory(engine, box)
    limiter: RateLimiter = MemoryRateLimiter()
    if engine.dialect.name == "postgresql":  # counts shared by every replica
        from berth.adapters.sql.limits import SqlRateLimiter

        limiter = SqlRateLimiter(engine)
    bus = build_bus(
        uow,
        limiter=limiter,
        deploy_limit=Limit(count=settings.deploy_rate_limit_per_minute, period=60.0),
        clock=clock,
        hasher=Argon2Hasher(),
        box=box,
        keys=_SshKeys(),
        gateway=gateway,
        throttle=LoginThrottle(
            limiter,
            per_email=settings.login_failures_per_email,
            per_address=settings.login_failures_per_address,
        ),
        open_signup=settings.open_signup,
        local_managed=settings.local,
        routes=routes,
        stats=SqlStoreStats(engine),
    )
    metrics = PrometheusMetrics()
    loops: Background | None = None
    sender = HttpWebhookSender()
    if background:
        jobs = MeteredJobQueue(
            SqlJobQueue(engine, box, queue_timeout=settings.queue_timeout), metrics
        )
        timeouts = use_cases.StepTimeouts(
            health=settings.health_timeout, pull=settings.pull_timeout
        )
        lease = timedelta(seconds=settings.lease_seconds)

        def run_factory(
            worker_id: str, on_finished: Callable[[Job, DeploymentState], Awaitable[None]]
        ) -> use_cases.RunDeployment:
            return use_cases.RunDeployment(
                jobs,
                gateway,
                clock,
                worker_id=worker_id,
                timeouts=timeouts,
                lease=lease,
                on_finished=on_finished,
                routes=routes,
                drain_seconds=settings.proxy_drain_seconds,
            )

        outbox = SqlWebhookOutbox(engine, box)
        policy = settings.webhook_policy()

        def deliver_factory(worker_id: str) -> use_cases.DeliverWebhooks:
            return use_cases.DeliverWebhooks(
                outbox, sender, clock, worker_id=worker_id, policy=policy
            )

        loops = Background(
            jobs,
            clock,
            run_factory,
            use_cases.MonitorServers(
                fleet,
                gateway,
                clock,
                routes=routes,
                connect_timeout=MONITOR_CONNECT_TIMEOUT,
                timeout=MONITOR_CALL_TIMEOUT,
                concurrency=MONITOR_CONCURRENCY,
                spread=settings.monitor_seconds / 2,
            ),
            bus,
            ensure_local=use_cases.EnsureLocalServer(uow, clock) if settings.local else None,
            deliver_factory=deliver_factory,
            lease=lease,
            concurrency=WORKER_CONCURRENCY,
            monitor_seconds=settings.monitor_seconds,
            delivery_poll_seconds=settings.webhook_poll_seconds,
        )

    async def close() -> None:
        if loops is not None:
            await loops.stop()
        await gateway.close()
        await sender.close()
        await engine.dispose()

    return Runtime(
        bus=bus,
        limiter=limiter,
        background=loops,
        close=close,
        metrics=metrics,
        csrf_secret=box.digest(b"berth dashboard csrf v1"),
    )


def store_archive(settings: Settings) -> ports.StoreArchive:
    """The data dir's store as one file: SQLite's, else one that names pg_dump."""
    from berth.adapters.sql.archive import PostgresArchive, SqliteArchive
    from sqlalchemy import make_url

    if make_url(database_url(settings)).get_backend_name() == "postgresql":
        return PostgresArchive()
    return SqliteArchive(settings.data_dir)


async def restore_store(
    settings: Settings, source: Path, *, key_file: Path | None = None, force: bool = False
) -> tuple[StoreArchiveInfo, bool]:
    """``berth restore``: make ``source`` the data dir's store; whether ``key_file`` was
    installed as the data dir's ``secret.key``.

    The key that opens the backup's sealed values is ``BERTH_SECRET_KEY``, else
    ``key_file``, else the data dir's own ``secret.key``; it is checked on the backup
    before anything is written. A ``key_file`` is copied into the data dir after the
    store (never over another key), so the restored berth starts with it.
    """
    from berth.adapters.secrets import KEY_FILE, KeyBox, decode_key, install_key, read_key_file
    from berth.core.errors import FieldError, InvalidInput

    def bad_key(message: str) -> InvalidInput:
        return InvalidInput([FieldError("secret_key", message)])

    key: bytes | None = None
    try:
        if settings.secret_key:
            key = decode_key(settings.secret_key)
        if key_file is not None:
            given = read_key_file(key_file)
            if key is not None and given != key:
                raise bad_key("BERTH_SECRET_KEY and --secret-key-file differ: give one.")
            key = given
        elif key is None and (settings.data_dir / KEY_FILE).is_file():
            key = read_key_file(settings.data_dir / KEY_FILE)
    except FileNotFoundError as exc:
        raise bad_key(f"There is no key file {exc.filename}.") from None
    except ValueError as exc:
        raise bad_key(str(exc)) from None
    restore = use_cases.RestoreStore(
        store_archive(settings), KeyBox(key) if key is not None else None
    )
    if key_file is not None and not settings.secret_key:
        existing = settings.data_dir / KEY_FILE
        if existing.is_file() and read_key_file(existing) != key:
            raise bad_key(f"{existing} holds another key; move it away first.")
    info = await restore(source, force=force)
    installed = False
    if key is not None and key_file is not None and not settings.secret_key:
        installed = install_key(settings.data_dir, key)
    return info, installed
