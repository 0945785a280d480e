"""Everything that differs between SQLite and PostgreSQL, in one place.

The rest of the adapter writes portable SQLAlchemy; where a dialect needs its
own statement or setting (SQLite pragmas, SQLite's single writer, upserts, the
migration lock, telling which unique constraint a write broke), it asks this
module. The worker's job claim (``FOR UPDATE SKIP LOCKED`` on PostgreSQL, a
conditional UPDATE on SQLite) and the lock a deploy takes on its server
(``FOR NO KEY UPDATE``, ``BEGIN IMMEDIATE``) belong here too.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import (
    CursorResult,
    PrimaryKeyConstraint,
    Table,
    UniqueConstraint,
    event,
    make_url,
    text,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql import FromClause, Select
from sqlalchemy.sql.dml import Insert

__all__ = [
    "SQLITE_PRAGMAS",
    "DataVersion",
    "claimable",
    "data_version_reader",
    "ensure_database_dir",
    "install_connection_settings",
    "migration_lock",
    "read_locked",
    "single_writer",
    "upsert_from_select",
    "violated_unique",
]

#: Applied to every new SQLite connection, in this order. ``busy_timeout`` comes
#: first so that switching the journal mode waits for other processes instead of
#: failing; WAL lets readers proceed while one writer writes.
SQLITE_PRAGMAS: tuple[str, ...] = (
    "PRAGMA busy_timeout=5000",
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=NORMAL",
    "PRAGMA foreign_keys=ON",
)

# Any constant works; it only has to be the same in every berth process.
_PG_MIGRATION_LOCK = 0x62657274  # "bert"

#: Milliseconds a migration waits for SQLite's write lock (PostgreSQL's advisory lock
#: waits without end): another process may be migrating, which takes far longer than
#: the few ms a request holds the lock (``busy_timeout``), the more so on a busy machine.
SQLITE_MIGRATION_WAIT_MS = 600_000

_SQLITE_UNIQUE = re.compile(r"UNIQUE constraint failed: (?P<columns>.+)$", re.MULTILINE)


def install_connection_settings(engine: AsyncEngine) -> None:
    """Make every connection the engine opens use berth's per-connection settings."""
    if engine.dialect.name != "sqlite":
        return

    @event.listens_for(engine.sync_engine, "connect")
    def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            for pragma in SQLITE_PRAGMAS:
                cursor.execute(pragma)
        finally:
            cursor.close()


def single_writer(engine: AsyncEngine) -> bool:
    """Whether the database lets only one connection write at a time (SQLite does)."""
    return engine.dialect.name == "sqlite"


def data_version_reader(engine: AsyncEngine) -> Callable[[], DataVersion | None] | None:
    """A cheap probe whose value changes whenever any connection commits, or ``None``.

    SQLite file databases only: ``PRAGMA data_version`` on a dedicated read-only
    connection (plain ``sqlite3``, opened on first use, closed when the engine is
    disposed). It changes whenever another connection -- in this process or in
    any other -- commits; as this connection never writes, that is every commit.
    Reading it takes microseconds (it consults the WAL index, no I/O). The value
    is ``(connection generation, data_version)``, since data versions of two
    connections cannot be compared; the probe returns ``None`` when it cannot
    tell (the database cannot be opened, or is busy recovering).

    ``None`` for in-memory and URI databases, and for PostgreSQL, which has no
    equally cheap and exact equivalent (the read cache is simply off there).
    """
    url = engine.url
    if url.get_backend_name() != "sqlite":
        return None
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    probe = _SqliteDataVersion(Path(database).absolute())
    event.listen(engine.sync_engine, "engine_disposed", lambda _conn: probe.close())
    return probe


#: What :func:`data_version_reader` probes return: equal values, no commit in between.
DataVersion = tuple[int, int]

_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6


