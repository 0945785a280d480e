"""API throughput benchmark: ``GET /api/agent/install`` on a real ``berth serve`` vs bare Litestar.

Starts ``berth serve`` on a temp data dir (rate limits set out of the way),
creates a user, a token, a server and 100 installations, then runs ``wrk``
against the installation list and against ``benchmarks/bare_app.py`` serving
the very same bytes from memory with the same uvicorn set-up. Also reads the
serve process's resident memory (VmRSS) idle before any data and after load.

Prints one Markdown table (plus its notes) on stdout; progress goes to stderr.
Exits 0 even when a target is missed (the line then says MISSED); non-zero only
when the benchmark itself could not run.

``--rights`` adds what authorization costs (issue 23: the ratio may drop by at most 5 %
with the checks on): the same list asked with a named ``read`` token limited to the
server (every check on its widest path: the token's team, role, scopes and servers),
by a berth as it is and by one whose bus admits every command unchecked
(``benchmarks/rights_off/sitecustomize.py``, benchmark only), in alternating rounds on
the same data; the medians and the drop.

    python benchmarks/api_bench.py [--duration 10] [--installations 100] [--no-info-run]
        [--rights [--rounds 3]]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from harness import BerthProcess, free_port  # noqa: E402

BARE_APP = ROOT / "benchmarks" / "bare_app.py"
WRK = shutil.which("wrk") or "/usr/bin/wrk"
THREADS = 1
CONNECTIONS = 16
WARMUP_SECONDS = 2
IDLE_SECONDS = 3.0
RATIO_TARGET = 0.3
RSS_TARGET_MIB = 120.0
# Far above anything wrk can reach: this measures throughput, not the limiter.
HIGH_LIMIT = "1000000000"


HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


def progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True, slots=True)
class WrkResult:
    requests_per_sec: float
    p50_ms: float
    p99_ms: float
    requests: int
    non_2xx: int
    socket_errors: int
    cpu_us: float = 0.0  # the server's CPU time per request, where measured


_UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}
_LATENCY = re.compile(r"^\s*(50|99)(?:\.0+)?%\s+([\d.]+)(us|ms|s|m|h)\s*$", re.M)
_RPS = re.compile(r"^Requests/sec:\s+([\d.]+)", re.M)
_TOTAL = re.compile(r"^\s*(\d+) requests in ", re.M)
_NON_2XX = re.compile(r"Non-2xx or 3xx responses:\s+(\d+)")
_SOCKET_ERRORS = re.compile(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)")


def parse_wrk(output: str) -> WrkResult:
    """Requests/sec, the 50% and 99% latencies (in ms) and error counts from ``wrk --latency``."""
    latencies = {p: float(v) * _UNIT_MS[u] for p, v, u in _LATENCY.findall(output)}
    rps = _RPS.search(output)
    total = _TOTAL.search(output)
    if rps is None or total is None or set(latencies) != {"50", "99"}:
        raise RuntimeError(f"cannot parse wrk output:\n{output}")
    non_2xx = _NON_2XX.search(output)
    socket = _SOCKET_ERRORS.search(output)
    return WrkResult(
        requests_per_sec=float(rps.group(1)),
        p50_ms=latencies["50"],
        p99_ms=latencies["99"],
        requests=int(total.group(1)),
        non_2xx=int(non_2xx.group(1)) if non_2xx else 0,
        socket_errors=sum(int(n) for n in socket.groups()) if socket else 0,
    )


def wrk_args(url: str, token: str | None, seconds: int) -> list[str]:
    args = [WRK, f"-t{THREADS}", f"-c{CONNECTIONS}", f"-d{seconds}s", "--latency"]
    if token is not None:
        args += ["-H", f"Authorization: Bearer {token}"]
    return [*args, url]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_wrk(url: str, token: str | None, seconds: int, cpu_of: int | None = None) -> WrkResult:
    """A short warm-up run, then the measured one (``cpu_of``: the CPU time that process
    spent during the measured one, per request)."""
    used = 0.0
    for label, duration in (("warm-up", WARMUP_SECONDS), ("measure", seconds)):
        progress(f"wrk {label} {duration}s: {url}")
        before = cpu_seconds(cpu_of) if cpu_of is not None else 0.0
        done = subprocess.run(  # noqa: S603 - fixed argv, no shell
            wrk_args(url, token, duration),
            capture_output=True,
            text=True,
            timeout=duration + 60,
            check=True,
        )
        used = cpu_seconds(cpu_of) - before if cpu_of is not None else 0.0
    result = parse_wrk(done.stdout)
    if cpu_of is not None:
        result = replace(result, cpu_us=used / max(result.requests, 1) * 1e6)
    progress(
        f"  {result.requests_per_sec:.0f} req/s, p50 {result.p50_ms:.2f} ms, "
        f"p99 {result.p99_ms:.2f} ms, non-2xx {result.non_2xx}, "
        f"socket errors {result.socket_errors}"
    )
    return result


def rss_mib(pid: int) -> float:
    """Resident set size of ``pid`` (VmRSS) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def pid_of(process: BerthProcess) -> int:
    if process.proc is None:
        raise RuntimeError("berth serve is not running")
    return process.proc.pid


