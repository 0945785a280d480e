"""Domain models: what the core reasons about. Plain, frozen msgspec Structs."""

from __future__ import annotations

import enum
from datetime import datetime, timedelta
from uuid import UUID

import msgspec

from .redaction import credentials_repr

__all__ = [
    "SESSION_IDLE",
    "SESSION_MAX",
    "WATCHED_STATUSES",
    "ApiToken",
    "BuildContext",
    "BuildSpec",
    "BuiltImage",
    "Container",
    "ContainerPort",
    "ContainerSnapshot",
    "ContainerSpec",
    "ContainerState",
    "ContainerStats",
    "DeliveryAttempt",
    "DeliveryState",
    "DeployHook",
    "Deployment",
    "DeploymentEvent",
    "DeploymentRef",
    "DeploymentSpec",
    "DeploymentState",
    "DiskUsage",
    "FleetCensus",
    "GitCredential",
    "GitSource",
    "HolderSpec",
    "HostCredentials",
    "Installation",
    "InstallationStatus",
    "Invite",
    "Job",
    "ProxyProbe",
    "ProxyRoute",
    "PullProgress",
    "Registry",
    "RegistryAuth",
    "RestartPolicy",
    "RunState",
    "Server",
    "ServerFacts",
    "ServerObservation",
    "ServerStatus",
    "Source",
    "SshCredentials",
    "StoreArchiveInfo",
    "StoreCounts",
    "TlsState",
    "TlsStatus",
    "Transport",
    "User",
    "WebSession",
    "Webhook",
    "WebhookDelivery",
    "WebhookEvent",
    "WebhookFormat",
]


class DeploymentState(enum.StrEnum):
    """Where a deployment is in its life; the last four are final."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELED = "canceled"

    @property
    def is_final(self) -> bool:
        return self not in (DeploymentState.QUEUED, DeploymentState.RUNNING)


class InstallationStatus(enum.StrEnum):
    """An installation's status, derived from its deployments and lifecycle marks."""

    PENDING = "pending"  # never deployed: no deployment has finished, or only canceled ones
    DEPLOYING = "deploying"  # a deployment is queued or running
    RUNNING = "running"  # a succeeded revision is serving (the current one)
    RESTARTING = "restarting"  # its container exited and Docker's restart policy restarts it
    EXITED = "exited"  # its container exited (not on berth's request): exit code and time
    MISSING = "missing"  # its container is gone from the server (removed behind berth's back)
    STOPPED = "stopped"  # stopped on request; its current revision can be started again
    STOPPING = "stopping"  # a stop (or a restart's stop) on request runs now
    FAILED = "failed"  # deployments ended and none serves
    REMOVED = "removed"  # removed: its containers and route are gone, its history is kept

    @property
    def down(self) -> bool:
        """Whether a revision should serve but its container does not run."""
        return self in _DOWN

    @classmethod
    def derive(
        cls,
        *,
        any_active: bool,
        last_final: DeploymentState | None,
        serving: bool = False,
        stopped: bool = False,
        removed: bool = False,
        stopping: bool = False,
        container: RunState | None = None,
        only_canceled: bool = False,
    ) -> InstallationStatus:
        """The rule, for the SQL store and the fakes alike: removed → removed; a queued or
        running deployment → deploying; stopped on request → stopped; a current revision
        (``serving``: its last succeeded deployment, still restored after any later failure)
        → what its container was last seen doing (``container``: running, restarting,
        exited, missing; running when not seen yet); no finished deployment, or only
        canceled ones (``only_canceled``) → pending; else failed.

        A failed redeploy that put the previous revision back is therefore ``running``: the
        status says what is actually running, not how the last attempt ended. An app whose
        first deployment was canceled was never deployed: ``pending`` as before it, not
        ``failed`` (nothing failed)."""
        if removed:
            return cls.REMOVED
        if any_active:
            return cls.DEPLOYING
        if stopping:
            return cls.STOPPING
        if stopped:
            return cls.STOPPED
        if serving or last_final is DeploymentState.SUCCEEDED:
            return cls.RUNNING if container is None else cls(container.value)
        if last_final is None or only_canceled:
            return cls.PENDING
        return cls.FAILED


class RunState(enum.StrEnum):
    """What an installation's container was last seen doing (``berth.core.watch``)."""

    RUNNING = "running"
    RESTARTING = "restarting"
    EXITED = "exited"
    MISSING = "missing"


