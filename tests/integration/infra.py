"""Real infrastructure for integration tests: dockerd, the echo image, a throwaway sshd.

Plain functions and classes (the fixtures live in ``conftest.py``). Everything here is
idempotent and bounded in time; starting dockerd or sshd, and creating the ``berth``
user, need root — ``InfraUnavailable`` says so when we are not.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import asyncssh
import docker
import docker.errors

__all__ = [
    "DOCKER_SOCKET",
    "ECHO_DIR",
    "InfraUnavailable",
    "Sshd",
    "build_echo_image",
    "docker_client",
    "ensure_berth_user",
    "ensure_dockerd",
    "free_port",
]

DOCKER_SOCKET = "/var/run/docker.sock"
ECHO_DIR = Path(__file__).resolve().parents[1] / "images" / "echo"
SOURCE_LABEL = "berth.test.source"
SSH_USER = "berth"
RESTRICTIONS = 'restrict,port-forwarding,command="/bin/false"'


class InfraUnavailable(RuntimeError):
    """The infrastructure cannot be provided on this machine (e.g. not root)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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


def build_echo_image(version: str = "v1", tag: str | None = None) -> str:
    """The tag of the static echo server image (``tests/images/echo``) built for ``version``.

    Compiled with ``gcc -static`` and built ``FROM scratch``; skipped when an image with
    that tag already carries the label for this source and version.
    """
    tag = tag or f"berth-test/echo:{version}"
    digest = hashlib.sha256()
    for name in ("server.c", "Dockerfile"):
        digest.update((ECHO_DIR / name).read_bytes())
    digest.update(version.encode())
    source = digest.hexdigest()[:32]
    client = docker_client(timeout=120.0)
    try:
        with contextlib.suppress(docker.errors.ImageNotFound):
            labels = client.api.inspect_image(tag)["Config"].get("Labels") or {}
            if labels.get(SOURCE_LABEL) == source:
                return tag
        with tempfile.TemporaryDirectory(prefix="berth-echo-") as build_dir:
            shutil.copy(ECHO_DIR / "Dockerfile", build_dir)
            subprocess.run(
                [
                    "gcc",
                    "-static",
                    "-O2",
                    f'-DVERSION="{version}"',
                    "-o",
                    str(Path(build_dir) / "server"),
                    str(ECHO_DIR / "server.c"),
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
    config and authorized keys, in a temp dir that user ``berth`` can read."""

    def __init__(self, port: int | None = None) -> None:
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
        self.config_path.write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {self.host_key_path}",
                    f"PidFile {self.dir / 'sshd.pid'}",
                    f"AuthorizedKeysFile {self.keys_dir}/%u",
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

    def log(self) -> str:
        """What sshd has logged so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        """Stop sshd (SIGTERM, then SIGKILL after 5 s) and remove its temp dir."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        shutil.rmtree(self.dir, ignore_errors=True)
