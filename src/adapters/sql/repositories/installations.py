"""Installations: the apps on a server, their sealed env and status."""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from functools import partial
from typing import Any
from uuid import UUID

from berth.core.errors import NotFound
from berth.core.models import Installation
from sqlalchemy import Select, delete, select, update
from sqlalchemy.exc import IntegrityError

from ..rows import (
    _INSTALLATION_BY_CONTAINER_NAME,
    _INSTALLATION_BY_ID,
    _INSTALLATIONS_OF_SERVER,
    _insert_if,
    _installation_to_core,
    _raise_conflict,
    _Repository,
    _seal_env,
    deployments_t,
    events_t,
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

    async def list(self, owner_id: UUID, server_id: UUID) -> builtins.list[Installation]:
        """The server's installations, oldest first, each with its last deployment.

        One query, whatever the number of installations and deployments; cached
        per (owner, server) until the next commit anywhere.
        """
        found = await self._tx.cached(
            ("installations", owner_id, server_id),
            partial(self._list, owner_id, server_id),
            weight=lambda installations: 1 + len(installations),
        )
        return builtins.list(found)

    async def _list(self, owner_id: UUID, server_id: UUID) -> tuple[Installation, ...]:
        params = {"owner_id": owner_id, "server_id": server_id}
        result = await self._tx.read(_INSTALLATIONS_OF_SERVER, params)
        return tuple(_installation_to_core(row, server_id) for row in result)

    async def delete(self, owner_id: UUID, installation_id: UUID) -> bool:
        """Remove the owner's installation with its deployments and their events.

        ``False`` if there was no such installation of the owner.
        """
        d = deployments_t.c
        of_installation = (d.installation_id == installation_id, d.owner_id == owner_id)
        await self._tx.write(
            delete(events_t).where(
                events_t.c.deployment_id.in_(select(d.id).where(*of_installation))
            )
        )
        await self._tx.write(delete(deployments_t).where(*of_installation))
        deleted = await self._tx.write(
            delete(installations_t).where(
                installations_t.c.id == installation_id, installations_t.c.owner_id == owner_id
            )
        )
        return bool(deleted.rowcount)

    async def save(self, owner_id: UUID, installation: Installation, env: dict[str, str]) -> None:
        """Insert or update the owner's installation; env values are sealed.

        Raises ``WriteConflict`` if another installation on the server holds the same
        container name, domain or host port, and ``NotFound`` if the server is not
        the owner's. The installation's status and last deployment are derived,
        never stored.
        """
        spec = installation.spec
        values: dict[str, Any] = {
            "name": installation.name,
            "container_name": installation.container_name,
            "image": spec.image,
            "port": spec.port,
            "domain": spec.domain,
            "host_port": installation.host_port,
            "env_keys": list(spec.env_keys),
            "env_sealed": _seal_env(self._box, env),
            "volumes": list(spec.volumes),
            "updated_at": installation.updated_at,
        }
        try:
            updated = await self._tx.write(
                update(installations_t)
                .where(
                    installations_t.c.id == installation.id,
                    installations_t.c.owner_id == owner_id,
                    installations_t.c.server_id == installation.server_id,
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
