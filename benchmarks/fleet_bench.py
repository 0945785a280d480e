"""Fleet benchmark: one ``berth serve`` watching N SSH servers (default 1,000).

Starts one throwaway OpenSSH server listening on ``0.0.0.0:<port>`` (``MaxStartups``
raised, terse logging) and ``berth serve`` (``BERTH_MONITOR_SECONDS=5``, rate limits out
of the way, debug logging for the monitor's ``monitor_pass`` lines) on a temp data dir.
Registers N servers through the API, each at its own loopback address ``127.1.x.y``
(so each server row has its own address and its own SSH connection), each with its own
berth key (authorized forward-only on the sshd, as the install script does) and the
sshd's host key pinned.

**Whose Docker.** A real fleet has a Docker per server, on that server's CPU, listing that
server's containers. Here the ``--deploys`` servers that are deployed to reach the
machine's dockerd (they see one another's containers, in both deploy rows alike); the
others, only watched, reach a stand-in Docker (``standin_docker.py``: an empty container
list of their own, version, info, a quiet event stream) through the same sshd, which
chroots their sessions (``Match LocalAddress 127.2.0.0/16``, ``ChrootDirectory``) to a
directory whose ``/var/run/docker.sock`` is the stand-in's. Their SSH traffic is real;
only the answers are cheap and their own. ``--docker shared`` puts every server on the
machine's dockerd instead (each then lists every container of the machine: one deploy
changes 1,000 lists). Then:

1. **first connect**: the time until every server is ``online``;
2. **steady state** (``--steady`` seconds, default 60): the monitor's pass times (from
   its ``monitor_pass`` log lines), servers wrongly ``offline`` (every sshd is up, so any
   offline server is wrongly offline; sampled every second through the API), berth's
   established SSH connections (``ss``), berth's CPU (% of one core) and RSS (from
   ``/proc``), and the latency of ``GET /api/agent/servers`` asked back to back by one
   client all along;
3. **deploy to 20 servers at once** (``--deploys``): the static echo image, each server
   its own host port, 20 ``POST /api/agent/docker/deploy?wait=…`` at the same moment;
   p50/p99 of each request's time to a succeeded deployment, the failures, each
   deployment's wait in the queue (its creation to its first step's event), each step's
   time (from its first event to the next step's), the servers list's latency, the CPU
   of berth, of dockerd (with containerd and the stand-in) and of the sshd (with its
   sessions), and the observations the monitor wrote meanwhile. The same deploys ran
   first *without a fleet*: those servers alone registered, before the others;
4. **restart**: berth is stopped (SIGTERM) and started again; the time from its start
   until the end of its first monitor pass, berth's SSH connections right after that
   pass, and how many servers were seen ``offline`` meanwhile (recovered within one
   pass: every connection back, none offline; ``checking``, a status not verified since
   the restart, is not offline).

Prints a Markdown table with the goals (pass ≤ 10 s, 0 wrongly offline, RSS ≤ 300 MB,
list p95 ≤ 100 ms, a restart recovers within one pass) on stdout; progress on stderr.
Exits 0 even when a goal is missed (the line says MISSED); non-zero only when the
benchmark itself could not run. Needs root (sshd, the ``berth`` user) and dockerd.

    python benchmarks/fleet_bench.py [--servers N] [--steady S] [--deploys D]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from bench_support import mark, percentile, remove_containers  # noqa: E402
from harness import BerthProcess  # noqa: E402
from infra import Sshd, build_echo_image, ensure_dockerd  # noqa: E402

DEFAULT_SERVERS = 1000
DEFAULT_STEADY = 60.0
DEFAULT_DEPLOYS = 20
MONITOR_SECONDS = 5.0
HIGH_LIMIT = "1000000000"
NOFILE = 65536
DEPLOY_WAIT = 300
RUN = uuid.uuid4().hex[:8]
PREFIX = f"fleet-{RUN}-"

GOAL_PASS = 10.0
GOAL_DEPLOY_RATIO = 1.5  # deploy p50 in the fleet over the same deploys alone
GOAL_RSS_MB = 300.0
GOAL_LIST_P95_MS = 100.0


def progress(message: str) -> None:
    print(f"[fleet] {message}", file=sys.stderr, flush=True)


def address(i: int, *, standin: bool = False) -> str:
    """The loopback address of server ``i``: 127.1.0.1, 127.1.0.2, … (250 per /24); a
    server whose Docker is the stand-in is in 127.2.0.0/16 (the sshd chroots those)."""
    return f"127.{2 if standin else 1}.{i // 250}.{i % 250 + 1}"


#: The addresses whose sshd sessions reach the stand-in Docker (``address(standin=True)``).
STANDIN_ADDRESSES = "127.2.0.0/16"


def raise_open_files() -> None:
    """Allow berth (and sshd) many descriptors: a server takes about six in berth."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = NOFILE if hard == resource.RLIM_INFINITY else max(soft, min(NOFILE, hard))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def fleet_sshd(chroot: Path | None) -> Sshd:
    """The test sshd, listening on every address, taking many handshakes at once; with
    ``chroot``, the sessions to ``STANDIN_ADDRESSES`` are chrooted there (their
    ``/var/run/docker.sock`` is the stand-in's)."""
    sshd = Sshd()
    config = sshd.config_path.read_text()
    config = config.replace("ListenAddress 127.0.0.1", "ListenAddress 0.0.0.0")
    config = config.replace("LogLevel VERBOSE", "LogLevel ERROR")
    config += "MaxStartups 512:30:1024\nMaxSessions 64\nMaxAuthTries 2\nUseDNS no\n"
    if chroot is not None:
        config += f"Match LocalAddress {STANDIN_ADDRESSES}\n    ChrootDirectory {chroot}\n"
    sshd.config_path.write_text(config)
    return sshd


