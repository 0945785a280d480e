"""Git credentials: a team's user name and password (or access token) for the private
repositories of one Git host (``host_credentials``); only the worker's fetch of a Git
build source unseals a password (``GitCredentialRepository.auth``), for that host.
"""

from __future__ import annotations

from ..models import GitCredential
from .host_credentials import AddHostCredentials, HostKind
from .owned import ForgetOwned, ListOwned

__all__ = [
    "GIT_CREDENTIALS",
    "GIT_CREDENTIALS_MAX",
    "AddGitCredential",
    "ListGitCredentials",
    "RemoveGitCredential",
]

#: How many Git hosts one team may save credentials for.
GIT_CREDENTIALS_MAX = 100

GIT_CREDENTIALS = HostKind(
    repository="git_credentials",
    name="git-credential",
    most=GIT_CREDENTIALS_MAX,
    exists="Your team has credentials for {host} already; remove them first to replace them.",
    limit="Your team has credentials for {most} Git hosts, the most it may save.",
)


class AddGitCredential(
    AddHostCredentials[GitCredential], saved=GitCredential, kind=GIT_CREDENTIALS
):
    """Save the team's credentials for a Git host."""


class ListGitCredentials(ListOwned[GitCredential], repository="git_credentials"):
    """The team's Git credentials, by host: host and user name, never a password."""


class RemoveGitCredential(
    ForgetOwned,
    repository="git_credentials",
    noun="git_credential",
    event="git_credential_removed",
    verb="remove",
    missing="Git credentials",
    audited_as="git-credential",
):
    """Forget one of the team's Git credentials; ``NotFound`` if it is not theirs."""
