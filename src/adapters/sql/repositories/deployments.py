"""Deployments: their spec, state, events and sealed env."""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from berth.core.access import Owner, team_of
from berth.core.errors import NotFound, WriteConflict
from berth.core.lifecycle import ACTIVE, sources
from berth.core.models import Deployment, DeploymentEvent, DeploymentState
from sqlalchemy import ColumnElement, and_, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from ..rows import (
    _ACTIVE_STATES,
    _DEPLOYMENT_COLUMNS,
    _deployment_to_core,
    _ending,
    _env_decoder,
    _event_to_core,
    _insert_if,
    _owned,
    _raise_conflict,
    _Repository,
    _scoped,
    _seal_env,
    _spec_values,
    deployments_t,
    events_t,
    installations_t,
)

__all__ = ["SqlDeploymentRepository"]


class SqlDeploymentRepository(_Repository):
    """``DeploymentRepository``: durable deployments, their sealed env and their event log."""

    async def add(
        self,
        owner_id: Owner,
        deployment: Deployment,
        env: dict[str, str],
        idempotency_key: str | None = None,
        fingerprint: str | None = None,
    ) -> None:
        values: dict[str, Any] = _spec_values(deployment.spec) | {
            "id": deployment.id,
            "owner_id": team_of(owner_id),
            "installation_id": deployment.installation_id,
            "server_id": deployment.server_id,
            "image_id": deployment.image_id,
            "rollback_of": deployment.rollback_of,
            "commit": deployment.commit,
            "env_sealed": _seal_env(self._box, env),
            "state": deployment.state.value,
            "step": deployment.step,
            "error": deployment.error,
            "created_at": deployment.created_at,
            "started_at": deployment.started_at,
            "finished_at": deployment.finished_at,
            "idempotency_key": idempotency_key,
            "fingerprint": fingerprint,
            "attempts": 0,
        }
        owned_installation = (
            select(installations_t.c.id)
            .where(
                installations_t.c.id == deployment.installation_id,
                *_scoped(installations_t, owner_id),
                installations_t.c.server_id == deployment.server_id,
            )
            .exists()
        )
        try:
            inserted = await self._tx.write(_insert_if(deployments_t, values, owned_installation))
        except IntegrityError as exc:
            _raise_conflict(
                exc,
                deployments_t,
                {
                    "uq_deployment_owner_id_idempotency_key": (
                        "This Idempotency-Key was already used for another deployment."
                    ),
                    "pk_deployment": "This deployment id is already taken.",
                },
            )
        if not inserted.rowcount:
            raise NotFound("Installation not found.")
        await self._add_events(deployment.id, deployment.events)

    async def get(self, owner_id: Owner, deployment_id: UUID) -> Deployment | None:
        found = await self._load(owner_id, deployments_t.c.id == deployment_id)
        return found[0][0] if found else None

    async def by_idempotency_key(self, owner_id: Owner, key: str) -> tuple[Deployment, str] | None:
        found = await self._load(owner_id, deployments_t.c.idempotency_key == key)
        return found[0] if found else None

    async def active(self, owner_id: Owner, installation_id: UUID) -> builtins.list[Deployment]:
        """Oldest first, with their events."""
        found = await self._load(
            owner_id,
            deployments_t.c.installation_id == installation_id,
            deployments_t.c.state.in_(_ACTIVE_STATES),
        )
        return [deployment for deployment, _ in found]

    async def of_installation(
        self, owner_id: Owner, installation_id: UUID, limit: int, before: UUID | None = None
    ) -> builtins.list[Deployment]:
        d = deployments_t.c
        where: builtins.list[ColumnElement[bool]] = [
            d.installation_id == installation_id,
            *_scoped(deployments_t, owner_id),
        ]
        if before is not None:
            anchor = select(d.created_at, d.id).where(
                d.id == before,
                d.installation_id == installation_id,
                *_scoped(deployments_t, owner_id),
            )
            row = (await self._tx.read(anchor)).first()
            if row is None:
                return []
            where.append(
                or_(
                    d.created_at < row.created_at,
                    and_(d.created_at == row.created_at, d.id < row.id),
                )
            )
        return await self._newest(owner_id, where, limit)

    async def add_event(self, owner_id: Owner, deployment_id: UUID, event: DeploymentEvent) -> None:
        d = deployments_t.c
        values = {
            "deployment_id": deployment_id,
            "at": event.at,
            "step": event.step,
            "message": event.message,
        }
        owned = select(d.id).where(*_owned(deployments_t, owner_id, deployment_id)).exists()
        await self._tx.write(_insert_if(events_t, values, owned))

    async def events_after(
        self, owner_id: Owner, deployment_id: UUID, after_id: int, limit: int
    ) -> tuple[DeploymentState, builtins.list[tuple[int, DeploymentEvent]]] | None:
        """The owner's deployment's state, then (a later statement: it sees at least what
        the first saw) its events with an id over ``after_id``, by id, at most ``limit``."""
        d, e = deployments_t.c, events_t.c
        of_owner = _owned(deployments_t, owner_id, deployment_id)
        state = (await self._tx.read(select(d.state).where(*of_owner))).scalar_one_or_none()
        if state is None:
            return None
        stmt = (
            select(e.id, e.at, e.step, e.message)
            .where(e.deployment_id == deployment_id, e.id > after_id)
            .order_by(e.id)
            .limit(limit)
        )
        rows = (await self._tx.read(stmt)).all()
        return DeploymentState(state), [(row.id, _event_to_core(row)) for row in rows]

    async def request_cancel(self, owner_id: Owner, deployment_id: UUID, at: datetime) -> bool:
        """The first request's time stands."""
        d = deployments_t.c
        return await self._changed(
            update(deployments_t)
            .where(
                *_owned(deployments_t, owner_id, deployment_id),
                d.state == DeploymentState.RUNNING.value,
            )
            .values(cancel_requested_at=func.coalesce(d.cancel_requested_at, at))
        )

    async def recent(
        self, owner_id: Owner, server_id: UUID, limit: int
    ) -> builtins.list[Deployment]:
        d = deployments_t.c
        return await self._newest(
            owner_id, [d.server_id == server_id, *_scoped(deployments_t, owner_id)], limit
        )

    async def _newest(
        self, owner_id: Owner, where: Sequence[ColumnElement[bool]], limit: int
    ) -> builtins.list[Deployment]:
        """The ``limit`` newest deployments matching ``where``, newest first."""
        d = deployments_t.c
        newest = select(d.id).where(*where).order_by(d.created_at.desc(), d.id.desc()).limit(limit)
        found = await self._load(owner_id, d.id.in_(newest.scalar_subquery()))
        return [deployment for deployment, _ in reversed(found)]

    async def finish(
        self,
        owner_id: Owner,
        deployment_id: UUID,
        state: DeploymentState,
        at: datetime,
        error: str | None,
        event: DeploymentEvent,
        *,
        queued_only: bool = False,
    ) -> None:
        """The states it may leave come from the core's table (``lifecycle.sources``); the
        worker's lease is released. One conditional UPDATE: a worker's claim that commits
        first wins, even on PostgreSQL at READ COMMITTED."""
        if not state.is_final:
            raise ValueError(f"{state} is not a final state.")
        d = deployments_t.c
        allowed = sources(state) & ({DeploymentState.QUEUED} if queued_only else ACTIVE)
        from_states = sorted(s.value for s in allowed)
        of_owner = _owned(deployments_t, owner_id, deployment_id)
        ended = await self._changed(
            update(deployments_t)
            .where(*of_owner, d.state.in_(from_states))
            .values(_ending(state, at, error))
        )
        if not ended:
            found = (await self._tx.read(select(d.state).where(*of_owner))).first()
            if found is None and queued_only:  # removed meanwhile: decide again on fresh reads
                raise WriteConflict("This deployment is gone.")
            if found is None:
                raise NotFound("Deployment not found.")
            if found.state == DeploymentState.RUNNING.value:
                raise WriteConflict("This deployment is running.")
            raise WriteConflict("This deployment has already finished.")
        await self._add_events(deployment_id, [event])

    async def env(self, owner_id: Owner, deployment_id: UUID) -> dict[str, str]:
        d = deployments_t.c
        stmt = select(d.env_sealed).where(*_owned(deployments_t, owner_id, deployment_id))
        sealed = (await self._tx.read(stmt)).scalar_one_or_none()
        if sealed is None:
            raise NotFound("Deployment not found.")
        return _env_decoder.decode(self._box.open(sealed))

    async def _load(
        self, owner_id: Owner, *where: ColumnElement[bool]
    ) -> builtins.list[tuple[Deployment, str]]:
        """The owner's deployments matching ``where``, with their events and fingerprints."""
        d = deployments_t.c
        stmt = (
            select(*_DEPLOYMENT_COLUMNS)
            .where(*_scoped(deployments_t, owner_id), *where)
            .order_by(d.created_at, d.id)
        )
        rows = (await self._tx.read(stmt)).all()
        if not rows:
            return []
        events = await self._events([row.id for row in rows])
        return [
            (_deployment_to_core(row, events.get(row.id, ())), row.fingerprint or "")
            for row in rows
        ]

    async def _events(self, ids: Sequence[UUID]) -> dict[UUID, builtins.list[DeploymentEvent]]:
        e = events_t.c
        stmt = (
            select(e.deployment_id, e.at, e.step, e.message)
            .where(e.deployment_id.in_(ids))
            .order_by(e.at, e.id)
        )
        found: dict[UUID, builtins.list[DeploymentEvent]] = {}
        for row in await self._tx.read(stmt):
            found.setdefault(row.deployment_id, []).append(_event_to_core(row))
        return found

    async def _add_events(self, deployment_id: UUID, events: Iterable[DeploymentEvent]) -> None:
        rows = [
            {"deployment_id": deployment_id, "at": ev.at, "step": ev.step, "message": ev.message}
            for ev in events
        ]
        if rows:
            await self._tx.write(insert(events_t), rows)
