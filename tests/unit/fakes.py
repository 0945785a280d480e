"""In-memory fakes of the ports in ``berth.core.ports``.

They satisfy the Protocols structurally (no inheritance) and keep the promises
the Protocols document: the ownership rule (another user's row looks exactly
like a missing one), the uniqueness rules (raising ``Conflict``), and
transactions (a unit of work sees a private copy of the store; ``commit``
publishes it; leaving without a commit throws it away).

The server-side fakes (runtime, gateway, fleet, job queue) are scripted by the
test and record every call, so a test can state what reached the server.

The same behaviour is expected of the SQL adapter; ``test_store_model.py``
runs one state machine against both to keep this fake honest.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, Self
from uuid import UUID, uuid4

import msgspec
from berth.core import lifecycle
from berth.core.errors import (
    Conflict,
    NotFound,
    RuntimeFailure,
    ServerUnreachable,
    WriteConflict,
)
from berth.core.lifecycle import can_move
from berth.core.models import (
    ApiToken,
    Container,
    ContainerPort,
    ContainerSnapshot,
    ContainerSpec,
    ContainerState,
    Deployment,
    DeploymentEvent,
    DeploymentRef,
    DeploymentState,
    Installation,
    InstallationStatus,
    Invite,
    Job,
    ProxyRoute,
    Server,
    ServerFacts,
    ServerStatus,
    SshCredentials,
    User,
    WebSession,
)

__all__ = [
    "FakeBox",
    "FakeClock",
    "FakeConnection",
    "FakeFleet",
    "FakeGateway",
    "FakeHasher",
    "FakeJobQueue",
    "FakeKeys",
    "FakeProxy",
    "FakeRuntime",
    "FakeStore",
    "FakeUnitOfWork",
    "FakeUnitOfWorkFactory",
    "Health",
    "derive_status",
]

ACTIVE = tuple(sorted(lifecycle.ACTIVE))
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


# --- servers: runtime, connection, gateway, fleet, job queue -------------------------


@dataclass(slots=True)
class Health:
    """How a container this runtime started behaves while berth waits for it to answer."""

    answer_after: int | None = 0  # probes left unanswered before the port answers; None: never
    exit_code: int | None = None  # the container exits with this code ...
    exit_after: int = 0  # ... once it has been inspected this many times while running
    restarting: bool = False  # it exits into "restarting" (restart policy), not "exited"


class FakeRuntime:
    """A ContainerRuntime over a dict of containers, scripted by the test.

    ``failures`` maps an operation (``"pull"``, ``"create"``, ``"start"``, …) to the
    message of the ``RuntimeFailure`` it raises; ``unreachable`` names operations
    that find the server gone; ``hangs`` names operations that never return.
    Every call is recorded in ``calls`` as ``(operation, argument…)``.
    """

    def __init__(
        self,
        *,
        images: Iterable[str] = (),
        health: Health | None = None,
        log_lines: Iterable[str] = (),
        facts: ServerFacts | None = None,
        listed: Iterable[Container] = (),
    ) -> None:
        self.images = set(images)
        self.health = health or Health()
        self.log_lines = list(log_lines)
        self.server_facts = facts or ServerFacts(
            os="Debian GNU/Linux 12", arch="x86_64", docker_version="27.3.1", cpus=2
        )
        self.listed = list(listed)  # containers shown by list_containers beyond the managed ones
        self.failures: dict[str, str] = {}
        self.unreachable: set[str] = set()
        self.hangs: set[str] = set()
        self.containers: dict[str, ContainerState] = {}
        self.specs: dict[str, ContainerSpec] = {}  # what each container was created with
        self.created: list[str] = []  # ids of containers created through ``create``
        self.calls: list[tuple[str, ...]] = []
        self._inspections: dict[str, int] = {}
        self._probes: dict[str, int] = {}
        self._ports = itertools.count(49153)

    # Test helpers

    def add(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        *,
        running: bool = True,
        host_port: int | None = None,
    ) -> ContainerState:
        """Put a container on the server that this runtime did not create (yet)."""
        state = ContainerState(
            id=uuid4().hex,
            name=name,
            status="running" if running else "exited",
            running=running,
            exit_code=None if running else 0,
            host_port=host_port,
            labels=dict(labels or {}),
        )
        self.containers[state.id] = state
        return state

    def ops(self) -> list[str]:
        """The operations called, in order."""
        return [call[0] for call in self.calls]

    def removed(self) -> list[str]:
        return [call[1] for call in self.calls if call[0] == "remove"]

    # ContainerRuntime

    async def facts(self) -> ServerFacts:
        await self._gate("facts")
        return self.server_facts

    async def image_exists(self, image: str) -> bool:
        await self._gate("image_exists", image)
        return image in self.images

    async def pull(self, image: str) -> None:
        await self._gate("pull", image)
        self.images.add(image)

    async def list_containers(self) -> list[Container]:
        await self._gate("list_containers")
        return self.listed + [
            _as_container(s, self.specs.get(s.id)) for s in self.containers.values()
        ]

    async def find(self, labels: dict[str, str]) -> list[ContainerState]:
        await self._gate("find", *sorted(f"{k}={v}" for k, v in labels.items()))
        return [s for s in self.containers.values() if labels.items() <= s.labels.items()]

    async def create(self, spec: ContainerSpec) -> str:
        await self._gate("create", spec.name)
        holder = self._by_name(spec.name)
        if holder is not None:
            raise RuntimeFailure(
                f'Conflict. The container name "/{spec.name}" is already in use '
                f'by container "{holder.id}".'
            )
        state = ContainerState(
            id=uuid4().hex,
            name=spec.name,
            status="created",
            running=False,
            exit_code=None,
            host_port=None,
            labels=dict(spec.labels),
        )
        self.containers[state.id] = state
        self.specs[state.id] = spec
        self.created.append(state.id)
        return state.id

    async def start(self, container_id: str) -> None:
        await self._gate("start", container_id)
        state = self.containers.get(container_id)
        if state is None:
            raise RuntimeFailure(f"No such container: {container_id}")
        spec = self.specs.get(container_id)
        port = spec.host_port if spec is not None else None
        self.containers[container_id] = msgspec.structs.replace(
            state,
            status="running",
            running=True,
            host_port=port if port is not None else next(self._ports),
        )

    async def inspect(self, container_id: str) -> ContainerState | None:
        await self._gate("inspect", container_id)
        state = self.containers.get(container_id) or self._by_name(container_id)
        if state is None or state.id not in self.created or not state.running:
            return state
        seen = self._inspections.get(state.id, 0)
        self._inspections[state.id] = seen + 1
        if self.health.exit_code is not None and seen >= self.health.exit_after:
            state = msgspec.structs.replace(
                state,
                status="restarting" if self.health.restarting else "exited",
                running=False,
                exit_code=self.health.exit_code,
            )
            self.containers[state.id] = state
        return state

    async def logs(self, container_id: str, tail: int) -> list[str]:
        await self._gate("logs", container_id, str(tail))
        return self.log_lines[-tail:] if tail > 0 else []

    async def remove(self, container_id: str) -> None:
        await self._gate("remove", container_id)
        self.containers.pop(container_id, None)

    async def rename(self, container_id: str, name: str) -> None:
        await self._gate("rename", container_id, name)
        state = self.containers.get(container_id)
        if state is None:
            raise RuntimeFailure(f"No such container: {container_id}")
        holder = self._by_name(name)
        if holder is not None and holder.id != container_id:
            raise RuntimeFailure(f'Conflict. The name "/{name}" is already in use.')
        self.containers[container_id] = msgspec.structs.replace(state, name=name)

    # The connection's probe lands here: only a running container publishing the port answers.

    async def answer(self, port: int) -> str | None:
        await self._gate("probe", str(port))
        state = next(
            (s for s in self.containers.values() if s.running and s.host_port == port), None
        )
        if state is None:
            return None
        seen = self._probes.get(state.id, 0)
        self._probes[state.id] = seen + 1
        after = self.health.answer_after
        return "HTTP 200" if after is not None and seen >= after else None

    def _by_name(self, name: str) -> ContainerState | None:
        return next((s for s in self.containers.values() if s.name == name), None)

    async def _gate(self, op: str, *args: str) -> None:
        self.calls.append((op, *args))
        if op in self.hangs:
            await asyncio.Event().wait()
        if op in self.unreachable:
            raise ServerUnreachable("Connection lost: the SSH tunnel closed.")
        if op in self.failures:
            raise RuntimeFailure(self.failures[op])


def _as_container(state: ContainerState, spec: ContainerSpec | None) -> Container:
    installation = state.labels.get("berth.installation")
    ports: tuple[ContainerPort, ...] = ()
    if spec is not None and state.host_port is not None:
        ports = (
            ContainerPort(
                container_port=spec.container_port,
                host_ip=spec.host_ip,
                host_port=state.host_port,
                protocol="tcp",
            ),
        )
    return Container(
        id=state.id,
        name=state.name,
        image=spec.image if spec is not None else "unknown",
        state=state.status,
        status=state.status,
        created_at=None,
        ports=ports,
        installation_id=UUID(installation) if installation else None,
    )


class FakeProxy:
    """A ReverseProxy that keeps the routes it was last given; ``failure`` makes it refuse."""

    def __init__(self) -> None:
        self.routes: list[ProxyRoute] | None = None  # None: never configured by berth
        self.applied: list[list[ProxyRoute]] = []
        self.failure: str | None = None

    async def apply(self, routes: Sequence[ProxyRoute]) -> None:
        if self.failure is not None:
            raise RuntimeFailure(self.failure)
        self.routes = list(routes)
        self.applied.append(list(routes))

    async def matches(self, routes: Sequence[ProxyRoute]) -> bool:
        return self.routes == list(routes)


class FakeConnection:
    """A ServerConnection: the server's runtime and proxy, and probes answered by the runtime."""

    def __init__(self, runtime: FakeRuntime, proxy: FakeProxy | None = None) -> None:
        self._runtime = runtime
        self._proxy = proxy or FakeProxy()
        self.probes: list[int] = []

    @property
    def docker(self) -> FakeRuntime:
        return self._runtime

    @property
    def proxy(self) -> FakeProxy:
        return self._proxy

    async def probe(self, port: int) -> str | None:
        self.probes.append(port)
        return await self._runtime.answer(port)


