"""Real infrastructure for integration tests: dockerd, the echo image, a throwaway sshd,
a throwaway Caddy, databases on a PostgreSQL server, and HTTP(S) requests made by hand
(no DNS needed).

Plain functions and classes (the fixtures live in ``conftest.py``). Everything here is
idempotent and bounded in time; starting dockerd or sshd, and creating the ``berth``
user, need root — ``InfraUnavailable`` says so when we are not.

Several test runs may share this machine and its Docker Engine at once (two checkouts,
CI beside a developer). Each run has an id, ``RUN``: in the name of every container its
tests and the berths they start create, and in the label ``berth.test.run`` of every
container the tests create themselves; a run removes only containers whose name carries
its id. The echo images are shared, by content: their tag names the hash of their
source, so runs of different sources never replace each other's. What is the machine's
own (``net.ipv4.tcp_migrate_req``, the install script's directories) is held by a lock
or counted across runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import grp
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn
from uuid import UUID

import asyncssh
import docker
import docker.errors
import pytest
import sqlalchemy
from berth.adapters.sql import migrate, sqlite_url
from berth.core.models import ServerObservation, ServerStatus
from berth.core.types import KEY_RESTRICTIONS
from sqlalchemy import make_url, text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

__all__ = [
    "CADDY",
    "DATABASES",
    "DOCKER_SOCKET",
    "ECHO_DIR",
    "POSTGRES_URL",
    "RUN",
    "RUN_LABEL",
    "USER_ACCOUNT",
    "Caddy",
    "InfraUnavailable",
    "Sshd",
    "berth_database_env",
    "build_cat_image",
    "build_echo_image",
    "build_static_image",
    "database_at",
    "docker_client",
    "echo_tag",
    "ensure_berth_user",
    "ensure_dockerd",
    "ensure_stable_bridge",
    "free_port",
    "http_get",
    "https_get",
    "install_script_sshd_block",
    "machine_lock",
    "observe",
    "postgres_database",
    "postgres_url",
    "unavailable",
]

DOCKER_SOCKET = "/var/run/docker.sock"
CADDY = "/usr/bin/caddy"
ECHO_DIR = Path(__file__).resolve().parents[1] / "images" / "echo"
SOURCE_LABEL = "berth.test.source"
#: This test run's id, in every container name of the run (see the module's docstring).
RUN = uuid.uuid4().hex[:8]
#: The label carrying ``RUN`` on every container the tests create themselves.
RUN_LABEL = "berth.test.run"
#: Where runs on this machine take turns (``machine_lock``): ``berth-<name>.lock`` files.
LOCKS = Path("/run/lock")
SSH_USER = "berth"
RESTRICTIONS = KEY_RESTRICTIONS


class InfraUnavailable(RuntimeError):
    """The infrastructure cannot be provided on this machine (e.g. not root)."""


# Set by `scripts/dev test`, which installs and starts everything the suite needs:
# there, missing infrastructure is a failure, never a quietly skipped test.
REQUIRE_INFRA = bool(os.environ.get("BERTH_TESTS_REQUIRE_INFRA"))


def unavailable(reason: str) -> NoReturn:
    """Skip the test for want of ``reason`` -- or fail it where the suite must be whole."""
    if REQUIRE_INFRA:
        pytest.fail(f"Test infrastructure is missing: {reason}", pytrace=False)
    pytest.skip(reason)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def held_port(port: int, address: str = "0.0.0.0") -> Iterator[None]:
    """While open, a process outside Docker listens on ``address:port``, as a squatter would."""
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind((address, port))
        squatter.listen()
        yield


def docker_client(timeout: float = 30.0) -> docker.DockerClient:
    """A docker SDK client on the local Engine socket (API 1.41)."""
    return docker.DockerClient(base_url=f"unix://{DOCKER_SOCKET}", version="1.41", timeout=timeout)


def _docker_answers() -> bool:
    client = docker_client(timeout=5.0)
    try:
        return bool(client.ping())
    except Exception:
        return False
    finally:
        client.close()


def terminate(process: subprocess.Popen[Any] | None, timeout: float = 5) -> None:
    """End ``process`` if it still runs: SIGTERM, then SIGKILL after ``timeout`` seconds."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout)


