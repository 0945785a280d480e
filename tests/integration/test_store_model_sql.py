"""The store state machine of ``tests/unit/store_model.py`` against the SQL adapter.

The same rules and invariants that the in-memory fake passes must hold for
SQLite on disk, and for PostgreSQL (a database on the server of
``BERTH_TEST_POSTGRES_URL``; skipped without it), so the fake stays honest. One
migrated database per backend serves every example: each example creates its own
users and servers, and the ownership rule keeps them apart.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar
from uuid import UUID

import pytest
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))

from berth.adapters.secrets import KeyBox
from berth.adapters.sql import SqlUnitOfWorkFactory, create_engine, migrate, sqlite_url
from berth.adapters.sql.tables import DeploymentRow
from fakes import FakeClock
from infra import postgres_database
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine
from store_model import StoreMachine

pytestmark = pytest.mark.integration


class SqlBackend:
    """SqlUnitOfWorkFactory over a fresh engine (engines belong to one event loop)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.box = KeyBox(os.urandom(32))
        self.uow = SqlUnitOfWorkFactory(engine, self.box)

    async def start(self, owner_id: UUID, deployment_id: UUID, clock: FakeClock) -> None:
        """The worker's claim, done with a plain UPDATE until a port offers it."""
        d = DeploymentRow.__table__.c
        async with self.engine.begin() as conn:
            result = await conn.execute(
                update(DeploymentRow.__table__)
                .where(d.id == deployment_id, d.owner_id == owner_id, d.state == "queued")
                .values(state="running", step="pull", started_at=clock.now())
            )
        assert result.rowcount == 1

    async def close(self) -> None:
        await self.engine.dispose()


class SqlStoreMachine(StoreMachine):
    url: ClassVar[str] = ""  # set by the fixture below, once per module

    @classmethod
    async def make_backend(cls) -> SqlBackend:
        assert cls.url, "the fixture that migrates its database did not run"
        return SqlBackend(create_engine(cls.url))


class PostgresStoreMachine(SqlStoreMachine):
    url: ClassVar[str] = ""  # set by the fixture below, once per module


@pytest.fixture(scope="module", autouse=True)
def migrated_database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = sqlite_url(tmp_path_factory.mktemp("store-model"))
    migrate(url)
    SqlStoreMachine.url = url
    yield url
    SqlStoreMachine.url = ""


@pytest.fixture(scope="module")
def migrated_postgres_database() -> Iterator[str]:
    with postgres_database("berth_store_model") as url:
        migrate(url)
        PostgresStoreMachine.url = url
        yield url
        PostgresStoreMachine.url = ""


SETTINGS = settings(
    settings.default, max_examples=min(settings.default.max_examples, 30), stateful_step_count=20
)
TestSqlStore = SqlStoreMachine.TestCase
TestSqlStore.settings = SETTINGS
TestPostgresStore = pytest.mark.usefixtures("migrated_postgres_database")(
    PostgresStoreMachine.TestCase
)
TestPostgresStore.settings = SETTINGS
