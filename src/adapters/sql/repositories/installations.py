"""Installations: the apps on a server, their sealed env and status."""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from datetime import datetime
from functools import partial
from typing import Any
from uuid import UUID

from berth.core.errors import NotFound
from berth.core.models import Installation
from sqlalchemy import Select, select, update
from sqlalchemy.exc import IntegrityError

from ..rows import (
    _ALL_INSTALLATIONS_OF_SERVER,
    _INSTALLATION_BY_CONTAINER_NAME,
    _INSTALLATION_BY_ID,
    _INSTALLATIONS_OF_SERVER,
    _insert_if,
    _installation_to_core,
    _raise_conflict,
    _Repository,
    _seal_env,
    _spec_values,
    installations_t,
    servers_t,
)

__all__ = ["SqlInstallationRepository"]


class SqlInstallationRepository(_Repository):
    """``InstallationRepository``: installations with their status derived from deployments."""

    async def get(self, owner_id: UUID, installation_id: UUID) -> Installation | None:
        """The owner's installation with its last deployment, or ``None``."""
        return await self._one(
            _INSTALLATION_BY_ID, {"owner_id": owner_id, "installation_id": installation_id}
        )

    async def get_by_container_name(
        self, owner_id: UUID, server_id: UUID, container_name: str
    ) -> Installation | None:
        """The installation with this container name on the owner's server, or ``None``."""
        return await self._one(
            _INSTALLATION_BY_CONTAINER_NAME,
            {"owner_id": owner_id, "server_id": server_id, "container_name": container_name},
        )

    async def list(
        self, owner_id: UUID, server_id: UUID, *, include_removed: bool = False
    ) -> builtins.list[Installation]:
        """The server's installations, oldest first, each with its last deployment; removed
        ones only with ``include_removed``.

        One query, whatever the number of installations and deployments; cached
        per (owner, server) until the next commit anywhere.
        """
        found = await self._tx.cached(
            ("installations", owner_id, server_id, include_removed),
            partial(self._list, owner_id, server_id, include_removed),
            weight=lambda installations: 1 + len(installations),
        )
        return builtins.list(found)

    async def _list(
        self, owner_id: UUID, server_id: UUID, include_removed: bool
    ) -> tuple[Installation, ...]:
        params = {"owner_id": owner_id, "server_id": server_id}
        query = _ALL_INSTALLATIONS_OF_SERVER if include_removed else _INSTALLATIONS_OF_SERVER
        result = await self._tx.read(query, params)
        return tuple(_installation_to_core(row, server_id) for row in result)

    async def remove(self, owner_id: UUID, installation_id: UUID, at: datetime) -> bool:
        """Mark the owner's installation removed, keeping its deployments and their events.

        Its host port is released (nothing is published for it any more, so no route
        either); name and domain are unique only among installations not removed.
        ``False`` if there was no such installation of the owner, or it was removed already.
        """
        return await self._mark(
            owner_id, installation_id, removed_at=at, host_port=None, stopped_at=None
        )

    async def set_stopped(self, owner_id: UUID, installation_id: UUID, at: datetime | None) -> bool:
        """Record a stop on request (``at``) or a start (``None``)."""
        return await self._mark(owner_id, installation_id, stopped_at=at)

    async def _mark(self, owner_id: UUID, installation_id: UUID, **values: Any) -> bool:
        i = installations_t.c
        updated = await self._tx.write(
            update(installations_t)
            .where(i.id == installation_id, i.owner_id == owner_id, i.removed_at.is_(None))
            .values(**values)
        )
        return bool(updated.rowcount)

    async def save(self, owner_id: UUID, installation: Installation, env: dict[str, str]) -> None:
        """Insert or update the owner's installation; env values are sealed.

        Raises ``WriteConflict`` if another installation on the server holds the same
        container name, domain or host port, and ``NotFound`` if the server is not
        the owner's. The installation's status and last deployment are derived,
        never stored.
        """
        spec = installation.spec
        values: dict[str, Any] = _spec_values(spec) | {
            "name": installation.name,
            "container_name": installation.container_name,
            "host_port": installation.host_port,
            "env_sealed": _seal_env(self._box, env),
            "updated_at": installation.updated_at,
        }
        try:
            updated = await self._tx.write(
                update(installations_t)
                .where(
                    installations_t.c.id == installation.id,
                    installations_t.c.owner_id == owner_id,
                    installations_t.c.server_id == installation.server_id,
                    installations_t.c.removed_at.is_(None),
                )
                .values(values)
            )
            if updated.rowcount:
                return
            values |= {
                "id": installation.id,
                "owner_id": owner_id,
                "server_id": installation.server_id,
                "created_at": installation.created_at,
            }
            inserted = await self._tx.write(
                _insert_if(
                    installations_t,
                    values,
                    select(servers_t.c.id)
                    .where(
                        servers_t.c.id == installation.server_id,
                        servers_t.c.owner_id == owner_id,
                    )
                    .exists(),
                )
            )
        except IntegrityError as exc:
            _raise_conflict(
                exc,
                installations_t,
                {
                    "uq_installation_server_id_domain": (
                        f"Domain {spec.domain} is already used by another installation "
                        "on this server."
                    ),
                    "uq_installation_server_id_host_port": (
                        f"Host port {installation.host_port} is already used by another "
                        "installation on this server."
                    ),
                    "uq_installation_server_id_container_name": (
                        f"An installation named {installation.container_name!r} already "
                        "exists on this server."
                    ),
                    "pk_installation": "This installation id is already taken.",
                },
            )
        if not inserted.rowcount:
            raise NotFound("Server not found.")

    async def _one(self, stmt: Select[Any], params: Mapping[str, object]) -> Installation | None:
        row = (await self._tx.read(stmt, params)).first()
        return _installation_to_core(row) if row else None