class FakeGateway:
    """A ServerGateway over scripted runtimes; servers it knows nothing of are unreachable.

    ``runtimes`` gives a server a full :class:`FakeRuntime`; ``containers`` is the
    short form for read paths (a runtime that lists these). ``failures`` makes
    ``connect`` raise the given error for a server (``HostKeyMismatch``, …).
    """

    def __init__(self) -> None:
        self.runtimes: dict[UUID, FakeRuntime] = {}
        self.proxies: dict[UUID, FakeProxy] = {}
        self.containers: dict[UUID, list[Container]] = {}
        self.failures: dict[UUID, ServerUnreachable] = {}
        self.calls: list[UUID] = []
        self.disconnected: list[UUID] = []
        self.closed = False

    def runtime(self, server_id: UUID, **kwargs: Any) -> FakeRuntime:
        """The server's runtime, made reachable with ``kwargs`` if it had none."""
        if server_id not in self.runtimes:
            self.runtimes[server_id] = FakeRuntime(**kwargs)
        return self.runtimes[server_id]

    async def connect(self, server: Server) -> FakeConnection:
        self.calls.append(server.id)
        if server.id in self.failures:
            raise self.failures[server.id]
        if server.id in self.runtimes:
            proxy = self.proxies.setdefault(server.id, FakeProxy())
            return FakeConnection(self.runtimes[server.id], proxy)
        if server.id in self.containers:
            return FakeConnection(FakeRuntime(listed=self.containers[server.id]))
        raise ServerUnreachable(f"Server {server.id} is unreachable.")

    async def disconnect(self, server_id: UUID) -> None:
        self.disconnected.append(server_id)

    async def close(self) -> None:
        self.closed = True


