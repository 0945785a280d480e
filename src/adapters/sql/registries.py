"""Private registries: a user's credentials per registry host, the password sealed.

Listings never select the sealed password; ``registry_auth`` (the worker's claim and
``auth``) is the one read that unseals it.
"""

from __future__ import annotations

from typing import cast

from berth.core.access import Owner
from berth.core.models import Registry, RegistryAuth
from berth.core.ports import SecretBox
from sqlalchemy import Table

from .host_credentials import HostCredentialsRepository, sealed_for
from .tables import RegistryRow
from .transaction import Transaction

__all__ = ["SqlRegistryRepository", "registry_auth"]

registries_t = cast(Table, RegistryRow.__table__)


async def registry_auth(
    tx: Transaction, box: SecretBox, owner_id: Owner, host: str
) -> RegistryAuth | None:
    """The owner's credentials for ``host``, unsealed; ``None`` if none, or if they were
    sealed with another key (the pull then goes without them, and says so if refused)."""
    found = await sealed_for(tx, box, registries_t, owner_id, host)
    return RegistryAuth(host=host, username=found[0], password=found[1]) if found else None


class SqlRegistryRepository(
    HostCredentialsRepository[Registry],
    table=registries_t,
    saved=Registry,
    taken={"uq_registry_owner_id_host": "You already have credentials for this host."},
):
    """``RegistryRepository`` over the ``registry`` table."""

    async def auth(self, owner_id: Owner, host: str) -> RegistryAuth | None:
        return await registry_auth(self._tx, self._box, owner_id, host)
