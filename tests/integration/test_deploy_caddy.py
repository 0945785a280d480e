"""The Caddyfiles under ``deploy/``, run by a real Caddy in front of a real ``berth
serve``: Caddy's admin API listens nowhere, and no spelling of ``/metrics`` reaches
berth's metrics through it (issue 21, findings 1 and 5).

Each file is run as shipped but for what cannot be here: the site address (a free port,
plain HTTP) and the upstreams (the test's berth)."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import BerthProcess, free_port
from infra import CADDY, http_get

pytestmark = pytest.mark.integration

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"

METRICS_SPELLINGS = [
    "/metrics",
    "/metrics/",
    "//metrics",
    "///metrics",
    "/metrics%2F",
    "/metrics%2f",
    "/%6detrics",
    "/METRICS",
    "/metrics/anything",
    "/./metrics",
    "/x/../metrics",
    "/metrics?format=prometheus",
]


def runnable(name: str, site_port: int, upstream_port: int) -> str:
    """``deploy/<name>`` with its site on ``site_port`` (plain HTTP) and its upstream the
    berth on ``upstream_port``; every other line as shipped."""
    text = (DEPLOY / name).read_text()
    if name == "Caddyfile":
        changed = text.replace(
            "berth.example.com {", f"http://berth.example.com:{site_port} {{"
        ).replace("127.0.0.1:8081 127.0.0.1:8082", f"127.0.0.1:{upstream_port}")
    else:
        changed = re.sub(
            r"dynamic a api 8080 \{[^}]*\}", f"to 127.0.0.1:{upstream_port}", text
        ).replace(":80 {", f":{site_port} {{")
    assert changed.count(str(site_port)) == 1, changed
    assert str(upstream_port) in changed, changed
    return changed


def listening_ports(pid: int) -> set[int]:
    """The TCP ports the process ``pid`` listens on (its sockets in /proc/net/tcp{,6}
    in state LISTEN)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


class RunningCaddy:
    def __init__(self, config: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="berth-deploy-caddy-"))
        path = self.dir / "Caddyfile"
        path.write_text(config)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.dir),
            "XDG_DATA_HOME": str(self.dir / "data"),
            "XDG_CONFIG_HOME": str(self.dir / "config"),
        }
        self.log = self.dir / "caddy.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [CADDY, "run", "--config", str(path), "--adapter", "caddyfile"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )

    def wait_listening(self, port: int, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"caddy exited:\n{self.log.read_text()[-3000:]}")
            if port in listening_ports(self.process.pid):
                return
            time.sleep(0.05)
        raise RuntimeError(f"caddy did not listen on {port}:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


@pytest.fixture(params=["Caddyfile", "compose.Caddyfile"])
def proxied(
    request: pytest.FixtureRequest, berth: BerthProcess
) -> Iterator[tuple[RunningCaddy, int]]:
    """A real Caddy running one of deploy/'s Caddyfiles in front of the shared berth."""
    if not Path(CADDY).exists():
        pytest.skip(f"{CADDY} is not installed")
    site = free_port()
    caddy = RunningCaddy(runnable(request.param, site, berth.port))
    try:
        caddy.wait_listening(site)
        yield caddy, site
    finally:
        caddy.stop()


def test_caddys_admin_api_listens_nowhere(proxied: tuple[RunningCaddy, int]) -> None:
    """Caddy runs with the site's port as its only listening socket: no admin API on
    localhost:2019 (or anywhere) for a process or a webhook to reconfigure or stop it."""
    caddy, site = proxied
    assert listening_ports(caddy.process.pid) == {site}
    assert caddy.process.poll() is None


@pytest.mark.parametrize("path", METRICS_SPELLINGS)
def test_no_spelling_of_metrics_gets_through(proxied: tuple[RunningCaddy, int], path: str) -> None:
    """Every path that starts with /metrics, however written, is answered 404 by Caddy
    itself (not passed on to berth), while other paths reach berth."""
    _, site = proxied
    status, headers, body = http_get(site, "berth.example.com", path)
    assert status == 404, body[:300]
    assert b"berth_" not in body
    assert "content-type" not in headers  # Caddy's own empty answer, not berth's problem
    status, _, body = http_get(site, "berth.example.com", "/healthz")
    assert status == 200, body[:300]
