"""The SQL store (``berth.adapters.sql``) against real SQLite files and PostgreSQL.

Most tests share one migrated database per module and keep apart by using
fresh ids; tests about the database itself get their own. The shared-database
tests, and the migrations, also run on a database of their own on the PostgreSQL
server of ``BERTH_TEST_POSTGRES_URL=postgresql+asyncpg://…`` (``scripts/dev test``
starts one); without it those variants are skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import sys
import textwrap
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import builders
import msgspec
import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from berth.adapters.secrets import KeyBox
from berth.adapters.sql import (
    SqlFleet,
    SqlUnitOfWork,
    SqlUnitOfWorkFactory,
    alembic_config,
    create_engine,
    migrate,
    sqlite_url,
)
from berth.adapters.sql.dialect import ensure_database_dir
from berth.adapters.sql.migrate import HEAD
from berth.adapters.sql.tables import DeploymentRow, metadata
from berth.core import commands as c
from berth.core.access import Actor
from berth.core.commands import parse_deploy
from berth.core.errors import Conflict, NotFound, WriteConflict
from berth.core.lifecycle import can_move
from berth.core.models import (
    ApiToken,
    ContainerPort,
    ContainerSnapshot,
    Deployment,
    DeploymentEvent,
    DeploymentSpec,
    DeploymentState,
    Installation,
    InstallationStatus,
    Registry,
    RegistryAuth,
    Server,
    ServerFacts,
    ServerStatus,
    Transport,
    User,
)
from berth.core.use_cases import ListInstallations, QueueDeployment
from infra import DATABASES, migrated_database, observe, postgres_database
from sql_support import (
    T0,
    add_user,
    at,
    finished,
    installation_of,
    released_together,
    statements_sent,
    tag,
)
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy import text, update
from sqlalchemy.ext.asyncio import AsyncEngine

# --- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=DATABASES)
def db_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The module's shared database, migrated."""
    where = tmp_path_factory.mktemp("sql-store")
    with migrated_database(request.param, where, "berth_store") as url:
        yield url


