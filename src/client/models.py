"""The API's bodies as msgspec Structs: camelCase on the wire, snake_case attributes.

Each Struct is one schema of ``GET /api/agent/openapi.json`` (named in its docstring),
field for field, in the document's order; ``tests/unit/test_client_openapi.py`` checks
names, required-ness and types against the document, so the two cannot drift apart.
Answers ignore fields they do not know (a newer berth may add some: the API only gains);
requests send only what was given (``omit_defaults``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

import msgspec

__all__ = [
    "AuditActor",
    "AuditEvent",
    "AuditOutcome",
    "AuditPage",
    "AuditTarget",
    "Build",
    "BuildRequest",
    "ChangeServerRequest",
    "Container",
    "ContainerList",
    "ContainerStats",
    "CreateServerRequest",
    "CreatedServer",
    "CurrentToken",
    "DeliveryAttempt",
    "DeliveryState",
    "DeployHook",
    "DeployHookCreated",
    "DeployRequest",
    "Deployment",
    "DeploymentEnd",
    "DeploymentList",
    "DeploymentRef",
    "DeploymentState",
    "DeploymentStep",
    "DiskUsage",
    "EnrollFacts",
    "EnrollRequest",
    "Enrolled",
    "EnrollmentStatus",
    "Event",
    "Facts",
    "GitCredential",
    "GitCredentialList",
    "GitCredentialRequest",
    "GitRequest",
    "GitSource",
    "Health",
    "Installation",
    "InstallationList",
    "InstallationStats",
    "InstallationStatus",
    "Invitation",
    "InvitationRequest",
    "Logs",
    "Member",
    "MemberList",
    "Port",
    "Problem",
    "ProblemField",
    "PushReceived",
    "Queued",
    "Readiness",
    "Registry",
    "RegistryList",
    "RegistryRequest",
    "RepinRequest",
    "RestartPolicy",
    "Role",
    "RoleRequest",
    "RollbackRequest",
    "Server",
    "ServerDisk",
    "ServerList",
    "ServerStatus",
    "Source",
    "Team",
    "TeamList",
    "TeamRequest",
    "Tls",
    "TlsState",
    "Token",
    "TokenCreated",
    "TokenList",
    "TokenRequest",
    "TokenScope",
    "Transport",
    "User",
    "Webhook",
    "WebhookCreated",
    "WebhookDelivery",
    "WebhookDeliveryList",
    "WebhookEvent",
    "WebhookFormat",
    "WebhookList",
    "WebhookRequest",
    "WebhookTest",
]

DeploymentState = Literal["queued", "running", "succeeded", "failed", "timed_out", "canceled"]
DeliveryState = Literal["pending", "delivered", "failed"]
InstallationStatus = Literal[
    "pending",
    "deploying",
    "running",
    "stopping",
    "restarting",
    "exited",
    "missing",
    "stopped",
    "failed",
    "removed",
]
WebhookFormat = Literal["standard", "slack", "discord"]
RestartPolicy = Literal["always", "no", "on-failure", "unless-stopped"]
ServerStatus = Literal["pending", "online", "offline", "host_key_mismatch", "removed", "checking"]
TlsState = Literal["pending", "ready", "error"]
Transport = Literal["ssh", "local"]
WebhookEvent = Literal[
    "deployment.canceled",
    "deployment.failed",
    "deployment.succeeded",
    "server.offline",
    "server.online",
    "installation.down",
    "installation.up",
]

Role = Literal["owner", "admin", "deployer", "viewer"]
TokenScope = Literal["read", "deploy", "admin"]
AuditOutcome = Literal["ok", "denied"]
Time = Annotated[datetime, msgspec.Meta(tz=True)]  # RFC 3339 with its offset (berth: UTC)

FINAL_STATES: frozenset[str] = frozenset({"succeeded", "failed", "timed_out", "canceled"})


class _Body(msgspec.Struct, rename="camel", kw_only=True):
    """An answer's body."""


