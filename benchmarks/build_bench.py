"""Build benchmark: a deploy from Git by berth (over SSH and local) vs ``docker build`` +
``docker run`` by hand, and the upload throughput of a 100 MB build context.

Starts a throwaway sshd, ``berth serve --local`` (allowed to fetch from 127.0.0.1) and a
Git repository served over git's "smart HTTP" (``git http-backend``, as Git hosts
serve it: one exchange, a shallow fetch) on 127.0.0.1
(``tests/integration/git_support.py``) holding a small app: a Dockerfile ``FROM`` the
static echo image that copies one file in (and a ``.dockerignore`` of ``.git``). Each
round commits a change to that file, so no build is answered from Docker's layer cache;
then, round-robin (ssh, local, by hand; the order rotates each round):

- berth: ``POST /api/agent/docker/deploy?wait=120`` with ``build.git`` (branch
  ``main``), then ``GET /`` every 5 ms until the app answers ``hello``; timed from just
  before the POST to that answer (fetching the commit, packing and streaming the context,
  the build on the server's Engine, the container and its health check);
- by hand: ``docker build`` of the repository's working tree (the same commit), then
  ``docker run -d -p``, then the same GET loop; timed from just before ``docker build``
  to the answer (a person building by hand has the source already: no clone is timed).

Target: berth's median ≤ 1.3 times the median by hand. Every app is removed after its
measurement, outside the timed region; one untimed warm-up per kind comes first. Where
berth's time goes is read from its events' times: the call to the build's first event,
the build (its first event to its last: fetch, pack, stream, build) and from there to the
app's answer.

Then the upload: a tar archive of ``UPLOAD_BYTES`` (100 MB) of random, incompressible
bytes, sent ``UPLOADS`` times as ``POST /api/agent/sources`` streamed from disk in 1 MiB
chunks; MB/s = the archive's bytes / the seconds from the request to the 201. A copy of
the same file on the same disk is the reference.

Prints Markdown tables on stdout (progress on stderr). Exits 0 even when a target is
missed (the line then says MISSED); non-zero only when the benchmark itself could not run.

    python benchmarks/build_bench.py [N]      # N deploys per kind, default 5
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
from bench_support import (
    count_argument,
    deploy_then_remove,
    host_port,
    local_and_ssh,
    mark,
    progress,
    remove_containers,
    running_berth,
    ts,
    wait_hello,
)
from git_support import GitRepo, SmartHandler, served_repo
from infra import Sshd, build_echo_image, docker_client, ensure_dockerd

DEFAULT_DEPLOYS = 5
RATIO_TARGET = 1.3
WAIT_SECONDS = 120
DOCKER_TIMEOUT = 300.0
KINDS = ("ssh", "local", "by hand")
UPLOAD_BYTES = 100_000_000
UPLOADS = 3
CHUNK = 1024 * 1024
PREFIX = f"buildbench-{uuid.uuid4().hex[:8]}-"  # in every container and image of this run


#: Where a berth deploy's time goes, from its events: (label, from-mark, to-mark).
PHASES = (
    ("call→build", "post", "build"),
    ("build (fetch, pack, stream, build)", "build", "built"),
    ("built→app answers", "built", "app"),
)


class Builds:
    """The running berth's API client, its servers' ids and the Git repository."""

    def __init__(self, client: httpx.Client, servers: dict[str, str], repo: GitRepo) -> None:
        self.client = client
        self.servers = servers
        self.repo = repo
        self.version = 0
        self.phases: dict[str, list[dict[str, float]]] = {"ssh": [], "local": []}

    def new_commit(self) -> str:
        """A commit that changes the app's copied file: every build has work to do."""
        self.version += 1
        return self.repo.commit({"version.txt": f"{self.version}\n"}, f"v{self.version}")

    def berth_build(self, kind: str, name: str) -> float:
        port = host_port()
        body = {
            "serverId": self.servers[kind],
            "name": name,
            "build": {"git": {"url": self.repo.url, "ref": "main"}},
            "port": port,
            "env": {"PORT": str(port)},
        }
        wall = time.time()
        start = time.perf_counter()
        deployment, _, answered = deploy_then_remove(self.client, body, port, WAIT_SECONDS)
        built = [ts(e["at"]) for e in deployment["events"] if e["step"] == "build"]
        app = wall + (answered - start)
        self.phases[kind].append({"post": wall, "build": built[0], "built": built[-1], "app": app})
        return answered - start

    def by_hand(self, name: str) -> float:
        port = host_port()
        tag = f"{name}:hand"
        start = time.perf_counter()
        try:
            docker("build", "--quiet", "-t", tag, str(self.repo.work))
            docker("run", "-d", "--name", name, "-p", f"{port}:{port}", "-e", f"PORT={port}", tag)
            answered = wait_hello(port)
        finally:
            docker("rm", "-f", name, check=False)
            docker("rmi", tag, check=False)
        return answered - start

    def once(self, kind: str, name: str) -> float:
        self.new_commit()
        if kind == "by hand":
            return self.by_hand(name)
        return self.berth_build(kind, name)


