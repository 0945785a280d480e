"""The use cases, one module each; each is a small class called with a command."""

from .accounts import Authenticate, CreateUser, RegenerateToken, TokenInfo
from .deploy import Deploy, DeployResult
from .deployments import GetDeployment, GetInstallation
from .installations import InstallationLogs, RemoveInstallation
from .list_containers import ContainerList, ListContainers
from .list_installations import InstallationList, ListInstallations
from .monitor import MonitorServers
from .run_deployment import RunDeployment, StepTimeouts
from .servers import CreatedServer, CreateServer, EnsureLocalServer, GetServer, ListServers

__all__ = [
    "Authenticate",
    "ContainerList",
    "CreateServer",
    "CreateUser",
    "CreatedServer",
    "Deploy",
    "DeployResult",
    "EnsureLocalServer",
    "GetDeployment",
    "GetInstallation",
    "GetServer",
    "InstallationList",
    "InstallationLogs",
    "ListContainers",
    "ListInstallations",
    "ListServers",
    "MonitorServers",
    "RegenerateToken",
    "RemoveInstallation",
    "RunDeployment",
    "StepTimeouts",
    "TokenInfo",
]
