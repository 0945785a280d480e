"""Teams, roles and scoped tokens on the SQL store (SQLite and PostgreSQL): the
authorization matrix of ``tests/unit/authz_matrix.py``, and the migration that gives every
user a personal team holding what they owned."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import msgspec
import pytest
import sqlalchemy as sa
from alembic import command

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))

import builders
from authz_matrix import COMMANDS, NEEDS, allowed, build_world, run_cell
from berth.adapters.secrets import KeyBox
from berth.adapters.sql import (
    SqlUnitOfWorkFactory,
    alembic_config,
    create_engine,
    migrate,
)
from berth.adapters.sql.tables import metadata
from berth.core import commands as c
from berth.core.access import Actor, Role, TokenScope
from berth.core.errors import NotFound
from berth.core.models import (
    InstallationStatus,
    Registry,
    ServerStatus,
    User,
    Webhook,
    WebhookEvent,
)
from berth.core.outbound import OutboundGuard
from berth.core.unit_of_work import EventHandlers
from berth.core.use_cases.deploy import spec_of
from berth.entrypoints.bootstrap import Adapters, build_bus
from fakes import FakeClock, FakeGateway, FakeHasher, FakeKeys, FakeResolver
from infra import DATABASES, USER_ACCOUNT, database_at, migrated_database
from sql_support import engine_on, migrate_twice
from sqlalchemy.ext.asyncio import AsyncEngine
from team_scenarios import audit_filters_keep_what_matches

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", params=DATABASES)
def db_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """One migrated database per backend for the matrix (each cell makes its own users
    and teams, which the scope rule keeps apart)."""
    where = tmp_path_factory.mktemp("teams")
    with migrated_database(request.param, where, "berth_teams") as url:
        yield url


def _bus(engine: AsyncEngine, clock: FakeClock | None = None) -> Any:
    box = KeyBox(os.urandom(32))
    events = EventHandlers()
    adapters = Adapters(
        uow=SqlUnitOfWorkFactory(engine, box, events),
        clock=clock or FakeClock(),
        hasher=FakeHasher(),
        box=box,
        keys=FakeKeys(),
        gateway=FakeGateway(),
        outbound=OutboundGuard(FakeResolver()),
    )
    return build_bus(adapters, events=events)


_SKIPPED = {"audit_entry", "rate_limit", "alembic_version"}


def _snapshot(engine: AsyncEngine, users: list[UUID], teams: list[UUID]) -> Any:
    """Every row of the world's users and teams, in every table but the audit log."""

    async def read() -> object:
        found: dict[str, list[tuple[Any, ...]]] = {}
        async with engine.connect() as conn:
            for table in metadata.sorted_tables:
                if table.name in _SKIPPED:
                    continue
                cols = table.c
                if "owner_id" in cols:
                    where = cols.owner_id.in_(teams)
                elif "team_id" in cols:
                    where = cols.team_id.in_(teams)
                elif "user_id" in cols:
                    where = cols.user_id.in_(users)
                elif table.name == "team":
                    where = cols.id.in_(teams)
                elif table.name == "user_account":
                    where = cols.id.in_(users)
                else:
                    continue
                rows = await conn.execute(sa.select(table).where(where))
                found[table.name] = sorted(tuple(map(repr, r)) for r in rows)
        return found

    return read


async def _teams_of(bus: Any, user: User) -> list[UUID]:
    return [t.id for t in await bus.handle(c.ListTeams(), user)]


class _CellSnapshot:
    """``run_cell``'s snapshot for one cell: the first read is ``known`` when given (what
    the store is known to hold: the last read of the cell before, a refusal that changed
    nothing), each later one reads the store again; ``last`` is what it returned last.

    Only a refusal reads (before and after), and a refusal must leave the store as it
    found it, so the next refusal's "before" is this one's "after": one read of the store
    instead of two. Had anything changed the store between the two cells, that cell's
    after-read would differ from the known "before" and fail it, so the check is no weaker.
    """

    def __init__(self, read: Callable[[], Awaitable[object]], known: object | None) -> None:
        self._read, self._known = read, known
        self.last: object | None = None

    async def __call__(self) -> object:
        found, self._known = self._known, None
        if found is None:
            found = await self._read()
        self.last = found
        return found


@pytest.mark.parametrize("limited", [False, True], ids=["all servers", "one server"])
@pytest.mark.parametrize("scope", list(TokenScope), ids=str)
@pytest.mark.parametrize("role", list(Role), ids=str)
async def test_the_matrix_on_sql(
    engine: AsyncEngine, role: Role, scope: TokenScope, limited: bool
) -> None:
    """Every command by role by scope on the SQL store: allowed as SPEC.md says, else a 403
    that changes no row but adds one ``denied`` audit entry."""
    world = None
    read: Callable[[], Awaitable[object]]  # the store's state for the world's users and teams
    known: object | None = None  # what the store holds, when the cell before read it
    for kind in COMMANDS:
        # A command that changes nothing (a read, or a change SPEC.md refuses this cell:
        # run_cell checks it changed nothing) leaves the world as it found it for the
        # next; an allowed change gets a world of its own.
        expect = allowed(NEEDS[kind], role, scope, limited=limited)
        changes = kind.audited is not None and expect
        if world is None or changes:
            world = await build_world(_bus(engine), role, scope, limited=limited)
            # The world's users and teams: what a command of this world could change.
            teams = await _teams_of(world.bus, world.owner)
            read = _snapshot(engine, [world.owner.id, world.member.id, world.viewer_id], teams)
            known = None
        snapshot = _CellSnapshot(read, known)
        await run_cell(world, kind, snapshot, limited=limited)
        # A refusal left the store as run_cell last read it; anything else may not have.
        known = None if expect else snapshot.last
        if changes:
            world = None