class StandinDocker:
    """``standin_docker.py`` on ``<root>/var/run/docker.sock``, ``root`` a directory that
    sshd accepts as a chroot (root's, not writable by others, on a path that is too)."""

    def __init__(self) -> None:
        self.root = Path(f"/run/berth-fleet-{RUN}")
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> StandinDocker:
        run = self.root / "var" / "run"
        run.mkdir(mode=0o755, parents=True)
        for path in (self.root, self.root / "var", run):
            path.chmod(0o755)
        self._process = subprocess.Popen(  # noqa: S603 - fixed argv
            [
                sys.executable,
                str(Path(__file__).with_name("standin_docker.py")),
                str(run / "docker.sock"),
            ],
            stdout=subprocess.PIPE,
        )
        assert self._process.stdout is not None
        if self._process.stdout.readline().strip() != b"ready":
            raise RuntimeError("the stand-in Docker did not start")
        return self

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def ssh_connections(pid: int, port: int) -> int:
    """Established TCP connections of process ``pid`` to ``port``."""
    out = subprocess.run(  # noqa: S603 - fixed argv
        ["ss", "-Htnp", "state", "established", f"( dport = :{port} )"],  # noqa: S607
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return sum(1 for line in out.splitlines() if f"pid={pid}," in line)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def passes(log_path: Path, since: float = 0.0) -> list[tuple[float, float, int, int]]:
    """(wall time, seconds, servers checked, observations written) of each
    ``monitor_pass`` logged after ``since``."""
    found = []
    for line in log_path.read_text(errors="replace").splitlines():
        if '"monitor_pass"' not in line:
            continue
        with contextlib.suppress(ValueError, KeyError):
            entry = json.loads(line)
            at = _wall(entry["timestamp"])
            if at >= since:
                found.append(
                    (at, float(entry["seconds"]), int(entry["checked"]), int(entry["written"]))
                )
    return found


def _wall(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@dataclass
class Fleet:
    berth: BerthProcess
    sshd: Sshd
    client: httpx.Client
    standin_from: int | None = None  # servers from this index on reach the stand-in Docker
    standin: StandinDocker | None = None
    ids: list[str] = field(default_factory=list)

    def statuses(self) -> dict[str, str]:
        response = self.client.get("/api/agent/servers", timeout=60)
        response.raise_for_status()
        return {s["id"]: s["status"] for s in response.json()["servers"]}

    def offline(self) -> int:
        return sum(1 for status in self.statuses().values() if status != "online")

    def wait_all_online(self, timeout: float) -> float:
        start = time.monotonic()
        while True:
            try:
                left = self.offline()
            except httpx.HTTPError:
                left = -1
            if left == 0:
                return time.monotonic() - start
            if time.monotonic() - start > timeout:
                raise RuntimeError(f"{left} servers still not online after {timeout:g} s")
            time.sleep(0.5)


def register(fleet: Fleet, first: int, count: int) -> None:
    """Servers ``first`` to ``first + count - 1``, each at its own address."""
    lock = threading.Lock()

    def create(i: int) -> str:
        response = fleet.client.post(
            "/api/agent/servers",
            json={
                "name": f"{PREFIX}{i:04d}",
                "address": address(
                    i, standin=fleet.standin_from is not None and i >= fleet.standin_from
                ),
                "sshPort": fleet.sshd.port,
                "sshUser": "berth",
                "hostKeys": [fleet.sshd.host_public_key],
            },
            timeout=60,
        )
        if response.status_code != 201:
            raise RuntimeError(f"create server {i}: {response.status_code} {response.text}")
        with lock:
            fleet.sshd.authorize(response.json()["publicKey"])
        return str(response.json()["id"])

    with ThreadPoolExecutor(8) as pool:
        fleet.ids.extend(pool.map(create, range(first, first + count)))


class Lister:
    """One client asking ``GET /api/agent/servers`` then ``GET /healthz`` back to back
    (50 ms apart) in a thread, timing each."""

    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.list_ms: list[float] = []
        self.health_ms: list[float] = []

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> tuple[list[float], list[float]]:
        self._stop.set()
        self._thread.join(timeout=60)
        return self.list_ms, self.health_ms

    def _run(self) -> None:
        fleet = self._fleet
        with httpx.Client(base_url=fleet.berth.url, headers=fleet.client.headers) as client:
            while not self._stop.is_set():
                start = time.perf_counter()
                if client.get("/api/agent/servers", timeout=60).status_code == 200:
                    self.list_ms.append((time.perf_counter() - start) * 1000)
                start = time.perf_counter()
                if client.get("/healthz", timeout=60).status_code == 200:
                    self.health_ms.append((time.perf_counter() - start) * 1000)
                time.sleep(0.05)


@dataclass
class Steady:
    pass_seconds: list[float]
    wrongly_offline: int
    connections: int
    cpu_percent: float
    rss_mb: float
    list_ms: list[float]
    health_ms: list[float]


def steady_state(fleet: Fleet, seconds: float) -> Steady:
    proc = fleet.berth.proc
    assert proc is not None
    pid = proc.pid
    lister = Lister(fleet)
    began_wall, began, cpu0 = time.time(), time.monotonic(), cpu_seconds(pid)
    lister.start()
    offline_max = connections_min = 0
    connections_min = 1 << 30
    rss_max = 0.0
    while time.monotonic() - began < seconds:
        time.sleep(1.0)
        offline_max = max(offline_max, fleet.offline())
        connections_min = min(connections_min, ssh_connections(pid, fleet.sshd.port))
        rss_max = max(rss_max, rss_mb(pid))
    cpu = (cpu_seconds(pid) - cpu0) / (time.monotonic() - began) * 100
    list_ms, health_ms = lister.stop()
    assert fleet.berth.log_path is not None
    seen = [s for _, s, _, _ in passes(fleet.berth.log_path, began_wall)]
    return Steady(seen, offline_max, connections_min, cpu, rss_max, list_ms, health_ms)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))  # noqa: S104 - the apps publish on every address
        return int(sock.getsockname()[1])


