"""Ports: what the core needs from the outside world, as Protocols.

Ownership rule, for every repository method that takes ``owner_id`` (an
:data:`~berth.core.access.Owner`: a team's id, or the :class:`~berth.core.access.Scope`
of an actor — its team, perhaps limited to some servers): a row that belongs to
another team, or to a server outside the scope's server set, is treated exactly like
a row that does not exist (``None`` or :class:`NotFound`). Adapters enforce it in the
query itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from contextvars import ContextVar
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Protocol, Self
from uuid import UUID

from .access import Owner, Role
from .events import Event
from .models import (
    ApiToken,
    BuildContext,
    BuildSpec,
    BuiltImage,
    Container,
    ContainerSnapshot,
    ContainerSpec,
    ContainerState,
    ContainerStats,
    DeliveryAttempt,
    DeliveryState,
    DeployHook,
    Deployment,
    DeploymentEvent,
    DeploymentState,
    DiskUsage,
    Ending,
    FleetCensus,
    GitCredential,
    HolderSpec,
    Installation,
    Invite,
    Job,
    ProxyProbe,
    ProxyRoute,
    PullProgress,
    Registry,
    RegistryAuth,
    Server,
    ServerFacts,
    ServerObservation,
    Source,
    SshCredentials,
    StoreArchiveInfo,
    StoreCounts,
    TlsStatus,
    User,
    Webhook,
    WebhookDelivery,
    WebhookEvent,
    WebSession,
)
from .oauth import OAuthAuthorization, OAuthClient, OAuthGrant
from .outbox import OutboxMessage, SendResult
from .teams import AccessToken, AuditEntry, AuditFilter, Member, Team, TeamInvitation
from .watch import ContainerEvent, PassView, WatchChange, WatchTarget

__all__ = [
    "BARE_TCP",
    "CALL_LANE",
    "AccessTokenRepository",
    "AuditRepository",
    "BuildOutput",
    "BuildSources",
    "Clock",
    "ContainerRuntime",
    "DeployHookRepository",
    "DeploymentRepository",
    "Fleet",
    "GitCredentialRepository",
    "HostKeySignatures",
    "HostResolver",
    "InstallationRepository",
    "InviteRepository",
    "JobQueue",
    "KeyGenerator",
    "OAuthRepository",
    "PasswordHasher",
    "PullProgressSink",
    "RegistryRepository",
    "ReverseProxy",
    "SecretBox",
    "ServerConnection",
    "ServerGateway",
    "ServerRepository",
    "SessionRepository",
    "SourceStore",
    "StoreArchive",
    "StoreStats",
    "TeamRepository",
    "TokenRepository",
    "UnitOfWork",
    "UnitOfWorkFactory",
    "UserRepository",
    "WebhookOutbox",
    "WebhookRepository",
    "WebhookSender",
]

#: What a call to a server is for, as the adapters that run calls in threads see it:
#: ``"deploy"`` inside a deployment's run (``RunDeployment`` sets it), else ``"check"``
#: (the monitor, the API). Each lane has threads of its own, so a deployment's calls
#: never queue behind the monitor's checks of a thousand servers. ``"claim"``: a worker
#: claiming deployments (``JobQueue.claim_many``), whose write goes first at the store;
#: ``"queue"``: a deployment being queued (``QueueDeployment``), behind the running ones;
#: ``"journal"``: a run's events, written behind what runs wait for (``DeploymentRun``).
CALL_LANE: ContextVar[str] = ContextVar("berth_call_lane", default="check")

#: What ``ServerConnection.probe`` answers when the port answered but not in HTTP: a
#: reply of other bytes, or a connection held open without a word.
BARE_TCP = "TCP"


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...


class PasswordHasher(Protocol):
    def hash(self, password: str) -> str:
        """A salted, slow hash of ``password`` (argon2id in production)."""
        ...

    def verify(self, password_hash: str, password: str) -> bool:
        """Whether ``password`` matches; never raises on a mismatch."""
        ...


class SecretBox(Protocol):
    """Symmetric sealing with the installation's secret key."""

    def seal(self, plaintext: bytes) -> bytes:
        """Authenticated encryption of ``plaintext``."""
        ...

    def open(self, sealed: bytes) -> bytes:
        """The plaintext; raises ``ValueError`` if tampered with or sealed with another key."""
        ...

    def digest(self, data: bytes) -> str:
        """A keyed hash (hex) of ``data``: comparable, but not reversible without the key."""
        ...


class UserRepository(Protocol):
    async def add(self, user: User) -> None:
        """Store a new user with their personal team: a team whose id is the user's, of
        which the user is the owner (one aggregate: a user never exists without it).
        Raises ``Conflict`` if the email is taken."""
        ...

    async def get(self, user_id: UUID) -> User | None: ...

    async def get_by_email(self, email: str) -> User | None:
        """Emails compare case-insensitively."""
        ...

    async def first(self) -> User | None:
        """The oldest user: the one ``berth serve --local`` gives this machine to."""
        ...


class TokenRepository(Protocol):
    async def replace(self, token: ApiToken) -> None:
        """Make ``token`` the user's only token; the previous one stops working at once."""
        ...

    async def get(self, user_id: UUID) -> ApiToken | None: ...

    async def find(self, token_hash: str) -> tuple[User, ApiToken] | None:
        """The active token with this hash and its user."""
        ...

    async def touch(self, user_id: UUID, at: datetime) -> None:
        """Record that the user's token was used at ``at``."""
        ...


