"""The store in memory: its state, and one repository per aggregate over it.

Transactions: a unit of work sees a private copy of the state; ``commit``
publishes it; leaving without a commit throws it away (``uow.py``)."""

from __future__ import annotations

import asyncio
import hmac
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar
from uuid import UUID, uuid4

import msgspec
from berth.core.access import Owner, Role, servers_of, team_of
from berth.core.errors import Conflict, NotFound, WriteConflict
from berth.core.lifecycle import can_move
from berth.core.models import (
    WATCHED_STATUSES,
    ApiToken,
    ContainerSnapshot,
    DeliveryState,
    DeployHook,
    Deployment,
    DeploymentEvent,
    DeploymentRef,
    DeploymentState,
    GitCredential,
    HostCredentials,
    Installation,
    InstallationStatus,
    Invite,
    Registry,
    RegistryAuth,
    Server,
    ServerFacts,
    ServerStatus,
    Transport,
    User,
    Webhook,
    WebhookDelivery,
    WebhookEvent,
    WebSession,
)
from berth.core.oauth import OAuthAuthorization, OAuthClient, OAuthGrant
from berth.core.teams import AccessToken, AuditEntry, AuditFilter, Member, Team, TeamInvitation

from .basics import ACTIVE, FakeBox

if TYPE_CHECKING:  # the unit of work holds the repositories, and they refer back to it
    from .uow import FakeUnitOfWork

__all__ = ["FakeStore", "derive_status"]


@dataclass(frozen=True, slots=True)
class _InstallationRow:
    owner_id: Owner
    installation: Installation  # as saved; status and last_deployment are derived on read
    sealed_env: bytes


@dataclass(frozen=True, slots=True)
class _DeploymentRow:
    owner_id: Owner
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
    sessions: dict[str, WebSession] = field(default_factory=dict)
    invites: dict[str, Invite] = field(default_factory=dict)
    registries: dict[UUID, tuple[Registry, bytes]] = field(default_factory=dict)  # sealed
    webhooks: dict[UUID, tuple[Webhook, bytes]] = field(default_factory=dict)  # sealed secret
    git_credentials: dict[UUID, tuple[GitCredential, bytes]] = field(default_factory=dict)
    deploy_hooks: dict[UUID, tuple[DeployHook, bytes]] = field(default_factory=dict)  # by id
    deliveries: dict[UUID, WebhookDelivery] = field(default_factory=dict)  # the outbox
    teams: dict[UUID, Team] = field(default_factory=dict)
    members: dict[tuple[UUID, UUID], Member] = field(default_factory=dict)  # (team, user)
    invitations: dict[UUID, TeamInvitation] = field(default_factory=dict)
    access_tokens: dict[UUID, AccessToken] = field(default_factory=dict)
    audit: dict[UUID, tuple[int, AuditEntry]] = field(default_factory=dict)  # (seq, entry)
    oauth_clients: dict[str, OAuthClient] = field(default_factory=dict)
    oauth_authorizations: dict[UUID, OAuthAuthorization] = field(default_factory=dict)
    oauth_grants: dict[UUID, OAuthGrant] = field(default_factory=dict)

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
            sessions=dict(self.sessions),
            invites=dict(self.invites),
            registries=dict(self.registries),
            webhooks=dict(self.webhooks),
            git_credentials=dict(self.git_credentials),
            deploy_hooks=dict(self.deploy_hooks),
            deliveries=dict(self.deliveries),
            teams=dict(self.teams),
            members=dict(self.members),
            invitations=dict(self.invitations),
            access_tokens=dict(self.access_tokens),
            audit=dict(self.audit),
            oauth_clients=dict(self.oauth_clients),
            oauth_authorizations=dict(self.oauth_authorizations),
            oauth_grants=dict(self.oauth_grants),
        )


class FakeStore:
    """The committed state shared by every unit of work of one factory."""

    def __init__(self, box: FakeBox | None = None) -> None:
        self.state = _State()
        self.box = box or FakeBox()
        self.commits = 0
        self._seq = itertools.count()
        self.server_locks: dict[UUID, asyncio.Lock] = {}
        self.cancel_requests: dict[UUID, datetime] = {}  # running deployments asked to stop

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


def derive_status(
    deployments: list[Deployment], installation: Installation | None = None
) -> InstallationStatus:
    """Status from an installation's deployments, oldest first, and its marks (removed,
    stopped, the revision serving), by the core's rule (models.InstallationStatus)."""
    finished = [d for d in deployments if d.state.is_final]
    return InstallationStatus.derive(
        any_active=any(d.state in ACTIVE for d in deployments),
        last_final=finished[-1].state if finished else None,
        only_canceled=all(d.state is DeploymentState.CANCELED for d in finished),
        serving=installation is not None and installation.current_deployment_id is not None,
        stopped=installation is not None and installation.stopped_at is not None,
        removed=installation is not None and installation.removed_at is not None,
        stopping=installation is not None
        and installation.stopping_until is not None
        and installation.stopping_until > datetime.now(UTC),
    )


