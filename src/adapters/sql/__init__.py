"""SQL storage: SQLAlchemy 2.x async, SQLite (default, embedded) or PostgreSQL.

migrate(url)                          # once per start; safe from several processes
engine = create_engine(url)
uow = SqlUnitOfWorkFactory(engine, box)
async with uow() as tx: ...           # berth.core.ports.UnitOfWork
fleet = SqlFleet(engine, box)         # berth.core.ports.Fleet (monitor, SSH gateway)
jobs = SqlJobQueue(engine, box, queue_timeout=600.0)  # berth.core.ports.JobQueue
stats = SqlStoreStats(engine)         # berth.core.ports.StoreStats (/metrics)
outbox = SqlWebhookOutbox(engine, box)  # berth.core.ports.WebhookOutbox (the worker)
git_auth = SqlGitCredentials(engine, box)  # a team's Git credentials, for the Git fetcher
"""

from .engine import create_engine, sqlite_url
from .fleet import SqlFleet
from .jobs import SqlJobQueue
from .migrate import alembic_config, migrate
from .pushes import SqlGitCredentials
from .repositories import (
    SqlDeploymentRepository,
    SqlInstallationRepository,
    SqlServerRepository,
    SqlTokenRepository,
    SqlUserRepository,
)
from .stats import SqlStoreStats
from .uow import SqlUnitOfWork, SqlUnitOfWorkFactory
from .webhooks import SqlWebhookOutbox

__all__ = [
    "SqlDeploymentRepository",
    "SqlFleet",
    "SqlGitCredentials",
    "SqlInstallationRepository",
    "SqlJobQueue",
    "SqlServerRepository",
    "SqlStoreStats",
    "SqlTokenRepository",
    "SqlUnitOfWork",
    "SqlUnitOfWorkFactory",
    "SqlUserRepository",
    "SqlWebhookOutbox",
    "alembic_config",
    "create_engine",
    "migrate",
    "sqlite_url",
]
