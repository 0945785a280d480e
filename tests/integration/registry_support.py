"""A real private registry for the tests: Debian's ``docker-registry`` (the Distribution
registry) on ``127.0.0.1`` at a free port, with htpasswd authentication.

Docker pulls from and pushes to a registry on 127.0.0.1 over plain HTTP (loopback is an
insecure registry by default), so no certificate is needed. The ``registry`` fixture
(session scope, registered in ``conftest.py``) starts one and stops its process at the
end; ``RegistryServer.push`` puts a local image there and removes the local tag, so a
deploy of it must pull.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import subprocess
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import docker.errors
import httpx
import pytest
from infra import InfraUnavailable, docker_client, free_port, terminate, unavailable

__all__ = ["REGISTRY_BINARY", "RegistryServer", "bcrypt_htpasswd_line", "registry"]

REGISTRY_BINARY = "docker-registry"


def bcrypt_htpasswd_line(username: str, password: str) -> str:
    """``user:$2b$…``: the bcrypt entry the registry's htpasswd file wants, made with the
    standard library (``crypt`` with libxcrypt's bcrypt; deprecated, still in 3.11)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt

        hashed = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=1 << 5))
    if not hashed or not hashed.startswith("$2"):
        raise InfraUnavailable("this libcrypt has no bcrypt")
    return f"{username}:{hashed}"


class RegistryServer:
    """``docker-registry serve`` on ``127.0.0.1:<port>``; one user, storage in a temp dir."""

    def __init__(self, username: str = "berth-test", password: str | None = None) -> None:
        self.username = username
        self.password = password or secrets.token_urlsafe(18)
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="berth-registry-"))
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        """``127.0.0.1:<port>``: the registry part of an image reference."""
        return f"127.0.0.1:{self.port}"

    @property
    def auth_config(self) -> dict[str, str]:
        return {"username": self.username, "password": self.password}

    def start(self) -> RegistryServer:
        binary = shutil.which(REGISTRY_BINARY)
        if binary is None:
            raise InfraUnavailable("docker-registry is not installed (scripts/dev install)")
        (self.dir / "htpasswd").write_text(
            bcrypt_htpasswd_line(self.username, self.password) + "\n"
        )
        (self.dir / "data").mkdir(exist_ok=True)
        config = self.dir / "config.yml"
        config.write_text(
            "version: 0.1\n"
            "log:\n  level: warn\n  accesslog:\n    disabled: true\n"
            "storage:\n"
            f"  filesystem:\n    rootdirectory: {self.dir / 'data'}\n"
            "  delete:\n    enabled: true\n"
            f"http:\n  addr: 127.0.0.1:{self.port}\n"
            "auth:\n"
            f"  htpasswd:\n    realm: berth-test\n    path: {self.dir / 'htpasswd'}\n"
        )
        log = (self.dir / "registry.log").open("ab")
        self._process = subprocess.Popen(
            [binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 15
        while True:
            if self._process.poll() is not None:
                raise InfraUnavailable(
                    f"docker-registry exited: {(self.dir / 'registry.log').read_text()[-2000:]}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://{self.host}/v2/", timeout=1).status_code == 401:
                    return self
            if time.monotonic() > deadline:
                self.stop()
                raise InfraUnavailable("docker-registry did not answer within 15 s")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the registry process (its storage stays for a ``start`` on the same port)."""
        process, self._process = self._process, None
        terminate(process, timeout=10)

    @contextlib.contextmanager
    def stopped(self) -> Iterator[None]:
        """The registry down for the block, then up again on the same port and storage."""
        self.stop()
        try:
            yield
        finally:
            self.start()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def push(self, local: str, repository: str, tag: str) -> str:
        """Push the local image ``local`` as ``<host>/<repository>:<tag>`` (with the
        registry's credentials) and remove that tag locally; the pushed reference."""
        ref = f"{self.host}/{repository}:{tag}"
        client = docker_client(timeout=300.0)
        try:
            client.api.tag(local, f"{self.host}/{repository}", tag)
            for message in client.api.push(
                f"{self.host}/{repository}",
                tag=tag,
                auth_config=self.auth_config,
                stream=True,
                decode=True,
            ):
                if isinstance(message, dict) and message.get("error"):
                    raise AssertionError(f"push of {ref} failed: {message['error']}")
            client.api.remove_image(ref)
        finally:
            client.close()
        return ref

    def forget_locally(self, ref: str) -> None:
        """Remove the local tag ``ref`` (not the image a still-existing tag holds)."""
        client = docker_client()
        try:
            with contextlib.suppress(docker.errors.ImageNotFound):
                client.api.remove_image(ref)
        finally:
            client.close()


@pytest.fixture(scope="session")
def registry(docker_ready: None) -> Iterator[RegistryServer]:
    """A private registry with htpasswd auth on 127.0.0.1 (stopped at the end)."""
    server = RegistryServer()
    try:
        server.start()
    except InfraUnavailable as exc:
        server.close()
        unavailable(str(exc))
    yield server
    server.close()
