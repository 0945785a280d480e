"""Private registries: a user's credentials for the registries their images come from.

The password (or token) is sealed by the store and never read back here: only the
worker's claim unseals it, for the pull of a deployment whose image names that host.
"""

from __future__ import annotations

from uuid import uuid4

import structlog

from .. import commands as c
from ..access import Actor
from ..errors import Conflict, WriteConflict
from ..models import Registry
from .owned import ForgetOwned, ListOwned, UsesStoreAndClock, audit

__all__ = ["REGISTRIES_MAX", "AddRegistry", "ListRegistries", "RemoveRegistry"]

log = structlog.get_logger()

#: How many registries one user may save.
REGISTRIES_MAX = 100


class AddRegistry(UsesStoreAndClock):
    """Save the caller's credentials for a registry host.

    Raises ``Conflict`` (``registry-exists``) if the caller has one for that host
    already (remove it first to change its credentials), or (``registry-limit``) past
    ``REGISTRIES_MAX``.
    """

    async def __call__(self, owner: Actor, cmd: c.AddRegistry) -> Registry:
        registry = Registry(
            id=uuid4(),
            owner_id=owner.team_id,
            host=cmd.host,
            username=cmd.username,
            created_at=self._clock.now(),
        )
        taken = Conflict(
            f"You already have credentials for {cmd.host}; remove them first to replace them.",
            kind="registry-exists",
            field="host",
        )
        async with self._uow() as uow:
            if await uow.registries.by_host(owner.scope, cmd.host) is not None:
                raise taken
            if len(await uow.registries.list(owner.scope)) >= REGISTRIES_MAX:
                raise Conflict(
                    f"You have {REGISTRIES_MAX} registries, the most one user may save.",
                    kind="registry-limit",
                )
            try:
                await uow.registries.add(registry, cmd.password)
            except WriteConflict:  # another request saved the same host in between
                raise taken from None
            audit(uow, owner, "registry.add", "registry", registry.id, cmd.host)
            await uow.commit()
        log.info(
            "registry_added",
            registry_id=str(registry.id),
            owner_id=str(owner.team_id),
            host=cmd.host,
        )
        return registry


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