def _update(rows: dict[Any, Any], key: Any, **changes: Any) -> None:
    """``changes`` made to the row ``key`` of ``rows``, if it has one (a touch of a row
    gone meanwhile changes nothing, as an UPDATE of no row)."""
    row = rows.get(key)
    if row is not None:
        rows[key] = msgspec.structs.replace(row, **changes)


def _use_once(rows: dict[Any, Any], key: Any, used: str, at: datetime) -> bool:
    """Whether the row ``key`` of ``rows`` was there and not used yet; if so, its
    ``used`` field is set to ``at`` (an invitation accepted, a single-use token spent)."""
    row = rows.get(key)
    if row is None or getattr(row, used) is not None:
        return False
    rows[key] = msgspec.structs.replace(row, **{used: at})
    return True


class _Repo:
    def __init__(self, uow: FakeUnitOfWork) -> None:
        self._uow = uow

    @property
    def _s(self) -> _State:
        return self._uow.working

    def _owns_server(self, owner_id: Owner, server_id: UUID) -> bool:
        server = self._s.servers.get(server_id)
        return server is not None and _sees(owner_id, server.owner_id, server_id)


def _sees(owner: Owner, row_owner: UUID, server_id: UUID | None = None) -> bool:
    """Whether a row of team ``row_owner`` (on ``server_id``) is in ``owner``'s scope."""
    if row_owner != team_of(owner):
        return False
    servers = servers_of(owner)
    return servers is None or server_id is None or server_id in servers


class FakeUserRepository(_Repo):
    async def add(self, user: User) -> None:
        if user.id in self._s.users:
            raise Conflict("A user with this id exists.")
        if any(u.email.lower() == user.email.lower() for u in self._s.users.values()):
            raise Conflict("This email is already registered.")
        self._s.users[user.id] = user
        team = Team(id=user.id, name=user.email, created_at=user.created_at, personal_of=user.id)
        self._s.teams[team.id] = team
        self._s.members[(team.id, user.id)] = Member(
            team_id=team.id,
            user_id=user.id,
            email=user.email,
            role=Role.OWNER,
            joined_at=user.created_at,
        )

    async def get(self, user_id: UUID) -> User | None:
        return self._s.users.get(user_id)

    async def get_by_email(self, email: str) -> User | None:
        wanted = email.lower()
        return next((u for u in self._s.users.values() if u.email.lower() == wanted), None)

    async def first(self) -> User | None:
        """The oldest user; insertion order breaks ties of equal clock readings."""
        return min(self._s.users.values(), key=lambda u: u.created_at, default=None)


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
        _update(self._s.tokens, user_id, last_used_at=at)


