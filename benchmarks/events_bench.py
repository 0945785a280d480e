"""Live events latency: from a deployment event's row being committed (by another
process, as a worker elsewhere would) to its arrival on a Server-Sent Events client.

Starts ``berth serve`` (no worker: nothing else writes) on a temp data dir, queues a
deployment on a server that never answers (it stays queued), opens
``GET /api/agent/deployments/{id}/events``, then commits ``--events`` rows into
``deployment_event`` from this process, one every ``--interval`` seconds, each
carrying its commit time; the client notes when each arrives. Prints one Markdown
row (p50, p99, max) on stdout; progress on stderr.

    python benchmarks/events_bench.py [--events 200] [--interval 0.05]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx
from sqlalchemy import create_engine, insert

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from berth.adapters.sql import sqlite_url  # noqa: E402
from berth.adapters.sql.rows import events_t  # noqa: E402
from harness import BerthProcess, new_server  # noqa: E402


def progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def read_stream(url: str, token: str, arrived: dict[str, float], ready: threading.Event) -> None:
    """Note the arrival time of each ``step`` message, by its message text."""
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.stream("GET", url, headers=headers, timeout=60) as response:
        ready.set()
        for line in response.iter_lines():
            if line.startswith("data: ") and '"step"' in line:
                data = json.loads(line.removeprefix("data: "))
                arrived[data["message"]] = time.time()
                if data["message"] == "last":
                    return


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--interval", type=float, default=0.05)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="berth-events-bench-") as tmp:
        data_dir = Path(tmp)
        process = BerthProcess(data_dir, args=["--no-worker"]).start()
        try:
            _, token = process.new_user("bench")
            api = process.api(token)
            server = new_server(api)
            body = {"serverId": server["id"], "name": "bench", "image": "bench:1", "port": 8080}
            queued = api.post("/api/agent/docker/deploy", json=body)
            assert queued.status_code == 202, queued.text
            deployment_id = queued.json()["deployment"]["id"]
            engine = create_engine(sqlite_url(data_dir).replace("+aiosqlite", ""))
            arrived: dict[str, float] = {}
            ready = threading.Event()
            url = f"{process.url}/api/agent/deployments/{deployment_id}/events"
            reader = threading.Thread(target=read_stream, args=(url, token, arrived, ready))
            reader.start()
            ready.wait(10)
            time.sleep(0.5)
            written: dict[str, float] = {}
            progress(f"writing {args.events} events, one every {args.interval:g} s")
            for n in range(args.events):
                message = "last" if n == args.events - 1 else f"event {n}"
                with engine.begin() as conn:
                    conn.execute(
                        insert(events_t).values(
                            deployment_id=uuid.UUID(deployment_id),
                            at=datetime.now(UTC),
                            step="bench",
                            message=message,
                        )
                    )
                written[message] = time.time()
                time.sleep(args.interval)
            reader.join(30)
            engine.dispose()
            api.close()
        finally:
            process.stop()
    latencies = [(arrived[m] - t) * 1000 for m, t in written.items() if m in arrived]
    missing = len(written) - len(latencies)
    print("| measure | events | p50 | p99 | max | missing |")
    print("|---|---|---|---|---|---|")
    print(
        f"| event committed → SSE client (poll 0.25 s, SQLite) | {len(latencies)} "
        f"| {percentile(latencies, 0.5):.0f} ms | {percentile(latencies, 0.99):.0f} ms "
        f"| {max(latencies):.0f} ms | {missing} |"
    )
    return 0 if not missing else 1


if __name__ == "__main__":
    raise SystemExit(main())
