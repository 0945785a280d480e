"""Installations: the apps on a server, their sealed env and status."""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from datetime import UTC, datetime
from functools import partial
from typing import Any
from uuid import UUID

from berth.core.access import Owner, team_of
from berth.core.errors import NotFound
from berth.core.models import (
    DeploymentRef,
    DeploymentState,
    Installation,
    InstallationStatus,
    RunState,
    TlsState,
    TlsStatus,
)
from sqlalchemy import ColumnElement, Select, bindparam, literal, select, update
from sqlalchemy.exc import IntegrityError

from ..rows import (
    _ACTIVE_STATES,
    AnyRow,
    _insert_if,
    _limited,
    _owned,
    _raise_conflict,
    _Repository,
    _scoped,
    _seal_env,
    _spec_to_core,
    _spec_values,
    deployments_t,
    installations_t,
    servers_t,
    watches_t,
)

__all__ = ["SqlInstallationRepository"]

# What its queries select: what the core needs, never the sealed env.
_INSTALLATION_COLUMNS = [c for c in installations_t.c if c.name not in ("env_sealed", "owner_id")]

# ``_ACTIVE_STATES`` as one bound parameter each: ``IN (?, ?)`` compiled once, where a list
# is an "expanding" parameter that SQLAlchemy re-renders into the SQL at every execution.
_ACTIVE_STATE_PARAMS = [literal(state) for state in _ACTIVE_STATES]
_DEPLOYMENT_STATES = {state.value: state for state in DeploymentState}
_CARRIED_OUT_STATE_PARAMS = [
    literal(state)
    for state in DeploymentState
    if state.is_final and state is not DeploymentState.CANCELED
]


def _installations_where(*where: ColumnElement[bool], with_server_id: bool = True) -> Select[Any]:
    """The owner's installations matching ``where``, each with what its status derives from.

    One query: correlated subqueries, each an index seek into the installation's
    deployments, give its newest deployment (joined for id, state and end time),
    whether any deployment is active, whether any ended otherwise than canceled, and the
    state of its newest finished one.
    Without ``with_server_id`` (``where`` fixes the server), the server id is left out.
    """
    i = installations_t.c
    d = deployments_t.alias("d").c
    of_this = (d.installation_id == i.id, d.owner_id == i.owner_id)
    newest_first = (d.created_at.desc(), d.id.desc())
    newest_id = select(d.id).where(*of_this).order_by(*newest_first).limit(1).scalar_subquery()
    newest_final_state = (
        select(d.state)
        .where(*of_this, d.state.not_in(_ACTIVE_STATE_PARAMS))
        .order_by(*newest_first)
        .limit(1)
        .scalar_subquery()
    )
    any_active = select(d.id).where(*of_this, d.state.in_(_ACTIVE_STATE_PARAMS)).exists()
    carried_out = (  # a deployment that ended otherwise than canceled
        select(d.id).where(*of_this, d.state.in_(_CARRIED_OUT_STATE_PARAMS)).exists()
    )
    last = deployments_t.alias("last")
    w = watches_t.c
    columns = [c for c in _INSTALLATION_COLUMNS if with_server_id or c.name != "server_id"]
    return (
        select(
            *columns,
            last.c.id.label("last_id"),
            last.c.state.label("last_state"),
            last.c.finished_at.label("last_finished_at"),
            any_active.label("any_active"),
            carried_out.label("carried_out"),
            newest_final_state.label("last_final_state"),
            w.state.label("run_state"),
            w.exit_code.label("run_exit_code"),
            w.exited_at.label("run_exited_at"),
            w.restart_count.label("run_restart_count"),
        )
        .outerjoin_from(installations_t, last, last.c.id == newest_id)
        .outerjoin(watches_t, w.installation_id == i.id)
        .where(i.owner_id == bindparam("owner_id"), *where)
        .order_by(i.created_at, i.id)
    )


# Built once with named parameters (listing is benchmarked): SQLAlchemy reuses their
# compiled form.
_PRESENT = installations_t.c.removed_at.is_(None)
_OF_SERVER = installations_t.c.server_id == bindparam("server_id")
#: A server's installations that are not removed, and all of them (history included).
_INSTALLATIONS_OF_SERVER = _installations_where(_OF_SERVER, _PRESENT, with_server_id=False)
_ALL_INSTALLATIONS_OF_SERVER = _installations_where(_OF_SERVER, with_server_id=False)
_INSTALLATION_BY_ID = _installations_where(installations_t.c.id == bindparam("installation_id"))
_INSTALLATION_BY_CONTAINER_NAME = _installations_where(
    _OF_SERVER, installations_t.c.container_name == bindparam("container_name"), _PRESENT
)


