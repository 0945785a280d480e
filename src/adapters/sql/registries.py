"""Private registries: a user's credentials per registry host, the password sealed.

Listings never select the sealed password; ``registry_auth`` (the worker's claim and
``auth``) is the one read that unseals it.
"""

from __future__ import annotations

from typing import cast
from uuid import UUID

from berth.core.models import Registry, RegistryAuth
from berth.core.ports import SecretBox
from sqlalchemy import Table, bindparam, delete, insert, select
from sqlalchemy.exc import IntegrityError

from .rows import _raise_conflict, _Repository, from_row
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
    tx: Transaction, box: SecretBox, owner_id: UUID, host: str
) -> RegistryAuth | None:
    """The owner's credentials for ``host``, unsealed; ``None`` if none, or if they were
    sealed with another key (the pull then goes without them, and says so if refused)."""
    row = (await tx.read(_AUTH, {"owner_id": owner_id, "host": host})).first()
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
        """Store it with the password sealed; ``WriteConflict`` if the host is taken."""
        values = {
            "id": registry.id,
            "owner_id": registry.owner_id,
            "host": registry.host,
            "username": registry.username,
            "password_sealed": self._box.seal(password.encode("utf-8")),
            "created_at": registry.created_at,
        }
        try:
            await self._tx.write(insert(registries_t).values(values))
        except IntegrityError as exc:
            _raise_conflict(
                exc,
                registries_t,
                {"uq_registry_owner_id_host": "You already have credentials for this host."},
            )

    async def list(self, owner_id: UUID) -> list[Registry]:
        """The owner's registries by host, without their passwords."""
        stmt = select(*_COLUMNS).where(_OF_OWNER).order_by(registries_t.c.host)
        return [
            from_row(Registry, row) for row in await self._tx.read(stmt, {"owner_id": owner_id})
        ]

    async def by_host(self, owner_id: UUID, host: str) -> Registry | None:
        stmt = select(*_COLUMNS).where(_OF_OWNER, registries_t.c.host == bindparam("host"))
        row = (await self._tx.read(stmt, {"owner_id": owner_id, "host": host})).first()
        return from_row(Registry, row) if row else None

    async def delete(self, owner_id: UUID, registry_id: UUID) -> bool:
        result = await self._tx.write(
            delete(registries_t).where(
                registries_t.c.owner_id == owner_id, registries_t.c.id == registry_id
            )
        )
        return bool(result.rowcount)

    async def auth(self, owner_id: UUID, host: str) -> RegistryAuth | None:
        return await registry_auth(self._tx, self._box, owner_id, host)