class FakeServerRepository(_Repo):
    async def add(
        self, server: Server, enrollment_token_hash: str | None, private_key: bytes | None = None
    ) -> None:
        if server.id in self._s.servers:
            raise Conflict("A server with this id exists.")
        if server.owner_id not in self._s.teams:
            raise NotFound("No such team.")
        self._s.servers[server.id] = server
        self._s.enrollment_hashes[server.id] = enrollment_token_hash

    async def get(self, owner_id: Owner, server_id: UUID) -> Server | None:
        return self._s.servers[server_id] if self._owns_server(owner_id, server_id) else None

    async def lock(self, owner_id: Owner, server_id: UUID) -> Server | None:
        """Wait for the server's lock (held until the unit of work ends), then read afresh:
        the working copy restarts from what is committed now, so call it first."""
        await self._uow.hold(self._uow.store.server_locks.setdefault(server_id, asyncio.Lock()))
        return await self.get(owner_id, server_id)

    async def list(self, owner_id: Owner) -> list[Server]:
        return [s for s in self._s.servers.values() if _sees(owner_id, s.owner_id, s.id)]

    async def count(self, owner_id: Owner) -> int:
        return len(await self.list(owner_id))

    async def snapshot(self, owner_id: Owner, server_id: UUID) -> ContainerSnapshot | None:
        if not self._owns_server(owner_id, server_id):
            return None
        return self._s.snapshots.get(server_id)

    async def save_snapshot(self, owner_id: Owner, snapshot: ContainerSnapshot) -> None:
        if not self._owns_server(owner_id, snapshot.server_id):
            raise NotFound("Server not found.")
        self._s.snapshots[snapshot.server_id] = snapshot

    async def delete(self, owner_id: Owner, server_id: UUID) -> bool:
        if not self._owns_server(owner_id, server_id):
            return False
        of_server = [r.deployment for r in self._s.deployments.values()]
        if any(d.server_id == server_id and d.state is DeploymentState.RUNNING for d in of_server):
            raise WriteConflict("A deployment on this server is running; wait for it to finish.")
        for deployment_id, row in list(self._s.deployments.items()):
            if row.deployment.server_id == server_id:
                del self._s.deployments[deployment_id]
        for installation_id, inst in list(self._s.installations.items()):
            if inst.installation.server_id == server_id:
                del self._s.installations[installation_id]
        self._s.snapshots.pop(server_id, None)
        self._s.enrollment_hashes.pop(server_id, None)
        del self._s.servers[server_id]
        return True

    async def by_enrollment(self, token_hash: str) -> Server | None:
        for server_id, stored in self._s.enrollment_hashes.items():
            if stored is not None and hmac.compare_digest(stored, token_hash):
                return self._s.servers[server_id]
        return None

    async def speaking_for_itself(self, server_id: UUID) -> Server | None:
        return self._s.servers.get(server_id)

    async def of_this_machine(self) -> list[Server]:
        return [s for s in self._s.servers.values() if s.transport is Transport.LOCAL]

    async def mark_removed(self, server_id: UUID, detail: str) -> bool:
        server = self._s.servers.get(server_id)
        if server is None or server.status is ServerStatus.REMOVED:
            return False
        self._s.servers[server_id] = msgspec.structs.replace(
            server, status=ServerStatus.REMOVED, status_detail=detail
        )
        return True

    async def enroll(
        self,
        server_id: UUID,
        *,
        host_keys: tuple[str, ...],
        facts: ServerFacts,
        address: str | None,
        ssh_port: int,
    ) -> bool:
        server = self._s.servers.get(server_id)
        if server is None or server.status is not ServerStatus.PENDING:
            return False
        self._s.servers[server_id] = msgspec.structs.replace(
            server,
            status=ServerStatus.OFFLINE,
            status_detail=None,
            host_keys=host_keys,
            facts=facts,
            address=address,
            ssh_port=ssh_port,
        )
        return True

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
        server = self._s.servers.get(server_id)
        if server is None or not _sees(owner_id, server.owner_id, server_id):
            return False
        changed = msgspec.structs.replace(server, name=name, address=address, ssh_port=ssh_port)
        if recheck and server.status in WATCHED_STATUSES:
            changed = msgspec.structs.replace(
                changed,
                status=ServerStatus.OFFLINE,
                status_detail=None,
                offered_host_key=None,
                checked_at=None,
            )
        self._s.servers[server_id] = changed
        return True

    def _owned_in(self, owner_id: Owner, server_id: UUID, status: ServerStatus) -> Server | None:
        """The owner's server if it is in ``status`` (the SQL adapter's conditional UPDATE)."""
        server = self._s.servers.get(server_id)
        if (
            server is None
            or not _sees(owner_id, server.owner_id, server_id)
            or server.status is not status
        ):
            return None
        return server

    async def renew_enrollment(
        self, owner_id: Owner, server_id: UUID, token_hash: str, expires_at: datetime
    ) -> bool:
        server = self._owned_in(owner_id, server_id, ServerStatus.PENDING)
        if server is None:
            return False
        self._s.servers[server_id] = msgspec.structs.replace(
            server, enrollment_expires_at=expires_at
        )
        self._s.enrollment_hashes[server_id] = token_hash
        return True

    async def repin(
        self, owner_id: Owner, server_id: UUID, *, host_keys: tuple[str, ...], offered: str
    ) -> bool:
        server = self._owned_in(owner_id, server_id, ServerStatus.HOST_KEY_MISMATCH)
        if server is None or server.offered_host_key != offered:
            return False
        self._s.servers[server_id] = msgspec.structs.replace(
            server,
            status=ServerStatus.OFFLINE,
            status_detail="Host keys re-pinned; berth reconnects with the new key.",
            host_keys=host_keys,
            offered_host_key=None,
        )
        return True


