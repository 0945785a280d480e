"""Commands: what a caller asks of the application layer, and their parsers.

Every entrypoint — HTTP, dashboard, CLI, MCP, the library facade — turns its
input into one of these commands and hands it to the message bus
(:mod:`berth.core.bus`), which runs its one handler. Commands are snake_case
Structs; the wire format (camelCase, ``body.`` locations) exists only at the
HTTP edge. ``parse_*`` checks raw input field by field and raises
:class:`~berth.core.errors.InvalidInput` listing every broken rule at once, at
the core's own field paths (``port``, ``env.KEY``, ``volumes[2]``).

``Command[R]``'s parameter is what handling the command returns, so
``await bus.handle(GetServer(server_id=…), user)`` is typed ``Server``.

The limits every caller meets (how long a wait, how many log lines, how long a
page) are the commands' own: a command built past one raises ``InvalidInput``
naming the field, whichever entrypoint built it (``WAIT_MAX``, ``TAIL_MAX``,
``PAGE_MAX``).
"""

from __future__ import annotations

import contextlib
import enum
import math
from collections.abc import Callable, Collection, Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar, Generic, TypeVar
from uuid import UUID

import msgspec

from .access import Actor, Right, Role, TokenScope, scope_closure
from .builds import parse_build
from .errors import FieldError, InvalidInput, NotFound
from .models import (
    ApiToken,
    BuildSpec,
    DeployHook,
    Deployment,
    GitCredential,
    Installation,
    InstallationStatus,
    Registry,
    RestartPolicy,
    Server,
    ServerFacts,
    ServerStatus,
    Source,
    StoreCounts,
    User,
    Webhook,
    WebhookDelivery,
    WebhookEvent,
    WebhookFormat,
    WebSession,
)
from .oauth import IssuedTokens, OAuthAuthorization, OAuthClient, OAuthGrant
from .redaction import credentials_repr
from .results import (
    ContainerList,
    CreatedDeployHook,
    CreatedServer,
    CreatedWebhook,
    DeploymentFeed,
    DeploymentPage,
    DeployResult,
    InstallationList,
    InstallationUsage,
    Logs,
    LogStream,
    NewSession,
    PushOutcome,
    ServerDisk,
    SignUpMode,
    WebhookTestResult,
)
from .teams import (
    AccessToken,
    AuditFilter,
    AuditOutcome,
    AuditPage,
    CreatedInvitation,
    CreatedToken,
    InvitationPreview,
    Member,
    Team,
)
from .types import (
    DEFAULT_SSH_PORT,
    STOP_GRACE_DEFAULT,
    RuleError,
    check_address,
    check_command,
    check_cpus,
    check_domain,
    check_email,
    check_env,
    check_env_key,
    check_env_value,
    check_fingerprint,
    check_git_host,
    check_health_path,
    check_host_keys,
    check_idempotency_key,
    check_image,
    check_memory,
    check_name,
    check_port,
    check_registry_host,
    check_registry_password,
    check_registry_username,
    check_restart,
    check_server_name,
    check_ssh_user,
    check_stop_grace,
    check_uuid,
    check_volume,
    check_volumes,
    checked_text,
    sanitize_container_name,
)
from .webhooks import check_events, check_format, check_webhook_url, without_user_info

DEFAULT_PORT = 3000
#: The longest a caller may wait for a deployment to end, in seconds (``?wait``).
WAIT_MAX = 300
#: How many of a container's last log lines a caller may ask for at once, and the default.
TAIL_MAX = 5000
TAIL_DEFAULT = 100
#: The most items a page of a listing holds (revisions, deployments, deliveries).
PAGE_MAX = 100

R = TypeVar("R", covariant=True)