class FakeFleet:
    """The monitor's view of every server, recording what it is told."""

    def __init__(self, servers: Iterable[Server] = ()) -> None:
        self.by_id: dict[UUID, Server] = {s.id: s for s in servers}
        self.credentials_by_id: dict[UUID, SshCredentials] = {}
        self.snapshots: dict[UUID, ContainerSnapshot] = {}
        self.statuses: list[tuple[UUID, ServerStatus, str | None]] = []
        # installation id -> (server id, domain, host port): what ``routes`` is derived from
        self.installations: dict[UUID, tuple[UUID, str | None, int | None]] = {}

    async def servers(self) -> list[Server]:
        return [s for s in self.by_id.values() if s.status is not ServerStatus.PENDING]

    async def credentials(self, server_id: UUID) -> SshCredentials | None:
        return self.credentials_by_id.get(server_id)

    async def set_status(
        self,
        server_id: UUID,
        status: ServerStatus,
        at: datetime,
        *,
        facts: ServerFacts | None = None,
        detail: str | None = None,
    ) -> None:
        self.statuses.append((server_id, status, detail))
        server = self.by_id[server_id]
        online = status is ServerStatus.ONLINE
        self.by_id[server_id] = msgspec.structs.replace(
            server,
            status=status,
            status_detail=detail,
            facts=facts if facts is not None else server.facts,
            last_seen_at=at if online else server.last_seen_at,
        )

    async def save_snapshot(self, snapshot: ContainerSnapshot) -> None:
        self.snapshots[snapshot.server_id] = snapshot

    def hold(self, job: Job) -> None:
        """Know the job's installation (as the store does once it is deployed)."""
        self.installations.setdefault(
            job.installation_id, (job.server.id, job.deployment.spec.domain, None)
        )

    def record_port(self, installation_id: UUID, host_port: int | None) -> None:
        server_id, domain, _ = self.installations[installation_id]
        self.installations[installation_id] = (server_id, domain, host_port)

    async def routes(self, server_id: UUID) -> list[ProxyRoute]:
        return sorted(
            (
                ProxyRoute(domain=domain, upstream_port=port)
                for srv, domain, port in self.installations.values()
                if srv == server_id and domain is not None and port is not None
            ),
            key=lambda route: route.domain,
        )


