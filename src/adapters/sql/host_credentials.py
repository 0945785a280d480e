"""Credentials saved per host, the password sealed (registries, Git hosts): one
repository shape over each kind's table (``id``, ``owner_id``, ``host``, ``username``,
``password_sealed``, ``created_at``; unique on owner and host).

Listings never select the sealed password; ``sealed_for`` (the worker's reads) is the one
read that unseals it.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar, Generic, TypeVar, cast
from uuid import UUID

import msgspec
from berth.core.access import Owner, team_of
from berth.core.models import HostCredentials
from berth.core.ports import SecretBox
from sqlalchemy import Select, Table, bindparam, delete, select

from .rows import _owned, _Repository, from_row
from .transaction import Transaction

__all__ = ["HostCredentialsRepository", "sealed_for"]

S = TypeVar("S", bound=HostCredentials)


@functools.cache
def _sealed_read(table: Table) -> Select[Any]:
    return select(table.c.username, table.c.password_sealed).where(
        table.c.owner_id == bindparam("owner_id"), table.c.host == bindparam("host")
    )


async def sealed_for(
    tx: Transaction, box: SecretBox, table: Table, owner_id: Owner, host: str
) -> tuple[str, str] | None:
    """The owner's ``(username, password)`` for ``host`` in ``table``, unsealed; ``None``
    if none, or if sealed with another key (the pull or fetch then goes without them, and
    says why if refused)."""
    params = {"owner_id": team_of(owner_id), "host": host}
    row = (await tx.read(_sealed_read(table), params)).first()
    if row is None:
        return None
    try:
        return row.username, box.open(row.password_sealed).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None


class HostCredentialsRepository(_Repository, Generic[S]):
    """A kind's repository over its table; every query filters on the owner (the team).
    A subclass names its table, record and the words of a duplicate host:
    ``class SqlRegistryRepository(HostCredentialsRepository[Registry], table=...,
    saved=Registry, taken={"uq_registry_owner_id_host": "..."})``."""

    _table: ClassVar[Table]
    _saved: ClassVar[type[HostCredentials]]
    _taken: ClassVar[dict[str, str]]
    _listed: ClassVar[Select[Any]]

    def __init_subclass__(
        cls, *, table: Table, saved: type[HostCredentials], taken: dict[str, str], **kwargs: object
    ) -> None:
        super().__init_subclass__(**kwargs)
        cls._table, cls._saved, cls._taken = table, saved, taken
        # A listing's read: every column but the sealed password, of one owner's rows.
        cls._listed = select(*(c for c in table.c if c.name != "password_sealed")).where(
            table.c.owner_id == bindparam("owner_id")
        )

    async def add(self, saved: S, password: str) -> None:
        values = {
            **msgspec.structs.asdict(saved),
            "password_sealed": self._box.seal(password.encode()),
        }
        await self._insert(self._table, values, self._taken)

    async def list(self, owner_id: Owner) -> list[S]:
        stmt = self._listed.order_by(self._table.c.host)
        rows = await self._tx.read(stmt, {"owner_id": team_of(owner_id)})
        return [cast(S, from_row(self._saved, row)) for row in rows]

    async def by_host(self, owner_id: Owner, host: str) -> S | None:
        stmt = self._listed.where(self._table.c.host == bindparam("host"))
        row = (await self._tx.read(stmt, {"owner_id": team_of(owner_id), "host": host})).first()
        return cast(S, from_row(self._saved, row)) if row else None

    async def delete(self, owner_id: Owner, item_id: UUID) -> bool:
        return await self._changed(
            delete(self._table).where(*_owned(self._table, owner_id, item_id))
        )