class ServerRepository(Protocol):
    async def add(
        self,
        server: Server,
        enrollment_token_hash: str | None,
        private_key: bytes | None = None,
    ) -> None:
        """Store a new server; its SSH private key is sealed at rest."""
        ...

    async def get(self, owner_id: Owner, server_id: UUID) -> Server | None: ...

    async def lock(self, owner_id: Owner, server_id: UUID) -> Server | None:
        """The owner's server (``None`` if not the owner's), read fresh and locked until
        this unit of work ends: another unit of work locking the same server waits for it.

        Call it before the reads a write depends on: what the server's installations and
        deployments look like then stays so, as far as other lockers go, until commit.
        """
        ...

    async def list(self, owner_id: Owner) -> list[Server]: ...

    async def count(self, owner_id: Owner) -> int:
        """How many servers the owner has (as ``list`` would return)."""
        ...

    async def snapshot(self, owner_id: Owner, server_id: UUID) -> ContainerSnapshot | None:
        """The last container list seen on the server."""
        ...

    async def save_snapshot(self, owner_id: Owner, snapshot: ContainerSnapshot) -> None: ...

    async def delete(self, owner_id: Owner, server_id: UUID) -> bool:
        """Remove the owner's server with its installations, deployments (and their
        events) and snapshot; ``False`` if the owner has no such server.

        Raises ``WriteConflict`` if one of its deployments is running."""
        ...

    async def by_enrollment(self, token_hash: str) -> Server | None:
        """The server whose enrollment token has this hash, whoever owns it, used or not.

        The one look-up without an owner: the enrollment token itself is the credential
        (``EnrollServer`` checks its expiry and whether it was used).
        """
        ...

    async def speaking_for_itself(self, server_id: UUID) -> Server | None:
        """The server ``server_id``, whoever owns it: the other look-up without an owner,
        for a request signed with one of the server's pinned host keys (the signature is
        the credential; ``ServerSelf`` checks it before anything is shown or written)."""
        ...

    async def of_this_machine(self) -> Sequence[Server]:
        """The servers whose transport is ``local``, whoever owns them: the look-up that
        lets ``EnsureLocalServer`` give this machine to one account only (nothing of a
        server is shown from it)."""
        ...

    async def mark_removed(self, server_id: UUID, detail: str) -> bool:
        """Set the server's status to ``removed`` with ``detail``; ``False`` (nothing
        written) if it is unknown or already removed. The monitor then leaves it alone."""
        ...

    async def enroll(
        self,
        server_id: UUID,
        *,
        host_keys: tuple[str, ...],
        facts: ServerFacts,
        address: str | None,
        ssh_port: int,
    ) -> bool:
        """Pin ``host_keys``, record the facts, address and SSH port, and move the server
        from ``pending`` to ``offline`` (the monitor brings it online).

        Atomic: ``False``, and nothing written, unless the server is still ``pending``
        — so an enrollment token enrolls once, even when two requests race.
        """
        ...

    async def renew_enrollment(
        self, owner_id: Owner, server_id: UUID, token_hash: str, expires_at: datetime
    ) -> bool:
        """Give the owner's ``pending`` server a new one-time enrollment token (its hash)
        valid until ``expires_at``; the previous token no longer matches any server.

        Atomic: ``False``, and nothing written, unless the server is the owner's and
        still ``pending`` -- so a server that enrolled meanwhile keeps its pinned keys.
        """
        ...

    async def change(
        self,
        owner_id: Owner,
        server_id: UUID,
        *,
        name: str,
        address: str | None,
        ssh_port: int,
        recheck: bool,
    ) -> bool:
        """Set the owner's server's name, address and SSH port; with ``recheck`` (a new
        address or port) an ``online``, ``offline`` or ``host_key_mismatch`` server also goes
        ``offline``, unchecked, with no offered key (the mismatch was seen at the old
        target; the pinned keys stay and are checked again there). ``False``, nothing
        written, if the owner has no such server. One UPDATE."""
        ...

    async def repin(
        self, owner_id: Owner, server_id: UUID, *, host_keys: tuple[str, ...], offered: str
    ) -> bool:
        """Pin ``host_keys`` instead of the old ones and move the owner's server from
        ``host_key_mismatch`` to ``offline`` (the monitor reconnects with the new keys).

        Atomic: ``False``, and nothing written, unless the server is still in
        ``host_key_mismatch`` with ``offered`` as the key it offered -- so a key the
        user did not see is never pinned, even when the monitor writes meanwhile.
        """
        ...


class InstallationRepository(Protocol):
    async def get(self, owner_id: Owner, installation_id: UUID) -> Installation | None: ...

    async def get_by_container_name(
        self, owner_id: Owner, server_id: UUID, container_name: str
    ) -> Installation | None: ...

    async def list(
        self, owner_id: Owner, server_id: UUID, *, include_removed: bool = False
    ) -> list[Installation]:
        """The server's installations, oldest first, each with its last deployment; removed
        ones only with ``include_removed``."""
        ...

    async def remove(self, owner_id: Owner, installation_id: UUID, at: datetime) -> bool:
        """Mark the installation removed: its name, domain and host port are free again,
        its deployments stay readable. ``False`` if there is no such installation of the
        owner that is not removed already."""
        ...

    async def set_stopped(
        self, owner_id: Owner, installation_id: UUID, at: datetime | None
    ) -> bool:
        """Record that the installation was stopped on request (``at``) or started again
        (``None``). ``False`` if there is no such installation of the owner (not removed)."""
        ...

    async def set_stopping(
        self, owner_id: Owner, installation_id: UUID, until: datetime | None
    ) -> bool:
        """Record that a stop on request runs (and ends by ``until``: the installation is
        ``stopping`` until then) or ended (``None``). ``False`` as ``set_stopped``."""
        ...

    async def save(self, owner_id: Owner, installation: Installation, env: dict[str, str]) -> None:
        """Insert or update. Env values are sealed at rest.

        Raises ``WriteConflict`` if another installation on the server holds the same
        container name, domain or host port (the store's unique constraints are the
        last word).
        """
        ...


