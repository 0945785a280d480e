"""The dashboard's storage against a real, migrated database of each test's own (an SQLite
file, and a database on the PostgreSQL server of ``BERTH_TEST_POSTGRES_URL``): web
sessions, invitations, removing a server with everything under it, and a server's newest
deployments."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import uuid4

import pytest
from berth.adapters.ratelimit import MemoryRateLimiter
from berth.adapters.secrets import Argon2Hasher, KeyBox
from berth.adapters.sql import SqlUnitOfWorkFactory
from berth.core import commands as c
from berth.core.bus import MessageBus
from berth.core.commands import parse_create_server, parse_deploy
from berth.core.errors import Conflict, Forbidden, NotFound, WriteConflict
from berth.core.limits import LoginThrottle
from berth.core.models import ContainerSnapshot, Invite, User
from berth.core.results import NewSession
from berth.core.unit_of_work import EventHandlers
from berth.core.use_cases.sessions import SESSION_IDLE, session_hash
from berth.entrypoints.bootstrap import Adapters, build_bus
from harness import HOST_KEY
from infra import DATABASES, migrated_database
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

PASSWORD = "correct horse battery staple"

#: A server created with its host key is enrolled: it takes deploys.
ENROLLED = {"address": "127.0.0.1", "ssh_port": 1, "host_keys": [HOST_KEY]}


class Clock:
    def __init__(self) -> None:
        self.at = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)

    def now(self) -> datetime:
        return self.at


class Keys:
    def generate(self, comment: str) -> tuple[bytes, str]:
        return b"private", f"ssh-ed25519 AAAAfake {comment}"


@pytest.fixture(params=DATABASES)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with migrated_database(request.param, tmp_path, "berth_dashboard") as url:
        yield url


@pytest.fixture
def clock() -> Clock:
    return Clock()


@dataclass(frozen=True)
class Services:
    """The bus over the SQL store, and the store's unit of work."""

    bus: MessageBus
    uow: SqlUnitOfWorkFactory


@pytest.fixture
def services(engine: AsyncEngine, clock: Clock) -> Services:
    box = KeyBox(os.urandom(32))
    events = EventHandlers()
    uow = SqlUnitOfWorkFactory(engine, box, events)
    adapters = Adapters(
        uow=uow,
        clock=clock,
        hasher=Argon2Hasher(),
        box=box,
        keys=Keys(),
        throttle=LoginThrottle(MemoryRateLimiter()),
    )
    return Services(build_bus(adapters, events=events), uow)


async def user(services: Services, email: str) -> User:
    """A new user of ``email``, through the bus."""
    return await services.bus.handle(c.CreateUser(email=email, password=PASSWORD))


async def sign_up_first(services: Services, email: str) -> NewSession:
    """The first account's sign-up, with the setup code ``berth serve`` would print."""
    code = await services.bus.handle(c.IssueSetupCode())
    return await services.bus.handle(c.SignUp(email=email, password=PASSWORD, invite=code))


async def _count(engine: AsyncEngine, table: str) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one())


class TestSessions:
    async def test_sign_up_sign_in_resolve_sign_out(
        self, services: Services, engine: AsyncEngine
    ) -> None:
        """A session round-trips through SQL and stores only the id's hash."""
        email = "ada@example.com"
        first = await sign_up_first(services, email)
        again = await services.bus.handle(
            c.SignIn(email=email, password=PASSWORD, address="192.0.2.1")
        )
        found = await services.bus.handle(c.ResolveSession(session_id=again.session_id))
        assert found is not None
        assert found[0].email == email
        assert found[1].csrf_token == again.session.csrf_token
        async with engine.connect() as conn:
            rows = (await conn.execute(text("SELECT id_hash FROM web_session"))).scalars().all()
        assert sorted(rows) == sorted([first.session.id_hash, again.session.id_hash])
        assert session_hash(again.session_id) in rows
        await services.bus.handle(c.SignOut(session_id=again.session_id))
        assert await services.bus.handle(c.ResolveSession(session_id=again.session_id)) is None
        assert await services.bus.handle(c.ResolveSession(session_id=first.session_id)) is not None

    async def test_expired_sessions_are_refused_and_purged(
        self, services: Services, engine: AsyncEngine, clock: Clock
    ) -> None:
        """An idle session is refused and its row deleted; expired ones go at sign-in."""
        email = "ada@example.com"
        first = await sign_up_first(services, email)
        second = await services.bus.handle(
            c.SignIn(email=email, password=PASSWORD, address="192.0.2.1")
        )
        clock.at += SESSION_IDLE
        assert await services.bus.handle(c.ResolveSession(session_id=first.session_id)) is None
        assert await _count(engine, "web_session") == 1
        await services.bus.handle(c.SignIn(email=email, password=PASSWORD, address="192.0.2.1"))
        assert await _count(engine, "web_session") == 1
        assert await services.bus.handle(c.ResolveSession(session_id=second.session_id)) is None

    async def test_use_moves_the_idle_expiry(self, services: Services, clock: Clock) -> None:
        """A session used within its idle time lives on past the first expiry."""
        started = await sign_up_first(services, "ada@example.com")
        clock.at += SESSION_IDLE - timedelta(hours=1)
        assert (
            await services.bus.handle(c.ResolveSession(session_id=started.session_id)) is not None
        )
        clock.at += timedelta(hours=2)
        assert (
            await services.bus.handle(c.ResolveSession(session_id=started.session_id)) is not None
        )


