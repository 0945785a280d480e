"""The SQL store's read cache (``berth.adapters.sql.cache``): exact, never stale.

The hot reads -- a token with its user, an owner's server, the installations
on it -- are served from memory while nothing has been committed since they
were read. These tests hold it to that from every side a commit can come from:
another unit of work, another engine (as another process has), another process
(the ``berth`` CLI while a berth is open), and they check that the ownership
rule holds through the cache, that a transaction's uncommitted writes never
reach it, and that it is off where the database offers no data version.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import berth
import builders
import pytest
from berth.adapters.secrets import KeyBox
from berth.adapters.sql import SqlFleet, SqlUnitOfWorkFactory, create_engine, sqlite_url
from berth.adapters.sql import server_rows as server_rows_module
from berth.adapters.sql.cache import MISSING, ReadCache, read_cache
from berth.adapters.sql.marks import ACCESS, HOUSEKEEPING
from berth.adapters.sql.rows import _SERVER_COLUMNS, _server_to_core, servers_t, users_t
from berth.core import commands as c
from berth.core import tokens
from berth.core.access import Role, TokenScope
from berth.core.errors import Unauthorized
from berth.core.models import (
    ApiToken,
    Installation,
    Server,
    ServerFacts,
    ServerObservation,
    ServerStatus,
    User,
)
from berth.core.teams import AccessToken, Member, Team
from berth.core.use_cases import Authenticate
from harness import HOST_KEY, PASSWORD, cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from infra import migrated_database
from sql_support import KEY, T0, engine_on, statements_sent
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine


class FixedClock:
    """Now is ``T0``: tokens used at ``T0`` are not touched again (no write per check)."""

    def now(self) -> datetime:
        return T0


# --- fixtures and builders -------------------------------------------------------------------


@pytest.fixture
def db_url(tmp_path: Path) -> Iterator[str]:
    with migrated_database("sqlite", tmp_path, "berth_cache") as url:
        yield url


@pytest.fixture
async def other_engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    """A second engine on the same file: its own pool, as another process has."""
    async with engine_on(db_url) as engine:
        yield engine


@pytest.fixture
def uow(engine: AsyncEngine) -> SqlUnitOfWorkFactory:
    return SqlUnitOfWorkFactory(engine, KeyBox(KEY))


@pytest.fixture
def other_uow(other_engine: AsyncEngine) -> SqlUnitOfWorkFactory:
    return SqlUnitOfWorkFactory(other_engine, KeyBox(KEY))


def a_token(user: User) -> tuple[str, ApiToken]:
    clear = tokens.generate()
    return clear, ApiToken(
        user_id=user.id,
        token_hash=tokens.hash_token(clear),
        prefix=tokens.display_prefix(clear),
        created_at=T0,
        last_used_at=T0,
    )


def authenticator(uow: SqlUnitOfWorkFactory) -> Callable[[str], Awaitable[User]]:
    """The ``Authenticate`` use case over ``uow``, called with a token: the token's user."""
    use_case = Authenticate(uow, FixedClock())

    async def authenticate(token: str) -> User:
        return (await use_case(None, c.Authenticate(token=token))).user

    return authenticate


async def add_user(uow: SqlUnitOfWorkFactory) -> tuple[User, str]:
    """A user and its token (in clear)."""
    user = User(
        id=uuid4(),
        email=f"cache-{uuid4().hex[:10]}@example.com",
        password_hash="argon2$x",
        created_at=T0,
    )
    clear, token = a_token(user)
    async with uow() as tx:
        await tx.users.add(user)
        await tx.tokens.replace(token)
        await tx.commit()
    return user, clear


async def replace_token(uow: SqlUnitOfWorkFactory, user: User) -> str:
    clear, token = a_token(user)
    async with uow() as tx:
        await tx.tokens.replace(token)
        await tx.commit()
    return clear


async def add_server(uow: SqlUnitOfWorkFactory, owner: User, **changes: Any) -> Server:
    enrolled = {"status": ServerStatus.OFFLINE}  # it takes deploys
    server = builders.a_server(owner_id=owner.id, **(enrolled | changes))
    async with uow() as tx:
        await tx.servers.add(server, None)
        await tx.commit()
    return server


