"""Bring a database to the current schema: Alembic's revisions (configured in code, no
alembic.ini) where there is something to migrate, and no Alembic where there is not.

An empty database gets the current schema at once: ``tables.metadata`` with the marks
and triggers the revisions leave, stamped at :data:`HEAD`; a database at ``HEAD`` only
gets its triggers checked. Only one in between goes through Alembic, which is then
imported. Measured: importing Alembic and replaying every revision was ~0.7 s of CPU
of a new ``berth serve``'s ~2 s; ``test_sql_store.py`` proves that both roads make the
same database, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa
from berth.core.ports import SecretBox
from sqlalchemy import Connection, pool

from . import dialect
from .engine import create_engine
from .marks import MARKS, SERVER_TRIGGERS, ensure_data_triggers
from .tables import metadata

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = ["HEAD", "MIGRATIONS_DIR", "alembic_config", "migrate"]

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"

#: The newest revision in ``migrations/versions`` (a unit test checks Alembic agrees): a
#: new revision changes it, and ``tables.py`` with it.
HEAD = "0015"

#: Alembic's own table, as Alembic makes it.
_VERSION = sa.Table(
    "alembic_version",
    sa.MetaData(),
    sa.Column("version_num", sa.String(32), nullable=False),
    sa.PrimaryKeyConstraint("version_num", name="alembic_version_pkc"),
)


def alembic_config(url: str, box: SecretBox | None = None) -> Config:
    """An Alembic ``Config`` for berth's migrations against ``url`` (an async driver URL).

    ``box`` is what a migration that seals values kept in the clear until then seals
    them with (``config.attributes["box"]``). Useful beyond :func:`migrate` for other
    Alembic commands, e.g. ``alembic.command.current(alembic_config(url))``.
    """
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # Passed as an attribute, not an ini option: URLs may contain '%' (configparser).
    config.attributes["url"] = url
    if box is not None:
        config.attributes["box"] = box
    return config


def migrate(url: str, box: SecretBox | None = None) -> None:
    """Upgrade the database at ``url`` to the latest schema, creating it if needed.

    ``box`` seals what a migration seals (webhook URLs, revision 0008): needed only
    when there is something to seal; without it such a migration stops, changing nothing.

    Idempotent: on an up-to-date database it changes nothing. Safe when several
    processes start at once against the same database: the first one migrates
    while the others wait for it, then find nothing to do. Blocks until done;
    callable from a thread that runs an event loop (it then migrates in another
    thread, as it drives an event loop of its own).
    """
    dialect.ensure_database_dir(url)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        _migrate(url, box)
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="berth-migrate") as worker:
        worker.submit(_migrate, url, box).result()


def _migrate(url: str, box: SecretBox | None) -> None:
    if asyncio.run(_without_alembic(url)):
        return
    from alembic import command

    command.upgrade(alembic_config(url, box), "head")


async def _without_alembic(url: str) -> bool:
    """Whether the database needed no revision: empty (then made, under the migration
    lock that Alembic takes too) or at :data:`HEAD` already."""
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as connection, dialect.migration_lock(connection):
            return await connection.run_sync(_made_or_current)
    finally:
        await engine.dispose()


def _made_or_current(connection: Connection) -> bool:
    tables = set(sa.inspect(connection).get_table_names())
    if _VERSION.name in tables:
        if connection.scalar(sa.select(_VERSION.c.version_num)) != HEAD:
            return False
        ensure_data_triggers(connection)  # as every Alembic run ends (``env.py``)
        return True
    if tables & set(metadata.tables):  # berth's tables without a version: Alembic's to judge
        return False
    metadata.create_all(connection)
    store_mark = metadata.tables["store_mark"]
    connection.execute(sa.insert(store_mark), [{"name": name} for name in MARKS])
    if connection.dialect.name == "sqlite":
        for statement in SERVER_TRIGGERS.values():
            connection.exec_driver_sql(statement)
    ensure_data_triggers(connection)
    _VERSION.create(connection)
    connection.execute(sa.insert(_VERSION).values(version_num=HEAD))
    return True