class FakeInstallationRepository(_Repo):
    def _read(self, row: _InstallationRow) -> Installation:
        deployments = _deployments_of(self._s, row.installation.id)
        last = deployments[-1] if deployments else None
        return msgspec.structs.replace(
            row.installation,
            status=derive_status(deployments, row.installation),
            last_deployment=(
                DeploymentRef(id=last.id, state=last.state, finished_at=last.finished_at)
                if last is not None
                else None
            ),
        )

    def _owned(self, owner_id: Owner, installation_id: UUID) -> _InstallationRow | None:
        row = self._s.installations.get(installation_id)
        seen = row is not None and _sees(owner_id, row.owner_id, row.installation.server_id)
        return row if seen else None

    async def get(self, owner_id: Owner, installation_id: UUID) -> Installation | None:
        row = self._owned(owner_id, installation_id)
        return self._read(row) if row is not None else None

    async def get_by_container_name(
        self, owner_id: Owner, server_id: UUID, container_name: str
    ) -> Installation | None:
        for row in self._s.installations.values():
            inst = row.installation
            if (
                _sees(owner_id, row.owner_id, inst.server_id)
                and inst.server_id == server_id
                and inst.container_name == container_name
                and inst.removed_at is None
            ):
                return self._read(row)
        return None

    async def list(
        self, owner_id: Owner, server_id: UUID, *, include_removed: bool = False
    ) -> list[Installation]:
        rows = [
            row
            for row in self._s.installations.values()
            if _sees(owner_id, row.owner_id, server_id)
            and row.installation.server_id == server_id
            and (include_removed or row.installation.removed_at is None)
        ]
        rows.sort(key=lambda r: r.installation.created_at)  # stable: insertion order on ties
        return [self._read(row) for row in rows]

    async def remove(self, owner_id: Owner, installation_id: UUID, at: datetime) -> bool:
        return self._mark(owner_id, installation_id, removed_at=at, host_port=None, stopped_at=None)

    async def set_stopped(
        self, owner_id: Owner, installation_id: UUID, at: datetime | None
    ) -> bool:
        return self._mark(owner_id, installation_id, stopped_at=at)

    async def set_stopping(
        self, owner_id: Owner, installation_id: UUID, until: datetime | None
    ) -> bool:
        return self._mark(owner_id, installation_id, stopping_until=until)

    def _mark(self, owner_id: Owner, installation_id: UUID, **changes: Any) -> bool:
        row = self._owned(owner_id, installation_id)
        if row is None or row.installation.removed_at is not None:
            return False
        marked = msgspec.structs.replace(row.installation, **changes)
        self._s.installations[installation_id] = replace(row, installation=marked)
        return True

    async def save(self, owner_id: Owner, installation: Installation, env: dict[str, str]) -> None:
        if not self._owns_server(owner_id, installation.server_id):
            raise NotFound("Server not found.")
        existing = self._s.installations.get(installation.id)
        if existing is not None and (
            existing.owner_id != team_of(owner_id)
            or existing.installation.server_id != installation.server_id
        ):
            raise NotFound("Installation not found.")
        if existing is not None and existing.installation.removed_at is not None:
            raise NotFound("Installation not found.")
        for row in self._s.installations.values():
            other = row.installation
            if (
                other.id == installation.id
                or other.server_id != installation.server_id
                or other.removed_at is not None
            ):
                continue
            if other.container_name == installation.container_name:
                raise WriteConflict(f"Container name {installation.container_name} is taken.")
            domain = installation.spec.domain
            if domain is not None and other.spec.domain == domain:
                raise WriteConflict(f"Domain {domain} is taken.")
            if installation.host_port is not None and other.host_port == installation.host_port:
                raise WriteConflict(f"Host port {installation.host_port} is taken.")
        kept = existing.installation if existing is not None else installation
        stored = msgspec.structs.replace(
            installation,
            status=InstallationStatus.PENDING,
            last_deployment=None,
            current_deployment_id=kept.current_deployment_id,  # the worker's to move
            stopped_at=kept.stopped_at,
        )
        self._s.installations[installation.id] = _InstallationRow(
            owner_id=team_of(owner_id),
            installation=stored,
            sealed_env=_seal_env(self._uow.box, env),
        )


def _deployments_of(state: _State, installation_id: UUID) -> list[Deployment]:
    rows = [
        r for r in state.deployments.values() if r.deployment.installation_id == installation_id
    ]
    rows.sort(key=lambda r: (r.deployment.created_at, r.seq))
    return [r.deployment for r in rows]