class DeploymentRepository(Protocol):
    async def add(
        self,
        owner_id: Owner,
        deployment: Deployment,
        env: dict[str, str],
        idempotency_key: str | None = None,
        fingerprint: str | None = None,
    ) -> None:
        """Store a new deployment with a sealed copy of its env values.

        Raises ``WriteConflict`` if the owner already used ``idempotency_key``, and
        ``NotFound`` if the installation (on ``deployment.server_id``) is not the owner's.
        """
        ...

    async def get(self, owner_id: Owner, deployment_id: UUID) -> Deployment | None:
        """The deployment with its events, oldest first."""
        ...

    async def by_idempotency_key(self, owner_id: Owner, key: str) -> tuple[Deployment, str] | None:
        """The deployment an earlier request with this key created, and its fingerprint."""
        ...

    async def active(self, owner_id: Owner, installation_id: UUID) -> list[Deployment]:
        """The installation's queued or running deployments."""
        ...

    async def of_installation(
        self, owner_id: Owner, installation_id: UUID, limit: int, before: UUID | None = None
    ) -> list[Deployment]:
        """The installation's deployments (its revisions), newest first, each with its
        events: at most ``limit``, and only those older than the deployment ``before``
        (a page's last id) when given. Removed installations keep theirs."""
        ...

    async def add_event(self, owner_id: Owner, deployment_id: UUID, event: DeploymentEvent) -> None:
        """Append an event to the owner's deployment (a stop or start of its container);
        nothing if it is not the owner's."""
        ...

    async def events_after(
        self, owner_id: Owner, deployment_id: UUID, after_id: int, limit: int
    ) -> tuple[DeploymentState, list[tuple[int, DeploymentEvent]]] | None:
        """The deployment's state, then its events whose id is over ``after_id``, oldest
        first, at most ``limit``, each with its id (stable and increasing: the stream's
        resume point). ``None`` if it is not the owner's.

        The state is read before the events, and a deployment's final state is written
        with its closing event in one transaction: a final state read here means every
        event of the deployment is among these or before ``after_id`` (unless ``limit``
        cut the page short).
        """
        ...

    async def request_cancel(self, owner_id: Owner, deployment_id: UUID, at: datetime) -> bool:
        """Ask a running deployment to stop (its worker sees it at its next check).
        ``False`` if it is not the owner's or not running."""
        ...

    async def recent(self, owner_id: Owner, server_id: UUID, limit: int) -> list[Deployment]:
        """The server's ``limit`` newest deployments, newest first, each with its events."""
        ...

    async def env(self, owner_id: Owner, deployment_id: UUID) -> dict[str, str]:
        """The env values the deployment was asked with, unsealed. Never for display.

        Raises ``NotFound`` if the deployment is not the owner's.
        """
        ...

    async def finish(
        self,
        owner_id: Owner,
        deployment_id: UUID,
        state: DeploymentState,
        at: datetime,
        error: str | None,
        event: DeploymentEvent,
        *,
        queued_only: bool = False,
    ) -> None:
        """Move a queued or running deployment to a final state, with a closing event.
        Nothing else: the caller records ``DeploymentFinished`` (whose handlers write
        the webhook outbox).

        Raises ``NotFound`` if it is not the owner's, ``WriteConflict`` if it has
        already finished -- or, with ``queued_only`` (superseding), if it is no longer
        queued: a worker may have claimed it since it was read.
        """
        ...


class SessionRepository(Protocol):
    """Dashboard sign-ins, found by the SHA-256 hash of their id (never the id itself)."""

    async def add(self, session: WebSession) -> None: ...

    async def get(self, id_hash: str) -> tuple[User, WebSession] | None:
        """The session with this hash and its user, expired or not; ``None`` if unknown."""
        ...

    async def touch(self, id_hash: str, last_seen_at: datetime, expires_at: datetime) -> None:
        """Record that the session was used and push its idle expiry to ``expires_at``."""
        ...

    async def delete(self, id_hash: str) -> None:
        """Forget the session (sign-out); unknown hashes are not an error."""
        ...

    async def delete_expired(self, now: datetime) -> int:
        """Forget every session whose expiry is at or before ``now``; returns how many."""
        ...


class InviteRepository(Protocol):
    """One-time sign-up invitations, found by the SHA-256 hash of their token."""

    async def add(self, invite: Invite) -> None: ...

    async def get(self, token_hash: str) -> Invite | None: ...

    async def use(self, token_hash: str, at: datetime) -> bool:
        """Mark the invite used; ``False`` if it is unknown or was already used."""
        ...


class TeamRepository(Protocol):
    """Teams, their members and the invitations to join them."""

    async def add(self, team: Team, owner_id: UUID) -> None:
        """Store a new (shared) team with ``owner_id`` as its first owner."""
        ...

    async def get(self, team_id: UUID) -> Team | None: ...

    async def of_user(self, user_id: UUID) -> list[Team]:
        """The user's teams, each with the user's ``role``: their personal team first, then
        the others oldest first."""
        ...

    async def role(self, team_id: UUID, user_id: UUID) -> Role | None:
        """The user's role in the team; ``None`` if they are not a member."""
        ...

    async def members(self, team_id: UUID) -> list[Member]:
        """The team's members, oldest first."""
        ...

    async def add_member(self, member: Member) -> bool:
        """Make a user a member; ``False`` (nothing written) if they are one already."""
        ...

    async def set_role(self, team_id: UUID, user_id: UUID, role: Role) -> bool:
        """Change a member's role; ``False`` if they are not a member."""
        ...

    async def remove_member(self, team_id: UUID, user_id: UUID) -> bool:
        """Take the user out of the team and delete their named tokens for it (they are
        refused from this transaction's commit on); ``False`` if not a member."""
        ...

    async def add_invitation(self, invitation: TeamInvitation) -> None: ...

    async def invitation(self, token_hash: str) -> TeamInvitation | None:
        """The invitation whose token has this hash, used or not, expired or not."""
        ...

    async def accept_invitation(self, invitation_id: UUID, at: datetime) -> bool:
        """Mark the invitation used; ``False`` (nothing written) if it was used already,
        so a token admits one user, even when two requests race."""
        ...


class AccessTokenRepository(Protocol):
    """Named tokens: each for one user in one team; only their hashes are kept."""

    async def add(self, token: AccessToken) -> None: ...

    async def of_user(self, user_id: UUID) -> list[AccessToken]:
        """The user's named tokens, newest first."""
        ...

    async def find(self, token_hash: str) -> tuple[User, AccessToken, Role] | None:
        """The token with this hash, its user and the user's role in the token's team;
        ``None`` if unknown, revoked, or its user is no longer a member of its team."""
        ...

    async def revoke(self, user_id: UUID, token_id: UUID) -> AccessToken | None:
        """Delete the user's token (it is refused from the commit on); the token as it
        was, or ``None`` if the user has no such token."""
        ...

    async def touch(self, token_id: UUID, at: datetime) -> None:
        """Record that the token was used at ``at``."""
        ...