_DOWN = frozenset(
    {InstallationStatus.RESTARTING, InstallationStatus.EXITED, InstallationStatus.MISSING}
)


class RestartPolicy(enum.StrEnum):
    """Docker's restart policy for an app's container."""

    UNLESS_STOPPED = "unless-stopped"
    ALWAYS = "always"
    ON_FAILURE = "on-failure"
    NO = "no"


class ServerStatus(enum.StrEnum):
    PENDING = "pending"  # created, not yet enrolled or reached
    ONLINE = "online"
    OFFLINE = "offline"
    # It offered an SSH host key other than the pinned ones: berth will not connect
    # until the user confirms the new key (re-pin).
    HOST_KEY_MISMATCH = "host_key_mismatch"
    REMOVED = "removed"  # its install script uninstalled berth: no connection, no deploy
    # Shown, never stored: no worker has stood by the stored status for longer than a pass
    # (berth restarted, its workers stopped): ``last_known_status`` is the stored one.
    CHECKING = "checking"


#: The statuses a worker watches and re-verifies (``checking`` when none has lately).
WATCHED_STATUSES = frozenset(
    (ServerStatus.ONLINE, ServerStatus.OFFLINE, ServerStatus.HOST_KEY_MISMATCH)
)


class Transport(enum.StrEnum):
    SSH = "ssh"
    LOCAL = "local"


class User(msgspec.Struct, frozen=True, kw_only=True):
    id: UUID
    email: str
    password_hash: str
    created_at: datetime


class ApiToken(msgspec.Struct, frozen=True, kw_only=True):
    """The user's one active API token; only its hash is kept."""

    user_id: UUID
    token_hash: str
    prefix: str
    created_at: datetime
    last_used_at: datetime | None = None


class HostCredentials(msgspec.Struct, frozen=True, kw_only=True):
    """Credentials a team saved for one host (``hostname[:port]``, lowercased): its user
    name. The password (or token) is stored sealed and never part of this record."""

    id: UUID
    owner_id: UUID
    host: str
    username: str
    created_at: datetime


class Registry(HostCredentials, frozen=True, kw_only=True):
    """A private registry a user pulls from, its host as image references name it."""


class RegistryAuth(msgspec.Struct, frozen=True, kw_only=True):
    """The credentials a pull from ``host`` sends (Docker's ``X-Registry-Auth``).

    Only the worker's claim unseals them, for one pull; they are never listed, logged
    or shown (``repr`` leaves the password out).
    """

    host: str
    username: str
    password: str

    __repr__ = __str__ = credentials_repr


class GitCredential(HostCredentials, frozen=True, kw_only=True):
    """A team's credentials for the Git repositories of one host (``hostname[:port]`` as
    in the repository URL): a fetch from that host sends them (HTTP basic auth)."""


class PullProgress(msgspec.Struct, frozen=True, kw_only=True):
    """How far a pull is: layers seen and done (downloaded and extracted, or already
    present), bytes downloaded of the layers whose size is known so far."""

    layers: int = 0
    layers_done: int = 0
    bytes_done: int = 0
    bytes_total: int = 0


#: A dashboard session ends after this long without use, or this long after it began.
SESSION_IDLE = timedelta(days=14)
SESSION_MAX = timedelta(days=30)


class WebSession(msgspec.Struct, frozen=True, kw_only=True):
    """A dashboard sign-in. Only a SHA-256 hash of the session id (the cookie) is kept."""

    id_hash: str
    user_id: UUID
    csrf_token: str  # sent back in every form of the session; not a credential by itself
    created_at: datetime
    last_seen_at: datetime
    expires_at: datetime  # idle expiry, moved forward as the session is used


class Invite(msgspec.Struct, frozen=True, kw_only=True):
    """A one-time invitation to sign up (when open sign-up is off); only its hash is kept."""

    token_hash: str
    email: str | None  # the address it is for, or None for anyone who holds it
    created_at: datetime
    expires_at: datetime
    used_at: datetime | None = None


class ServerFacts(msgspec.Struct, frozen=True, kw_only=True):
    os: str | None = None
    arch: str | None = None
    docker_version: str | None = None
    cpus: int | None = None
    memory_bytes: int | None = None


