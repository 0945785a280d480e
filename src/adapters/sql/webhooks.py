"""Webhooks in SQL: the repository of a unit of work (which writes the outbox when the
core's handler of a change asks it to, in that change's transaction) and the outbox the
worker delivers from (``berth.core.ports.WebhookOutbox``).

The outbox is the ``webhook_delivery`` table. A row is written in the same
transaction as the change it tells of (``berth.core.unit_of_work``), so a rolled-back
change tells nothing and a committed one cannot lose its event. Workers claim rows as
they claim deployments: on PostgreSQL the candidates are read ``FOR UPDATE SKIP
LOCKED``, on SQLite the claiming ``UPDATE`` re-checks the lease in its ``WHERE``; each
claim holds a lease, and a row whose worker died is claimed again once its lease has
run out.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast
from uuid import UUID, uuid4

import msgspec
import structlog
from berth.core.access import Owner, team_of
from berth.core.models import (
    DeliveryAttempt,
    DeliveryState,
    Webhook,
    WebhookDelivery,
    WebhookEvent,
    WebhookFormat,
)
from berth.core.outbox import OutboxMessage
from berth.core.ports import SecretBox
from sqlalchemy import Row, Table, and_, delete, func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from . import dialect
from .rows import _owned, _Repository
from .tables import WebhookDeliveryRow, WebhookRow
from .transaction import transaction

__all__ = ["SqlWebhookOutbox", "SqlWebhookRepository"]

log = structlog.get_logger()

webhooks_t = cast(Table, WebhookRow.__table__)
deliveries_t = cast(Table, WebhookDeliveryRow.__table__)

_PENDING = DeliveryState.PENDING.value
_KNOWN_EVENTS = {event.value: event for event in WebhookEvent}
_WEBHOOK_COLUMNS = [c for c in webhooks_t.c if c.name != "secret_sealed"]
#: A stored URL that the key does not open (the store was restored with another key).
UNREADABLE_URL = "(sealed with another key: delete this webhook and add it again)"


def _webhook_to_core(row: Row[Any], box: SecretBox) -> Webhook:
    try:
        url = box.open(row.url_sealed).decode()
    except ValueError:
        url = UNREADABLE_URL
    return Webhook(
        id=row.id,
        owner_id=row.owner_id,
        url=url,
        events=tuple(_KNOWN_EVENTS[e] for e in row.events if e in _KNOWN_EVENTS),
        created_at=row.created_at,
        format=_format(row.format),
    )


def _format(value: str) -> WebhookFormat:
    """A stored format; one this berth does not know (a newer one wrote it) is standard."""
    try:
        return WebhookFormat(value)
    except ValueError:
        return WebhookFormat.STANDARD


def _delivery_to_core(row: Row[Any]) -> WebhookDelivery:
    return WebhookDelivery(
        id=row.id,
        webhook_id=row.webhook_id,
        event=WebhookEvent(row.event),
        created_at=row.created_at,
        state=DeliveryState(row.state),
        attempts=msgspec.convert(row.log, tuple[DeliveryAttempt, ...]),
        next_attempt_at=row.next_attempt_at if row.state == _PENDING else None,
        delivered_at=row.delivered_at,
    )


class SqlWebhookRepository(_Repository):
    """``WebhookRepository``: every query filters on the owner.

    ``list`` is read once per owner in a unit of work (until it adds or deletes a
    webhook): a fleet's status changes, told of in one transaction, ask it for each
    server."""

    _listed: dict[UUID, list[Webhook]] | None = None

    async def add(self, webhook: Webhook, secret: str) -> None:
        self._listed = None
        await self._tx.write(
            insert(webhooks_t).values(
                id=webhook.id,
                owner_id=webhook.owner_id,
                url_sealed=self._box.seal(webhook.url.encode()),
                events=[event.value for event in webhook.events],
                secret_sealed=self._box.seal(secret.encode()),
                created_at=webhook.created_at,
                format=webhook.format.value,
            )
        )

    async def count(self, owner_id: Owner) -> int:
        found = await self._tx.read(
            select(func.count())
            .select_from(webhooks_t)
            .where(webhooks_t.c.owner_id == team_of(owner_id))
        )
        return int(found.scalar_one())

    async def get(self, owner_id: Owner, webhook_id: UUID) -> Webhook | None:
        w = webhooks_t.c
        found = await self._tx.read(
            select(*_WEBHOOK_COLUMNS).where(w.id == webhook_id, w.owner_id == team_of(owner_id))
        )
        row = found.first()
        return None if row is None else _webhook_to_core(row, self._box)

    async def secret(self, owner_id: Owner, webhook_id: UUID) -> str | None:
        w = webhooks_t.c
        found = await self._tx.read(
            select(w.secret_sealed).where(w.id == webhook_id, w.owner_id == team_of(owner_id))
        )
        sealed = found.scalar_one_or_none()
        try:
            return None if sealed is None else self._box.open(sealed).decode()
        except ValueError:
            return None

    async def delete(self, owner_id: Owner, webhook_id: UUID) -> bool:
        self._listed = None
        q = deliveries_t.c
        await self._tx.write(
            delete(deliveries_t).where(q.webhook_id == webhook_id, q.owner_id == team_of(owner_id))
        )
        return await self._changed(
            delete(webhooks_t).where(*_owned(webhooks_t, owner_id, webhook_id))
        )

    async def deliveries(
        self, owner_id: Owner, webhook_id: UUID, limit: int
    ) -> list[WebhookDelivery] | None:
        if await self.get(owner_id, webhook_id) is None:
            return None
        q = deliveries_t.c
        found = await self._tx.read(
            select(
                q.id,
                q.webhook_id,
                q.event,
                q.created_at,
                q.state,
                q.log,
                q.next_attempt_at,
                q.delivered_at,
            )
            .where(q.webhook_id == webhook_id, q.owner_id == team_of(owner_id))
            .order_by(q.created_at.desc(), q.id.desc())
            .limit(limit)
        )
        return [_delivery_to_core(row) for row in found]

    async def list(self, owner_id: Owner) -> list[Webhook]:
        team = team_of(owner_id)
        if self._listed is None:
            self._listed = {}
        listed = self._listed.get(team)
        if listed is None:
            w = webhooks_t.c
            found = await self._tx.read(
                select(*_WEBHOOK_COLUMNS).where(w.owner_id == team).order_by(w.created_at, w.id)
            )
            listed = self._listed[team] = [_webhook_to_core(r, self._box) for r in found]
        return list(listed)

    async def enqueue(
        self, webhooks: Sequence[Webhook], event: WebhookEvent, body: bytes, at: datetime
    ) -> None:
        if not webhooks:
            return
        await self._tx.write(
            insert(deliveries_t),
            [
                {
                    "id": uuid4(),
                    "webhook_id": hook.id,
                    "owner_id": hook.owner_id,
                    "event": event.value,
                    "body": body,
                    "created_at": at,
                    "state": _PENDING,
                    "attempts": 0,
                    "next_attempt_at": at,
                    "log": [],
                }
                for hook in webhooks
            ],
        )


# --- the worker's side -------------------------------------------------------------------


class SqlWebhookOutbox:
    """``WebhookOutbox`` over ``webhook_delivery``, shared by any number of workers.

    Each method is its own transaction, committed before it returns. A pass that finds
    nothing due writes nothing (one indexed read), so polling it costs SQLite no lock.
    """

    def __init__(self, engine: AsyncEngine, box: SecretBox) -> None:
        self._engine = engine
        self._box = box

    async def claim(
        self, worker_id: str, now: datetime, lease_until: datetime, limit: int, max_attempts: int
    ) -> list[OutboxMessage]:
        q = deliveries_t.c
        free = or_(q.lease_expires_at.is_(None), q.lease_expires_at < now)
        due = and_(q.state == _PENDING, q.next_attempt_at <= now, free)
        async with transaction(self._engine) as tx:
            candidates = dialect.claimable(
                tx.dialect,
                select(q.id, q.attempts).where(due).order_by(q.next_attempt_at, q.id).limit(limit),
                deliveries_t,
            )
            rows = (await tx.read(candidates)).all()
            if not rows:
                return []
            spent = [row.id for row in rows if row.attempts >= max_attempts]
            if spent:  # its last attempt was claimed by a worker that died: given up
                await tx.write(
                    update(deliveries_t)
                    .where(q.id.in_(spent), due)
                    .values(state=DeliveryState.FAILED.value, lease_owner=None)
                )
            ids = [row.id for row in rows if row.attempts < max_attempts]
            if not ids:
                return []
            claimed = await tx.write(
                update(deliveries_t)
                .where(q.id.in_(ids), due)
                .values(
                    lease_owner=worker_id, lease_expires_at=lease_until, attempts=q.attempts + 1
                )
                .returning(q.id)
            )
            taken = [row.id for row in claimed]
            if not taken:
                return []
            w = webhooks_t.c
            found = await tx.read(
                select(
                    q.id,
                    q.webhook_id,
                    q.event,
                    q.body,
                    q.attempts,
                    w.url_sealed,
                    w.secret_sealed,
                    w.format,
                )
                .join_from(deliveries_t, webhooks_t, w.id == q.webhook_id)
                .where(q.id.in_(taken))
                .order_by(q.next_attempt_at, q.id)
            )
            messages: list[OutboxMessage] = []
            unreadable: list[UUID] = []
            for row in found:
                try:
                    secret = self._box.open(row.secret_sealed).decode()
                    url = self._box.open(row.url_sealed).decode()
                except ValueError:
                    unreadable.append(row.id)
                    continue
                messages.append(
                    OutboxMessage(
                        delivery_id=row.id,
                        webhook_id=row.webhook_id,
                        event=WebhookEvent(row.event),
                        url=url,
                        body=bytes(row.body),
                        attempt=row.attempts,
                        secret=secret,
                        format=_format(row.format),
                    )
                )
            if unreadable:
                await tx.write(
                    update(deliveries_t)
                    .where(q.id.in_(unreadable))
                    .values(
                        state=DeliveryState.FAILED.value,
                        lease_owner=None,
                        lease_expires_at=None,
                        log=[
                            msgspec.to_builtins(
                                DeliveryAttempt(
                                    at=now,
                                    error="The webhook's URL or secret cannot be unsealed "
                                    "(another secret key?); not sent.",
                                )
                            )
                        ],
                    )
                )
                for delivery_id in unreadable:
                    log.error("webhook_secret_unreadable", delivery_id=str(delivery_id))
            return messages

    async def record(
        self,
        delivery_id: UUID,
        worker_id: str,
        attempt: DeliveryAttempt,
        state: DeliveryState,
        next_attempt_at: datetime | None,
    ) -> bool:
        q = deliveries_t.c
        held = (q.id == delivery_id, q.lease_owner == worker_id, q.state == _PENDING)
        async with transaction(self._engine) as tx:
            row = (await tx.read(select(q.log).where(*held))).first()
            if row is None:
                return False
            written = await tx.write(
                update(deliveries_t)
                .where(*held)
                .values(
                    state=state.value,
                    next_attempt_at=next_attempt_at,
                    delivered_at=attempt.at if state is DeliveryState.DELIVERED else None,
                    lease_owner=None,
                    lease_expires_at=None,
                    log=[*row.log, msgspec.to_builtins(attempt)],
                )
            )
            return bool(written.rowcount)
