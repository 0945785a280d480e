"""The deployment runner and the server monitor, in-process with ``serve`` or alone."""

from .runner import Background, Notifier

__all__ = ["Background", "Notifier"]