def an_installation(server: Server, n: int = 0) -> Installation:
    when = T0 + timedelta(seconds=n)
    return builders.an_installation(server, created_at=when, updated_at=when)


async def save(uow: SqlUnitOfWorkFactory, owner: User, installation: Installation) -> None:
    async with uow() as tx:
        await tx.installations.save(owner.id, installation, {})
        await tx.commit()


async def listed(uow: SqlUnitOfWorkFactory, owner: User, server: Server) -> list[Installation]:
    async with uow() as tx:
        return await tx.installations.list(owner.id, server.id)


async def servers_listed(uow: SqlUnitOfWorkFactory, owner: User) -> list[Server]:
    async with uow() as tx:
        return await tx.servers.list(owner.id)


async def converted_afresh(engine: AsyncEngine, owner: User) -> list[Server]:
    """The owner's servers read with every column converted, oldest first (no memory)."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(*_SERVER_COLUMNS)
            .where(servers_t.c.owner_id == owner.id)
            .order_by(servers_t.c.created_at, servers_t.c.id)
        )
        return [_server_to_core(row) for row in rows]


async def server_of(uow: SqlUnitOfWorkFactory, owner: User, server: Server) -> Server | None:
    async with uow() as tx:
        return await tx.servers.get(owner.id, server.id)


async def found(uow: SqlUnitOfWorkFactory, clear: str) -> tuple[User, ApiToken] | None:
    async with uow() as tx:
        return await tx.tokens.find(tokens.hash_token(clear))


async def add_team(uow: SqlUnitOfWorkFactory, owner: User, member: User) -> UUID:
    """A shared team of ``owner``'s with ``member`` a deployer in it: its id."""
    team = Team(id=uuid4(), name=f"team-{uuid4().hex[:6]}", created_at=T0)
    async with uow() as tx:
        await tx.teams.add(team, owner.id)
        joined = Member(
            team_id=team.id, user_id=member.id, email=member.email, role=Role.DEPLOYER, joined_at=T0
        )
        assert await tx.teams.add_member(joined)
        await tx.commit()
    return team.id


async def add_named_token(
    uow: SqlUnitOfWorkFactory, user: User, *, team: UUID | None = None
) -> tuple[str, AccessToken]:
    """A named ``deploy`` token of ``user``'s in ``team`` (their personal team by
    default): its secret and itself."""
    clear = tokens.generate()
    named = AccessToken(
        id=uuid4(),
        user_id=user.id,
        team_id=user.id if team is None else team,
        name=f"agent-{uuid4().hex[:6]}",
        scopes=frozenset({TokenScope.READ, TokenScope.DEPLOY}),
        token_hash=tokens.hash_token(clear),
        prefix=tokens.display_prefix(clear),
        created_at=T0,
        last_used_at=T0,
    )
    async with uow() as tx:
        await tx.access_tokens.add(named)
        await tx.commit()
    return clear, named


async def found_named(
    uow: SqlUnitOfWorkFactory, named: tuple[str, AccessToken]
) -> tuple[User, AccessToken, Role] | None:
    async with uow() as tx:
        return await tx.access_tokens.find(tokens.hash_token(named[0]))


# --- the cache serves -------------------------------------------------------------------------