class AuditRepository(Protocol):
    """Each team's audit log: append-only (nothing but ``prune`` removes an entry)."""

    async def add(self, entry: AuditEntry) -> None: ...

    async def page(
        self,
        team_id: UUID,
        limit: int,
        before: UUID | None = None,
        where: AuditFilter | None = None,
    ) -> list[AuditEntry]:
        """The team's entries, newest first: at most ``limit``, only those older than the
        entry ``before`` (a page's last id) when given, and only those ``where`` admits."""
        ...

    async def prune(self, older_than: datetime) -> int:
        """Delete every entry (of every team) from before ``older_than``; how many."""
        ...


class RegistryRepository(Protocol):
    """A user's private registry credentials: one entry per host per user, the password
    sealed at rest. Only ``auth`` unseals it, for a pull."""

    async def add(self, registry: Registry, password: str) -> None:
        """Store a new registry with its password sealed.

        Raises ``WriteConflict`` if the owner already has one for that host (the store's
        unique key on owner and host is the last word when two requests race).
        """
        ...

    async def list(self, owner_id: Owner) -> list[Registry]:
        """The owner's registries, by host; never a password."""
        ...

    async def by_host(self, owner_id: Owner, host: str) -> Registry | None: ...

    async def delete(self, owner_id: Owner, registry_id: UUID) -> bool:
        """Forget the owner's registry; ``False`` if the owner has no such registry."""
        ...

    async def auth(self, owner_id: Owner, host: str) -> RegistryAuth | None:
        """The owner's credentials for ``host``, unsealed, for a pull. Never for display.

        ``None`` when none are saved, or when they cannot be unsealed (another key).
        """


class GitCredentialRepository(Protocol):
    """A team's credentials for Git hosts: one entry per host per team, the password
    sealed at rest. Only ``auth`` unseals it, for a fetch."""

    async def add(self, credential: GitCredential, password: str) -> None:
        """Store new credentials with their password sealed; ``WriteConflict`` if the
        owner has some for that host already (the store's unique key decides a race)."""
        ...

    async def list(self, owner_id: Owner) -> list[GitCredential]:
        """The owner's Git credentials, by host; never a password."""
        ...

    async def by_host(self, owner_id: Owner, host: str) -> GitCredential | None: ...

    async def delete(self, owner_id: Owner, git_credential_id: UUID) -> bool:
        """Forget the owner's credentials; ``False`` if the owner has no such entry."""
        ...

    async def auth(self, owner_id: Owner, host: str) -> tuple[str, str] | None:
        """The owner's ``(username, password)`` for ``host``, unsealed, for a fetch. Never
        for display; ``None`` when none are saved or they cannot be unsealed."""
        ...


class DeployHookRepository(Protocol):
    """Installations' push-to-deploy hooks: at most one per installation, its secret
    sealed at rest. Only ``find`` (the hook's own URL) unseals it, to check a signature."""

    async def save(self, owner_id: Owner, hook: DeployHook, secret: str) -> DeployHook:
        """Store ``hook`` with ``secret`` sealed; if the installation has a hook already, it
        keeps its id (its URL) and created-by and gets the new secret: the hook stored."""
        ...

    async def get(self, owner_id: Owner, installation_id: UUID) -> DeployHook | None:
        """The hook of the owner's installation; ``None`` if it has none (or is not theirs)."""
        ...

    async def delete(self, owner_id: Owner, installation_id: UUID) -> bool:
        """Forget the installation's hook; ``False`` if there was none among the owner's."""
        ...

    async def find(self, hook_id: UUID) -> tuple[DeployHook, str] | None:
        """The hook ``hook_id`` and its secret, unsealed, whoever owns it: the id in the URL
        is what finds it (the signature then proves the caller knows the secret).
        ``None`` if there is none, or its secret cannot be unsealed (another key)."""
        ...


class WebhookRepository(Protocol):
    """A user's webhooks and their deliveries. URLs (a token may be part of one) and
    secrets are sealed at rest; secrets are never read back here: only the outbox
    unseals one, to sign a delivery."""

    async def add(self, webhook: Webhook, secret: str) -> None:
        """Store a new webhook of ``webhook.owner_id`` with its secret, sealed."""
        ...

    async def count(self, owner_id: Owner) -> int: ...

    async def get(self, owner_id: Owner, webhook_id: UUID) -> Webhook | None: ...

    async def secret(self, owner_id: Owner, webhook_id: UUID) -> str | None:
        """The webhook's signing secret, unsealed, to sign a test event with; ``None`` if
        the owner has no such webhook or the key does not open it."""
        ...

    async def delete(self, owner_id: Owner, webhook_id: UUID) -> bool:
        """Forget the webhook with its deliveries (those not yet made are dropped);
        ``False`` if the owner has no such webhook."""
        ...

    async def deliveries(
        self, owner_id: Owner, webhook_id: UUID, limit: int
    ) -> list[WebhookDelivery] | None:
        """The webhook's ``limit`` newest deliveries, newest first, each with its attempts;
        ``None`` if the owner has no such webhook."""
        ...

    async def list(self, owner_id: Owner) -> list[Webhook]:
        """The owner's webhooks, oldest first."""
        ...

    async def enqueue(
        self, webhooks: Sequence[Webhook], event: WebhookEvent, body: bytes, at: datetime
    ) -> None:
        """The outbox: a pending delivery of ``event`` (``body``) to each of ``webhooks``,
        due ``at``, written in this unit of work's transaction — so a change that rolls
        back tells nothing, and one that commits cannot lose its deliveries."""
        ...