class CpuMeter:
    """CPU time (% of one core) of berth, dockerd (with containerd) and the fleet's sshd
    (with every process it forked: one per connection) between ``start`` and ``stop``."""

    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet
        self._began = 0.0
        self._before: dict[str, dict[int, float]] = {}

    def _groups(self) -> dict[str, list[int]]:
        parents: dict[int, int] = {}
        names: dict[int, str] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (entry / "stat").read_text()
                names[int(entry.name)] = stat.split("(", 1)[1].rsplit(")", 1)[0]
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        sshd = self._fleet.sshd.pid
        tree = {sshd} if sshd is not None else set()
        grew = True
        while grew:
            more = {pid for pid, parent in parents.items() if parent in tree} - tree
            grew, tree = bool(more), tree | more
        proc = self._fleet.berth.proc
        standin = self._fleet.standin.pid if self._fleet.standin is not None else None
        return {
            "berth": [proc.pid] if proc is not None else [],
            "dockerd": [pid for pid, name in names.items() if name in ("dockerd", "containerd")]
            + ([standin] if standin is not None else []),
            "sshd": sorted(tree),
        }

    def _sample(self) -> dict[str, dict[int, float]]:
        taken: dict[str, dict[int, float]] = {}
        for group, pids in self._groups().items():
            taken[group] = {}
            for pid in pids:
                with contextlib.suppress(OSError, IndexError, ValueError):
                    taken[group][pid] = cpu_seconds(pid)
        return taken

    def start(self) -> None:
        self._began, self._before = time.monotonic(), self._sample()

    def stop(self) -> dict[str, float]:
        after, wall = self._sample(), time.monotonic() - self._began
        return {
            group: sum(cpu - self._before.get(group, {}).get(pid, 0.0) for pid, cpu in pids.items())
            / wall
            * 100
            for group, pids in after.items()
        }