class TestServedFromMemory:
    async def test_repeated_hot_reads_send_no_statement(
        self, uow: SqlUnitOfWorkFactory, engine: AsyncEngine
    ) -> None:
        """A token, a server and its installations, read again with no commit: no SQL at all."""
        owner, clear = await add_user(uow)
        server = await add_server(uow, owner)
        await save(uow, owner, an_installation(server))
        first = (await found(uow, clear), await server_of(uow, owner, server))
        first_list = await listed(uow, owner, server)
        with statements_sent(engine) as sent:
            again = (await found(uow, clear), await server_of(uow, owner, server))
            again_list = await listed(uow, owner, server)
        assert sent == []
        assert again == first
        assert again_list == first_list
        assert len(again_list) == 1

    async def test_authenticating_twice_sends_no_statement(
        self, uow: SqlUnitOfWorkFactory, engine: AsyncEngine
    ) -> None:
        """Authenticate (token used within the minute) is answered from memory."""
        owner, clear = await add_user(uow)
        authenticate = authenticator(uow)
        assert await authenticate(clear) == owner
        with statements_sent(engine) as sent:
            assert await authenticate(clear) == owner
        assert sent == []

    async def test_a_named_token_authenticated_again_sends_no_statement(
        self, uow: SqlUnitOfWorkFactory, engine: AsyncEngine
    ) -> None:
        """A named token is looked for among the main tokens first, and that miss is not
        cached: once its own look-up is, that first query is not sent either (it was, at
        every request: 18 % of ``api_bench``'s throughput with a named token)."""
        owner, _ = await add_user(uow)
        named = await add_named_token(uow, owner)
        use_case = Authenticate(uow, FixedClock())
        first = await use_case(None, c.Authenticate(token=named[0]))
        with statements_sent(engine) as sent:
            again = await use_case(None, c.Authenticate(token=named[0]))
        assert sent == []
        assert again == first
        assert again.token_id == named[1].id

    async def test_a_unit_of_work_reads_the_data_version_once(
        self, uow: SqlUnitOfWorkFactory, engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A token, a server and its installations read in one unit of work look at the
        database's data version once, not once per read (``GET /install`` did three)."""
        owner, clear = await add_user(uow)
        server = await add_server(uow, owner)
        await save(uow, owner, an_installation(server))
        cache = read_cache(engine)
        assert cache is not None
        probe = cache._version_of_db
        asked: list[object] = []

        def counted() -> object:
            asked.append(probe())
            return asked[-1]

        monkeypatch.setattr(cache, "_version_of_db", counted)
        for _ in range(2):  # a miss each, then every read from memory
            async with uow() as tx:
                assert await tx.tokens.find(tokens.hash_token(clear)) is not None
                assert await tx.servers.get(owner.id, server.id) == server
                assert len(await tx.installations.list(owner.id, server.id)) == 1
        assert len(asked) == 2

    async def test_a_listing_is_a_fresh_list_each_time(self, uow: SqlUnitOfWorkFactory) -> None:
        """Callers get their own list: changing one does not change what the next gets."""
        owner, _ = await add_user(uow)
        server = await add_server(uow, owner)
        await save(uow, owner, an_installation(server))
        first = await listed(uow, owner, server)
        first.clear()
        assert len(await listed(uow, owner, server)) == 1

    async def test_the_servers_stay_cached_while_other_things_commit(
        self, uow: SqlUnitOfWorkFactory, other_uow: SqlUnitOfWorkFactory, engine: AsyncEngine
    ) -> None:
        """A commit that changes no server (an app saved, here through another engine, as a
        deployment's steps are) keeps the servers list and a server cached."""
        owner, _ = await add_user(uow)
        server = await add_server(uow, owner)
        before = (await servers_listed(uow, owner), await server_of(uow, owner, server))
        await save(other_uow, owner, an_installation(server))
        with statements_sent(engine) as sent:
            after = (await servers_listed(uow, owner), await server_of(uow, owner, server))
        assert after == before
        assert not any("FROM server" in statement for statement in sent), sent

    async def test_a_server_changed_elsewhere_is_read_again(
        self, uow: SqlUnitOfWorkFactory, other_engine: AsyncEngine
    ) -> None:
        """A server's status written by another engine's fleet (another process's monitor)
        drops the cached servers at once: the list shows it."""
        owner, _ = await add_user(uow)
        server = await add_server(uow, owner)
        assert [s.status for s in await servers_listed(uow, owner)] == [server.status]
        fleet = SqlFleet(other_engine, KeyBox(os.urandom(32)))
        seen = ServerObservation(
            server_id=server.id, at=datetime.now(UTC), status=ServerStatus.ONLINE
        )
        await fleet.record([seen])
        assert [s.status for s in await servers_listed(uow, owner)] == [ServerStatus.ONLINE]
        assert (await server_of(uow, owner, server)).status is ServerStatus.ONLINE  # type: ignore[union-attr]

    async def test_a_workers_heartbeat_keeps_the_cache(
        self, uow: SqlUnitOfWorkFactory, other_engine: AsyncEngine, engine: AsyncEngine
    ) -> None:
        """A worker's beat (every 2 s, here another process's) commits to housekeeping tables
        only: the token, the server and its apps stay served from memory."""
        owner, clear = await add_user(uow)
        server = await add_server(uow, owner)
        await save(uow, owner, an_installation(server))
        before = (await found(uow, clear), await listed(uow, owner, server))
        fleet = SqlFleet(other_engine, KeyBox(os.urandom(32)))
        now = datetime.now(UTC)
        await fleet.heartbeat("worker-elsewhere", now, now + timedelta(seconds=15))
        with statements_sent(engine) as sent:
            after = (await found(uow, clear), await listed(uow, owner, server))
        assert sent == []
        assert after == before

    async def test_tokens_stay_cached_while_deployments_commit(
        self, uow: SqlUnitOfWorkFactory, other_uow: SqlUnitOfWorkFactory, engine: AsyncEngine
    ) -> None:
        """A commit that changes no account, token or membership (an app saved through
        another engine, as a deployment's steps are; a server's status) keeps both kinds
        of token look-up in memory: with twenty deploys committing, every request had
        gone to the database to authenticate (``fleet_bench``)."""
        owner, clear = await add_user(uow)
        named = await add_named_token(uow, owner)
        server = await add_server(uow, owner)
        before = (await found(uow, clear), await found_named(uow, named))
        assert before[1] is not None
        await save(other_uow, owner, an_installation(server))
        async with other_uow() as tx:
            await tx.servers.change(
                owner.id,
                server.id,
                name="renamed",
                address="203.0.113.9",
                ssh_port=22,
                recheck=False,
            )
            await tx.commit()
        with statements_sent(engine) as sent:
            after = (await found(uow, clear), await found_named(uow, named))
        assert sent == []
        assert after == before

    async def test_concurrent_misses_read_once(
        self, uow: SqlUnitOfWorkFactory, other_uow: SqlUnitOfWorkFactory, engine: AsyncEngine
    ) -> None:
        """Sixteen requests in flight that miss the same list after a commit send its query
        once, and all get the committed state."""
        owner, _ = await add_user(uow)
        server = await add_server(uow, owner)
        await listed(uow, owner, server)
        installation = an_installation(server)
        await save(other_uow, owner, installation)
        with statements_sent(engine) as sent:
            lists = await asyncio.gather(*(listed(uow, owner, server) for _ in range(16)))
        assert [[i.id for i in found] for found in lists] == [[installation.id]] * 16
        assert sum("FROM installation" in statement for statement in sent) == 1, sent

    def test_every_table_but_housekeeping_counts_in_the_data_mark(self, db_url: str) -> None:
        """Each table a cached read may read has its three ``data`` triggers after migrating;
        the housekeeping tables have none."""
        path = db_url.split("///", 1)[1]
        with sqlite3.connect(path) as db:
            tables = {
                name
                for (name,) in db.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' "
                    "AND name NOT LIKE 'sqlite_%'"
                )
            }
            triggers = {
                name
                for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
            }
        assert {"installation", "access_token", "server", "worker"} <= tables
        assert tables >= ACCESS
        for table in tables:
            mine = {f"tr_{table}_data_{when}" for when in ("insert", "update", "delete")}
            if table in HOUSEKEEPING:
                assert not mine & triggers, table
            else:
                assert mine <= triggers, table
            access = {f"tr_{table}_access_{when}" for when in ("insert", "update", "delete")}
            if table in ACCESS:
                assert access <= triggers, table
            else:
                assert not access & triggers, table


