"""One database transaction, as the repositories of a unit of work share it."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import CursorResult
from sqlalchemy.engine import Dialect, Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql import Executable

from . import dialect

__all__ = ["Transaction", "shared_write_lock", "transaction"]

Params = Mapping[str, Any] | Sequence[Mapping[str, Any]] | None


class Transaction:
    """A connection in a transaction, with reads and writes told apart.

    ``write_lock``, when given, is held from a transaction's first write until
    it ends: SQLite lets one connection write at a time, and queueing this
    process's writers in order keeps them from starving each other on the busy
    timeout. Reads never wait for it.
    """

    def __init__(self, conn: AsyncConnection, write_lock: asyncio.Lock | None) -> None:
        self._conn = conn
        self._write_lock = write_lock
        self._writing = False

    @property
    def dialect(self) -> Dialect:
        return self._conn.dialect

    async def read(self, stmt: Executable, params: Params = None) -> CursorResult[Any]:
        """Run a statement that changes nothing."""
        return await self._conn.execute(stmt, params)

    async def write(self, stmt: Executable, params: Params = None) -> CursorResult[Any]:
        """Run a statement that inserts, updates or deletes."""
        if self._write_lock is not None and not self._writing:
            await self._write_lock.acquire()
            self._writing = True
        return await self._conn.execute(stmt, params)

    async def commit(self) -> None:
        try:
            await self._conn.commit()
        finally:
            self._release()

    async def close(self) -> None:
        """Roll back what was not committed and give the connection back to the pool."""
        try:
            try:
                await self._conn.rollback()
            finally:
                await self._conn.close()
        finally:
            self._release()

    def _release(self) -> None:
        if self._writing and self._write_lock is not None:
            self._writing = False
            self._write_lock.release()


_write_locks: weakref.WeakKeyDictionary[Engine, asyncio.Lock] = weakref.WeakKeyDictionary()


def shared_write_lock(engine: AsyncEngine) -> asyncio.Lock | None:
    """The lock every writer through ``engine`` queues on; ``None`` where writers run in parallel.

    One per engine, so the units of work, the job queue and the fleet of a process
    take turns at SQLite's single write lock instead of racing its busy timeout.
    Like the engine's connections, use it from one event loop.
    """
    if not dialect.single_writer(engine):
        return None
    lock = _write_locks.get(engine.sync_engine)
    if lock is None:
        lock = _write_locks[engine.sync_engine] = asyncio.Lock()
    return lock


@asynccontextmanager
async def transaction(engine: AsyncEngine) -> AsyncIterator[Transaction]:
    """A transaction on a pooled connection: committed if the block ends normally, else
    rolled back; the connection goes back to the pool either way."""
    conn = await engine.connect()
    try:
        await conn.begin()
    except BaseException:
        await conn.close()
        raise
    tx = Transaction(conn, shared_write_lock(engine))
    try:
        yield tx
        await tx.commit()
    finally:
        await tx.close()
