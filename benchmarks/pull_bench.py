"""Pull throughput from a private registry: berth's pull (over SSH and local) vs ``docker
pull`` of the same image.

Starts Debian's ``docker-registry`` on 127.0.0.1 with htpasswd auth
(``tests/integration/registry_support.py``), a throwaway sshd and ``berth serve
--local``; builds an image of the static echo server plus ``LAYERS`` layers of random
(incompressible) bytes, pushes it, and saves the registry's credentials through
``POST /api/agent/registries``. Then, round-robin (ssh, local, ``docker pull``; the order
rotates each round), with the image removed from the Engine before each pull:

- berth: ``POST /api/agent/docker/deploy?wait=120``; the pull is timed from the event
  "… is not on the server; pulling." to the event "Pulled …" (berth's own timestamps:
  the pull with its credentials and progress events, no container work);
- ``docker pull``: the docker CLI (logged in with ``--password-stdin`` to a throwaway
  ``DOCKER_CONFIG``), timed around the command.

MB/s = the image's compressed layer bytes (from the registry's manifest) / seconds.
Both transports and the CLI reach the same Engine here (the sshd is on this machine),
so the comparison is of the paths, not of networks. Prints a Markdown table on stdout;
progress goes to stderr.

    python benchmarks/pull_bench.py [N]      # N pulls per kind, default 5
"""

from __future__ import annotations

import contextlib
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

import httpx
from bench_support import count_argument, local_and_ssh, progress, remove_containers, running_berth
from harness import BerthProcess
from infra import Sshd, build_echo_image, docker_client, ensure_dockerd
from registry_support import RegistryServer

DEFAULT_PULLS = 5
LAYERS = 4
LAYER_BYTES = 24 * 1024 * 1024
KINDS = ("ssh", "local", "docker pull")
RUN = uuid.uuid4().hex[:8]
PREFIX = f"pullbench-{RUN}-"
MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"


def build_big_image(base: str) -> str:
    """``base`` plus ``LAYERS`` layers of random bytes: a local tag."""
    tag = f"berth-bench/pull-{RUN}:v1"
    lines = [f"FROM {base}"] + [f"COPY blob{i} /blob{i}" for i in range(LAYERS)]
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        files = [("Dockerfile", ("\n".join(lines) + "\n").encode())]
        files += [(f"blob{i}", os.urandom(LAYER_BYTES)) for i in range(LAYERS)]
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    client = docker_client(timeout=300.0)
    try:
        client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True)
    finally:
        client.close()
    return tag


def layer_bytes(registry: RegistryServer, repository: str, tag: str) -> int:
    """The compressed size of the image's layers, as the registry's manifest says."""
    response = httpx.get(
        f"http://{registry.host}/v2/{repository}/manifests/{tag}",
        headers={"Accept": MANIFEST_V2},
        auth=(registry.username, registry.password),
        timeout=30,
    )
    response.raise_for_status()
    return sum(int(layer["size"]) for layer in response.json()["layers"])


def remove_image(ref: str) -> None:
    """Remove ``ref`` and the layers only it holds (no container may use it)."""
    client = docker_client()
    try:
        with contextlib.suppress(Exception):
            client.api.remove_image(ref, force=True)
    finally:
        client.close()


def ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


