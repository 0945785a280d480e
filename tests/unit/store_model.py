"""A state machine over the store, runnable against any ``UnitOfWorkFactory``.

Deploys, redeploys, starts, finishes and cancels deployments of two users on
their servers through the real use cases, and after every step compares the
store with a small model and checks the invariants:

* at most one queued-or-running deployment per installation;
* domain and host port unique per server;
* nobody sees another user's servers, installations or deployments.

A backend supplies the unit of work; subclass :class:`StoreMachine`, set
``make_backend`` and expose ``MyMachine.TestCase`` to pytest. The fake backend
lives in ``test_store_model.py``; the SQL one in
``tests/integration/test_store_model_sql.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar
from uuid import UUID, uuid4

from berth.core import commands as c
from berth.core.access import Actor
from berth.core.commands import AddRegistry as AddRegistryCommand
from berth.core.commands import parse_create_server, parse_deploy
from berth.core.errors import Conflict, NotFound
from berth.core.lifecycle import can_move
from berth.core.models import (
    DeploymentEvent,
    DeploymentState,
    InstallationStatus,
    RegistryAuth,
    Server,
    User,
)
from berth.core.ports import SecretBox, UnitOfWorkFactory
from berth.core.use_cases import (
    CreateServer,
    CreateUser,
    GetDeployment,
    ListInstallations,
    QueueDeployment,
)
from berth.core.use_cases.registries import AddRegistry, RemoveRegistry
from fakes import HOST_KEY, FakeClock, FakeHasher, FakeKeys
from hypothesis import assume, event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

__all__ = ["Backend", "StoreMachine"]

T = TypeVar("T")

ACTIVE = (DeploymentState.QUEUED, DeploymentState.RUNNING)
FINAL = [s for s in DeploymentState if s.is_final]


class Backend(Protocol):
    """What the machine needs from a store under test."""

    uow: UnitOfWorkFactory
    box: SecretBox

    async def start(self, owner_id: UUID, deployment_id: UUID, clock: FakeClock) -> None:
        """Move a queued deployment to running (the worker's claim; no port offers it yet)."""
        ...

    async def close(self) -> None: ...


@dataclass
class _Inst:
    id: UUID
    owner: UUID
    server: UUID
    domain: str | None
    host_port: int | None
    deployments: list[UUID] = field(default_factory=list)


@dataclass
class _Dep:
    id: UUID
    owner: UUID
    installation: UUID
    state: DeploymentState


def _status(states: list[DeploymentState]) -> InstallationStatus:
    if any(s in ACTIVE for s in states):
        return InstallationStatus.DEPLOYING
    if all(s is DeploymentState.CANCELED for s in states):  # none, or only canceled ones
        return InstallationStatus.PENDING
    return (
        InstallationStatus.RUNNING
        if states[-1] is DeploymentState.SUCCEEDED
        else (InstallationStatus.FAILED)
    )


class StoreMachine(RuleBasedStateMachine):
    """Subclasses set ``make_backend`` (an async callable returning a fresh Backend)."""

    make_backend: ClassVar[Callable[[], Awaitable[Backend]]]

    def __init__(self) -> None:
        super().__init__()
        self.runner = asyncio.Runner()
        self.backend = self.run(type(self).make_backend())
        self.clock = FakeClock()
        uow = self.backend.uow
        self.deploy_uc = QueueDeployment(uow, self.clock, self.backend.box)
        self.get_deployment = GetDeployment(uow)
        self.list_installations = ListInstallations(uow, self.clock)
        self.users: list[User] = []
        self.servers: dict[UUID, list[Server]] = {}
        self.run(self._setup(uow))
        self.installs: dict[tuple[UUID, str], _Inst] = {}
        self.deps: dict[UUID, _Dep] = {}
        self.keys: dict[tuple[UUID, str], tuple[UUID, tuple[Any, ...]]] = {}
        self.last_keyed: tuple[Any, ...] | None = None
        self.removed: dict[UUID, _Inst] = {}  # installations removed: history kept
        self.add_registry = AddRegistry(uow, self.clock)
        self.remove_registry = RemoveRegistry(uow)
        # (owner, host) -> (registry id, username, password): what each user saved
        self.registries: dict[tuple[UUID, str], tuple[UUID, str, str]] = {}

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.runner.run(coro)

    async def _setup(self, uow: UnitOfWorkFactory) -> None:
        create_user = CreateUser(uow, FakeHasher(), self.clock)
        create_server = CreateServer(uow, self.clock, FakeKeys())
        for tag in ("alice", "bob"):
            email = f"{tag}-{uuid4().hex}@example.com"
            user = await create_user(
                None, c.CreateUser(email=email, password="long enough password")
            )
            self.users.append(user)
            self.servers[user.id] = [
                (
                    await create_server(
                        Actor.personal(user),
                        parse_create_server(
                            {
                                "name": f"{tag}-{i}",
                                "address": "203.0.113.9",
                                "host_keys": [HOST_KEY],
                            }
                        ),
                    )
                ).server
                for i in range(2)
            ]
            self.clock.advance(1)

    def teardown(self) -> None:
        try:
            self.run(self.backend.close())
        finally:
            self.runner.close()

    def _other(self, user: User) -> User:
        return self.users[1] if user is self.users[0] else self.users[0]

    # --- rules -------------------------------------------------------------------------

    @rule(
        who=st.integers(0, 1),
        foreign=st.sampled_from([False, False, False, True]),
        which=st.integers(0, 1),
        name=st.sampled_from(["web", "Web", "api", "db"]),
        image=st.sampled_from(["nginx:1.27", "nginx:1.28"]),
        port=st.sampled_from([80, 8080]),
        domain=st.sampled_from([None, "a.example.com", "B.example.com"]),
        key=st.sampled_from([None, None, "k1", "k2"]),
        env=st.sampled_from([{}, {"A": "1"}, {"A": "$(x)\n"}]),
    )
    def deploy(
        self,
        who: int,
        foreign: bool,
        which: int,
        name: str,
        image: str,
        port: int,
        domain: str | None,
        key: str | None,
        env: dict[str, str],
    ) -> None:
        owner = self.users[who]
        server = self.servers[(self._other(owner) if foreign else owner).id][which]
        body = {"server_id": str(server.id), "name": name, "image": image, "port": port}
        body |= {"domain": domain, "env": env}
        cmd = parse_deploy(body, idempotency_key=key)
        if key is not None:
            self.last_keyed = (who, foreign, which, name, image, port, domain, key, env)
        request = (server.id, name, image, port, cmd.domain, tuple(sorted(env.items())))
        self.clock.advance(1)
        expected = self._predict(owner, server, cmd.container_name, cmd.domain, port, key, request)
        event(f"deploy: {expected}")
        try:
            result = self.run(self.deploy_uc(Actor.personal(owner), cmd))
        except (NotFound, Conflict) as exc:
            outcome = type(exc).__name__
        else:
            outcome = "replay" if result.replayed else "new"
        assert outcome == expected, f"deploy: got {outcome}, expected {expected}"
        if outcome != "new":
            if outcome == "replay":
                assert key is not None
                assert result.deployment.id == self.keys[(owner.id, key)][0]
                assert result.deployment.state is self.deps[result.deployment.id].state
            return
        assert not result.replayed
        assert result.deployment.state is DeploymentState.QUEUED
        assert result.installation.status is InstallationStatus.DEPLOYING
        inst = self.installs.get((server.id, cmd.container_name))
        if inst is None:
            inst = _Inst(result.installation.id, owner.id, server.id, None, None)
            self.installs[(server.id, cmd.container_name)] = inst
        assert result.installation.id == inst.id
        for dep_id in inst.deployments:
            if self.deps[dep_id].state is DeploymentState.QUEUED:
                self.deps[dep_id].state = DeploymentState.CANCELED
        # With a domain, the serving container's port stays recorded (its route stays)
        # until the worker switches the route to the new container.
        inst.domain, inst.host_port = cmd.domain, (inst.host_port if cmd.domain else port)
        inst.deployments.append(result.deployment.id)
        self.deps[result.deployment.id] = _Dep(
            result.deployment.id, owner.id, inst.id, DeploymentState.QUEUED
        )
        if key is not None:
            self.keys[(owner.id, key)] = (result.deployment.id, request)

    @precondition(lambda self: self.last_keyed is not None)
    @rule()
    def retry(self) -> None:
        """A client retrying its last request with the same Idempotency-Key."""
        assert self.last_keyed is not None
        self.deploy(*self.last_keyed)

    def _predict(
        self,
        owner: User,
        server: Server,
        container_name: str,
        domain: str | None,
        port: int,
        key: str | None,
        request: tuple[Any, ...],
    ) -> str:
        """The outcome the use case must have: new, replay, NotFound or Conflict."""
        if server.owner_id != owner.id:
            return "NotFound"
        if key is not None and (owner.id, key) in self.keys:
            return "replay" if self.keys[(owner.id, key)][1] == request else "Conflict"
        current = self.installs.get((server.id, container_name))
        if current is not None and any(
            self.deps[d].state is DeploymentState.RUNNING for d in current.deployments
        ):
            return "Conflict"
        for inst in self.installs.values():
            if inst.server != server.id or inst is current:
                continue
            if domain is not None and inst.domain == domain:
                return "Conflict"
            if domain is None and inst.host_port == port:
                return "Conflict"
        return "new"

    def _pick(self, data: st.DataObject, states: tuple[DeploymentState, ...]) -> _Dep:
        # In creation order: sorting random UUIDs would make replays pick differently.
        ids = [d.id for d in self.deps.values() if d.state in states]
        return self.deps[data.draw(st.sampled_from(ids), label="deployment")]

    def _has(self, *states: DeploymentState) -> bool:
        return any(d.state in states for d in self.deps.values())

    @precondition(lambda self: self._has(DeploymentState.QUEUED))
    @rule(data=st.data())
    def start(self, data: st.DataObject) -> None:
        dep = self._pick(data, (DeploymentState.QUEUED,))
        self.clock.advance(1)
        self.run(self.backend.start(dep.owner, dep.id, self.clock))
        dep.state = DeploymentState.RUNNING

    @precondition(lambda self: self._has(*ACTIVE))
    @rule(data=st.data(), state=st.sampled_from(FINAL))
    def finish(self, data: st.DataObject, state: DeploymentState) -> None:
        """The worker finishing a deployment, or a user canceling it, as the table allows."""
        allowed = tuple(s for s in ACTIVE if can_move(s, state))
        assume(self._has(*allowed))
        dep = self._pick(data, allowed)
        self.run(self._finish(dep.owner, dep.id, state))
        dep.state = state

    @precondition(lambda self: self._has(DeploymentState.QUEUED))
    @rule(
        data=st.data(), state=st.sampled_from([DeploymentState.SUCCEEDED, DeploymentState.FAILED])
    )
    def finish_unstarted(self, data: st.DataObject, state: DeploymentState) -> None:
        """A queued deployment never jumps to succeeded or failed: a Conflict, nothing moves."""
        dep = self._pick(data, (DeploymentState.QUEUED,))
        self._expect(Conflict, self._finish(dep.owner, dep.id, state))

    @precondition(lambda self: bool(self.deps))
    @rule(data=st.data(), state=st.sampled_from(FINAL))
    def finish_as_stranger(self, data: st.DataObject, state: DeploymentState) -> None:
        """Another user cannot finish a deployment: it does not exist for them."""
        dep = self._pick(data, tuple(DeploymentState))
        stranger = next(u for u in self.users if u.id != dep.owner)
        self._expect(NotFound, self._finish(stranger.id, dep.id, state))

    @precondition(lambda self: self._has(*FINAL))
    @rule(data=st.data(), state=st.sampled_from(FINAL))
    def finish_again(self, data: st.DataObject, state: DeploymentState) -> None:
        """A final state is final: finishing again is a Conflict."""
        dep = self._pick(data, tuple(FINAL))
        self._expect(Conflict, self._finish(dep.owner, dep.id, state))

    def _expect(self, error: type[Exception], coro: Coroutine[Any, Any, object]) -> str:
        try:
            self.run(coro)
        except error as exc:
            return str(exc)
        raise AssertionError(f"expected {error.__name__}")

    async def _finish(self, owner_id: UUID, dep_id: UUID, state: DeploymentState) -> None:
        at = self.clock.advance(1)
        event = DeploymentEvent(at=at, step=state.value, message=f"Deployment {state.value}.")
        async with self.backend.uow() as uow:
            await uow.deployments.finish(owner_id, dep_id, state, at, None, event)
            await uow.commit()

    @rule(who=st.integers(0, 1), which=st.integers(0, 1))
    def foreign_server_looks_missing(self, who: int, which: int) -> None:
        """Listing another user's server fails exactly like listing a random id."""
        owner = self.users[who]
        theirs = self.servers[self._other(owner).id][which]
        foreign = self._expect(
            NotFound,
            self.list_installations(
                Actor.personal(owner), c.ListInstallations(server_id=theirs.id)
            ),
        )
        assert foreign == self._expect(
            NotFound,
            self.list_installations(Actor.personal(owner), c.ListInstallations(server_id=uuid4())),
        )

    @precondition(lambda self: bool(self.installs))
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        """Remove an installation with nothing running, as the use case does: its queued
        deployment canceled, the installation marked removed (its name, domain and port
        free again), its deployments kept."""
        key = data.draw(st.sampled_from(list(self.installs)))  # creation order: repeatable
        inst = self.installs[key]
        assume(all(self.deps[d].state is not DeploymentState.RUNNING for d in inst.deployments))
        self.clock.advance(1)
        self.run(self._remove(inst))
        for dep_id in inst.deployments:
            if self.deps[dep_id].state is DeploymentState.QUEUED:
                self.deps[dep_id].state = DeploymentState.CANCELED
        del self.installs[key]
        self.removed[inst.id] = inst  # its Idempotency-Keys still replay its deployments
        event("remove")

    async def _remove(self, inst: _Inst) -> None:
        now = self.clock.now()
        async with self.backend.uow() as uow:
            for active in await uow.deployments.active(inst.owner, inst.id):
                await uow.deployments.finish(
                    inst.owner,
                    active.id,
                    DeploymentState.CANCELED,
                    now,
                    "removed",
                    DeploymentEvent(at=now, step="canceled", message="removed"),
                    queued_only=True,
                )
            assert await uow.installations.remove(inst.owner, inst.id, now)
            assert not await uow.installations.remove(inst.owner, inst.id, now)
            await uow.commit()

    @precondition(lambda self: bool(self.deps))
    @rule(data=st.data())
    def foreign_deployment_looks_missing(self, data: st.DataObject) -> None:
        """Reading another user's deployment fails exactly like reading a random id."""
        dep = self._pick(data, tuple(DeploymentState))
        stranger = next(u for u in self.users if u.id != dep.owner)
        foreign = self._expect(
            NotFound,
            self.get_deployment(Actor.personal(stranger), c.GetDeployment(deployment_id=dep.id)),
        )
        assert foreign == self._expect(
            NotFound,
            self.get_deployment(Actor.personal(stranger), c.GetDeployment(deployment_id=uuid4())),
        )

    # --- invariants --------------------------------------------------------------------

    @rule(
        who=st.integers(0, 1),
        host=st.sampled_from(["a.example.com", "b.example.com:5000", "localhost:5000"]),
        password=st.text(min_size=1, max_size=20).filter(lambda p: "\x00" not in p),
    )
    def save_registry(self, who: int, host: str, password: str) -> None:
        """One entry per host per user: a second is a Conflict and changes nothing."""
        owner = self.users[who]
        cmd = AddRegistryCommand(host=host, username=f"u{who}", password=password)
        if (owner.id, host) in self.registries:
            self._expect(Conflict, self.add_registry(Actor.personal(owner), cmd))
            return
        saved = self.run(self.add_registry(Actor.personal(owner), cmd))
        self.registries[(owner.id, host)] = (saved.id, cmd.username, password)

    @rule(data=st.data(), as_stranger=st.booleans())
    def forget_registry(self, data: st.DataObject, as_stranger: bool) -> None:
        """Removed by its owner; another user's removal is NotFound and changes nothing."""
        assume(self.registries)
        key = data.draw(st.sampled_from(list(self.registries)))  # insertion order: replayable
        owner = next(u for u in self.users if u.id == key[0])
        registry_id = self.registries[key][0]
        if as_stranger:
            self._expect(
                NotFound,
                self.remove_registry(
                    Actor.personal(self._other(owner)), c.RemoveRegistry(registry_id=registry_id)
                ),
            )
            return
        self.run(
            self.remove_registry(Actor.personal(owner), c.RemoveRegistry(registry_id=registry_id))
        )
        del self.registries[key]

    @invariant()
    def registries_match_model(self) -> None:
        self.run(self._check_registries())

    async def _check_registries(self) -> None:
        async with self.backend.uow() as uow:
            for owner in self.users:
                mine = sorted((h, v) for (o, h), v in self.registries.items() if o == owner.id)
                listed = await uow.registries.list(owner.id)
                assert [(r.host, r.id, r.username) for r in listed] == [
                    (h, v[0], v[1]) for h, v in mine
                ]
                for host, (_, username, password) in mine:
                    auth = RegistryAuth(host=host, username=username, password=password)
                    assert await uow.registries.auth(owner.id, host) == auth
                    if (self._other(owner).id, host) not in self.registries:
                        assert await uow.registries.auth(self._other(owner).id, host) is None

    @invariant()
    def store_matches_model(self) -> None:
        self.run(self._check())

    async def _check(self) -> None:
        async with self.backend.uow() as uow:
            for owner in self.users:
                other = self._other(owner)
                for server in (s for ss in self.servers.values() for s in ss):
                    listed = await uow.installations.list(owner.id, server.id)
                    if server.owner_id != owner.id:
                        assert listed == [], "another user's installations are visible"
                        continue
                    expected = [i for i in self.installs.values() if i.server == server.id]
                    assert [i.id for i in listed] == [i.id for i in expected]
                    domains = [i.spec.domain for i in listed if i.spec.domain is not None]
                    ports = [i.host_port for i in listed if i.host_port is not None]
                    assert len(domains) == len(set(domains)), "domain used twice on a server"
                    assert len(ports) == len(set(ports)), "host port used twice on a server"
                    for got, want in zip(listed, expected, strict=True):
                        states = [self.deps[d].state for d in want.deployments]
                        assert got.status is _status(states), (got.status, states)
                        assert got.last_deployment is not None
                        assert got.last_deployment.id == want.deployments[-1]
                        assert got.last_deployment.state is states[-1]
                        assert (got.spec.domain, got.host_port) == (want.domain, want.host_port)
                        active = await uow.deployments.active(owner.id, got.id)
                        assert len(active) <= 1, "two active deployments of one installation"
                        assert [d.id for d in active] == [
                            d for d in want.deployments if self.deps[d].state in ACTIVE
                        ]
                        assert await uow.installations.get(other.id, got.id) is None
                        assert await uow.deployments.active(other.id, got.id) == []
            for inst in self.removed.values():
                gone = await uow.installations.get(inst.owner, inst.id)
                assert gone is not None, "a removed installation's record is gone"
                assert gone.status is InstallationStatus.REMOVED
                assert gone.host_port is None
                everything = await uow.installations.list(
                    inst.owner, inst.server, include_removed=True
                )
                assert inst.id in [i.id for i in everything]
                kept = await uow.deployments.of_installation(inst.owner, inst.id, 1000)
                assert [d.id for d in kept] == inst.deployments[::-1]
            for dep in self.deps.values():
                got_dep = await uow.deployments.get(dep.owner, dep.id)
                assert got_dep is not None
                assert got_dep.state is dep.state
                assert (got_dep.finished_at is None) == (dep.state in ACTIVE)
                stranger = next(u for u in self.users if u.id != dep.owner)
                assert await uow.deployments.get(stranger.id, dep.id) is None
