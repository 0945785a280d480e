"""Webhooks: a user's endpoints (create, list, delete, read the delivery log), the outbox
written in the transaction of each change they are told of (``tell_webhooks``), and the
worker's pass over the outbox that POSTs each delivery, signed, until it is taken."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from datetime import timedelta
from typing import TypedDict
from uuid import UUID, uuid4

import msgspec
import structlog

from .. import commands as c
from ..access import Actor
from ..errors import Conflict, NotFound
from ..events import DeploymentFinished, InstallationStatusChanged, ServerStatusChanged
from ..models import (
    DeliveryAttempt,
    DeliveryState,
    Webhook,
    WebhookDelivery,
    WebhookEvent,
)
from ..outbound import OutboundGuard, check_url_target
from ..outbox import OutboxMessage, SendResult
from ..paging import matches_name
from ..ports import Clock, UnitOfWork, WebhookOutbox, WebhookSender
from ..results import CreatedWebhook, WebhookTestResult
from ..unit_of_work import EventHandlers
from ..webhooks import (
    TEST_EVENT,
    WEBHOOKS_MAX,
    RetryPolicy,
    attempt_error,
    chat_body,
    deployment_body,
    event_of_deployment,
    event_of_server,
    generate_secret,
    installation_body,
    message_id,
    ping_body,
    retry_delay,
    server_body,
    shown_url,
    signed_headers,
)
from .owned import ForgetOwned, ListOwned, UsesStore, UsesStoreAndClock, audit

__all__ = [
    "CreateWebhook",
    "DeleteWebhook",
    "DeliverWebhooks",
    "ListWebhookDeliveries",
    "ListWebhooks",
    "SendTestWebhook",
    "tell_webhooks",
]

log = structlog.get_logger()

#: A test's answer when the store's key does not open the webhook's secret.
UNSEALABLE = (
    "Its URL or secret cannot be unsealed with this berth's key: delete it and add it again."
)


def tell_webhooks(events: EventHandlers) -> None:
    """Write the outbox in the transaction of every change a webhook may be told of: a
    delivery per subscribed webhook of the owner, at least once (``DeliverWebhooks``)."""
    events.in_transaction(DeploymentFinished, _deployment_finished)
    events.in_transaction(ServerStatusChanged, _server_status_changed)
    events.in_transaction(InstallationStatusChanged, _installation_status_changed)


async def _subscribed(uow: UnitOfWork, owner_id: UUID, event: WebhookEvent | None) -> list[Webhook]:
    """The owner's webhooks that take ``event`` (none when the change is no event)."""
    if event is None:
        return []
    return [hook for hook in await uow.webhooks.list(owner_id) if event in hook.events]


class _Named(TypedDict):
    installation_id: UUID
    installation_name: str
    server_id: UUID
    server_name: str


async def _names(uow: UnitOfWork, owner_id: UUID, server_id: UUID, installation_id: UUID) -> _Named:
    """The ids and names of an event's server and installation, for its body ("" for a
    name that is gone)."""
    installation = await uow.installations.get(owner_id, installation_id)
    server = await uow.servers.get(owner_id, server_id)
    return {
        "installation_id": installation_id,
        "installation_name": installation.name if installation is not None else "",
        "server_id": server_id,
        "server_name": server.name if server is not None else "",
    }


async def _deployment_finished(ended: DeploymentFinished, uow: UnitOfWork) -> None:
    event = event_of_deployment(ended.state)
    hooks = await _subscribed(uow, ended.owner_id, event)
    if event is None or not hooks:
        return
    body = deployment_body(
        event,
        deployment_id=ended.deployment_id,
        **await _names(uow, ended.owner_id, ended.server_id, ended.installation_id),
        state=ended.state,
        error=ended.error,
        finished_at=ended.at,
    )
    await uow.webhooks.enqueue(hooks, event, body, ended.at)


async def _server_status_changed(changed: ServerStatusChanged, uow: UnitOfWork) -> None:
    event = event_of_server(changed.status)
    hooks = await _subscribed(uow, changed.owner_id, event)
    server = await uow.servers.get(changed.owner_id, changed.server_id) if hooks else None
    if event is None or server is None:
        return
    body = server_body(
        event,
        server_id=changed.server_id,
        server_name=server.name,
        status=changed.status,
        detail=changed.detail,
        at=changed.at,
    )
    await uow.webhooks.enqueue(hooks, event, body, changed.at)


async def _installation_status_changed(changed: InstallationStatusChanged, uow: UnitOfWork) -> None:
    hooks = await _subscribed(uow, changed.owner_id, changed.event)
    if not hooks:
        return
    body = installation_body(
        changed.event,
        **await _names(uow, changed.owner_id, changed.server_id, changed.installation_id),
        state=changed.state,
        exit_code=changed.exit_code,
        restart_count=changed.restart_count,
        message=changed.message,
        at=changed.at,
    )
    await uow.webhooks.enqueue(hooks, changed.event, body, changed.at)