class OAuthRepository(Protocol):
    """OAuth clients, authorizations and grants (``berth.core.oauth``); codes and refresh
    tokens by their hashes only, a client's registration sealed at rest."""

    async def add_client(self, client: OAuthClient) -> None: ...

    async def client(self, client_id: str) -> OAuthClient | None: ...

    async def add_authorization(self, authorization: OAuthAuthorization) -> None: ...

    async def authorization(self, authorization_id: UUID) -> OAuthAuthorization | None: ...

    async def by_code(self, code_hash: str) -> OAuthAuthorization | None: ...

    async def approve(self, approved: OAuthAuthorization) -> bool:
        """Store the user's answer on a pending authorization; ``False`` (nothing
        written) if it is gone or was answered already (two tabs racing)."""
        ...

    async def delete_authorization(self, authorization_id: UUID) -> bool:
        """Forget it; ``False`` if it was gone, so a code is exchanged once only, even
        when two requests race."""
        ...

    async def add_grant(self, grant: OAuthGrant) -> None: ...

    async def grant(self, refresh_hash: str) -> OAuthGrant | None: ...

    async def grant_of_token(self, token_id: UUID) -> OAuthGrant | None: ...

    async def grant_by_id(self, grant_id: UUID) -> OAuthGrant | None: ...

    async def delete_grant(self, grant_id: UUID) -> bool:
        """Forget it; ``False`` if it was gone (a refresh token is used once)."""
        ...

    async def prune(self, now: datetime) -> int:
        """Forget the authorizations and grants that expired before ``now``; how many."""
        ...


class UnitOfWork(Protocol):
    """One transaction over every repository; nothing is written unless committed.

    The repositories are read-only members, so an implementation may expose
    richer types (a plain attribute satisfies them).
    """

    @property
    def users(self) -> UserRepository: ...

    @property
    def tokens(self) -> TokenRepository: ...

    @property
    def servers(self) -> ServerRepository: ...

    @property
    def installations(self) -> InstallationRepository: ...

    @property
    def deployments(self) -> DeploymentRepository: ...

    @property
    def sessions(self) -> SessionRepository: ...

    @property
    def invites(self) -> InviteRepository: ...

    @property
    def registries(self) -> RegistryRepository: ...

    @property
    def webhooks(self) -> WebhookRepository: ...

    @property
    def git_credentials(self) -> GitCredentialRepository: ...

    @property
    def deploy_hooks(self) -> DeployHookRepository: ...

    @property
    def teams(self) -> TeamRepository: ...

    @property
    def access_tokens(self) -> AccessTokenRepository: ...

    @property
    def audit(self) -> AuditRepository: ...

    @property
    def oauth(self) -> OAuthRepository: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Roll back whatever was not committed."""
        ...

    def record(self, event: Event) -> None:
        """Record that ``event`` happened in this transaction: it goes to its handlers
        when the unit of work commits (see ``berth.core.unit_of_work``), and nowhere if
        it does not."""
        ...

    async def commit(self) -> None: ...


UnitOfWorkFactory = Callable[[], UnitOfWork]

#: Receives a pull's progress (``ContainerRuntime.pull``): records it, never blocks.
PullProgressSink = Callable[[PullProgress], None]
#: Takes one line of a build's output (from any thread).
BuildOutput = Callable[[str], None]


class KeyGenerator(Protocol):
    def generate(self, comment: str) -> tuple[bytes, str]:
        """A new SSH key pair: (OpenSSH private key, ``ssh-ed25519 AAAA… comment``)."""
        ...


class ContainerRuntime(Protocol):
    """One server's Docker Engine. Every method raises ``ServerUnreachable`` when the
    server cannot be reached and ``RuntimeFailure`` (quoting Docker) when Docker refuses.
    """

    async def facts(self) -> ServerFacts:
        """Docker version, OS, architecture, CPUs and memory of the server."""
        ...

    async def image_exists(self, image: str) -> bool: ...

    async def image_id(self, image: str) -> str | None:
        """The id (``sha256:…``) of the image ``image`` names on the server (a tag, a
        digest or an id), or ``None`` if it is not there. No registry is asked."""
        ...

    async def pull(
        self,
        image: str,
        *,
        auth: RegistryAuth | None = None,
        progress: PullProgressSink | None = None,
    ) -> None:
        """Pull ``image``, with ``auth`` (Docker's ``X-Registry-Auth``) when given.

        ``progress`` is called with the pull's progress as Docker reports it (often many
        times a second, from any thread): it must only record it, never block.

        A failed pull is a ``RuntimeFailure`` whose ``kind`` says why: ``image-not-found``,
        ``registry-unauthorized`` or ``registry-unreachable`` (``runtime-failure`` for
        anything else), its detail quoting Docker. Cancelling the call stops the pull.
        """
        ...

    async def list_containers(self) -> list[Container]:
        """Every container on the server, running or not, managed by berth or not."""
        ...

    async def find(self, labels: dict[str, str]) -> list[ContainerState]:
        """The containers carrying all of ``labels``."""
        ...

    async def create(self, spec: ContainerSpec) -> str:
        """Create (not start) a container; returns its id. One that ``joins`` a holder
        publishes no port (the holder does); the holder must run when it starts."""
        ...

    async def create_holder(self, spec: HolderSpec) -> str:
        """Create (not start) a port holder: a container of berth's own holder image
        (made on the server first if it is not there: Docker's image import, no
        registry) that waits for ever, publishes ``spec``'s port, is stopped by SIGKILL
        and restarted unless stopped. Returns its id. ``RuntimeFailure`` of kind
        ``holder-unsupported`` when berth has no holder program for the server's
        architecture."""
        ...

    async def start(self, container_id: str) -> None: ...

    async def stop(self, container_id: str, grace: float = 10.0) -> None:
        """Stop (not remove) the container, so it can be started again: SIGTERM, then
        SIGKILL after ``grace`` seconds (whole seconds; 0: at once). One already stopped
        is not an error, one that does not exist is a ``RuntimeFailure``. A container
        stopped this way is not restarted by its restart policy."""
        ...

    async def inspect(self, container_id: str) -> ContainerState | None:
        """The container's state, or ``None`` if it does not exist."""
        ...

    async def logs(self, container_id: str, tail: int, *, timestamps: bool = False) -> list[str]:
        """The last ``tail`` lines of stdout and stderr; with ``timestamps`` each starts
        with the RFC 3339 time Docker received it and a space."""
        ...

    def follow_logs(
        self, container_id: str, tail: int, *, timestamps: bool = False
    ) -> AsyncIterator[str]:
        """The last ``tail`` lines of stdout and stderr, then each new line as the
        container writes it, until it stops or disappears (then the iteration ends);
        ``timestamps`` as for ``logs``.

        Closing the iterator (``aclose``, or the caller going away) stops the reading;
        lines are handed on as they are read, with a bounded buffer between (a slow
        reader slows the reading, it never grows memory). A line longer than 16 KiB
        is cut into pieces. Raises ``RuntimeFailure`` at the first item if Docker
        refuses (no such container), ``ServerUnreachable`` if it cannot be reached.
        """
        ...

    async def remove(self, container_id: str) -> None:
        """Stop and remove; a container that does not exist is not an error."""
        ...

    async def rename(self, container_id: str, name: str) -> None:
        """Give the container a new name; a name already taken is a ``RuntimeFailure``."""
        ...

    async def stats(self, container_id: str) -> ContainerStats | None:
        """One sample of the container's CPU and memory use (CPU over about a second),
        or ``None`` if it does not exist."""
        ...

    async def disk_usage(self) -> DiskUsage:
        """What Docker keeps on the server's disk."""
        ...

    async def build(
        self,
        context: Path,
        *,
        tag: str,
        dockerfile: str,
        args: Mapping[str, str],
        target: str | None,
        output: BuildOutput,
    ) -> str:
        """Build an image from ``context`` (a tar or tar.gz file on this machine, streamed
        to the Engine's build API, never held whole in memory) and tag it ``tag``; its id.

        The Engine never asks a registry (no pull): the images the Dockerfile starts
        ``FROM`` must be on the server. ``output`` gets each line of the builder's output
        as it comes (from any thread: it must only record it). A build that fails is a
        ``RuntimeFailure`` (``kind`` ``build-failed``) quoting the builder's last error
        line. Cancelling the call stops the build.
        """
        ...

    async def built_images(self, repository: str) -> list[BuiltImage]:
        """The images on the server with a tag in ``repository``, newest first."""
        ...

    async def untag(self, reference: str) -> bool:
        """Remove the tag ``reference``; the image goes with its last tag unless a container
        uses it. ``False`` when Docker refused (in use) or it was not there."""
        ...

    def container_events(
        self, server_id: UUID, since: str | None = None
    ) -> AsyncIterator[ContainerEvent]:
        """Docker's event stream of berth's containers of server ``server_id`` (labelled
        with an installation and that server, so an Engine that two servers share sends
        each only its own): starts, exits, restarts, removals, as they happen, from
        ``since`` (a previous event's) when given, until the connection ends or the reader
        closes it."""
        ...


