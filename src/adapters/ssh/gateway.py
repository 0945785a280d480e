"""``SshGateway``: servers reached over SSH with asyncssh, one pooled connection each.

What berth does over SSH, and nothing more: it forwards a local unix socket to the
server's Docker socket and another to Caddy's admin socket (``direct-streamlocal``),
and opens ``direct-tcpip`` channels to the server's ``127.0.0.1`` for probes. It never
opens a session channel, so it never runs a command; the key it uses is authorized
forward-only anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from uuid import UUID

import asyncssh
import structlog
from berth.adapters.connection import Connection
from berth.adapters.probe import ByteReader, ByteWriter, StreamOpener, probe_stream
from berth.core.errors import HostKeyMismatch, ServerUnreachable
from berth.core.models import ProxyProbe, Server, SshCredentials, Transport
from berth.core.ports import ContainerRuntime, ReverseProxy, ServerConnection

__all__ = ["SshConnection", "SshGateway", "connect_failure"]

log = structlog.get_logger()

CredentialsLookup = Callable[[UUID], Awaitable[SshCredentials | None]]
RuntimeFactory = Callable[[str], ContainerRuntime]
ProxyFactory = Callable[[str], ReverseProxy]

_UNIX_PATH_MAX = 107  # sun_path is 108 bytes on Linux, NUL included
_SOCKET_NAME_LEN = len(f"{UUID(int=0)}.caddy.sock")  # the longer of the two socket names
_CLOSED = "The SSH connection to the server has closed."


@contextlib.contextmanager
def _unreachable_on_ssh_error() -> Iterator[None]:
    """An SSH error inside becomes ``ServerUnreachable`` quoting its reason."""
    try:
        yield
    except asyncssh.Error as exc:
        raise ServerUnreachable(f"The SSH connection failed: {exc.reason}") from exc


class SshConnection(Connection):
    """``ServerConnection`` over one live SSH connection.

    ``docker`` talks to the server's Docker socket, and ``proxy`` to Caddy's admin
    socket, each through a local unix socket that forwards to it; ``probe`` opens
    ``direct-tcpip`` channels to ``127.0.0.1``.
    """

    def __init__(
        self,
        conn: asyncssh.SSHClientConnection,
        listener: asyncssh.SSHListener,
        socket_path: Path,
        docker: ContainerRuntime,
        target: tuple[str, int, str],
        proxy: ReverseProxy | None = None,
        proxy_forward: tuple[asyncssh.SSHListener, Path] | None = None,
    ) -> None:
        super().__init__(docker, proxy)
        self._conn = conn
        self._listener = listener
        self._socket_path = socket_path
        self.target = target
        self._proxy_forward = proxy_forward
        #: When (``time.monotonic``) the server last offered a pinned host key.
        self.verified_at = 0.0

    @property
    def closed(self) -> bool:
        """Whether the SSH connection has ended (closed by berth, the server or the network)."""
        return bool(self._conn.is_closed())

    @property
    def socket_path(self) -> Path:
        """The local unix socket that forwards to the server's Docker socket."""
        return self._socket_path

    async def probe(self, port: int, path: str | None = None) -> str | None:
        """See ``berth.adapters.probe.probe_stream``; a channel the server cannot open
        (nothing listens) is ``None``. Raises ``ServerUnreachable`` if SSH is gone."""
        if self.closed:
            raise ServerUnreachable(_CLOSED)
        with _unreachable_on_ssh_error():
            return await probe_stream(self.stream_to(port), path=path)

    def stream_to(self, port: int) -> StreamOpener:
        """Opens a ``direct-tcpip`` channel to the server's ``127.0.0.1:port``; a channel
        the server refuses is ``ConnectionRefusedError``, a closed connection
        ``ServerUnreachable``."""

        async def open_stream() -> tuple[ByteReader, ByteWriter]:
            if self.closed:
                raise ServerUnreachable(_CLOSED)
            try:
                reader, writer = await self._conn.open_connection("127.0.0.1", port)
            except asyncssh.ChannelOpenError as exc:
                if self.closed:
                    raise ServerUnreachable(_CLOSED) from exc
                raise ConnectionRefusedError(exc.reason) from exc
            return reader, writer

        return open_stream

    async def accepts(self, port: int) -> bool:
        """See ``Connection.accepts``; SSH errors are ``ServerUnreachable``."""
        with _unreachable_on_ssh_error():
            return await super().accepts(port)

    async def probe_proxy(self, domain: str) -> ProxyProbe:
        """See ``Connection.probe_proxy``; SSH errors are ``ServerUnreachable``."""
        with _unreachable_on_ssh_error():
            return await super().probe_proxy(domain)

    async def close(self) -> None:
        """Stop forwarding, close the SSH connection and remove the socket files."""
        self._listener.close()
        if self._proxy_forward is not None:
            self._proxy_forward[0].close()
        self._conn.close()
        with contextlib.suppress(TimeoutError, asyncssh.Error, OSError):
            async with asyncio.timeout(2.0):
                await self._conn.wait_closed()
        paths = [self._socket_path] + ([self._proxy_forward[1]] if self._proxy_forward else [])
        for path in paths:
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
        close_runtime = getattr(self.docker, "close", None)
        if callable(close_runtime):
            close_runtime()