class FakeDeploymentRepository(_Repo):
    def _owned(self, owner_id: Owner, deployment_id: UUID) -> _DeploymentRow | None:
        row = self._s.deployments.get(deployment_id)
        seen = row is not None and _sees(owner_id, row.owner_id, row.deployment.server_id)
        return row if seen else None

    async def add(
        self,
        owner_id: Owner,
        deployment: Deployment,
        env: dict[str, str],
        idempotency_key: str | None = None,
        fingerprint: str | None = None,
    ) -> None:
        inst = self._s.installations.get(deployment.installation_id)
        if (
            inst is None
            or not _sees(owner_id, inst.owner_id, deployment.server_id)
            or inst.installation.server_id != deployment.server_id
        ):
            raise NotFound("Installation not found.")
        if deployment.id in self._s.deployments:
            raise Conflict("A deployment with this id exists.")
        if idempotency_key is not None:
            if (team_of(owner_id), idempotency_key) in self._s.idempotency:
                raise WriteConflict("This Idempotency-Key was already used.")
            key = (team_of(owner_id), idempotency_key)
            self._s.idempotency[key] = (deployment.id, fingerprint)
        self._s.deployments[deployment.id] = _DeploymentRow(
            owner_id=team_of(owner_id),
            deployment=deployment,
            sealed_env=_seal_env(self._uow.box, env),
            seq=self._uow.store.next_seq(),
        )

    async def get(self, owner_id: Owner, deployment_id: UUID) -> Deployment | None:
        row = self._owned(owner_id, deployment_id)
        return row.deployment if row is not None else None

    async def by_idempotency_key(self, owner_id: Owner, key: str) -> tuple[Deployment, str] | None:
        found = self._s.idempotency.get((team_of(owner_id), key))
        if found is None:
            return None
        deployment_id, fingerprint = found
        row = self._owned(owner_id, deployment_id)
        if row is None:
            return None
        return row.deployment, fingerprint or ""

    async def active(self, owner_id: Owner, installation_id: UUID) -> list[Deployment]:
        inst = self._s.installations.get(installation_id)
        if inst is None or not _sees(owner_id, inst.owner_id, inst.installation.server_id):
            return []
        return [d for d in _deployments_of(self._s, installation_id) if d.state in ACTIVE]

    async def of_installation(
        self, owner_id: Owner, installation_id: UUID, limit: int, before: UUID | None = None
    ) -> list[Deployment]:
        rows = [
            r
            for r in self._s.deployments.values()
            if _sees(owner_id, r.owner_id, r.deployment.server_id)
            and r.deployment.installation_id == installation_id
        ]
        rows.sort(key=lambda r: (r.deployment.created_at, r.seq), reverse=True)
        if before is not None:
            ids = [r.deployment.id for r in rows]
            if before not in ids:
                return []
            rows = rows[ids.index(before) + 1 :]
        return [r.deployment for r in rows[:limit]]

    async def add_event(self, owner_id: Owner, deployment_id: UUID, event: DeploymentEvent) -> None:
        row = self._owned(owner_id, deployment_id)
        if row is not None:
            logged = msgspec.structs.replace(row.deployment, events=(*row.deployment.events, event))
            self._s.deployments[deployment_id] = replace(row, deployment=logged)

    async def events_after(
        self, owner_id: Owner, deployment_id: UUID, after_id: int, limit: int
    ) -> tuple[DeploymentState, list[tuple[int, DeploymentEvent]]] | None:
        """Events numbered by their place in the log (1, 2, …): append-only, so stable."""
        row = self._owned(owner_id, deployment_id)
        if row is None:
            return None
        numbered = list(enumerate(row.deployment.events, start=1))
        return row.deployment.state, [(n, e) for n, e in numbered if n > after_id][:limit]

    async def request_cancel(self, owner_id: Owner, deployment_id: UUID, at: datetime) -> bool:
        row = self._owned(owner_id, deployment_id)
        if row is None or row.deployment.state is not DeploymentState.RUNNING:
            return False
        self._uow.store.cancel_requests.setdefault(deployment_id, at)
        return True

    async def recent(self, owner_id: Owner, server_id: UUID, limit: int) -> list[Deployment]:
        rows = [
            r
            for r in self._s.deployments.values()
            if _sees(owner_id, r.owner_id, r.deployment.server_id)
            and r.deployment.server_id == server_id
        ]
        rows.sort(key=lambda r: (r.deployment.created_at, r.seq), reverse=True)
        return [r.deployment for r in rows[:limit]]

    async def env(self, owner_id: Owner, deployment_id: UUID) -> dict[str, str]:
        """The env values the deployment runs with (the worker's read). NotFound if not owned."""
        row = self._owned(owner_id, deployment_id)
        if row is None:
            raise NotFound("Deployment not found.")
        return _open_env(self._uow.box, row.sealed_env)

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
        if not state.is_final:
            raise ValueError(f"{state} is not a final state")
        row = self._owned(owner_id, deployment_id)
        if row is None and queued_only:
            raise WriteConflict(f"Deployment {deployment_id} is gone.")
        if row is None:
            raise NotFound("Deployment not found.")
        if not can_move(row.deployment.state, state):
            raise WriteConflict(
                f"Deployment {deployment_id} cannot go from {row.deployment.state} to {state}."
            )
        if queued_only and row.deployment.state is not DeploymentState.QUEUED:
            raise WriteConflict(f"Deployment {deployment_id} is running.")
        finished = msgspec.structs.replace(
            row.deployment,
            state=state,
            error=error,
            finished_at=at,
            events=(*row.deployment.events, event),
        )
        self._s.deployments[deployment_id] = replace(row, deployment=finished)


class FakeSessionRepository(_Repo):
    async def add(self, session: WebSession) -> None:
        if session.id_hash in self._s.sessions:
            raise Conflict("This session id is already in use.")
        if session.user_id not in self._s.users:
            raise NotFound("No such user.")
        self._s.sessions[session.id_hash] = session

    async def get(self, id_hash: str) -> tuple[User, WebSession] | None:
        session = self._s.sessions.get(id_hash)
        if session is None:
            return None
        return self._s.users[session.user_id], session

    async def touch(self, id_hash: str, last_seen_at: datetime, expires_at: datetime) -> None:
        _update(self._s.sessions, id_hash, last_seen_at=last_seen_at, expires_at=expires_at)

    async def delete(self, id_hash: str) -> None:
        self._s.sessions.pop(id_hash, None)

    async def delete_expired(self, now: datetime) -> int:
        expired = [h for h, s in self._s.sessions.items() if s.expires_at <= now]
        for id_hash in expired:
            del self._s.sessions[id_hash]
        return len(expired)


