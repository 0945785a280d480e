"""One database transaction, as the repositories of a unit of work share it."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import CursorResult
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import Executable

__all__ = ["Transaction"]

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