def docker(*args: str, check: bool = True) -> None:
    subprocess.run(  # noqa: S603 - fixed argv, no shell
        ["docker", *args],  # noqa: S607
        capture_output=True,
        text=True,
        timeout=DOCKER_TIMEOUT,
        check=check,
    )


def builder_of_the_cli() -> str:
    """Which builder ``docker build`` uses here, in words."""
    found = subprocess.run(
        ["docker", "buildx", "version"],  # noqa: S607
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode == 0 and os.environ.get("DOCKER_BUILDKIT") != "0":
        return "BuildKit (docker buildx)"
    return "the classic builder"


def measure(builds: Builds, deploys: int) -> dict[str, list[float]]:
    slug = {kind: kind.replace(" ", "-") for kind in KINDS}
    for kind in KINDS:
        progress(f"warm-up: {kind}")
        builds.once(kind, f"{PREFIX}build-warmup-{slug[kind]}")
    samples: dict[str, list[float]] = {kind: [] for kind in KINDS}
    builds.phases = {"ssh": [], "local": []}  # the warm-ups' are not counted
    for i in range(deploys):
        order = KINDS[i % len(KINDS) :] + KINDS[: i % len(KINDS)]
        for kind in order:
            samples[kind].append(builds.once(kind, f"{PREFIX}build-{slug[kind]}-{i:03d}"))
        progress(
            f"round {i + 1}/{deploys}: "
            + ", ".join(f"{kind} {samples[kind][-1]:.2f} s" for kind in KINDS)
        )
    return samples


# --- the upload ---------------------------------------------------------------------


def big_context(where: Path) -> Path:
    """A tar archive of ``UPLOAD_BYTES`` of random bytes (a Dockerfile and one blob)."""
    path = where / "context.tar"
    dockerfile = b"FROM scratch\nCOPY blob /blob\n"
    blob_size = UPLOAD_BYTES - 4096  # the headers, the padding and the end: about 4 KiB
    with tarfile.open(path, "w") as archive:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        archive.addfile(info, io.BytesIO(dockerfile))
        info = tarfile.TarInfo("blob")
        info.size = blob_size
        archive.addfile(info, _RandomReader(blob_size))
    return path


class _RandomReader(io.RawIOBase):
    """``size`` random bytes, read as a file (never all in memory)."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        n = min(len(buffer), self.left, CHUNK)
        buffer[:n] = os.urandom(n)
        self.left -= n
        return n


def chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as file:
        while block := file.read(CHUNK):
            yield block


def upload_seconds(client: httpx.Client, path: Path, digest: str) -> float:
    start = time.perf_counter()
    response = client.post(
        "/api/agent/sources",
        content=chunks(path),
        headers={"Content-Type": "application/x-tar"},
        timeout=300,
    )
    seconds = time.perf_counter() - start
    if response.status_code != 201:
        raise RuntimeError(f"upload: {response.status_code} {response.text[:300]}")
    if response.json()["sha256"] != digest:
        raise RuntimeError("upload: the SHA-256 berth computed is not the file's")
    return seconds


def copy_seconds(path: Path) -> float:
    target = path.with_suffix(".copy")
    start = time.perf_counter()
    shutil.copyfile(path, target)
    with target.open("rb+") as file:
        os.fsync(file.fileno())
    seconds = time.perf_counter() - start
    target.unlink()
    return seconds


def measure_uploads(client: httpx.Client, where: Path) -> tuple[int, list[float], float]:
    progress(f"writing a {UPLOAD_BYTES / 1e6:.0f} MB context")
    path = big_context(where)
    size = path.stat().st_size
    with path.open("rb") as file:
        digest = hashlib.file_digest(file, "sha256").hexdigest()
    seconds = []
    for i in range(UPLOADS):
        seconds.append(upload_seconds(client, path, digest))
        progress(f"upload {i + 1}/{UPLOADS}: {seconds[-1]:.2f} s")
    return size, seconds, copy_seconds(path)


# --- the report ---------------------------------------------------------------------


def phase_lines(phases: dict[str, list[dict[str, float]]]) -> list[str]:
    """Median seconds of each of ``PHASES`` per transport, from berth's event times."""
    lines = [
        "",
        "Where berth's time goes (medians, from its events' times):",
        "",
        "| transport | " + " | ".join(label for label, _, _ in PHASES) + " |",
        "|---|" + "---:|" * len(PHASES),
    ]
    for kind, marks in phases.items():
        cells = [
            f"{statistics.median(m[end] - m[begin] for m in marks):.2f}" for _, begin, end in PHASES
        ]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    return lines


def report(
    samples: dict[str, list[float]],
    deploys: int,
    upload: tuple[int, list[float], float],
    load_before: tuple[float, float, float],
    phases: dict[str, list[dict[str, float]]],
) -> str:
    by_hand = statistics.median(samples["by hand"])
    lines = [
        f"### Deploy from Git: time from the deploy call to the app answering ({deploys} "
        "each, a new commit each time)",
        "",
        "| path | median s | min s | max s | vs by hand | target |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for kind in KINDS:
        seconds = samples[kind]
        median = statistics.median(seconds)
        ratio = median / by_hand
        label = f"berth over {kind}" if kind != "by hand" else "docker build + docker run"
        goal = f"≤ {RATIO_TARGET}x: {mark(ratio <= RATIO_TARGET)}" if kind != "by hand" else ""
        lines.append(
            f"| {label} | {median:.2f} | {min(seconds):.2f} | {max(seconds):.2f} | "
            f"{ratio:.2f}x | {goal} |"
        )
    lines += phase_lines(phases)
    size, seconds, copied = upload
    mb = size / 1e6
    median = statistics.median(seconds)
    lines += [
        "",
        f"By hand, `docker build` uses {builder_of_the_cli()}; berth has the Engine's build "
        "API build (the classic builder, no pull). Same Engine for all three. "
        f"Load average before: {load_before[0]:.2f} (1 min).",
        "",
        f"### Upload of a {mb:.0f} MB build context (`POST /api/agent/sources`, {len(seconds)} "
        "times)",
        "",
        "| what | median s | min s | max s | median MB/s |",
        "|---|---:|---:|---:|---:|",
        f"| upload (streamed, SHA-256, to berth's disk) | {median:.2f} | {min(seconds):.2f} | "
        f"{max(seconds):.2f} | {mb / median:.0f} |",
        f"| reference: a copy of the file on the same disk | {copied:.2f} | | | "
        f"{mb / copied:.0f} |",
    ]
    return "\n".join(lines)


def remove_built_images() -> None:
    """The images this run built: berth's (``berth/<PREFIX>…``) and by hand's."""
    client = docker_client()
    try:
        for image in client.api.images():
            for tag in image.get("RepoTags") or ():
                if tag.startswith((f"berth/{PREFIX}", PREFIX)):
                    with contextlib.suppress(Exception):
                        client.api.remove_image(tag)
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    deploys = count_argument(argv, __doc__, "deploys per kind", DEFAULT_DEPLOYS)
    load_before = os.getloadavg()
    progress("checking dockerd and the echo image")
    ensure_dockerd()
    image = build_echo_image("v1")
    with tempfile.TemporaryDirectory(prefix="berth-build-bench-") as tmp:
        sshd = Sshd()
        (Path(tmp) / "git").mkdir()
        try:
            with served_repo(Path(tmp) / "git", SmartHandler) as repo:
                repo.commit(
                    {
                        "Dockerfile": f"FROM {image}\nCOPY version.txt /version.txt\n",
                        ".dockerignore": ".git\n",
                        "version.txt": "0\n",
                    },
                    "the app",
                )
                progress(f"starting sshd on 127.0.0.1:{sshd.port}")
                sshd.start()
                # The repository is on 127.0.0.1.
                private = {"BERTH_ALLOW_PRIVATE_TARGETS": "1"}
                with running_berth("build", private) as (_berth, client):
                    servers = local_and_ssh(client, sshd, f"{PREFIX}ssh")
                    builds = Builds(client, servers, repo)
                    samples = measure(builds, deploys)
                    upload = measure_uploads(client, Path(tmp))
        finally:
            sshd.stop()
            remove_containers(PREFIX)
            remove_built_images()
    print(report(samples, deploys, upload, load_before, builds.phases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