class Bench:
    def __init__(self, berth: BerthProcess, client: httpx.Client, image: str) -> None:
        self.berth = berth
        self.client = client
        self.image = image
        self.servers: dict[str, str] = {}
        self.docker_config = Path(tempfile.mkdtemp(prefix="berth-pull-bench-docker-"))

    def berth_pull(self, kind: str, name: str) -> float:
        """Deploy the image (absent from the Engine); the pull step's seconds."""
        port = free_port()
        response = self.client.post(
            "/api/agent/docker/deploy",
            params={"wait": 120},
            json={
                "serverId": self.servers[kind],
                "name": name,
                "image": self.image,
                "port": port,
                "env": {"PORT": str(port)},
            },
            timeout=150,
        )
        body = response.json()
        deployment = body["deployment"]
        if deployment["state"] != "succeeded":
            raise RuntimeError(f"{kind} deploy {deployment['state']}: {deployment['error']}")
        events = deployment["events"]
        start = next(e for e in events if e["message"].endswith("is not on the server; pulling."))
        end = next(e for e in events if e["message"].startswith(f"Pulled {self.image}"))
        removed = self.client.delete(f"/api/agent/installations/{body['installation']['id']}")
        if removed.status_code != 204:
            raise RuntimeError(f"remove: {removed.status_code} {removed.text}")
        return ts(end["at"]) - ts(start["at"])

    def docker_login(self, registry: RegistryServer) -> None:
        subprocess.run(  # noqa: S603 - fixed argv, no shell
            ["docker", "login", registry.host, "-u", registry.username, "--password-stdin"],  # noqa: S607
            input=registry.password,
            text=True,
            check=True,
            capture_output=True,
            env={**os.environ, "DOCKER_CONFIG": str(self.docker_config)},
        )

    def docker_pull(self) -> float:
        started = time.perf_counter()
        subprocess.run(  # noqa: S603 - fixed argv, no shell
            ["docker", "pull", "--quiet", self.image],  # noqa: S607
            check=True,
            capture_output=True,
            env={**os.environ, "DOCKER_CONFIG": str(self.docker_config)},
        )
        return time.perf_counter() - started


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))  # noqa: S104 - the app publishes on every address
        return int(sock.getsockname()[1])


def set_up(bench: Bench, sshd: Sshd, registry: RegistryServer) -> None:
    client = bench.client
    bench.servers.update(local_and_ssh(client, sshd, f"{PREFIX}ssh"))
    saved = client.post(
        "/api/agent/registries",
        json={"host": registry.host, "username": registry.username, "password": registry.password},
    )
    if saved.status_code != 201:
        raise RuntimeError(f"save registry: {saved.status_code} {saved.text}")
    bench.docker_login(registry)


def report(samples: dict[str, list[float]], size: int, pulls: int) -> str:
    mb = size / 1e6
    lines = [
        f"### Pull throughput from a local registry ({mb:.1f} MB in {LAYERS + 1} layers, "
        f"{pulls} pulls each, image removed before each)",
        "",
        "| path | median s | min s | max s | median MB/s | time vs docker pull |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    reference = statistics.median(samples["docker pull"])
    for kind in ("ssh", "local", "docker pull"):
        seconds = samples[kind]
        median = statistics.median(seconds)
        label = f"berth over {kind}" if kind != "docker pull" else "docker pull (CLI)"
        lines.append(
            f"| {label} | {median:.2f} | {min(seconds):.2f} | {max(seconds):.2f} | "
            f"{mb / median:.0f} | {median / reference:.2f}x |"
        )
    lines.append("")
    lines.append(
        "berth's time is its pull step as its events timestamp it (with credentials and "
        "progress events); docker pull's is the CLI's wall time. Same Engine for all three."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    pulls = count_argument(argv, __doc__, "pulls per kind", DEFAULT_PULLS)
    progress("checking dockerd and building the image")
    ensure_dockerd()
    local_tag = build_big_image(build_echo_image("v1"))
    registry = RegistryServer()
    samples: dict[str, list[float]] = {kind: [] for kind in KINDS}
    sshd = Sshd()
    try:
        progress(f"starting docker-registry on {registry.host}")
        registry.start()
        repository = f"bench/pull-{RUN}"
        image = registry.push(local_tag, repository, "v1")
        remove_image(local_tag)
        size = layer_bytes(registry, repository, "v1")
        sshd.start()
        with running_berth("pull") as (berth, client):
            bench = Bench(berth, client, image)
            set_up(bench, sshd, registry)
            order = list(KINDS)
            for round_ in range(pulls + 1):  # round 0 is a warm-up, not counted
                for kind in order:
                    remove_image(image)
                    if kind == "docker pull":
                        seconds = bench.docker_pull()
                    else:
                        seconds = bench.berth_pull(kind, f"{PREFIX}{kind}-{round_}")
                    progress(f"round {round_} {kind}: {seconds:.2f} s")
                    if round_:
                        samples[kind].append(seconds)
                order = order[1:] + order[:1]
    finally:
        sshd.stop()
        registry.close()
        remove_containers(PREFIX, images=f"berth-bench/pull-{RUN}")
    print(report(samples, size, pulls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