def read_log(path: Path) -> str:
    """What a process has written to its log file so far ("" before it made one)."""
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def serve_sshd() -> Iterator[Sshd]:
    """A started :class:`Sshd` for a fixture (``yield from``), stopped at its end; the
    test is skipped (or fails, in CI) where none can start."""
    try:
        server = Sshd().start()
    except InfraUnavailable as exc:
        unavailable(str(exc))
    yield server
    server.stop()


def ensure_dockerd(timeout: float = 60.0) -> None:
    """Make sure a Docker Engine answers on the local socket.

    If none does, start ``dockerd --iptables=false`` in the background (it outlives the
    test session; its log goes to a temp file) and wait up to ``timeout`` seconds.
    Raises ``InfraUnavailable`` when not root, ``RuntimeError`` if dockerd never answers.
    """
    if _docker_answers():
        return
    if os.geteuid() != 0:
        raise InfraUnavailable("No Docker Engine answers and starting one needs root.")
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        raise InfraUnavailable("dockerd is not installed.")
    log_fd, log_path = tempfile.mkstemp(prefix="berth-dockerd-", suffix=".log")
    with os.fdopen(log_fd, "wb") as log:
        subprocess.Popen(
            [dockerd, "--iptables=false"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _docker_answers():
            return
        time.sleep(0.5)
    tail = Path(log_path).read_text(errors="replace")[-2000:]
    raise RuntimeError(f"dockerd did not answer within {timeout:.0f} s; log {log_path}:\n{tail}")


def ensure_stable_bridge(name: str = "docker0") -> None:
    """Give Docker's bridge a fixed MAC address if its MAC is not fixed (needs root).

    dockerd fixes it when it creates the bridge; a bridge created otherwise (it has
    happened on this machine) takes the lowest MAC of its ports, so adding or removing
    any container can change it, and every other container's traffic to the host then
    stalls for seconds until its ARP entry for the gateway expires — an outage that
    has nothing to do with the deployment under test.
    """
    device = Path("/sys/class/net") / name
    if os.geteuid() != 0 or not device.exists():
        return
    if (device / "addr_assign_type").read_text().strip() == "3":  # NET_ADDR_SET: fixed
        return
    mac = "02:42:" + ":".join(f"{byte:02x}" for byte in os.urandom(4))
    subprocess.run(["ip", "link", "set", name, "address", mac], check=True, capture_output=True)


def _source_hash(source_dir: Path, program: str, version: str) -> str:
    """The hash of what the image of ``program`` at ``version`` is built from."""
    digest = hashlib.sha256()
    for name in (f"{program}.c", "Dockerfile"):
        digest.update((source_dir / name).read_bytes())
    digest.update(version.encode())
    return digest.hexdigest()[:32]


def echo_tag(version: str = "v1") -> str:
    """The tag of the echo image of ``version`` (``build_echo_image`` makes it):
    ``berth-test/echo:<version>-<hash of its source>``, so that a run from another
    source (another checkout on this Engine) never replaces it."""
    name = version if re.fullmatch(r"[A-Za-z0-9_.-]{1,32}", version) else "custom"
    return f"berth-test/echo:{name}-{_source_hash(ECHO_DIR, 'server', version)[:12]}"


@contextlib.contextmanager
def machine_lock(name: str, timeout: float = 600.0) -> Iterator[None]:
    """Hold the machine-wide lock ``name`` (a ``flock`` on ``LOCKS/berth-<name>.lock``):
    test runs on this machine take turns at what they share."""
    path = LOCKS / f"berth-{name}.lock"
    LOCKS.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{path} is held by another test run") from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_echo_image(version: str = "v1") -> str:
    """The tag (``echo_tag``) of the static echo server image (``tests/images/echo``)
    built for ``version``."""
    return build_static_image(ECHO_DIR, "server", echo_tag(version), version)


def build_cat_image() -> str:
    """The tag of the static image that prints the files named on its command line and
    exits (``tests/images/cat``)."""
    source_dir = ECHO_DIR.with_name("cat")
    return build_static_image(
        source_dir, "cat", f"berth-test/cat:v1-{_source_hash(source_dir, 'cat', 'v1')[:12]}"
    )


def build_static_image(source_dir: Path, program: str, tag: str, version: str = "v1") -> str:
    """``tag``, built ``FROM scratch`` from ``source_dir`` (``<program>.c`` compiled with
    ``gcc -static`` into ``<program>``, and its ``Dockerfile``) for ``version``; skipped
    when an image with that tag already carries the label for this source and version.

    Runs on this machine build it one at a time: two building at once would leave the
    tag on one image and the other's containers on an untagged twin.
    """
    source = _source_hash(source_dir, program, version)
    with machine_lock(f"{program}-image"):
        client = docker_client(timeout=120.0)
        try:
            with contextlib.suppress(docker.errors.ImageNotFound):
                labels = client.api.inspect_image(tag)["Config"].get("Labels") or {}
                if labels.get(SOURCE_LABEL) == source:
                    return tag
            with tempfile.TemporaryDirectory(prefix=f"berth-{program}-") as build_dir:
                shutil.copy(source_dir / "Dockerfile", build_dir)
                subprocess.run(
                    [
                        "gcc",
                        "-static",
                        "-O2",
                        f'-DVERSION="{version}"',
                        "-o",
                        str(Path(build_dir) / program),
                        str(source_dir / f"{program}.c"),
                    ],
                    check=True,
                    capture_output=True,
                    timeout=120,
                )
                client.images.build(path=build_dir, tag=tag, labels={SOURCE_LABEL: source}, rm=True)
        finally:
            client.close()
    return tag


def ensure_berth_user() -> None:
    """A system user ``berth`` in group ``docker``, password field ``*`` (OpenSSH refuses
    locked ``!`` accounts), shell ``/bin/sh``. Idempotent; needs root."""
    if os.geteuid() != 0:
        raise InfraUnavailable("Creating the berth user needs root.")
    exists = subprocess.run(["id", SSH_USER], capture_output=True, check=False).returncode == 0
    if not exists:
        subprocess.run(
            [
                "useradd",
                "--system",
                "--create-home",
                "--shell",
                "/bin/sh",
                "-G",
                "docker",
                SSH_USER,
            ],
            check=True,
            capture_output=True,
        )
    groups = subprocess.run(["id", "-nG", SSH_USER], capture_output=True, check=True, text=True)
    if "docker" not in groups.stdout.split():
        subprocess.run(["usermod", "-aG", "docker", SSH_USER], check=True, capture_output=True)
    subprocess.run(["usermod", "-p", "*", SSH_USER], check=True, capture_output=True)


class Sshd:
    """A throwaway OpenSSH server on ``127.0.0.1:<port>`` with its own ed25519 host key,
    config and authorized keys, in a temp dir that user ``berth`` can read.

    ``authorized_keys_file`` replaces its ``AuthorizedKeysFile`` (``<dir>/authorized_keys/%u``,
    which :meth:`authorize` writes): ``".ssh/authorized_keys"`` makes it read the file
    in the user's home, as a server's own sshd does (the install script's tests).

    Its config includes ``<dir>/sshd_config.d/*.conf`` at the top, as Debian's does; with
    ``berth_block`` (the default) that directory holds the block the install script adds
    for the user ``berth``, taken from the script itself (``--print-sshd-config``), so the
    sshd every test reaches servers through is configured as the script configures one.
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        authorized_keys_file: str | None = None,
        berth_block: bool = True,
    ) -> None:
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="berth-sshd-"))
        self.dir.chmod(0o755)  # sshd reads authorized_keys as the user
        self._process: subprocess.Popen[bytes] | None = None
        host_key = asyncssh.generate_private_key("ssh-ed25519")
        self.host_key_path = self.dir / "ssh_host_ed25519_key"
        self.host_key_path.write_bytes(host_key.export_private_key("openssh"))
        self.host_key_path.chmod(0o600)
        self._host_public_key = host_key.export_public_key("openssh").decode().strip()
        self.keys_dir = self.dir / "authorized_keys"
        self.keys_dir.mkdir(mode=0o755)
        self.log_path = self.dir / "sshd.log"
        self.config_path = self.dir / "sshd_config"
        self.dropin_dir = self.dir / "sshd_config.d"
        self.dropin_dir.mkdir(mode=0o755)
        if berth_block:
            (self.dropin_dir / "00-berth.conf").write_text(install_script_sshd_block())
        self.config_path.write_text(
            "\n".join(
                [
                    f"Include {self.dropin_dir}/*.conf",
                    f"Port {self.port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {self.host_key_path}",
                    f"PidFile {self.dir / 'sshd.pid'}",
                    f"AuthorizedKeysFile {authorized_keys_file or f'{self.keys_dir}/%u'}",
                    "StrictModes no",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "PermitRootLogin no",
                    f"AllowUsers {SSH_USER}",
                    "AllowTcpForwarding yes",
                    "AllowStreamLocalForwarding yes",
                    "AllowAgentForwarding no",
                    "X11Forwarding no",
                    "PermitTTY no",
                    "LogLevel VERBOSE",
                    "",
                ]
            )
        )

    @property
    def host_public_key(self) -> str:
        """The server's host public key line, ``ssh-ed25519 AAAA…``: what berth pins."""
        return self._host_public_key

    @property
    def pid(self) -> int | None:
        """The listening sshd's process id while it runs (its connections are its children)."""
        return self._process.pid if self._process is not None else None

    def start(self, timeout: float = 10.0) -> Sshd:
        """Create the ``berth`` user if needed, start sshd, wait until its port accepts."""
        ensure_berth_user()
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        check = subprocess.run(
            ["/usr/sbin/sshd", "-t", "-f", str(self.config_path)],
            capture_output=True,
            text=True,
            check=False,
        )
        if check.returncode != 0:
            raise RuntimeError(f"sshd rejects its config: {check.stderr}")
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                ["/usr/sbin/sshd", "-D", "-e", "-f", str(self.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"sshd exited at start:\n{self.log()}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5),
            ):
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"sshd did not listen on {self.port} within {timeout:.0f} s")

    def authorize(self, public_key_line: str) -> None:
        """Let ``public_key_line`` in as ``berth``, forward-only (as the install script does)."""
        path = self.keys_dir / SSH_USER
        with path.open("a") as keys:
            keys.write(f"{RESTRICTIONS} {public_key_line.strip()}\n")
        path.chmod(0o644)

    def new_host_key(self) -> str:
        """Give sshd a new ed25519 host key and make it re-read it (SIGHUP: sshd re-executes
        itself; connections it already serves go on with the old key, as after a restart
        of a server's sshd). Returns the new public key line."""
        host_key = asyncssh.generate_private_key("ssh-ed25519")
        self.host_key_path.write_bytes(host_key.export_private_key("openssh"))
        self.host_key_path.chmod(0o600)
        self._host_public_key = host_key.export_public_key("openssh").decode().strip()
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGHUP)
        return self._host_public_key

    def halt(self) -> None:
        """Stop sshd (and the connections it serves), keeping its dir: ``start`` again."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        children = _children(process.pid)
        process.terminate()
        process.wait(timeout=5)
        for pid in children:  # the sessions it forked, by pid: this sshd's own
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def log(self) -> str:
        """What sshd has logged so far."""
        return read_log(self.log_path)

    def stop(self) -> None:
        """Stop sshd (SIGTERM, then SIGKILL after 5 s) and remove its temp dir."""
        process, self._process = self._process, None
        terminate(process)
        shutil.rmtree(self.dir, ignore_errors=True)


def install_script_sshd_block() -> str:
    """The sshd block for the user ``berth`` that the install script adds, as it prints it."""
    import berth.entrypoints.install as install_package

    script = Path(install_package.__file__).parent / "install.sh"
    done = subprocess.run(
        ["sh", str(script), "--print-sshd-config"],
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    )
    assert "Match User berth" in done.stdout, done.stdout
    return done.stdout


def _children(pid: int) -> list[int]:
    """The ids of the processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


# -- Caddy ---------------------------------------------------------------------------

MIGRATE_REQ = Path("/proc/sys/net/ipv4/tcp_migrate_req")


class _MigrateRequests:
    """``net.ipv4.tcp_migrate_req = 1`` while any test Caddy runs, as on a server (README).

    Caddy reloads its configuration by binding its ports anew with ``SO_REUSEPORT`` and
    closing the old sockets; without this setting (Linux >= 5.14) the kernel resets the
    connections still queued on a closed socket instead of handing them to the new one.
    The previous value comes back when the last Caddy of the last test run on this
    machine stops: each run that has one running keeps a file named by its pid in
    ``USERS`` (a run that died is not counted), the value found before the first is kept
    in ``PREVIOUS``, all under a machine lock. Needs root; else a no-op.
    """

    USERS = LOCKS / "berth-tcp-migrate-req"
    PREVIOUS = USERS / "previous"
    users = 0  # this run's Caddies that run

    @classmethod
    def _others(cls) -> list[Path]:
        """The other live runs' files (a dead run's go)."""
        found = []
        for entry in cls.USERS.glob("[0-9]*"):
            if int(entry.name) != os.getpid() and Path(f"/proc/{entry.name}").exists():
                found.append(entry)
            elif int(entry.name) != os.getpid():
                entry.unlink(missing_ok=True)
        return found

    @classmethod
    def acquire(cls) -> None:
        if not MIGRATE_REQ.exists() or os.geteuid() != 0:
            return
        if cls.users == 0:
            with machine_lock("tcp-migrate-req"):
                cls.USERS.mkdir(parents=True, exist_ok=True)
                if not cls._others():
                    cls.PREVIOUS.write_text(MIGRATE_REQ.read_text())
                (cls.USERS / str(os.getpid())).touch()
                MIGRATE_REQ.write_text("1\n")
        cls.users += 1

    @classmethod
    def release(cls) -> None:
        if cls.users == 0:
            return
        cls.users -= 1
        if cls.users > 0:
            return
        with machine_lock("tcp-migrate-req"):
            (cls.USERS / str(os.getpid())).unlink(missing_ok=True)
            if not cls._others() and cls.PREVIOUS.exists():
                MIGRATE_REQ.write_text(cls.PREVIOUS.read_text())
                cls.PREVIOUS.unlink()


class Caddy:
    """A throwaway Caddy (``/usr/bin/caddy run``) in a temp dir, as root, configured like
    the install script configures it on a server: only an admin block, on a unix socket
    that accepts ``Host: caddy-admin``. berth loads everything else.

    The socket lives in ``<dir>/run``, a directory of group ``berth`` with the setgid
    bit, and Caddy runs with umask 007: the socket it (re)creates on every start and
    every config load is ``root:berth`` mode 0770, so user ``berth`` reaches it through
    sshd's stream-local forwarding — the same arrangement as a ``caddy`` service with
    ``UMask=0007`` and ``berth`` in its group. Its data (the internal CA's root) and
    config (autosave) live under ``XDG_DATA_HOME`` / ``XDG_CONFIG_HOME`` in the temp dir.
    While it runs, ``net.ipv4.tcp_migrate_req`` is 1 (see ``_MigrateRequests``).
    """

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="berth-caddy-"))
        self.dir.chmod(0o755)
        self.run_dir = self.dir / "run"
        self.admin_socket = self.run_dir / "admin.sock"
        self.https_port = free_port()
        self.http_port = free_port()
        while self.http_port == self.https_port:
            self.http_port = free_port()
        self.config_path = self.dir / "caddy.json"
        self.log_path = self.dir / "caddy.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._migrating = False

    @property
    def initial_config(self) -> dict[str, object]:
        """What Caddy starts with: the admin endpoint and nothing else."""
        return {"admin": {"listen": f"unix/{self.admin_socket}", "origins": ["caddy-admin"]}}

    @property
    def root_ca_path(self) -> Path:
        """The root certificate of Caddy's internal CA: what clients verify against."""
        return self.dir / "data" / "caddy" / "pki" / "authorities" / "local" / "root.crt"

    def berth_env(self) -> dict[str, str]:
        """The settings that point a berth at this Caddy, with the internal issuer."""
        return {
            "BERTH_CADDY_ADMIN_SOCKET": str(self.admin_socket),
            "BERTH_PROXY_HTTPS_PORT": str(self.https_port),
            "BERTH_PROXY_HTTP_PORT": str(self.http_port),
            "BERTH_TLS_ISSUER": "internal",
        }

    def start(self, timeout: float = 15.0) -> Caddy:
        """Start Caddy with the initial config; wait until its admin API answers."""
        if not Path(CADDY).exists():
            raise InfraUnavailable(f"{CADDY} is not installed.")
        ensure_berth_user()
        if not self._migrating:
            _MigrateRequests.acquire()
            self._migrating = True
        self.run_dir.mkdir(exist_ok=True)
        os.chown(self.run_dir, 0, grp.getgrnam(SSH_USER).gr_gid)
        self.run_dir.chmod(0o2750)
        self.config_path.write_text(json.dumps(self.initial_config))
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.dir),
            "XDG_DATA_HOME": str(self.dir / "data"),
            "XDG_CONFIG_HOME": str(self.dir / "config"),
        }
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                [CADDY, "run", "--config", str(self.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                umask=0o007,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"caddy exited at start:\n{self.log()[-3000:]}")
            with contextlib.suppress(OSError, ValueError):
                self.config()
                return self
            time.sleep(0.05)
        self.stop(remove=False)
        raise RuntimeError(f"caddy's admin API did not answer within {timeout:.0f} s")

    def restart(self) -> Caddy:
        """Stop Caddy and start it again: it comes back with the initial config only."""
        self.stop(remove=False)
        return self.start()

    def admin(self, method: str, path: str, body: object = None) -> tuple[int, bytes]:
        """One request to the admin API, as berth makes it (HTTP/1.0, Host caddy-admin)."""
        data = b"" if body is None else json.dumps(body).encode()
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(10)
            sock.connect(str(self.admin_socket))
            sock.sendall(
                f"{method} {path} HTTP/1.0\r\nHost: caddy-admin\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode()
                + data
            )
            raw = _read_to_end(sock)
        head, _, payload = raw.partition(b"\r\n\r\n")
        return int(head.split()[1]), payload

    def config(self) -> object:
        """Caddy's live configuration (``GET /config/``), as JSON values."""
        status, payload = self.admin("GET", "/config/")
        if status != 200:
            raise ValueError(f"GET /config/ answered {status}: {payload!r}")
        return json.loads(payload or b"null")

    def routed_domains(self) -> list[str]:
        """Every host the live configuration routes (empty without an HTTP app)."""
        config = self.config()
        if not isinstance(config, dict):
            return []
        servers = config.get("apps", {}).get("http", {}).get("servers", {})
        return sorted(
            host
            for server in servers.values()
            for route in server.get("routes", [])
            for match in route.get("match", [])
            for host in match.get("host", [])
        )

    def log(self) -> str:
        return read_log(self.log_path)

    def stop(self, *, remove: bool = True) -> None:
        """Stop Caddy (SIGTERM, then SIGKILL after 5 s); with ``remove``, delete its dir."""
        process, self._process = self._process, None
        terminate(process)
        if remove:
            if self._migrating:
                _MigrateRequests.release()
                self._migrating = False
            shutil.rmtree(self.dir, ignore_errors=True)


def _read_to_end(sock: socket.socket, limit: int = 16 * 1024 * 1024) -> bytes:
    data = bytearray()
    while len(data) < limit:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return bytes(data)


def _response(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Status, headers (lowercased names) and body of an HTTP/1.x response read to its end
    (the request asked for ``Connection: close``; chunked bodies are not decoded)."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers, body


def https_get(
    port: int, domain: str, cafile: Path, path: str = "/", timeout: float = 5.0
) -> tuple[int, dict[str, str], bytes]:
    """``GET https://<domain><path>`` sent to ``127.0.0.1:port`` (SNI and Host ``domain``),
    verifying the certificate against ``cafile`` only. Raises ``ssl.SSLError`` or
    ``OSError`` when the TLS handshake or the connection fails."""
    context = ssl.create_default_context(cafile=str(cafile))
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
        # The request right after the handshake's last flight: without this, Nagle holds it
        # until the server's delayed ACK (some 40 ms).
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with context.wrap_socket(raw, server_hostname=domain) as tls:
            tls.sendall(
                f"GET {path} HTTP/1.1\r\nHost: {domain}\r\nConnection: close\r\n\r\n".encode()
            )
            return _response(_read_to_end(tls))


def http_get(
    port: int, host: str, path: str = "/", timeout: float = 5.0
) -> tuple[int, dict[str, str], bytes]:
    """``GET http://<host><path>`` sent to ``127.0.0.1:port``."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        return _response(_read_to_end(sock))


# -- PostgreSQL ------------------------------------------------------------------------

#: A database on the PostgreSQL server the SQL store's tests also run against,
#: ``postgresql+asyncpg://…`` (``scripts/dev test`` starts a throwaway one and sets it).
#: They create databases of their own next to it.
POSTGRES_URL = os.environ.get("BERTH_TEST_POSTGRES_URL") or None

#: The databases the SQL store's tests run on: parametrize with these, and get a
#: PostgreSQL one through :func:`postgres_url` or :func:`postgres_database`.
DATABASES = ["sqlite", "postgresql"]


def postgres_url() -> str:
    """``BERTH_TEST_POSTGRES_URL``; the test is skipped (or fails) without it."""
    if POSTGRES_URL is None:
        unavailable(
            "BERTH_TEST_POSTGRES_URL (postgresql+asyncpg://…) is not set; "
            "scripts/dev test starts a throwaway PostgreSQL and sets it."
        )
    return POSTGRES_URL


def _postgres_execute(url: str, statement: str) -> None:
    async def run() -> None:
        engine = create_async_engine(url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
        try:
            async with engine.connect() as conn:
                await conn.execute(text(statement))
        finally:
            await engine.dispose()

    with ThreadPoolExecutor(1) as pool:  # a loop of its own, even if the caller has one
        pool.submit(asyncio.run, run()).result(timeout=60)


@contextlib.contextmanager
def small_disk(where: Path, size_mb: int = 24) -> Iterator[Path]:
    """A tmpfs of ``size_mb`` mounted on ``where`` (made if missing) for the duration: a
    disk a test can fill (``fill``). Needs root; unmounted at the end."""
    if os.geteuid() != 0:
        unavailable("mounting a small tmpfs needs root")
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        unavailable(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def fill(disk: Path) -> Path:
    """Write a file on ``disk`` until the filesystem has no room left; the file (remove it
    to make room again)."""
    filler = disk / "filler"
    with contextlib.suppress(OSError), filler.open("wb") as out:
        while True:
            out.write(b"\0" * (1 << 16))
            out.flush()
    return filler


@contextlib.contextmanager
def postgres_database(prefix: str = "berth_test", template: str | None = None) -> Iterator[str]:
    """The URL of a new database on the test PostgreSQL server, dropped afterwards (with
    any connections still open to it): empty, or a copy of the database ``template``.
    Skips (or fails) without a server."""
    server = postgres_url()
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    copy = f' TEMPLATE "{template}"' if template else ""
    _postgres_execute(server, f'CREATE DATABASE "{name}"{copy}')
    try:
        yield make_url(server).set(database=name).render_as_string(hide_password=False)
    finally:
        _postgres_execute(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def migrated_database(database: str, where: Path, prefix: str) -> Iterator[str]:
    """The URL of a new database (one of :data:`DATABASES`) migrated to the head revision:
    a SQLite file in ``where``, or a PostgreSQL database named after ``prefix`` and
    dropped afterwards. Each is a copy of this process's :func:`_migrated` database (a
    file copy; ``CREATE DATABASE … TEMPLATE``): the same as migrating it, without running
    every migration again for each test."""
    template = _migrated(database)
    if database == "sqlite":
        url = sqlite_url(where)
        Path(where).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(make_url(template).database or "", make_url(url).database or "")
        yield url
        return
    with postgres_database(prefix, template=make_url(template).database) as url:
        yield url


#: This process's database of each kind migrated to the head revision (:func:`_migrated`).
_MIGRATED: dict[str, str] = {}


def _migrated(database: str) -> str:
    """The URL of a database (one of :data:`DATABASES`) that this process migrated to the
    head revision on first use and only copies afterwards (nothing connects to it in
    between: PostgreSQL copies only a database nobody uses); :func:`drop_migrated`
    removes it."""
    if database not in _MIGRATED:
        if database == "sqlite":
            url = sqlite_url(Path(tempfile.mkdtemp(prefix="berth-migrated-")))
        else:
            server = postgres_url()
            name = f"berth_migrated_{uuid.uuid4().hex[:12]}"
            _postgres_execute(server, f'CREATE DATABASE "{name}"')
            url = make_url(server).set(database=name).render_as_string(hide_password=False)
        _MIGRATED[database] = url
        migrate(url)
    return _MIGRATED[database]


def drop_migrated() -> None:
    """Remove the databases :func:`migrated_database` copied (at the end of the session)."""
    while _MIGRATED:
        database, url = _MIGRATED.popitem()
        if database == "sqlite":
            shutil.rmtree(Path(make_url(url).database or "").parent, ignore_errors=True)
        else:
            name = make_url(url).database
            _postgres_execute(postgres_url(), f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def berth_database_env(database: str) -> Iterator[dict[str, str]]:
    """The environment that puts a ``berth`` on ``database`` (one of :data:`DATABASES`):
    nothing for SQLite (the data dir's), ``BERTH_DATABASE_URL`` of a new database
    for PostgreSQL."""
    if database == "sqlite":
        yield {}
        return
    assert database == "postgresql", database
    with postgres_database("berth_serve") as url:
        yield {"BERTH_DATABASE_URL": url}


async def observe(
    fleet: Any, server_id: UUID, status: ServerStatus, at: datetime, **fields: Any
) -> None:
    """Write what the monitor writes after one check of a server (``Fleet.record`` of one
    observation; online also moves ``last_seen_at``)."""
    online = status is ServerStatus.ONLINE
    seen = ServerObservation(server_id=server_id, at=at, status=status, seen=online, **fields)
    await fleet.record([seen])


#: ``user_account`` as every revision has it: for rows written below the head.
USER_ACCOUNT = sqlalchemy.table(
    "user_account",
    sqlalchemy.column("id", sqlalchemy.Uuid()),
    sqlalchemy.column("email", sqlalchemy.String()),
    sqlalchemy.column("password_hash", sqlalchemy.String()),
    sqlalchemy.column("created_at", sqlalchemy.DateTime(timezone=True)),
)


@contextlib.contextmanager
def database_at(kind: str, revision: str, tmp_path: Path) -> Iterator[str]:
    """The URL of a ``kind`` (``DATABASES``) database migrated to ``revision`` only: to
    write what that revision stored, then test the migrations after it."""
    from alembic import command
    from berth.adapters.sql import alembic_config, sqlite_url
    from berth.adapters.sql.dialect import ensure_database_dir

    if kind == "sqlite":
        url = sqlite_url(tmp_path)
        ensure_database_dir(url)
        command.upgrade(alembic_config(url), revision)
        yield url
        return
    with postgres_database(f"berth_at_{revision}") as url:
        command.upgrade(alembic_config(url), revision)
        yield url