@dataclass
class Deploys:
    times: list[float]  # seconds of each success, POST to final
    failures: list[str]
    list_ms: list[float]  # the servers list's latencies meanwhile
    health_ms: list[float]
    queue_wait: list[float]  # seconds from queued to the first step's event, per deployment
    steps: dict[str, list[float]]  # seconds of each step (its first event to the next's)
    cpu: dict[str, float]  # % of one core meanwhile: berth, dockerd, sshd
    written: int  # servers' observations the monitor wrote meanwhile
    deployments: list[dict[str, Any]]  # each deployment as the API answered it


def _queue_wait(deployment: dict[str, Any]) -> float | None:
    """Seconds from the deployment's creation to its first event after ``queued``."""
    created = datetime.fromisoformat(deployment["createdAt"])
    after = [e for e in deployment.get("events", []) if e.get("step") != "queued"]
    if not after:
        return None
    return (datetime.fromisoformat(after[0]["at"]) - created).total_seconds()


def _steps(deployment: dict[str, Any]) -> dict[str, float]:
    """Seconds of each step of a deployment: from its first event to the next step's
    first event (the last step ends at the closing event, whose step is the state)."""
    firsts: list[tuple[str, datetime]] = []
    for event in deployment.get("events", []):
        if not firsts or firsts[-1][0] != event["step"]:
            firsts.append((event["step"], datetime.fromisoformat(event["at"])))
    return {
        step: (firsts[i + 1][1] - at).total_seconds() for i, (step, at) in enumerate(firsts[:-1])
    }


def deploy_many(fleet: Fleet, image: str, count: int) -> Deploys:
    """``count`` deploys at once, one per server, the servers list asked meanwhile."""
    targets = fleet.ids[:count]
    ports = set()
    while len(ports) < len(targets):
        ports.add(free_port())
    barrier = threading.Barrier(len(targets))

    deployments: list[dict[str, Any]] = []

    def deploy(
        job: tuple[str, int],
    ) -> tuple[float | None, str | None, str | None, float | None]:
        server_id, port = job
        body = {
            "serverId": server_id,
            "name": f"{PREFIX}app-{port}",
            "image": image,
            "port": port,
            "env": {"PORT": str(port)},
        }
        with httpx.Client(base_url=fleet.berth.url, headers=fleet.client.headers) as client:
            barrier.wait()
            start = time.perf_counter()
            try:
                response = client.post(
                    "/api/agent/docker/deploy",
                    params={"wait": DEPLOY_WAIT},
                    json=body,
                    timeout=DEPLOY_WAIT + 60,
                )
            except httpx.HTTPError as exc:
                return None, f"{type(exc).__name__}", None, None
            took = time.perf_counter() - start
            if response.status_code != 200:
                return None, f"HTTP {response.status_code}: {response.text[:300]}", None, None
            data = response.json()
            deployments.append(data["deployment"])
            installation = data["installation"]["id"]
            waited = _queue_wait(data["deployment"])
            if data["deployment"]["state"] != "succeeded":
                return None, str(data["deployment"].get("error")), installation, waited
            return took, None, installation, waited

    lister, meter = Lister(fleet), CpuMeter(fleet)
    began = time.time()
    lister.start()
    meter.start()
    try:
        with ThreadPoolExecutor(len(targets)) as pool:
            results = list(pool.map(deploy, zip(targets, sorted(ports), strict=True)))
    finally:
        cpu = meter.stop()
        list_ms, health_ms = lister.stop()
    assert fleet.berth.log_path is not None
    ended = time.time()
    written = sum(w for at, _, _, w in passes(fleet.berth.log_path, began) if at <= ended)
    steps: dict[str, list[float]] = {}
    for deployment in deployments:
        if deployment["state"] == "succeeded":
            for step, took in _steps(deployment).items():
                steps.setdefault(step, []).append(took)
    times = [took for took, _, _, _ in results if took is not None]
    failures = [error for _, error, _, _ in results if error is not None]
    installations = [inst for _, _, inst, _ in results if inst is not None]
    waits = [waited for _, _, _, waited in results if waited is not None]

    def remove(installation: str) -> None:
        with contextlib.suppress(httpx.HTTPError):
            fleet.client.delete(f"/api/agent/installations/{installation}", timeout=120)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(remove, installations))
    return Deploys(times, failures, list_ms, health_ms, waits, steps, cpu, written, deployments)


