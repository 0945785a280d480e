"""What every ``ServerConnection`` adapter holds: the server's Docker and reverse proxy."""

from __future__ import annotations

from berth.adapters.noproxy import NoProxy
from berth.core.ports import ContainerRuntime, ReverseProxy

__all__ = ["Connection"]


class Connection:
    """The runtime and proxy parts of a ``ServerConnection``; a transport adds ``probe``.

    Without a ``proxy`` the server's reverse proxy is never reachable (``NoProxy``).
    """

    def __init__(self, docker: ContainerRuntime, proxy: ReverseProxy | None = None) -> None:
        self._docker = docker
        self._proxy: ReverseProxy = proxy or NoProxy()

    @property
    def docker(self) -> ContainerRuntime:
        """The server's Docker Engine."""
        return self._docker

    @property
    def proxy(self) -> ReverseProxy:
        """The server's Caddy, through its admin socket (local, or forwarded over SSH)."""
        return self._proxy
