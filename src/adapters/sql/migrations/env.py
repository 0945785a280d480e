"""Alembic's entry point, run by ``berth.adapters.sql.migrate`` (there is no alembic.ini).

The database URL comes from ``config.attributes["url"]``. Migrations run over
an async engine (``connection.run_sync``), the same way for SQLite and
PostgreSQL, inside one transaction that holds the migration lock, so several
processes starting at once migrate the database exactly once. A caller may
instead hand over its own connection in ``config.attributes["connection"]``.
"""

from __future__ import annotations

import asyncio

from alembic import context
from berth.adapters.sql import dialect
from berth.adapters.sql.engine import create_engine
from berth.adapters.sql.marks import ensure_data_triggers
from berth.adapters.sql.tables import metadata
from sqlalchemy import pool
from sqlalchemy.engine import Connection

config = context.config


def _url() -> str:
    url = config.attributes.get("url") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("No database URL: run migrations through berth.adapters.sql.migrate.")
    return str(url)


def run_migrations_offline() -> None:
    """Emit the SQL instead of running it (``alembic upgrade --sql``)."""
    context.configure(url=_url(), target_metadata=metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def do_run_migrations(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        transactional_ddl=True,
    )
    with context.begin_transaction():
        context.run_migrations()
        ensure_data_triggers(connection)


async def run_async_migrations() -> None:
    engine = create_engine(_url(), poolclass=pool.NullPool)
    try:
        async with engine.connect() as connection, dialect.migration_lock(connection):
            await connection.run_sync(do_run_migrations)
    finally:
        await engine.dispose()


def run_migrations_online() -> None:
    shared = config.attributes.get("connection")
    if shared is not None:
        do_run_migrations(shared)
    else:
        asyncio.run(run_async_migrations())


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
