"""The reverse proxy of a gateway built without a proxy factory (tests of the transports
alone): every call says the proxy cannot be reached, so servers without domain apps
work as before and apps with a domain fail at step ``route`` with a clear reason."""

from __future__ import annotations

from collections.abc import Sequence

from berth.core.errors import ServerUnreachable
from berth.core.models import ProxyRoute

__all__ = ["NoProxy"]


class NoProxy:
    """``ReverseProxy`` that is never reachable."""

    async def apply(self, routes: Sequence[ProxyRoute]) -> None:
        raise ServerUnreachable("berth was built without a reverse proxy for this transport.")

    async def matches(self, routes: Sequence[ProxyRoute]) -> bool:
        raise ServerUnreachable("berth was built without a reverse proxy for this transport.")
