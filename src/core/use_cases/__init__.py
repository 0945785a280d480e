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
from .operations import BackUpStore, CountStore, RestoreStore
from .registries import AddRegistry, ListRegistries, RemoveRegistry
from .revisions import CancelDeployment, DeploymentPage, ListRevisions, Rollback
from .routes import RouteTable, routes_of
from .run_deployment import RunDeployment, StepTimeouts
from .server_self import ReportUninstalled, ServerSelfStatus
from .servers import (
    SERVERS_MAX,
    CreatedServer,
    CreateServer,
    DeleteServer,
    EnsureLocalServer,
    GetServer,
    ListServers,
    NewEnrollmentToken,
    RepinHostKeys,
)
from .sessions import (
    CreateInvite,
    IssueSetupCode,
    NewSession,
    ResolveSession,
    SignIn,
    SignOut,
    SignUp,
    SignUpMode,
    SignUpPolicy,
)
from .usage import InstallationStats, InstallationUsage, ServerDisk, ServerDiskUsage
from .wait import Waiters, WaitForDeployment
from .webhooks import (
    CreatedWebhook,
    CreateWebhook,
    DeleteWebhook,
    DeliverWebhooks,
    ListWebhookDeliveries,
    ListWebhooks,
)

__all__ = [
    "SERVERS_MAX",
    "AddRegistry",
    "Authenticate",
    "BackUpStore",
    "CancelDeployment",
    "ChangeInstallation",
    "ContainerList",
    "CountStore",
    "CreateInvite",
    "CreateServer",
    "CreateUser",
    "CreateWebhook",
    "CreatedServer",
    "CreatedWebhook",
    "DeleteServer",
    "DeleteWebhook",
    "DeliverWebhooks",
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
    "InstallationStats",
    "InstallationUsage",
    "IssueSetupCode",
    "ListContainers",
    "ListDeployments",
    "ListInstallations",
    "ListRegistries",
    "ListRevisions",
    "ListServers",
    "ListWebhookDeliveries",
    "ListWebhooks",
    "LogStream",
    "Logs",
    "MonitorServers",
    "NewEnrollmentToken",
    "NewSession",
    "RegenerateToken",
    "RemoveInstallation",
    "RemoveRegistry",
    "RepinHostKeys",
    "ReportUninstalled",
    "ResolveSession",
    "RestoreStore",
    "Rollback",
    "RouteTable",
    "RunDeployment",
    "ServerDisk",
    "ServerDiskUsage",
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