async def test_a_limited_tokens_other_server_is_not_found_on_sql(engine: AsyncEngine) -> None:
    """Through a token limited to one server, the team's other server and what is on it
    are 404, in the store's queries."""
    bus = _bus(engine)
    world = await build_world(bus, Role.OWNER, TokenScope.DEPLOY, limited=True)
    assert [s.id for s in await bus.handle(c.ListServers(), world.actor)] == [world.server_id]
    for cmd in (
        c.GetServer(server_id=world.other_server_id),
        c.ListInstallations(server_id=world.other_server_id),
        c.parse_deploy({"server_id": str(world.other_server_id), "name": "xy", "image": "xy:1"}),
    ):
        with pytest.raises(NotFound):
            await bus.handle(cmd, world.actor)


async def test_a_users_personal_team_comes_first_on_sql(engine: AsyncEngine) -> None:
    """A user's teams list their personal team first, then the others oldest first, each
    with their role, though a team they joined is older than their account."""
    clock = FakeClock()
    bus = _bus(engine, clock)
    ada = await bus.handle(c.CreateUser(email=f"ada-{uuid4().hex[:8]}@example.com", password=_PW))
    early = await bus.handle(c.CreateTeam(name="early"), ada)
    clock.advance(60)
    bob = await bus.handle(c.CreateUser(email=f"bob-{uuid4().hex[:8]}@example.com", password=_PW))
    invited = await bus.handle(
        c.InviteMember(team_id=early.id, email=bob.email, role=Role.VIEWER), ada
    )
    await bus.handle(c.AcceptInvitation(token=invited.token), bob)
    clock.advance(60)
    late = await bus.handle(c.CreateTeam(name="late"), bob)
    teams = await bus.handle(c.ListTeams(), bob)
    assert [(t.id, t.role) for t in teams] == [
        (bob.id, Role.OWNER),
        (early.id, Role.VIEWER),
        (late.id, Role.OWNER),
    ]


async def test_audit_filters_on_sql(engine: AsyncEngine) -> None:
    """The audit log's filters keep what they keep on the fake store, paged alike."""
    clock = FakeClock()
    await audit_filters_keep_what_matches(_bus(engine, clock), clock)


_PW = "correct horse battery staple"


# --- the migration ---------------------------------------------------------------------

_T0 = FakeClock().now()


