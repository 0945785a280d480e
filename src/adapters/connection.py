"""What every ``ServerConnection`` adapter holds: the server's Docker and reverse proxy,
and the checks through that proxy that only need a byte stream to one of its ports."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from berth.adapters.noproxy import NoProxy
from berth.adapters.probe import StreamOpener, accepts_stream, http_answer, https_answer
from berth.core.errors import ServerUnreachable
from berth.core.models import ProxyProbe
from berth.core.ports import ContainerRuntime, ReverseProxy

__all__ = ["Connection", "ProxyEndpoints"]


@runtime_checkable
class ProxyEndpoints(Protocol):
    """What a proxy adapter tells about where it serves (``CaddyAdmin`` does)."""

    @property
    def http_port(self) -> int: ...

    @property
    def https_port(self) -> int: ...

    def issuer_for(self, domain: str) -> str: ...

    async def ca_root(self) -> str | None: ...


class Connection:
    """The runtime and proxy parts of a ``ServerConnection``; a transport adds ``probe``
    and ``stream_to`` (a byte stream to a port on the server's ``127.0.0.1``).

    ``proxy`` is the server's Caddy, through its admin socket (local, or forwarded over
    SSH); without one the server's reverse proxy is never reachable (``NoProxy``).
    """

    def __init__(self, docker: ContainerRuntime, proxy: ReverseProxy | None = None) -> None:
        self.docker = docker
        self.proxy: ReverseProxy = proxy or NoProxy()

    def stream_to(self, port: int) -> StreamOpener:
        """Opens a byte stream to ``127.0.0.1:port`` on the server (the transport's)."""
        raise NotImplementedError

    async def accepts(self, port: int) -> bool:
        """Whether something accepts a TCP connection on the server's ``127.0.0.1:port``
        (a connect over the transport, closed at once)."""
        return await accepts_stream(self.stream_to(port))

    async def probe_proxy(self, domain: str) -> ProxyProbe:
        """The proxy's CA root comes from its admin API. Raises ``ServerUnreachable``
        without a proxy that says where it serves (``ProxyEndpoints``)."""
        proxy = self.proxy
        if not isinstance(proxy, ProxyEndpoints):
            raise ServerUnreachable("berth was built without a reverse proxy for this transport.")
        issuer = proxy.issuer_for(domain)
        http, location = await http_answer(self.stream_to(proxy.http_port), domain)
        cadata, verify = None, True
        if issuer == "internal":
            cadata = await proxy.ca_root()
            verify = cadata is not None
        https, error = await https_answer(
            self.stream_to(proxy.https_port), domain, cadata=cadata, verify=verify
        )
        return ProxyProbe(
            issuer=issuer,
            http=http,
            redirect=location,
            https=https,
            tls_error=error,
            verified=verify,
        )