class FakeInviteRepository(_Repo):
    async def add(self, invite: Invite) -> None:
        if invite.token_hash in self._s.invites:
            raise Conflict("This invitation already exists.")
        self._s.invites[invite.token_hash] = invite

    async def get(self, token_hash: str) -> Invite | None:
        return self._s.invites.get(token_hash)

    async def use(self, token_hash: str, at: datetime) -> bool:
        return _use_once(self._s.invites, token_hash, "used_at", at)


_Saved = TypeVar("_Saved", bound=HostCredentials)


class _FakeSavedPerHost(_Repo, Generic[_Saved]):
    """Credentials saved per host, by id, in the state's ``_table``; the password sealed
    with the store's box, as the SQL repositories do (``HostCredentialsRepository``)."""

    _table: ClassVar[str]
    _taken: ClassVar[str]

    def _saved(self) -> dict[UUID, tuple[_Saved, bytes]]:
        saved: dict[UUID, tuple[_Saved, bytes]] = getattr(self._s, self._table)
        return saved

    def _of(self, owner_id: Owner) -> list[tuple[_Saved, bytes]]:
        team = team_of(owner_id)
        return [(s, sealed) for s, sealed in self._saved().values() if s.owner_id == team]

    async def add(self, saved: _Saved, password: str) -> None:
        if saved.owner_id not in self._s.teams:
            raise NotFound("No such team.")
        if await self.by_host(saved.owner_id, saved.host) is not None:
            raise WriteConflict(self._taken)
        self._saved()[saved.id] = (saved, self._uow.box.seal(password.encode()))

    async def list(self, owner_id: Owner) -> list[_Saved]:
        return sorted((s for s, _ in self._of(owner_id)), key=lambda s: s.host)

    async def by_host(self, owner_id: Owner, host: str) -> _Saved | None:
        return next((s for s, _ in self._of(owner_id) if s.host == host), None)

    async def delete(self, owner_id: Owner, item_id: UUID) -> bool:
        if not any(s.id == item_id for s, _ in self._of(owner_id)):
            return False
        del self._saved()[item_id]
        return True

    def _sealed(self, owner_id: Owner, host: str) -> tuple[str, str] | None:
        """The owner's ``(username, password)`` for ``host``; ``None`` if none, or sealed
        with another key."""
        for saved, sealed in self._of(owner_id):
            if saved.host == host:
                try:
                    return saved.username, self._uow.box.open(sealed).decode()
                except ValueError:
                    return None
        return None


class FakeRegistryRepository(_FakeSavedPerHost[Registry]):
    _table = "registries"
    _taken = "You already have credentials for this host."

    async def auth(self, owner_id: Owner, host: str) -> RegistryAuth | None:
        found = self._sealed(owner_id, host)
        return RegistryAuth(host=host, username=found[0], password=found[1]) if found else None


class FakeGitCredentialRepository(_FakeSavedPerHost[GitCredential]):
    _table = "git_credentials"
    _taken = "Credentials for this host exist."

    async def auth(self, owner_id: Owner, host: str) -> tuple[str, str] | None:
        return self._sealed(owner_id, host)


class FakeDeployHookRepository(_Repo):
    """Deploy hooks by id, one per installation; the secret sealed, as in SQL."""

    async def save(self, owner_id: Owner, hook: DeployHook, secret: str) -> DeployHook:
        kept = await self.get(owner_id, hook.installation_id) or hook
        self._s.deploy_hooks[kept.id] = (kept, self._uow.box.seal(secret.encode()))
        return kept

    async def get(self, owner_id: Owner, installation_id: UUID) -> DeployHook | None:
        team = team_of(owner_id)
        for hook, _ in self._s.deploy_hooks.values():
            if hook.owner_id == team and hook.installation_id == installation_id:
                return hook
        return None

    async def delete(self, owner_id: Owner, installation_id: UUID) -> bool:
        hook = await self.get(owner_id, installation_id)
        if hook is None:
            return False
        del self._s.deploy_hooks[hook.id]
        return True

    async def find(self, hook_id: UUID) -> tuple[DeployHook, str] | None:
        found = self._s.deploy_hooks.get(hook_id)
        if found is None:
            return None
        return found[0], self._uow.box.open(found[1]).decode()