class _SqliteDataVersion:
    """``PRAGMA data_version`` of one database file, on a read-only connection of its own.

    Never waits: a busy database (``busy_timeout`` 0) answers ``None`` at once
    rather than block the event loop.
    """

    def __init__(self, path: Path) -> None:
        self._uri = f"{path.as_uri()}?mode=ro"
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._generation = 0

    def __call__(self) -> DataVersion | None:
        with self._lock:
            try:
                if self._conn is None:
                    self._conn = sqlite3.connect(
                        self._uri,
                        uri=True,
                        timeout=0,
                        check_same_thread=False,
                        isolation_level=None,
                    )
                    self._generation += 1
                row = self._conn.execute("PRAGMA data_version").fetchone()
            except sqlite3.Error as exc:
                if getattr(exc, "sqlite_errorcode", 0) & 0xFF not in (_SQLITE_BUSY, _SQLITE_LOCKED):
                    self._close()
                return None
            return (self._generation, int(row[0]))

    def marks(self) -> tuple[int | None, int | None, int | None]:
        """The ``data``, ``fleet`` and ``access`` marks: how many commits changed what a
        cached read reads, a server, and what a token's look-up reads (triggers count
        them); ``None`` for one that cannot be read (an older schema, a busy database)."""
        with self._lock:
            if self._conn is None:
                return (None, None, None)
            try:
                rows = self._conn.execute(
                    "SELECT name, version FROM store_mark WHERE name IN ('data', 'fleet', 'access')"
                ).fetchall()
            except sqlite3.Error:
                return (None, None, None)
            found = {str(name): int(version) for name, version in rows}
            return (found.get("data"), found.get("fleet"), found.get("access"))

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def ensure_database_dir(url: str) -> None:
    """Create the directory an SQLite file database lives in (mode 0700 when new) and the
    file itself (0600 when new: SQLite gives its -wal and -shm files the same mode);
    nothing for other URLs. Password and token hashes, sealed secrets: owner only."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return
    database = parsed.database
    if database and database != ":memory:" and not database.startswith("file:"):
        path = Path(database)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


@asynccontextmanager
async def migration_lock(conn: AsyncConnection) -> AsyncIterator[None]:
    """One transaction that only one process at a time can hold; committed on success.

    SQLite: ``BEGIN IMMEDIATE`` takes the database's write lock up front (waiting
    up to ``SQLITE_MIGRATION_WAIT_MS``), with the driver's own transaction handling
    turned off so DDL runs inside it. PostgreSQL: a transaction-scoped advisory lock.
    """
    if conn.dialect.name == "sqlite":
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.exec_driver_sql(f"PRAGMA busy_timeout={SQLITE_MIGRATION_WAIT_MS}")
        # A migration may recreate a table (SQLite cannot drop a constraint in place):
        # with foreign keys on, dropping the old table would cascade to its children.
        # The pragma only takes effect outside a transaction; the check below proves the
        # migration left every reference intact before it commits.
        await conn.exec_driver_sql("PRAGMA foreign_keys=OFF")
        await conn.exec_driver_sql("BEGIN IMMEDIATE")
        try:
            yield
            broken = (await conn.exec_driver_sql("PRAGMA foreign_key_check")).first()
            if broken is not None:
                raise RuntimeError(f"A migration broke a foreign key: {tuple(broken)}")
        except BaseException:
            await conn.exec_driver_sql("ROLLBACK")
            raise
        await conn.exec_driver_sql("COMMIT")
        await conn.exec_driver_sql("PRAGMA foreign_keys=ON")
        return
    async with conn.begin():
        if conn.dialect.name == "postgresql":
            await conn.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK}
            )
        yield


async def read_locked(
    conn: AsyncConnection, stmt: Select[Any], params: Mapping[str, Any]
) -> CursorResult[Any]:
    """Run ``stmt`` and keep its rows locked until the transaction on ``conn`` ends.

    Another transaction doing the same on one of those rows waits until this one ends,
    and then reads what it committed: read-check-write sequences that start with it
    (a deploy, locking its server) take turns instead of deciding on the same stale
    reads.

    PostgreSQL: ``SELECT … FOR NO KEY UPDATE`` (it does not hold up inserts that only
    reference the row); at READ COMMITTED every later statement sees what the previous
    holder committed. SQLite has no row locks: the transaction is made a write
    transaction at once with ``BEGIN IMMEDIATE`` (waiting up to ``busy_timeout`` for a
    writer of another process) -- the driver would only begin one before its first
    INSERT, UPDATE or DELETE, leaving the reads before it outside any transaction. From
    then on no other connection commits until this transaction ends. Callers in one
    process queue on the engine's write lock first (``transaction.Transaction``).
    """
    if conn.dialect.name == "sqlite":
        raw = await conn.get_raw_connection()
        driver: Any = raw.driver_connection
        if not driver.in_transaction:  # aiosqlite's, as sqlite3's
            await conn.exec_driver_sql("BEGIN IMMEDIATE")
    elif conn.dialect.name == "postgresql":
        stmt = stmt.with_for_update(key_share=True)
    result: CursorResult[Any] = await conn.execute(stmt, params)
    return result


def claimable(dialect: Dialect, candidates: Select[Any], *locked: FromClause) -> Select[Any]:
    """``candidates`` made safe as the sub-select of a claiming ``UPDATE … WHERE id = (…)``.

    PostgreSQL: ``FOR UPDATE OF <locked> SKIP LOCKED``: concurrent claimers pass
    over rows (of any of ``locked``) that another claimer holds, so each takes a
    different one and none waits. SQLite: unchanged, as nothing more is needed:
    one UPDATE statement takes the database's single write lock before it reads,
    so its sub-select and its write are one atomic step.
    """
    if dialect.name == "postgresql":
        return candidates.with_for_update(skip_locked=True, of=list(locked))
    return candidates


def upsert_from_select(
    dialect: Dialect,
    table: Table,
    columns: Sequence[str],
    rows: Select[Any],
    key: Sequence[str],
) -> Insert:
    """``INSERT … SELECT`` that overwrites the non-key ``columns`` of a row with the same key."""
    insert = postgresql.insert if dialect.name == "postgresql" else sqlite.insert
    stmt = insert(table).from_select(list(columns), rows)
    updates = {name: stmt.excluded[name] for name in columns if name not in key}
    return stmt.on_conflict_do_update(index_elements=list(key), set_=updates)


def violated_unique(exc: IntegrityError, tables: Iterable[Table]) -> str | None:
    """The name of the unique constraint (or unique index) of ``tables`` that ``exc`` broke.

    ``None`` when the error is not a unique violation of one of them (a foreign
    key, a NOT NULL, or another table).
    """
    message = str(exc.orig)
    sqlite_match = _SQLITE_UNIQUE.search(message)
    sqlite_columns = (
        {part.strip() for part in sqlite_match["columns"].split(",")} if sqlite_match else None
    )
    for table in tables:
        for name, columns in _unique_keys(table):
            if sqlite_columns is not None:
                if sqlite_columns == {f"{table.name}.{column}" for column in columns}:
                    return name
            elif f'"{name}"' in message:
                return name
    return None


def _unique_keys(table: Table) -> Iterable[tuple[str, tuple[str, ...]]]:
    """(name, columns) of every unique constraint and unique index of ``table``."""
    for constraint in table.constraints:
        if isinstance(constraint, UniqueConstraint | PrimaryKeyConstraint) and constraint.name:
            yield str(constraint.name), tuple(column.name for column in constraint.columns)
    for index in table.indexes:
        if index.unique and index.name:
            yield str(index.name), tuple(column.name for column in index.columns)
