"""Domain models: what the core reasons about. Plain, frozen msgspec Structs."""

from __future__ import annotations

import enum
from datetime import datetime
from uuid import UUID

import msgspec

__all__ = [
    "ApiToken",
    "Container",
    "ContainerPort",
    "ContainerSnapshot",
    "ContainerSpec",
    "ContainerState",
    "ContainerStats",
    "Deployment",
    "DeploymentEvent",
    "DeploymentRef",
    "DeploymentSpec",
    "DeploymentState",
    "DiskUsage",
    "Installation",
    "InstallationStatus",
    "Invite",
    "Job",
    "ProxyRoute",
    "RestartPolicy",
    "Server",
    "ServerFacts",
    "ServerObservation",
    "ServerStatus",
    "SshCredentials",
    "Transport",
    "User",
    "WebSession",
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

    PENDING = "pending"  # no deployment has finished yet
    DEPLOYING = "deploying"  # a deployment is queued or running
    RUNNING = "running"  # a succeeded revision is serving (the current one)
    STOPPED = "stopped"  # stopped on request; its current revision can be started again
    FAILED = "failed"  # deployments ended and none serves
    REMOVED = "removed"  # removed: its containers and route are gone, its history is kept

    @classmethod
    def derive(
        cls,
        *,
        any_active: bool,
        last_final: DeploymentState | None,
        serving: bool = False,
        stopped: bool = False,
        removed: bool = False,
    ) -> InstallationStatus:
        """The rule, for the SQL store and the fakes alike: removed → removed; a queued or
        running deployment → deploying; stopped on request → stopped; a current revision
        (``serving``: its last succeeded deployment, still restored after any later failure)
        → running; no finished deployment → pending; else failed.

        A failed redeploy that put the previous revision back is therefore ``running``: the
        status says what is actually running, not how the last attempt ended."""
        if removed:
            return cls.REMOVED
        if any_active:
            return cls.DEPLOYING
        if stopped:
            return cls.STOPPED
        if serving or last_final is DeploymentState.SUCCEEDED:
            return cls.RUNNING
        if last_final is None:
            return cls.PENDING
        return cls.FAILED


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


class DeploymentSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What to run. Env values are not here: only their keys (values are sealed in storage)."""

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


class DeploymentEvent(msgspec.Struct, frozen=True, kw_only=True):
    at: datetime
    step: str
    message: str


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
    """

    server_id: UUID
    at: datetime
    status: ServerStatus | None = None
    detail: str | None = None
    seen: bool = False
    facts: ServerFacts | None = None
    containers: tuple[Container, ...] | None = None


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


class ContainerState(msgspec.Struct, frozen=True, kw_only=True):
    """What a container is doing now."""

    id: str
    name: str
    status: str  # created | running | restarting | exited | dead | ...
    running: bool
    exit_code: int | None
    host_port: int | None  # the host port its container port is published on
    labels: dict[str, str] = msgspec.field(default_factory=dict)


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