class BuildSources(Protocol):
    """Build contexts made ready on the control plane: an uploaded source, or a Git
    repository fetched here (every address connected to checked by the outbound guard)."""

    def prepare(
        self, owner_id: UUID, build: BuildSpec, secrets: Callable[[str], None]
    ) -> AbstractAsyncContextManager[BuildContext]:
        """The context of ``build`` as a file on this machine, removed on leaving.

        ``secrets`` is told every secret the preparation used (a Git password), so the
        build's output can be redacted. Raises ``NotFound`` when the uploaded source is not
        (or no longer) the owner's, ``RuntimeFailure`` (kind ``source-unavailable``) when
        the repository cannot be fetched or the ref is not in it, saying why.
        """
        ...


class SourceStore(Protocol):
    """Uploaded build contexts of each team, on the control plane's disk."""

    async def save(self, owner_id: UUID, chunks: AsyncIterator[bytes], now: datetime) -> Source:
        """Write ``chunks`` to disk as they come (never all in memory), with their SHA-256.

        Raises ``TooLarge`` past the store's size cap (nothing is kept) and
        ``InvalidInput`` for an empty body."""
        ...

    async def get(self, owner_id: UUID, source_id: UUID) -> Source | None:
        """The source, if it is the owner's and has not expired."""
        ...

    async def sweep(self, now: datetime) -> int:
        """Delete the sources that expired; how many."""
        ...


class ReverseProxy(Protocol):
    """One server's reverse proxy (Caddy), configured as a whole from berth's routes.

    The proxy terminates HTTPS for exactly the routed domains (certificates for those
    and no others), redirects plain HTTP to HTTPS, and sends each domain to
    ``127.0.0.1:<upstream_port>`` on its server. It runs as its own service: it keeps
    serving while berth is down. Every method raises ``ServerUnreachable`` when the
    proxy's admin endpoint cannot be reached and ``RuntimeFailure`` (quoting the
    proxy) when it refuses.
    """

    async def apply(self, routes: Sequence[ProxyRoute]) -> None:
        """Make ``routes`` the proxy's whole configuration, atomically: requests are
        served by the old configuration or the new one, never by neither. A refused
        configuration leaves the old one serving."""
        ...

    async def matches(self, routes: Sequence[ProxyRoute]) -> bool:
        """Whether the proxy's live configuration is exactly what ``apply(routes)``
        would load (``False`` after a restart, a hand edit, or another writer)."""
        ...


class ServerConnection(Protocol):
    """A live connection to one server: its Docker, its reverse proxy, and probes of its
    local ports."""

    @property
    def docker(self) -> ContainerRuntime: ...

    @property
    def proxy(self) -> ReverseProxy:
        """The server's reverse proxy; no I/O until a method is called."""
        ...

    async def probe(self, port: int, path: str | None = None) -> str | None:
        """Whether something answers on the server's ``127.0.0.1:port``: an HTTP GET of
        ``path`` (``/`` when ``None``).

        Returns what answered (``"HTTP 200"``, ``BARE_TCP``) or ``None``.
        """
        ...

    async def accepts(self, port: int) -> bool:
        """Whether something accepts a TCP connection on the server's ``127.0.0.1:port``:
        a connect over the transport (the SSH ``direct-tcpip`` channel, or locally),
        closed at once without a byte sent. Bounded in time (a connect deadline counts as
        ``False``); raises ``ServerUnreachable`` when the connection itself is gone."""
        ...

    async def probe_proxy(self, domain: str) -> ProxyProbe:
        """Ask the server's reverse proxy for ``domain`` as a browser would, from the
        server itself (never through a bridge or public address): a plain HTTP request
        on the proxy's HTTP port, then an HTTPS request whose TLS handshake names
        ``domain`` (SNI) on its HTTPS port, verified against the proxy's own CA for
        internally issued names and the system's roots for the others. Bounded in time;
        failures are in the result, not raised, except ``ServerUnreachable`` when the
        connection itself is gone."""
        ...


