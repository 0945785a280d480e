"""Outbound connections on a user's word, through the outbound guard: the system's
resolver (``berth.core.ports.HostResolver``) and an httpx transport whose every TCP
connection goes to an address the guard checked.

The guard runs inside the connect itself: the name is resolved once, every address it
resolves to is checked (``berth.core.outbound``), and the socket is opened to one of
those very addresses. There is no second lookup for a DNS answer to change in between
(DNS rebinding), while the URL keeps its host: the ``Host`` header, TLS's SNI and the
certificate's check all name it, and the connection pool is keyed by it.

Shared by every adapter that connects where a user says (webhooks now; git sources
fetched by the control plane later).
"""

from __future__ import annotations

import asyncio
import functools
import socket
import ssl
from collections.abc import Iterable, Sequence

import httpcore
import httpx
import structlog
from berth.core.outbound import OutboundGuard, TargetRefused

__all__ = ["GuardedBackend", "OutboundRefused", "SystemResolver", "guarded_transport"]

log = structlog.get_logger()

_RESOLVE_SECONDS = 5.0


class SystemResolver:
    """``HostResolver`` with the system's ``getaddrinfo`` (``/etc/hosts``, DNS, …), in a
    thread, bounded in time."""

    def __init__(self, seconds: float = _RESOLVE_SECONDS) -> None:
        self._seconds = seconds

    async def resolve(self, host: str, port: int) -> Sequence[str]:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._seconds):
                found = await loop.getaddrinfo(
                    host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
                )
        except (OSError, TimeoutError, UnicodeError):
            return []
        addresses: list[str] = []
        for _family, _type, _proto, _name, sockaddr in found:
            address = str(sockaddr[0])
            if address not in addresses:
                addresses.append(address)
        return addresses


class OutboundRefused(httpcore.ConnectError):
    """The guard refused every address of the host (httpx raises it as ``ConnectError``)."""


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend with the guard in ``connect_tcp``: the host is resolved
    and checked, and the first checked address that accepts the connection gets it."""

    def __init__(self, guard: OutboundGuard) -> None:
        self._guard = guard
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109  (httpcore's signature)
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            addresses = await self._guard.addresses(host, port)
        except TargetRefused as exc:
            log.info("outbound_refused", reason=str(exc))
            raise OutboundRefused(str(exc)) from None
        failure: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    str(address),
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None  # the guard returns at least one address
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109  (httpcore's signature)
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise OutboundRefused("Outbound requests go over TCP only.")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's own transport (HTTP/1.1, TLS verified) over a ``GuardedBackend``; no
    proxy, whatever the environment says."""

    def __init__(
        self, guard: OutboundGuard, *, verify: ssl.SSLContext | bool, limits: httpx.Limits
    ) -> None:
        context = verify if isinstance(verify, ssl.SSLContext) else _tls_context(verify)
        super().__init__(verify=context, trust_env=False, limits=limits)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=GuardedBackend(guard),
        )


@functools.cache
def _tls_context(verify: bool) -> ssl.SSLContext:
    """httpx's TLS settings for ``verify``, made once per process: loading the roots
    takes ~15 ms, and a context is safe to share (each bus, each test built two)."""
    return httpx.create_ssl_context(verify=verify, trust_env=False)


def guarded_transport(
    guard: OutboundGuard,
    *,
    verify: ssl.SSLContext | bool = True,
    limits: httpx.Limits | None = None,
) -> httpx.AsyncBaseTransport:
    """An httpx transport that connects only where ``guard`` allows: give it to an
    ``httpx.AsyncClient(transport=…)``. A refused host fails the request with
    ``httpx.ConnectError`` (its cause an ``OutboundRefused``) before any byte is sent.
    ``verify`` is httpx's (the system's roots by default)."""
    return _GuardedTransport(guard, verify=verify, limits=limits or httpx.Limits())
