"""The deployment runner and the server monitor, in-process with ``serve`` or alone."""

from .runner import Background

__all__ = ["Background"]