class ServerGateway(Protocol):
    """Reaches servers over their transport (SSH or local); connections are pooled."""

    async def connect(self, server: Server) -> ServerConnection:
        """A connection to ``server``, reused while it lives.

        Raises ``HostKeyMismatch`` if the host key is not the pinned one, else
        ``ServerUnreachable`` when the server cannot be reached.
        """
        ...

    async def disconnect(self, server_id: UUID) -> None:
        """Drop the pooled connection to a server (after a failure, or on removal)."""
        ...

    async def close(self) -> None: ...


class HostKeySignatures(Protocol):
    """Signatures made with a server's SSH host key (``ssh-keygen -Y sign``, SSHSIG)."""

    def verify(
        self, host_keys: tuple[str, ...], namespace: str, message: bytes, signature: bytes
    ) -> bool:
        """Whether ``signature`` (an SSHSIG blob, unarmored) signs ``message`` in
        ``namespace`` with the private half of one of ``host_keys`` (``type base64``
        lines). ``False`` for anything malformed; never raises for bad input."""
        ...


class Fleet(Protocol):
    """Every server, across owners: the view of the monitor and the worker only.

    Never reachable from a request handler; nothing here takes user input.
    """

    async def servers(self, watched_by: str | None = None) -> list[Server]:
        """Every server that has enrolled and was not uninstalled (neither ``pending``
        nor ``removed``); with ``watched_by``, only those that worker watches."""
        ...

    async def heartbeat(self, worker_id: str, now: datetime, until: datetime) -> FleetCensus:
        """``worker_id`` is alive until ``until`` (its row made or renewed, which also
        renews its lease on every server it watches); how many servers there are to
        watch, how many workers are alive at ``now`` (it included) and how many servers
        it watches."""
        ...

    async def claim_servers(self, worker_id: str, now: datetime, count: int) -> int:
        """Take up to ``count`` servers nobody watches -- no watcher, or one whose
        heartbeat ran out before ``now`` -- for ``worker_id``, oldest first; atomic
        (two workers never take one server). How many it took."""
        ...

    async def release_servers(
        self, worker_id: str, count: int, keep: Collection[UUID] = ()
    ) -> list[UUID]:
        """Give up watching up to ``count`` of ``worker_id``'s servers, none of ``keep``
        (for a newer worker to take); their ids."""
        ...

    async def stood_by(self, worker_id: str, server_ids: Sequence[UUID], at: datetime) -> None:
        """``worker_id`` verified (or keeps in its backoff) the status of those of
        ``server_ids`` it still watches: their ``checked_at`` is ``at``."""
        ...

    async def leave(self, worker_id: str) -> None:
        """``worker_id`` stops: its servers are free to take at once, its row goes."""
        ...

    async def credentials(self, server_id: UUID) -> SshCredentials | None: ...

    async def save_snapshot(self, snapshot: ContainerSnapshot) -> None: ...

    async def record(self, observations: Sequence[ServerObservation]) -> None:
        """Write what the monitor saw of many servers, in one transaction: each
        observation sets only the fields it carries (see ``ServerObservation``); an
        unknown server is ignored. Each status that changes is recorded, once, as a
        ``ServerStatusChanged`` of that transaction (``berth.core.unit_of_work``)."""
        ...

    async def routes(self, server_id: UUID) -> list[ProxyRoute]:
        """What the server's reverse proxy should serve: every installation on it with a
        domain and a recorded host port, sorted by domain."""
        ...

    async def watch_targets(self, server_id: UUID) -> list[WatchTarget]:
        """The installations on the server that are not removed, each with what was last
        recorded of its container (``berth.core.watch``)."""
        ...

    async def pass_view(self, server_ids: Collection[UUID]) -> PassView:
        """The routes and the watch targets of each of these servers, read together (a
        server with neither is absent): what a monitor's pass compares each server with,
        one read for the pass rather than two per server."""
        ...

    async def save_watches(self, changes: Sequence[WatchChange]) -> None:
        """Write these watches in one transaction; each report is an event in the
        installation's history (its current revision's log) and an
        ``InstallationStatusChanged`` of that transaction (``berth.core.unit_of_work``).
        An installation removed meanwhile is left alone."""
        ...


