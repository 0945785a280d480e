"""In-memory fakes of the ports in ``berth.core.ports``.

They satisfy the Protocols structurally (no inheritance) and keep the promises
the Protocols document: the ownership rule (another user's row looks exactly
like a missing one), the uniqueness rules (raising ``Conflict``), and
transactions (a unit of work sees a private copy of the store; ``commit``
publishes it; leaving without a commit throws it away).

The same behaviour is expected of the SQL adapter; ``test_store_model.py``
runs one state machine against both to keep this fake honest.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Self
from uuid import UUID

import msgspec
from berth.core.errors import Conflict, NotFound, ServerUnreachable
from berth.core.models import (
    ApiToken,
    Container,
    ContainerSnapshot,
    Deployment,
    DeploymentEvent,
    DeploymentRef,
    DeploymentState,
    Installation,
    InstallationStatus,
    Server,
    User,
)

__all__ = [
    "FakeBox",
    "FakeClock",
    "FakeGateway",
    "FakeHasher",
    "FakeKeys",
    "FakeStore",
    "FakeUnitOfWork",
    "FakeUnitOfWorkFactory",
    "derive_status",
]

ACTIVE = (DeploymentState.QUEUED, DeploymentState.RUNNING)
EPOCH = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


# --- clock, hasher, box ------------------------------------------------------------


class FakeClock:
    """A clock that stands still until a test moves it. Always aware UTC."""

    def __init__(self, start: datetime = EPOCH) -> None:
        self._now = _aware(start)

    def now(self) -> datetime:
        return self._now

    def set(self, at: datetime) -> None:
        self._now = _aware(at)

    def advance(self, delta: timedelta | float = 1.0) -> datetime:
        """Move forward by ``delta`` (a timedelta or seconds); returns the new time."""
        step = delta if isinstance(delta, timedelta) else timedelta(seconds=delta)
        self._now += step
        return self._now


def _aware(at: datetime) -> datetime:
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError("FakeClock wants an aware datetime")
    return at.astimezone(UTC)


class FakeHasher:
    """Deterministic and fast; not a password hash, but never the password itself."""

    def hash(self, password: str) -> str:
        return "fake$" + hashlib.sha256(b"salt" + password.encode("utf-8")).hexdigest()

    def verify(self, password_hash: str, password: str) -> bool:
        return hmac.compare_digest(password_hash, self.hash(password))


class FakeBox:
    """Keyed sealing good enough for tests: XOR with a key stream plus an HMAC tag.

    ``open`` raises ``ValueError`` for tampered data or data sealed with another key,
    like the real box; ``digest`` is keyed, so two boxes digest differently.
    """

    _TAG = 32

    def __init__(self, key: bytes = b"test-key") -> None:
        self._key = key

    def _stream(self, size: int) -> bytes:
        blocks = (
            hashlib.sha256(self._key + i.to_bytes(8, "big")).digest()
            for i in range((size + 31) // 32)
        )
        return b"".join(blocks)[:size]

    def seal(self, plaintext: bytes) -> bytes:
        body = bytes(a ^ b for a, b in zip(plaintext, self._stream(len(plaintext)), strict=True))
        return hmac.new(self._key, body, "sha256").digest() + body

    def open(self, sealed: bytes) -> bytes:
        tag, body = sealed[: self._TAG], sealed[self._TAG :]
        if len(tag) != self._TAG or not hmac.compare_digest(
            tag, hmac.new(self._key, body, "sha256").digest()
        ):
            raise ValueError("sealed data was tampered with or sealed with another key")
        return bytes(a ^ b for a, b in zip(body, self._stream(len(body)), strict=True))

    def digest(self, data: bytes) -> str:
        return hmac.new(self._key, b"digest:" + data, "sha256").hexdigest()


class FakeKeys:
    """A KeyGenerator with recognisable, unique keys."""

    def __init__(self) -> None:
        self.count = 0

    def generate(self, comment: str) -> tuple[bytes, str]:
        self.count += 1
        return f"private-{self.count}".encode(), f"ssh-ed25519 AAAAfake{self.count} {comment}"


class _FakeRuntime:
    """Just enough of a ContainerRuntime for the read paths: the containers it holds."""

    def __init__(self, containers: list[Container]) -> None:
        self._containers = containers

    async def list_containers(self) -> list[Container]:
        return list(self._containers)


class _FakeConnection:
    def __init__(self, runtime: _FakeRuntime) -> None:
        self.docker = runtime

    async def probe(self, port: int) -> str | None:
        return None


class FakeGateway:
    """A ServerGateway answering from a dict; servers not in it are unreachable."""

    def __init__(self) -> None:
        self.containers: dict[UUID, list[Container]] = {}
        self.calls: list[UUID] = []

    async def connect(self, server: Server) -> _FakeConnection:
        self.calls.append(server.id)
        if server.id not in self.containers:
            raise ServerUnreachable(f"Server {server.id} is unreachable.")
        return _FakeConnection(_FakeRuntime(self.containers[server.id]))

    async def disconnect(self, server_id: UUID) -> None:
        return None

    async def close(self) -> None:
        return None


# --- the store ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _InstallationRow:
    owner_id: UUID
    installation: Installation  # as saved; status and last_deployment are derived on read
    sealed_env: bytes


@dataclass(frozen=True, slots=True)
class _DeploymentRow:
    owner_id: UUID
    deployment: Deployment
    sealed_env: bytes
    seq: int  # insertion order, the tie-breaker when clock readings are equal


@dataclass(slots=True)
class _State:
    """Everything stored. Values are immutable, so a shallow copy per dict is a snapshot."""

    users: dict[UUID, User] = field(default_factory=dict)
    tokens: dict[UUID, ApiToken] = field(default_factory=dict)
    servers: dict[UUID, Server] = field(default_factory=dict)
    enrollment_hashes: dict[UUID, str | None] = field(default_factory=dict)
    snapshots: dict[UUID, ContainerSnapshot] = field(default_factory=dict)
    installations: dict[UUID, _InstallationRow] = field(default_factory=dict)
    deployments: dict[UUID, _DeploymentRow] = field(default_factory=dict)
    idempotency: dict[tuple[UUID, str], tuple[UUID, str | None]] = field(default_factory=dict)

    def copy(self) -> _State:
        return _State(
            users=dict(self.users),
            tokens=dict(self.tokens),
            servers=dict(self.servers),
            enrollment_hashes=dict(self.enrollment_hashes),
            snapshots=dict(self.snapshots),
            installations=dict(self.installations),
            deployments=dict(self.deployments),
            idempotency=dict(self.idempotency),
        )


class FakeStore:
    """The committed state shared by every unit of work of one factory."""

    def __init__(self, box: FakeBox | None = None) -> None:
        self.state = _State()
        self.box = box or FakeBox()
        self.commits = 0
        self._seq = itertools.count()

    def next_seq(self) -> int:
        return next(self._seq)

    # Test-only helpers: things a worker does that no port offers yet.

    def mark_running(self, deployment_id: UUID, at: datetime, step: str = "pull") -> None:
        """Move a queued deployment to ``running`` (what the worker's claim will do)."""
        row = self.state.deployments[deployment_id]
        assert row.deployment.state is DeploymentState.QUEUED, row.deployment.state
        event = DeploymentEvent(at=at, step=step, message="Deployment started.")
        running = msgspec.structs.replace(
            row.deployment,
            state=DeploymentState.RUNNING,
            step=step,
            started_at=at,
            events=(*row.deployment.events, event),
        )
        self.state.deployments[deployment_id] = replace(row, deployment=running)
        self.commits += 1

    def env_sealed(self, installation_id: UUID) -> bytes:
        """The installation's env as stored: sealed bytes."""
        return self.state.installations[installation_id].sealed_env

    def env_of(self, installation_id: UUID) -> dict[str, str]:
        """The installation's env, opened with the store's box."""
        return _open_env(self.box, self.env_sealed(installation_id))

    def deployment_env(self, deployment_id: UUID) -> dict[str, str]:
        return _open_env(self.box, self.state.deployments[deployment_id].sealed_env)


def _seal_env(box: FakeBox, env: dict[str, str]) -> bytes:
    return box.seal(msgspec.json.encode(env))


def _open_env(box: FakeBox, sealed: bytes) -> dict[str, str]:
    return msgspec.json.decode(box.open(sealed), type=dict[str, str])


def derive_status(deployments: list[Deployment]) -> InstallationStatus:
    """Status from an installation's deployments, oldest first (see models.InstallationStatus).

    queued/running → deploying; otherwise the last one decides: succeeded →
    running; failed, timed out or canceled → failed; none → pending.
    """
    if any(d.state in ACTIVE for d in deployments):
        return InstallationStatus.DEPLOYING
    finished = [d for d in deployments if d.state.is_final]
    if not finished:
        return InstallationStatus.PENDING
    if finished[-1].state is DeploymentState.SUCCEEDED:
        return InstallationStatus.RUNNING
    return InstallationStatus.FAILED


class _Repo:
    def __init__(self, uow: FakeUnitOfWork) -> None:
        self._uow = uow

    @property
    def _s(self) -> _State:
        return self._uow.working

    def _owns_server(self, owner_id: UUID, server_id: UUID) -> bool:
        server = self._s.servers.get(server_id)
        return server is not None and server.owner_id == owner_id


class FakeUserRepository(_Repo):
    async def add(self, user: User) -> None:
        if user.id in self._s.users:
            raise Conflict("A user with this id exists.")
        if any(u.email.lower() == user.email.lower() for u in self._s.users.values()):
            raise Conflict("This email is already registered.")
        self._s.users[user.id] = user

    async def get(self, user_id: UUID) -> User | None:
        return self._s.users.get(user_id)

    async def get_by_email(self, email: str) -> User | None:
        wanted = email.lower()
        return next((u for u in self._s.users.values() if u.email.lower() == wanted), None)


class FakeTokenRepository(_Repo):
    async def replace(self, token: ApiToken) -> None:
        if token.user_id not in self._s.users:
            raise NotFound("No such user.")
        self._s.tokens[token.user_id] = token

    async def get(self, user_id: UUID) -> ApiToken | None:
        return self._s.tokens.get(user_id)

    async def find(self, token_hash: str) -> tuple[User, ApiToken] | None:
        for token in self._s.tokens.values():
            if hmac.compare_digest(token.token_hash, token_hash):
                return self._s.users[token.user_id], token
        return None

    async def touch(self, user_id: UUID, at: datetime) -> None:
        token = self._s.tokens.get(user_id)
        if token is not None:
            self._s.tokens[user_id] = msgspec.structs.replace(token, last_used_at=at)


class FakeServerRepository(_Repo):
    async def add(
        self, server: Server, enrollment_token_hash: str | None, private_key: bytes | None = None
    ) -> None:
        if server.id in self._s.servers:
            raise Conflict("A server with this id exists.")
        if server.owner_id not in self._s.users:
            raise NotFound("No such user.")
        self._s.servers[server.id] = server
        self._s.enrollment_hashes[server.id] = enrollment_token_hash

    async def get(self, owner_id: UUID, server_id: UUID) -> Server | None:
        return self._s.servers[server_id] if self._owns_server(owner_id, server_id) else None

    async def list(self, owner_id: UUID) -> list[Server]:
        return [s for s in self._s.servers.values() if s.owner_id == owner_id]

    async def snapshot(self, owner_id: UUID, server_id: UUID) -> ContainerSnapshot | None:
        if not self._owns_server(owner_id, server_id):
            return None
        return self._s.snapshots.get(server_id)

    async def save_snapshot(self, owner_id: UUID, snapshot: ContainerSnapshot) -> None:
        if not self._owns_server(owner_id, snapshot.server_id):
            raise NotFound("Server not found.")
        self._s.snapshots[snapshot.server_id] = snapshot


class FakeInstallationRepository(_Repo):
    def _read(self, row: _InstallationRow) -> Installation:
        deployments = _deployments_of(self._s, row.installation.id)
        last = deployments[-1] if deployments else None
        return msgspec.structs.replace(
            row.installation,
            status=derive_status(deployments),
            last_deployment=(
                DeploymentRef(id=last.id, state=last.state, finished_at=last.finished_at)
                if last is not None
                else None
            ),
        )

    def _owned(self, owner_id: UUID, installation_id: UUID) -> _InstallationRow | None:
        row = self._s.installations.get(installation_id)
        return row if row is not None and row.owner_id == owner_id else None

    async def get(self, owner_id: UUID, installation_id: UUID) -> Installation | None:
        row = self._owned(owner_id, installation_id)
        return self._read(row) if row is not None else None

    async def get_by_container_name(
        self, owner_id: UUID, server_id: UUID, container_name: str
    ) -> Installation | None:
        for row in self._s.installations.values():
            inst = row.installation
            if (
                row.owner_id == owner_id
                and inst.server_id == server_id
                and inst.container_name == container_name
            ):
                return self._read(row)
        return None

    async def list(self, owner_id: UUID, server_id: UUID) -> list[Installation]:
        rows = [
            row
            for row in self._s.installations.values()
            if row.owner_id == owner_id and row.installation.server_id == server_id
        ]
        rows.sort(key=lambda r: r.installation.created_at)  # stable: insertion order on ties
        return [self._read(row) for row in rows]

    async def save(self, owner_id: UUID, installation: Installation, env: dict[str, str]) -> None:
        if not self._owns_server(owner_id, installation.server_id):
            raise NotFound("Server not found.")
        existing = self._s.installations.get(installation.id)
        if existing is not None and (
            existing.owner_id != owner_id
            or existing.installation.server_id != installation.server_id
        ):
            raise NotFound("Installation not found.")
        for row in self._s.installations.values():
            other = row.installation
            if other.id == installation.id or other.server_id != installation.server_id:
                continue
            if other.container_name == installation.container_name:
                raise Conflict(f"Container name {installation.container_name} is taken.")
            domain = installation.spec.domain
            if domain is not None and other.spec.domain == domain:
                raise Conflict(f"Domain {domain} is taken.")
            if installation.host_port is not None and other.host_port == installation.host_port:
                raise Conflict(f"Host port {installation.host_port} is taken.")
        stored = msgspec.structs.replace(
            installation, status=InstallationStatus.PENDING, last_deployment=None
        )
        self._s.installations[installation.id] = _InstallationRow(
            owner_id=owner_id, installation=stored, sealed_env=_seal_env(self._uow.box, env)
        )


def _deployments_of(state: _State, installation_id: UUID) -> list[Deployment]:
    rows = [
        r for r in state.deployments.values() if r.deployment.installation_id == installation_id
    ]
    rows.sort(key=lambda r: (r.deployment.created_at, r.seq))
    return [r.deployment for r in rows]


class FakeDeploymentRepository(_Repo):
    def _owned(self, owner_id: UUID, deployment_id: UUID) -> _DeploymentRow | None:
        row = self._s.deployments.get(deployment_id)
        return row if row is not None and row.owner_id == owner_id else None

    async def add(
        self,
        owner_id: UUID,
        deployment: Deployment,
        env: dict[str, str],
        idempotency_key: str | None = None,
        fingerprint: str | None = None,
    ) -> None:
        inst = self._s.installations.get(deployment.installation_id)
        if (
            inst is None
            or inst.owner_id != owner_id
            or inst.installation.server_id != deployment.server_id
        ):
            raise NotFound("Installation not found.")
        if deployment.id in self._s.deployments:
            raise Conflict("A deployment with this id exists.")
        if idempotency_key is not None:
            if (owner_id, idempotency_key) in self._s.idempotency:
                raise Conflict("This Idempotency-Key was already used.")
            self._s.idempotency[(owner_id, idempotency_key)] = (deployment.id, fingerprint)
        self._s.deployments[deployment.id] = _DeploymentRow(
            owner_id=owner_id,
            deployment=deployment,
            sealed_env=_seal_env(self._uow.box, env),
            seq=self._uow.store.next_seq(),
        )

    async def get(self, owner_id: UUID, deployment_id: UUID) -> Deployment | None:
        row = self._owned(owner_id, deployment_id)
        return row.deployment if row is not None else None

    async def by_idempotency_key(self, owner_id: UUID, key: str) -> tuple[Deployment, str] | None:
        found = self._s.idempotency.get((owner_id, key))
        if found is None:
            return None
        deployment_id, fingerprint = found
        row = self._owned(owner_id, deployment_id)
        if row is None:
            return None
        return row.deployment, fingerprint or ""

    async def active(self, owner_id: UUID, installation_id: UUID) -> list[Deployment]:
        inst = self._s.installations.get(installation_id)
        if inst is None or inst.owner_id != owner_id:
            return []
        return [d for d in _deployments_of(self._s, installation_id) if d.state in ACTIVE]

    async def env(self, owner_id: UUID, deployment_id: UUID) -> dict[str, str]:
        """The env values the deployment runs with (the worker's read). NotFound if not owned."""
        row = self._owned(owner_id, deployment_id)
        if row is None:
            raise NotFound("Deployment not found.")
        return _open_env(self._uow.box, row.sealed_env)

    async def finish(
        self,
        owner_id: UUID,
        deployment_id: UUID,
        state: DeploymentState,
        at: datetime,
        error: str | None,
        event: DeploymentEvent,
    ) -> None:
        if not state.is_final:
            raise ValueError(f"{state} is not a final state")
        row = self._owned(owner_id, deployment_id)
        if row is None:
            raise NotFound("Deployment not found.")
        if row.deployment.state.is_final:
            raise Conflict(f"Deployment {deployment_id} already finished.")
        finished = msgspec.structs.replace(
            row.deployment,
            state=state,
            error=error,
            finished_at=at,
            events=(*row.deployment.events, event),
        )
        self._s.deployments[deployment_id] = replace(row, deployment=finished)


# --- unit of work ------------------------------------------------------------------


class FakeUnitOfWork:
    """A transaction over a :class:`FakeStore`: copy on enter, publish on commit."""

    def __init__(self, store: FakeStore) -> None:
        self.store = store
        self.box = store.box
        self.working = store.state.copy()
        self.committed = False
        self.users = FakeUserRepository(self)
        self.tokens = FakeTokenRepository(self)
        self.servers = FakeServerRepository(self)
        self.installations = FakeInstallationRepository(self)
        self.deployments = FakeDeploymentRepository(self)

    async def __aenter__(self) -> Self:
        self.working = self.store.state.copy()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.working = self.store.state.copy()  # whatever was not committed is gone

    async def commit(self) -> None:
        self.store.state = self.working
        self.working = self.store.state.copy()
        self.store.commits += 1
        self.committed = True


class FakeUnitOfWorkFactory:
    """A ``UnitOfWorkFactory``: each call opens a new unit of work on the same store."""

    def __init__(self, store: FakeStore | None = None) -> None:
        self.store = store or FakeStore()

    def __call__(self) -> FakeUnitOfWork:
        return FakeUnitOfWork(self.store)