class ContainerStats(msgspec.Struct, frozen=True, kw_only=True):
    """One sample of what a container uses, as ``docker stats`` shows it: CPU in percent
    of one CPU (200 is two CPUs busy), memory without the page cache; ``None`` where
    Docker has nothing to say (a stopped container, a first sample)."""

    running: bool
    cpu_percent: float | None = None
    memory_bytes: int | None = None
    memory_limit_bytes: int | None = None


class DiskUsage(msgspec.Struct, frozen=True, kw_only=True):
    """What Docker keeps on a server's disk (its ``/system/df``), in bytes: image layers
    (shared layers once), containers' writable layers, volumes, the build cache."""

    images: int
    images_bytes: int
    containers: int
    containers_bytes: int
    volumes: int
    volumes_bytes: int
    build_cache_bytes: int

    @property
    def total_bytes(self) -> int:
        return (
            self.images_bytes
            + self.containers_bytes
            + self.volumes_bytes
            + (self.build_cache_bytes)
        )


class Server(msgspec.Struct, frozen=True, kw_only=True):
    id: UUID
    owner_id: UUID
    name: str
    transport: Transport
    address: str | None
    ssh_port: int
    ssh_user: str
    status: ServerStatus
    created_at: datetime
    last_seen_at: datetime | None = None
    facts: ServerFacts = msgspec.field(default_factory=ServerFacts)
    enrollment_expires_at: datetime | None = None
    status_detail: str | None = None  # why it is offline (unreachable, host key mismatch)
    host_keys: tuple[str, ...] = ()  # pinned SSH host public keys
    public_key: str | None = None  # berth's key for this server, to authorize there
    # The host key the server offered instead of a pinned one (status host_key_mismatch).
    offered_host_key: str | None = None
    # When the worker watching it last stood by ``status`` (checked it, or kept it in its
    # backoff); ``None``: no worker has since it was enrolled (or since berth 0009).
    checked_at: datetime | None = None
    # With status ``checking``: the stored status, which nobody has verified lately.
    last_known_status: ServerStatus | None = None

    def shown(self, now: datetime, stale_after: timedelta) -> Server:
        """The server as a reader should see it at ``now``: a watched status that no worker
        stood by within ``stale_after`` (about one monitor pass) reads ``checking``, with
        the stored status as ``last_known_status``, until a worker verifies it again."""
        if self.status not in WATCHED_STATUSES:
            return self
        if self.checked_at is not None and now - self.checked_at <= stale_after:
            return self
        return msgspec.structs.replace(
            self, status=ServerStatus.CHECKING, last_known_status=self.status
        )


class GitSource(msgspec.Struct, frozen=True, kw_only=True):
    """A Git repository to build from: ``ref`` a branch, tag or commit (``None``: the
    repository's default branch)."""

    url: str
    ref: str | None = None