class TestInvites:
    async def test_an_invitation_works_once(self, services: Services) -> None:
        """Sign-up with an invitation succeeds once; the second use is refused."""
        await sign_up_first(services, "first@example.com")
        invite = await services.bus.handle(c.CreateInvite())
        await services.bus.handle(
            c.SignUp(email="second@example.com", password=PASSWORD, invite=invite)
        )
        with pytest.raises(Forbidden):
            await services.bus.handle(
                c.SignUp(email="third@example.com", password=PASSWORD, invite=invite)
            )

    async def test_a_setup_code_admits_the_first_account_once(
        self, services: Services, engine: AsyncEngine
    ) -> None:
        """The first account's setup code is stored as a hash and works once; none is
        issued once an account exists."""
        code = await services.bus.handle(c.IssueSetupCode())
        assert code is not None
        async with engine.connect() as conn:
            stored = (await conn.execute(text("SELECT token_hash FROM invite"))).scalars().all()
        assert code not in stored
        assert len(stored) == 1
        with pytest.raises(Forbidden):
            await services.bus.handle(c.SignUp(email="first@example.com", password=PASSWORD))
        await services.bus.handle(
            c.SignUp(email="first@example.com", password=PASSWORD, invite=code)
        )
        with pytest.raises(Forbidden):
            await services.bus.handle(
                c.SignUp(email="second@example.com", password=PASSWORD, invite=code)
            )
        assert await services.bus.handle(c.IssueSetupCode()) is None

    async def test_use_is_atomic(self, services: Services, clock: Clock) -> None:
        """Marking an invitation used succeeds exactly once."""
        async with services.uow() as uow:
            await uow.invites.add(
                Invite(
                    token_hash="h" * 64,
                    email=None,
                    created_at=clock.now(),
                    expires_at=clock.now() + timedelta(days=1),
                )
            )
            assert await uow.invites.use("h" * 64, clock.now())
            assert not await uow.invites.use("h" * 64, clock.now())
            assert not await uow.invites.use("x" * 64, clock.now())
            found = await uow.invites.get("h" * 64)
            assert found is not None
            assert found.used_at == clock.now()


class TestServers:
    async def test_deleting_a_server_removes_everything_under_it(
        self, services: Services, engine: AsyncEngine, clock: Clock
    ) -> None:
        """Installations, deployments, events and the snapshot go with the server; another
        owner's call deletes nothing."""
        owner = await user(services, "owner@example.com")
        stranger = await user(services, "stranger@example.com")
        server = (
            await services.bus.handle(parse_create_server(ENROLLED | {"name": "s"}), owner)
        ).server
        kept = (
            await services.bus.handle(parse_create_server(ENROLLED | {"name": "t"}), owner)
        ).server
        for target in (server, kept):
            body = {"server_id": str(target.id), "name": "web", "image": "nginx:1.27"}
            await services.bus.handle(parse_deploy(body), owner)
            async with services.uow() as uow:
                snapshot = ContainerSnapshot(
                    server_id=target.id, observed_at=clock.now(), containers=()
                )
                await uow.servers.save_snapshot(owner.id, snapshot)
                await uow.commit()
        with pytest.raises(NotFound):
            await services.bus.handle(c.DeleteServer(server_id=server.id), stranger)
        await services.bus.handle(c.DeleteServer(server_id=server.id), owner)
        assert [s.id for s in await services.bus.handle(c.ListServers(), owner)] == [kept.id]
        for table in ("installation", "deployment", "container_snapshot"):
            assert await _count(engine, table) == 1, table
        # the kept deployment's two: queued, and "the server is offline … waits for it"
        assert await _count(engine, "deployment_event") == 2
        with pytest.raises(NotFound):
            await services.bus.handle(c.DeleteServer(server_id=server.id), owner)

    async def test_a_server_with_a_running_deployment_stays(
        self, services: Services, engine: AsyncEngine
    ) -> None:
        """409 while a deployment on it runs -- from the use case, and from the store itself
        (a claim may land after the use case looked); nothing is removed."""
        owner = await user(services, "owner@example.com")
        server = (
            await services.bus.handle(parse_create_server(ENROLLED | {"name": "s"}), owner)
        ).server
        body = {"server_id": str(server.id), "name": "web", "image": "nginx:1.27"}
        await services.bus.handle(parse_deploy(body), owner)
        async with engine.begin() as conn:  # what a worker's claim does to it
            await conn.execute(text("UPDATE deployment SET state = 'running'"))
        with pytest.raises(Conflict, match="running"):
            await services.bus.handle(c.DeleteServer(server_id=server.id), owner)
        async with services.uow() as uow:
            with pytest.raises(WriteConflict, match="running"):
                await uow.servers.delete(owner.id, server.id)
        assert [s.id for s in await services.bus.handle(c.ListServers(), owner)] == [server.id]
        for table in ("installation", "deployment"):
            assert await _count(engine, table) == 1, table

    async def test_recent_deployments_newest_first(self, services: Services, clock: Clock) -> None:
        """A server's deployments come newest first, limited, with their events."""
        owner = await user(services, "owner@example.com")
        stranger = await user(services, "stranger@example.com")
        server = (
            await services.bus.handle(parse_create_server(ENROLLED | {"name": "s"}), owner)
        ).server
        ids = []
        for port in (8001, 8002, 8003):
            clock.at += timedelta(seconds=1)
            body = {"server_id": str(server.id), "name": f"a-{port}", "image": "x:1", "port": port}
            ids.append((await services.bus.handle(parse_deploy(body), owner)).deployment.id)
        found = await services.bus.handle(c.ListDeployments(server_id=server.id, limit=2), owner)
        assert [d.id for d in found] == [ids[2], ids[1]]
        assert all(d.events for d in found)
        with pytest.raises(NotFound):
            await services.bus.handle(c.ListDeployments(server_id=server.id), stranger)
        async with services.uow() as uow:
            assert await uow.deployments.recent(stranger.id, server.id, 10) == []
            assert await uow.deployments.recent(owner.id, uuid4(), 10) == []