class _Request(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    """A request's body: fields left at their default are not sent (berth's default
    applies, and is the same)."""


# --- problems ---------------------------------------------------------------------------


class ProblemField(_Body):
    """``ProblemField``: one invalid input: where (``body.port``, ``query.tail``), what."""

    location: str
    message: str
    value: Any = None


class Problem(_Body):
    """``Problem``: an RFC 9457 error body (``application/problem+json``)."""

    type: str
    title: str
    status: int
    detail: str
    errors: list[ProblemField]
    request_id: str | None


# --- servers ----------------------------------------------------------------------------


class Facts(_Body):
    """``FactsOut``: what a server said about itself (null: unknown)."""

    os: str | None
    arch: str | None
    docker_version: str | None
    cpus: int | None
    memory_bytes: int | None


class Server(_Body):
    """``ServerOut``."""

    id: UUID
    name: str
    transport: Transport
    address: str | None
    ssh_port: int
    ssh_user: str
    status: ServerStatus
    status_detail: str | None
    created_at: Time
    last_seen_at: Time | None
    facts: Facts
    host_keys: list[str]
    host_key_fingerprints: list[str]
    offered_host_key: str | None
    offered_host_key_fingerprint: str | None
    public_key: str | None
    authorized_keys_line: str | None
    last_known_status: ServerStatus | None = None  # with status checking: the stored one


class ServerList(_Body, omit_defaults=True):  # no nextCursor on the last page
    """``ServerListOut``."""

    servers: list[Server]
    next_cursor: UUID | None = None  # pass it as ``cursor`` for the next page


class CreatedServer(Server, kw_only=True):
    """``CreatedServerOut``: a server with a new one-time enrollment token (one hour)
    and the command that enrolls it."""

    enrollment_token: str
    enrollment_expires_at: Time
    install_command: str


class CreateServerRequest(_Request):
    """``CreateServerRequest``."""

    name: str
    address: str | None = None
    ssh_port: int = 22
    ssh_user: str = "berth"
    host_keys: list[str] | None = None
    team_id: UUID | None = None


class ChangeServerRequest(_Request):
    """``ChangeServerRequest``: a field left ``UNSET`` is not sent, and kept."""

    name: str | msgspec.UnsetType = msgspec.UNSET
    address: str | msgspec.UnsetType = msgspec.UNSET
    ssh_port: int | msgspec.UnsetType = msgspec.UNSET


class RepinRequest(_Request):
    """``RepinRequest``."""

    host_keys: list[str]
    fingerprint: str


class DiskUsage(_Body):
    """``DiskUsageOut``: what Docker keeps on a server's disk, in bytes."""

    images: int
    images_bytes: int
    containers: int
    containers_bytes: int
    volumes: int
    volumes_bytes: int
    build_cache_bytes: int
    total_bytes: int


class ServerDisk(_Body):
    """``ServerDiskOut``."""

    server_id: UUID
    usage: DiskUsage


class Port(_Body):
    """``PortOut``."""

    container_port: int
    host_ip: str | None
    host_port: int | None
    protocol: str


class Container(_Body):
    """``ContainerOut``: any container on a server, berth's or not."""

    id: str
    name: str
    image: str
    state: str
    status: str
    created_at: Time | None
    ports: list[Port]
    installation_id: UUID | None
    image_id: str | None = None  # absent from a berth older than the field


class ContainerList(_Body):
    """``ContainerListOut``."""

    server_id: UUID
    observed_at: Time | None
    server_status: ServerStatus
    containers: list[Container]


# --- enrollment (the install script's routes) -------------------------------------------


class EnrollFacts(_Request):
    """``EnrollFactsIn``."""

    os: str | None = None
    arch: str | None = None
    docker_version: str | None = None
    cpus: int | None = None
    memory_bytes: int | None = None


class EnrollRequest(_Request):
    """``EnrollRequest``."""

    host_keys: list[str]
    ssh_port: int | None = None
    facts: EnrollFacts | None = None


class Enrolled(_Body):
    """``EnrolledOut``."""

    server_id: UUID
    ssh_user: str
    public_key: str | None
    authorized_keys_line: str | None
    status: ServerStatus


class EnrollmentStatus(_Body):
    """``EnrollmentStatusOut``."""

    server_id: UUID
    status: ServerStatus
    status_detail: str | None
    ssh_port: int


# --- deployments and installations ------------------------------------------------------


class GitRequest(_Request):
    """``GitRequest``: a Git repository to build from."""

    url: str
    ref: str | None = None


class BuildRequest(_Request):
    """``BuildRequest``: how the server builds the app's image (``git`` or ``source_id``)."""

    git: GitRequest | None = None
    source_id: UUID | None = None
    context: str | None = None
    dockerfile: str | None = None
    args: dict[str, str] | None = None
    target: str | None = None


class DeployRequest(_Request):
    """``DeployRequest``: exactly one of ``image`` and ``build``."""

    server_id: UUID
    name: str
    image: str | msgspec.UnsetType = msgspec.UNSET
    build: BuildRequest | None = None
    port: int = 3000
    domain: str | None = None
    env: dict[str, str] | None = None
    volumes: list[str] | None = None
    memory: int | str | None = None
    cpus: float | None = None
    restart: RestartPolicy = "unless-stopped"
    health_path: str | None = None
    command: list[str] | None = None
    host_port: int | None = None
    stop_grace_seconds: int = 10


class RollbackRequest(_Request):
    """``RollbackRequest``."""

    deployment_id: UUID | None = None


class Event(_Body):
    """``EventOut``: one step of a deployment."""

    at: Time
    step: str
    message: str


class GitSource(_Body):
    """``GitOut``."""

    url: str
    ref: str | None


class Build(_Body):
    """``BuildOut``: what an app's image is built from."""

    git: GitSource | None
    source_id: UUID | None
    context: str
    dockerfile: str
    args: dict[str, str]
    target: str | None


class Source(_Body):
    """``SourceOut``: an uploaded build context."""

    id: UUID
    sha256: str
    size: int
    expires_at: Time


class _Spec(_Body):
    """What an app runs (``_SpecOut``): an installation's and a deployment's first fields;
    env values have no field (berth never returns them)."""

    image: str
    port: int
    domain: str | None
    env_keys: list[str]
    volumes: list[str]
    memory: int | None
    cpus: float | None
    restart: RestartPolicy
    health_path: str | None
    command: list[str] | None


class Deployment(_Spec):
    """``DeploymentOut``: a deployment (a revision): its spec, state, step events."""

    id: UUID
    installation_id: UUID
    server_id: UUID
    state: DeploymentState
    step: str | None
    error: str | None
    image_id: str | None
    rollback_of: UUID | None
    attempts: int
    created_at: Time
    started_at: Time | None
    finished_at: Time | None
    events: list[Event]
    host_port: int | None = None  # without a domain: the host port publishing ``port``
    stop_grace_seconds: int = 10
    build: Build | None = None
    commit: str | None = None


class DeploymentRef(_Body):
    """``DeploymentRefOut``."""

    id: UUID
    state: DeploymentState
    finished_at: Time | None


class Tls(_Body):
    """``TlsOut``: HTTPS for an app's domain as last checked."""

    state: TlsState
    reason: str | None
    issuer: Literal["acme", "internal"]
    checked_at: Time


class Installation(_Spec):
    """``InstallationOut``: an app on a server."""

    id: UUID
    server_id: UUID
    name: str
    container_name: str
    url: str | None
    status: InstallationStatus
    created_at: Time
    updated_at: Time
    last_deployment: DeploymentRef | None
    current_deployment_id: UUID | None
    removed_at: Time | None
    stopped_at: Time | None
    tls: Tls | None
    host_port: int | None = None  # without a domain: the host port publishing ``port``
    stop_grace_seconds: int = 10
    build: Build | None = None
    exit_code: int | None = None
    exited_at: Time | None = None
    restart_count: int = 0


class InstallationList(_Body, omit_defaults=True):  # no nextCursor on the last page
    """``InstallationListOut``."""

    server_id: UUID
    installations: list[Installation]
    next_cursor: UUID | None = None  # pass it as ``cursor`` for the next page


class Queued(_Body):
    """``DeployOut``: a deploy's or a rollback's answer."""

    deployment: Deployment
    installation: Installation


class DeploymentList(_Body):
    """``DeploymentListOut``: a page of an installation's deployments, newest first."""

    installation_id: UUID
    deployments: list[Deployment]
    next_before: UUID | None


class Logs(_Body):
    """``LogsOut``."""

    installation_id: UUID
    container_id: str | None
    lines: list[str]


class ContainerStats(_Body):
    """``ContainerStatsOut``."""

    running: bool
    cpu_percent: float | None = None
    memory_bytes: int | None = None
    memory_limit_bytes: int | None = None


class InstallationStats(_Body):
    """``InstallationStatsOut``."""

    installation_id: UUID
    container_id: str | None
    stats: ContainerStats | None


class DeploymentStep(_Body):
    """A ``step`` message of a deployment's event stream: ``id`` resumes after it."""

    id: int | None
    at: Time
    step: str
    message: str


class DeploymentEnd(_Body):
    """The ``end`` message of a deployment's event stream: the stream's last."""

    state: DeploymentState


# --- registries and webhooks ------------------------------------------------------------


class RegistryRequest(_Request):
    """``RegistryRequest``."""

    host: str
    username: str
    password: str


class Registry(_Body):
    """``RegistryOut``: never the password."""

    id: UUID
    host: str
    username: str
    created_at: Time


class RegistryList(_Body):
    """``RegistryListOut``."""

    registries: list[Registry]


class GitCredentialRequest(_Request):
    """``GitCredentialRequest``."""

    host: str
    username: str
    password: str


class GitCredential(_Body):
    """``GitCredentialOut``: never the password."""

    id: UUID
    host: str
    username: str
    created_at: Time


class GitCredentialList(_Body):
    """``GitCredentialListOut``."""

    git_credentials: list[GitCredential]


class DeployHook(_Body):
    """``DeployHookOut``: never its secret."""

    id: UUID
    installation_id: UUID
    url: str
    created_at: Time


class DeployHookCreated(DeployHook, kw_only=True):
    """``DeployHookCreatedOut``: with its secret, shown this once."""

    secret: str


class PushReceived(_Body, omit_defaults=True):
    """``PushOut``: what a delivery to a deploy hook did."""

    status: Literal["queued", "ignored"]
    detail: str
    deployment_id: UUID | None = None


class WebhookRequest(_Request):
    """``WebhookRequest``."""

    url: str
    events: list[WebhookEvent]
    format: WebhookFormat = "standard"


class Webhook(_Body):
    """``WebhookOut``: never its secret."""

    id: UUID
    url: str
    events: list[WebhookEvent]
    created_at: Time
    format: WebhookFormat = "standard"  # how its deliveries read


class WebhookCreated(Webhook, kw_only=True):
    """``WebhookCreatedOut``: with its signing secret, shown this once."""

    secret: str


class WebhookList(_Body, omit_defaults=True):  # no nextCursor on the last page
    """``WebhookListOut``."""

    webhooks: list[Webhook]
    next_cursor: UUID | None = None  # pass it as ``cursor`` for the next page


class DeliveryAttempt(_Body):
    """``DeliveryAttemptOut``."""

    at: Time
    status_code: int | None
    error: str | None


class WebhookDelivery(_Body):
    """``WebhookDeliveryOut``."""

    id: UUID
    message_id: str
    webhook_id: UUID
    event: WebhookEvent
    created_at: Time
    state: DeliveryState
    attempts: list[DeliveryAttempt]
    next_attempt_at: Time | None
    delivered_at: Time | None


class WebhookDeliveryList(_Body):
    """``WebhookDeliveryListOut``."""

    webhook_id: UUID
    deliveries: list[WebhookDelivery]


class WebhookTest(_Body):
    """``WebhookTestOut``."""

    webhook_id: UUID
    event: str
    at: Time
    delivered: bool
    status_code: int | None
    error: str | None


# --- public routes ----------------------------------------------------------------------


class Health(_Body):
    """``Health``."""

    status: str


class Readiness(_Body):
    """``Readiness``."""

    status: str
    database: Literal["sqlite", "postgresql"]


# -- teams, members, invitations, named tokens, the audit log ------------------------------


class TeamRequest(_Request):
    """``TeamRequest``."""

    name: str


class Team(_Body):
    """``TeamOut``: a team of yours, with your role in it."""

    id: UUID
    name: str
    role: Role | None
    personal: bool
    created_at: Time


class TeamList(_Body):
    """``TeamListOut``."""

    teams: list[Team]


class Member(_Body):
    """``MemberOut``."""

    user_id: UUID
    email: str
    role: Role
    joined_at: Time
    team_id: UUID


class MemberList(_Body):
    """``MemberListOut``."""

    members: list[Member]


class InvitationRequest(_Request):
    """``InvitationRequest``."""

    email: str
    role: Role


class Invitation(_Body):
    """``InvitationOut``: with its one-time token, shown this once."""

    id: UUID
    email: str
    role: Role
    expires_at: Time
    token: str
    url: str


class RoleRequest(_Request):
    """``RoleRequest``."""

    role: Role


class TokenRequest(_Request):
    """``TokenRequest``."""

    name: str
    scopes: list[TokenScope]
    team_id: UUID | None = None
    server_ids: list[UUID] | None = None
    expires_at: str | None = None  # RFC 3339, with its zone


class Token(_Body):
    """``TokenOut``: never its secret."""

    id: UUID
    name: str
    team_id: UUID
    scopes: list[TokenScope]
    server_ids: list[UUID] | None
    expires_at: Time | None
    created_at: Time
    last_used_at: Time | None


class TokenCreated(Token):
    """``TokenCreatedOut``: with the secret, shown this once."""

    token: str


class TokenList(_Body):
    """``TokenListOut``."""

    tokens: list[Token]


class User(_Body):
    """``UserOut``."""

    id: UUID
    email: str


class CurrentToken(_Body):
    """``CurrentTokenOut``: who the calling token is."""

    id: UUID | None
    name: str
    team_id: UUID
    scopes: list[TokenScope]
    server_ids: list[UUID] | None
    expires_at: Time | None
    role: Role
    user: User


class AuditActor(_Body):
    """``AuditActorOut``."""

    user_id: UUID
    email: str
    token_id: UUID | None
    token_name: str | None


class AuditTarget(_Body):
    """``AuditTargetOut``."""

    type: str
    id: str | None
    name: str | None


class AuditEvent(_Body):
    """``AuditEventOut``."""

    id: UUID
    at: Time
    actor: AuditActor
    action: str
    target: AuditTarget
    client_address: str | None
    outcome: AuditOutcome
    detail: str | None


class AuditPage(_Body):
    """``AuditPageOut``."""

    events: list[AuditEvent]
    next_before: UUID | None
