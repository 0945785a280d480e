"""The API's controllers, one per resource (litestar-fullstack's shape): each handler's
signature names its inputs, and its docstring is its prose in the OpenAPI document."""

from .common import Caller, caller_of
from .deployments import DeploymentController
from .enrollment import EnrollmentController
from .git_credentials import GitCredentialController
from .hooks import DeployHookController
from .installations import InstallationController
from .public import PublicController
from .registries import RegistryController
from .server_self import ServerSelfController
from .servers import ServerController
from .sources import SourceController
from .teams import AuditController, TeamController, TokenController
from .webhooks import WebhookController

__all__ = [
    "API_CONTROLLERS",
    "AuditController",
    "Caller",
    "DeployHookController",
    "DeploymentController",
    "EnrollmentController",
    "GitCredentialController",
    "InstallationController",
    "PublicController",
    "RegistryController",
    "ServerController",
    "ServerSelfController",
    "SourceController",
    "TeamController",
    "TokenController",
    "WebhookController",
    "caller_of",
]

#: The controllers under ``/api/agent`` that take an API token.
API_CONTROLLERS = [
    ServerController,
    InstallationController,
    DeploymentController,
    RegistryController,
    GitCredentialController,
    SourceController,
    WebhookController,
    TeamController,
    TokenController,
    AuditController,
]
