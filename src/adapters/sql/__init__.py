"""SQL storage: SQLAlchemy 2.x async, SQLite (default, embedded) or PostgreSQL.

    migrate(url)                          # once per start; safe from several processes
    engine = create_engine(url)
    uow = SqlUnitOfWorkFactory(engine, box)
    async with uow() as tx: ...           # berth.core.ports.UnitOfWork
"""

from .engine import create_engine, sqlite_url
from .migrate import alembic_config, migrate
from .repositories import (
    SqlDeploymentRepository,
    SqlInstallationRepository,
    SqlServerRepository,
    SqlTokenRepository,
    SqlUserRepository,
)
from .uow import SqlUnitOfWork, SqlUnitOfWorkFactory

__all__ = [
    "SqlDeploymentRepository",
    "SqlInstallationRepository",
    "SqlServerRepository",
    "SqlTokenRepository",
    "SqlUnitOfWork",
    "SqlUnitOfWorkFactory",
    "SqlUserRepository",
    "alembic_config",
    "create_engine",
    "migrate",
    "sqlite_url",
]
