"""Private registries: a user's credentials per registry host, the password sealed.

Listings never select the sealed password; ``registry_auth`` (the worker's claim and
``auth``) is the one read that unseals it.
"""

from __future__ import annotations

from typing import cast
from uuid import UUID

from berth.core.access import Owner, team_of
from berth.core.models import Registry, RegistryAuth
from berth.core.ports import SecretBox
from sqlalchemy import Table, bindparam, delete, select

from .rows import _owned, _Repository, from_row
from .tables import RegistryRow
from .transaction import Transaction

__all__ = ["SqlRegistryRepository", "registry_auth"]

registries_t = cast(Table, RegistryRow.__table__)

_COLUMNS = [c for c in registries_t.c if c.name != "password_sealed"]
_OF_OWNER = registries_t.c.owner_id == bindparam("owner_id")
_AUTH = select(registries_t.c.host, registries_t.c.username, registries_t.c.password_sealed).where(
    _OF_OWNER, registries_t.c.host == bindparam("host")
)


async def registry_auth(
    tx: Transaction, box: SecretBox, owner_id: Owner, host: str
) -> RegistryAuth | None:
    """The owner's credentials for ``host``, unsealed; ``None`` if none, or if they were
    sealed with another key (the pull then goes without them, and says so if refused)."""
    row = (await tx.read(_AUTH, {"owner_id": team_of(owner_id), "host": host})).first()
    if row is None:
        return None
    try:
        password = box.open(row.password_sealed).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None
    return RegistryAuth(host=row.host, username=row.username, password=password)


class SqlRegistryRepository(_Repository):
    """``RegistryRepository`` over the ``registry`` table; every query filters on the owner."""

    async def add(self, registry: Registry, password: str) -> None:
        values = {
            "id": registry.id,
            "owner_id": registry.owner_id,
            "host": registry.host,
            "username": registry.username,
            "password_sealed": self._box.seal(password.encode("utf-8")),
            "created_at": registry.created_at,
        }
        await self._insert(
            registries_t,
            values,
            {"uq_registry_owner_id_host": "You already have credentials for this host."},
        )

    async def list(self, owner_id: Owner) -> list[Registry]:
        stmt = select(*_COLUMNS).where(_OF_OWNER).order_by(registries_t.c.host)
        return [
            from_row(Registry, row)
            for row in await self._tx.read(stmt, {"owner_id": team_of(owner_id)})
        ]

    async def by_host(self, owner_id: Owner, host: str) -> Registry | None:
        stmt = select(*_COLUMNS).where(_OF_OWNER, registries_t.c.host == bindparam("host"))
        row = (await self._tx.read(stmt, {"owner_id": team_of(owner_id), "host": host})).first()
        return from_row(Registry, row) if row else None

    async def delete(self, owner_id: Owner, registry_id: UUID) -> bool:
        return await self._changed(
            delete(registries_t).where(*_owned(registries_t, owner_id, registry_id))
        )

    async def auth(self, owner_id: Owner, host: str) -> RegistryAuth | None:
        return await registry_auth(self._tx, self._box, owner_id, host)
