"""The composition root: the one place that knows every package.

``bootstrap(settings)`` builds the engine, runs migrations, builds each use case
from its adapters and registers it on the message bus, which is all an
entrypoint gets. Tests pass fakes to ``build_bus``.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from uuid import UUID, uuid4

from berth.core import commands as c
from berth.core import ports, use_cases
from berth.core.bus import MessageBus
from berth.core.errors import StoreUnavailable
from berth.core.events import DeploymentFinished
from berth.core.limits import Limit, LoginThrottle, RateLimiter
from berth.core.models import (
    DeploymentState,
    Server,
    ServerStatus,
    StoreArchiveInfo,
    StoreCounts,
    Transport,
)
from berth.core.outages import ThrottledWarning
from berth.core.outbound import OutboundGuard
from berth.core.unit_of_work import EventHandlers

from .settings import Settings
from .worker import Background

if TYPE_CHECKING:
    from berth.adapters.metrics import PrometheusMetrics

__all__ = [
    "Adapters",
    "Policy",
    "Runtime",
    "SystemClock",
    "TransportRouter",
    "back_up_store",
    "berth_paths",
    "bootstrap",
    "build_bus",
    "database_url",
    "restore_store",
    "store_archive",
]

#: The monitor's limits (see ``MonitorServers``): reaching a server (the SSH handshake,
#: whose own timeouts are 5 s), Docker's answers once connected, and checks at once.
MONITOR_CONNECT_TIMEOUT = 10.0
MONITOR_CALL_TIMEOUT = 10.0
MONITOR_CONCURRENCY = 64
#: Each user's deploys (and rollbacks) per minute, unless the settings say otherwise.
DEPLOY_LIMIT = Limit(count=30, period=60.0)
#: Deployments one worker runs at once: they mostly wait (pulls, health checks, servers).
WORKER_CONCURRENCY = 32
#: How long a server's status stands unverified with the default monitor interval (5 s).
STATUS_FRESH_FOR = use_cases.status_fresh_for(5.0)


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

    async def check(self, at: datetime) -> None:
        return None

    async def counts(self) -> StoreCounts:
        return StoreCounts(
            deployments=dict.fromkeys(DeploymentState, 0),
            servers=dict.fromkeys(set(ServerStatus) - {ServerStatus.CHECKING}, 0),
            queued=0,
            oldest_queued_at=None,
        )


@dataclass(frozen=True, kw_only=True)
class Adapters:
    """What the use cases are built from: an adapter (or a fake) for each port.

    Without a ``gateway`` no server can be reached (tests of the API alone) but through
    ``reach``, which (default: the ``gateway``) only a user's explicit request for what has
    no stored answer uses -- an app's logs, stats, a server's disk usage, stopping,
    starting or removing an app -- while container lists come from the stored snapshots
    and no port is probed at queue time (``serve --no-worker``); without a
    ``limiter`` the deploy limit is counted in this process's memory, and without a
    ``throttle`` failed sign-ins too, with the defaults; without ``stats`` the store's
    counts (``/metrics``) are all zero; ``signatures`` checks host-key signatures
    (default: SSHSIG through asyncssh, imported on first use); ``routes`` is the
    process's route table, shared with its worker and monitor; ``outbound`` checks where
    webhooks may go (default: public addresses only, resolved by the system's resolver).
    """

    uow: ports.UnitOfWorkFactory
    clock: ports.Clock
    hasher: ports.PasswordHasher
    box: ports.SecretBox
    keys: ports.KeyGenerator
    gateway: ports.ServerGateway | None = None
    reach: ports.ServerGateway | None = None
    limiter: RateLimiter | None = None
    throttle: LoginThrottle | None = None
    stats: ports.StoreStats | None = None
    signatures: ports.HostKeySignatures | None = None
    routes: use_cases.RouteTable | None = None
    outbound: OutboundGuard | None = None
    #: Uploaded build contexts (default: a fresh temporary directory of this process).
    sources: ports.SourceStore | None = None
    watch: use_cases.WatchContainers | None = None
    #: POSTs webhooks' test events (default: HTTP through the ``outbound`` guard).
    sender: ports.WebhookSender | None = None


@dataclass(frozen=True, kw_only=True)
class Policy:
    """The operator's choices the use cases follow: ``open_signup`` lets anyone create an
    account; ``local_managed`` says this process manages this machine as a server
    (``serve --local``), which then cannot be deleted; ``deploy_limit`` is each user's.

    ``berth_paths`` are berth's own paths on this machine, which no deploy to this
    machine's server may mount (``berth_paths(settings)``); ``local_owner`` the email of
    the account this machine's server is given to (default: the first account);
    ``refuse_local_servers`` refuses servers whose address is loopback or link-local
    (``BERTH_ALLOW_PRIVATE_TARGETS=0``); ``max_servers`` is how many servers one user may
    add; a server's status that no worker stood by within ``status_fresh_for`` reads
    ``checking`` (``Server.shown``)."""

    open_signup: bool = False
    local_managed: bool = False
    deploy_limit: Limit = DEPLOY_LIMIT
    berth_paths: tuple[str, ...] = ()
    local_owner: str | None = None
    refuse_local_servers: bool = False
    max_servers: int = use_cases.SERVERS_MAX
    status_fresh_for: timedelta = STATUS_FRESH_FOR
    #: A webhook's test event: how long its endpoint may take, and berth's own address
    #: (``BERTH_BASE_URL``) a chat message links to.
    webhook_timeout: float = 10.0
    link_base: str | None = None


def build_bus(
    adapters: Adapters,
    policy: Policy | None = None,
    *,
    events: EventHandlers | None = None,
    waiters: use_cases.Waiters | None = None,
) -> MessageBus:
    """Build every use case from its ports and register it on a new bus: what
    entrypoints get. ``events`` are the handlers ``adapters.uow`` hands its committed
    events to (the bus subscribes to them there); ``waiters``, the in-process wake-ups
    of ``?wait`` and event streams."""
    from berth.adapters.ratelimit import MemoryRateLimiter

    policy = policy or Policy()
    uow, clock, gateway = adapters.uow, adapters.clock, adapters.gateway
    bus = MessageBus(events, use_cases.TeamAccess(uow))
    reach = adapters.reach or gateway or _NoServers()
    signatures = adapters.signatures
    if signatures is None:
        from berth.adapters.host_signatures import SshSignatures

        signatures = SshSignatures()
    throttle = adapters.throttle or LoginThrottle(MemoryRateLimiter())
    outbound = adapters.outbound
    if outbound is None:
        from berth.adapters.outbound import SystemResolver

        outbound = OutboundGuard(SystemResolver())
    limit = use_cases.DeployLimit(adapters.limiter or MemoryRateLimiter(), policy.deploy_limit)
    sources = adapters.sources
    if sources is None:
        from berth.adapters.sources import DiskSourceStore

        sources = DiskSourceStore(Path(tempfile.mkdtemp(prefix="berth-sources-")))
    local = (
        use_cases.EnsureLocalServer(uow, clock, owner_email=policy.local_owner)
        if policy.local_managed
        else None
    )
    waiters = waiters or use_cases.Waiters()
    bus.subscribe(DeploymentFinished, waiters.finished)
    use_cases.tell_webhooks(bus.events)  # the outbox, in the transaction of each change
    use_cases.write_audit(bus.events, clock)  # the audit log, in it too

    # Deployments: the deploy flow (404, 429, queue, wait, read back), written once.
    wait = use_cases.WaitForDeployment(use_cases.GetDeployment(uow), waiters)
    queue = use_cases.QueueDeployment(
        uow, clock, adapters.box, gateway, berth_paths=policy.berth_paths
    )
    answer = use_cases.Queued(uow, wait)
    cancel = use_cases.CancelDeployment(uow, clock, wait)
    deploy = use_cases.Deploy(uow, queue, limit, answer, sources=sources, outbound=outbound)
    bus.register(c.DeployCommand, deploy)
    bus.register(c.UploadSource, use_cases.UploadSource(uow, clock, sources))
    bus.register(c.Rollback, use_cases.Rollback(uow, queue, limit, answer))
    bus.register(c.CancelDeployment, cancel)
    # Push to deploy: a hook's delivery (public: its signature is the credential) hands
    # the bus a DeployPush as the hook, admitted like any deploy.
    bus.register(c.CreateDeployHook, use_cases.CreateDeployHook(uow, clock))
    bus.register(c.GetDeployHook, use_cases.GetDeployHook(uow))
    bus.register(c.RemoveDeployHook, use_cases.RemoveDeployHook(uow))
    bus.register(c.ReceivePush, use_cases.ReceivePush(uow, bus.handle), public=True)
    bus.register(c.DeployPush, use_cases.DeployPush(uow, queue))
    bus.register(c.GetDeployment, use_cases.GetDeployment(uow))
    bus.register(c.WaitForDeployment, wait)
    bus.register(c.FollowDeployment, use_cases.FollowDeployment(uow, waiters))
    bus.register(c.ListDeployments, use_cases.ListDeployments(uow))
    bus.register(c.ListRevisions, use_cases.ListRevisions(uow))
    # Installations.
    bus.register(c.GetInstallation, use_cases.GetInstallation(uow))
    bus.register(c.InstallationLogs, use_cases.InstallationLogs(uow, reach))
    bus.register(c.FollowInstallationLogs, use_cases.FollowInstallationLogs(uow, reach))
    bus.register(c.GetInstallationStats, use_cases.InstallationStats(uow, reach))
    bus.register(
        c.ChangeInstallation, use_cases.ChangeInstallation(uow, reach, clock, adapters.watch)
    )
    remove = use_cases.RemoveInstallation(uow, reach, clock, cancel, adapters.routes)
    bus.register(c.RemoveInstallation, remove)
    # Servers.
    create_server = use_cases.CreateServer(
        uow,
        clock,
        adapters.keys,
        outbound.resolver if policy.refuse_local_servers else None,
        max_servers=policy.max_servers,
    )
    bus.register(c.CreateServerCommand, create_server)
    bus.register(c.NewEnrollmentToken, use_cases.NewEnrollmentToken(uow, clock))
    fresh = policy.status_fresh_for
    bus.register(c.ListServers, use_cases.ListServers(uow, clock, fresh_for=fresh))
    bus.register(c.GetServer, use_cases.GetServer(uow, clock, fresh_for=fresh))
    refuse_local = outbound.resolver if policy.refuse_local_servers else None
    change = use_cases.ChangeServer(uow, clock, refuse_local, fresh_for=fresh)
    bus.register(c.ChangeServer, change)
    bus.register(c.ListInstallations, use_cases.ListInstallations(uow, clock, fresh_for=fresh))
    delete = use_cases.DeleteServer(uow, gateway, local_managed=policy.local_managed)
    bus.register(c.DeleteServer, delete)
    bus.register(c.RepinHostKeys, use_cases.RepinHostKeys(uow, gateway))
    bus.register(c.ListContainers, use_cases.ListContainers(uow, clock, gateway))
    bus.register(c.GetServerDiskUsage, use_cases.ServerDiskUsage(uow, reach))
    # Registries and webhooks.
    bus.register(c.AddRegistry, use_cases.AddRegistry(uow, clock))
    bus.register(c.ListRegistries, use_cases.ListRegistries(uow))
    bus.register(c.RemoveRegistry, use_cases.RemoveRegistry(uow))
    bus.register(c.AddGitCredential, use_cases.AddGitCredential(uow, clock))
    bus.register(c.ListGitCredentials, use_cases.ListGitCredentials(uow))
    bus.register(c.RemoveGitCredential, use_cases.RemoveGitCredential(uow))
    bus.register(c.CreateWebhook, use_cases.CreateWebhook(uow, clock, outbound))
    bus.register(c.ListWebhooks, use_cases.ListWebhooks(uow))
    bus.register(c.DeleteWebhook, use_cases.DeleteWebhook(uow))
    bus.register(c.ListWebhookDeliveries, use_cases.ListWebhookDeliveries(uow))
    sender = adapters.sender
    if sender is None:
        from berth.adapters.outbound import guarded_transport
        from berth.adapters.webhooks import HttpWebhookSender

        sender = HttpWebhookSender(guarded_transport(outbound))
    test_webhook = use_cases.SendTestWebhook(
        uow, clock, sender, timeout=policy.webhook_timeout, link_base=policy.link_base
    )
    bus.register(c.SendTestWebhook, test_webhook)
    # Accounts. Public ones: nobody is signed in yet (or the admin CLI acts on the store).
    bus.register(c.TokenInfo, use_cases.TokenInfo(uow))
    bus.register(c.Authenticate, use_cases.Authenticate(uow, clock), public=True)
    create_user = use_cases.CreateUser(uow, adapters.hasher, clock, local)
    bus.register(c.CreateUser, create_user, public=True)
    bus.register(c.RegenerateToken, use_cases.RegenerateToken(uow, clock))
    bus.register(c.ResetToken, use_cases.ResetToken(uow, clock), public=True)  # the operator's
    policy_now = use_cases.SignUpPolicy(uow, open_signup=policy.open_signup)
    bus.register(c.SignUpPolicy, policy_now, public=True)
    stats = adapters.stats or _NoStats()
    bus.register(c.ReadStoreCounts, use_cases.CountStore(stats), public=True)
    bus.register(c.CheckStore, use_cases.CheckStore(uow, stats, clock), public=True)
    sign_up = use_cases.SignUp(
        uow, adapters.hasher, clock, open_signup=policy.open_signup, local=local
    )
    bus.register(c.SignUp, sign_up, public=True)
    sign_in = use_cases.SignIn(uow, adapters.hasher, clock, throttle)
    bus.register(c.SignIn, sign_in, public=True)
    bus.register(c.ResolveSession, use_cases.ResolveSession(uow, clock), public=True)
    bus.register(c.SignOut, use_cases.SignOut(uow), public=True)
    bus.register(c.CreateInvite, use_cases.CreateInvite(uow, clock), public=True)
    bus.register(c.IssueSetupCode, use_cases.IssueSetupCode(uow, clock), public=True)
    # Teams, members, named tokens, the audit log.
    bus.register(c.ListTeams, use_cases.ListTeams(uow))
    bus.register(c.CreateTeam, use_cases.CreateTeam(uow, clock))
    bus.register(c.ActAs, use_cases.ActAs(uow))
    bus.register(c.ListMembers, use_cases.ListMembers(uow))
    bus.register(c.InviteMember, use_cases.InviteMember(uow, clock))
    bus.register(c.AcceptInvitation, use_cases.AcceptInvitation(uow, clock))
    bus.register(c.ShowInvitation, use_cases.ShowInvitation(uow, clock), public=True)
    bus.register(c.ChangeMemberRole, use_cases.ChangeMemberRole(uow))
    bus.register(c.RemoveMember, use_cases.RemoveMember(uow))
    bus.register(c.ListTokens, use_cases.ListTokens(uow))
    bus.register(c.CreateToken, use_cases.CreateToken(uow, clock))
    bus.register(c.RevokeToken, use_cases.RevokeToken(uow))
    bus.register(c.CurrentToken, use_cases.CurrentToken(uow))
    bus.register(c.ListAudit, use_cases.ListAudit(uow))
    # OAuth for remote MCP clients: the protocol's commands, then the consent page's.
    for public in (
        c.RegisterOAuthClient,
        c.GetOAuthClient,
        c.BeginOAuth,
        c.FindOAuthCode,
        c.RedeemOAuthCode,
        c.FindOAuthGrant,
        c.RefreshOAuth,
        c.RevokeOAuth,
    ):
        bus.register(public, getattr(use_cases, public.__name__)(uow, clock), public=True)
    bus.register(c.GetOAuthRequest, use_cases.GetOAuthRequest(uow, clock))
    bus.register(c.ApproveOAuth, use_cases.ApproveOAuth(uow, clock))
    bus.register(c.DenyOAuth, use_cases.DenyOAuth(uow, clock))
    # Enrollment, and a server speaking for itself (a signed request).
    bus.register(c.EnrollServer, use_cases.EnrollServer(uow, clock), public=True)
    bus.register(c.EnrollmentStatus, use_cases.EnrollmentStatus(uow, clock), public=True)
    status = use_cases.ServerSelfStatus(uow, clock, signatures)
    bus.register(c.ServerSelfStatus, status, public=True)
    uninstalled = use_cases.ReportUninstalled(uow, clock, signatures, reach)
    bus.register(c.ReportUninstalled, uninstalled, public=True)
    return bus


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


def berth_paths(settings: Settings) -> tuple[str, ...]:
    """berth's own paths on this machine, which no app deployed to this machine's server
    may mount: the data dir (as given, and with symlinks resolved) and a SQLite database
    kept elsewhere."""
    from sqlalchemy import make_url

    places = [settings.data_dir]
    url = make_url(database_url(settings))
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        places.append(Path(str(url.database)))
    found = {os.path.abspath(p) for p in places} | {os.path.realpath(p) for p in places}
    return tuple(sorted(p for p in found if not any(p.startswith(q + "/") for q in found)))


class _SshKeys:
    def generate(self, comment: str) -> tuple[bytes, str]:
        from berth.adapters.ssh import generate_keypair

        return generate_keypair(comment)


def _docker_factory(settings: Settings) -> Callable[[str], ports.ContainerRuntime]:
    """Builds a ``DockerRuntime`` reading at most ``docker_max_bytes`` of each answer; the
    docker SDK is imported on the first connection, not at start."""

    def build(base_url: str) -> ports.ContainerRuntime:
        from berth.adapters.docker import DockerRuntime

        return DockerRuntime(base_url, max_bytes=settings.docker_max_bytes)

    return build


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
    from berth.adapters.outbound import SystemResolver, guarded_transport
    from berth.adapters.ratelimit import MemoryRateLimiter
    from berth.adapters.secrets import Argon2Hasher, KeyBox, load_or_create_key
    from berth.adapters.sources import DiskSourceStore, LocalBuildSources
    from berth.adapters.sources.git import GitFetcher
    from berth.adapters.sql import (
        SqlFleet,
        SqlGitCredentials,
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
    box = KeyBox(load_or_create_key(settings.data_dir, settings.secret_key))
    await asyncio.to_thread(migrate, url, box)  # a migration may seal what was in the clear
    engine = create_engine(url)
    outbound = OutboundGuard(SystemResolver(), allow_private=settings.allow_private_targets is True)
    clock = SystemClock()
    events = EventHandlers()  # what every unit of work hands its recorded events to
    fleet = SqlFleet(engine, box, events)
    docker_runtime = _docker_factory(settings)

    def ssh_gateway() -> ports.ServerGateway:
        from berth.adapters.ssh import SshGateway

        return SshGateway(
            fleet.credentials,
            docker_runtime,
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
                docker_runtime,
                docker_socket=settings.docker_socket,
                proxy_factory=proxy_factory,
                caddy_socket=settings.caddy_admin_socket,
            ),
            Transport.SSH: _LazyGateway(ssh_gateway),
        }
    )
    routes = use_cases.RouteTable(fleet)  # one per process: its worker's, monitor's and API's
    source_store = DiskSourceStore(
        settings.data_dir / "sources", max_bytes=settings.source_max_bytes
    )
    uow = SqlUnitOfWorkFactory(engine, box, events)
    limiter: RateLimiter = MemoryRateLimiter()
    if engine.dialect.name == "postgresql":  # counts shared by every replica
        from berth.adapters.sql.limits import SqlRateLimiter

        limiter = SqlRateLimiter(engine)
    # Apps under watch: one refresh of a server at a time, shared by the monitor, the event
    # streams and the start/stop/restart of an app.
    watch = use_cases.WatchContainers(fleet, clock)
    sender = HttpWebhookSender(guarded_transport(outbound))
    adapters = Adapters(
        uow=uow,
        clock=clock,
        hasher=Argon2Hasher(),
        box=box,
        keys=_SshKeys(),
        # Only a worker connects to servers on its own; any process on a user's request.
        gateway=gateway if background else None,
        reach=gateway,
        limiter=limiter,
        throttle=LoginThrottle(
            limiter,
            per_email=settings.login_failures_per_email,
            per_address=settings.login_failures_per_address,
        ),
        stats=SqlStoreStats(engine),
        routes=routes,
        outbound=outbound,
        sources=source_store,
        watch=watch,
        sender=sender,
    )
    policy = Policy(
        open_signup=settings.open_signup,
        local_managed=settings.local,
        deploy_limit=Limit(count=settings.deploy_rate_limit_per_minute, period=60.0),
        berth_paths=berth_paths(settings),
        local_owner=settings.local_owner,
        refuse_local_servers=settings.allow_private_targets is False,
        max_servers=settings.servers_per_user,
        status_fresh_for=use_cases.status_fresh_for(settings.monitor_seconds),
        webhook_timeout=settings.webhook_policy().timeout,
        link_base=settings.base_url,
    )
    waiters = use_cases.Waiters()  # ?wait's wake-ups, told by the worker below too
    bus = build_bus(adapters, policy, events=events, waiters=waiters)
    registrar: asyncio.Task[None] | None = None
    if policy.local_managed and not background:
        # No worker here registers this machine at each pass: this process does, as soon
        # as its owner exists (an account made by another process too), then stops.
        ensure = use_cases.EnsureLocalServer(uow, clock, owner_email=policy.local_owner)
        if await ensure() is None:
            registrar = asyncio.create_task(
                _register_local(ensure, settings.monitor_seconds), name="berth-local"
            )
    metrics = PrometheusMetrics()
    loops: Background | None = None
    if background:
        jobs = MeteredJobQueue(
            SqlJobQueue(engine, box, queue_timeout=settings.queue_timeout, events=events),
            metrics,
        )
        timeouts = use_cases.StepTimeouts(
            health=settings.health_timeout, pull=settings.pull_timeout
        )
        lease = timedelta(seconds=settings.lease_seconds)
        build_sources = LocalBuildSources(
            source_store,
            GitFetcher(outbound, credentials=SqlGitCredentials(engine, box)),
            scratch=settings.data_dir / "builds",
            clock=clock.now,
        )

        def run_factory(worker_id: str) -> use_cases.RunDeployment:
            return use_cases.RunDeployment(
                jobs,
                gateway,
                clock,
                worker_id=worker_id,
                timeouts=timeouts,
                lease=lease,
                routes=routes,
                drain_seconds=settings.proxy_drain_seconds,
                berth_paths=policy.berth_paths,
                sources=build_sources,
                watch=watch,
            )

        outbox = SqlWebhookOutbox(engine, box)
        retries = settings.webhook_policy()

        def deliver_factory(worker_id: str) -> use_cases.DeliverWebhooks:
            return use_cases.DeliverWebhooks(
                outbox,
                sender,
                clock,
                worker_id=worker_id,
                policy=retries,
                link_base=settings.base_url,
            )

        share = use_cases.FleetShare(fleet, clock, f"worker-{uuid4().hex[:12]}")
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
                share=share,
                in_use=lambda server_id: loops is not None and loops.deploying_to(server_id),
                watch=watch,
                events=use_cases.ContainerEvents(watch) if settings.container_events else None,
            ),
            bus,
            share=share,
            beat_seconds=use_cases.fleet_share.BEAT_SECONDS,
            ensure_local=(
                use_cases.EnsureLocalServer(uow, clock, owner_email=policy.local_owner)
                if policy.local_managed
                else None
            ),
            prune_audit=use_cases.PruneAudit(uow, clock, days=settings.audit_days),
            deliver_factory=deliver_factory,
            lease=lease,
            concurrency=WORKER_CONCURRENCY,
            monitor_seconds=settings.monitor_seconds,
            delivery_poll_seconds=settings.webhook_poll_seconds,
            waiters=waiters,
        )

    async def close() -> None:
        if registrar is not None:
            registrar.cancel()
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


_not_registered = ThrottledWarning("local_server_not_registered_yet")


async def _register_local(ensure: Callable[[], Awaitable[Server | None]], every: float) -> None:
    """Register this machine (``serve --local`` without a worker) once its owner exists:
    tried every ``every`` seconds until it is; a store out of reach is tried again."""
    while True:
        await asyncio.sleep(every)
        try:
            if await ensure() is not None:
                return
        except StoreUnavailable as exc:
            _not_registered.warn(reason=exc.detail)


async def back_up_store(settings: Settings, destination: Path) -> StoreArchiveInfo:
    """``berth backup``: the data dir's store copied to ``destination`` (no migration)."""
    return await use_cases.BackUpStore(store_archive(settings))(destination)


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
