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
    Deployment,
    DeploymentEvent,
    DeploymentState,
    Installation,
    Server,
    User,
)

__all__ = [
    "Clock",
    "DeploymentRepository",
    "InstallationRepository",
    "PasswordHasher",
    "SecretBox",
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
    async def add(self, server: Server, enrollment_token_hash: str | None) -> None: ...

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


class ServerGateway(Protocol):
    """Reaches a server over its transport (SSH or local)."""

    async def list_containers(self, server: Server) -> list[Container]:
        """Every container on the server. Raises ``ServerUnreachable``."""
        ...
