"""Webhooks: a user's endpoints (create, list, delete, read the delivery log), and the
worker's pass over the outbox that POSTs each delivery, signed, until it is taken."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from datetime import timedelta
from uuid import uuid4

import structlog

from .. import commands as c
from ..errors import Conflict, NotFound
from ..models import DeliveryAttempt, DeliveryState, User, Webhook, WebhookDelivery
from ..outbox import OutboxMessage
from ..ports import Clock, WebhookOutbox, WebhookSender
from ..results import CreatedWebhook
from ..webhooks import (
    ERROR_MAX,
    WEBHOOKS_MAX,
    RetryPolicy,
    generate_secret,
    message_id,
    retry_delay,
    signed_headers,
)
from .owned import ForgetOwned, ListOwned, UsesStore, UsesStoreAndClock

__all__ = [
    "CreateWebhook",
    "DeleteWebhook",
    "DeliverWebhooks",
    "ListWebhookDeliveries",
    "ListWebhooks",
]

log = structlog.get_logger()


class CreateWebhook(UsesStoreAndClock):
    """Register an endpoint of the caller's, with a new secret (at most ``WEBHOOKS_MAX``)."""

    async def __call__(self, owner: User, cmd: c.CreateWebhook) -> CreatedWebhook:
        secret = generate_secret()
        webhook = Webhook(
            id=uuid4(),
            owner_id=owner.id,
            url=cmd.url,
            events=cmd.events,
            created_at=self._clock.now(),
        )
        async with self._uow() as uow:
            if await uow.webhooks.count(owner.id) >= WEBHOOKS_MAX:
                raise Conflict(
                    f"You have {WEBHOOKS_MAX} webhooks already, the most there can be; "
                    "delete one first.",
                    kind="webhook-limit",
                )
            await uow.webhooks.add(webhook, secret)
            await uow.commit()
        log.info("webhook_created", webhook_id=str(webhook.id), owner_id=str(owner.id))
        return CreatedWebhook(webhook=webhook, secret=secret)


class ListWebhooks(ListOwned[Webhook], repository="webhooks"):
    """The caller's webhooks (never their secrets)."""


class DeleteWebhook(ForgetOwned, repository="webhooks", noun="webhook", event="webhook_deleted"):
    """Forget one of the caller's webhooks; ``NotFound`` if it is not theirs."""


class ListWebhookDeliveries(UsesStore):
    """The newest deliveries of one of the caller's webhooks; ``NotFound`` if not theirs."""

    async def __call__(self, owner: User, cmd: c.ListWebhookDeliveries) -> list[WebhookDelivery]:
        async with self._uow() as uow:
            found = await uow.webhooks.deliveries(owner.id, cmd.webhook_id, cmd.limit)
        if found is None:
            raise NotFound("Webhook not found.")
        return found


@dataclass(eq=False)
class DeliverWebhooks:
    """One pass over the outbox: claim what is due, POST each (concurrently), record each
    answer and when to try again. At least once: a delivery is recorded as made only
    after its endpoint answered 2xx, so a worker that dies between the two makes it again
    (with the same ``webhook-id``) once its lease runs out.

    Neither the secret nor the URL (it may hold a token) is logged.
    """

    _outbox: WebhookOutbox
    _sender: WebhookSender
    _clock: Clock
    _: KW_ONLY
    worker_id: str
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    batch: int = 20
    jitter: Callable[[], float] = random.random

    @property
    def _lease(self) -> timedelta:
        """Long enough for the POST and the write after it; a worker that died is replaced
        after this."""
        return timedelta(seconds=max(30.0, 3 * self.policy.timeout))

    async def __call__(self) -> int:
        """Attempt every delivery due now (up to one batch); returns how many."""
        now = self._clock.now()
        claimed = await self._outbox.claim(
            self.worker_id, now, now + self._lease, self.batch, self.policy.max_attempts
        )
        if claimed:
            await asyncio.gather(*(self._deliver(message) for message in claimed))
        return len(claimed)

    async def _deliver(self, message: OutboxMessage) -> None:
        started = self._clock.now()
        msg_id = message_id(message.delivery_id)
        headers = signed_headers(message.secret, msg_id, int(started.timestamp()), message.body)
        result = await self._sender.send(message.url, headers, message.body, self.policy.timeout)
        error = result.error
        if result.status_code is not None and not result.delivered:
            error = f"HTTP {result.status_code}" + (
                ": redirects are not followed" if 300 <= result.status_code < 400 else ""
            )
        if error is not None and len(error) > ERROR_MAX:
            error = error[:ERROR_MAX] + "…"
        attempt = DeliveryAttempt(at=started, status_code=result.status_code, error=error)
        next_at = None
        if result.delivered:
            state = DeliveryState.DELIVERED
        else:
            delay = retry_delay(self.policy, message.attempt, self.jitter())
            state = DeliveryState.FAILED if delay is None else DeliveryState.PENDING
            if delay is not None:
                next_at = self._clock.now() + timedelta(seconds=delay)
        recorded = await self._outbox.record(
            message.delivery_id, self.worker_id, attempt, state, next_at
        )
        log.info(
            "webhook_delivery_attempted",
            delivery_id=str(message.delivery_id),
            webhook_id=str(message.webhook_id),
            webhook_event=message.event.value,
            attempt=message.attempt,
            status_code=result.status_code,
            error=error,
            state=state.value,
            recorded=recorded,
        )
