"""The use cases, one module each; each is a small class called with a command."""

from .accounts import Authenticate, CreateUser, RegenerateToken, TokenInfo
from .deploy import Deploy, DeployLimit, Queued, QueueDeployment
from .deployments import GetDeployment, GetInstallation, ListDeployments
from .enroll import EnrollmentStatus, EnrollServer
from .follow import FollowDeployment
from .installations import (
    ChangeInstallation,
    FollowInstallationLogs,
    InstallationLogs,
    RemoveInstallation,
)
from .list_containers import ListContainers
from .list_installations import ListInstallations
from .monitor import MonitorServers
from .operations import BackUpStore, CountStore, RestoreStore
from .registries import AddRegistry, ListRegistries, RemoveRegistry
from .revisions import CancelDeployment, ListRevisions, Rollback
from .routes import RouteTable, routes_of
from .run_deployment import RunDeployment, StepTimeouts
from .server_self import ReportUninstalled, ServerSelfStatus
from .servers import (
    SERVERS_MAX,
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
    ResolveSession,
    SignIn,
    SignOut,
    SignUp,
    SignUpPolicy,
)
from .usage import InstallationStats, ServerDiskUsage
from .wait import Waiters, WaitForDeployment
from .webhooks import (
    CreateWebhook,
    DeleteWebhook,
    DeliverWebhooks,
    ListWebhookDeliveries,
    ListWebhooks,
    tell_webhooks,
)

__all__ = [
    "SERVERS_MAX",
    "AddRegistry",
    "Authenticate",
    "BackUpStore",
    "CancelDeployment",
    "ChangeInstallation",
    "CountStore",
    "CreateInvite",
    "CreateServer",
    "CreateUser",
    "CreateWebhook",
    "DeleteServer",
    "DeleteWebhook",
    "DeliverWebhooks",
    "Deploy",
    "DeployLimit",
    "EnrollServer",
    "EnrollmentStatus",
    "EnsureLocalServer",
    "FollowDeployment",
    "FollowInstallationLogs",
    "GetDeployment",
    "GetInstallation",
    "GetServer",
    "InstallationLogs",
    "InstallationStats",
    "IssueSetupCode",
    "ListContainers",
    "ListDeployments",
    "ListInstallations",
    "ListRegistries",
    "ListRevisions",
    "ListServers",
    "ListWebhookDeliveries",
    "ListWebhooks",
    "MonitorServers",
    "NewEnrollmentToken",
    "QueueDeployment",
    "Queued",
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
    "ServerDiskUsage",
    "ServerSelfStatus",
    "SignIn",
    "SignOut",
    "SignUp",
    "SignUpPolicy",
    "StepTimeouts",
    "TokenInfo",
    "WaitForDeployment",
    "Waiters",
    "routes_of",
    "tell_webhooks",
]
