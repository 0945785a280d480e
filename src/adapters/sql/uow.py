"""The unit of work: every repository over one connection and one transaction."""

from __future__ import annotations

from types import TracebackType
from typing import Self

from berth.core.ports import SecretBox
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from .repositories import (
    SqlDeploymentRepository,
    SqlInstallationRepository,
    SqlServerRepository,
    SqlTokenRepository,
    SqlUserRepository,
)

__all__ = ["SqlUnitOfWork", "SqlUnitOfWorkFactory"]


class SqlUnitOfWork:
    """``UnitOfWork`` over one pooled connection: nothing is written unless committed.

    Single use: ``async with`` it once. The repositories exist inside the block
    only. After a ``Conflict`` from a repository, leave the block (the
    transaction is rolled back) rather than carry on writing.
    """

    users: SqlUserRepository
    tokens: SqlTokenRepository
    servers: SqlServerRepository
    installations: SqlInstallationRepository
    deployments: SqlDeploymentRepository

    def __init__(self, engine: AsyncEngine, box: SecretBox) -> None:
        self._engine = engine
        self._box = box
        self._conn: AsyncConnection | None = None

    async def __aenter__(self) -> Self:
        if self._conn is not None:
            raise RuntimeError("A unit of work is entered once.")
        conn = self._conn = await self._engine.connect()
        await conn.begin()
        self.users = SqlUserRepository(conn)
        self.tokens = SqlTokenRepository(conn)
        self.servers = SqlServerRepository(conn)
        self.installations = SqlInstallationRepository(conn, self._box)
        self.deployments = SqlDeploymentRepository(conn, self._box)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Roll back whatever was not committed and return the connection to the pool."""
        conn = self._connection()
        try:
            await conn.rollback()
        finally:
            await conn.close()

    async def commit(self) -> None:
        """Make everything written so far durable; later writes need another commit."""
        await self._connection().commit()

    def _connection(self) -> AsyncConnection:
        if self._conn is None:
            raise RuntimeError("Use the unit of work inside 'async with'.")
        return self._conn


class SqlUnitOfWorkFactory:
    """``UnitOfWorkFactory``: each call gives a new, not yet entered, ``SqlUnitOfWork``."""

    def __init__(self, engine: AsyncEngine, box: SecretBox) -> None:
        self.engine = engine
        self._box = box

    def __call__(self) -> SqlUnitOfWork:
        return SqlUnitOfWork(self.engine, self._box)
