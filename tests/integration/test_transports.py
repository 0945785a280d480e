"""The transports for real: a real dockerd, a real OpenSSH server, real asyncssh.

Over SSH berth uses exactly the key the install script authorizes
(``restrict,port-forwarding,permitlisten="127.0.0.1:1",command="/bin/false"``)
and pins the server's host key.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import socket
import stat
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import asyncssh
import docker.errors
import pytest
from berth.adapters.docker import DockerRuntime
from berth.adapters.local import LocalGateway
from berth.adapters.ssh import SshGateway, authorized_keys_line, generate_keypair
from berth.core.errors import HostKeyMismatch, RuntimeFailure, ServerUnreachable
from berth.core.models import (
    ContainerSpec,
    ContainerState,
    Server,
    ServerStatus,
    SshCredentials,
    Transport,
)
from berth.core.ports import ContainerRuntime, ServerConnection
from deploy_support import TRICKY_ENV
from infra import RUN, RUN_LABEL, SSH_USER, Sshd, docker_client, free_port

pytestmark = pytest.mark.integration

MISSING_IMAGE = "berth-test/missing:nope"


# -- helpers ---------------------------------------------------------------------


def _server(transport: Transport, *, port: int = 22, address: str | None = "127.0.0.1") -> Server:
    return Server(
        id=uuid.uuid4(),
        owner_id=uuid.uuid4(),
        name=f"test-{uuid.uuid4().hex[:8]}",
        transport=transport,
        address=address,
        ssh_port=port,
        ssh_user=SSH_USER,
        status=ServerStatus.ONLINE,
        created_at=datetime.now(UTC),
    )


def _spec(
    image: str,
    name: str,
    env: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> ContainerSpec:
    return ContainerSpec(
        name=name,
        image=image,
        env=env or {},
        container_port=3000,
        host_ip="127.0.0.1",
        host_port=None,
        binds=(),
        labels={RUN_LABEL: RUN, **(labels or {})},
    )


async def _run(docker: ContainerRuntime, spec: ContainerSpec) -> ContainerState:
    container_id = await docker.create(spec)
    await docker.start(container_id)
    state = await docker.inspect(container_id)
    assert state is not None
    return state


async def _until_answer(connection: ServerConnection, port: int, within: float = 5.0) -> str | None:
    """Probe until something answers (the container needs a moment to listen)."""
    deadline = time.monotonic() + within
    while True:
        answer = await connection.probe(port)
        if answer is not None or time.monotonic() > deadline:
            return answer
        await asyncio.sleep(0.05)


async def _answering_and_deaf(
    connection: ServerConnection, echo_image: str, container_name: Callable[[], str]
) -> int:
    """Run an echo container, seen answering HTTP 200, and one that never listens (it
    has logged that it started); the host port of the one that never listens."""
    deaf = await _run(
        connection.docker,
        _spec(echo_image, container_name(), {"BERTH_TEST_MODE": "nolisten"}),
    )
    echo = await _run(connection.docker, _spec(echo_image, container_name()))
    assert echo.host_port is not None
    assert deaf.host_port is not None
    assert await _until_answer(connection, echo.host_port) == "HTTP 200"
    await _until_logged(connection.docker, deaf.id)
    return deaf.host_port


async def _until_logged(docker: ContainerRuntime, container_id: str) -> None:
    """Wait (up to 5 s) until the container has logged something."""
    for _ in range(100):
        if await docker.logs(container_id, tail=5):
            return
        await asyncio.sleep(0.05)


def _parse_env(response: bytes) -> dict[bytes, bytes]:
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    pairs = (entry.split(b"=", 1) for entry in body.split(b"\0") if entry)
    return {key: value for key, value in pairs}


@contextlib.asynccontextmanager
async def _tcp_server(greeting: bytes | None) -> AsyncIterator[int]:
    """A local TCP server that sends ``greeting`` (or nothing) and keeps the stream open."""
    held: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        if greeting:
            writer.write(greeting)
            await writer.drain()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


@pytest.fixture
def container_name(docker_ready: None) -> Iterator[Callable[[], str]]:
    """Unique container names for this test; whatever carries one is removed afterwards."""
    names: list[str] = []

    def new() -> str:
        names.append(f"berth-test-{RUN}-{uuid.uuid4().hex[:12]}")
        return names[-1]

    yield new
    client = docker_client()
    try:
        for name in names:
            with contextlib.suppress(docker.errors.NotFound):
                client.api.remove_container(name, force=True)
    finally:
        client.close()


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    """A short directory for forwarded sockets (unix socket paths are limited to 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="berth-s-"))
    yield path / "sockets"
    shutil.rmtree(path, ignore_errors=True)


