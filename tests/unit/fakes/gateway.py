"""The proxy, connection and gateway fakes: a server as the core reaches it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from berth.core.errors import RuntimeFailure, ServerUnreachable
from berth.core.models import Container, ProxyProbe, ProxyRoute, Server
from berth.core.types import needs_internal_issuer

from .runtime import FakeRuntime

__all__ = ["FakeConnection", "FakeGateway", "FakeProxy"]


class FakeProxy:
    """A ReverseProxy that keeps the routes it was last given; ``failure`` makes it refuse."""

    def __init__(self) -> None:
        self.routes: list[ProxyRoute] | None = None  # None: never configured by berth
        self.applied: list[list[ProxyRoute]] = []
        self.failure: str | None = None
        #: What ``probe_proxy`` finds for a domain it routes (default: HTTPS ready).
        self.probe: ProxyProbe | None = None

    async def apply(self, routes: Sequence[ProxyRoute]) -> None:
        if self.failure is not None:
            raise RuntimeFailure(self.failure)
        self.routes = list(routes)
        self.applied.append(list(routes))

    async def matches(self, routes: Sequence[ProxyRoute]) -> bool:
        return self.routes == list(routes)


class FakeConnection:
    """A ServerConnection: the server's runtime and proxy, and probes answered by the runtime."""

    def __init__(self, runtime: FakeRuntime, proxy: FakeProxy | None = None) -> None:
        self._runtime = runtime
        self._proxy = proxy or FakeProxy()
        self.probes: list[int] = []
        self.paths: list[str | None] = []

    @property
    def docker(self) -> FakeRuntime:
        return self._runtime

    @property
    def proxy(self) -> FakeProxy:
        return self._proxy

    async def probe(self, port: int, path: str | None = None) -> str | None:
        self.probes.append(port)
        self.paths.append(path)
        return await self._runtime.answer(port, path)

    async def accepts(self, port: int) -> bool:
        """Held by something else (``refused_ports``) or by a running container."""
        runtime = self._runtime
        await runtime._gate("accepts", str(port))
        held = any(s.running and s.host_port == port for s in runtime.containers.values())
        return port in runtime.refused_ports or held

    async def probe_proxy(self, domain: str) -> ProxyProbe:
        """Ready when the proxy routes ``domain``, else no redirect; ``proxy.probe`` wins."""
        if self._proxy.probe is not None:
            return self._proxy.probe
        issuer = "internal" if needs_internal_issuer(domain) else "acme"
        if any(r.domain == domain for r in self._proxy.routes or ()):
            return ProxyProbe(
                issuer=issuer,
                http="HTTP 308",
                redirect=f"https://{domain}/",
                https="HTTP 200",
                tls_error=None,
            )
        return ProxyProbe(issuer=issuer, http="HTTP 200", redirect=None, https=None, tls_error=None)


class FakeGateway:
    """A ServerGateway over scripted runtimes; servers it knows nothing of are unreachable.

    ``runtimes`` gives a server a full :class:`FakeRuntime`; ``containers`` is the
    short form for read paths (a runtime that lists these). ``failures`` makes
    ``connect`` raise the given error for a server (``HostKeyMismatch``, …).
    """

    def __init__(self) -> None:
        self.runtimes: dict[UUID, FakeRuntime] = {}
        self.proxies: dict[UUID, FakeProxy] = {}
        self.containers: dict[UUID, list[Container]] = {}
        self.failures: dict[UUID, ServerUnreachable] = {}
        self.calls: list[UUID] = []
        self.disconnected: list[UUID] = []
        self.pool: dict[UUID, FakeConnection] = {}  # one connection per server, as SSH pools
        self.opened: list[UUID] = []  # the servers a new connection was opened to
        self.closed = False

    def runtime(self, server_id: UUID, **kwargs: Any) -> FakeRuntime:
        """The server's runtime, made reachable with ``kwargs`` if it had none."""
        if server_id not in self.runtimes:
            self.runtimes[server_id] = FakeRuntime(**kwargs)
        return self.runtimes[server_id]

    async def connect(self, server: Server) -> FakeConnection:
        self.calls.append(server.id)
        if server.id in self.failures:
            raise self.failures[server.id]
        pooled = self.pool.get(server.id)
        if pooled is not None and (server.id in self.runtimes or server.id in self.containers):
            return pooled
        self.pool.pop(server.id, None)  # the server went away: so did its connection
        if server.id in self.runtimes:
            proxy = self.proxies.setdefault(server.id, FakeProxy())
            connection = FakeConnection(self.runtimes[server.id], proxy)
        elif server.id in self.containers:
            connection = FakeConnection(FakeRuntime(listed=self.containers[server.id]))
        else:
            raise ServerUnreachable(f"Server {server.id} is unreachable.")
        self.pool[server.id] = connection
        self.opened.append(server.id)
        return connection

    async def disconnect(self, server_id: UUID) -> None:
        self.disconnected.append(server_id)
        self.pool.pop(server_id, None)

    async def close(self) -> None:
        self.closed = True
