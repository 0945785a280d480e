"""What berth's own processes cost to start: CPU seconds until each can do its work.

* ``serve, new data dir``: ``berth serve`` on an empty data dir (a new database), from
  exec to its first ``200`` on ``/healthz``;
* ``serve, again``: the same data dir started again (a database at the head revision);
* ``CLI command``: ``berth servers --json`` against that berth, start to exit;
* ``berth mcp``: the stdio MCP server started by a client, until it answered
  ``initialize`` and ``tools/list``.

CPU is the process's own user + system time (``/proc/<pid>/stat`` for the server while
it runs, ``getrusage`` of the reaped child for the others): on a busy machine it moves
far less than wall time, which is printed beside it. Each kind runs ``--runs`` times;
one Markdown table (median, min, max) on stdout, progress on stderr.

    python benchmarks/start_bench.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from harness import BERTH, BerthProcess  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def serve_start(process: BerthProcess) -> tuple[float, float]:
    """CPU and wall seconds from launch to the first healthy answer."""
    began = time.monotonic()
    process.start()
    wall = time.monotonic() - began
    assert process.proc is not None
    fields = Path(f"/proc/{process.proc.pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICKS, wall


def child_run(
    argv: list[str], given: str = "", env: dict[str, str] | None = None
) -> tuple[float, float]:
    """CPU and wall seconds of one child process, start to exit."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.monotonic()
    subprocess.run(  # noqa: S603 (berth itself, fixed arguments)
        argv, input=given, capture_output=True, text=True, check=True, env=env, timeout=120
    )
    wall = time.monotonic() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def mcp_session() -> str:
    """What a client sends ``berth mcp`` to list its tools (JSON-RPC lines on stdin)."""
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "start_bench", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    return "".join(json.dumps(m) + "\n" for m in messages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    found: dict[str, list[tuple[float, float]]] = {}

    def note(kind: str, measured: tuple[float, float]) -> None:
        cpu, wall = measured
        found.setdefault(kind, []).append((cpu, wall))
        progress(f"{kind}: {cpu:.2f} s CPU, {wall:.2f} s wall")

    with tempfile.TemporaryDirectory(prefix="berth-start-bench-") as scratch:
        for run in range(args.runs):
            process = BerthProcess(Path(scratch) / f"data-{run}")
            note("serve, new data dir", serve_start(process))
            process.stop()
            note("serve, again", serve_start(process))
            _, token = process.new_users(1, f"bench{run}")[0]
            env = {**os.environ, "BERTH_URL": process.url, "BERTH_TOKEN": token}
            note("CLI command", child_run([BERTH, "servers", "--json"], env=env))
            note("berth mcp", child_run([BERTH, "mcp"], given=mcp_session(), env=env))
            process.stop()

    print("| process | CPU s (median) | min | max | wall s (median) |")
    print("|---|---|---|---|---|")
    for kind, runs in found.items():
        cpu = [c for c, _ in runs]
        wall = [w for _, w in runs]
        print(
            f"| {kind} | {statistics.median(cpu):.2f} | {min(cpu):.2f} | {max(cpu):.2f} "
            f"| {statistics.median(wall):.2f} |"
        )


if __name__ == "__main__":
    main()