def berth_env(log_level: str) -> dict[str, str]:
    return {
        "BERTH_RATE_LIMIT": HIGH_LIMIT,
        "BERTH_DEPLOY_RATE_LIMIT": HIGH_LIMIT,
        "BERTH_LOG_LEVEL": log_level,
    }


@contextmanager
def berth_serve(data_dir: Path, log_level: str) -> Iterator[BerthProcess]:
    process = BerthProcess(data_dir, env=berth_env(log_level))
    progress(f"starting berth serve (BERTH_LOG_LEVEL={log_level}) on {process.url}")
    try:
        process.start(timeout=60)
        yield process
    finally:
        process.stop(timeout=20)


@contextmanager
def bare_app(body_file: Path) -> Iterator[tuple[str, int]]:
    """``bare_app.py`` on a free port: ``(base url, pid)`` once it answers."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = body_file.with_name("bare-app.log")
    progress(f"starting bare Litestar app on {url}")
    with log_path.open("wb") as log:
        proc = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
            [sys.executable, str(BARE_APP), str(body_file), f"127.0.0.1:{port}"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"bare_app.py exited:\n{log_path.read_text(errors='replace')}")
            try:
                if httpx.get(f"{url}/api/agent/install", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("bare_app.py did not answer within 30 s")
            time.sleep(0.1)
        yield url, proc.pid
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def create_data(process: BerthProcess, installations: int) -> tuple[str, str]:
    """A user, its token, a server and ``installations`` queued deployments: ``(token, id)``."""
    progress("creating user and token (berth CLI)")
    _email, token = process.new_user("bench")
    with httpx.Client(
        base_url=process.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
    ) as client:
        # Enrolled (a pinned host key) at 127.0.0.1:1, where nothing answers: it takes
        # deploys, which stay queued; a pending server would refuse them (409).
        created = client.post(
            "/api/agent/servers",
            json={"name": "bench", "address": "127.0.0.1", "sshPort": 1, "hostKeys": [HOST_KEY]},
        )
        if created.status_code != 201:
            raise RuntimeError(f"create server: {created.status_code} {created.text}")
        server_id = str(created.json()["id"])
        progress(f"deploying {installations} installations on server {server_id}")
        for i in range(installations):
            deployed = client.post(
                "/api/agent/docker/deploy",
                json={
                    "serverId": server_id,
                    "name": f"bench-app-{i:03d}",
                    "image": "bench/app:1.0",
                    "port": 20000 + i,
                },
            )
            if deployed.status_code != 202:
                raise RuntimeError(f"deploy #{i}: {deployed.status_code} {deployed.text}")
    return token, server_id


def named_token(process: BerthProcess, token: str, server_id: str) -> str:
    """A named token of the bench user's: ``read`` scope, limited to ``server_id``."""
    made = httpx.post(
        f"{process.url}/api/agent/tokens",
        headers={"Authorization": f"Bearer {token}"},
        json={"name": "bench-reader", "scopes": ["read"], "serverIds": [server_id]},
        timeout=30,
    )
    if made.status_code != 201:
        raise RuntimeError(f"create token: {made.status_code} {made.text}")
    return str(made.json()["token"])


RIGHTS_OFF = ROOT / "benchmarks" / "rights_off"


