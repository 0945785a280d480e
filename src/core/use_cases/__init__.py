"""The use cases, one module each; each is a small class called with a command."""

from .accounts import Authenticate, CreateUser, RegenerateToken, TokenInfo
from .deploy import Deploy, DeployResult
from .deployments import GetDeployment, GetInstallation
from .list_containers import ContainerList, ListContainers
from .list_installations import InstallationList, ListInstallations
from .servers import CreatedServer, CreateServer, GetServer, ListServers

__all__ = [
    "Authenticate",
    "ContainerList",
    "CreateServer",
    "CreateUser",
    "CreatedServer",
    "Deploy",
    "DeployResult",
    "GetDeployment",
    "GetInstallation",
    "GetServer",
    "InstallationList",
    "ListContainers",
    "ListInstallations",
    "ListServers",
    "RegenerateToken",
    "TokenInfo",
]