class FakeWebhookRepository(_Repo):
    async def add(self, webhook: Webhook, secret: str) -> None:
        if webhook.id in self._s.webhooks:
            raise Conflict("This webhook id is already in use.")
        self._s.webhooks[webhook.id] = (webhook, self._uow.box.seal(secret.encode()))

    def _owned_hook(self, owner_id: Owner, webhook_id: UUID) -> Webhook | None:
        found = self._s.webhooks.get(webhook_id)
        return found[0] if found is not None and found[0].owner_id == team_of(owner_id) else None

    async def count(self, owner_id: Owner) -> int:
        return sum(1 for w, _ in self._s.webhooks.values() if w.owner_id == team_of(owner_id))

    async def list(self, owner_id: Owner) -> list[Webhook]:
        mine = [w for w, _ in self._s.webhooks.values() if w.owner_id == team_of(owner_id)]
        return sorted(mine, key=lambda w: (w.created_at, w.id))

    async def get(self, owner_id: Owner, webhook_id: UUID) -> Webhook | None:
        return self._owned_hook(owner_id, webhook_id)

    async def secret(self, owner_id: Owner, webhook_id: UUID) -> str | None:
        if self._owned_hook(owner_id, webhook_id) is None:
            return None
        try:
            return self._uow.box.open(self._s.webhooks[webhook_id][1]).decode()
        except ValueError:
            return None

    async def delete(self, owner_id: Owner, webhook_id: UUID) -> bool:
        if self._owned_hook(owner_id, webhook_id) is None:
            return False
        del self._s.webhooks[webhook_id]
        for delivery_id, delivery in list(self._s.deliveries.items()):
            if delivery.webhook_id == webhook_id:
                del self._s.deliveries[delivery_id]
        return True

    async def enqueue(
        self, webhooks: Sequence[Webhook], event: WebhookEvent, body: bytes, at: datetime
    ) -> None:
        for webhook in webhooks:
            delivery = WebhookDelivery(
                id=uuid4(),
                webhook_id=webhook.id,
                event=event,
                created_at=at,
                state=DeliveryState.PENDING,
                next_attempt_at=at,
            )
            self._s.deliveries[delivery.id] = delivery

    async def deliveries(
        self, owner_id: Owner, webhook_id: UUID, limit: int
    ) -> list[WebhookDelivery] | None:
        if self._owned_hook(owner_id, webhook_id) is None:
            return None
        mine = [d for d in self._s.deliveries.values() if d.webhook_id == webhook_id]
        return sorted(mine, key=lambda d: (d.created_at, d.id), reverse=True)[:limit]


class FakeTeamRepository(_Repo):
    async def add(self, team: Team, owner_id: UUID) -> None:
        if team.id in self._s.teams:
            raise Conflict("A team with this id exists.")
        user = self._s.users[owner_id]
        self._s.teams[team.id] = msgspec.structs.replace(team, role=None)
        self._s.members[(team.id, owner_id)] = Member(
            team_id=team.id,
            user_id=owner_id,
            email=user.email,
            role=Role.OWNER,
            joined_at=team.created_at,
        )

    async def get(self, team_id: UUID) -> Team | None:
        return self._s.teams.get(team_id)

    async def of_user(self, user_id: UUID) -> list[Team]:
        mine = [
            msgspec.structs.replace(self._s.teams[team_id], role=m.role)
            for (team_id, member), m in self._s.members.items()
            if member == user_id
        ]
        return sorted(mine, key=lambda t: (t.personal_of != user_id, t.created_at, t.id))

    async def role(self, team_id: UUID, user_id: UUID) -> Role | None:
        member = self._s.members.get((team_id, user_id))
        return member.role if member is not None else None

    async def members(self, team_id: UUID) -> list[Member]:
        mine = [m for (team, _), m in self._s.members.items() if team == team_id]
        return sorted(mine, key=lambda m: (m.joined_at, m.email))

    async def add_member(self, member: Member) -> bool:
        key = (member.team_id, member.user_id)
        if key in self._s.members:
            return False
        self._s.members[key] = member
        return True

    async def set_role(self, team_id: UUID, user_id: UUID, role: Role) -> bool:
        member = self._s.members.get((team_id, user_id))
        if member is None:
            return False
        self._s.members[(team_id, user_id)] = msgspec.structs.replace(member, role=role)
        return True

    async def remove_member(self, team_id: UUID, user_id: UUID) -> bool:
        if self._s.members.pop((team_id, user_id), None) is None:
            return False
        for token_id, token in list(self._s.access_tokens.items()):
            if token.team_id == team_id and token.user_id == user_id:
                del self._s.access_tokens[token_id]
        return True

    async def add_invitation(self, invitation: TeamInvitation) -> None:
        self._s.invitations[invitation.id] = invitation

    async def invitation(self, token_hash: str) -> TeamInvitation | None:
        return next((i for i in self._s.invitations.values() if i.token_hash == token_hash), None)

    async def accept_invitation(self, invitation_id: UUID, at: datetime) -> bool:
        return _use_once(self._s.invitations, invitation_id, "accepted_at", at)


