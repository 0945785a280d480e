"""What the webhook outbox hands a worker, and what an endpoint answered."""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID

from .models import WebhookEvent, WebhookFormat

__all__ = ["OutboxMessage", "SendResult"]


@dataclass(frozen=True, slots=True)
class OutboxMessage:
    """A claimed delivery: where to POST what, and the secret to sign it with (both
    unsealed in memory only; left out of ``repr`` so that they cannot reach a log line:
    a URL may carry a token)."""

    delivery_id: UUID
    webhook_id: UUID
    event: WebhookEvent
    url: str = field(repr=False)
    body: bytes
    attempt: int  # this attempt's number, from 1
    secret: str = field(repr=False)
    format: WebhookFormat = WebhookFormat.STANDARD  # how ``body`` is sent (``chat_body``)


@dataclass(frozen=True, slots=True)
class SendResult:
    """The endpoint's status code (``None``: no answer) and, if no answer, why."""

    status_code: int | None
    error: str | None = None

    @property
    def delivered(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300