class JobQueue(Protocol):
    """Durable deployments: claimed under a lease by one worker at a time."""

    async def claim(
        self,
        worker_id: str,
        now: datetime,
        lease_until: datetime,
        *,
        running: Collection[UUID] = (),
    ) -> Job | None:
        """Atomically take a deployment to run: first a running one whose worker stopped
        renewing its lease (taken over: one more attempt, an event naming the worker,
        at most ``lifecycle.MAX_ATTEMPTS``) -- never one of ``running``, the runs
        ``worker_id`` still has going (late to renew, it renews again: taken over by
        itself it would run twice) -- else the oldest queued one whose server is online
        and whose installation has nothing running; ``None`` when there is none."""
        ...

    async def claim_many(
        self,
        worker_id: str,
        now: datetime,
        lease_until: datetime,
        *,
        limit: int,
        running: Collection[UUID] = (),
    ) -> list[Job]:
        """Up to ``limit`` deployments taken as ``claim`` takes one (a run taken over
        first, then the oldest queued ones, never two of one installation), together:
        a worker with free slots fills them at once. Empty when there is none."""
        ...

    async def cancel_requested(self, deployment_id: UUID) -> bool:
        """Whether the user asked the running deployment to stop (a read, no lease needed)."""
        ...

    async def set_image_id(
        self, deployment_id: UUID, worker_id: str, image_id: str, commit: str | None = None
    ) -> None:
        """Record the id of the image the deployment's container is created from (and for a
        build from Git, the commit it was built from), if ``worker_id`` holds the lease."""
        ...

    async def renew(self, deployment_id: UUID, worker_id: str, lease_until: datetime) -> bool:
        """Extend the lease; ``False`` if the worker no longer holds it."""
        ...

    async def progress(
        self,
        deployment_id: UUID,
        worker_id: str,
        events: Sequence[DeploymentEvent],
        *,
        step: str | None = None,
    ) -> None:
        """Append ``events`` in order, in one transaction; with ``step``, the last of them
        enters that step (the deployment's step becomes it). Nothing is written unless
        ``worker_id`` holds the lease."""
        ...

    async def finish(
        self, deployment_id: UUID, worker_id: str, ending: Ending, *, serving: bool | None = None
    ) -> bool:
        """Reach ``ending``'s final state with its closing event, and record it as a
        ``DeploymentFinished`` of that transaction (``berth.core.unit_of_work``: its
        handlers write the webhook outbox with it); ``False`` if the lease was lost:
        then nothing is written or recorded.

        For a deployment that did not succeed, ``serving`` says whether the
        installation's previous revision serves after it: ``False`` (nothing to put
        back, or putting it back failed) forgets the current revision; ``True`` or
        ``None`` (not known: the server was never touched) put the installation's
        spec back to the current revision's, so the installation describes what runs.
        """
        ...

    async def set_host_port(self, deployment_id: UUID, host_port: int | None) -> None:
        """Record the host port the installation's container is published on."""
        ...

    async def record_tls(self, deployment_id: UUID, tls: TlsStatus) -> None:
        """Record, on the deployment's installation, HTTPS as its check found it."""
        ...

    async def expire(self, now: datetime) -> list[tuple[UUID, DeploymentState]]:
        """End what no worker will carry on: queued deployments past their deadline
        (``timed_out``) and running ones whose lease ran out on their last attempt
        (``failed``, naming the worker that stopped); returns their ids and states.
        Each end is recorded as a ``DeploymentFinished``, as ``finish`` does."""
        ...

    async def pause_leases(self, since: datetime, now: datetime) -> bool:
        """The store was out of reach (for this worker) from ``since`` until ``now``: the
        clock of every lease still running at ``since`` -- a deployment's, a worker's on
        its servers -- is paused over that time (moved ``now - since`` later), so nothing
        is taken over, and no attempt spent, for an outage of the store rather than of a
        worker. Done once per outage: the first worker back does it (``True``); for the
        others it is a no-op (``False``)."""
        ...


class StoreStats(Protocol):
    """Counts over the whole store (every owner), for an operator's metrics."""

    async def counts(self) -> StoreCounts:
        """Deployments by state, servers by status, the queue's depth and its oldest
        entry, read in one transaction with aggregate queries (cheap at any size).

        Raises:
            StoreUnavailable: the database does not answer.
        """
        ...

    async def check(self, at: datetime) -> None:
        """Read, and commit one small write (a mark stamped ``at``): the store is ready.

        Raises:
            StoreUnavailable: the database does not answer, or refuses the write.
        """
        ...


class StoreArchive(Protocol):
    """The store of one data dir as a single file: copied out while berth runs, and
    copied into a data dir that has none. Only the embedded store (SQLite) has one;
    others raise :class:`~berth.core.errors.Conflict` from every method, naming the
    database's own tools (the CLI's errors: no HTTP route reaches these)."""

    def schema_versions(self) -> Sequence[str]:
        """Every schema version this berth can open, oldest first."""
        ...

    async def back_up(self, destination: Path) -> None:
        """Write the whole store to ``destination``, as it was at one instant, even while
        other processes write to it; the file appears complete or not at all.

        Raises:
            Conflict: ``destination`` exists, or the store is not archivable.
        """
        ...

    async def inspect(self, source: Path) -> StoreArchiveInfo:
        """What ``source`` holds; ``schema_version`` is ``None`` when it is not a berth
        database (not SQLite at all, or without berth's schema).

        Raises:
            NotFound: there is no file ``source``.
        """
        ...

    async def holds_store(self) -> bool:
        """Whether the data dir already has a store (a database file, even empty)."""
        ...

    async def restore(self, source: Path) -> None:
        """Make ``source`` the data dir's store, replacing any there; the copy appears
        complete or not at all. The caller checks ``source`` first."""


class WebhookOutbox(Protocol):
    """Deliveries waiting to be made, written in the same transaction as the state change
    they tell of (a deployment's end, a server going online or offline), so none is lost
    and none is told of a change that was rolled back. Shared by every worker: a
    delivery is claimed under a lease by one worker at a time.
    """

    async def claim(
        self, worker_id: str, now: datetime, lease_until: datetime, limit: int, max_attempts: int
    ) -> list[OutboxMessage]:
        """Atomically take up to ``limit`` pending deliveries whose next attempt is due and
        that no worker holds (or whose worker's lease ran out: it died mid-attempt): each
        counts one more attempt and is ``worker_id``'s until ``lease_until``. Two claimers,
        in any processes, never get the same delivery. A delivery whose
        ``max_attempts`` were all claimed already ends ``failed`` instead. A delivery
        whose secret cannot be unsealed ends ``failed`` (logged), not handed out."""
        ...

    async def record(
        self,
        delivery_id: UUID,
        worker_id: str,
        attempt: DeliveryAttempt,
        state: DeliveryState,
        next_attempt_at: datetime | None,
    ) -> bool:
        """Append ``attempt`` to the delivery's log and move it to ``state`` (``pending``
        with its ``next_attempt_at``, ``delivered`` or ``failed``), releasing the lease;
        ``False`` (nothing written) if ``worker_id`` no longer holds it."""
        ...


class HostResolver(Protocol):
    """Names to addresses, as berth's own machine resolves them (the outbound guard's
    eyes: ``berth.core.outbound.OutboundGuard``)."""

    async def resolve(self, host: str, port: int) -> Sequence[str]:
        """The IP addresses (IPv4 and IPv6, as text) a TCP connection to ``host`` on
        ``port`` would try, in the order it would try them; empty when the name does not
        resolve, or not within a few seconds. Never raises for the name's sake."""
        ...


class WebhookSender(Protocol):
    """POSTs a delivery to its endpoint."""

    async def send(
        self, url: str, headers: Mapping[str, str], body: bytes, seconds: float
    ) -> SendResult:
        """One POST of ``body``, within ``seconds`` in all. Redirects are never
        followed (a 3xx is an answer like any other). Never raises for the endpoint's
        sake: no answer is a result with an error and no status code."""
        ...
