"""The SQL repositories of a unit of work, one module per aggregate."""

from .deployments import SqlDeploymentRepository
from .installations import SqlInstallationRepository
from .servers import SqlServerRepository
from .users import SqlTokenRepository, SqlUserRepository

__all__ = [
    "SqlDeploymentRepository",
    "SqlInstallationRepository",
    "SqlServerRepository",
    "SqlTokenRepository",
    "SqlUserRepository",
]