class SshGateway:
    """``ServerGateway`` for servers whose transport is ``ssh``.

    * ``credentials(server_id)`` gives berth's private key for the server and the
      server's pinned host keys. Only those host keys are trusted: no system or user
      ``known_hosts``, no trust on first use, no SSH config, no agent.
    * ``runtime_factory(url)`` builds the server's ``ContainerRuntime`` from the
      ``unix://`` URL of the forwarded Docker socket (bootstrap passes
      ``DockerRuntime``; this package does not import the docker adapter).
    * ``proxy_factory(path)`` builds the server's ``ReverseProxy`` from the path of a
      local socket forwarded to ``remote_caddy_socket`` (Caddy's admin socket on the
      server); without it, the proxy is never reachable.
    * ``socket_dir`` holds the forwarded sockets of each connected server
      (``<server id>.sock`` for Docker, ``<server id>.caddy.sock`` for Caddy); it is
      created with mode 0700, since whoever can open those sockets can drive the
      servers' Docker and Caddy. Give each process its own.
    * ``connect_timeout`` bounds the TCP connect plus the SSH handshake and login.
    * ``host_key_check_interval``: how often (seconds) ``connect`` checks, with a key
      exchange alone, that the server still offers a pinned host key while its pooled
      connection lives. A restarted sshd with a new key keeps serving the old
      connection with the old key; this notices the change within the interval
      instead of when that connection drops.

    One connection per server is pooled and reused while it lives; a closed one is
    replaced on the next ``connect``.
    """

    def __init__(
        self,
        credentials: CredentialsLookup,
        runtime_factory: RuntimeFactory,
        *,
        socket_dir: Path,
        connect_timeout: float = 5.0,
        keepalive_interval: float = 15.0,
        remote_docker_socket: str = "/var/run/docker.sock",
        proxy_factory: ProxyFactory | None = None,
        remote_caddy_socket: str = "/run/berth/caddy-admin.sock",
        host_key_check_interval: float = 300.0,
    ) -> None:
        socket_dir = Path(socket_dir)
        if len(os.fsencode(socket_dir)) + 1 + _SOCKET_NAME_LEN > _UNIX_PATH_MAX:
            raise ValueError(f"socket_dir {socket_dir} is too long for unix socket paths.")
        self._credentials = credentials
        self._runtime_factory = runtime_factory
        self._socket_dir = socket_dir
        self._connect_timeout = connect_timeout
        self._keepalive_interval = keepalive_interval
        self._remote_docker_socket = remote_docker_socket
        self._proxy_factory = proxy_factory
        self._remote_caddy_socket = remote_caddy_socket
        self._host_key_check_interval = host_key_check_interval
        self._pool: dict[UUID, SshConnection] = {}
        self._locks: dict[UUID, asyncio.Lock] = {}

    async def connect(self, server: Server) -> ServerConnection:
        """The pooled connection to ``server``, opened if there is none or it has closed
        (or the server's address, port or user changed).

        Raises ``HostKeyMismatch`` if the server's host key is not a pinned one (or
        none is pinned) — nothing is sent past the key exchange; else
        ``ServerUnreachable`` (refused, timed out, key not authorized, no credentials).
        Raises ``ValueError`` for a server whose transport is not ``ssh``.
        """
        if server.transport is not Transport.SSH:
            raise ValueError(f"SshGateway cannot reach a {server.transport} server.")
        lock = self._locks.setdefault(server.id, asyncio.Lock())
        async with lock:
            pooled = self._pool.get(server.id)
            if pooled is not None:
                if not pooled.closed and pooled.target == _target(server):
                    try:
                        await self._still_pinned(server, pooled)
                    except HostKeyMismatch:
                        del self._pool[server.id]
                        await pooled.close()
                        raise
                    return pooled
                del self._pool[server.id]
                await pooled.close()
            connection = await self._open(server)
            self._pool[server.id] = connection
            return connection

    async def disconnect(self, server_id: UUID) -> None:
        lock = self._locks.setdefault(server_id, asyncio.Lock())
        async with lock:
            pooled = self._pool.pop(server_id, None)
            if pooled is not None:
                await pooled.close()

    async def close(self) -> None:
        """Close every pooled connection, remove their socket files and then
        ``socket_dir`` itself if that left it empty."""
        for server_id in list(self._pool):
            await self.disconnect(server_id)
        with contextlib.suppress(OSError):  # gone already, or holds what is not ours
            self._socket_dir.rmdir()

    async def _open(self, server: Server) -> SshConnection:
        address, port, user = _target(server)
        if not address:
            raise ServerUnreachable("The server has no address to connect to.")
        credentials = await self._credentials(server.id)
        if credentials is None:
            raise ServerUnreachable("berth holds no SSH key for this server.")
        host_keys = _pinned_keys(credentials.host_keys)
        if not host_keys:
            raise HostKeyMismatch("No valid SSH host key is pinned for this server.")
        try:
            client_key = asyncssh.import_private_key(credentials.private_key)
        except (asyncssh.KeyImportError, ValueError) as exc:
            raise ServerUnreachable("berth's SSH key for this server cannot be read.") from exc

        where = f"{address}:{port}"
        witness = _HostKeyWitness()
        try:
            async with asyncio.timeout(self._connect_timeout + 1.0):
                conn = await asyncssh.connect(
                    address,
                    port=port,
                    client_factory=lambda: witness,
                    username=user,
                    known_hosts=(host_keys, [], []),
                    client_keys=[client_key],
                    agent_path=None,
                    config=None,
                    preferred_auth="publickey",
                    password_auth=False,
                    kbdint_auth=False,
                    host_based_auth=False,
                    gss_host=None,
                    x509_trusted_certs=None,
                    connect_timeout=self._connect_timeout,
                    login_timeout=self._connect_timeout,
                    keepalive_interval=self._keepalive_interval,
                    keepalive_count_max=3,
                )
        except asyncssh.HostKeyNotVerifiable as exc:
            log.warning("ssh_host_key_mismatch", server_id=str(server.id), address=where)
            raise HostKeyMismatch(
                f"The SSH host key of {where} is not the one pinned for this server; "
                "berth did not connect.",
                offered_key=witness.offered,
            ) from exc
        except asyncssh.PermissionDenied as exc:  # past the pinned host key: the server
            raise ServerUnreachable(f"{where} refused berth's SSH key for user {user!r}.") from exc
        except (asyncssh.Error, TimeoutError, OSError) as exc:
            # Refused, timed out, reset, not SSH: one sentence for all, else a server's
            # address and port would tell which ports answer where (a port scanner).
            log.info(
                "ssh_connect_failed", server_id=str(server.id), address=where, cause=_cause(exc)
            )
            raise ServerUnreachable(connect_failure(address, port)) from exc

        try:
            return await self._forwarded(server, conn, where, (address, port, user))
        except BaseException:  # canceled mid-way (a caller's timeout): nothing is left open
            conn.close()
            raise

    async def _forwarded(
        self,
        server: Server,
        conn: asyncssh.SSHClientConnection,
        where: str,
        target: tuple[str, int, str],
    ) -> SshConnection:
        """The connection with Docker's (and Caddy's) socket forwarded to local files."""
        socket_path = self._socket_dir / f"{server.id}.sock"
        try:
            self._socket_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._socket_dir.chmod(0o700)
            listener = await _forward(conn, socket_path, self._remote_docker_socket)
        except (OSError, asyncssh.Error) as exc:
            conn.close()
            raise ServerUnreachable(f"Cannot forward Docker's socket from {where}: {exc}") from exc
        proxy: ReverseProxy | None = None
        proxy_forward: tuple[asyncssh.SSHListener, Path] | None = None
        if self._proxy_factory is not None:
            caddy_path = self._socket_dir / f"{server.id}.caddy.sock"
            try:
                caddy_listener = await _forward(conn, caddy_path, self._remote_caddy_socket)
            except (OSError, asyncssh.Error) as exc:
                listener.close()
                conn.close()
                raise ServerUnreachable(
                    f"Cannot forward Caddy's admin socket from {where}: {exc}"
                ) from exc
            proxy_forward = (caddy_listener, caddy_path)
            proxy = self._proxy_factory(str(caddy_path))
        log.info("ssh_connected", server_id=str(server.id), address=where)
        docker = self._runtime_factory(f"unix://{socket_path}")
        connection = SshConnection(
            conn, listener, socket_path, docker, target, proxy, proxy_forward
        )
        connection.verified_at = time.monotonic()
        return connection

    async def _still_pinned(self, server: Server, pooled: SshConnection) -> None:
        """Raise ``HostKeyMismatch`` if the server's sshd now offers a key that is not
        pinned, though the pooled connection (served by the old sshd process, which
        keeps its old key) still works: a key exchange alone, no login, at most once
        per ``host_key_check_interval``. A server that does not answer it is left to
        the connection's own keepalive."""
        if time.monotonic() - pooled.verified_at < self._host_key_check_interval:
            return
        credentials = await self._credentials(server.id)
        pinned = _pinned_keys(credentials.host_keys) if credentials else []
        algorithms = sorted({key.get_algorithm() for key in pinned})
        address, port, _ = pooled.target
        try:
            async with asyncio.timeout(self._connect_timeout + 1.0):
                offered = await asyncssh.get_server_host_key(
                    address,
                    port,
                    server_host_key_algs=algorithms or (),
                    config=None,
                )
        except (asyncssh.Error, OSError, TimeoutError):
            return
        pooled.verified_at = time.monotonic()
        if offered is None or any(offered == key for key in pinned):
            return
        line = offered.export_public_key().decode("ascii").strip()
        log.warning("ssh_host_key_changed", server_id=str(server.id), address=f"{address}:{port}")
        raise HostKeyMismatch(
            f"The SSH host key of {address}:{port} changed: it is not the one pinned for "
            "this server; berth closed its connection.",
            offered_key=line,
        )


