"""Delivering webhooks over HTTP (``berth.core.ports.WebhookSender``)."""

from .sender import UNDELIVERED, HttpWebhookSender

__all__ = ["UNDELIVERED", "HttpWebhookSender"]