@dataclass
class SshSetup:
    sshd: Sshd
    gateway: SshGateway
    server: Server
    credentials: dict[uuid.UUID, SshCredentials]
    private_key: bytes
    socket_dir: Path
    runtimes: list[str] = field(default_factory=list)

    def add_server(self, credentials: SshCredentials, *, port: int | None = None) -> Server:
        server = _server(Transport.SSH, port=port or self.sshd.port)
        self.credentials[server.id] = credentials
        return server


@pytest.fixture
async def ssh(sshd: Sshd, socket_dir: Path) -> AsyncIterator[SshSetup]:
    """An SshGateway, and a server whose forward-only key is authorized on the test sshd."""
    private_key, public_key = generate_keypair(f"berth-test-{uuid.uuid4().hex[:8]}")
    sshd.authorize(public_key)
    server = _server(Transport.SSH, port=sshd.port)
    credentials = {
        server.id: SshCredentials(private_key=private_key, host_keys=(sshd.host_public_key,))
    }
    runtimes: list[str] = []

    async def lookup(server_id: uuid.UUID) -> SshCredentials | None:
        return credentials.get(server_id)

    def runtime_factory(url: str) -> ContainerRuntime:
        runtimes.append(url)
        return DockerRuntime(url)

    gateway = SshGateway(lookup, runtime_factory, socket_dir=socket_dir, connect_timeout=3.0)
    yield SshSetup(sshd, gateway, server, credentials, private_key, socket_dir, runtimes)
    await gateway.close()


@contextlib.asynccontextmanager
async def _raw_ssh(sshd: Sshd, private_key: bytes) -> AsyncIterator[asyncssh.SSHClientConnection]:
    """A plain asyncssh client with berth's key, outside the adapter."""
    conn = await asyncssh.connect(
        "127.0.0.1",
        port=sshd.port,
        username=SSH_USER,
        client_keys=[asyncssh.import_private_key(private_key)],
        known_hosts=([asyncssh.import_public_key(sshd.host_public_key)], [], []),
        agent_path=None,
        config=None,
    )
    try:
        yield conn
    finally:
        conn.close()
        await conn.wait_closed()


async def _get_over_ssh(sshd: Sshd, private_key: bytes, port: int, path: str) -> bytes:
    """An HTTP/1.0 GET to the server's 127.0.0.1:port through a direct-tcpip channel."""
    async with _raw_ssh(sshd, private_key) as conn:
        reader, writer = await conn.open_connection("127.0.0.1", port)
        writer.write(f"GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n".encode())
        async with asyncio.timeout(5):
            return bytes(await reader.read())