@dataclass
class Restart:
    first_pass: float  # from the new process's start to the end of its first pass
    pass_seconds: float  # how long that pass took
    connections: int  # berth's SSH connections right after it
    seen_offline: int  # servers seen offline (1 s samples) until then


def restart(fleet: Fleet, timeout: float) -> Restart:
    fleet.berth.stop(timeout=60)
    began_wall, began = time.time(), time.monotonic()
    fleet.berth.start(timeout=120)
    proc = fleet.berth.proc
    assert proc is not None
    assert fleet.berth.log_path is not None
    seen_offline: set[str] = set()
    while True:
        statuses = fleet.statuses()
        seen_offline |= {sid for sid, status in statuses.items() if status == "offline"}
        first = [p for p in passes(fleet.berth.log_path, began_wall) if p[2] > 0]
        if first:
            at, seconds, _, _ = first[0]
            connections = ssh_connections(proc.pid, fleet.sshd.port)
            return Restart(at - began_wall, seconds, connections, len(seen_offline))
        if time.monotonic() - began > timeout:
            raise RuntimeError("berth did not finish a pass after its restart")
        time.sleep(0.5)


def report(
    args: argparse.Namespace,
    first_connect: float,
    steady: Steady,
    deploys: Deploys,
    alone: Deploys,
    again: Restart,
    load: tuple[tuple[float, float, float], tuple[float, float, float]],
) -> str:
    pass_max = max(steady.pass_seconds) if steady.pass_seconds else float("nan")
    pass_p50 = statistics.median(steady.pass_seconds) if steady.pass_seconds else float("nan")
    p95 = percentile(steady.list_ms, 95)
    times, failures, during = deploys.times, deploys.failures, deploys.list_ms
    health_during, waits = deploys.health_ms, deploys.queue_wait
    recovered = again.seen_offline == 0 and again.connections == args.servers
    ratio = percentile(times, 50) / percentile(alone.times, 50)
    lines = [
        f"| fleet of {args.servers} SSH servers | measured | goal |",
        "|---|---:|---|",
        f"| registering every server until all online | {first_connect:.1f} s | |",
        f"| monitor pass, median / max ({len(steady.pass_seconds)} passes) "
        f"| {pass_p50:.2f} / {pass_max:.2f} s | ≤ {GOAL_PASS:g} s: {mark(pass_max <= GOAL_PASS)} |",
        f"| wrongly offline (max of 1 s samples) | {steady.wrongly_offline} "
        f"| 0: {mark(steady.wrongly_offline == 0)} |",
        f"| berth's SSH connections (min of samples) | {steady.connections} "
        f"| {args.servers}: {mark(steady.connections == args.servers)} |",
        f"| berth CPU (% of one core, steady) | {steady.cpu_percent:.0f} % | |",
        f"| berth RSS (max) | {steady.rss_mb:.0f} MB "
        f"| ≤ {GOAL_RSS_MB:g} MB: {mark(steady.rss_mb <= GOAL_RSS_MB)} |",
        f"| GET /api/agent/servers p50 / p95 ({len(steady.list_ms)} requests) "
        f"| {percentile(steady.list_ms, 50):.0f} / {p95:.0f} ms "
        f"| p95 ≤ {GOAL_LIST_P95_MS:g} ms: {mark(p95 <= GOAL_LIST_P95_MS)} |",
        f"| GET /healthz p50 / p95 (the event loop and the machine, for comparison) "
        f"| {percentile(steady.health_ms, 50):.0f} / {percentile(steady.health_ms, 95):.0f} ms "
        "| |",
        f"| deploy to {args.deploys} servers at once: p50 / p99 "
        f"| {percentile(times, 50):.1f} / {percentile(times, 99):.1f} s | |",
        f"| the same deploys without a fleet (those servers alone): p50 / p99 "
        f"| {percentile(alone.times, 50):.1f} / {percentile(alone.times, 99):.1f} s "
        f"| fleet p50 ≤ 1.5 x this: {ratio:.2f} x {mark(ratio <= GOAL_DEPLOY_RATIO)} |",
        f"| deploy failures | {len(failures)} of {args.deploys} | 0: {mark(not failures)} |",
        f"| deploy queue wait (queued → its first step), p50 / max "
        f"| {percentile(waits, 50):.1f} / {max(waits, default=float('nan')):.1f} s | |",
        f"| deploy steps p50, alone → in the fleet | {_step_medians(alone, deploys)} | |",
        f"| CPU during the deploys (% of one core), alone → in the fleet "
        f"| {_cpu(alone, deploys)} | |",
        f"| servers' observations the monitor wrote during the deploys, alone → in the fleet "
        f"| {alone.written} → {deploys.written} | |",
        f"| deploy queue wait alone (queued → its first step), p50 / max "
        f"| {percentile(alone.queue_wait, 50):.1f} / "
        f"{max(alone.queue_wait, default=float('nan')):.1f} s | |",
        f"| GET /api/agent/servers p50 / p95 during the deploys ({len(during)} requests) "
        f"| {percentile(during, 50):.0f} / {percentile(during, 95):.0f} ms | |",
        f"| GET /healthz p50 / p95 during the deploys "
        f"| {percentile(health_during, 50):.0f} / {percentile(health_during, 95):.0f} ms | |",
        f"| restart: start → end of its first pass (the pass itself) "
        f"| {again.first_pass:.1f} s ({again.pass_seconds:.1f} s) | |",
        f"| restart: connections after the first pass / servers seen offline "
        f"| {again.connections} / {again.seen_offline} "
        f"| all, none (recovered within one pass): {mark(recovered)} |",
        "",
        f"- one OpenSSH on 0.0.0.0:port, each server at its own 127.1.x.y; berth serve with "
        f"BERTH_MONITOR_SECONDS={MONITOR_SECONDS:g}; steady window {args.steady:g} s; "
        "the list is asked back to back (50 ms apart) by one client during it",
        (
            f"- Docker: the {args.deploys} servers deployed to reach this machine's dockerd; "
            f"the other {args.servers - args.deploys} reach a stand-in Docker of their own "
            "(standin_docker.py, through the same sshd, chrooted), as each server of a real "
            "fleet has its own"
            if args.docker == "standin"
            else "- Docker: every server reaches this machine's dockerd (--docker shared): each "
            "lists every container on it"
        ),
        f"- deploys: static echo image (present locally), each server its own host port, "
        f"{args.deploys} POSTs with ?wait released together; removed afterwards",
        f"- machine: nproc {os.cpu_count()}, shared with other work; load average (1/5/15 min) "
        f"at start {' / '.join(f'{x:.2f}' for x in load[0])}, at end "
        f"{' / '.join(f'{x:.2f}' for x in load[1])}",
    ]
    if failures:
        lines.append(f"- deploy failures: {sorted(set(failures))[:5]}")
    return "\n".join(lines)


