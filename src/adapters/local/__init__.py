"""The machine berth runs on: the ``ServerGateway`` port for servers with transport ``local``.

Its Docker is the local Engine socket, its reverse proxy the local Caddy's admin socket;
its probes connect to ``127.0.0.1``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from uuid import UUID

from berth.adapters.connection import Connection
from berth.adapters.probe import ByteReader, ByteWriter, StreamOpener, probe_stream
from berth.core.errors import ServerUnreachable
from berth.core.models import Server, Transport
from berth.core.ports import ContainerRuntime, ReverseProxy, ServerConnection

__all__ = ["LocalConnection", "LocalGateway"]


class LocalConnection(Connection):
    """``ServerConnection`` to this machine: its Docker socket and Caddy's admin socket."""

    async def probe(self, port: int, path: str | None = None) -> str | None:
        """See ``berth.adapters.probe.probe_stream``."""

        return await probe_stream(self.stream_to(port), path=path)

    def stream_to(self, port: int) -> StreamOpener:
        """Opens a TCP connection to ``127.0.0.1:port``."""

        async def open_stream() -> tuple[ByteReader, ByteWriter]:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            return reader, writer

        return open_stream


class LocalGateway:
    """``ServerGateway`` for servers whose transport is ``local``: they are all this machine.

    One connection serves every local server and lives until ``close``.
    ``runtime_factory`` builds the runtime from the socket's ``unix://`` URL (bootstrap
    passes ``DockerRuntime``; this package does not import the docker adapter), and
    ``proxy_factory`` the reverse proxy from the path of Caddy's admin socket
    (bootstrap passes a ``CaddyAdmin`` builder; without one, the proxy is never
    reachable).
    """

    def __init__(
        self,
        runtime_factory: Callable[[str], ContainerRuntime],
        *,
        docker_socket: str | Path = "/var/run/docker.sock",
        proxy_factory: Callable[[str], ReverseProxy] | None = None,
        caddy_socket: str | Path = "/run/berth/caddy-admin.sock",
    ) -> None:
        self._runtime_factory = runtime_factory
        self._docker_socket = Path(docker_socket)
        self._proxy_factory = proxy_factory
        self._caddy_socket = str(caddy_socket)
        self._connection: LocalConnection | None = None

    async def connect(self, server: Server) -> ServerConnection:
        """The local connection. Raises ``ServerUnreachable`` if the Docker socket is
        missing, and ``ValueError`` for a server whose transport is not ``local``."""
        if server.transport is not Transport.LOCAL:
            raise ValueError(f"LocalGateway cannot reach a {server.transport} server.")
        if not await asyncio.to_thread(os.path.exists, self._docker_socket):
            raise ServerUnreachable(f"No Docker socket at {self._docker_socket}.")
        if self._connection is None:
            proxy = self._proxy_factory(self._caddy_socket) if self._proxy_factory else None
            self._connection = LocalConnection(
                self._runtime_factory(f"unix://{self._docker_socket}"), proxy
            )
        return self._connection

    async def disconnect(self, server_id: UUID) -> None:
        """Forget the connection; the next ``connect`` builds a new one. Calls still in
        flight on the old one finish normally."""
        self._connection = None

    async def close(self) -> None:
        """Release the connection's resources; the gateway stays usable."""
        connection, self._connection = self._connection, None
        if connection is not None:
            _close_runtime(connection.docker)


def _close_runtime(runtime: ContainerRuntime) -> None:
    """Release the runtime's resources if it has any to release (``close()``)."""
    close = getattr(runtime, "close", None)
    if callable(close):
        close()
