"""Delivering webhooks over HTTP (``berth.core.ports.WebhookSender``)."""

from .sender import HttpWebhookSender

__all__ = ["HttpWebhookSender"]