def rights_rounds(
    data_dir: Path, token: str, server_id: str, seconds: int, rounds: int
) -> dict[str, list[WrkResult]]:
    """req/s and berth's CPU µs per request of the list asked with ``token``, by berth
    with its checks on and off, in alternating rounds (each a fresh process on
    ``data_dir``)."""
    found: dict[str, list[WrkResult]] = {"on": [], "off": []}
    for round_ in range(rounds):
        for checks in ("on", "off") if round_ % 2 == 0 else ("off", "on"):
            env = berth_env("warning")
            if checks == "off":
                env["PYTHONPATH"] = str(RIGHTS_OFF)
            process = BerthProcess(data_dir, env=env)
            progress(f"round {round_ + 1}/{rounds}: authorization checks {checks}")
            try:
                process.start(timeout=60)
                url = f"{process.url}/api/agent/install?serverId={server_id}"
                result = run_wrk(url, token, seconds, cpu_of=pid_of(process))
                if result.non_2xx:
                    raise RuntimeError(f"checks {checks}: {result.non_2xx} non-2xx answers")
                found[checks].append(result)
            finally:
                process.stop(timeout=20)
    return found


def rights_lines(found: dict[str, list[WrkResult]], bare: WrkResult) -> list[str]:
    def rps(checks: str) -> float:
        return statistics.median(r.requests_per_sec for r in found[checks])

    def cpu(checks: str) -> float:
        return statistics.median(r.cpu_us for r in found[checks])

    def rounds(checks: str) -> str:
        return ", ".join(f"{r.requests_per_sec:,.0f}" for r in found[checks])

    drop = 1 - rps("on") / rps("off")
    cpu_drop = 1 - cpu("off") / cpu("on")  # throughput lost if CPU bound: 1 - on/off
    lines = [
        "",
        "Authorization (a named `read` token limited to the server; alternating rounds):",
        "",
        "| berth | req/s, median (each round) | ratio to bare | berth CPU µs / request |",
        "|---|---:|---:|---:|",
    ]
    for checks, name in (("on", "checks on (as shipped)"), ("off", "checks off (bench only)")):
        lines.append(
            f"| {name} | {rps(checks):,.0f} ({rounds(checks)}) "
            f"| {rps(checks) / bare.requests_per_sec:.2f} | {cpu(checks):,.0f} |"
        )
    return [
        *lines,
        "",
        f"- drop with the checks on, by CPU per request: **{cpu_drop:.1%}** "
        f"(target ≤ 5 %: {mark(cpu_drop <= 0.05)}); by req/s: {drop:.1%} (req/s swing "
        "with the machine's other load; the CPU each request costs berth does not)",
    ]


def fetch_body(url: str, token: str, installations: int) -> bytes:
    response = httpx.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    if response.status_code != 200:
        raise RuntimeError(f"GET {url}: {response.status_code} {response.text}")
    found = len(response.json()["installations"])
    if found != installations:
        raise RuntimeError(f"expected {installations} installations, got {found}")
    return response.content


def mark(ok: bool) -> str:
    return "met" if ok else "**MISSED**"


def report(
    rows: list[tuple[str, WrkResult]],
    *,
    berth: WrkResult,
    bare: WrkResult,
    body_bytes: int,
    rss_idle: float,
    rss_loaded: float,
    rss_bare: float,
    duration: int,
    installations: int,
    load_before: tuple[float, float, float],
) -> str:
    ratio = berth.requests_per_sec / bare.requests_per_sec
    lines = [
        "| endpoint | req/s | p50 ms | p99 ms |",
        "|---|---:|---:|---:|",
        *(
            f"| {name} | {r.requests_per_sec:,.0f} | {r.p50_ms:.2f} | {r.p99_ms:.2f} |"
            for name, r in rows
        ),
        "",
        f"- ratio berth/bare req/s: **{ratio:.2f}** (target ≥ {RATIO_TARGET}: "
        f"{mark(ratio >= RATIO_TARGET)})",
        f"- berth serve RSS idle before data: {rss_idle:.1f} MiB "
        f"(target < {RSS_TARGET_MIB:.0f} MiB: {mark(rss_idle < RSS_TARGET_MIB)})",
        f"- berth serve RSS after load: {rss_loaded:.1f} MiB "
        f"(target < {RSS_TARGET_MIB:.0f} MiB: {mark(rss_loaded < RSS_TARGET_MIB)})",
        f"- bare app RSS after load (for comparison): {rss_bare:.1f} MiB",
        f"- response: {body_bytes:,} bytes of JSON, {installations} installations "
        "(queued deployments), identical bytes from both servers",
        "- berth ran with BERTH_RATE_LIMIT and BERTH_DEPLOY_RATE_LIMIT set to "
        f"{int(HIGH_LIMIT):,}/min: this measures throughput, not the rate limiter",
        "- berth rows without a log level ran with BERTH_LOG_LEVEL=warning (no per-request "
        "log line); the info row is the default level, one JSON line per request to a file",
        "- wrk errors (non-2xx / socket): "
        + ", ".join(f"{name}: {r.non_2xx} / {r.socket_errors}" for name, r in rows),
        f"- wrk {wrk_version()}: `wrk -t{THREADS} -c{CONNECTIONS} -d{duration}s --latency` "
        f"(+ Authorization header for berth), after a {WARMUP_SECONDS}s warm-up run; "
        "wrk on the same machine",
        f"- machine: nproc {os.cpu_count()}, Python {platform.python_version()} "
        f"({platform.python_implementation()}), {platform.system()} {platform.release()}, "
        f"{versions()}",
        "- load average (1/5/15 min) at start: "
        + " / ".join(f"{x:.2f}" for x in load_before)
        + ", at end: "
        + " / ".join(f"{x:.2f}" for x in os.getloadavg())
        + f" (wrk and the servers share these {os.cpu_count()} CPUs; other load skews results)",
        "- both servers: uvicorn, one worker, 127.0.0.1, log_config=None, access_log=False, "
        "server_header=False",
    ]
    return "\n".join(lines)