class FakeJobQueue:
    """A JobQueue for one worker's runs: records what the worker writes, in order.

    Like the SQL queue, nothing is written once the lease is lost (``held`` is
    false) or the deployment is finished: such writes land in ``dropped``.
    """

    def __init__(self, jobs: Iterable[Job] = (), fleet: FakeFleet | None = None) -> None:
        self.queued = list(jobs)
        self.fleet = fleet  # the same store: a recorded host port changes the fleet's routes
        self._known: dict[UUID, Job] = {j.deployment.id: j for j in self.queued}
        self.held = True
        self.writes: list[tuple[str, str, str]] = []  # (kind, step, message): "step" | "event"
        self.dropped: list[tuple[str, str, str]] = []
        self.finished: list[tuple[DeploymentState, str | None, str]] = []
        self.host_ports: list[int | None] = []
        self.renewals = 0

    @property
    def steps(self) -> list[str]:
        return [step for kind, step, _ in self.writes if kind == "step"]

    @property
    def events(self) -> list[str]:
        """Every message written, steps' and events', in order."""
        return [message for _, _, message in self.writes]

    def _holds(self) -> bool:
        return self.held and not self.finished

    def track(self, job: Job) -> None:
        """Know a job handed to the worker directly, as if it had been claimed."""
        self._known[job.deployment.id] = job
        if self.fleet is not None:
            self.fleet.hold(job)

    async def claim(self, worker_id: str, now: datetime, lease_until: datetime) -> Job | None:
        if not self.queued:
            return None
        job = self.queued.pop(0)
        self.track(job)
        return job

    async def renew(self, deployment_id: UUID, worker_id: str, lease_until: datetime) -> bool:
        self.renewals += 1
        return self._holds()

    async def step(
        self, deployment_id: UUID, worker_id: str, step: str, message: str, at: datetime
    ) -> None:
        (self.writes if self._holds() else self.dropped).append(("step", step, message))

    async def event(
        self, deployment_id: UUID, worker_id: str, step: str, message: str, at: datetime
    ) -> None:
        (self.writes if self._holds() else self.dropped).append(("event", step, message))

    async def finish(
        self,
        deployment_id: UUID,
        worker_id: str,
        state: DeploymentState,
        at: datetime,
        error: str | None,
        message: str,
    ) -> bool:
        if not state.is_final:
            raise ValueError(f"{state} is not a final state")
        if not self._holds():
            self.dropped.append(("finish", state.value, message))
            return False
        self.finished.append((state, error, message))
        return True

    async def set_host_port(self, deployment_id: UUID, host_port: int | None) -> None:
        self.host_ports.append(host_port)
        job = self._known.get(deployment_id)
        if self.fleet is not None and job is not None:
            self.fleet.record_port(job.installation_id, host_port)

    async def expire(self, now: datetime) -> list[UUID]:
        return []


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
    sessions: dict[str, WebSession] = field(default_factory=dict)
    invites: dict[str, Invite] = field(default_factory=dict)

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
        )