# --- any commit, from anywhere, invalidates ---------------------------------------------------


class TestNeverStale:
    async def test_a_commit_through_another_unit_of_work(self, uow: SqlUnitOfWorkFactory) -> None:
        """A deploy saved through another unit of work of the same engine is listed at once."""
        owner, _ = await add_user(uow)
        server = await add_server(uow, owner)
        assert await listed(uow, owner, server) == []
        installation = an_installation(server)
        await save(uow, owner, installation)
        assert [i.id for i in await listed(uow, owner, server)] == [installation.id]

    async def test_a_commit_through_another_engine(
        self, uow: SqlUnitOfWorkFactory, other_uow: SqlUnitOfWorkFactory
    ) -> None:
        """Writes through another engine (another pool, as another process) show at once."""
        owner, old = await add_user(uow)
        server = await add_server(uow, owner)
        assert await found(uow, old) is not None
        assert await listed(uow, owner, server) == []
        assert (await server_of(uow, owner, server)) == server

        new = await replace_token(other_uow, owner)
        assert await found(uow, old) is None
        assert await found(uow, new) is not None

        installation = an_installation(server)
        await save(other_uow, owner, installation)
        assert [i.id for i in await listed(uow, owner, server)] == [installation.id]

        async with other_uow() as tx:
            await tx.servers.delete(owner.id, server.id)
            await tx.commit()
        assert await server_of(uow, owner, server) is None
        assert await listed(uow, owner, server) == []

    async def test_a_token_replaced_in_another_process(
        self, uow: SqlUnitOfWorkFactory, db_url: str
    ) -> None:
        """A token replaced by another process is refused at once, the new one accepted."""
        owner, old = await add_user(uow)
        authenticate = authenticator(uow)
        assert await authenticate(old) == owner
        assert await authenticate(old) == owner  # now from memory
        new = _replace_token_in_another_process(db_url, owner)
        with pytest.raises(Unauthorized):
            await authenticate(old)
        assert await authenticate(new) == owner

    @pytest.mark.parametrize("change", ["revoked", "member removed", "role changed", "user"])
    async def test_a_named_token_changed_through_another_engine(
        self,
        uow: SqlUnitOfWorkFactory,
        other_uow: SqlUnitOfWorkFactory,
        other_engine: AsyncEngine,
        change: str,
    ) -> None:
        """Each table a token's look-up reads (``marks.ACCESS``), changed by another
        process, drops the cached look-up at once: a revoked token or a removed member's
        is refused, a new role is seen, a changed account is read again."""
        owner, _ = await add_user(uow)
        member, _ = await add_user(uow)
        team = await add_team(uow, owner, member)
        named = await add_named_token(uow, member, team=team)
        assert await found_named(uow, named) is not None  # cached now
        if change == "user":  # no use case changes a password hash in place: SQL does
            async with other_engine.begin() as conn:
                users = users_t.c
                changed = {"password_hash": "argon2$changed"}
                await conn.execute(update(users_t).where(users.id == member.id).values(changed))
        async with other_uow() as tx:
            if change == "revoked":
                assert await tx.access_tokens.revoke(member.id, named[1].id) is not None
            elif change == "member removed":
                assert await tx.teams.remove_member(team, member.id)
            elif change == "role changed":
                assert await tx.teams.set_role(team, member.id, Role.VIEWER)
            await tx.commit()
        again = await found_named(uow, named)
        if change in ("revoked", "member removed"):
            assert again is None
            return
        assert again is not None
        if change == "role changed":
            assert again[2] is Role.VIEWER
        else:
            assert again[0].password_hash == "argon2$changed"

    async def test_berth_token_regenerate_while_open(self, tmp_path: Path) -> None:
        """``berth token regenerate`` (another process) revokes the token at once."""
        data = tmp_path / "data"
        email = f"cache-{uuid.uuid4().hex[:10]}@example.com"
        async with berth.open(data) as app:
            user = await app.create_user(email, PASSWORD)
            old = await app.regenerate_token(user)
            assert (await app.authenticate(old)).user == user
            assert (await app.authenticate(old)).user == user
            new = cli(data, "token", "regenerate", "--email", email).stdout.strip()
            with pytest.raises(Unauthorized):
                await app.authenticate(old)
            assert (await app.authenticate(new)).user == user

    async def test_a_deploy_through_another_berth(self, tmp_path: Path) -> None:
        """A deploy through another berth on the same data dir is listed at once."""
        data = tmp_path / "data"
        async with berth.open(data) as app, berth.open(data) as other:
            user = await app.create_user(f"cache-{uuid.uuid4().hex[:10]}@example.com", PASSWORD)
            server = (
                await app.create_server(
                    user, name="web-1", address="127.0.0.1", ssh_port=1, host_keys=[HOST_KEY]
                )
            ).server
            assert (await app.installations(user, server.id)).installations == []
            await other.deploy(user, server_id=server.id, name="shop", image="shop:1.0")
            names = [i.name for i in (await app.installations(user, server.id)).installations]
            assert names == ["shop"]

    async def test_after_the_engine_is_disposed(
        self, uow: SqlUnitOfWorkFactory, other_uow: SqlUnitOfWorkFactory, engine: AsyncEngine
    ) -> None:
        """Disposing the engine closes the version probe; reopened, it still sees commits."""
        owner, old = await add_user(uow)
        assert await found(uow, old) is not None
        await engine.dispose()
        new = await replace_token(other_uow, owner)
        assert await found(uow, old) is None
        assert await found(uow, new) is not None


