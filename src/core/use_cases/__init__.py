"""The use cases, one module each; each is a small class called with a command."""

from .accounts import Authenticate, CreateUser, RegenerateToken, TokenInfo
from .deploy import Deploy, DeployResult
from .deployments import GetDeployment, GetInstallation, ListDeployments
from .enroll import EnrollmentStatus, EnrollServer
from .follow import DeploymentFeed, FeedEnd, FeedEvent, FeedHeartbeat, FollowDeployment
from .installations import (
    ChangeInstallation,
    FollowInstallationLogs,
    InstallationLogs,
    Logs,
    LogStream,
    RemoveInstallation,
)
from .list_containers import ContainerList, ListContainers
from .list_installations import InstallationList, ListInstallations
from .monitor import MonitorServers
from .revisions import CancelDeployment, DeploymentPage, ListRevisions, Rollback
from .routes import RouteTable, routes_of
from .run_deployment import RunDeployment, StepTimeouts
from .server_self import ReportUninstalled, ServerSelfStatus
from .servers import (
    CreatedServer,
    CreateServer,
    DeleteServer,
    EnsureLocalServer,
    GetServer,
    ListServers,
)
from .sessions import (
    CreateInvite,
    NewSession,
    ResolveSession,
    SignIn,
    SignOut,
    SignUp,
    SignUpMode,
    SignUpPolicy,
)
from .wait import Waiters, WaitForDeployment

__all__ = [
    "Authenticate",
    "CancelDeployment",
    "ChangeInstallation",
    "ContainerList",
    "CreateInvite",
    "CreateServer",
    "CreateUser",
    "CreatedServer",
    "DeleteServer",
    "Deploy",
    "DeployResult",
    "DeploymentFeed",
    "DeploymentPage",
    "EnrollServer",
    "EnrollmentStatus",
    "EnsureLocalServer",
    "FeedEnd",
    "FeedEvent",
    "FeedHeartbeat",
    "FollowDeployment",
    "FollowInstallationLogs",
    "GetDeployment",
    "GetInstallation",
    "GetServer",
    "InstallationList",
    "InstallationLogs",
    "ListContainers",
    "ListDeployments",
    "ListInstallations",
    "ListRevisions",
    "ListServers",
    "LogStream",
    "Logs",
    "MonitorServers",
    "NewSession",
    "RegenerateToken",
    "RemoveInstallation",
    "ReportUninstalled",
    "ResolveSession",
    "Rollback",
    "RouteTable",
    "RunDeployment",
    "ServerSelfStatus",
    "SignIn",
    "SignOut",
    "SignUp",
    "SignUpMode",
    "SignUpPolicy",
    "StepTimeouts",
    "TokenInfo",
    "WaitForDeployment",
    "Waiters",
    "routes_of",
]
