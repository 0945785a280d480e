"""What berth's key can do on a server, tried with asyncssh against a real sshd, and the
SSH gateway's temp files.

The key is authorized with ``KEY_RESTRICTIONS`` exactly as the install script writes it,
and the sshd carries the block the script adds for the user berth (``infra.Sshd``). It
forwards to the Docker socket (berth's whole job); it cannot listen on the server
(``-R``, a TCP port or a unix socket) nor run a command. OpenSSH gives no way to refuse
direct TCP forwards (``-L``, ``-D``) per key without also refusing the Docker socket's
stream-local forward: the last test shows it, so that the day OpenSSH changes, this file
says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest
from berth.core.types import KEY_RESTRICTIONS
from deploy_support import add_ssh_server, wait_online
from harness import BerthProcess
from infra import Sshd

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def bare_sshd(docker_ready: None) -> Iterator[Sshd]:
    """An sshd without the block the install script writes for the user berth."""
    server = Sshd(berth_block=False).start()
    yield server
    server.stop()


def _authorize(sshd: Sshd, options: str) -> asyncssh.SSHKey:
    key = asyncssh.generate_private_key("ssh-ed25519")
    line = f"{options} {key.export_public_key('openssh').decode().strip()}\n"
    path = sshd.keys_dir / "berth"
    with path.open("a") as keys:
        keys.write(line)
    path.chmod(0o644)
    return key


async def _connect(sshd: Sshd, key: asyncssh.SSHKey) -> asyncssh.SSHClientConnection:
    """berth's way in: user ``berth``, the sshd's host key pinned."""
    return await asyncssh.connect(
        "127.0.0.1",
        sshd.port,
        username="berth",
        client_keys=[key],
        known_hosts=asyncssh.import_known_hosts(f"[127.0.0.1]:{sshd.port} {sshd.host_public_key}"),
        agent_path=None,
    )


async def _docker_ping(conn: asyncssh.SSHClientConnection) -> bytes:
    reader, writer = await conn.open_unix_connection("/var/run/docker.sock")
    writer.write(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return answer


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP service on the server's loopback (a database, say): its port."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


@pytest.fixture
def socket_path() -> Iterator[str]:
    """A path on the server where a unix socket could be made (by the user berth too)."""
    path = Path(tempfile.gettempdir()) / f"berth-listen-{uuid.uuid4().hex[:8]}.sock"
    yield str(path)
    path.unlink(missing_ok=True)


@pytest.fixture
def admin_socket() -> Iterator[str]:
    """A unix socket the user berth may open, as Caddy's admin socket is: its path. It
    answers ``caddy`` to whoever connects."""
    directory = Path(tempfile.mkdtemp(prefix="berth-admin-"))
    directory.chmod(0o755)
    path = directory / "admin.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    path.chmod(0o777)
    server.listen()
    stop = threading.Event()

    def answer() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                conn, _ = server.accept()
                with conn:
                    conn.sendall(b"caddy")

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    yield str(path)
    stop.set()
    thread.join(5)
    server.close()
    shutil.rmtree(directory, ignore_errors=True)


class TestBerthsKey:
    def test_forwards_to_docker_but_cannot_listen_nor_run_a_command(self, sshd: Sshd) -> None:
        """With KEY_RESTRICTIONS: Docker's socket answers; -R and a command are refused."""
        key = _authorize(sshd, KEY_RESTRICTIONS)

        async def attempt() -> None:
            async with await _connect(sshd, key) as conn:
                assert (await _docker_ping(conn)).endswith(b"OK")
                with pytest.raises(asyncssh.ChannelListenError):
                    await conn.forward_remote_port("127.0.0.1", 0, "127.0.0.1", 9)
                with pytest.raises(asyncssh.ChannelListenError):
                    await conn.forward_remote_port("", 0, "127.0.0.1", 9)
                done = await conn.run("id", check=False)
                assert done.exit_status == 1
                assert not done.stdout

        asyncio.run(attempt())

    def test_cannot_listen_on_a_unix_socket_either(self, sshd: Sshd, socket_path: str) -> None:
        """With the sshd block the install script writes (``Match User berth``): a remote
        unix-socket forward (``ssh -R /path:…``, streamlocal) is refused and no socket is
        made on the server (issue 21, finding 9)."""
        key = _authorize(sshd, KEY_RESTRICTIONS)

        async def attempt() -> None:
            async with await _connect(sshd, key) as conn:
                with pytest.raises(asyncssh.ChannelListenError):
                    await conn.forward_remote_path(socket_path, "/var/run/docker.sock")
                with pytest.raises(asyncssh.ChannelListenError):
                    await conn.start_unix_server(asyncssh.SSHUNIXSession, socket_path)

        asyncio.run(attempt())
        assert not Path(socket_path).exists()

    def test_the_forwards_berth_needs_still_work(
        self, sshd: Sshd, listener: int, admin_socket: str
    ) -> None:
        """With that block: Docker's socket, a socket like Caddy's admin one and a TCP port
        on the server's loopback (health checks) are all reached."""
        key = _authorize(sshd, KEY_RESTRICTIONS)

        async def attempt() -> None:
            async with await _connect(sshd, key) as conn:
                assert (await _docker_ping(conn)).endswith(b"OK")
                reader, writer = await conn.open_unix_connection(admin_socket)
                assert await asyncio.wait_for(reader.read(), 10) == b"caddy"
                writer.close()
                _, writer = await conn.open_connection("127.0.0.1", listener)
                writer.close()

        asyncio.run(attempt())

    def test_without_the_sshd_block_the_key_could_listen_on_a_unix_socket(
        self, bare_sshd: Sshd, socket_path: str
    ) -> None:
        """The control (finding 9): the key's options alone (``permitlisten`` is for TCP)
        let it listen on a unix socket on the server."""
        key = _authorize(bare_sshd, KEY_RESTRICTIONS)

        async def attempt() -> None:
            async with await _connect(bare_sshd, key) as conn:
                listener = await conn.forward_remote_path(socket_path, "/var/run/docker.sock")
                assert await asyncio.to_thread(Path(socket_path).is_socket)
                listener.close()

        asyncio.run(attempt())

    def test_without_permitlisten_the_same_key_could_listen(self, bare_sshd: Sshd) -> None:
        """The control: without ``permitlisten`` (and without the sshd block) sshd grants a
        -R listener to this key."""
        key = _authorize(bare_sshd, 'restrict,port-forwarding,command="/bin/false"')

        async def attempt() -> None:
            async with await _connect(bare_sshd, key) as conn:
                listener = await conn.forward_remote_port("127.0.0.1", 0, "127.0.0.1", 9)
                assert listener.get_port() > 0
                listener.close()

        asyncio.run(attempt())

    def test_permitopen_would_cut_the_docker_socket(self, sshd: Sshd, listener: int) -> None:
        """Why direct TCP forwards stay open: any ``permitopen`` also refuses the
        stream-local forward to Docker (OpenSSH 9.2), while it limits TCP as asked."""
        key = _authorize(sshd, f'{KEY_RESTRICTIONS},permitopen="127.0.0.1:{listener}"')

        async def attempt() -> None:
            async with await _connect(sshd, key) as conn:
                _, writer = await conn.open_connection("127.0.0.1", listener)
                writer.close()
                with pytest.raises(asyncssh.ChannelOpenError):
                    await conn.open_connection("127.0.0.1", 9)
                with pytest.raises(asyncssh.ChannelOpenError):
                    await _docker_ping(conn)

        asyncio.run(attempt())