# --- what never reaches the cache -------------------------------------------------------------


class TestAListReadAgain:
    """After a commit that changed some servers the list is read again, converting only
    those (``server_rows``): a monitor's pass changes a few of a thousand."""

    @pytest.fixture(autouse=True)
    def own_server_rows(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The process keeps one ``ServerRows`` per dialect, which forgets everything once
        it holds ``MAX_SERVERS``: other tests of this process may have filled it. These
        tests start from one of their own."""
        monkeypatch.setattr(server_rows_module, "_by_dialect", {})

    async def test_the_unchanged_servers_are_the_same_objects(
        self, uow: SqlUnitOfWorkFactory, other_engine: AsyncEngine
    ) -> None:
        """One server of three changed by another process's monitor: the list shows it as
        it is now, and gives the other two back as the very objects read before (their
        wire form is then reused too)."""
        owner, _ = await add_user(uow)
        servers = [await add_server(uow, owner) for _ in range(3)]
        before = await servers_listed(uow, owner)
        fleet = SqlFleet(other_engine, KeyBox(os.urandom(32)))
        seen = ServerObservation(
            server_id=servers[1].id, at=datetime.now(UTC), status=ServerStatus.ONLINE
        )
        await fleet.record([seen])
        after = await servers_listed(uow, owner)
        assert [s.id for s in after] == [s.id for s in before]
        # Listed by creation time, then id: three made at once come in the order of their
        # ids (random), so each is found by its id (seen in CI: compared by position).
        was = {s.id: s for s in before}
        now = {s.id: s for s in after}
        assert now[servers[0].id] is was[servers[0].id]
        assert now[servers[2].id] is was[servers[2].id]
        assert now[servers[1].id].status is ServerStatus.ONLINE

    async def test_what_is_listed_is_what_the_rows_hold(
        self, uow: SqlUnitOfWorkFactory, other_uow: SqlUnitOfWorkFactory, engine: AsyncEngine
    ) -> None:
        """Whatever changed between two reads -- a pass's stand-by (``checked_at`` only), a
        status, a name, a server removed, one added -- the list equals the rows converted
        afresh, in order."""
        owner, _ = await add_user(uow)
        servers = [
            await add_server(uow, owner, created_at=T0 + timedelta(seconds=n)) for n in range(4)
        ]
        await servers_listed(uow, owner)
        fleet = SqlFleet(engine, KeyBox(os.urandom(32)))
        await fleet.claim_servers("w1", datetime.now(UTC), 10)
        await fleet.stood_by("w1", [s.id for s in servers], datetime.now(UTC))
        await fleet.record(
            [
                ServerObservation(
                    server_id=servers[0].id, at=datetime.now(UTC), status=ServerStatus.ONLINE
                )
            ]
        )
        async with other_uow() as tx:
            await tx.servers.change(
                owner.id,
                servers[2].id,
                name="renamed",
                address="203.0.113.9",
                ssh_port=22,
                recheck=False,
            )
            assert await tx.servers.delete(owner.id, servers[3].id)
            await tx.commit()
        await add_server(uow, owner, created_at=T0 + timedelta(seconds=9))
        listed_now = await servers_listed(uow, owner)
        afresh = await converted_afresh(engine, owner)
        assert listed_now == afresh
        assert [s.checked_at is not None for s in listed_now] == [True, True, True, False]
        assert listed_now[2].name == "renamed"

    @settings(
        max_examples=25,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(
        names=st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=4),
        detail=st.none() | st.text(max_size=60),
        os_name=st.none() | st.text(max_size=20),
        memory=st.none() | st.integers(min_value=0, max_value=2**62),
        keys=st.lists(st.text(min_size=1, max_size=30), max_size=2),
    )
    async def test_any_text_reads_back_as_stored(
        self,
        uow: SqlUnitOfWorkFactory,
        engine: AsyncEngine,
        names: list[str],
        detail: str | None,
        os_name: str | None,
        memory: int | None,
        keys: list[str],
    ) -> None:
        """The list comes from SQLite as one JSON document (``rows_statement``): whatever
        a server's text holds -- quotes, backslashes, newlines, NUL, any script -- and
        however large its numbers, it is listed as its row converted afresh, in order
        (servers made at the same moment: by id)."""
        owner, _ = await add_user(uow)
        facts = ServerFacts(os=os_name, memory_bytes=memory, cpus=2)
        for name in names:
            await add_server(
                uow, owner, name=name, status_detail=detail, facts=facts, host_keys=tuple(keys)
            )
        assert await servers_listed(uow, owner) == await converted_afresh(engine, owner)


class TestUncommitted:
    async def test_own_uncommitted_writes_are_seen_but_never_cached(
        self, uow: SqlUnitOfWorkFactory
    ) -> None:
        """A transaction sees its own writes; rolled back, nobody is served them later."""
        owner, _ = await add_user(uow)
        server = await add_server(uow, owner)
        assert await listed(uow, owner, server) == []  # cached: empty
        installation = an_installation(server)
        async with uow() as tx:
            await tx.installations.save(owner.id, installation, {})
            assert [i.id for i in await tx.installations.list(owner.id, server.id)] == [
                installation.id
            ]
            # not committed: rolled back on leaving the block
        assert await listed(uow, owner, server) == []

    async def test_a_commit_after_a_read_is_seen(self, uow: SqlUnitOfWorkFactory) -> None:
        """Read (cached), then write and commit in one unit of work: the next read sees it."""
        owner, _ = await add_user(uow)
        server = await add_server(uow, owner)
        installation = an_installation(server)
        async with uow() as tx:
            assert await tx.installations.list(owner.id, server.id) == []
            await tx.installations.save(owner.id, installation, {})
            await tx.commit()
        assert [i.id for i in await listed(uow, owner, server)] == [installation.id]


# --- ownership -------------------------------------------------------------------------------


class TestOwnership:
    async def test_another_owner_never_gets_a_cached_row(self, uow: SqlUnitOfWorkFactory) -> None:
        """Cached for its owner, a server and its installations are still nobody else's."""
        owner, owner_token = await add_user(uow)
        intruder, intruder_token = await add_user(uow)
        server = await add_server(uow, owner)
        await save(uow, owner, an_installation(server))
        assert await server_of(uow, owner, server) == server
        assert len(await listed(uow, owner, server)) == 1
        for _ in range(2):  # the second time, the owner's results are all cached
            assert await server_of(uow, intruder, server) is None
            assert await listed(uow, intruder, server) == []
            owner_found = await found(uow, owner_token)
            intruder_found = await found(uow, intruder_token)
            assert owner_found is not None
            assert owner_found[0] == owner
            assert intruder_found is not None
            assert intruder_found[0] == intruder


# --- the cache itself ------------------------------------------------------------------------


class Versions:
    """A data version that tests move by hand; ``asked`` counts the reads of it."""

    def __init__(self) -> None:
        self.value: tuple[int, int] | None = (1, 1)
        self.asked = 0

    def __call__(self) -> tuple[int, int] | None:
        self.asked += 1
        return self.value


class TestReadCache:
    def test_a_commit_between_lookup_and_store_is_never_served(self) -> None:
        """A value read around a commit is stored under the version before it: dropped."""
        versions = Versions()
        cache = ReadCache(versions)
        value, version = cache.lookup("k")
        assert value is MISSING
        versions.value = (1, 2)  # a commit, while the query ran
        cache.store("k", version, "maybe stale")
        assert cache.lookup("k")[0] is MISSING

    def test_a_commit_after_store_drops_everything(self) -> None:
        versions = Versions()
        cache = ReadCache(versions)
        _, version = cache.lookup("k")
        cache.store("k", version, "v")
        assert cache.lookup("k")[0] == "v"
        versions.value = (1, 2)
        assert cache.lookup("k")[0] is MISSING

    def test_an_unknown_version_caches_nothing(self) -> None:
        versions = Versions()
        versions.value = None
        cache = ReadCache(versions)
        _, version = cache.lookup("k")
        cache.store("k", version, "v")
        assert cache.lookup("k")[0] is MISSING

    def test_a_transactions_version_is_read_once_until_another_sees_a_later(self) -> None:
        """Lookups given the version an earlier one returned do not read it again while it
        is the cache's; once another lookup has seen a commit, they read it again."""
        versions = Versions()
        cache = ReadCache(versions)
        _, version = cache.lookup("k")
        cache.store("k", version, "v")
        mine = cache.lookup("k")[1]
        asked = versions.asked
        assert cache.lookup("k", mine) == ("v", mine)
        assert cache.lookup("other", mine) == (MISSING, mine)
        assert versions.asked == asked
        versions.value = (1, 2)  # a commit, seen by another transaction's lookup
        assert cache.lookup("k")[0] is MISSING
        value, newer = cache.lookup("k", mine)
        assert value is MISSING
        assert newer[0] == (1, 2)
        assert versions.asked == asked + 2

    def test_an_unknown_seen_version_is_read_again(self) -> None:
        """A transaction whose first lookup could not tell the version asks again."""
        versions = Versions()
        versions.value = None
        cache = ReadCache(versions)
        _, unknown = cache.lookup("k")
        versions.value = (1, 1)
        _, version = cache.lookup("k", unknown)
        assert version[0] == (1, 1)
        assert versions.asked == 2

    def test_bounded_by_weight_oldest_out(self) -> None:
        cache = ReadCache(Versions(), max_weight=10)
        for n in range(4):
            _, version = cache.lookup(n)
            cache.store(n, version, f"v{n}", weight=4)
        assert [cache.lookup(n)[0] for n in range(4)] == [MISSING, MISSING, "v2", "v3"]
        _, version = cache.lookup("huge")
        cache.store("huge", version, "too big", weight=11)
        assert cache.lookup("huge")[0] is MISSING
        assert cache.lookup(3)[0] == "v3"

    async def test_none_where_there_is_no_data_version(self, tmp_path: Path) -> None:
        """No cache for PostgreSQL (no cheap exact version) nor in-memory SQLite."""
        for url in ("postgresql+asyncpg://u@localhost/db", "sqlite+aiosqlite:///:memory:"):
            engine = create_engine(url)
            try:
                assert read_cache(engine) is None
            finally:
                await engine.dispose()
        engine = create_engine(sqlite_url(tmp_path))
        try:
            assert read_cache(engine) is read_cache(engine) is not None
        finally:
            await engine.dispose()


def _replace_token_in_another_process(db_url: str, user: User) -> str:
    """Replace the user's token from a separate Python process; returns it in clear."""
    script = textwrap.dedent(
        f"""
        import asyncio
        from datetime import UTC, datetime
        from uuid import UUID
        from berth.adapters.secrets import KeyBox
        from berth.adapters.sql import SqlUnitOfWorkFactory, create_engine
        from berth.core import tokens
        from berth.core.models import ApiToken

        async def main():
            engine = create_engine({db_url!r})
            uow = SqlUnitOfWorkFactory(engine, KeyBox(bytes(32)))
            clear = tokens.generate()
            async with uow() as tx:
                await tx.tokens.replace(ApiToken(
                    user_id=UUID({str(user.id)!r}),
                    token_hash=tokens.hash_token(clear),
                    prefix=tokens.display_prefix(clear),
                    created_at=datetime.now(UTC),
                    last_used_at=datetime.now(UTC),
                ))
                await tx.commit()
            await engine.dispose()
            print(clear)

        asyncio.run(main())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip()