class FakeAccessTokenRepository(_Repo):
    async def add(self, token: AccessToken) -> None:
        if token.id in self._s.access_tokens:
            raise Conflict("A token with this id exists.")
        self._s.access_tokens[token.id] = token

    async def of_user(self, user_id: UUID) -> list[AccessToken]:
        mine = [t for t in self._s.access_tokens.values() if t.user_id == user_id]
        return sorted(mine, key=lambda t: (t.created_at, t.id), reverse=True)

    async def find(self, token_hash: str) -> tuple[User, AccessToken, Role] | None:
        for token in self._s.access_tokens.values():
            if hmac.compare_digest(token.token_hash, token_hash):
                member = self._s.members.get((token.team_id, token.user_id))
                if member is None:
                    return None
                return self._s.users[token.user_id], token, member.role
        return None

    async def revoke(self, user_id: UUID, token_id: UUID) -> AccessToken | None:
        token = self._s.access_tokens.get(token_id)
        if token is None or token.user_id != user_id:
            return None
        del self._s.access_tokens[token_id]
        return token

    async def touch(self, token_id: UUID, at: datetime) -> None:
        _update(self._s.access_tokens, token_id, last_used_at=at)


class FakeAuditRepository(_Repo):
    """Append-only: ``add`` and ``prune`` are all that write."""

    async def add(self, entry: AuditEntry) -> None:
        if entry.id in self._s.audit:
            raise Conflict("An audit entry with this id exists.")
        self._s.audit[entry.id] = (self._uow.store.next_seq(), entry)

    async def page(
        self,
        team_id: UUID,
        limit: int,
        before: UUID | None = None,
        where: AuditFilter | None = None,
    ) -> list[AuditEntry]:
        rows = sorted(
            (
                (e.at, seq, e)
                for seq, e in self._s.audit.values()
                if e.team_id == team_id and (where is None or where.admits(e))
            ),
            key=lambda r: (r[0], r[1]),
            reverse=True,
        )
        if before is not None:
            mark = self._s.audit.get(before)
            if mark is None or mark[1].team_id != team_id:
                return []
            key = (mark[1].at, mark[0])
            rows = [r for r in rows if (r[0], r[1]) < key]
        return [e for _, _, e in rows[:limit]]

    async def prune(self, older_than: datetime) -> int:
        gone = [i for i, (_, e) in self._s.audit.items() if e.at < older_than]
        for entry_id in gone:
            del self._s.audit[entry_id]
        return len(gone)


class FakeOAuthRepository(_Repo):
    """``OAuthRepository`` over dicts (the SQL one seals the registration: so does this)."""

    async def add_client(self, client: OAuthClient) -> None:
        sealed = self._uow.box.seal(client.metadata.encode())
        self._s.oauth_clients[client.client_id] = msgspec.structs.replace(
            client, metadata=sealed.hex()
        )

    async def client(self, client_id: str) -> OAuthClient | None:
        found = self._s.oauth_clients.get(client_id)
        if found is None:
            return None
        opened = self._uow.box.open(bytes.fromhex(found.metadata)).decode()
        return msgspec.structs.replace(found, metadata=opened)

    async def add_authorization(self, authorization: OAuthAuthorization) -> None:
        self._s.oauth_authorizations[authorization.id] = authorization

    async def authorization(self, authorization_id: UUID) -> OAuthAuthorization | None:
        return self._s.oauth_authorizations.get(authorization_id)

    async def by_code(self, code_hash: str) -> OAuthAuthorization | None:
        found = self._s.oauth_authorizations.values()
        return next((a for a in found if a.code_hash == code_hash), None)

    async def approve(self, approved: OAuthAuthorization) -> bool:
        found = self._s.oauth_authorizations.get(approved.id)
        if found is None or found.code_hash is not None:
            return False
        self._s.oauth_authorizations[approved.id] = approved
        return True

    async def delete_authorization(self, authorization_id: UUID) -> bool:
        return self._s.oauth_authorizations.pop(authorization_id, None) is not None

    async def add_grant(self, grant: OAuthGrant) -> None:
        self._s.oauth_grants[grant.id] = grant

    async def grant(self, refresh_hash: str) -> OAuthGrant | None:
        found = self._s.oauth_grants.values()
        return next((g for g in found if g.refresh_hash == refresh_hash), None)

    async def grant_of_token(self, token_id: UUID) -> OAuthGrant | None:
        return next((g for g in self._s.oauth_grants.values() if g.token_id == token_id), None)

    async def grant_by_id(self, grant_id: UUID) -> OAuthGrant | None:
        return self._s.oauth_grants.get(grant_id)

    async def delete_grant(self, grant_id: UUID) -> bool:
        return self._s.oauth_grants.pop(grant_id, None) is not None

    async def prune(self, now: datetime) -> int:
        gone = 0
        for table in (self._s.oauth_authorizations, self._s.oauth_grants):
            for key, row in list(table.items()):
                if row.expires_at <= now:
                    del table[key]
                    gone += 1
        return gone