async def _get_local(port: int, path: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n".encode())
    try:
        async with asyncio.timeout(5):
            return await reader.read()
    finally:
        writer.close()


async def _follow_until_removed(docker: ContainerRuntime, image: str, name: str) -> None:
    """Follow a new container's output: its first line comes, then removing the container
    ends the stream."""
    state = await _run(docker, _spec(image, name))
    lines = docker.follow_logs(state.id, tail=5)
    try:
        first = await asyncio.wait_for(anext(lines), 10)
        assert "echo v1: listening on 3000" in first
        await docker.remove(state.id)
        rest = await asyncio.wait_for(_drain(lines), 10)
        assert rest == []
    finally:
        await lines.aclose()  # type: ignore[attr-defined]


async def _drain(lines: AsyncIterator[str]) -> list[str]:
    return [line async for line in lines]


# -- SSH -------------------------------------------------------------------------


class TestSshGateway:
    async def test_facts_through_the_forwarded_docker_socket(self, ssh: SshSetup) -> None:
        """A forward-only key reaches Docker through stream-local forwarding."""
        connection = await ssh.gateway.connect(ssh.server)
        facts = await connection.docker.facts()
        assert facts.docker_version
        assert facts.os
        assert facts.cpus
        assert facts.cpus > 0
        assert facts.memory_bytes
        assert facts.memory_bytes > 0
        assert ssh.runtimes == [f"unix://{ssh.socket_dir / f'{ssh.server.id}.sock'}"]

    async def test_forwarded_socket_is_private(self, ssh: SshSetup) -> None:
        """Only berth's user can open the forwarded Docker socket (0600 in a 0700 dir)."""
        await ssh.gateway.connect(ssh.server)
        socket_path = ssh.socket_dir / f"{ssh.server.id}.sock"
        assert stat.S_ISSOCK(socket_path.stat().st_mode)
        assert stat.S_IMODE(socket_path.stat().st_mode) == 0o600
        assert stat.S_IMODE(socket_path.parent.stat().st_mode) == 0o700

    async def test_env_values_arrive_byte_for_byte(
        self, ssh: SshSetup, echo_image: str, container_name: Callable[[], str]
    ) -> None:
        """Env values with quotes, $, backticks, ;, &&, #, newlines, = and UTF-8 arrive intact."""
        connection = await ssh.gateway.connect(ssh.server)
        state = await _run(connection.docker, _spec(echo_image, container_name(), TRICKY_ENV))
        assert state.host_port is not None
        assert await _until_answer(connection, state.host_port) == "HTTP 200"
        response = await _get_over_ssh(ssh.sshd, ssh.private_key, state.host_port, "/env")
        env = _parse_env(response)
        for key, value in TRICKY_ENV.items():
            assert env.get(key.encode()) == value.encode(), key

    async def test_container_lifecycle(
        self, ssh: SshSetup, echo_image: str, container_name: Callable[[], str]
    ) -> None:
        """Create, start, list (with labels), find, logs and remove over SSH."""
        connection = await ssh.gateway.connect(ssh.server)
        docker = connection.docker
        installation_id, deployment = uuid.uuid4(), uuid.uuid4().hex
        name = container_name()
        labels = {
            "berth.managed": "true",
            "berth.installation": str(installation_id),
            "berth.deployment": deployment,
        }
        state = await _run(docker, _spec(echo_image, name, labels=labels))
        assert state.name == name
        assert state.running
        assert state.status == "running"
        assert state.exit_code is None
        assert state.labels["berth.deployment"] == deployment

        listed = {container.name: container for container in await docker.list_containers()}
        assert listed[name].id == state.id
        assert listed[name].installation_id == installation_id
        assert listed[name].image == echo_image
        assert listed[name].created_at is not None
        assert listed[name].created_at.tzinfo is not None
        assert any(
            port.container_port == 3000 and port.host_port == state.host_port
            for port in listed[name].ports
        )

        found = await docker.find({"berth.deployment": deployment, RUN_LABEL: RUN})
        assert [found_state.id for found_state in found] == [state.id]
        assert found[0].labels["berth.installation"] == str(installation_id)

        await _until_logged(docker, state.id)
        assert "echo v1: listening on 3000" in await docker.logs(state.id, tail=10)

        await docker.remove(state.id)
        assert await docker.inspect(state.id) is None
        await docker.remove(state.id)  # a missing container is not an error

    async def test_a_log_follow_reads_the_forwarded_socket_until_the_container_goes(
        self, ssh: SshSetup, echo_image: str, container_name: Callable[[], str]
    ) -> None:
        """Over the forwarded Docker socket, a follow gives the container's lines and ends
        once the container is removed."""
        connection = await ssh.gateway.connect(ssh.server)
        await _follow_until_removed(connection.docker, echo_image, container_name())

    async def test_restricted_key_cannot_run_a_command(self, ssh: SshSetup) -> None:
        """The forward-only key runs /bin/false whatever command is asked for."""
        async with _raw_ssh(ssh.sshd, ssh.private_key) as conn:
            result = await asyncio.wait_for(conn.run("id", check=False), 5)
        assert result.exit_status != 0
        assert "uid=" not in str(result.stdout)

    async def test_wrong_pinned_host_key_is_a_mismatch(self, ssh: SshSetup) -> None:
        """A host key other than the pinned one: HostKeyMismatch, no login, no Docker call."""
        _, impostor = generate_keypair("not the server")
        server = ssh.add_server(SshCredentials(private_key=ssh.private_key, host_keys=(impostor,)))
        logins = ssh.sshd.log().count("Accepted publickey")
        with pytest.raises(HostKeyMismatch):
            await ssh.gateway.connect(server)
        assert ssh.runtimes == []
        assert ssh.sshd.log().count("Accepted publickey") == logins

    async def test_no_pinned_host_key_is_a_mismatch(self, ssh: SshSetup) -> None:
        """With no pinned host key berth does not connect at all (no trust on first use)."""
        server = ssh.add_server(SshCredentials(private_key=ssh.private_key, host_keys=()))
        with pytest.raises(HostKeyMismatch):
            await ssh.gateway.connect(server)
        assert ssh.runtimes == []

    async def test_unauthorized_key_is_unreachable(self, ssh: SshSetup) -> None:
        """A key the server does not authorize: ServerUnreachable, not a mismatch."""
        other_key, _ = generate_keypair("never authorized")
        server = ssh.add_server(
            SshCredentials(private_key=other_key, host_keys=(ssh.sshd.host_public_key,))
        )
        with pytest.raises(ServerUnreachable) as raised:
            await ssh.gateway.connect(server)
        assert not isinstance(raised.value, HostKeyMismatch)
        assert ssh.runtimes == []

    async def test_nothing_listening_is_unreachable_quickly(self, ssh: SshSetup) -> None:
        """No SSH server at the address: ServerUnreachable within a second."""
        server = ssh.add_server(ssh.credentials[ssh.server.id], port=free_port())
        started = time.monotonic()
        with pytest.raises(ServerUnreachable) as raised:
            await ssh.gateway.connect(server)
        assert time.monotonic() - started < 1.0
        assert not isinstance(raised.value, HostKeyMismatch)

    async def test_probe_semantics(
        self, ssh: SshSetup, echo_image: str, container_name: Callable[[], str]
    ) -> None:
        """Probe: HTTP status for HTTP, None when Docker's proxy has nobody behind it."""
        connection = await ssh.gateway.connect(ssh.server)
        deaf_port = await _answering_and_deaf(connection, echo_image, container_name)
        started = time.monotonic()
        assert await connection.probe(deaf_port) is None
        assert await connection.probe(free_port()) is None
        assert time.monotonic() - started < 3.0

    async def test_probe_reports_tcp_for_non_http(self, ssh: SshSetup) -> None:
        """A silent or non-HTTP listener answers "TCP", within the probe's time bound."""
        connection = await ssh.gateway.connect(ssh.server)
        async with _tcp_server(None) as silent, _tcp_server(b"SSH-2.0-other\r\n") as chatty:
            started = time.monotonic()
            assert await connection.probe(silent) == "TCP"
            assert time.monotonic() - started < 2.0
            assert await connection.probe(chatty) == "TCP"

    async def test_missing_image_is_a_runtime_failure(
        self, ssh: SshSetup, container_name: Callable[[], str]
    ) -> None:
        """Pulling or creating a missing image fails at once, quoting Docker."""
        connection = await ssh.gateway.connect(ssh.server)
        assert not await connection.docker.image_exists(MISSING_IMAGE)
        started = time.monotonic()
        with pytest.raises(RuntimeFailure) as pulled:
            await connection.docker.pull(MISSING_IMAGE)
        assert time.monotonic() - started < 10.0
        assert MISSING_IMAGE in pulled.value.detail
        with pytest.raises(RuntimeFailure, match="No such image"):
            await connection.docker.create(_spec(MISSING_IMAGE, container_name()))

    async def test_connection_is_pooled_and_reestablished(self, ssh: SshSetup) -> None:
        """connect reuses the live connection; after disconnect or a drop it opens a new one."""
        first = await ssh.gateway.connect(ssh.server)
        assert await ssh.gateway.connect(ssh.server) is first
        socket_path = ssh.socket_dir / f"{ssh.server.id}.sock"

        await ssh.gateway.disconnect(ssh.server.id)
        assert not socket_path.exists()
        with pytest.raises(ServerUnreachable):
            await first.docker.facts()

        second = await ssh.gateway.connect(ssh.server)
        assert second is not first
        assert (await second.docker.facts()).docker_version

        await second.close()  # the connection drops under the pool
        third = await ssh.gateway.connect(ssh.server)
        assert third is not second
        assert (await third.docker.facts()).docker_version
        assert len(ssh.runtimes) == 3

    async def test_concurrent_connects_share_one_connection(self, ssh: SshSetup) -> None:
        """Concurrent connects to one server open a single connection."""
        connections = await asyncio.gather(*(ssh.gateway.connect(ssh.server) for _ in range(5)))
        assert all(connection is connections[0] for connection in connections)
        assert len(ssh.runtimes) == 1

    async def test_close_removes_every_socket(self, ssh: SshSetup) -> None:
        """close() ends every connection and leaves no socket file, nor their directory."""
        other = ssh.add_server(ssh.credentials[ssh.server.id])
        await ssh.gateway.connect(ssh.server)
        await ssh.gateway.connect(other)
        assert len(list(ssh.socket_dir.iterdir())) == 2  # one forwarded Docker socket each
        await ssh.gateway.close()
        assert not ssh.socket_dir.exists()

    async def test_close_keeps_a_directory_holding_other_files(self, ssh: SshSetup) -> None:
        """close() removes the socket directory only when that leaves nothing behind."""
        await ssh.gateway.connect(ssh.server)
        (ssh.socket_dir / "not-berths").write_text("x")
        await ssh.gateway.close()
        assert [p.name for p in ssh.socket_dir.iterdir()] == ["not-berths"]


# -- local -------------------------------------------------------------------------


@pytest.fixture
async def local(docker_ready: None) -> AsyncIterator[LocalGateway]:
    gateway = LocalGateway(DockerRuntime)
    yield gateway
    await gateway.close()


class TestLocalGateway:
    async def test_facts(self, local: LocalGateway) -> None:
        """The local gateway reaches this machine's Docker."""
        connection = await local.connect(_server(Transport.LOCAL, address=None))
        facts = await connection.docker.facts()
        assert facts.docker_version
        assert facts.cpus

    async def test_env_values_arrive_byte_for_byte(
        self, local: LocalGateway, echo_image: str, container_name: Callable[[], str]
    ) -> None:
        """Tricky env values reach the container intact through the local socket too."""
        connection = await local.connect(_server(Transport.LOCAL, address=None))
        state = await _run(connection.docker, _spec(echo_image, container_name(), TRICKY_ENV))
        assert state.host_port is not None
        assert await _until_answer(connection, state.host_port) == "HTTP 200"
        env = _parse_env(await _get_local(state.host_port, "/env"))
        for key, value in TRICKY_ENV.items():
            assert env.get(key.encode()) == value.encode(), key

    async def test_probe_semantics(
        self, local: LocalGateway, echo_image: str, container_name: Callable[[], str]
    ) -> None:
        """HTTP 200 from the echo server; None behind Docker's proxy when nothing listens."""
        connection = await local.connect(_server(Transport.LOCAL, address=None))
        deaf_port = await _answering_and_deaf(connection, echo_image, container_name)
        assert await connection.probe(deaf_port) is None
        assert await connection.probe(free_port()) is None
        async with _tcp_server(None) as silent:
            assert await connection.probe(silent) == "TCP"

    async def test_crashing_container_reports_its_exit(
        self, local: LocalGateway, echo_image: str, container_name: Callable[[], str]
    ) -> None:
        """A container that exits shows its exit code and last log line."""
        connection = await local.connect(_server(Transport.LOCAL, address=None))
        state = await _run(
            connection.docker, _spec(echo_image, container_name(), {"BERTH_TEST_MODE": "exit"})
        )
        deadline = time.monotonic() + 5
        while state.running and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            state = await connection.docker.inspect(state.id) or state
        assert not state.running
        assert state.exit_code == 3
        assert "echo v1: exiting at once as asked" in await connection.docker.logs(state.id, 5)

    async def test_the_event_stream_tells_only_this_servers_containers(
        self, local: LocalGateway, echo_image: str, container_name: Callable[[], str]
    ) -> None:
        """Two berth servers on one Engine: a server's event stream carries its own
        containers' events, never the other's (Docker filters them, so a shared Engine
        costs each watcher nothing for the other's churn)."""
        connection = await local.connect(_server(Transport.LOCAL, address=None))
        mine, other = uuid.uuid4(), uuid.uuid4()
        events = connection.docker.container_events(mine)
        received: list[uuid.UUID | None] = []

        async def read() -> None:
            async for event in events:
                received.append(event.installation_id)
                if event.installation_id == ours_app:
                    return

        ours_app, theirs_app = uuid.uuid4(), uuid.uuid4()
        reader = asyncio.create_task(read())
        await asyncio.sleep(0.5)  # the stream is open before the containers come
        labels = {"berth.installation": str(theirs_app), "berth.server": str(other)}
        await _run(connection.docker, _spec(echo_image, container_name(), labels=labels))
        labels = {"berth.installation": str(ours_app), "berth.server": str(mine)}
        await _run(connection.docker, _spec(echo_image, container_name(), labels=labels))
        await asyncio.wait_for(reader, 20)
        await events.aclose()  # type: ignore[attr-defined]
        assert ours_app in received
        assert theirs_app not in received

    async def test_missing_image_is_a_runtime_failure(self, local: LocalGateway) -> None:
        """Pulling a missing image fails at once, quoting Docker."""
        connection = await local.connect(_server(Transport.LOCAL, address=None))
        started = time.monotonic()
        with pytest.raises(RuntimeFailure, match="missing"):
            await connection.docker.pull(MISSING_IMAGE)
        assert time.monotonic() - started < 10.0

    async def test_connection_is_pooled(self, local: LocalGateway) -> None:
        """connect reuses one connection; after disconnect it builds a new one."""
        server = _server(Transport.LOCAL, address=None)
        first = await local.connect(server)
        assert await local.connect(server) is first
        await local.disconnect(server.id)
        second = await local.connect(server)
        assert second is not first
        assert (await second.docker.facts()).docker_version

    async def test_a_log_follow_reads_until_the_container_goes(
        self, local: LocalGateway, echo_image: str, container_name: Callable[[], str]
    ) -> None:
        """On the local socket, a follow gives the container's lines and ends once the
        container is removed."""
        connection = await local.connect(_server(Transport.LOCAL, address=None))
        await _follow_until_removed(connection.docker, echo_image, container_name())

    async def test_answers_past_the_cap_fail_saying_so(
        self, docker_ready: None, echo_image: str, container_name: Callable[[], str]
    ) -> None:
        """With a ceiling below each answer's size, each read fails as response-too-large
        naming the call and BERTH_DOCKER_MAX_BYTES (a log read: ask for fewer lines);
        nothing is read past it. With room, the same calls answer."""
        roomy = DockerRuntime("unix:///var/run/docker.sock")
        tiny = DockerRuntime("unix:///var/run/docker.sock", max_bytes=16)
        try:
            state = await _run(roomy, _spec(echo_image, container_name()))
            await _until_logged(roomy, state.id)
            calls = {
                "version": tiny.facts(),
                "the container list": tiny.list_containers(),
                "a container's inspect": tiny.inspect(state.id),
                "an image's inspect": tiny.image_id(echo_image),
                "a log read": tiny.logs(state.id, 10),
                "stats": tiny.stats(state.id),
                "the disk usage": tiny.disk_usage(),
            }
            for what, call in calls.items():
                with pytest.raises(RuntimeFailure) as refused:
                    await call
                assert refused.value.kind == "response-too-large", what
                assert what in refused.value.detail
                assert "16 bytes" in refused.value.detail
                assert "BERTH_DOCKER_MAX_BYTES" in refused.value.detail
                assert ("fewer lines" in refused.value.detail) == (what == "a log read")
            assert (await roomy.facts()).docker_version
            assert state.id in {c.id for c in await roomy.list_containers()}
            assert await roomy.image_id(echo_image)
            assert any("listening" in line for line in await roomy.logs(state.id, 10))
            assert (await roomy.disk_usage()).images >= 1
        finally:
            roomy.close()
            tiny.close()

    async def test_missing_socket_is_unreachable(self, tmp_path: Path) -> None:
        """No Docker socket: connect and the runtime both say ServerUnreachable, fast."""
        missing = tmp_path / "docker.sock"
        with pytest.raises(ServerUnreachable):
            await LocalGateway(DockerRuntime, docker_socket=missing).connect(
                _server(Transport.LOCAL, address=None)
            )
        runtime = DockerRuntime(f"unix://{missing}", timeout=2.0)
        started = time.monotonic()
        with pytest.raises(ServerUnreachable):
            await runtime.facts()
        assert time.monotonic() - started < 2.0
        runtime.close()


# -- a deployment's Docker calls beside the monitor's --------------------------------


@contextlib.contextmanager
def _silent_docker(path: Path) -> Iterator[list[socket.socket]]:
    """A unix socket at ``path`` that accepts connections and never answers (a server's
    Docker that hangs): every call to it waits out its timeout. Yields the connections
    accepted so far."""
    accepted: list[socket.socket] = []
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(256)
    listener.settimeout(0.2)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                accepted.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield accepted
    finally:
        stop.set()
        thread.join(5)
        for conn in accepted:
            conn.close()
        listener.close()


class TestDockerCallLanes:
    async def test_a_deployments_call_does_not_wait_behind_checks_of_silent_servers(
        self, docker_ready: None, tmp_path: Path
    ) -> None:
        """The monitor's calls to servers whose Docker never answers hold every thread of
        the checks (more calls than threads, each waiting out its 5 s timeout); a call a
        deployment makes meanwhile (the ``deploy`` lane) to this machine's Docker answers
        before any of those has ended."""
        from berth.adapters.docker.runtime import IO_THREADS
        from berth.core.ports import CALL_LANE

        silent_path = tmp_path / "silent.sock"
        local = DockerRuntime("unix:///var/run/docker.sock")
        with _silent_docker(silent_path) as accepted:
            silent = DockerRuntime(f"unix://{silent_path}", timeout=5.0)
            checks = [asyncio.create_task(silent.list_containers()) for _ in range(IO_THREADS + 8)]
            try:
                for _ in range(600):  # up to 30 s
                    if len(accepted) >= IO_THREADS:
                        break
                    await asyncio.sleep(0.05)
                assert len(accepted) >= IO_THREADS  # every check thread is waiting

                async def deploy_step() -> str | None:
                    CALL_LANE.set("deploy")  # as RunDeployment does for its run
                    return (await local.facts()).docker_version

                assert await deploy_step()
                assert not any(check.done() for check in checks)
            finally:
                outcomes = await asyncio.gather(*checks, return_exceptions=True)
                silent.close()
                local.close()
        assert all(isinstance(outcome, ServerUnreachable) for outcome in outcomes)

    async def test_as_many_calls_at_once_as_deployments_keep_their_connections(
        self, docker_ready: None, caplog: pytest.LogCaptureFixture
    ) -> None:
        """32 calls at once to one Docker (a worker's deployments, all on one server):
        every connection they opened is kept for the next ones -- urllib3 never logs
        "Connection pool is full, discarding connection"."""
        runtime = DockerRuntime("unix:///var/run/docker.sock")
        caplog.set_level(logging.WARNING, logger="urllib3.connectionpool")
        try:
            for _ in range(3):
                facts = await asyncio.gather(*(runtime.facts() for _ in range(32)))
                assert all(f.docker_version for f in facts)
        finally:
            runtime.close()
        discarded = [r for r in caplog.records if "Connection pool is full" in r.getMessage()]
        assert discarded == []


# -- keys --------------------------------------------------------------------------


class TestKeys:
    def test_generated_keypair_matches(self) -> None:
        """The public line is the private key's, with the comment."""
        private_key, public_key = generate_keypair("berth server-1")
        assert public_key.startswith("ssh-ed25519 AAAA")
        assert public_key.endswith(" berth server-1")
        exported = asyncssh.import_private_key(private_key).export_public_key("openssh")
        assert exported.decode().split()[:2] == public_key.split()[:2]

    def test_authorized_keys_line_is_forward_only(self) -> None:
        """The line carries the forward-only restrictions before the key."""
        _, public_key = generate_keypair("c")
        line = authorized_keys_line(public_key)
        assert line == (
            f'restrict,port-forwarding,permitlisten="127.0.0.1:1",command="/bin/false" {public_key}'
        )

    @pytest.mark.parametrize(
        "bad",
        [
            "",
            "not a key",
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB+8 broken",
        ],
    )
    def test_authorized_keys_line_refuses_garbage(self, bad: str) -> None:
        """Anything but one valid public key line is refused."""
        with pytest.raises(ValueError, match="public key"):
            authorized_keys_line(bad)

    def test_authorized_keys_line_refuses_a_second_line(self) -> None:
        """A key followed by a second line cannot smuggle an unrestricted key in."""
        _, first = generate_keypair("a")
        _, second = generate_keypair("b")
        with pytest.raises(ValueError, match="one OpenSSH public key line"):
            authorized_keys_line(f"{first}\n{second}")
