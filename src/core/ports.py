"""Ports: what the core needs from the outside world, as Protocols.

Ownership rule, for every repository method that takes ``owner_id``: a row that
belongs to another user is treated exactly like a row that does not exist
(``None`` or :class:`NotFound`). Adapters enforce it in the query itself.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from types import TracebackType
from typing import Protocol, Self
from uuid import UUID

from .models import (
    ApiToken,
    Container,
    ContainerSnapshot,
    ContainerSpec,
    ContainerState,
    Deployment,
    DeploymentEvent,
    DeploymentState,
    Installation,
    Job,
    Server,
    ServerFacts,
    ServerStatus,
    SshCredentials,
    User,
)

__all__ = [
    "Clock",
    "ContainerRuntime",
    "DeploymentRepository",
    "Fleet",
    "InstallationRepository",
    "JobQueue",
    "KeyGenerator",
    "PasswordHasher",
    "SecretBox",
    "ServerConnection",
    "ServerGateway",
    "ServerRepository",
    "TokenRepository",
    "UnitOfWork",
    "UnitOfWorkFactory",
    "UserRepository",
]


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
        """Store a new user. Raises ``Conflict`` if the email is taken."""
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

    async def get(self, owner_id: UUID, server_id: UUID) -> Server | None: ...

    async def list(self, owner_id: UUID) -> list[Server]: ...

    async def snapshot(self, owner_id: UUID, server_id: UUID) -> ContainerSnapshot | None:
        """The last container list seen on the server."""
        ...

    async def save_snapshot(self, owner_id: UUID, snapshot: ContainerSnapshot) -> None: ...


class InstallationRepository(Protocol):
    async def get(self, owner_id: UUID, installation_id: UUID) -> Installation | None: ...

    async def get_by_container_name(
        self, owner_id: UUID, server_id: UUID, container_name: str
    ) -> Installation | None: ...

    async def list(self, owner_id: UUID, server_id: UUID) -> list[Installation]:
        """The server's installations, oldest first, each with its last deployment."""
        ...

    async def delete(self, owner_id: UUID, installation_id: UUID) -> bool:
        """Remove the installation with its deployments; ``False`` if it was not there."""
        ...

    async def save(self, owner_id: UUID, installation: Installation, env: dict[str, str]) -> None:
        """Insert or update. Env values are sealed at rest.

        Raises ``Conflict`` if another installation on the server holds the same
        domain or host port (the store's unique constraints are the last word).
        """
        ...


class DeploymentRepository(Protocol):
    async def add(
        self,
        owner_id: UUID,
        deployment: Deployment,
        env: dict[str, str],
        idempotency_key: str | None = None,
        fingerprint: str | None = None,
    ) -> None:
        """Store a new deployment with a sealed copy of its env values.

        Raises ``Conflict`` if the owner already used ``idempotency_key``.
        """
        ...

    async def get(self, owner_id: UUID, deployment_id: UUID) -> Deployment | None:
        """The deployment with its events, oldest first."""
        ...

    async def by_idempotency_key(self, owner_id: UUID, key: str) -> tuple[Deployment, str] | None:
        """The deployment an earlier request with this key created, and its fingerprint."""
        ...

    async def active(self, owner_id: UUID, installation_id: UUID) -> list[Deployment]:
        """The installation's queued or running deployments."""
        ...

    async def finish(
        self,
        owner_id: UUID,
        deployment_id: UUID,
        state: DeploymentState,
        at: datetime,
        error: str | None,
        event: DeploymentEvent,
    ) -> None:
        """Move a deployment to a final state, with a closing event."""
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

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Roll back whatever was not committed."""
        ...

    async def commit(self) -> None: ...


UnitOfWorkFactory = Callable[[], UnitOfWork]


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

    async def pull(self, image: str) -> None:
        """Pull ``image``; a missing image or unreachable registry is a ``RuntimeFailure``."""
        ...

    async def list_containers(self) -> list[Container]:
        """Every container on the server, running or not, managed by berth or not."""
        ...

    async def find(self, labels: dict[str, str]) -> list[ContainerState]:
        """The containers carrying all of ``labels``."""
        ...

    async def create(self, spec: ContainerSpec) -> str:
        """Create (not start) a container; returns its id."""
        ...

    async def start(self, container_id: str) -> None: ...

    async def inspect(self, container_id: str) -> ContainerState | None:
        """The container's state, or ``None`` if it does not exist."""
        ...

    async def logs(self, container_id: str, tail: int) -> list[str]:
        """The last ``tail`` lines of stdout and stderr."""
        ...

    async def remove(self, container_id: str) -> None:
        """Stop and remove; a container that does not exist is not an error."""
        ...


class ServerConnection(Protocol):
    """A live connection to one server: its Docker, and probes of its local ports."""

    @property
    def docker(self) -> ContainerRuntime: ...

    async def probe(self, port: int) -> str | None:
        """Whether something answers on the server's ``127.0.0.1:port``.

        Returns what answered (``"HTTP 200"``, ``"TCP"``) or ``None``.
        """
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


class Fleet(Protocol):
    """Every server, across owners: the view of the monitor and the worker only.

    Never reachable from a request handler; nothing here takes user input.
    """

    async def servers(self) -> list[Server]:
        """Every server that has enrolled (not ``pending``)."""
        ...

    async def credentials(self, server_id: UUID) -> SshCredentials | None: ...

    async def set_status(
        self,
        server_id: UUID,
        status: ServerStatus,
        at: datetime,
        *,
        facts: ServerFacts | None = None,
        detail: str | None = None,
    ) -> None:
        """Record what the monitor saw; ``last_seen_at`` moves only when online."""
        ...

    async def save_snapshot(self, snapshot: ContainerSnapshot) -> None: ...


class JobQueue(Protocol):
    """Durable deployments: claimed under a lease by one worker at a time."""

    async def claim(self, worker_id: str, now: datetime, lease_until: datetime) -> Job | None:
        """Atomically take the oldest queued deployment whose server is online and
        whose installation has nothing running; ``None`` when there is none."""
        ...

    async def renew(self, deployment_id: UUID, worker_id: str, lease_until: datetime) -> bool:
        """Extend the lease; ``False`` if the worker no longer holds it."""
        ...

    async def step(
        self, deployment_id: UUID, worker_id: str, step: str, message: str, at: datetime
    ) -> None:
        """Enter ``step`` and log ``message`` as its event."""
        ...

    async def event(
        self, deployment_id: UUID, worker_id: str, step: str, message: str, at: datetime
    ) -> None:
        """Append an event without changing the step."""
        ...

    async def finish(
        self,
        deployment_id: UUID,
        worker_id: str,
        state: DeploymentState,
        at: datetime,
        error: str | None,
        message: str,
    ) -> bool:
        """Reach a final state with a closing event; ``False`` if the lease was lost."""
        ...

    async def set_host_port(self, deployment_id: UUID, host_port: int | None) -> None:
        """Record the host port the installation's container is published on."""
        ...

    async def expire(self, now: datetime) -> list[UUID]:
        """End in ``timed_out`` every running deployment whose lease ran out and every
        queued one past its deadline; returns their ids."""
        ...