@dataclass(eq=False)
class CreateWebhook(UsesStoreAndClock):
    """Register an endpoint of the caller's, with a new secret (at most ``WEBHOOKS_MAX``).

    Its host must resolve to public addresses only (``berth.core.outbound``): else
    ``InvalidInput`` at ``url`` saying why, and nothing is written.
    """

    _guard: OutboundGuard

    async def __call__(self, owner: Actor, cmd: c.CreateWebhook) -> CreatedWebhook:
        await _check_target(self._guard, cmd.url)
        secret = generate_secret()
        webhook = Webhook(
            id=uuid4(),
            owner_id=owner.team_id,
            url=cmd.url,
            events=cmd.events,
            created_at=self._clock.now(),
            format=cmd.format,
        )
        async with self._uow() as uow:
            if await uow.webhooks.count(owner.scope) >= WEBHOOKS_MAX:
                raise Conflict(
                    f"You have {WEBHOOKS_MAX} webhooks already, the most there can be; "
                    "delete one first.",
                    kind="webhook-limit",
                )
            await uow.webhooks.add(webhook, secret)
            audit(uow, owner, "webhook.create", "webhook", webhook.id, shown_url(cmd.url))
            await uow.commit()
        log.info("webhook_created", webhook_id=str(webhook.id), owner_id=str(owner.team_id))
        return CreatedWebhook(webhook=webhook, secret=secret)


async def _check_target(guard: OutboundGuard, url: str) -> None:
    """``InvalidInput`` at ``url`` unless the URL's host is one berth may POST to."""
    await check_url_target(guard, url, "url")


class ListWebhooks(ListOwned[Webhook], repository="webhooks"):
    """The caller's webhooks (never their secrets), each URL shown as ``shown_url``
    shows it: a path or query may hold a token."""

    async def __call__(self, owner: Actor, cmd: object) -> list[Webhook]:
        found = await super().__call__(owner, cmd)
        wanted = cmd.url if isinstance(cmd, c.ListWebhooks) else None
        shown = (msgspec.structs.replace(w, url=shown_url(w.url)) for w in found)
        return [w for w in shown if matches_name(w.url, wanted)]


class DeleteWebhook(ForgetOwned, repository="webhooks", noun="webhook", event="webhook_deleted"):
    """Forget one of the caller's webhooks; ``NotFound`` if it is not theirs."""


@dataclass(eq=False)
class SendTestWebhook(UsesStoreAndClock):
    """POST a test event (``TEST_EVENT``) to one of the caller's webhooks now, signed and in
    its format like any delivery, once: how its endpoint answered is the result (not
    retried, not in the delivery log; the audit log has it). ``NotFound`` if not theirs.

    The sender checks the address it connects to (``berth.core.outbound``), as for every
    delivery; neither the URL nor the secret is logged."""

    _sender: WebhookSender
    _: KW_ONLY
    timeout: float = 10.0
    #: berth's own address (``BERTH_BASE_URL``): a chat message links to the settings.
    link_base: str | None = None

    async def __call__(self, owner: Actor, cmd: c.SendTestWebhook) -> WebhookTestResult:
        async with self._uow() as uow:
            webhook = await uow.webhooks.get(owner.scope, cmd.webhook_id)
            if webhook is None:
                raise NotFound("Webhook not found.")
            secret = await uow.webhooks.secret(owner.scope, cmd.webhook_id)
            audit(uow, owner, "webhook.test", "webhook", webhook.id, shown_url(webhook.url))
            await uow.commit()
        at = self._clock.now()
        if secret is None:
            result = SendResult(None, UNSEALABLE)
        else:
            body = chat_body(webhook.format, ping_body(webhook.id, at), self.link_base)
            headers = signed_headers(secret, message_id(uuid4()), int(at.timestamp()), body)
            result = await self._sender.send(webhook.url, headers, body, self.timeout)
        log.info(
            "webhook_test_sent",
            webhook_id=str(webhook.id),
            status_code=result.status_code,
            delivered=result.delivered,
        )
        return WebhookTestResult(
            webhook_id=webhook.id,
            event=TEST_EVENT,
            at=at,
            delivered=result.delivered,
            status_code=result.status_code,
            error=attempt_error(result.status_code, result.error),
        )


class ListWebhookDeliveries(UsesStore):
    """The newest deliveries of one of the caller's webhooks; ``NotFound`` if not theirs."""

    async def __call__(self, owner: Actor, cmd: c.ListWebhookDeliveries) -> list[WebhookDelivery]:
        async with self._uow() as uow:
            found = await uow.webhooks.deliveries(owner.scope, cmd.webhook_id, cmd.limit)
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
    #: berth's own address (``BERTH_BASE_URL``): chat messages link to the app's page.
    link_base: str | None = None
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
        body = chat_body(message.format, message.body, self.link_base)
        headers = signed_headers(message.secret, msg_id, int(started.timestamp()), body)
        result = await self._sender.send(message.url, headers, body, self.policy.timeout)
        error = attempt_error(result.status_code, result.error)
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