@pytest.fixture(params=DATABASES)
def new_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database of the test's own, not migrated: no SQLite file yet (in a data dir
    that does not exist yet either), or an empty PostgreSQL database."""
    if request.param == "sqlite":
        yield sqlite_url(tmp_path / "data")
        return
    with postgres_database("berth_store") as url:
        yield url


@pytest.fixture(scope="module")
def box() -> KeyBox:
    return KeyBox(os.urandom(32))


# --- builders --------------------------------------------------------------------------------


def a_server(owner: User, **changes: Any) -> Server:
    """An enrolled server (offline: it takes deploys) whose enrollment code is still good."""
    enrolled = {"status": ServerStatus.OFFLINE, "enrollment_expires_at": at(3600)}
    return builders.a_server(owner_id=owner.id, **(enrolled | changes))


def an_installation(server: Server, **changes: Any) -> Installation:
    spec = builders.a_spec(env_keys=("API_KEY",), volumes=("data:/d",))
    return builders.an_installation(server, **({"spec": spec} | changes))


def a_deployment(installation: Installation, created_at: datetime, **changes: Any) -> Deployment:
    queued = (DeploymentEvent(at=created_at, step="queued", message="Deployment queued."),)
    return builders.a_deployment(
        installation, **({"created_at": created_at, "events": queued} | changes)
    )


def closing(state: DeploymentState, when: datetime) -> DeploymentEvent:
    return DeploymentEvent(at=when, step=state.value, message=f"Deployment {state.value}.")


async def add_server(uow: SqlUnitOfWorkFactory, owner: User, **changes: Any) -> Server:
    server = a_server(owner, **changes)
    async with uow() as tx:
        await tx.servers.add(server, f"enroll-{tag()}")
        await tx.commit()
    return server


async def save_installation(
    uow: SqlUnitOfWorkFactory,
    owner: User,
    installation: Installation,
    env: dict[str, str] | None = None,
) -> Installation:
    async with uow() as tx:
        await tx.installations.save(owner.id, installation, env or {"API_KEY": "k"})
        await tx.commit()
    return installation


async def add_deployment(
    uow: SqlUnitOfWorkFactory,
    owner: User,
    deployment: Deployment,
    env: dict[str, str] | None = None,
    key: str | None = None,
) -> Deployment:
    async with uow() as tx:
        await tx.deployments.add(owner.id, deployment, env or {"API_KEY": "k"}, key, "fp")
        await tx.commit()
    return deployment


async def finish(
    uow: SqlUnitOfWorkFactory, owner: User, deployment: Deployment, state: DeploymentState
) -> None:
    """End ``deployment`` as a worker would: claimed first when the table requires it."""
    when = deployment.created_at + timedelta(seconds=5)
    if not can_move(DeploymentState.QUEUED, state):
        d = DeploymentRow.__table__.c
        async with uow.engine.begin() as conn:
            await conn.execute(
                update(DeploymentRow.__table__)
                .where(d.id == deployment.id, d.state == DeploymentState.QUEUED.value)
                .values(state=DeploymentState.RUNNING.value, started_at=deployment.created_at)
            )
    async with uow() as tx:
        await tx.deployments.finish(
            owner.id, deployment.id, state, when, None, closing(state, when)
        )
        await tx.commit()


# --- migrations and the engine ---------------------------------------------------------------


class TestMigrations:
    def test_migrating_twice_changes_nothing(self, tmp_path: Path) -> None:
        """A second migrate on an up-to-date database is a no-op."""
        url = sqlite_url(tmp_path)
        migrate(url)
        schema = _sqlite_schema(tmp_path / "berth.db")
        migrate(url)
        assert _sqlite_schema(tmp_path / "berth.db") == schema
        assert _alembic_version(tmp_path / "berth.db") == HEAD

    def test_head_is_the_newest_revision(self) -> None:
        """``HEAD``, the revision a new database is stamped with and a current one is
        recognised by, is Alembic's one head: a new revision must change it."""
        script = ScriptDirectory.from_config(alembic_config("sqlite://"))
        assert script.get_heads() == [HEAD]

    @pytest.mark.parametrize("kind", DATABASES)
    async def test_a_new_database_is_made_as_the_revisions_make_it(
        self, kind: str, tmp_path: Path
    ) -> None:
        """``migrate`` makes an empty database at once from ``tables.py`` (no Alembic):
        the same tables, columns, keys, indexes, constraints, triggers and rows as
        replaying every revision with Alembic; and it then stands at the head revision."""
        with (
            _empty_database(kind, tmp_path / "made") as made,
            _empty_database(kind, tmp_path / "replayed") as replayed,
        ):
            migrate(made)
            ensure_database_dir(replayed)
            await asyncio.to_thread(command.upgrade, alembic_config(replayed), "head")
            described = [await _described(url) for url in (made, replayed)]
        assert described[0] == described[1]
        assert described[0]["alembic_version"]["rows"] == [json.dumps({"version_num": HEAD})]
        assert len(described[0]) == len(metadata.tables) + 1  # and alembic_version

    def test_migrate_creates_the_data_dir(self, tmp_path: Path) -> None:
        """Migrating a database in a missing directory creates the directory and the file."""
        data_dir = tmp_path / "not" / "yet"
        migrate(sqlite_url(data_dir))
        assert (data_dir / "berth.db").is_file()

    async def test_migrate_works_from_inside_an_event_loop(self, tmp_path: Path) -> None:
        """migrate() may be called from async code (it runs Alembic's loop in a thread)."""
        migrate(sqlite_url(tmp_path))
        assert _alembic_version(tmp_path / "berth.db") == HEAD

    async def test_migrations_match_the_tables(self, new_db_url: str) -> None:
        """The hand-written migrations, replayed by Alembic, produce exactly the schema
        tables.py declares, and migrating again changes nothing."""

        def differences(conn: Any) -> list[Any]:
            context = MigrationContext.configure(
                conn, opts={"compare_type": True, "compare_server_default": True}
            )
            return list(compare_metadata(context, metadata))

        ensure_database_dir(new_db_url)
        await asyncio.to_thread(command.upgrade, alembic_config(new_db_url), "head")
        migrate(new_db_url)
        engine = create_engine(new_db_url)
        try:
            async with engine.connect() as conn:
                assert await conn.run_sync(differences) == []
                version = await conn.execute(text("SELECT version_num FROM alembic_version"))
                assert version.scalar_one() == HEAD
        finally:
            await engine.dispose()

    def test_processes_migrating_at_once_all_succeed(self, new_db_url: str, tmp_path: Path) -> None:
        """Several processes migrating a new database at the same moment all succeed, once
        (SQLite: BEGIN IMMEDIATE; PostgreSQL: an advisory lock)."""
        url = new_db_url
        go = tmp_path / "go"
        # Each waits for the go a bounded time: one never released (this test failed or
        # was stopped) ends by itself instead of polling on, a load on the machine.
        script = textwrap.dedent(
            """
            import pathlib, sys, time
            from berth.adapters.sql import migrate
            pathlib.Path(sys.argv[2] + ".ready-" + sys.argv[3]).touch()
            deadline = time.monotonic() + 300
            while not pathlib.Path(sys.argv[2]).exists():
                if time.monotonic() > deadline:
                    sys.exit("never released")
                time.sleep(0.002)
            migrate(sys.argv[1])
            """
        )
        commands = [[sys.executable, "-c", script, url, str(go), str(n)] for n in range(8)]
        with released_together(go, commands) as processes:
            for process in processes:
                finished(process)
        assert asyncio.run(_alembic_version_at(url)) == HEAD

    def test_a_migration_waits_for_a_writer_longer_than_requests_do(self, tmp_path: Path) -> None:
        """A migrate that finds SQLite's write lock held (another process migrating, slowly
        on a busy machine) waits past the 5 s a request waits, then migrates."""
        url = sqlite_url(tmp_path)
        migrate(url)
        holder = sqlite3.connect(tmp_path / "berth.db", isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            with ThreadPoolExecutor(1) as pool:
                waiting = pool.submit(migrate, url)
                time.sleep(6)  # past busy_timeout (5 s): a request would have given up
                assert not waiting.done(), waiting.exception()
                holder.execute("COMMIT")
                waiting.result(timeout=120)
        finally:
            holder.close()
        assert _alembic_version(tmp_path / "berth.db") == HEAD


@contextlib.contextmanager
def _empty_database(kind: str, where: Path) -> Iterator[str]:
    if kind == "sqlite":
        yield sqlite_url(where)
        return
    with postgres_database("berth_made") as url:
        yield url


async def _described(url: str) -> dict[str, dict[str, Any]]:
    """Each table of the database at ``url``: what SQLAlchemy's inspector reads of it
    (columns, keys, indexes, constraints), its triggers and its rows. Not the columns'
    order: ``tables.py`` lists a table's columns in another order than the revisions
    added them, and no statement of berth's depends on it (each names its columns)."""

    def plain(found: Iterable[Any]) -> list[str]:
        return sorted(json.dumps(item, default=str, sort_keys=True) for item in found)

    def describe(conn: Any) -> dict[str, dict[str, Any]]:
        inspector = sa.inspect(conn)
        found: dict[str, dict[str, Any]] = {}
        for table in inspector.get_table_names():
            columns = inspector.get_columns(table)
            rows = conn.execute(
                sa.select(sa.table(table, *(sa.column(c["name"]) for c in columns)))
            )
            found[table] = {
                "columns": plain(columns),
                "primary key": plain([inspector.get_pk_constraint(table)]),
                "foreign keys": plain(inspector.get_foreign_keys(table)),
                "indexes": plain(inspector.get_indexes(table)),
                "unique": plain(inspector.get_unique_constraints(table)),
                "checks": plain(inspector.get_check_constraints(table)),
                "triggers": sorted(_triggers(conn, table)),
                "rows": sorted(
                    json.dumps(row._asdict(), default=str, sort_keys=True) for row in rows
                ),
            }
        return found

    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(describe)
    finally:
        await engine.dispose()


def _triggers(conn: Any, table: str) -> list[str]:
    """Each trigger on ``table``, as the database states it (white space folded)."""
    if conn.dialect.name == "sqlite":
        query = "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = :t"
    else:
        query = (
            "SELECT pg_get_triggerdef(oid) FROM pg_trigger "
            "WHERE tgrelid = CAST(:t AS regclass) AND NOT tgisinternal"
        )
    return [" ".join(sql.split()) for (sql,) in conn.execute(text(query), {"t": table})]


def _sqlite_schema(path: Path) -> list[tuple[Any, ...]]:
    engine = create_sync_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT type, name, sql FROM sqlite_master ORDER BY name"))
            return [tuple(row) for row in rows]
    finally:
        engine.dispose()


def _alembic_version(path: Path) -> str:
    engine = create_sync_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as conn:
            return str(conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one())
    finally:
        engine.dispose()


async def _alembic_version_at(url: str) -> str:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            version = await conn.execute(text("SELECT version_num FROM alembic_version"))
            return str(version.scalar_one())
    finally:
        await engine.dispose()


class TestEngine:
    async def test_sqlite_connections_use_wal_and_safe_pragmas(self, tmp_path: Path) -> None:
        """Every connection runs in WAL mode, synchronous=NORMAL, FKs on, 5 s busy timeout."""
        engine = create_engine(sqlite_url(tmp_path))
        try:
            async with engine.connect() as conn:
                pragmas = {
                    name: (await conn.exec_driver_sql(f"PRAGMA {name}")).scalar_one()
                    for name in ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")
                }
        finally:
            await engine.dispose()
        assert pragmas == {
            "journal_mode": "wal",
            "synchronous": 1,
            "foreign_keys": 1,
            "busy_timeout": 5000,
        }

    def test_sqlite_url_names_berth_db_in_the_data_dir(self, tmp_path: Path) -> None:
        """sqlite_url points the aiosqlite driver at <data dir>/berth.db."""
        assert sqlite_url(tmp_path) == f"sqlite+aiosqlite:///{tmp_path}/berth.db"

    async def test_timestamps_come_back_timezone_aware_utc(self, uow: SqlUnitOfWorkFactory) -> None:
        """A timestamp in any zone is read back as the same instant, in UTC."""
        paris = timezone(timedelta(hours=2))
        user = msgspec.structs.replace(
            builders.a_user(), created_at=datetime(2025, 6, 1, 14, 30, 15, 123456, tzinfo=paris)
        )
        async with uow() as tx:
            await tx.users.add(user)
            await tx.commit()
        async with uow() as tx:
            found = await tx.users.get(user.id)
        assert found is not None
        assert found.created_at == user.created_at
        assert found.created_at.tzinfo is UTC

    async def test_naive_timestamps_are_refused(self, uow: SqlUnitOfWorkFactory) -> None:
        """Storing a datetime without a zone fails instead of guessing one."""
        user = msgspec.structs.replace(builders.a_user(), created_at=datetime(2025, 1, 1))
        async with uow() as tx:
            with pytest.raises(Exception, match="naive datetime"):
                await tx.users.add(user)


# --- the unit of work ------------------------------------------------------------------------


class TestUnitOfWork:
    async def test_nothing_is_written_without_commit(self, uow: SqlUnitOfWorkFactory) -> None:
        """Leaving the block without commit() rolls everything back."""
        user = builders.a_user()
        async with uow() as tx:
            await tx.users.add(user)
        async with uow() as tx:
            assert await tx.users.get(user.id) is None

    async def test_an_exception_rolls_back(self, uow: SqlUnitOfWorkFactory) -> None:
        """An exception inside the block discards the block's writes."""
        user = builders.a_user()

        async def add_then_fail() -> None:
            async with uow() as tx:
                await tx.users.add(user)
                raise RuntimeError("boom")

        with pytest.raises(RuntimeError):
            await add_then_fail()
        async with uow() as tx:
            assert await tx.users.get(user.id) is None

    async def test_committed_writes_are_visible_to_the_next_unit(
        self, uow: SqlUnitOfWorkFactory
    ) -> None:
        """What one unit of work commits, the next one reads."""
        user = await add_user(uow)
        async with uow() as tx:
            assert await tx.users.get(user.id) == user

    async def test_many_units_writing_at_once_all_succeed(self, uow: SqlUnitOfWorkFactory) -> None:
        """100 concurrent read-then-write units of work all commit (none times out on a lock)."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)

        async def deploy_one() -> None:
            installation = an_installation(server)
            async with uow() as tx:
                await tx.installations.list(owner.id, server.id)
                await tx.installations.save(owner.id, installation, {"API_KEY": "k"})
                await tx.deployments.add(
                    owner.id, a_deployment(installation, at(1)), {"API_KEY": "k"}
                )
                await tx.commit()

        await asyncio.wait_for(asyncio.gather(*(deploy_one() for _ in range(100))), 60)
        async with uow() as tx:
            assert len(await tx.installations.list(owner.id, server.id)) == 100

    async def test_writes_after_commit_or_rollback_do_not_block_others(
        self, uow: SqlUnitOfWorkFactory
    ) -> None:
        """A unit that committed, or left without committing, lets the next writer in."""
        first, second, third = builders.a_user(), builders.a_user(), builders.a_user()
        async with uow() as tx:
            await tx.users.add(first)
            await tx.commit()
            await tx.users.add(second)  # written after commit: rolled back on exit
        async with uow() as tx:
            await asyncio.wait_for(tx.users.add(third), 10)
            await tx.commit()
        async with uow() as tx:
            assert await tx.users.get(first.id) == first
            assert await tx.users.get(second.id) is None
            assert await tx.users.get(third.id) == third

    async def test_factory_returns_a_new_unit_each_call(self, uow: SqlUnitOfWorkFactory) -> None:
        """Each call of the factory is a fresh SqlUnitOfWork."""
        first, second = uow(), uow()
        assert isinstance(first, SqlUnitOfWork)
        assert first is not second


# --- users and tokens ------------------------------------------------------------------------


class TestUsers:
    async def test_a_user_round_trips(self, uow: SqlUnitOfWorkFactory) -> None:
        """A stored user reads back equal, by id and by email."""
        user = await add_user(uow)
        async with uow() as tx:
            assert await tx.users.get(user.id) == user
            assert await tx.users.get_by_email(user.email) == user

    async def test_email_lookup_ignores_case(self, uow: SqlUnitOfWorkFactory) -> None:
        """Emails are stored lowercased and found whatever their case."""
        user = msgspec.structs.replace(builders.a_user(), email=f"Ada-{tag()}@Example.COM")
        async with uow() as tx:
            await tx.users.add(user)
            await tx.commit()
        async with uow() as tx:
            found = await tx.users.get_by_email(user.email.upper())
        assert found is not None
        assert found.id == user.id
        assert found.email == user.email.lower()

    async def test_unknown_users_are_none(self, uow: SqlUnitOfWorkFactory) -> None:
        """An unknown id or email gives None."""
        async with uow() as tx:
            assert await tx.users.get(uuid4()) is None
            assert await tx.users.get_by_email(f"nobody-{tag()}@example.com") is None

    async def test_first_is_the_oldest_user(self, new_db_url: str, box: KeyBox) -> None:
        """first() gives the oldest user, or None before there is any."""
        url = new_db_url
        migrate(url)
        engine = create_engine(url)
        uow = SqlUnitOfWorkFactory(engine, box)
        try:
            async with uow() as tx:
                assert await tx.users.first() is None
            newer = msgspec.structs.replace(builders.a_user(), created_at=at(10))
            older = msgspec.structs.replace(builders.a_user(), created_at=at(1))
            async with uow() as tx:
                await tx.users.add(newer)
                await tx.users.add(older)
                await tx.commit()
            async with uow() as tx:
                assert await tx.users.first() == older
        finally:
            await engine.dispose()

    async def test_a_taken_email_is_a_conflict(self, uow: SqlUnitOfWorkFactory) -> None:
        """A second user with the same email, in any case, raises Conflict."""
        user = await add_user(uow)
        twin = msgspec.structs.replace(builders.a_user(), email=user.email.upper())
        async with uow() as tx:
            with pytest.raises(Conflict, match="email"):
                await tx.users.add(twin)


class TestTokens:
    async def test_a_token_round_trips_and_finds_its_user(self, uow: SqlUnitOfWorkFactory) -> None:
        """A token reads back by user and, with its user, by hash."""
        user = await add_user(uow)
        token = ApiToken(user_id=user.id, token_hash=f"h-{tag()}", prefix="berth_ab", created_at=T0)
        async with uow() as tx:
            await tx.tokens.replace(token)
            await tx.commit()
        async with uow() as tx:
            assert await tx.tokens.get(user.id) == token
            assert await tx.tokens.find(token.token_hash) == (user, token)

    async def test_replace_revokes_the_previous_token(self, uow: SqlUnitOfWorkFactory) -> None:
        """After replace, the old hash finds nothing and the new one is the user's only token."""
        user = await add_user(uow)
        old = ApiToken(user_id=user.id, token_hash=f"old-{tag()}", prefix="berth_o", created_at=T0)
        new = ApiToken(
            user_id=user.id, token_hash=f"new-{tag()}", prefix="berth_n", created_at=at(60)
        )
        for token in (old, new):
            async with uow() as tx:
                await tx.tokens.replace(token)
                await tx.commit()
        async with uow() as tx:
            assert await tx.tokens.find(old.token_hash) is None
            assert await tx.tokens.find(new.token_hash) == (user, new)
            assert await tx.tokens.get(user.id) == new

    async def test_touch_records_the_last_use(self, uow: SqlUnitOfWorkFactory) -> None:
        """touch() sets last_used_at."""
        user = await add_user(uow)
        token = ApiToken(user_id=user.id, token_hash=f"h-{tag()}", prefix="berth_t", created_at=T0)
        async with uow() as tx:
            await tx.tokens.replace(token)
            await tx.tokens.touch(user.id, at(90))
            await tx.commit()
        async with uow() as tx:
            stored = await tx.tokens.get(user.id)
        assert stored is not None
        assert stored.last_used_at == at(90)

    async def test_an_unknown_hash_finds_nothing(self, uow: SqlUnitOfWorkFactory) -> None:
        """find() of a hash nobody has gives None."""
        async with uow() as tx:
            assert await tx.tokens.find(f"unknown-{tag()}") is None


# --- servers ---------------------------------------------------------------------------------


class TestServers:
    async def test_a_server_round_trips(self, uow: SqlUnitOfWorkFactory) -> None:
        """A stored server reads back equal, facts and enrollment expiry included."""
        owner = await add_user(uow)
        server = await add_server(
            uow,
            owner,
            facts=ServerFacts(os="debian", arch="x86_64", cpus=4, memory_bytes=8 << 30),
            last_seen_at=at(5),
            status=ServerStatus.ONLINE,
        )
        async with uow() as tx:
            assert await tx.servers.get(owner.id, server.id) == server

    async def test_this_machines_servers_whoever_owns_them(self, uow: SqlUnitOfWorkFactory) -> None:
        """``of_this_machine`` finds every local server across owners, and no SSH one."""
        first, second = await add_user(uow), await add_user(uow)
        mine = await add_server(uow, first, transport=Transport.LOCAL, address="127.0.0.1")
        theirs = await add_server(uow, second, transport=Transport.LOCAL, address="127.0.0.1")
        remote = await add_server(uow, second)
        async with uow() as tx:
            found = {s.id: s for s in await tx.servers.of_this_machine()}
        assert found[mine.id] == mine
        assert found[theirs.id] == theirs
        assert remote.id not in found

    async def test_ssh_identity_round_trips_without_the_private_key(
        self, uow: SqlUnitOfWorkFactory
    ) -> None:
        """Host keys, public key and status detail read back; the private key is never read."""
        owner = await add_user(uow)
        server = a_server(
            owner,
            host_keys=("ssh-ed25519 AAAAC3Nza host-a", "ssh-rsa AAAAB3Nza host-b"),
            public_key="ssh-ed25519 AAAAC3Nzb berth@server",
            status=ServerStatus.OFFLINE,
            status_detail="Host key mismatch.",
        )
        async with uow() as tx:
            await tx.servers.add(server, None, b"-----BEGIN OPENSSH PRIVATE KEY-----")
            await tx.commit()
        async with uow() as tx:
            assert await tx.servers.get(owner.id, server.id) == server

    async def test_servers_are_listed_oldest_first(self, uow: SqlUnitOfWorkFactory) -> None:
        """list() gives only the owner's servers, oldest first."""
        owner = await add_user(uow)
        newer = await add_server(uow, owner, created_at=at(10))
        older = await add_server(uow, owner, created_at=at(1))
        await add_server(uow, await add_user(uow))
        async with uow() as tx:
            assert await tx.servers.list(owner.id) == [older, newer]

    async def test_a_snapshot_round_trips_and_is_replaced(self, uow: SqlUnitOfWorkFactory) -> None:
        """save_snapshot() stores the container list; saving again replaces it."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        first = ContainerSnapshot(
            server_id=server.id,
            observed_at=at(1),
            containers=(
                builders.a_container(
                    status="Up 2 minutes",
                    created_at=at(0),
                    ports=(
                        ContainerPort(
                            container_port=80, host_ip="0.0.0.0", host_port=8080, protocol="tcp"
                        ),
                    ),
                    installation_id=uuid4(),
                ),
            ),
        )
        second = ContainerSnapshot(server_id=server.id, observed_at=at(2), containers=())
        async with uow() as tx:
            assert await tx.servers.snapshot(owner.id, server.id) is None
            await tx.servers.save_snapshot(owner.id, first)
            await tx.commit()
        async with uow() as tx:
            assert await tx.servers.snapshot(owner.id, server.id) == first
            await tx.servers.save_snapshot(owner.id, second)
            await tx.commit()
        async with uow() as tx:
            assert await tx.servers.snapshot(owner.id, server.id) == second

    async def test_change_moves_a_watched_server_back_to_offline(
        self, uow: SqlUnitOfWorkFactory
    ) -> None:
        """change() sets name, address and port; with ``recheck`` a host-key-mismatch
        server goes offline, unchecked, its offered key forgotten, a pending one stays
        pending; a stranger's change writes nothing."""
        owner = await add_user(uow)
        mismatch = await add_server(
            uow,
            owner,
            status=ServerStatus.HOST_KEY_MISMATCH,
            status_detail="Host key mismatch.",
            offered_host_key="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHc5",
            checked_at=at(5),
        )
        pending = await add_server(uow, owner, status=ServerStatus.PENDING)
        stranger = await add_user(uow)
        async with uow() as tx:
            for server in (mismatch, pending):
                assert await tx.servers.change(
                    owner.id,
                    server.id,
                    name="moved",
                    address="198.51.100.7",
                    ssh_port=2222,
                    recheck=True,
                )
            assert not await tx.servers.change(
                stranger.id, pending.id, name="x", address=None, ssh_port=22, recheck=False
            )
            await tx.commit()
        async with uow() as tx:
            moved = await tx.servers.get(owner.id, mismatch.id)
            still = await tx.servers.get(owner.id, pending.id)
        assert moved == msgspec.structs.replace(
            mismatch,
            name="moved",
            address="198.51.100.7",
            ssh_port=2222,
            status=ServerStatus.OFFLINE,
            status_detail=None,
            offered_host_key=None,
            checked_at=None,
        )
        assert still == msgspec.structs.replace(
            pending, name="moved", address="198.51.100.7", ssh_port=2222
        )

    async def test_lock_reads_the_owners_server_only(self, uow: SqlUnitOfWorkFactory) -> None:
        """lock() gives the owner's server, and None for a stranger or an unknown id."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        async with uow() as tx:
            assert await tx.servers.lock(owner.id, server.id) == server
        async with uow() as tx:
            assert await tx.servers.lock((await add_user(uow)).id, server.id) is None
        async with uow() as tx:
            assert await tx.servers.lock(owner.id, uuid4()) is None

    @pytest.mark.parametrize("other", ["same engine", "another engine"])
    async def test_lock_waits_for_the_holder_to_end(
        self, uow: SqlUnitOfWorkFactory, db_url: str, box: KeyBox, other: str
    ) -> None:
        """A second lock() of a server waits until the first unit of work ends, in this
        process (the engine's write lock) or another (BEGIN IMMEDIATE, FOR NO KEY UPDATE)."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        engine = uow.engine if other == "same engine" else create_engine(db_url)
        try:
            second_uow = SqlUnitOfWorkFactory(engine, box)
            async with uow() as first:
                await first.servers.lock(owner.id, server.id)
                installation = an_installation(server)

                async def second() -> Installation | None:
                    async with second_uow() as tx:
                        await tx.servers.lock(owner.id, server.id)
                        return await tx.installations.get(owner.id, installation.id)

                waiting = asyncio.create_task(second())
                await asyncio.sleep(0.3)
                assert not waiting.done()
                await first.installations.save(owner.id, installation, {})
                await first.commit()
            # It read after the first committed: it sees the installation.
            assert (await asyncio.wait_for(waiting, 10)) is not None
        finally:
            if engine is not uow.engine:
                await engine.dispose()


class TestHostKeyChange:
    KEY_OLD = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
    KEY_NEW = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKnyPSfYoTxNnR+yO+MMH6s8XGxKu4BCThQ5SOuwmplU"

    async def test_mismatch_is_stored_and_repin_is_conditional(
        self, uow: SqlUnitOfWorkFactory, box: KeyBox
    ) -> None:
        """host_key_mismatch keeps the offered key; a re-pin of another key, or by another
        owner, writes nothing; the right one pins it and clears the offer."""
        owner = await add_user(uow)
        stranger = await add_user(uow)
        server = await add_server(uow, owner, host_keys=(self.KEY_OLD,))
        fleet = SqlFleet(uow.engine, box)
        await observe(
            fleet,
            server.id,
            ServerStatus.HOST_KEY_MISMATCH,
            at(1),
            detail="Host key mismatch: …",
            offered_host_key=self.KEY_NEW,
        )
        async with uow() as tx:
            seen = await tx.servers.get(owner.id, server.id)
            assert seen is not None
            assert seen.status is ServerStatus.HOST_KEY_MISMATCH
            assert seen.offered_host_key == self.KEY_NEW
            assert not await tx.servers.repin(
                owner.id, server.id, host_keys=(self.KEY_OLD,), offered=self.KEY_OLD
            )
            assert not await tx.servers.repin(
                stranger.id, server.id, host_keys=(self.KEY_NEW,), offered=self.KEY_NEW
            )
            assert await tx.servers.repin(
                owner.id, server.id, host_keys=(self.KEY_NEW,), offered=self.KEY_NEW
            )
            await tx.commit()
        async with uow() as tx:
            pinned = await tx.servers.get(owner.id, server.id)
        assert pinned is not None
        assert pinned.status is ServerStatus.OFFLINE
        assert pinned.host_keys == (self.KEY_NEW,)
        assert pinned.offered_host_key is None

    async def test_online_clears_the_offer(self, uow: SqlUnitOfWorkFactory, box: KeyBox) -> None:
        """The pinned key answering again (online) forgets the offered key."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        fleet = SqlFleet(uow.engine, box)
        await observe(
            fleet, server.id, ServerStatus.HOST_KEY_MISMATCH, at(1), offered_host_key=self.KEY_NEW
        )
        await observe(fleet, server.id, ServerStatus.OFFLINE, at(2), detail="Unreachable")
        async with uow() as tx:
            kept = await tx.servers.get(owner.id, server.id)
        assert kept is not None
        assert kept.offered_host_key == self.KEY_NEW
        await observe(fleet, server.id, ServerStatus.ONLINE, at(3))
        async with uow() as tx:
            cleared = await tx.servers.get(owner.id, server.id)
        assert cleared is not None
        assert cleared.offered_host_key is None


# --- installations ---------------------------------------------------------------------------


class TestInstallations:
    async def test_an_installation_round_trips(self, uow: SqlUnitOfWorkFactory) -> None:
        """A saved installation reads back equal by id and by container name."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        installation = await save_installation(uow, owner, an_installation(server, host_port=8080))
        async with uow() as tx:
            assert await tx.installations.get(owner.id, installation.id) == installation
            assert (
                await tx.installations.get_by_container_name(
                    owner.id, server.id, installation.container_name
                )
                == installation
            )

    async def test_saving_again_updates_in_place(self, uow: SqlUnitOfWorkFactory) -> None:
        """Saving an existing installation updates its spec and keeps its id and creation time."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        installation = await save_installation(uow, owner, an_installation(server))
        changed = msgspec.structs.replace(
            installation,
            spec=DeploymentSpec(
                image="shop:2.0", port=9000, domain="shop.example.com", env_keys=(), volumes=()
            ),
            created_at=at(999),  # ignored: creation time is the first save's
            updated_at=at(60),
        )
        await save_installation(uow, owner, changed, env={})
        stored = await installation_of(uow, owner, installation.id)
        assert stored == msgspec.structs.replace(changed, created_at=installation.created_at)

    async def test_status_follows_the_deployments(self, uow: SqlUnitOfWorkFactory) -> None:
        """Status: none → pending, queued → deploying, succeeded → running, failed → failed."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        installation = await save_installation(uow, owner, an_installation(server))
        assert (await installation_of(uow, owner, installation.id)).status is (
            InstallationStatus.PENDING
        )

        first = await add_deployment(uow, owner, a_deployment(installation, at(1)))
        stored = await installation_of(uow, owner, installation.id)
        assert stored.status is InstallationStatus.DEPLOYING
        assert stored.last_deployment is not None
        assert stored.last_deployment.id == first.id
        assert stored.last_deployment.state is DeploymentState.QUEUED

        await finish(uow, owner, first, DeploymentState.SUCCEEDED)
        stored = await installation_of(uow, owner, installation.id)
        assert stored.status is InstallationStatus.RUNNING
        assert stored.last_deployment is not None
        assert stored.last_deployment.finished_at == first.created_at + timedelta(seconds=5)

        second = await add_deployment(uow, owner, a_deployment(installation, at(20)))
        assert (await installation_of(uow, owner, installation.id)).status is (
            InstallationStatus.DEPLOYING
        )
        await finish(uow, owner, second, DeploymentState.FAILED)
        stored = await installation_of(uow, owner, installation.id)
        assert stored.status is InstallationStatus.FAILED
        assert stored.last_deployment is not None
        assert stored.last_deployment.id == second.id

    @pytest.mark.parametrize("state", [DeploymentState.TIMED_OUT, DeploymentState.CANCELED])
    async def test_timed_out_and_canceled_count_as_failed(
        self, uow: SqlUnitOfWorkFactory, state: DeploymentState
    ) -> None:
        """A last finished deployment that timed out or was canceled, after one that
        failed, makes the status failed."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        installation = await save_installation(uow, owner, an_installation(server))
        failed = await add_deployment(uow, owner, a_deployment(installation, at(1)))
        await finish(uow, owner, failed, DeploymentState.FAILED)
        deployment = await add_deployment(uow, owner, a_deployment(installation, at(10)))
        await finish(uow, owner, deployment, state)
        assert (await installation_of(uow, owner, installation.id)).status is (
            InstallationStatus.FAILED
        )

    async def test_only_canceled_deployments_leave_it_pending(
        self, uow: SqlUnitOfWorkFactory
    ) -> None:
        """An app whose deployments that ended were all canceled was never deployed: pending,
        as before them (issue 28); a timed-out one after them makes it failed."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        installation = await save_installation(uow, owner, an_installation(server))
        for second in (1, 10):
            canceled = await add_deployment(uow, owner, a_deployment(installation, at(second)))
            await finish(uow, owner, canceled, DeploymentState.CANCELED)
            assert (await installation_of(uow, owner, installation.id)).status is (
                InstallationStatus.PENDING
            )
        timed_out = await add_deployment(uow, owner, a_deployment(installation, at(20)))
        await finish(uow, owner, timed_out, DeploymentState.TIMED_OUT)
        assert (await installation_of(uow, owner, installation.id)).status is (
            InstallationStatus.FAILED
        )

    async def test_an_active_deployment_wins_over_a_newer_finished_one(
        self, uow: SqlUnitOfWorkFactory
    ) -> None:
        """Any queued or running deployment makes the status deploying."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        installation = await save_installation(uow, owner, an_installation(server))
        await add_deployment(
            uow, owner, a_deployment(installation, at(1), state=DeploymentState.RUNNING)
        )
        newer = await add_deployment(uow, owner, a_deployment(installation, at(2)))
        await finish(uow, owner, newer, DeploymentState.SUCCEEDED)
        stored = await installation_of(uow, owner, installation.id)
        assert stored.status is InstallationStatus.DEPLOYING
        assert stored.last_deployment is not None
        assert stored.last_deployment.id == newer.id

    async def test_list_gives_the_servers_installations_oldest_first(
        self, uow: SqlUnitOfWorkFactory
    ) -> None:
        """list() gives one server's installations, oldest first, each with its status."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        other_server = await add_server(uow, owner)
        newer = await save_installation(uow, owner, an_installation(server, created_at=at(5)))
        older = await save_installation(uow, owner, an_installation(server, created_at=at(1)))
        await save_installation(uow, owner, an_installation(other_server))
        deployment = await add_deployment(uow, owner, a_deployment(newer, at(6)))
        async with uow() as tx:
            listed = await tx.installations.list(owner.id, server.id)
        assert [i.id for i in listed] == [older.id, newer.id]
        assert listed[0] == older
        assert listed[1].status is InstallationStatus.DEPLOYING
        assert listed[1].last_deployment is not None
        assert listed[1].last_deployment.id == deployment.id

    async def test_listing_100_installations_takes_a_fixed_number_of_queries(
        self, uow: SqlUnitOfWorkFactory, engine: AsyncEngine
    ) -> None:
        """list() of 100 installations, each with deployments, sends one query."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        async with uow() as tx:
            for n in range(100):
                installation = an_installation(server, created_at=at(n))
                await tx.installations.save(owner.id, installation, {"API_KEY": "k"})
                for k in range(n % 3):
                    await tx.deployments.add(
                        owner.id, a_deployment(installation, at(n + k)), {"API_KEY": "k"}
                    )
            await tx.commit()
        async with uow() as tx:
            with statements_sent(engine) as statements:
                listed = await tx.installations.list(owner.id, server.id)
        assert len(listed) == 100
        assert len(statements) == 1, statements
        statuses = {i.status for i in listed}
        assert statuses == {InstallationStatus.PENDING, InstallationStatus.DEPLOYING}

    async def test_remove_marks_it_removed_and_keeps_its_deployments(
        self, uow: SqlUnitOfWorkFactory
    ) -> None:
        """remove() marks the installation removed (no host port, out of the list unless
        asked) and keeps its deployments; a second remove gives False; its name, domain and
        port are free for a new installation."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        installation = await save_installation(uow, owner, an_installation(server))
        kept = await save_installation(uow, owner, an_installation(server))
        deployment = await add_deployment(uow, owner, a_deployment(installation, at(1)))
        await add_deployment(uow, owner, a_deployment(kept, at(1)))
        async with uow() as tx:
            assert await tx.installations.remove(owner.id, installation.id, at(2)) is True
            await tx.commit()
        async with uow() as tx:
            removed = await tx.installations.get(owner.id, installation.id)
            assert removed is not None
            assert removed.status is InstallationStatus.REMOVED
            assert removed.removed_at == at(2)
            assert removed.host_port is None
            assert await tx.deployments.get(owner.id, deployment.id) is not None
            assert [i.id for i in await tx.installations.list(owner.id, server.id)] == [kept.id]
            everything = await tx.installations.list(owner.id, server.id, include_removed=True)
            assert {i.id for i in everything} == {installation.id, kept.id}
            assert await tx.installations.remove(owner.id, installation.id, at(3)) is False
            assert (
                await tx.installations.get_by_container_name(
                    owner.id, server.id, installation.container_name
                )
                is None
            )
        again = msgspec.structs.replace(
            installation, id=uuid4(), created_at=at(4), updated_at=at(4)
        )
        await save_installation(uow, owner, again)  # the same name, domain and port: free
        async with uow() as tx:
            page = await tx.deployments.of_installation(owner.id, installation.id, 10)
            assert [d.id for d in page] == [deployment.id]

    async def test_a_domain_taken_on_the_server_is_a_conflict(
        self, uow: SqlUnitOfWorkFactory
    ) -> None:
        """Two installations on one server cannot share a domain."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        domain = f"shop-{tag()}.example.com"
        spec = DeploymentSpec(image="a:1", port=80, domain=domain, env_keys=(), volumes=())
        await save_installation(uow, owner, an_installation(server, spec=spec))
        async with uow() as tx:
            with pytest.raises(Conflict, match=domain):
                await tx.installations.save(owner.id, an_installation(server, spec=spec), {})

    async def test_a_host_port_taken_on_the_server_is_a_conflict(
        self, uow: SqlUnitOfWorkFactory
    ) -> None:
        """Two installations on one server cannot publish the same host port."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        await save_installation(uow, owner, an_installation(server, host_port=8080))
        async with uow() as tx:
            with pytest.raises(Conflict, match="8080"):
                await tx.installations.save(owner.id, an_installation(server, host_port=8080), {})

    async def test_a_container_name_taken_on_the_server_is_a_conflict(
        self, uow: SqlUnitOfWorkFactory
    ) -> None:
        """Two installations on one server cannot share a container name."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        first = await save_installation(uow, owner, an_installation(server))
        async with uow() as tx:
            with pytest.raises(Conflict, match=first.container_name):
                await tx.installations.save(
                    owner.id, an_installation(server, container_name=first.container_name), {}
                )

    async def test_missing_domains_and_host_ports_never_clash(
        self, uow: SqlUnitOfWorkFactory
    ) -> None:
        """Many installations on one server may have no domain and no host port."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        for _ in range(3):
            await save_installation(uow, owner, an_installation(server))
        async with uow() as tx:
            assert len(await tx.installations.list(owner.id, server.id)) == 3

    async def test_the_same_domain_on_another_server_is_fine(
        self, uow: SqlUnitOfWorkFactory
    ) -> None:
        """Domain and host port are unique per server, not globally."""
        owner = await add_user(uow)
        spec = DeploymentSpec(
            image="a:1", port=80, domain=f"d-{tag()}.example.com", env_keys=(), volumes=()
        )
        for _ in range(2):
            server = await add_server(uow, owner)
            await save_installation(uow, owner, an_installation(server, spec=spec, host_port=81))


# --- deployments -----------------------------------------------------------------------------


class TestDeployments:
    async def test_a_deployment_round_trips_with_its_events(
        self, uow: SqlUnitOfWorkFactory
    ) -> None:
        """A stored deployment reads back equal, events oldest first."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        installation = await save_installation(uow, owner, an_installation(server))
        deployment = a_deployment(
            installation,
            at(1),
            events=(
                DeploymentEvent(at=at(1), step="queued", message="Deployment queued."),
                DeploymentEvent(at=at(2), step="pull", message="Pulling shop:1.0."),
            ),
        )
        await add_deployment(uow, owner, deployment)
        async with uow() as tx:
            assert await tx.deployments.get(owner.id, deployment.id) == deployment

    async def test_an_idempotency_key_finds_its_deployment(self, uow: SqlUnitOfWorkFactory) -> None:
        """by_idempotency_key() gives the deployment and the request's fingerprint."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        installation = await save_installation(uow, owner, an_installation(server))
        key = f"key-{tag()}"
        deployment = await add_deployment(uow, owner, a_deployment(installation, at(1)), key=key)
        async with uow() as tx:
            assert await tx.deployments.by_idempotency_key(owner.id, key) == (deployment, "fp")
            assert await tx.deployments.by_idempotency_key(owner.id, f"other-{tag()}") is None

    async def test_a_reused_idempotency_key_is_a_conflict(self, uow: SqlUnitOfWorkFactory) -> None:
        """An owner cannot store two deployments under one Idempotency-Key."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        installation = await save_installation(uow, owner, an_installation(server))
        key = f"key-{tag()}"
        await add_deployment(uow, owner, a_deployment(installation, at(1)), key=key)
        async with uow() as tx:
            with pytest.raises(Conflict, match="Idempotency-Key"):
                await tx.deployments.add(owner.id, a_deployment(installation, at(2)), {}, key, "fp")

    async def test_idempotency_keys_are_per_owner(self, uow: SqlUnitOfWorkFactory) -> None:
        """Two owners may use the same Idempotency-Key."""
        key = f"key-{tag()}"
        for _ in range(2):
            owner = await add_user(uow)
            server = await add_server(uow, owner)
            installation = await save_installation(uow, owner, an_installation(server))
            await add_deployment(uow, owner, a_deployment(installation, at(1)), key=key)

    async def test_active_lists_queued_and_running_deployments(
        self, uow: SqlUnitOfWorkFactory
    ) -> None:
        """active() gives the installation's queued and running deployments, oldest first."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        installation = await save_installation(uow, owner, an_installation(server))
        done = await add_deployment(uow, owner, a_deployment(installation, at(1)))
        await finish(uow, owner, done, DeploymentState.SUCCEEDED)
        running = await add_deployment(
            uow, owner, a_deployment(installation, at(2), state=DeploymentState.RUNNING)
        )
        queued = await add_deployment(uow, owner, a_deployment(installation, at(3)))
        async with uow() as tx:
            assert await tx.deployments.active(owner.id, installation.id) == [running, queued]

    async def test_finish_moves_to_a_final_state_with_an_event(
        self, uow: SqlUnitOfWorkFactory
    ) -> None:
        """finish() sets the state, end time and error, and appends the closing event."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        installation = await save_installation(uow, owner, an_installation(server))
        deployment = await add_deployment(
            uow, owner, a_deployment(installation, at(1), state=DeploymentState.RUNNING)
        )
        closing_event = closing(DeploymentState.FAILED, at(9))
        async with uow() as tx:
            await tx.deployments.finish(
                owner.id,
                deployment.id,
                DeploymentState.FAILED,
                at(9),
                "health: no answer",
                closing_event,
            )
            await tx.commit()
        async with uow() as tx:
            stored = await tx.deployments.get(owner.id, deployment.id)
        assert stored == msgspec.structs.replace(
            deployment,
            state=DeploymentState.FAILED,
            finished_at=at(9),
            error="health: no answer",
            events=(*deployment.events, closing_event),
        )

    async def test_a_finished_deployment_cannot_finish_again(
        self, uow: SqlUnitOfWorkFactory
    ) -> None:
        """Final states are final: a second finish() raises Conflict."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        installation = await save_installation(uow, owner, an_installation(server))
        deployment = await add_deployment(uow, owner, a_deployment(installation, at(1)))
        await finish(uow, owner, deployment, DeploymentState.SUCCEEDED)
        with pytest.raises(Conflict):
            await finish(uow, owner, deployment, DeploymentState.FAILED)

    async def test_queued_only_never_finishes_a_running_deployment(
        self, uow: SqlUnitOfWorkFactory
    ) -> None:
        """finish(queued_only=True) (superseding) refuses a running deployment with a
        WriteConflict and changes nothing; a queued one it finishes."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        installation = await save_installation(uow, owner, an_installation(server))
        running = await add_deployment(
            uow, owner, a_deployment(installation, at(1), state=DeploymentState.RUNNING)
        )
        queued = await add_deployment(uow, owner, a_deployment(installation, at(2)))
        canceled, event = DeploymentState.CANCELED, closing(DeploymentState.CANCELED, at(3))
        async with uow() as tx:
            with pytest.raises(WriteConflict, match="running"):
                await tx.deployments.finish(
                    owner.id, running.id, canceled, at(3), None, event, queued_only=True
                )
            await tx.deployments.finish(
                owner.id, queued.id, canceled, at(3), None, event, queued_only=True
            )
            await tx.commit()
        async with uow() as tx:
            assert await tx.deployments.get(owner.id, running.id) == running
            done = await tx.deployments.get(owner.id, queued.id)
        assert done is not None
        assert done.state is DeploymentState.CANCELED

    async def test_env_values_round_trip(self, uow: SqlUnitOfWorkFactory) -> None:
        """env() gives back the exact values, quotes, dollars, newlines and Unicode included."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        installation = await save_installation(uow, owner, an_installation(server))
        env = {"A": 'it\'s "$HOME" `id` $(x)\n#not a comment', "B": "ünïcødé ✓", "C": ""}
        deployment = await add_deployment(uow, owner, a_deployment(installation, at(1)), env=env)
        async with uow() as tx:
            assert await tx.deployments.env(owner.id, deployment.id) == env

    async def test_secrets_are_never_stored_in_clear(self, tmp_path: Path, box: KeyBox) -> None:
        """Env values and SSH private keys appear nowhere in the database files, WAL included."""
        url = sqlite_url(tmp_path)
        migrate(url)
        engine = create_engine(url)
        uow = SqlUnitOfWorkFactory(engine, box)
        secret = f"hunter2-{uuid4().hex}"
        try:
            owner = await add_user(uow)
            server = await add_server(uow, owner)
            installation = await save_installation(
                uow, owner, an_installation(server), env={"API_KEY": secret}
            )
            deployment = await add_deployment(
                uow, owner, a_deployment(installation, at(1)), env={"API_KEY": secret}
            )
            private_key = f"-----BEGIN OPENSSH PRIVATE KEY----- {uuid4().hex}".encode()
            async with uow() as tx:
                await tx.servers.add(a_server(owner), None, private_key)
                await tx.commit()
            raw = _database_bytes(tmp_path)
            assert b"API_KEY" in raw  # the scan sees the data: keys are stored in clear
            assert secret.encode() not in raw
            assert private_key not in raw
            async with uow() as tx:
                assert await tx.deployments.env(owner.id, deployment.id) == {"API_KEY": secret}
        finally:
            await engine.dispose()
        assert secret.encode() not in _database_bytes(tmp_path)


def _database_bytes(data_dir: Path) -> bytes:
    """The raw bytes of berth.db and its -wal and -shm files."""
    return b"".join(p.read_bytes() for p in sorted(data_dir.glob("berth.db*")))


# --- ownership -------------------------------------------------------------------------------


class World(msgspec.Struct, kw_only=True):
    """One owner's complete set of rows, and a stranger who owns nothing of it."""

    owner: User
    stranger: User
    server: Server
    installation: Installation
    deployment: Deployment
    snapshot: ContainerSnapshot
    key: str


@pytest.fixture
async def world(uow: SqlUnitOfWorkFactory) -> World:
    owner = await add_user(uow)
    stranger = await add_user(uow)
    await add_server(uow, stranger)  # the stranger has a server of their own
    server = await add_server(uow, owner)
    installation = await save_installation(uow, owner, an_installation(server))
    key = f"key-{tag()}"
    deployment = await add_deployment(uow, owner, a_deployment(installation, at(1)), key=key)
    snapshot = ContainerSnapshot(server_id=server.id, observed_at=at(1), containers=())
    async with uow() as tx:
        await tx.servers.save_snapshot(owner.id, snapshot)
        await tx.commit()
    return World(
        owner=owner,
        stranger=stranger,
        server=server,
        installation=installation,
        deployment=deployment,
        snapshot=snapshot,
        key=key,
    )


Read = Callable[[SqlUnitOfWork, UUID, World], Awaitable[object]]

READS: dict[str, Read] = {
    "servers.get": lambda tx, who, w: tx.servers.get(who, w.server.id),
    "servers.lock": lambda tx, who, w: tx.servers.lock(who, w.server.id),
    "servers.list": lambda tx, who, w: tx.servers.list(who),
    "servers.snapshot": lambda tx, who, w: tx.servers.snapshot(who, w.server.id),
    "installations.get": lambda tx, who, w: tx.installations.get(who, w.installation.id),
    "installations.get_by_container_name": lambda tx, who, w: (
        tx.installations.get_by_container_name(who, w.server.id, w.installation.container_name)
    ),
    "installations.list": lambda tx, who, w: tx.installations.list(who, w.server.id),
    "deployments.get": lambda tx, who, w: tx.deployments.get(who, w.deployment.id),
    "deployments.by_idempotency_key": lambda tx, who, w: tx.deployments.by_idempotency_key(
        who, w.key
    ),
    "deployments.active": lambda tx, who, w: tx.deployments.active(who, w.installation.id),
}


def _ids(result: object) -> set[UUID]:
    """The ids of the rows a read returned (a snapshot counts as its server)."""
    items = result if isinstance(result, list) else [] if result is None else [result]
    ids: set[UUID] = set()
    for item in items:
        found = item[0] if isinstance(item, tuple) else item
        ids.add(found.server_id if isinstance(found, ContainerSnapshot) else found.id)
    return ids


class TestEventsAfter:
    async def test_events_after_an_id_by_id_with_the_state(self, uow: SqlUnitOfWorkFactory) -> None:
        """events_after() gives the state and the events over an id, oldest first, each
        with its increasing id; a page at most ``limit`` long."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        installation = await save_installation(uow, owner, an_installation(server))
        deployment = await add_deployment(uow, owner, a_deployment(installation, at(1)))
        later = [DeploymentEvent(at=at(2 + n), step=f"s{n}", message=f"m{n}") for n in range(4)]
        async with uow() as tx:
            for event in later:
                await tx.deployments.add_event(owner.id, deployment.id, event)
            await tx.commit()
        async with uow() as tx:
            found = await tx.deployments.events_after(owner.id, deployment.id, 0, 100)
        assert found is not None
        state, numbered = found
        assert state is DeploymentState.QUEUED
        assert [e for _, e in numbered] == [*deployment.events, *later]
        ids = [i for i, _ in numbered]
        assert ids == sorted(set(ids))
        async with uow() as tx:
            page = await tx.deployments.events_after(owner.id, deployment.id, ids[1], 2)
        assert page == (DeploymentState.QUEUED, numbered[2:4])

    async def test_another_owners_deployment_is_none(self, uow: SqlUnitOfWorkFactory) -> None:
        """events_after() of another owner's (or an unknown) deployment is None."""
        owner, stranger = await add_user(uow), await add_user(uow)
        server = await add_server(uow, owner)
        installation = await save_installation(uow, owner, an_installation(server))
        deployment = await add_deployment(uow, owner, a_deployment(installation, at(1)))
        async with uow() as tx:
            assert await tx.deployments.events_after(stranger.id, deployment.id, 0, 10) is None
            assert await tx.deployments.events_after(owner.id, uuid4(), 0, 10) is None


class TestOwnership:
    @pytest.mark.parametrize("read", READS.values(), ids=READS.keys())
    async def test_another_owners_rows_read_as_missing(
        self, uow: SqlUnitOfWorkFactory, world: World, read: Read
    ) -> None:
        """Every owner-taking read gives None or nothing for another owner's rows."""
        mine = {world.server.id, world.installation.id, world.deployment.id}
        async with uow() as tx:
            assert _ids(await read(tx, world.owner.id, world)) & mine
            assert not _ids(await read(tx, world.stranger.id, world)) & mine

    async def test_a_stranger_cannot_read_env_values(
        self, uow: SqlUnitOfWorkFactory, world: World
    ) -> None:
        """deployments.env() of another owner's deployment raises NotFound."""
        async with uow() as tx:
            with pytest.raises(NotFound):
                await tx.deployments.env(world.stranger.id, world.deployment.id)

    async def test_a_stranger_cannot_finish_a_deployment(
        self, uow: SqlUnitOfWorkFactory, world: World
    ) -> None:
        """finish() of another owner's deployment raises NotFound and changes nothing."""
        async with uow() as tx:
            with pytest.raises(NotFound):
                await tx.deployments.finish(
                    world.stranger.id,
                    world.deployment.id,
                    DeploymentState.CANCELED,
                    at(2),
                    None,
                    closing(DeploymentState.CANCELED, at(2)),
                )
            await tx.commit()
        async with uow() as tx:
            assert await tx.deployments.get(world.owner.id, world.deployment.id) == (
                world.deployment
            )

    async def test_a_stranger_cannot_deploy_to_an_installation(
        self, uow: SqlUnitOfWorkFactory, world: World
    ) -> None:
        """deployments.add() on another owner's installation raises NotFound."""
        async with uow() as tx:
            with pytest.raises(NotFound):
                await tx.deployments.add(
                    world.stranger.id, a_deployment(world.installation, at(3)), {}
                )

    async def test_a_stranger_cannot_overwrite_or_add_installations(
        self, uow: SqlUnitOfWorkFactory, world: World
    ) -> None:
        """installations.save() on another owner's server or installation raises NotFound."""
        hijack = msgspec.structs.replace(world.installation, name="hijacked", updated_at=at(5))
        async with uow() as tx:
            with pytest.raises(NotFound):
                await tx.installations.save(world.stranger.id, hijack, {"API_KEY": "stolen"})
        async with uow() as tx:
            with pytest.raises(NotFound):
                await tx.installations.save(world.stranger.id, an_installation(world.server), {})
        stored = await installation_of(uow, world.owner, world.installation.id)
        assert stored.name == world.installation.name

    async def test_a_stranger_cannot_delete_an_installation(
        self, uow: SqlUnitOfWorkFactory, world: World
    ) -> None:
        """installations.remove() of another owner's installation is False and removes nothing."""
        async with uow() as tx:
            removed = await tx.installations.remove(world.stranger.id, world.installation.id, at(9))
            assert removed is False
            await tx.commit()
        async with uow() as tx:
            assert await tx.installations.get(world.owner.id, world.installation.id) is not None
            assert await tx.deployments.get(world.owner.id, world.deployment.id) is not None

    async def test_a_stranger_cannot_write_a_snapshot(
        self, uow: SqlUnitOfWorkFactory, world: World
    ) -> None:
        """save_snapshot() for another owner's server writes nothing."""
        forged = ContainerSnapshot(server_id=world.server.id, observed_at=at(9), containers=())
        async with uow() as tx:
            await tx.servers.save_snapshot(world.stranger.id, forged)
            await tx.commit()
        async with uow() as tx:
            assert await tx.servers.snapshot(world.owner.id, world.server.id) == world.snapshot


# --- a use case end to end -------------------------------------------------------------------


class TestWithTheCore:
    async def test_deploy_and_list_installations_run_on_the_sql_store(
        self, uow: SqlUnitOfWorkFactory, box: KeyBox
    ) -> None:
        """Deploy queues a deployment and a redeploy supersedes it, as the core expects."""

        class Clock:
            def now(self) -> datetime:
                return datetime.now(UTC)

        owner = await add_user(uow)
        server = await add_server(uow, owner)
        deploy = QueueDeployment(uow, Clock(), box)
        raw = {"server_id": str(server.id), "name": "Shop", "image": "shop:1.0", "port": 8080}
        first = await deploy(Actor.personal(owner), parse_deploy(raw))
        second = await deploy(Actor.personal(owner), parse_deploy(raw | {"image": "shop:1.1"}))
        listed = await ListInstallations(uow, Clock())(
            Actor.personal(owner), c.ListInstallations(server_id=server.id)
        )
        assert [i.id for i in listed.installations] == [first.installation.id]
        [installation] = listed.installations
        assert installation.spec.image == "shop:1.1"
        assert installation.status is InstallationStatus.DEPLOYING
        assert installation.last_deployment is not None
        assert installation.last_deployment.id == second.deployment.id
        async with uow() as tx:
            superseded = await tx.deployments.get(owner.id, first.deployment.id)
        assert superseded is not None
        assert superseded.state is DeploymentState.CANCELED

    @pytest.fixture
    def deploy(self, uow: SqlUnitOfWorkFactory, box: KeyBox) -> QueueDeployment:
        return QueueDeployment(uow, _WallClock(), box)

    async def test_concurrent_retries_with_one_key_deploy_once(
        self, uow: SqlUnitOfWorkFactory, deploy: QueueDeployment
    ) -> None:
        """Deploys with one Idempotency-Key at once: one deployment, every caller gets it."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        raw = {"server_id": str(server.id), "name": "Idem2", "image": "nginx:1", "port": 6010}
        cmd = parse_deploy(raw, idempotency_key=f"key-{tag()}")
        results = await asyncio.wait_for(
            asyncio.gather(*(deploy(Actor.personal(owner), cmd) for _ in range(CONCURRENT))), 60
        )
        assert len({r.deployment.id for r in results}) == 1
        assert sorted(r.replayed for r in results) == [False] + [True] * (CONCURRENT - 1)
        async with uow() as tx:
            [installation] = await tx.installations.list(owner.id, server.id)
            assert len(await tx.deployments.recent(owner.id, server.id, 100)) == 1
        assert installation.status is InstallationStatus.DEPLOYING

    @pytest.mark.parametrize("existing", [False, True], ids=["new name", "existing name"])
    @pytest.mark.parametrize("engines", [1, 2], ids=["one engine", "two engines"])
    async def test_concurrent_deploys_of_one_name_take_turns(
        self,
        uow: SqlUnitOfWorkFactory,
        db_url: str,
        box: KeyBox,
        existing: bool,
        engines: int,
    ) -> None:
        """Deploys of one name at once, from one process or two: each is queued and
        supersedes the one before, as if they had come one after the other."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        raw = {"server_id": str(server.id), "name": "Idem2", "image": "nginx:1", "port": 6010}
        other = create_engine(db_url) if engines == 2 else uow.engine
        try:
            deploys = [
                QueueDeployment(uow, _WallClock(), box),
                QueueDeployment(SqlUnitOfWorkFactory(other, box), _WallClock(), box),
            ]
            earlier = (
                [await deploys[0](Actor.personal(owner), parse_deploy(raw))] if existing else []
            )
            results = earlier + list(
                await asyncio.wait_for(
                    asyncio.gather(
                        *(
                            deploys[n % 2](Actor.personal(owner), parse_deploy(raw))
                            for n in range(CONCURRENT)
                        )
                    ),
                    60,
                )
            )
        finally:
            if other is not uow.engine:
                await other.dispose()
        assert len({r.installation.id for r in results}) == 1
        async with uow() as tx:
            [installation] = await tx.installations.list(owner.id, server.id)
            found = await tx.deployments.recent(owner.id, server.id, 100)
        assert {d.id for d in found} == {r.deployment.id for r in results}
        states = sorted(d.state for d in found)
        assert states.count(DeploymentState.QUEUED) == 1, states
        assert states.count(DeploymentState.CANCELED) == len(results) - 1, states
        # Each canceled one names another deployment as its successor, none twice.
        successors = [d.error for d in found if d.state is DeploymentState.CANCELED]
        assert len(set(successors)) == len(successors)
        assert installation.last_deployment is not None
        assert installation.last_deployment.state is DeploymentState.QUEUED


CONCURRENT = 8


class _WallClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class TestStoreStats:
    async def test_counts_states_statuses_and_the_oldest_queued(
        self, new_db_url: str, box: KeyBox
    ) -> None:
        """Every state and status counted (zero when none), the queue's depth and its
        oldest entry, as the database holds them."""
        from berth.adapters.sql import SqlStoreStats

        migrate(new_db_url)
        engine = create_engine(new_db_url)
        uow = SqlUnitOfWorkFactory(engine, box)
        stats = SqlStoreStats(engine)
        try:
            empty = await stats.counts()
            assert empty.queued == 0
            assert empty.oldest_queued_at is None
            assert set(empty.deployments.values()) == {0}
            assert len(empty.deployments) == len(DeploymentState)
            assert set(empty.servers.values()) == {0}
            owner = await add_user(uow)
            server = await add_server(uow, owner)
            await add_server(uow, owner, status=ServerStatus.ONLINE)
            installation = await save_installation(uow, owner, an_installation(server))
            oldest = await add_deployment(uow, owner, a_deployment(installation, at(5)))
            await add_deployment(uow, owner, a_deployment(installation, at(9)))
            done = await add_deployment(uow, owner, a_deployment(installation, at(1)))
            await finish(uow, owner, done, DeploymentState.SUCCEEDED)
            failed = await add_deployment(uow, owner, a_deployment(installation, at(2)))
            await finish(uow, owner, failed, DeploymentState.FAILED)
            counts = await stats.counts()
            assert counts.queued == 2
            assert counts.oldest_queued_at == oldest.created_at
            assert counts.deployments[DeploymentState.QUEUED] == 2
            assert counts.deployments[DeploymentState.SUCCEEDED] == 1
            assert counts.deployments[DeploymentState.FAILED] == 1
            assert counts.deployments[DeploymentState.CANCELED] == 0
            assert counts.servers == {
                ServerStatus.PENDING: 0,
                ServerStatus.ONLINE: 1,
                ServerStatus.OFFLINE: 1,
                ServerStatus.HOST_KEY_MISMATCH: 0,
                ServerStatus.REMOVED: 0,
            }
        finally:
            await engine.dispose()


class TestRegistries:
    """``SqlRegistryRepository``: per owner, one per host, the password sealed."""

    async def test_round_trip_sealed_and_owned(
        self, uow: SqlUnitOfWorkFactory, engine: AsyncEngine
    ) -> None:
        """Listed without the password, stored sealed, unsealed only by auth; owned."""
        owner, stranger = await add_user(uow), await add_user(uow)
        host = f"r-{tag()}.example.com"
        registry = Registry(id=uuid4(), owner_id=owner.id, host=host, username="bot", created_at=T0)
        async with uow() as tx:
            await tx.registries.add(registry, "s3cret-pw")
            await tx.commit()
        async with uow() as tx:
            assert await tx.registries.list(owner.id) == [registry]
            assert await tx.registries.by_host(owner.id, host) == registry
            assert await tx.registries.list(stranger.id) == []
            assert await tx.registries.by_host(stranger.id, host) is None
            assert await tx.registries.auth(stranger.id, host) is None
            assert await tx.registries.auth(owner.id, host) == RegistryAuth(
                host=host, username="bot", password="s3cret-pw"
            )
            assert not await tx.registries.delete(stranger.id, registry.id)
        async with engine.connect() as conn:
            sealed = (
                await conn.execute(
                    text("SELECT password_sealed FROM registry WHERE host = :h"), {"h": host}
                )
            ).scalar_one()
        assert b"s3cret-pw" not in bytes(sealed)
        async with uow() as tx:
            assert await tx.registries.delete(owner.id, registry.id)
            await tx.commit()
        async with uow() as tx:
            assert await tx.registries.list(owner.id) == []

    async def test_one_per_host_per_owner(self, uow: SqlUnitOfWorkFactory) -> None:
        """The same host twice for one owner is a WriteConflict; another owner may have it."""
        owner, other = await add_user(uow), await add_user(uow)
        host = f"r-{tag()}.example.com"

        def entry(user: User) -> Registry:
            return Registry(id=uuid4(), owner_id=user.id, host=host, username="u", created_at=T0)

        async with uow() as tx:
            await tx.registries.add(entry(owner), "a")
            await tx.registries.add(entry(other), "b")
            await tx.commit()
        async with uow() as tx:
            with pytest.raises(WriteConflict):
                await tx.registries.add(entry(owner), "c")