def _step_medians(alone: Deploys, fleet: Deploys) -> str:
    """Each step's median seconds alone and in the fleet: ``pull 0.1 → 0.4 s, …``."""
    order = list(dict.fromkeys([*alone.steps, *fleet.steps]))
    return ", ".join(
        f"{step} {percentile(alone.steps.get(step, []), 50):.1f} → "
        f"{percentile(fleet.steps.get(step, []), 50):.1f} s"
        for step in order
    )


def _cpu(alone: Deploys, fleet: Deploys) -> str:
    return ", ".join(
        f"{group} {alone.cpu.get(group, float('nan')):.0f} → "
        f"{fleet.cpu.get(group, float('nan')):.0f} %"
        for group in ("berth", "dockerd", "sshd")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=DEFAULT_SERVERS, help="servers (rows)")
    parser.add_argument("--steady", type=float, default=DEFAULT_STEADY, help="steady seconds")
    parser.add_argument("--deploys", type=int, default=DEFAULT_DEPLOYS, help="deploys at once")
    parser.add_argument("--keep-logs", type=Path, help="copy berth's logs into this directory")
    parser.add_argument(
        "--docker",
        choices=("standin", "shared"),
        default="standin",
        help="what the servers only watched reach: a Docker of their own (a stand-in, "
        "the default) or the machine's dockerd with every container on it (shared)",
    )
    args = parser.parse_args(argv)
    if args.servers < 1 or args.servers > 250 * 256:
        parser.error("--servers must be within 1..64000")
    args.deploys = min(args.deploys, args.servers)

    load_before = os.getloadavg()
    raise_open_files()
    ensure_dockerd()
    image = build_echo_image("v1")
    with tempfile.TemporaryDirectory(prefix="berth-fleet-bench-") as tmp:
        standin = StandinDocker() if args.docker == "standin" else None
        sshd = fleet_sshd(standin.root if standin is not None else None)
        berth = BerthProcess(
            Path(tmp) / "data",
            env={
                "BERTH_MONITOR_SECONDS": str(MONITOR_SECONDS),
                "BERTH_RATE_LIMIT": HIGH_LIMIT,
                "BERTH_DEPLOY_RATE_LIMIT": HIGH_LIMIT,
                "BERTH_SERVERS_PER_USER": HIGH_LIMIT,  # --servers may pass the default 1000
                "BERTH_LOG_LEVEL": "debug",
            },
        )
        client: httpx.Client | None = None
        alone: Deploys | None = None
        deploys: Deploys | None = None
        try:
            if standin is not None:
                progress(f"starting the stand-in Docker in {standin.root}")
                standin.start()
            progress(f"starting sshd on 0.0.0.0:{sshd.port}")
            sshd.start()
            progress(f"starting berth serve on {berth.url}")
            berth.start(timeout=60)
            _email, token = berth.new_user("fleet")
            client = httpx.Client(
                base_url=berth.url, headers={"Authorization": f"Bearer {token}"}, timeout=60
            )
            fleet = Fleet(
                berth,
                sshd,
                client,
                standin_from=args.deploys if standin is not None else None,
                standin=standin,
            )
            progress(f"without a fleet: {args.deploys} servers alone, deploying to each")
            register(fleet, 0, args.deploys)
            fleet.wait_all_online(timeout=600)
            alone = deploy_many(fleet, image, args.deploys)
            progress(f"registering the other {args.servers - args.deploys} servers")
            began = time.monotonic()
            register(fleet, args.deploys, args.servers - args.deploys)
            progress(f"registered in {time.monotonic() - began:.1f} s; waiting for all online")
            fleet.wait_all_online(timeout=600)
            first_connect = time.monotonic() - began
            progress(f"all online {first_connect:.1f} s after registering began; steady state")
            steady = steady_state(fleet, args.steady)
            progress(f"steady: passes {steady.pass_seconds}; deploying to {args.deploys}")
            deploys = deploy_many(fleet, image, args.deploys)
            progress(f"deploys: {len(deploys.times)} succeeded; restarting berth")
            again = restart(fleet, timeout=600)
        finally:
            if client is not None:
                client.close()
            berth.stop(timeout=60)
            if args.keep_logs is not None:
                args.keep_logs.mkdir(parents=True, exist_ok=True)
                for log in (Path(tmp) / "data").glob("serve-*.log"):
                    shutil.copy(log, args.keep_logs)
                for name, measured in (("alone", alone), ("fleet", deploys)):
                    if measured is not None:
                        (args.keep_logs / f"deployments-{name}.json").write_text(
                            json.dumps(measured.deployments, indent=1)
                        )
            sshd.stop()
            if standin is not None:
                standin.stop()
            remove_leftovers()
    assert alone is not None
    assert deploys is not None
    print(
        report(args, first_connect, steady, deploys, alone, again, (load_before, os.getloadavg()))
    )
    return 0


def remove_leftovers() -> None:
    """Force-remove every container of this run (after a failure mid-measurement)."""
    remove_containers(PREFIX)


if __name__ == "__main__":
    sys.exit(main())