class BuildSpec(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """How to build an app's image on its server: from ``git`` or from an uploaded context
    (``source_id``), exactly one; ``context`` is the subdirectory of the source to build,
    ``dockerfile`` a path inside it; ``args`` are build arguments (not secret: Docker keeps
    them in the image's history)."""

    git: GitSource | None = None
    source_id: UUID | None = None
    context: str = "."
    dockerfile: str = "Dockerfile"
    args: dict[str, str] = msgspec.field(default_factory=dict)
    target: str | None = None


class Source(msgspec.Struct, frozen=True, kw_only=True):
    """An uploaded build context (a tar or tar.gz on the control plane's disk)."""

    id: UUID
    owner_id: UUID
    sha256: str
    size: int
    created_at: datetime
    expires_at: datetime  # unless used again before then, it is deleted at that time


class BuildContext(msgspec.Struct, frozen=True, kw_only=True):
    """A build context made ready on the control plane: ``path`` a tar (or tar.gz) file on
    this machine whose root is the context's, ``commit`` the Git commit it holds (``None``
    for an upload)."""

    path: str
    commit: str | None = None


class BuiltImage(msgspec.Struct, frozen=True, kw_only=True):
    """An image on a server with tags in one repository (a built app's)."""

    id: str
    tags: tuple[str, ...]
    created: int  # Unix seconds


class DeploymentSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What to run. Env values are not here: only their keys (values are sealed in storage).

    With ``build``, ``image`` is the tag the build gives its image
    (``berth/<containerName>:<deployment id prefix>``)."""

    image: str
    port: int
    domain: str | None
    env_keys: tuple[str, ...]
    volumes: tuple[str, ...]
    memory: int | None = None  # bytes; None: no limit
    cpus: float | None = None  # CPUs the container may use; None: no limit
    restart: RestartPolicy = RestartPolicy.UNLESS_STOPPED
    health_path: str | None = None  # an HTTP path that must answer 2xx/3xx; None: the port
    command: tuple[str, ...] | None = None  # argv replacing the image's CMD; never a shell
    #: The host port that publishes ``port`` (apps without a domain; ``None`` with one). A
    #: spec stored without it publishes ``port`` itself: see ``published_port``.
    host_port: int | None = None
    stop_grace_seconds: int = 10  # how long a stop waits after SIGTERM before SIGKILL

    @property
    def published_port(self) -> int | None:
        """The host port the app answers on (``http://server:<it>``); ``None`` for an app
        with a domain (Docker picks a loopback port, the proxy routes to it)."""
        if self.domain is not None:
            return None
        return self.host_port if self.host_port is not None else self.port

    build: BuildSpec | None = None  # built on the server instead of pulled


class DeploymentRef(msgspec.Struct, frozen=True, kw_only=True):
    id: UUID
    state: DeploymentState
    finished_at: datetime | None


class Installation(msgspec.Struct, frozen=True, kw_only=True):
    id: UUID
    server_id: UUID
    name: str
    container_name: str
    spec: DeploymentSpec
    host_port: int | None
    status: InstallationStatus
    created_at: datetime
    updated_at: datetime
    last_deployment: DeploymentRef | None = None
    current_deployment_id: UUID | None = None  # the revision serving: its last succeeded one
    removed_at: datetime | None = None
    stopped_at: datetime | None = None
    #: While a stop on request runs: when it will have ended at the latest (its grace and
    #: a margin), so one cut short by a crash does not say ``stopping`` for ever.
    stopping_until: datetime | None = None
    tls: TlsStatus | None = None  # domain apps: HTTPS as the last deployment's check found it
    # What its container was last seen doing (``berth.core.watch``): the exit code and time
    # of its last exit (while exited or restarting), and Docker's restart count.
    exit_code: int | None = None
    exited_at: datetime | None = None
    restart_count: int = 0


class DeploymentEvent(msgspec.Struct, frozen=True, kw_only=True):
    at: datetime
    step: str
    message: str


class Ending(msgspec.Struct, frozen=True, kw_only=True):
    """How a run ends its deployment: the final ``state`` at ``at``, the ``error`` it
    records (``None`` when it succeeded) and the closing event's ``message`` (the event's
    step is the state's value). ``events`` are the run's events not yet written, written
    first in the same transaction; ``step`` the step the last of them entered, if one
    did (the deployment's step becomes it)."""

    state: DeploymentState
    at: datetime
    error: str | None
    message: str
    events: tuple[DeploymentEvent, ...] = ()
    step: str | None = None


class Deployment(msgspec.Struct, frozen=True, kw_only=True):
    id: UUID
    installation_id: UUID
    server_id: UUID
    spec: DeploymentSpec
    state: DeploymentState
    step: str | None
    error: str | None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    events: tuple[DeploymentEvent, ...] = ()
    image_id: str | None = None  # the image it actually ran (a tag can move; rollback needs this)
    rollback_of: UUID | None = None  # the earlier deployment whose revision this one redeploys
    attempts: int = 0  # runs so far: the first, and takeovers after a worker stopped
    commit: str | None = None  # the Git commit its image was built from (builds from Git)


class ContainerPort(msgspec.Struct, frozen=True, kw_only=True):
    container_port: int
    host_ip: str | None
    host_port: int | None
    protocol: str


class Container(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str
    image: str
    state: str
    status: str
    created_at: datetime | None
    ports: tuple[ContainerPort, ...]
    installation_id: UUID | None
    # The image it runs (``sha256:…``), which a tag's name does not tell once the tag
    # moves; ``None`` when Docker did not say, and in snapshots stored before it was kept.
    image_id: str | None = None


class ContainerSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """The last container list seen on a server, and when."""

    server_id: UUID
    observed_at: datetime
    containers: tuple[Container, ...]


class ServerObservation(msgspec.Struct, frozen=True, kw_only=True):
    """What the monitor writes of one server after a check: only what changed.

    ``status`` (with ``detail``) when the status or its reason changed; ``seen`` to move
    ``last_seen_at`` to ``at``; ``facts`` when they changed; ``containers`` to replace
    the container snapshot, observed at ``at``. ``None``/``False`` leaves a field alone.
    ``host_key_mismatch`` records ``offered_host_key`` (the key the server presented);
    ``online`` clears it (the pinned key answered again); other statuses keep it.
    """

    server_id: UUID
    at: datetime
    status: ServerStatus | None = None
    detail: str | None = None
    offered_host_key: str | None = None
    seen: bool = False
    facts: ServerFacts | None = None
    containers: tuple[Container, ...] | None = None


class FleetCensus(msgspec.Struct, frozen=True, kw_only=True):
    """What a worker's heartbeat finds: the servers to watch, the workers alive (it
    included) and how many of the servers it watches."""

    servers: int
    workers: int
    held: int

    @property
    def share(self) -> int:
        """This worker's fair share: the servers divided among the live workers, rounded
        up (so that every server has a watcher)."""
        return -(-self.servers // max(1, self.workers))


class ContainerSpec(msgspec.Struct, frozen=True, kw_only=True):
    """Everything Docker needs to create an app's container; every value is an API field."""

    name: str
    image: str
    env: dict[str, str]
    container_port: int
    host_ip: str  # "0.0.0.0" without a domain, "127.0.0.1" with one
    host_port: int | None  # None: Docker picks a free port
    binds: tuple[str, ...]  # Docker "Binds": "<host>:<container>[:ro]"
    labels: dict[str, str]
    memory: int | None = None  # bytes
    cpus: float | None = None
    restart: RestartPolicy = RestartPolicy.UNLESS_STOPPED
    command: tuple[str, ...] | None = None
    #: The port holder (a container's name) whose network the container joins: then it
    #: publishes no port of its own (the holder does), ``host_ip``/``host_port`` unused.
    joins: str | None = None


class HolderSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A port app's holder: a long-lived container of berth's own image that owns the
    app's network namespace and publishes ``host_port`` (on ``host_ip``) to
    ``container_port`` in it; the app's containers join it (``ContainerSpec.joins``)."""

    name: str
    host_ip: str
    host_port: int
    container_port: int
    labels: dict[str, str]


class ContainerState(msgspec.Struct, frozen=True, kw_only=True):
    """What a container is doing now."""

    id: str
    name: str
    status: str  # created | running | restarting | exited | dead | ...
    running: bool
    exit_code: int | None
    host_port: int | None  # the host port its container port is published on
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    restart_count: int = 0  # restarts by Docker's restart policy since it was started
    started_at: datetime | None = None  # when it last started
    finished_at: datetime | None = None  # when it last exited
    joins: str | None = None  # the container whose network it joins (a port holder)


class TlsState(enum.StrEnum):
    """HTTPS through the proxy for an app's domain, as berth last checked it."""

    PENDING = "pending"  # routed; the certificate is not served yet (ACME takes a while)
    READY = "ready"  # a TLS handshake with the domain's name completed and HTTPS answered
    ERROR = "error"  # the proxy does not serve the domain as it should: ``reason`` says why


class TlsStatus(msgspec.Struct, frozen=True, kw_only=True):
    state: TlsState
    reason: str | None  # why it is pending or an error; None when ready
    issuer: str  # "acme" | "internal": who issues the domain's certificate
    checked_at: datetime


class ProxyProbe(msgspec.Struct, frozen=True, kw_only=True):
    """What answered for a domain through the server's proxy, seen from the server
    itself: plain HTTP on the proxy's HTTP port, then HTTPS (a TLS handshake with the
    domain as SNI) on its HTTPS port."""

    issuer: str  # "acme" | "internal", as the proxy is configured for the domain
    http: str | None  # "HTTP 308" …, or None: nothing answered
    redirect: str | None  # the Location of a 3xx answer
    https: str | None  # what answered over TLS ("HTTP 200" …), None if the handshake failed
    tls_error: str | None  # why the handshake (or its verification) failed
    verified: bool = True  # the certificate was checked against a trusted root


class ProxyRoute(msgspec.Struct, frozen=True, kw_only=True):
    """One domain the server's reverse proxy serves over HTTPS, and where it sends it:
    ``127.0.0.1:<upstream_port>`` on that server (the app's loopback-published port)."""

    domain: str  # a valid, lowercased DNS name (``types.check_domain``)
    upstream_port: int


class SshCredentials(msgspec.Struct, frozen=True, kw_only=True):
    """What berth needs to reach a server over SSH: its own key and the pinned host keys."""

    private_key: bytes  # OpenSSH private key, in the clear only in memory
    host_keys: tuple[str, ...]  # "ssh-ed25519 AAAA…" lines


class Job(msgspec.Struct, frozen=True, kw_only=True):
    """A claimed deployment with everything the worker needs to run it."""

    deployment: Deployment
    owner_id: UUID
    installation_id: UUID
    container_name: str
    server: Server
    env: dict[str, str]
    # The installation's revision serving when the job was handed out: a run tells its
    # containers (to restore on failure) from leftovers of runs that did not succeed.
    current_deployment_id: UUID | None = None
    # The owner's credentials for the registry the image names, if saved (read at claim).
    registry_auth: RegistryAuth | None = None


class StoreCounts(msgspec.Struct, frozen=True, kw_only=True):
    """What the store holds right now, counted at once for ``/metrics``: the same on
    every replica, since it is read from the shared database rather than one process."""

    deployments: dict[DeploymentState, int]  # every state, zero when none
    servers: dict[ServerStatus, int]  # every status, zero when none
    queued: int
    oldest_queued_at: datetime | None


class StoreArchiveInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What a backup file is: its schema version and one sealed value to check a key on."""

    schema_version: str | None  # None: not a berth database at all
    users: int = 0
    sealed_sample: bytes | None = None  # any value sealed with the data dir's key


class WebhookEvent(enum.StrEnum):
    """What a webhook can be told of: a closed set (docs/decisions/2026-11-25-webhooks.md)."""

    DEPLOYMENT_SUCCEEDED = "deployment.succeeded"
    DEPLOYMENT_FAILED = "deployment.failed"  # failed, or timed_out (its server never came)
    DEPLOYMENT_CANCELED = "deployment.canceled"
    SERVER_OFFLINE = "server.offline"
    SERVER_ONLINE = "server.online"
    INSTALLATION_DOWN = "installation.down"  # its container stopped running (once a crash loop)
    INSTALLATION_UP = "installation.up"  # ... and runs again


class WebhookFormat(enum.StrEnum):
    """How a webhook's deliveries read: Standard Webhooks JSON, or a chat message."""

    STANDARD = "standard"  # {"type", "timestamp", "data"}
    SLACK = "slack"  # {"text"}: a Slack incoming webhook
    DISCORD = "discord"  # {"content"}: a Discord webhook


class Webhook(msgspec.Struct, frozen=True, kw_only=True):
    """An endpoint of a user's that berth POSTs signed events to. Its secret is sealed in
    the store and shown once, when it is created; it is never part of this Struct."""

    id: UUID
    owner_id: UUID
    url: str
    events: tuple[WebhookEvent, ...]
    created_at: datetime
    format: WebhookFormat = WebhookFormat.STANDARD


class DeployHook(msgspec.Struct, frozen=True, kw_only=True):
    """An installation's push-to-deploy hook: a push event POSTed to its URL (which holds
    ``id``, unguessable), signed with its secret, deploys the pushed commit. The secret
    is sealed in the store, shown once (when made or rotated) and never part of this
    Struct; ``created_by`` is the user the hook's deploys are recorded as."""

    id: UUID
    owner_id: UUID
    installation_id: UUID
    created_by: UUID
    created_at: datetime


class DeliveryState(enum.StrEnum):
    PENDING = "pending"  # waiting for its next attempt (or being attempted)
    DELIVERED = "delivered"  # the endpoint answered 2xx
    FAILED = "failed"  # every attempt failed: given up


class DeliveryAttempt(msgspec.Struct, frozen=True, kw_only=True):
    """One POST of a delivery: when, what the endpoint answered (``None``: no answer),
    and why it did not count as delivered."""

    at: datetime
    status_code: int | None = None
    error: str | None = None


class WebhookDelivery(msgspec.Struct, frozen=True, kw_only=True):
    """One event for one webhook, from the outbox: its attempts so far and the next one."""

    id: UUID
    webhook_id: UUID
    event: WebhookEvent
    created_at: datetime
    state: DeliveryState
    attempts: tuple[DeliveryAttempt, ...] = ()
    next_attempt_at: datetime | None = None
    delivered_at: datetime | None = None
