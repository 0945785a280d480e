"""What each server's reverse proxy serves, and changing it one server at a time.

The store is the source of truth: a server's routes are its installations that have
a domain and a recorded host port. The proxy is told the whole set every time, never
a difference, so whatever it held before (a restart, a hand edit, a lost write) the
next change or the monitor's next pass puts it right.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from uuid import UUID

from ..errors import RuntimeFailure, ServerUnreachable
from ..models import Installation, ProxyRoute
from ..ports import Fleet, ReverseProxy

__all__ = ["RouteTable", "proxy_routes", "routes_of"]


def proxy_routes(pairs: Iterable[tuple[str | None, int | None]]) -> list[ProxyRoute]:
    """The rule of what a proxy serves: one route per installation that has both a domain
    and a recorded host port, given here as ``(domain, host_port)`` pairs; by domain.

    The SQL fleet reads the pairs of a server's installations and calls this too.
    """
    return sorted(
        (
            ProxyRoute(domain=domain, upstream_port=port)
            for domain, port in pairs
            if domain is not None and port is not None
        ),
        key=lambda route: route.domain,
    )


def routes_of(installations: Iterable[Installation]) -> list[ProxyRoute]:
    """The routes of these installations (``proxy_routes``)."""
    return proxy_routes((i.spec.domain, i.host_port) for i in installations)


class RouteTable:
    """Loads each server's routes, as the fleet records them, into its reverse proxy.

    One instance is shared by the worker and the monitor of a process: for each
    server, reading the routes and loading them happen under one lock, so a writer
    never loads routes older than those another one of this process already loaded.
    Across processes, the monitor's ``converge`` repairs a stale load on its next pass.
    """

    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet
        self._locks: dict[UUID, asyncio.Lock] = {}

    def _lock(self, server_id: UUID) -> asyncio.Lock:
        return self._locks.setdefault(server_id, asyncio.Lock())

    async def apply(
        self, server_id: UUID, proxy: ReverseProxy, *, expect: ProxyRoute | None = None
    ) -> list[ProxyRoute]:
        """Load the server's routes into ``proxy``; returns them.

        With ``expect``, first check that the store holds that route (the caller has
        just recorded it) and raise ``RuntimeFailure`` without loading anything if not.
        Raises what ``proxy.apply`` raises.
        """
        async with self._lock(server_id):
            routes = await self._fleet.routes(server_id)
            if expect is not None and expect not in routes:
                raise RuntimeFailure(
                    f"The route {expect.domain} → port {expect.upstream_port} could not be "
                    "recorded (another installation holds that port); nothing was changed."
                )
            await proxy.apply(routes)
            return routes

    async def load(
        self, server_id: UUID, proxy: ReverseProxy, routes: Sequence[ProxyRoute]
    ) -> None:
        """Load ``routes``, computed by the caller (a request handler, from its owner's
        view of the server), under the server's lock; raises what ``proxy.apply`` raises."""
        async with self._lock(server_id):
            await proxy.apply(routes)

    async def converge(self, server_id: UUID, proxy: ReverseProxy) -> bool:
        """Re-load the server's routes if the proxy's live configuration differs from them
        (the proxy restarted, or was edited by hand); ``True`` if it re-loaded.

        A server with no routes whose proxy cannot be reached is left alone (``False``):
        not every server runs a proxy. Otherwise raises what the proxy raises.
        """
        async with self._lock(server_id):
            routes = await self._fleet.routes(server_id)
            if await self.serves(proxy, routes):
                return False
            await proxy.apply(routes)
            return True

    @staticmethod
    async def serves(proxy: ReverseProxy, routes: list[ProxyRoute]) -> bool:
        """Whether ``proxy`` serves ``routes`` as they are (``converge`` would leave it
        alone); a proxy that cannot be reached serves no routes. Reads nothing of the
        store: a monitor's pass asks it with the routes it read for every server at once
        (``Fleet.pass_view``), and converges only a server whose proxy does not."""
        try:
            return await proxy.matches(routes)
        except ServerUnreachable:
            if not routes:
                return True
            raise