class _HostKeyWitness(asyncssh.SSHClient):
    """Remembers the host key a server offered that is not pinned (asyncssh asks the
    client only about such a key), and trusts it not."""

    def __init__(self) -> None:
        self.offered: str | None = None

    def validate_host_public_key(
        self, host: str, addr: str, port: int, key: asyncssh.SSHKey
    ) -> bool:
        self.offered = key.export_public_key().decode("ascii").strip()
        return False


async def _forward(
    conn: asyncssh.SSHClientConnection, local_path: Path, remote_path: str
) -> asyncssh.SSHListener:
    """Listen on ``local_path`` (mode 0600) and forward each connection to ``remote_path``
    on the server. Nothing reaches the server until a local client connects."""
    _remove(local_path)
    listener = await conn.forward_local_path(str(local_path), remote_path)
    _owner_only(local_path)
    return listener


def _remove(path: Path) -> None:
    path.unlink(missing_ok=True)


def _owner_only(path: Path) -> None:
    path.chmod(0o600)


def _target(server: Server) -> tuple[str, int, str]:
    return (server.address or "", server.ssh_port, server.ssh_user)


def _pinned_keys(lines: tuple[str, ...]) -> list[asyncssh.SSHKey]:
    """The pinned host keys that parse; a line that does not is skipped (and logged)."""
    keys = []
    for line in lines:
        try:
            keys.append(asyncssh.import_public_key(line.strip()))
        except (asyncssh.KeyImportError, ValueError):
            log.warning("ssh_pinned_host_key_invalid")
    return keys


def connect_failure(address: str, port: int) -> str:
    """A failed connection in words, the same whatever failed (refused, no answer, reset,
    not an SSH server): ``berth could not reach 127.0.0.1 on port 1 over SSH …``."""
    return (
        f"berth could not reach {address} on port {port} over SSH (unreachable: check the "
        "address, the SSH port and any firewall between)."
    )


def _cause(exc: BaseException) -> str:
    """The failure for the operator's log (not for the server's status)."""
    if isinstance(exc, asyncssh.Error):
        return f"{type(exc).__name__}: {exc.reason}"
    if isinstance(exc, OSError) and exc.errno:
        return os.strerror(exc.errno)
    return type(exc).__name__