class FakeStore:
    """The committed state shared by every unit of work of one factory."""

    def __init__(self, box: FakeBox | None = None) -> None:
        self.state = _State()
        self.box = box or FakeBox()
        self.commits = 0
        self._seq = itertools.count()
        self.server_locks: dict[UUID, asyncio.Lock] = {}

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
    finished = [d for d in deployments if d.state.is_final]
    return InstallationStatus.derive(
        any_active=any(d.state in ACTIVE for d in deployments),
        last_final=finished[-1].state if finished else None,
    )


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

    async def lock(self, owner_id: UUID, server_id: UUID) -> Server | None:
        """Wait for the server's lock (held until the unit of work ends), then read afresh:
        the working copy restarts from what is committed now, so call it first."""
        await self._uow.hold(self._uow.store.server_locks.setdefault(server_id, asyncio.Lock()))
        return await self.get(owner_id, server_id)

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

    async def delete(self, owner_id: UUID, server_id: UUID) -> bool:
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

    async def delete(self, owner_id: UUID, installation_id: UUID) -> bool:
        if self._owned(owner_id, installation_id) is None:
            return False
        del self._s.installations[installation_id]
        gone = {
            d_id
            for d_id, row in self._s.deployments.items()
            if row.deployment.installation_id == installation_id
        }
        for d_id in gone:
            del self._s.deployments[d_id]
        # The keys were columns of the deleted deployments: they are free again.
        for key, (d_id, _) in list(self._s.idempotency.items()):
            if d_id in gone:
                del self._s.idempotency[key]
        return True

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
                raise WriteConflict(f"Container name {installation.container_name} is taken.")
            domain = installation.spec.domain
            if domain is not None and other.spec.domain == domain:
                raise WriteConflict(f"Domain {domain} is taken.")
            if installation.host_port is not None and other.host_port == installation.host_port:
                raise WriteConflict(f"Host port {installation.host_port} is taken.")
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
                raise WriteConflict("This Idempotency-Key was already used.")
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

    async def recent(self, owner_id: UUID, server_id: UUID, limit: int) -> list[Deployment]:
        rows = [
            r
            for r in self._s.deployments.values()
            if r.owner_id == owner_id and r.deployment.server_id == server_id
        ]
        rows.sort(key=lambda r: (r.deployment.created_at, r.seq), reverse=True)
        return [r.deployment for r in rows[:limit]]

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
        session = self._s.sessions.get(id_hash)
        if session is not None:
            self._s.sessions[id_hash] = msgspec.structs.replace(
                session, last_seen_at=last_seen_at, expires_at=expires_at
            )

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
        invite = self._s.invites.get(token_hash)
        if invite is None or invite.used_at is not None:
            return False
        self._s.invites[token_hash] = msgspec.structs.replace(invite, used_at=at)
        return True


# --- unit of work ------------------------------------------------------------------


class FakeUnitOfWork:
    """A transaction over a :class:`FakeStore`: copy on enter, publish on commit."""

    def __init__(self, store: FakeStore) -> None:
        self.store = store
        self.box = store.box
        self.working = store.state.copy()
        self.committed = False
        self._held: list[asyncio.Lock] = []
        self.users = FakeUserRepository(self)
        self.tokens = FakeTokenRepository(self)
        self.servers = FakeServerRepository(self)
        self.installations = FakeInstallationRepository(self)
        self.deployments = FakeDeploymentRepository(self)
        self.sessions = FakeSessionRepository(self)
        self.invites = FakeInviteRepository(self)

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
        while self._held:
            self._held.pop().release()

    async def hold(self, lock: asyncio.Lock) -> None:
        """Take ``lock`` until the unit of work ends, and start over from the committed state."""
        if lock not in self._held:
            await lock.acquire()
            self._held.append(lock)
        self.working = self.store.state.copy()

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
