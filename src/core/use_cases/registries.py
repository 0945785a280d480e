"""Private registries: a team's credentials for the registries their images come from
(``host_credentials``); only the worker's claim unseals a password, for the pull of a
deployment whose image names that host.
"""

from __future__ import annotations

from ..models import Registry
from .host_credentials import AddHostCredentials, HostKind
from .owned import ForgetOwned, ListOwned

__all__ = ["REGISTRIES", "REGISTRIES_MAX", "AddRegistry", "ListRegistries", "RemoveRegistry"]

#: How many registries one user may save.
REGISTRIES_MAX = 100

REGISTRIES = HostKind(
    repository="registries",
    name="registry",
    most=REGISTRIES_MAX,
    exists="You already have credentials for {host}; remove them first to replace them.",
    limit="You have {most} registries, the most one user may save.",
)


class AddRegistry(AddHostCredentials[Registry], saved=Registry, kind=REGISTRIES):
    """Save the caller's credentials for a registry host."""


class ListRegistries(ListOwned[Registry], repository="registries"):
    """The caller's registries, by host: host and user name, never a password."""


class RemoveRegistry(
    ForgetOwned,
    repository="registries",
    noun="registry",
    event="registry_removed",
    verb="remove",
):
    """Forget one of the caller's registries; ``NotFound`` if it is not theirs."""