class Command(msgspec.Struct, Generic[R], frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A request to the application layer; handling it returns an ``R``.

    Every command class declares ``right``: what its actor must be allowed
    (:class:`~berth.core.access.Right`; the bus checks it before the handler runs, and a
    test fails on a registered command without one). A command that changes something
    names its action in the audit log, ``audited`` (``deploy``, ``server.create``; ``None``:
    a read, not recorded unless refused).
    """

    right: ClassVar[Right]
    audited: ClassVar[str | None] = None

    def audit_action(self) -> str | None:
        """The action this command is in the audit log (``None``: a read)."""
        return self.audited


# --- deployments -------------------------------------------------------------------------


class DeployCommand(Command[DeployResult], frozen=True, kw_only=True):
    """Deploy (or redeploy) the app ``name`` on one of the owner's servers.

    ``keep_env`` names keys of ``env`` whose value stays the installation's current one
    (a dashboard redeploy never shows values); ``wait`` is how many seconds to wait for
    a final state before answering (0: answer once queued).
    """

    right: ClassVar[Right] = Right.DEPLOY
    audited: ClassVar[str | None] = "deploy"

    server_id: UUID
    name: str
    container_name: str
    image: str | None = None  # exactly one of image and build (``parse_deploy``)
    port: int = DEFAULT_PORT
    domain: str | None = None
    env: dict[str, str] = msgspec.field(default_factory=dict)
    volumes: tuple[str, ...] = ()
    memory: int | None = None
    cpus: float | None = None
    restart: RestartPolicy = RestartPolicy.UNLESS_STOPPED
    health_path: str | None = None
    command: tuple[str, ...] | None = None
    #: The host port publishing ``port`` (``None``: ``port`` itself; none with a domain).
    host_port: int | None = None
    stop_grace_seconds: int = STOP_GRACE_DEFAULT
    idempotency_key: str | None = None
    keep_env: frozenset[str] = frozenset()
    wait: float = 0.0
    build: BuildSpec | None = None  # built on the server (``image`` is then its tag)

    def __post_init__(self) -> None:
        parse_wait(self.wait, loc="wait")

    @property
    def published_port(self) -> int | None:
        """The host port the app will answer on; ``None`` with a domain."""
        if self.domain is not None:
            return None
        return self.host_port if self.host_port is not None else self.port

    @property
    def port_field(self) -> str:
        """The input that chose the host port, for a refusal to name."""
        return "host_port" if self.host_port is not None else "port"


class UploadSource(Command[Source], frozen=True, kw_only=True):
    """Keep an uploaded build context (a tar or tar.gz, ``chunks`` as they arrive) for a
    deploy's ``build.sourceId``."""

    right: ClassVar[Right] = Right.DEPLOY
    audited: ClassVar[str | None] = "source.upload"

    chunks: Any  # AsyncIterator[bytes]: read once, never held whole


class GetDeployment(Command[Deployment], frozen=True, kw_only=True):
    """One deployment of the caller's, with its events."""

    right: ClassVar[Right] = Right.READ

    deployment_id: UUID


class WaitForDeployment(Command[Deployment], frozen=True, kw_only=True):
    """The deployment once it is final, or as it stands after ``seconds``."""

    right: ClassVar[Right] = Right.READ

    deployment_id: UUID
    seconds: float

    def __post_init__(self) -> None:
        parse_wait(self.seconds, loc="seconds")


class FollowDeployment(Command[DeploymentFeed], frozen=True, kw_only=True):
    """A deployment's events after the event ``after`` (an event id; 0: from the first),
    then its live ones, until it ends: a feed to iterate."""

    right: ClassVar[Right] = Right.READ

    deployment_id: UUID
    after: int = 0

    def __post_init__(self) -> None:
        parse_count(self.after, loc="after", low=0, high=2**63 - 1)


class ListDeployments(Command[list[Deployment]], frozen=True, kw_only=True):
    """The newest deployments on one of the caller's servers, newest first."""

    right: ClassVar[Right] = Right.READ

    server_id: UUID
    limit: int = 20

    def __post_init__(self) -> None:
        parse_count(self.limit, loc="limit", low=1, high=PAGE_MAX)


class ListRevisions(Command[DeploymentPage], frozen=True, kw_only=True):
    """An installation's deployments (its revisions), newest first, a page at a time:
    ``before`` is the last id of the previous page. Kept after the installation's removal."""

    right: ClassVar[Right] = Right.READ

    installation_id: UUID
    limit: int = 20
    before: UUID | None = None

    def __post_init__(self) -> None:
        parse_count(self.limit, loc="limit", low=1, high=PAGE_MAX)


class Rollback(Command[DeployResult], frozen=True, kw_only=True):
    """Deploy an earlier succeeded revision of an installation again: its spec, its env and
    the very image it ran. ``deployment_id``: that revision (default: the one before the
    current one). ``wait`` and ``idempotency_key`` as for a deploy."""

    right: ClassVar[Right] = Right.DEPLOY
    audited: ClassVar[str | None] = "rollback"

    installation_id: UUID
    deployment_id: UUID | None = None
    idempotency_key: str | None = None
    wait: float = 0.0

    def __post_init__(self) -> None:
        parse_wait(self.wait, loc="wait")


class CancelDeployment(Command[Deployment], frozen=True, kw_only=True):
    """Cancel a queued or running deployment (a running one is stopped where it is and the
    previous revision restored); the deployment as it stands after the request."""

    right: ClassVar[Right] = Right.DEPLOY
    audited: ClassVar[str | None] = "deployment.cancel"

    deployment_id: UUID
    wait: float = 0.0

    def __post_init__(self) -> None:
        parse_wait(self.wait, loc="wait")


class InstallationAction(enum.StrEnum):
    STOP = "stop"
    START = "start"
    RESTART = "restart"


class ChangeInstallation(Command[tuple[Server, Installation]], frozen=True, kw_only=True):
    """Stop, start or restart an installation's container; recorded as an event."""

    right: ClassVar[Right] = Right.DEPLOY
    audited: ClassVar[str | None] = "installation.change"

    installation_id: UUID
    action: InstallationAction

    def audit_action(self) -> str | None:
        return f"installation.{self.action.value}"


# --- installations -----------------------------------------------------------------------


class ListInstallations(Command[InstallationList], frozen=True, kw_only=True):
    """The installations on one of the caller's servers; removed ones only with
    ``include_removed``."""

    right: ClassVar[Right] = Right.READ

    server_id: UUID
    include_removed: bool = False
    status: InstallationStatus | None = None
    name: str | None = None


class GetInstallation(Command[tuple[Server, Installation]], frozen=True, kw_only=True):
    """One installation of the caller's, with its server."""

    right: ClassVar[Right] = Right.READ

    installation_id: UUID


class _ContainerOutput(msgspec.Struct, frozen=True, kw_only=True):
    """An installation's container output from its last ``tail`` lines (1 to
    ``TAIL_MAX``); ``timestamps``: each line starts with Docker's RFC 3339 time of it
    and a space."""

    installation_id: UUID
    tail: int = TAIL_DEFAULT
    timestamps: bool = False

    def __post_init__(self) -> None:
        parse_count(self.tail, loc="tail", low=1, high=TAIL_MAX)


class InstallationLogs(_ContainerOutput, Command[Logs], frozen=True, kw_only=True):
    """The last ``tail`` lines of an installation's container, env values redacted."""

    right: ClassVar[Right] = Right.READ


class FollowInstallationLogs(_ContainerOutput, Command[LogStream], frozen=True, kw_only=True):
    """The installation's container output from its last ``tail`` lines, then live, until
    the container stops: a stream to iterate."""

    right: ClassVar[Right] = Right.READ


class GetInstallationStats(Command[InstallationUsage], frozen=True, kw_only=True):
    """CPU and memory of an installation's container, sampled now on its server."""

    right: ClassVar[Right] = Right.READ

    installation_id: UUID


class GetServerDiskUsage(Command[ServerDisk], frozen=True, kw_only=True):
    """What Docker keeps on a server's disk (images, containers, volumes, build cache)."""

    right: ClassVar[Right] = Right.READ

    server_id: UUID


class RemoveInstallation(Command[None], frozen=True, kw_only=True):
    """Remove an installation's containers and route and mark it removed; its deployments
    stay readable."""

    right: ClassVar[Right] = Right.DEPLOY
    audited: ClassVar[str | None] = "installation.remove"

    installation_id: UUID


# --- servers -----------------------------------------------------------------------------


class CreateServerCommand(Command[CreatedServer], frozen=True, kw_only=True):
    """Register a server; with ``host_keys`` it is reachable at once, else it waits to enroll."""

    right: ClassVar[Right] = Right.ADMIN
    audited: ClassVar[str | None] = "server.create"

    name: str
    team_id: UUID | None = None  # default: the actor's team
    address: str | None = None
    ssh_port: int = 22
    ssh_user: str = "berth"
    host_keys: tuple[str, ...] = ()


class NewEnrollmentToken(Command[CreatedServer], frozen=True, kw_only=True):
    """A fresh one-time enrollment token (and so install command) for a pending server;
    the previous one stops working."""

    right: ClassVar[Right] = Right.ADMIN
    audited: ClassVar[str | None] = "server.enrollment_token"

    server_id: UUID


class ListServers(Command[list[Server]], frozen=True, kw_only=True):
    """The caller's servers, oldest first; only those in ``status`` and whose name holds
    ``name`` (any case), when given. Paged at the edges (``core.paging``)."""

    right: ClassVar[Right] = Right.READ

    status: ServerStatus | None = None
    name: str | None = None


class GetServer(Command[Server], frozen=True, kw_only=True):
    """One of the caller's servers."""

    right: ClassVar[Right] = Right.READ

    server_id: UUID


class DeleteServer(Command[None], frozen=True, kw_only=True):
    """Forget one of the caller's servers; its containers run on."""

    right: ClassVar[Right] = Right.ADMIN
    audited: ClassVar[str | None] = "server.delete"

    server_id: UUID


class RepinHostKeys(Command[Server], frozen=True, kw_only=True):
    """Accept a server's new SSH host key: pin ``host_keys`` (which must hold the key the
    server offered) once the user confirmed its ``fingerprint``."""

    right: ClassVar[Right] = Right.ADMIN
    audited: ClassVar[str | None] = "server.repin"

    server_id: UUID
    host_keys: tuple[str, ...]
    fingerprint: str


class ChangeServer(Command[Server], frozen=True, kw_only=True):
    """Change one of the caller's servers in place (its history kept): ``None`` leaves a
    field as it is. A new address or SSH port is checked at once."""

    right: ClassVar[Right] = Right.ADMIN
    audited: ClassVar[str | None] = "server.change"

    server_id: UUID
    name: str | None = None
    address: str | None = None
    ssh_port: int | None = None


class ListContainers(Command[ContainerList], frozen=True, kw_only=True):
    """Every container on one of the caller's servers (live, or the last snapshot)."""

    right: ClassVar[Right] = Right.READ

    server_id: UUID


# --- credentials saved per host: private registries and Git hosts ----------------------

#: What a host's saved credentials are (``Registry``, ``GitCredential``).
H = TypeVar("H")


class AddHostCredentials(Command[H], frozen=True, kw_only=True):
    """Save the team's credentials for one host (a registry's, a Git host's): one entry
    per host per team. The password is sealed at rest and never returned."""

    right: ClassVar[Right] = Right.ADMIN

    host: str
    username: str
    password: str

    __repr__ = __str__ = credentials_repr


class AddRegistry(AddHostCredentials[Registry], frozen=True, kw_only=True):
    """Save the caller's credentials for a registry host; a deploy of an image from that
    host pulls with them."""

    audited: ClassVar[str | None] = "registry.add"


class ListRegistries(Command[list[Registry]], frozen=True, kw_only=True):
    """The caller's registries (host and user name; never a password), by host."""

    right: ClassVar[Right] = Right.ADMIN


class RemoveRegistry(Command[None], frozen=True, kw_only=True):
    """Forget one of the caller's registries; deploys from its host pull without it."""

    right: ClassVar[Right] = Right.ADMIN
    audited: ClassVar[str | None] = "registry.remove"

    registry_id: UUID


class AddGitCredential(AddHostCredentials[GitCredential], frozen=True, kw_only=True):
    """Save the team's credentials for the Git repositories of a host; a build from a
    repository on that host fetches with them."""

    audited: ClassVar[str | None] = "git-credential.add"


class ListGitCredentials(Command[list[GitCredential]], frozen=True, kw_only=True):
    """The team's Git credentials (host and user name; never a password), by host."""

    right: ClassVar[Right] = Right.ADMIN


class RemoveGitCredential(Command[None], frozen=True, kw_only=True):
    """Forget one of the team's Git credentials; fetches from its host go without them."""

    right: ClassVar[Right] = Right.ADMIN
    audited: ClassVar[str | None] = "git-credential.remove"

    git_credential_id: UUID


# --- push to deploy ----------------------------------------------------------------------


class CreateDeployHook(Command[CreatedDeployHook], frozen=True, kw_only=True):
    """Make the installation's deploy hook, or give it a new secret (its URL stays): the
    secret is returned this once. The installation must be built from Git."""

    right: ClassVar[Right] = Right.DEPLOY
    audited: ClassVar[str | None] = "deploy-hook.create"

    installation_id: UUID


class GetDeployHook(Command[DeployHook], frozen=True, kw_only=True):
    """The installation's deploy hook (never its secret); ``NotFound`` if it has none."""

    right: ClassVar[Right] = Right.READ

    installation_id: UUID


class RemoveDeployHook(Command[None], frozen=True, kw_only=True):
    """Remove the installation's deploy hook: its URL deploys nothing from then on."""

    right: ClassVar[Right] = Right.DEPLOY
    audited: ClassVar[str | None] = "deploy-hook.remove"

    installation_id: UUID


class ReceivePush(Command[PushOutcome], frozen=True, kw_only=True):
    """A delivery POSTed to deploy hook ``hook_id``'s URL: ``body`` as received, ``headers``
    keyed in lowercase. Nobody is signed in: the signature (``berth.core.pushes``) is the
    credential; a push to the installation's branch is then deployed as the hook
    (``DeployPush``, which the bus admits like any deploy)."""

    right: ClassVar[Right] = Right.PUBLIC

    hook_id: UUID
    body: bytes
    headers: dict[str, str]

    def __repr__(self) -> str:
        return f"ReceivePush(hook_id={self.hook_id}, body=<{len(self.body)} bytes>)"

    __str__ = __repr__


class DeployPush(Command[PushOutcome], frozen=True, kw_only=True):
    """Deploy ``commit``, pushed to ``ref``, as a build of the installation's Git source
    (its spec and env as last deployed), if ``ref`` is the installation's branch
    (``default_branch``: the repository's, for an installation built from its default
    branch); a deployment of it queued before is superseded, and one running is let
    finish first. What a deploy hook sends, as the hook."""

    right: ClassVar[Right] = Right.DEPLOY
    audited: ClassVar[str | None] = "deploy"

    installation_id: UUID
    ref: str
    commit: str | None
    default_branch: str | None = None


# --- webhooks ----------------------------------------------------------------------------


class CreateWebhook(Command[CreatedWebhook], frozen=True, kw_only=True):
    """A new webhook of the caller's: ``url`` is POSTed each of ``events``, signed with a
    secret berth generates and returns this once."""

    right: ClassVar[Right] = Right.ADMIN
    audited: ClassVar[str | None] = "webhook.create"

    url: str
    events: tuple[WebhookEvent, ...]
    format: WebhookFormat = WebhookFormat.STANDARD


class ListWebhooks(Command[list[Webhook]], frozen=True, kw_only=True):
    """The caller's webhooks (never their secrets); only those whose URL holds ``url``
    (any case), when given. Paged at the edges (``core.paging``)."""

    right: ClassVar[Right] = Right.ADMIN

    url: str | None = None


class DeleteWebhook(Command[None], frozen=True, kw_only=True):
    """Forget one of the caller's webhooks; its deliveries not yet made are dropped."""

    right: ClassVar[Right] = Right.ADMIN
    audited: ClassVar[str | None] = "webhook.delete"

    webhook_id: UUID


class SendTestWebhook(Command[WebhookTestResult], frozen=True, kw_only=True):
    """Send one of the caller's webhooks a test event (``webhook.test``) now, once, and say
    how its endpoint answered: not retried, not in its delivery log."""

    right: ClassVar[Right] = Right.ADMIN
    audited: ClassVar[str | None] = "webhook.test"

    webhook_id: UUID


class ListWebhookDeliveries(Command[list[WebhookDelivery]], frozen=True, kw_only=True):
    """One of the caller's webhooks' newest deliveries, newest first, with their attempts."""

    right: ClassVar[Right] = Right.ADMIN

    webhook_id: UUID
    limit: int = 50

    def __post_init__(self) -> None:
        parse_count(self.limit, loc="limit", low=1, high=PAGE_MAX)


# --- accounts (the actor is who asks; ``None`` where nobody is signed in yet) --------------


class Authenticate(Command[Actor], frozen=True, kw_only=True):
    """Who an API token (the main one or a named one) acts as: its user in its team,
    with its scopes and servers; ``client_address`` is where the request came from."""

    right: ClassVar[Right] = Right.PUBLIC

    token: str
    client_address: str | None = None


class CreateUser(Command[User], frozen=True, kw_only=True):
    """A new user (the admin command; the dashboard signs up with ``SignUp``)."""

    right: ClassVar[Right] = Right.PUBLIC

    email: str
    password: str


class RegenerateToken(Command[str], frozen=True, kw_only=True):
    """A new main API token for the actor's user; the old one is revoked."""

    right: ClassVar[Right] = Right.ACCOUNT
    audited: ClassVar[str | None] = "token.regenerate"


class ResetToken(Command[str], frozen=True, kw_only=True):
    """A new main API token for the user ``email``, the old one revoked: the operator's
    (``berth token regenerate --email``), with no actor."""

    right: ClassVar[Right] = Right.PUBLIC

    email: str


class TokenInfo(Command[ApiToken | None], frozen=True, kw_only=True):
    """The actor's API token: its first characters and last use (never the token)."""

    right: ClassVar[Right] = Right.SIGNED_IN


class SignUpPolicy(Command[SignUpMode], frozen=True, kw_only=True):
    """Who may sign up now."""

    right: ClassVar[Right] = Right.PUBLIC


class ReadStoreCounts(Command[StoreCounts], frozen=True, kw_only=True):
    """Counts over the whole store for the operator's metrics (no actor: the metrics
    endpoint has its own protection)."""

    right: ClassVar[Right] = Right.PUBLIC


class CheckStore(Command[None], frozen=True, kw_only=True):
    """Whether the store answers a read and takes a write now (readiness); raises
    ``StoreUnavailable`` when it does not (a full disk: reads answer, writes fail)."""

    right: ClassVar[Right] = Right.PUBLIC


class SignUp(Command[NewSession], frozen=True, kw_only=True):
    """Create an account and a dashboard session."""

    right: ClassVar[Right] = Right.PUBLIC

    email: str
    password: str
    invite: str | None = None


class SignIn(Command[NewSession], frozen=True, kw_only=True):
    """A dashboard session for a password, throttled per address and email."""

    right: ClassVar[Right] = Right.PUBLIC

    email: str
    password: str
    address: str


class ResolveSession(Command[tuple[User, WebSession] | None], frozen=True, kw_only=True):
    """The user and session of a session cookie, if it is valid."""

    right: ClassVar[Right] = Right.PUBLIC

    session_id: str


class SignOut(Command[None], frozen=True, kw_only=True):
    """End a dashboard session."""

    right: ClassVar[Right] = Right.PUBLIC

    session_id: str


class CreateInvite(Command[str], frozen=True, kw_only=True):
    """An invitation token for sign-up (optionally bound to ``email``)."""

    right: ClassVar[Right] = Right.PUBLIC

    email: str | None = None


class IssueSetupCode(Command[str | None], frozen=True, kw_only=True):
    """A one-time code the first account signs up with, while there is none (``berth
    serve`` prints it); ``None`` once an account exists."""

    right: ClassVar[Right] = Right.PUBLIC


# --- enrollment (the actor is the install script, holding the enrollment token) -----------


class EnrollServer(Command[Server], frozen=True, kw_only=True):
    """Pin a server's host keys with its one-time enrollment token."""

    right: ClassVar[Right] = Right.PUBLIC

    token: str
    enrollment: EnrollCommand
    client_address: str | None = None


class EnrollmentStatus(Command[Server], frozen=True, kw_only=True):
    """The server an enrollment token names (while it is valid)."""

    right: ClassVar[Right] = Right.PUBLIC

    token: str


class ServerSignature(msgspec.Struct, frozen=True, kw_only=True):
    """A signed request as it came: who it says it is, when, the signature, and the
    request's method and path (what was signed, with those)."""

    server_id: UUID
    signed_at: int  # seconds since the epoch
    signature: bytes  # the SSHSIG blob, unarmored
    method: str
    path: str


# --- a server speaking for itself (the actor is its install script, signing with the
# server's SSH host key) ------------------------------------------------------------------


class ServerSelfStatus(Command[Server], frozen=True, kw_only=True):
    """The status of the server that signed the request."""

    right: ClassVar[Right] = Right.PUBLIC

    signature: ServerSignature


class ReportUninstalled(Command[Server], frozen=True, kw_only=True):
    """The signing server's install script uninstalled berth: mark it removed, drop the
    connection."""

    right: ClassVar[Right] = Right.PUBLIC

    signature: ServerSignature


# --- teams, members, named tokens, the audit log ------------------------------------------
#
# A command naming a ``team_id`` acts in that team: the bus asks the actor's role there
# first (a named token acts in its own team only; elsewhere the team is "not found").

#: The most servers one named token may be limited to, and the longest a name may be.
TOKEN_SERVERS_MAX = 100
TEAM_NAME_MAX = 100
#: The most entries a page of the audit log holds, and the default.
AUDIT_PAGE_MAX = 200
AUDIT_PAGE_DEFAULT = 50


class ListTeams(Command[list[Team]], frozen=True, kw_only=True):
    """The actor's user's teams, each with their role in it: their personal team first,
    then the others oldest first."""

    right: ClassVar[Right] = Right.SIGNED_IN


class CreateTeam(Command[Team], frozen=True, kw_only=True):
    """A new team, the actor's user its owner."""

    right: ClassVar[Right] = Right.ACCOUNT
    audited: ClassVar[str | None] = "team.create"

    name: str


class ActAs(Command[Actor], frozen=True, kw_only=True):
    """The actor's user acting in ``team_id`` with their role there (the dashboard's team
    switcher); ``NotFound`` if they are not a member."""

    right: ClassVar[Right] = Right.SIGNED_IN

    team_id: UUID


class ListMembers(Command[list[Member]], frozen=True, kw_only=True):
    """The members of a team the actor belongs to, oldest first."""

    right: ClassVar[Right] = Right.READ

    team_id: UUID


class InviteMember(Command[CreatedInvitation], frozen=True, kw_only=True):
    """A one-time invitation (7 days) for ``email`` to join the team as ``role``. Inviting
    an owner needs the role ``owner``."""

    right: ClassVar[Right] = Right.MEMBERS
    audited: ClassVar[str | None] = "member.invite"

    team_id: UUID
    email: str
    role: Role


class AcceptInvitation(Command[Member], frozen=True, kw_only=True):
    """The actor's user joins the team an invitation names, if it was made for their
    email, is unused and not expired."""

    right: ClassVar[Right] = Right.ACCOUNT
    audited: ClassVar[str | None] = "member.join"

    token: str


class ChangeMemberRole(Command[Member], frozen=True, kw_only=True):
    """Give a member another role; an owner's role, or the role ``owner``, needs the role
    ``owner``; the team keeps at least one owner."""

    right: ClassVar[Right] = Right.MEMBERS
    audited: ClassVar[str | None] = "member.role"

    team_id: UUID
    user_id: UUID
    role: Role


class RemoveMember(Command[None], frozen=True, kw_only=True):
    """Take a member out of the team; their tokens for it stop at once. Removing an owner
    needs the role ``owner``; the team keeps at least one owner."""

    right: ClassVar[Right] = Right.MEMBERS
    audited: ClassVar[str | None] = "member.remove"

    team_id: UUID
    user_id: UUID


class ListTokens(Command[list[AccessToken]], frozen=True, kw_only=True):
    """The actor's user's named tokens, newest first; never a secret."""

    right: ClassVar[Right] = Right.SIGNED_IN


class CreateToken(Command[CreatedToken], frozen=True, kw_only=True):
    """A named token of the actor's user for ``team_id`` (default: the actor's team),
    narrowed to ``scopes`` and, if given, to ``server_ids`` (servers of that team) until
    ``expires_at``. Its secret is in the result, and nowhere else ever again."""

    right: ClassVar[Right] = Right.ACCOUNT
    audited: ClassVar[str | None] = "token.create"

    name: str
    scopes: frozenset[TokenScope]
    team_id: UUID | None = None
    server_ids: frozenset[UUID] | None = None
    expires_at: datetime | None = None


class RevokeToken(Command[None], frozen=True, kw_only=True):
    """Revoke one of the actor's user's named tokens: it is refused from now on."""

    right: ClassVar[Right] = Right.ACCOUNT
    audited: ClassVar[str | None] = "token.revoke"

    token_id: UUID


class CurrentToken(Command[Actor], frozen=True, kw_only=True):
    """Who the actor is: its user, team, role, token, scopes and servers."""

    right: ClassVar[Right] = Right.SIGNED_IN


class ShowInvitation(Command[InvitationPreview], frozen=True, kw_only=True):
    """What an invitation's one-time link shows (its team, role and email) without using
    it; ``NotFound`` when unknown, used or expired. Public: the link is the credential,
    and whoever opens it may not be signed in yet."""

    right: ClassVar[Right] = Right.PUBLIC

    token: str


# --- OAuth for remote MCP clients (berth.core.oauth) ----------------------------------
# The protocol's commands are public (the client has no berth credential yet; the SDK's
# handlers check the client, the redirect URI and PKCE); the consent page's are the
# signed-in user's.


class RegisterOAuthClient(Command[None], frozen=True, kw_only=True):
    """Store a client that registered itself (RFC 7591; the SDK checked its metadata)."""

    right: ClassVar[Right] = Right.PUBLIC

    client_id: str
    name: str
    redirect_uris: tuple[str, ...]
    metadata: str


class GetOAuthClient(Command[OAuthClient | None], frozen=True, kw_only=True):
    """A registered client, or ``None``."""

    right: ClassVar[Right] = Right.PUBLIC

    client_id: str


class BeginOAuth(Command[UUID], frozen=True, kw_only=True):
    """A client's authorization request (the SDK checked the client and the redirect
    URI): kept, pending the user's answer on the consent page, whose id it returns."""

    right: ClassVar[Right] = Right.PUBLIC

    client_id: str
    redirect_uri: str
    redirect_uri_explicit: bool
    code_challenge: str
    state: str | None = None
    resource: str | None = None
    requested_scopes: tuple[str, ...] | None = None


class GetOAuthRequest(Command[tuple[OAuthAuthorization, OAuthClient]], frozen=True, kw_only=True):
    """A pending authorization request and its client, for the consent page;
    ``NotFound`` when it expired or was answered."""

    right: ClassVar[Right] = Right.SIGNED_IN

    authorization_id: UUID


class ApproveOAuth(Command[tuple[OAuthAuthorization, str]], frozen=True, kw_only=True):
    """The user's yes: the client may act as them in ``team_id`` with ``scopes`` and,
    if given, only on ``server_ids``. Returns the authorization and its one-time code."""

    right: ClassVar[Right] = Right.ACCOUNT
    audited: ClassVar[str | None] = "oauth.approve"

    authorization_id: UUID
    team_id: UUID
    scopes: frozenset[TokenScope]
    server_ids: frozenset[UUID] | None = None


class DenyOAuth(Command[OAuthAuthorization], frozen=True, kw_only=True):
    """The user's no: the request is forgotten (the client hears ``access_denied``)."""

    right: ClassVar[Right] = Right.SIGNED_IN

    authorization_id: UUID


class FindOAuthCode(Command[OAuthAuthorization | None], frozen=True, kw_only=True):
    """The approved authorization a code names, or ``None``."""

    right: ClassVar[Right] = Right.PUBLIC

    code: str


class RedeemOAuthCode(Command[IssuedTokens], frozen=True, kw_only=True):
    """Exchange a code (once) for a named token and a refresh token; ``Unauthorized``
    when it is unknown, used, expired, another client's, or its user left the team."""

    right: ClassVar[Right] = Right.PUBLIC

    code: str
    client_id: str


class FindOAuthGrant(Command[OAuthGrant | None], frozen=True, kw_only=True):
    """The grant a refresh token (``refresh``) or an access token names, or ``None``."""

    right: ClassVar[Right] = Right.PUBLIC

    token: str
    refresh: bool


class RefreshOAuth(Command[IssuedTokens], frozen=True, kw_only=True):
    """Rotate a grant: a new named token (the last one revoked) and a new refresh token
    (this one used up), with ``scopes`` (at most the grant's)."""

    right: ClassVar[Right] = Right.PUBLIC

    refresh_token: str
    client_id: str
    scopes: frozenset[TokenScope]


class RevokeOAuth(Command[None], frozen=True, kw_only=True):
    """End a grant (RFC 7009): its refresh token and its named token stop at once."""

    right: ClassVar[Right] = Right.PUBLIC

    grant_id: UUID


class ListAudit(Command[AuditPage], frozen=True, kw_only=True):
    """A team's audit log (default: the actor's team), newest first, a page at a time:
    ``before`` is the last id of the previous page; ``action``, ``outcome`` and ``actor``
    (an email) keep only the entries that match each one given."""

    right: ClassVar[Right] = Right.ADMIN

    team_id: UUID | None = None
    limit: int = AUDIT_PAGE_DEFAULT
    before: UUID | None = None
    action: str | None = None
    outcome: AuditOutcome | None = None
    actor: str | None = None

    def __post_init__(self) -> None:
        parse_count(self.limit, loc="limit", low=1, high=AUDIT_PAGE_MAX)

    @property
    def where(self) -> AuditFilter | None:
        """The entries this page keeps (``None``: every one)."""
        if self.action is None and self.outcome is None and self.actor is None:
            return None
        return AuditFilter(action=self.action, outcome=self.outcome, actor=self.actor)


def _check_team_name(value: object) -> str:
    text = check_server_name(value)  # the same rule: 1-100 characters, no control ones
    return text.strip()


def _check_token_name(value: object) -> str:
    return _check_team_name(value)


def _check_role(value: object) -> Role:
    if not isinstance(value, str) or value not in Role.__members__.values():
        raise RuleError("Expected one of owner, admin, deployer, viewer.")
    return Role(value)


def _check_scopes(value: object) -> frozenset[TokenScope]:
    if not isinstance(value, list | tuple | set | frozenset) or not 1 <= len(value) <= 3:
        raise RuleError("Expected a list of 1 to 3 of read, deploy, admin.")
    found: set[TokenScope] = set()
    for item in value:
        if not isinstance(item, str) or item not in TokenScope.__members__.values():
            raise RuleError("Expected a list of 1 to 3 of read, deploy, admin.")
        found.add(TokenScope(item))
    return scope_closure(found)


def _check_server_ids(value: object) -> frozenset[UUID]:
    if not isinstance(value, list | tuple | set | frozenset) or not value:
        raise RuleError(f"Expected a list of 1 to {TOKEN_SERVERS_MAX} server ids.")
    if len(value) > TOKEN_SERVERS_MAX:
        raise RuleError(f"Expected a list of 1 to {TOKEN_SERVERS_MAX} server ids.")
    return frozenset(check_uuid(item) for item in value)


def _check_moment(value: object) -> datetime:
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise RuleError("Expected an RFC 3339 time like 2027-01-31T12:00:00Z.") from None
    else:
        raise RuleError("Expected an RFC 3339 time like 2027-01-31T12:00:00Z.")
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise RuleError("Expected a time with its zone, like 2027-01-31T12:00:00Z.")
    return moment.astimezone(UTC)


def parse_create_team(raw: object, *, loc: str = "") -> CreateTeam:
    """Check a new team (``{"name"}``)."""
    f = _Fields(raw, loc)
    f.unknown({"name"})
    f.take("name", _check_team_name, required=True)
    f.done()
    return CreateTeam(name=f.values["name"])


def parse_invite_member(raw: object, team_id: UUID, *, loc: str = "") -> InviteMember:
    """Check an invitation (``{"email", "role"}``, both required)."""
    f = _Fields(raw, loc)
    f.unknown({"email", "role"})
    f.take("email", check_email, required=True)
    f.take("role", _check_role, required=True)
    f.done()
    return InviteMember(team_id=team_id, email=f.values["email"], role=f.values["role"])


def parse_change_role(
    raw: object, team_id: UUID, user_id: UUID, *, loc: str = ""
) -> ChangeMemberRole:
    """Check a role change (``{"role"}``)."""
    f = _Fields(raw, loc)
    f.unknown({"role"})
    f.take("role", _check_role, required=True)
    f.done()
    return ChangeMemberRole(team_id=team_id, user_id=user_id, role=f.values["role"])


def parse_create_token(raw: object, *, now: datetime | None = None, loc: str = "") -> CreateToken:
    """Check a new named token (``{"name", "scopes", "team_id"?, "server_ids"?,
    "expires_at"?}``); ``expires_at`` must be after ``now`` when given."""
    f = _Fields(raw, loc)
    f.unknown({"name", "scopes", "team_id", "server_ids", "expires_at"})
    f.take("name", _check_token_name, required=True)
    f.take("scopes", _check_scopes, required=True)
    f.take("team_id", check_uuid, nullable=True)
    f.take("server_ids", _check_server_ids, nullable=True)
    expires = f.take("expires_at", _check_moment, nullable=True)
    if expires and now is not None and f.values["expires_at"] <= now:
        f.fail("expires_at", "Must be in the future.", str(f.raw["expires_at"]))
    f.done()
    v = f.values
    return CreateToken(
        name=v["name"],
        scopes=v["scopes"],
        team_id=v.get("team_id"),
        server_ids=v.get("server_ids"),
        expires_at=v.get("expires_at"),
    )


class _Fields:
    """Collects checked values and every error, at field paths like ``env.KEY``.

    Paths are the core's own (snake_case, no ``body.`` prefix); an entrypoint puts
    them in its own words (the HTTP layer: ``body.sshPort``).
    """

    def __init__(self, raw: object, loc: str = "") -> None:
        self.loc = loc
        self.errors: list[FieldError] = []
        self.values: dict[str, Any] = {}
        # A non-object is one error at ``loc``, not also one per "missing" field.
        self.is_object = isinstance(raw, Mapping)
        if not isinstance(raw, Mapping):
            self.errors.append(FieldError(loc, "Expected a JSON object.", _safe(raw)))
            self.raw: Mapping[str, Any] = {}
        else:
            self.raw = raw

    def at(self, name: str) -> str:
        return f"{self.loc}.{name}" if self.loc else name

    def unknown(self, allowed: set[str]) -> None:
        # The value is not echoed: nothing says a misspelt field (``Env``) holds no secret.
        for key in self.raw:
            if key not in allowed:
                self.errors.append(FieldError(self.at(key), "Unknown field.", None))

    def take(
        self,
        name: str,
        check: Callable[[object], Any],
        *,
        required: bool = False,
        nullable: bool = False,
        secret: bool = False,
        shown: Callable[[object], object] | None = None,
    ) -> bool:
        """Check field ``name``; return whether it is present with a usable value.

        A ``secret`` field's value is never echoed in its error, whatever its type; a
        ``shown`` one is echoed as ``shown`` makes it (a URL without its user info).
        """
        if name not in self.raw:
            if required and self.is_object:
                self.errors.append(FieldError(self.at(name), "Field required.", None))
            return False
        value = self.raw[name]
        if value is None and nullable:
            return False
        try:
            self.values[name] = check(value)
        except RuleError as exc:
            echoed = None if secret else _safe(shown(value) if shown else value)
            self.errors.append(FieldError(self.at(name), str(exc), echoed))
            return False
        return True

    def fail(self, where: str, message: str, value: object) -> None:
        self.errors.append(FieldError(self.at(where), message, _safe(value)))

    def done(self) -> None:
        if self.errors:
            raise InvalidInput(self.errors)


def _safe(value: object) -> object:
    """The offending value as echoed in errors: short, JSON-encodable, never a blob."""
    if isinstance(value, str):
        return value if len(value) <= 200 else value[:200] + "…"
    if value is None or isinstance(value, bool | float):
        return value
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**64 else None
    return None


_DEPLOY_FIELDS = {
    "server_id",
    "name",
    "image",
    "port",
    "domain",
    "env",
    "volumes",
    "memory",
    "cpus",
    "restart",
    "health_path",
    "command",
    "host_port",
    "stop_grace_seconds",
    "build",
}


def parse_deploy(
    raw: object,
    *,
    loc: str = "",
    idempotency_key: str | None = None,
    keep_env: Collection[str] = (),
    wait: float = 0.0,
) -> DeployCommand:
    """Check a deploy request (SPEC.md, POST /api/agent/docker/deploy), snake_case keys.

    ``keep_env``, ``wait`` and ``idempotency_key`` come from elsewhere than the body
    (the dashboard's form, the query, a header) and were checked there.
    """
    f = _Fields(raw, loc)
    f.unknown(_DEPLOY_FIELDS)
    f.take("server_id", check_uuid, required=True)
    f.take("name", check_name, required=True)
    f.take("image", check_image, nullable=True)
    build = _image_or_build(f)
    f.take("port", check_port)
    f.take("domain", check_domain, nullable=True)
    # Env is secret: no error at ``body.env`` or under it echoes a value (its location
    # names the key; a string given for the whole object may well be ``KEY=secret``).
    if f.take("env", check_env, nullable=True, secret=True):
        env: dict[str, str] = {}
        for key, value in f.values["env"].items():
            try:
                check_env_key(key)
            except RuleError as exc:
                f.fail(f"env.{key}", str(exc), None)
                continue
            try:
                env[key] = check_env_value(value)
            except RuleError as exc:
                f.fail(f"env.{key}", str(exc), None)
        f.values["env"] = env
    if f.take("volumes", check_volumes, nullable=True):
        seen: set[str] = set()
        for i, item in enumerate(f.values["volumes"]):
            try:
                spec = check_volume(item)
            except RuleError as exc:
                f.fail(f"volumes[{i}]", str(exc), item)
                continue
            if spec.container_path in seen:
                f.fail(f"volumes[{i}]", "Another volume already mounts this container path.", item)
            seen.add(spec.container_path)
    f.take("memory", check_memory, nullable=True)
    f.take("cpus", check_cpus, nullable=True)
    f.take("restart", check_restart, nullable=True)
    f.take("health_path", check_health_path, nullable=True)
    f.take("command", check_command, nullable=True)
    f.take("host_port", check_port, nullable=True)
    f.take("stop_grace_seconds", check_stop_grace)
    if f.values.get("host_port") is not None and f.values.get("domain") is not None:
        f.fail(
            "host_port",
            "An app with a domain is reached through the proxy and publishes no host port "
            "of its own: give a domain or a host port, not both.",
            f.values["host_port"],
        )
    f.done()
    v = f.values
    return DeployCommand(
        host_port=v.get("host_port"),
        stop_grace_seconds=v.get("stop_grace_seconds", STOP_GRACE_DEFAULT),
        memory=v.get("memory"),
        cpus=v.get("cpus"),
        restart=RestartPolicy(v.get("restart", RestartPolicy.UNLESS_STOPPED)),
        health_path=v.get("health_path"),
        command=v.get("command"),
        server_id=v["server_id"],
        name=v["name"],
        container_name=sanitize_container_name(v["name"]),
        image=v.get("image"),
        build=build,
        port=v.get("port", DEFAULT_PORT),
        domain=v.get("domain"),
        env=v.get("env", {}),
        volumes=tuple(v.get("volumes", ())),
        idempotency_key=idempotency_key,
        keep_env=frozenset(keep_env),
        wait=wait,
    )


def _image_or_build(f: _Fields) -> BuildSpec | None:
    """Exactly one of ``image`` and ``build``; the build checked (``builds.parse_build``)."""
    has_image = f.raw.get("image") is not None
    has_build = f.raw.get("build") is not None
    if not f.is_object:
        return None
    if has_image and has_build:
        f.fail("build", "Give image or build, not both.", None)
        return None
    if not has_image and not has_build:
        f.fail("image", "Field required: an image to run, or a build to make one.", None)
        return None
    if not has_build:
        return None
    return parse_build(f.raw["build"], f.at("build"), f.errors)


def parse_rollback(
    raw: object,
    installation_id: UUID,
    *,
    loc: str = "",
    idempotency_key: str | None = None,
    wait: float = 0.0,
) -> Rollback:
    """Check a rollback request body (``{"deployment_id"?}``, snake_case keys); ``None``
    (no body) means "the revision before the current one"."""
    f = _Fields({} if raw is None else raw, loc)
    f.unknown({"deployment_id"})
    f.take("deployment_id", check_uuid, nullable=True)
    f.done()
    return Rollback(
        installation_id=installation_id,
        deployment_id=f.values.get("deployment_id"),
        idempotency_key=idempotency_key,
        wait=wait,
    )


def parse_create_server(raw: object, *, loc: str = "") -> CreateServerCommand:
    """Check a create-server request (SPEC.md, POST /api/agent/servers), snake_case keys."""
    f = _Fields(raw, loc)
    f.unknown({"name", "address", "ssh_port", "ssh_user", "host_keys", "team_id"})
    f.take("name", check_server_name, required=True)
    f.take("team_id", check_uuid, nullable=True)
    f.take("address", check_address, nullable=True)
    f.take("ssh_port", check_port)
    f.take("ssh_user", check_ssh_user)
    if f.take("host_keys", check_host_keys, nullable=True) and "address" not in f.values:
        f.fail("address", "An address is required with host keys.", None)
    f.done()
    v = f.values
    return CreateServerCommand(
        name=v["name"],
        address=v.get("address"),
        ssh_port=v.get("ssh_port", DEFAULT_SSH_PORT),
        ssh_user=v.get("ssh_user", "berth"),
        host_keys=v.get("host_keys", ()),
        team_id=v.get("team_id"),
    )


def parse_change_server(raw: object, server_id: UUID, *, loc: str = "") -> ChangeServer:
    """Check a change of a server (PATCH /api/agent/servers/{serverId}: ``{"name"?,
    "address"?, "ssh_port"?}``, snake_case keys); a field left out is kept, ``null`` is
    refused (a server that was reachable keeps an address)."""
    f = _Fields(raw, loc)
    f.unknown({"name", "address", "ssh_port"})
    f.take("name", check_server_name)
    f.take("address", check_address)
    f.take("ssh_port", check_port)
    f.done()
    v = f.values
    return ChangeServer(
        server_id=server_id,
        name=v.get("name"),
        address=v.get("address"),
        ssh_port=v.get("ssh_port"),
    )


_Added = TypeVar("_Added", bound="AddHostCredentials[Any]")


def _parse_host_credentials(
    raw: object, loc: str, check_host: Callable[[object], str], command: type[_Added]
) -> _Added:
    """Check new credentials for a host (``{"host", "username", "password"}``, all
    required; ``check_host`` the kind's rule for the host).

    No error ever echoes the password, whatever was sent in its place.
    """
    f = _Fields(raw, loc)
    f.unknown({"host", "username", "password"})
    f.take("host", check_host, required=True)
    f.take("username", check_registry_username, required=True)
    f.take("password", check_registry_password, required=True, secret=True)
    f.done()
    v = f.values
    return command(host=v["host"], username=v["username"], password=v["password"])


def parse_add_registry(raw: object, *, loc: str = "") -> AddRegistry:
    """Check a new registry: the host as an image reference names it."""
    return _parse_host_credentials(raw, loc, check_registry_host, AddRegistry)


def parse_add_git_credential(raw: object, *, loc: str = "") -> AddGitCredential:
    """Check new Git credentials: the host as a repository URL names it."""
    return _parse_host_credentials(raw, loc, check_git_host, AddGitCredential)


def parse_create_webhook(raw: object, *, loc: str = "") -> CreateWebhook:
    """Check a create-webhook request (``{"url", "events"}``, both required; ``format``
    ``standard`` by default)."""
    f = _Fields(raw, loc)
    f.unknown({"url", "events", "format"})
    f.take("url", check_webhook_url, required=True, shown=without_user_info)
    f.take("events", check_events, required=True)
    f.take("format", check_format)
    f.done()
    return CreateWebhook(
        url=f.values["url"],
        events=f.values["events"],
        format=f.values.get("format", WebhookFormat.STANDARD),
    )


def parse_repin(raw: object, server_id: UUID, *, loc: str = "") -> RepinHostKeys:
    """Check a re-pin request (``{"host_keys", "fingerprint"}``, snake_case keys)."""
    f = _Fields(raw, loc)
    f.unknown({"host_keys", "fingerprint"})
    f.take("host_keys", check_host_keys, required=True)
    f.take("fingerprint", check_fingerprint, required=True)
    f.done()
    return RepinHostKeys(
        server_id=server_id, host_keys=f.values["host_keys"], fingerprint=f.values["fingerprint"]
    )


def parse_id(value: object, what: str) -> UUID:
    """An id as a ``UUID`` or its canonical text.

    Anything else names nothing: ``NotFound`` ("<what> not found."), as an id in an API
    path that is not a UUID gets a 404 rather than a 422.
    """
    if isinstance(value, UUID):
        return value
    try:
        return check_uuid(value)
    except RuleError:
        raise NotFound(f"{what} not found.") from None


def parse_count(value: object, *, loc: str, low: int, high: int) -> int:
    """An integer option from ``low`` to ``high`` (a log tail, a list limit), as given.

    Out of range is ``InvalidInput`` at ``loc``, not clamped: the API answers 422 too.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(
            [FieldError(loc, f"Expected an integer from {low} to {high}.", _safe(value))]
        )
    return value


def parse_seconds(value: object, *, loc: str, high: float | None = None) -> float:
    """A duration in seconds: a finite number, zero or more (booleans are refused), and
    at most ``high`` if given."""
    seconds = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        with contextlib.suppress(OverflowError):  # an int beyond a float's range
            seconds = float(value)
    top = math.inf if high is None else high
    if seconds is None or not math.isfinite(seconds) or not 0 <= seconds <= top:
        message = (
            "Expected a finite number of seconds, zero or more."
            if high is None
            else f"Expected a number of seconds from 0 to {high:g}."
        )
        raise InvalidInput([FieldError(loc, message, _safe(value))])
    return seconds


def parse_wait(value: object, *, loc: str) -> float:
    """How long to wait for a deployment's end: seconds from 0 to ``WAIT_MAX``."""
    return parse_seconds(value, loc=loc, high=WAIT_MAX)


def parse_idempotency_key(value: object, *, loc: str) -> str | None:
    """An idempotency key given by a caller (``None``: none): 1-255 printable ASCII
    characters, no spaces; any other value is an ``InvalidInput`` at ``loc``."""
    if value is None:
        return None
    try:
        return check_idempotency_key(value)
    except RuleError as exc:
        raise InvalidInput([FieldError(loc, str(exc), _safe(value))]) from None


class EnrollCommand(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a server's install script reports when it enrolls: the SSH host keys to pin,
    the port berth should connect to (``None``: keep the server's), and its facts."""

    host_keys: tuple[str, ...]
    ssh_port: int | None = None
    facts: ServerFacts = msgspec.field(default_factory=ServerFacts)


FACT_TEXT_MAX = 200
CPUS_MAX = 1 << 20
MEMORY_MAX = (1 << 63) - 1


def _check_fact_text(value: object) -> str:
    value = checked_text(value, FACT_TEXT_MAX)
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in value):
        raise RuleError("Must not contain control characters.")
    return value


def _check_int(low: int, high: int) -> Callable[[object], int]:
    def check(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise RuleError(f"Expected an integer from {low} to {high}.")
        return value

    return check


_FACTS = {
    "os": _check_fact_text,
    "arch": _check_fact_text,
    "docker_version": _check_fact_text,
    "cpus": _check_int(1, CPUS_MAX),
    "memory_bytes": _check_int(1, MEMORY_MAX),
}


def parse_enroll(raw: object, *, loc: str = "") -> EnrollCommand:
    """Check an enrollment request (SPEC.md, POST /api/agent/servers/enroll).

    ``hostKeys`` is required (berth pins them before it first connects); ``sshPort``
    and every fact are optional, and a fact may be ``null`` (unknown).
    """
    f = _Fields(raw, loc)
    f.unknown({"host_keys", "ssh_port", "facts"})
    f.take("host_keys", check_host_keys, required=True)
    f.take("ssh_port", check_port, nullable=True)
    facts: dict[str, Any] = {}
    raw_facts = f.raw.get("facts") if f.is_object else None
    if raw_facts is not None:
        sub = _Fields(raw_facts, f.at("facts"))
        sub.unknown(set(_FACTS))
        for name, check in _FACTS.items():
            if sub.take(name, check, nullable=True):
                facts[name] = sub.values[name]
        f.errors.extend(sub.errors)
    f.done()
    return EnrollCommand(
        host_keys=f.values["host_keys"],
        ssh_port=f.values.get("ssh_port"),
        facts=ServerFacts(**facts),
    )
