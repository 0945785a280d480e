"""The use cases, one module each; each is a small class called with a command."""

from .accounts import MAIN_TOKEN, Authenticate, CreateUser, RegenerateToken, ResetToken, TokenInfo
from .deploy import Deploy, DeployLimit, Queued, QueueDeployment
from .deployments import GetDeployment, GetInstallation, ListDeployments
from .enroll import EnrollmentStatus, EnrollServer
from .fleet_share import FleetShare
from .follow import FollowDeployment
from .installations import (
    ChangeInstallation,
    FollowInstallationLogs,
    InstallationLogs,
    RemoveInstallation,
)
from .list_containers import ListContainers
from .list_installations import ListInstallations
from .monitor import MonitorServers, status_fresh_for
from .operations import BackUpStore, CheckStore, CountStore, RestoreStore
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
from .teams import (
    TEAM_INVITE_PREFIX,
    AcceptInvitation,
    ActAs,
    ChangeMemberRole,
    CreateTeam,
    CreateToken,
    CurrentToken,
    InviteMember,
    ListAudit,
    ListMembers,
    ListTeams,
    ListTokens,
    PruneAudit,
    RemoveMember,
    RevokeToken,
    TeamAccess,
    target_of,
    write_audit,
)
from .usage import InstallationStats, ServerDiskUsage
from .wait import Waiters, WaitForDeployment
from .watch import ContainerEvents, WatchContainers
from .webhooks import (
    CreateWebhook,
    DeleteWebhook,
    DeliverWebhooks,
    ListWebhookDeliveries,
    ListWebhooks,
    tell_webhooks,
)

__all__ = [
    "MAIN_TOKEN",
    "SERVERS_MAX",
    "TEAM_INVITE_PREFIX",
    "AcceptInvitation",
    "ActAs",
    "AddRegistry",
    "Authenticate",
    "BackUpStore",
    "CancelDeployment",
    "ChangeInstallation",
    "ChangeMemberRole",
    "CheckStore",
    "ContainerEvents",
    "CountStore",
    "CreateInvite",
    "CreateServer",
    "CreateTeam",
    "CreateToken",
    "CreateUser",
    "CreateWebhook",
    "CurrentToken",
    "DeleteServer",
    "DeleteWebhook",
    "DeliverWebhooks",
    "Deploy",
    "DeployLimit",
    "EnrollServer",
    "EnrollmentStatus",
    "EnsureLocalServer",
    "FleetShare",
    "FollowDeployment",
    "FollowInstallationLogs",
    "GetDeployment",
    "GetInstallation",
    "GetServer",
    "InstallationLogs",
    "InstallationStats",
    "InviteMember",
    "IssueSetupCode",
    "ListAudit",
    "ListContainers",
    "ListDeployments",
    "ListInstallations",
    "ListMembers",
    "ListRegistries",
    "ListRevisions",
    "ListServers",
    "ListTeams",
    "ListTokens",
    "ListWebhookDeliveries",
    "ListWebhooks",
    "MonitorServers",
    "NewEnrollmentToken",
    "PruneAudit",
    "QueueDeployment",
    "Queued",
    "RegenerateToken",
    "RemoveInstallation",
    "RemoveMember",
    "RemoveRegistry",
    "RepinHostKeys",
    "ReportUninstalled",
    "ResetToken",
    "ResolveSession",
    "RestoreStore",
    "RevokeToken",
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
    "TeamAccess",
    "TokenInfo",
    "WaitForDeployment",
    "Waiters",
    "WatchContainers",
    "routes_of",
    "status_fresh_for",
    "target_of",
    "tell_webhooks",
    "write_audit",
]
