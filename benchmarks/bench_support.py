"""What the deploy, build, pull and fleet benchmarks share: progress lines, polling the
API, the two servers (local and SSH) of a first user, a throwaway ``berth serve
--local``, the count argument and removing a run's containers.

Importing it puts ``tests/integration`` (the test harness: ``harness``, ``infra``) on
``sys.path``.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from harness import BerthProcess  # noqa: E402
from infra import Sshd, docker_client  # noqa: E402

HIGH_LIMIT = "1000000000"  # requests and deploys per minute: far out of the way
POLL_SECONDS = 0.005
ANSWER_TIMEOUT = 30.0


def progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def count_argument(argv: list[str] | None, doc: str | None, name: str, default: int) -> int:
    """The benchmark's one optional positional count (``N``, at least 1; ``name`` says of
    what), parsed from ``argv``; ``doc``'s first line describes the benchmark."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("count", nargs="?", type=int, default=default, metavar="N", help=name)
    count: int = parser.parse_args(argv).count
    if count < 1:
        parser.error("N must be at least 1")
    return count


def ts(value: str) -> float:
    """An API time (ISO 8601) as a POSIX timestamp."""
    return datetime.fromisoformat(value).timestamp()


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in 0..100); NaN of no values."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def mark(ok: bool) -> str:
    return "met" if ok else "**MISSED**"


_ports_given: set[int] = set()


def host_port() -> int:
    """A TCP port free on 0.0.0.0 a moment ago, never handed out twice in this run."""
    while True:
        with socket.socket() as sock:
            sock.bind(("0.0.0.0", 0))  # noqa: S104 - the apps publish on every address
            port = int(sock.getsockname()[1])
        if port not in _ports_given:
            _ports_given.add(port)
            return port


def answers_hello(port: int) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
    try:
        conn.request("GET", "/")
        response = conn.getresponse()
        return response.status == 200 and response.read().startswith(b"hello")
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def wait_hello(port: int) -> float:
    """``time.perf_counter()`` at the first ``GET /`` on ``port`` that answers ``hello``."""
    deadline = time.perf_counter() + ANSWER_TIMEOUT
    while True:
        if answers_hello(port):
            return time.perf_counter()
        if time.perf_counter() > deadline:
            raise RuntimeError(f"port {port} did not answer hello within {ANSWER_TIMEOUT:g} s")
        time.sleep(POLL_SECONDS)


def deploy_then_remove(
    client: httpx.Client, body: dict[str, Any], port: int, wait: int
) -> tuple[dict[str, Any], float, float]:
    """``POST /api/agent/docker/deploy?wait=`` ``body`` (an echo app answering on
    ``port``), wait until the app answers ``hello``, then remove it (outside the time):
    the deployment, and ``time.perf_counter()`` when the POST returned and when the app
    answered. A deploy that did not succeed raises."""
    name = body["name"]
    response = client.post(
        "/api/agent/docker/deploy", params={"wait": wait}, json=body, timeout=wait + 30
    )
    returned = time.perf_counter()
    if response.status_code != 200:
        raise RuntimeError(f"deploy {name}: {response.status_code} {response.text}")
    deployment: dict[str, Any] = response.json()["deployment"]
    installation_id = response.json()["installation"]["id"]
    try:
        if deployment["state"] != "succeeded":
            raise RuntimeError(f"deploy {name}: {deployment['state']}: {deployment['error']}")
        answered = wait_hello(port)
    finally:
        removed = client.delete(f"/api/agent/installations/{installation_id}")
        if removed.status_code != 204:
            raise RuntimeError(f"remove {name}: {removed.status_code} {removed.text}")
    return deployment, returned, answered


def wait_for(what: str, fetch: Any, timeout: float = 30.0) -> Any:
    """Poll ``fetch()`` every 0.1 s until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = fetch()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout:g} s")
        time.sleep(0.1)


def servers(client: httpx.Client) -> list[dict[str, Any]]:
    response = client.get("/api/agent/servers")
    response.raise_for_status()
    found: list[dict[str, Any]] = response.json()["servers"]
    return found


def online(client: httpx.Client, server_id: str) -> bool:
    return any(s["id"] == server_id and s["status"] == "online" for s in servers(client))


def local_and_ssh(client: httpx.Client, sshd: Sshd, name: str) -> dict[str, str]:
    """The first user's servers, both online: ``local`` (berth's own, registered at
    start) and ``ssh``, created as ``name`` on ``sshd`` (its key authorized there)."""
    local = wait_for(
        "local server registered",
        lambda: [s["id"] for s in servers(client) if s["transport"] == "local"],
    )
    created = client.post(
        "/api/agent/servers",
        json={
            "name": name,
            "address": "127.0.0.1",
            "sshPort": sshd.port,
            "sshUser": "berth",
            "hostKeys": [sshd.host_public_key],
        },
    )
    if created.status_code != 201:
        raise RuntimeError(f"create SSH server: {created.status_code} {created.text}")
    sshd.authorize(created.json()["publicKey"])
    ids = {"local": local[0], "ssh": created.json()["id"]}
    for kind, server_id in ids.items():
        wait_for(f"{kind} server online", lambda s=server_id: online(client, s))
        progress(f"{kind} server {server_id} is online")
    return ids


@contextlib.contextmanager
def running_berth(
    tag: str, env: dict[str, str] | None = None
) -> Iterator[tuple[BerthProcess, httpx.Client]]:
    """``berth serve --local`` (fast monitor, rate limits out of the way, and ``env``) on a
    temp data dir, and an API client as its first user (the owner of its local server)."""
    with tempfile.TemporaryDirectory(prefix=f"berth-bench-{tag}-") as tmp:
        berth = BerthProcess(
            Path(tmp) / "data",
            env={
                "BERTH_MONITOR_SECONDS": "0.5",
                "BERTH_RATE_LIMIT": HIGH_LIMIT,
                "BERTH_DEPLOY_RATE_LIMIT": HIGH_LIMIT,
                "BERTH_LOG_LEVEL": "warning",
                **(env or {}),
            },
            args=["--local"],
        )
        client: httpx.Client | None = None
        try:
            progress(f"starting berth serve --local on {berth.url}")
            berth.start(timeout=60)
            _email, token = berth.new_user(f"bench-{tag}")
            client = httpx.Client(
                base_url=berth.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
            )
            yield berth, client
        finally:
            if client is not None:
                client.close()
            berth.stop(timeout=20)


def remove_containers(prefix: str, images: str | None = None) -> None:
    """Force-remove every container whose name has ``prefix`` (this run's, after a failure
    mid-measurement), and the images named ``images`` if given."""
    client = docker_client()
    try:
        for row in client.api.containers(all=True, filters={"name": prefix}):
            with contextlib.suppress(Exception):
                client.api.remove_container(row["Id"], force=True)
        for ref in client.api.images(name=images) if images else ():
            with contextlib.suppress(Exception):
                client.api.remove_image(ref["Id"], force=True)
    finally:
        client.close()
