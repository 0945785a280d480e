"""The store as one file (``berth.core.ports.StoreArchive``): SQLite's online backup.

``sqlite3.Connection.backup`` copies the database page by page under one read
transaction, so the copy is the database as it was at one instant while other
connections (``berth serve``, workers, the admin commands) keep writing: in WAL mode
readers never block writers. The copy is written beside its destination and linked
into place once complete, in rollback-journal mode so that it is one self-contained
file. PostgreSQL has its own tools (``pg_dump``/``pg_restore``): its archive refuses,
naming them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import uuid
from collections.abc import Sequence
from pathlib import Path

from berth.core.errors import Conflict, NotFound
from berth.core.models import StoreArchiveInfo

from .engine import DATABASE_FILE

__all__ = ["PostgresArchive", "SqliteArchive", "schema_versions"]

#: Seconds a backup or restore waits for a write lock held by another connection.
_BUSY_SECONDS = 30.0


def schema_versions() -> list[str]:
    """The migrations this berth has, oldest first (Alembic's revision ids)."""
    from alembic.script import ScriptDirectory

    from .migrate import alembic_config

    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    return [rev.revision for rev in reversed(list(script.walk_revisions()))]


#: Where a backup keeps values sealed with berth's key, (table, column), in the order a
#: sample is taken; a table that an older schema lacks is skipped.
_SEALED = (
    ("server", "private_key_sealed"),
    ("deployment", "env_sealed"),
    ("registry", "password_sealed"),
    ("webhook", "secret_sealed"),
)


def _new_file(path: Path) -> None:
    """Create ``path`` empty with mode 0600 (sealed secrets, password hashes: owner only)."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _copy(source: sqlite3.Connection, target: Path) -> None:
    """The whole of ``source``, as of one instant, into the new file ``target``."""
    _new_file(target)
    dest = sqlite3.connect(target, timeout=_BUSY_SECONDS)
    try:
        source.backup(dest)  # pages=-1: one step, one read transaction on the source
        dest.execute("PRAGMA journal_mode=DELETE")  # no -wal beside it: one file
        (verdict,) = dest.execute("PRAGMA quick_check").fetchone()
        if verdict != "ok":
            raise RuntimeError(f"The copy failed SQLite's check: {verdict}")
    finally:
        dest.close()


def _inspect(source: Path) -> StoreArchiveInfo:
    if not source.is_file():
        raise NotFound(f"There is no file {source}.")
    try:
        conn = sqlite3.connect(f"{source.absolute().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return StoreArchiveInfo(schema_version=None)
    try:
        (version,) = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        (users,) = conn.execute("SELECT count(*) FROM user_account").fetchone()
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        sealed = [
            f"SELECT {column} FROM {table} WHERE {column} IS NOT NULL"  # noqa: S608 (constants)
            for table, column in _SEALED
            if table in tables
        ]
        sample = conn.execute(" UNION ALL ".join(sealed) + " LIMIT 1").fetchone()
    except (sqlite3.Error, TypeError):  # not SQLite, or no berth schema in it
        return StoreArchiveInfo(schema_version=None)
    finally:
        conn.close()
    return StoreArchiveInfo(
        schema_version=str(version),
        users=int(users),
        sealed_sample=bytes(sample[0]) if sample else None,
    )


class SqliteArchive:
    """``StoreArchive`` of the data dir's ``berth.db``."""

    def __init__(self, data_dir: Path) -> None:
        self._dir = Path(data_dir)
        self._db = self._dir / DATABASE_FILE

    def schema_versions(self) -> Sequence[str]:
        return schema_versions()

    async def back_up(self, destination: Path) -> None:
        await asyncio.to_thread(self._back_up, Path(destination))

    def _back_up(self, destination: Path) -> None:
        if destination.exists():
            raise Conflict(f"{destination} exists; give a new file name.")
        if not self._db.is_file():
            raise NotFound(f"There is no store in {self._dir}.")
        if not destination.parent.is_dir():
            raise NotFound(f"There is no directory {destination.parent}.")
        partial = destination.with_name(f".{destination.name}.{uuid.uuid4().hex[:8]}.partial")
        source = sqlite3.connect(self._db, timeout=_BUSY_SECONDS)
        try:
            _copy(source, partial)
            try:
                os.link(partial, destination)  # fails if it appeared meanwhile: no overwrite
            except FileExistsError:
                raise Conflict(f"{destination} exists; give a new file name.") from None
        finally:
            source.close()
            with contextlib.suppress(FileNotFoundError):
                partial.unlink()

    async def inspect(self, source: Path) -> StoreArchiveInfo:
        return await asyncio.to_thread(_inspect, Path(source))

    async def holds_store(self) -> bool:
        return self._db.exists()

    async def restore(self, source: Path) -> None:
        await asyncio.to_thread(self._restore, Path(source))

    def _restore(self, source: Path) -> None:
        self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        partial = self._dir / f".{DATABASE_FILE}.{uuid.uuid4().hex[:8]}.partial"
        origin = sqlite3.connect(f"{source.absolute().as_uri()}?mode=ro", uri=True)
        try:
            _copy(origin, partial)
            # The replaced store's log must not be replayed into the restored one.
            for suffix in ("-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    self._db.with_name(DATABASE_FILE + suffix).unlink()
            os.replace(partial, self._db)
        finally:
            origin.close()
            with contextlib.suppress(FileNotFoundError):
                partial.unlink()


class PostgresArchive:
    """``StoreArchive`` of a PostgreSQL store: there is none; use PostgreSQL's tools."""

    _WHY = (
        "The store is PostgreSQL (BERTH_DATABASE_URL): back it up with `pg_dump -Fc` and "
        "restore it with `pg_restore`; keep BERTH_SECRET_KEY with the dump "
        "(docs/operations/backups.md)."
    )

    def schema_versions(self) -> Sequence[str]:
        return schema_versions()

    async def back_up(self, destination: Path) -> None:
        raise Conflict(self._WHY)

    async def inspect(self, source: Path) -> StoreArchiveInfo:
        raise Conflict(self._WHY)

    async def holds_store(self) -> bool:
        raise Conflict(self._WHY)

    async def restore(self, source: Path) -> None:
        raise Conflict(self._WHY)