@pytest.fixture(params=DATABASES)
def database_at_0008(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database migrated to revision 0008, before teams."""
    with database_at(request.param, "0008", tmp_path) as url:
        yield url


HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHk2hJxkfVzN2w2Ccqq3U2ywCyjQDIRr0eSFoLHaBfkd"


#: Tables today's repositories write with columns that later revisions added.
_LATER_COLUMNS_OF = ("installation", "deployment", "webhook")


async def _later_columns(engine: AsyncEngine) -> list[tuple[str, str]]:
    """Add the columns of ``_LATER_COLUMNS_OF`` that today's schema has and this old
    database lacks, so today's repositories can write the old rows; ``(table, column)``
    of each added, which ``_drop_columns`` takes away again before the revisions under
    test run (they add them as on any 0008 database)."""
    added: list[tuple[str, str]] = []
    async with engine.begin() as conn:
        for table in _LATER_COLUMNS_OF:
            present = await conn.run_sync(
                lambda sync, t=table: {col["name"] for col in sa.inspect(sync).get_columns(t)}
            )
            for column in metadata.tables[table].columns:
                if column.name not in present:
                    kind = column.type.compile(conn.dialect)
                    await conn.execute(
                        sa.text(f'ALTER TABLE {table} ADD COLUMN "{column.name}" {kind}')
                    )
                    added.append((table, column.name))
    return added


async def _drop_columns(engine: AsyncEngine, added: list[tuple[str, str]]) -> None:
    async with engine.begin() as conn:
        for table, column in added:
            await conn.execute(sa.text(f'ALTER TABLE {table} DROP COLUMN "{column}"'))


async def _populate(url: str, box: KeyBox) -> dict[UUID, dict[str, UUID]]:
    """Two users, each owning (as revision 0008 stored it: ``owner_id`` = the user) a
    server, an app on it with a deployment, a registry and a webhook."""
    engine = create_engine(url)
    owned: dict[UUID, dict[str, UUID]] = {}
    added = await _later_columns(engine)
    try:
        uow = SqlUnitOfWorkFactory(engine, box)
        for tag in ("ada", "bob"):
            user = builders.a_user(email=f"{tag}-{uuid4().hex[:6]}@example.com", created_at=_T0)
            async with engine.begin() as conn:
                await conn.execute(sa.insert(USER_ACCOUNT).values(msgspec.structs.asdict(user)))
            server = builders.a_server(
                owner_id=user.id,
                name=f"{tag}-web",
                status=ServerStatus.OFFLINE,
                created_at=_T0,
                host_keys=(HOST_KEY,),
            )
            spec = c.parse_deploy(
                {"server_id": str(server.id), "name": "shop", "image": "shop:1.0"}
            )
            installation = builders.an_installation(
                server,
                name="shop",
                spec=spec_of(spec),
                host_port=3000,
                status=InstallationStatus.DEPLOYING,
                created_at=_T0,
                updated_at=_T0,
            )
            deployment = builders.a_deployment(installation, created_at=_T0)
            registry = Registry(
                id=uuid4(),
                owner_id=user.id,
                host="registry.example.com",
                username="ci",
                created_at=_T0,
            )
            hook = Webhook(
                id=uuid4(),
                owner_id=user.id,
                url="https://hooks.example.com/x",
                events=(WebhookEvent.SERVER_ONLINE,),
                created_at=_T0,
            )
            async with uow() as tx:
                await tx.servers.add(server, None)
                await tx.installations.save(user.id, installation, {"KEY": "v"})
                await tx.deployments.add(user.id, deployment, {"KEY": "v"})
                await tx.registries.add(registry, "s3cret")
                await tx.webhooks.add(hook, "whsec_x")
                await tx.commit()
            owned[user.id] = {
                "server": server.id,
                "installation": installation.id,
                "deployment": deployment.id,
                "registry": registry.id,
                "webhook": hook.id,
            }
    finally:
        await _drop_columns(engine, added)
        await engine.dispose()
    return owned


class TestMigration:
    async def test_a_populated_database_moves_into_personal_teams(
        self, database_at_0008: str
    ) -> None:
        """Migrating a 0008 database that holds two users' servers, apps, deployments,
        registries and webhooks gives each user a personal team they own, holding what
        they owned and nothing of the other's; the owned rows now refer to teams; a second
        migration changes nothing."""
        url = database_at_0008
        box = KeyBox(os.urandom(32))
        owned = await _populate(url, box)
        await migrate_twice(url, box)
        async with engine_on(url) as engine:
            async with engine.connect() as conn:
                keys = await conn.run_sync(
                    lambda sync: {
                        fk["referred_table"] for fk in sa.inspect(sync).get_foreign_keys("server")
                    }
                )
            assert keys == {"team"}
            bus = _bus(engine)
            for user_id, things in owned.items():
                async with SqlUnitOfWorkFactory(engine, box)() as tx:
                    user = await tx.users.get(user_id)
                assert user is not None
                (team,) = await bus.handle(c.ListTeams(), user)
                assert (team.id, team.personal_of, team.role) == (user.id, user.id, Role.OWNER)
                me = Actor.personal(user)
                assert [s.id for s in await bus.handle(c.ListServers(), me)] == [things["server"]]
                listing = await bus.handle(c.ListInstallations(server_id=things["server"]), me)
                assert [i.id for i in listing.installations] == [things["installation"]]
                found = await bus.handle(c.GetDeployment(deployment_id=things["deployment"]), me)
                assert found.id == things["deployment"]
                assert [r.id for r in await bus.handle(c.ListRegistries(), me)] == [
                    things["registry"]
                ]
                assert [w.id for w in await bus.handle(c.ListWebhooks(), me)] == [things["webhook"]]
                members = await bus.handle(c.ListMembers(team_id=user.id), me)
                assert [(m.user_id, m.role) for m in members] == [(user.id, Role.OWNER)]
                others = [t for u, t in owned.items() if u != user_id]
                for other in others:
                    with pytest.raises(NotFound):
                        await bus.handle(c.GetServer(server_id=other["server"]), me)

    async def test_downgrading_gives_users_their_things_back(self, database_at_0008: str) -> None:
        """Downgrading to 0008 leaves each user owning what their personal team held."""
        url = database_at_0008
        box = KeyBox(os.urandom(32))
        owned = await _populate(url, box)
        await asyncio.to_thread(migrate, url, box)
        await asyncio.to_thread(command.downgrade, alembic_config(url, box), "0008")
        engine = create_engine(url)
        try:
            async with engine.connect() as conn:
                rows = (await conn.execute(sa.text("SELECT id, owner_id FROM server"))).all()
                tables = await conn.run_sync(lambda sync: sa.inspect(sync).get_table_names())
            assert {(UUID(str(r.id)), UUID(str(r.owner_id))) for r in rows} == {
                (things["server"], user_id) for user_id, things in owned.items()
            }
            assert "team" not in tables
        finally:
            await engine.dispose()