def _installation_status(row: AnyRow) -> InstallationStatus:
    """The core's rule over what the listing query aggregated."""
    last = row.last_final_state
    return InstallationStatus.derive(
        any_active=bool(row.any_active),
        last_final=DeploymentState(last) if last else None,
        serving=row.current_deployment_id is not None,
        stopped=row.stopped_at is not None,
        removed=row.removed_at is not None,
        # a stop on request runs; one cut short by a crash stops saying so at its end
        stopping=row.stopping_until is not None and row.stopping_until > datetime.now(UTC),
        container=RunState(row.run_state) if row.run_state else None,
        only_canceled=not row.carried_out,
    )


def _installation_to_core(row: AnyRow, server_id: UUID | None = None) -> Installation:
    """From a row of ``_installations_where``; ``server_id`` if the row has none."""
    last = (
        DeploymentRef(
            id=row.last_id,
            state=_DEPLOYMENT_STATES[row.last_state],
            finished_at=row.last_finished_at,
        )
        if row.last_id is not None
        else None
    )
    return Installation(
        id=row.id,
        server_id=row.server_id if server_id is None else server_id,
        name=row.name,
        container_name=row.container_name,
        spec=_spec_to_core(row),
        host_port=row.host_port,
        status=_installation_status(row),
        created_at=row.created_at,
        updated_at=row.updated_at,
        last_deployment=last,
        current_deployment_id=row.current_deployment_id,
        removed_at=row.removed_at,
        stopped_at=row.stopped_at,
        stopping_until=row.stopping_until,
        tls=_tls_to_core(row),
        exit_code=row.run_exit_code,
        exited_at=row.run_exited_at,
        restart_count=row.run_restart_count or 0,
    )


def _tls_to_core(row: AnyRow) -> TlsStatus | None:
    if row.tls_state is None or row.tls_checked_at is None:
        return None
    return TlsStatus(
        state=TlsState(row.tls_state),
        reason=row.tls_reason,
        issuer=row.tls_issuer or "acme",
        checked_at=row.tls_checked_at,
    )


class SqlInstallationRepository(_Repository):
    """``InstallationRepository``: installations with their status derived from deployments."""

    async def get(self, owner_id: Owner, installation_id: UUID) -> Installation | None:
        """The owner's installation with its last deployment, or ``None``."""
        return await self._one(
            _limited(_INSTALLATION_BY_ID, installations_t.c.server_id, owner_id),
            {"owner_id": team_of(owner_id), "installation_id": installation_id},
        )

    async def get_by_container_name(
        self, owner_id: Owner, server_id: UUID, container_name: str
    ) -> Installation | None:
        """The installation with this container name on the owner's server, or ``None``."""
        return await self._one(
            _limited(_INSTALLATION_BY_CONTAINER_NAME, installations_t.c.server_id, owner_id),
            {
                "owner_id": team_of(owner_id),
                "server_id": server_id,
                "container_name": container_name,
            },
        )

    async def list(
        self, owner_id: Owner, server_id: UUID, *, include_removed: bool = False
    ) -> builtins.list[Installation]:
        """One query, whatever the number of installations and deployments; cached per
        (owner, server) until the next commit anywhere.
        """
        found = await self._tx.cached(
            ("installations", owner_id, server_id, include_removed),
            partial(self._list, owner_id, server_id, include_removed),
            weight=lambda installations: 1 + len(installations),
        )
        return builtins.list(found)

    async def _list(
        self, owner_id: Owner, server_id: UUID, include_removed: bool
    ) -> tuple[Installation, ...]:
        params = {"owner_id": team_of(owner_id), "server_id": server_id}
        query = _ALL_INSTALLATIONS_OF_SERVER if include_removed else _INSTALLATIONS_OF_SERVER
        query = _limited(query, installations_t.c.server_id, owner_id)
        result = await self._tx.read(query, params)
        return tuple(_installation_to_core(row, server_id) for row in result)

    async def remove(self, owner_id: Owner, installation_id: UUID, at: datetime) -> bool:
        return await self._mark(
            owner_id, installation_id, removed_at=at, host_port=None, stopped_at=None
        )

    async def set_stopped(
        self, owner_id: Owner, installation_id: UUID, at: datetime | None
    ) -> bool:
        return await self._mark(owner_id, installation_id, stopped_at=at)

    async def set_stopping(
        self, owner_id: Owner, installation_id: UUID, until: datetime | None
    ) -> bool:
        return await self._mark(owner_id, installation_id, stopping_until=until)

    async def _mark(self, owner_id: Owner, installation_id: UUID, **values: Any) -> bool:
        return await self._changed(
            update(installations_t)
            .where(
                *_owned(installations_t, owner_id, installation_id),
                installations_t.c.removed_at.is_(None),
            )
            .values(**values)
        )

    async def save(self, owner_id: Owner, installation: Installation, env: dict[str, str]) -> None:
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
                    *_scoped(installations_t, owner_id),
                    installations_t.c.server_id == installation.server_id,
                    installations_t.c.removed_at.is_(None),
                )
                .values(values)
            )
            if updated.rowcount:
                return
            values |= {
                "id": installation.id,
                "owner_id": team_of(owner_id),
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
                        *_scoped(servers_t, owner_id),
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