class TestSocketDirectory:
    def test_no_berth_ssh_directory_is_left_in_the_temp_dir(
        self, tmp_path: Path, sshd: Sshd, docker_ready: None, request: pytest.FixtureRequest
    ) -> None:
        """berth reaches a server over SSH, stops: its ``berth-ssh-*`` directory is gone;
        a berth that reached no server over SSH never made one."""
        temp = Path(tempfile.mkdtemp(prefix="bt-"))  # short: unix socket paths are short
        request.addfinalizer(lambda: shutil.rmtree(temp, ignore_errors=True))
        idle = BerthProcess(tmp_path / "idle", env={"TMPDIR": str(temp)}).start()
        idle.stop()
        assert list(temp.iterdir()) == []
        process = BerthProcess(
            tmp_path / "data", env={"TMPDIR": str(temp), "BERTH_MONITOR_SECONDS": "0.5"}
        ).start()
        try:
            _, token = process.new_users(1, "sockets")[0]
            with process.api(token) as api:
                server = add_ssh_server(api, sshd, "sockets")
                wait_online(api, server["id"])
            made = [p.name for p in temp.iterdir()]
            assert len(made) == 1
            assert made[0].startswith("berth-ssh-")
        finally:
            assert process.stop() == 0
        assert list(temp.iterdir()) == []