def wrk_version() -> str:
    done = subprocess.run([WRK, "-v"], capture_output=True, text=True, timeout=10)  # noqa: S603
    match = re.search(r"wrk (\S+)", done.stdout + done.stderr)
    return match.group(1) if match else "(unknown version)"


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    parts = []
    for name in ("litestar", "uvicorn", "sqlalchemy", "uvloop", "httptools"):
        try:
            parts.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            parts.append(f"{name} not installed")
    return ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    parser.add_argument("--installations", type=int, default=100)
    parser.add_argument(
        "--no-info-run", action="store_true", help="skip the run with default info logging"
    )
    parser.add_argument(
        "--rights", action="store_true", help="also measure the authorization checks' cost"
    )
    parser.add_argument("--rounds", type=int, default=3, help="--rights: rounds of each")
    args = parser.parse_args(argv)
    if not Path(WRK).exists():
        print("api_bench: wrk is not installed (scripts/dev bench installs it)", file=sys.stderr)
        return 2

    load_before = os.getloadavg()
    name = f"berth GET /api/agent/install ({args.installations} installations)"
    with tempfile.TemporaryDirectory(prefix="berth-bench-") as tmp:
        data_dir = Path(tmp) / "data"
        body_file = Path(tmp) / "install.json"
        with berth_serve(data_dir, "warning") as berth:
            progress(f"idle {IDLE_SECONDS:.0f}s before reading RSS")
            time.sleep(IDLE_SECONDS)
            rss_idle = rss_mib(pid_of(berth))
            token, server_id = create_data(berth, args.installations)
            url = f"{berth.url}/api/agent/install?serverId={server_id}"
            body = fetch_body(url, token, args.installations)
            body_file.write_bytes(body)
            berth_result = run_wrk(url, token, args.duration)
            rss_loaded = rss_mib(pid_of(berth))
            reader = named_token(berth, token, server_id) if args.rights else None
        rows = [(name, berth_result)]
        if not args.no_info_run:
            with berth_serve(data_dir, "info") as berth:
                url = f"{berth.url}/api/agent/install?serverId={server_id}"
                if fetch_body(url, token, args.installations) != body:
                    raise RuntimeError("berth answered different bytes after a restart")
                rows.append((f"{name}, BERTH_LOG_LEVEL=info", run_wrk(url, token, args.duration)))
        rights = (
            rights_rounds(data_dir, reader, server_id, args.duration, args.rounds)
            if reader is not None
            else None
        )
        with bare_app(body_file) as (bare_url, bare_pid):
            bare_install = f"{bare_url}/api/agent/install?serverId={server_id}"
            if httpx.get(bare_install, timeout=10).content != body:
                raise RuntimeError("bare app answered different bytes")
            bare_result = run_wrk(bare_install, None, args.duration)
            rss_bare = rss_mib(bare_pid)
        rows.append(("bare Litestar, same bytes", bare_result))

    table = report(
        rows,
        berth=berth_result,
        bare=bare_result,
        body_bytes=len(body),
        rss_idle=rss_idle,
        rss_loaded=rss_loaded,
        rss_bare=rss_bare,
        duration=args.duration,
        installations=args.installations,
        load_before=load_before,
    )
    print(table + ("\n" + "\n".join(rights_lines(rights, bare_result)) if rights else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
