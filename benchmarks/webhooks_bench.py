"""Webhook latency: from a deployment's end (its ``finishedAt``, written with the outbox
row) to the first POST of its ``deployment.failed`` event at a receiver on loopback.

Starts ``berth serve`` (with its worker, default webhook settings but a 2 s queue
timeout) on a temp data dir, adds a webhook, queues ``--deployments`` deployments on a
server that never answers (each times out: ``deployment.failed``), and notes when each
event arrives. Prints one Markdown row (p50, p99, max) on stdout; progress on stderr.

    python benchmarks/webhooks_bench.py [--deployments 30]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from harness import BerthProcess, new_server  # noqa: E402


def progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--deployments", type=int, default=30)
    args = parser.parse_args(argv)
    arrived: dict[str, float] = {}  # deployment id -> arrival (epoch seconds)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            with lock:
                arrived.setdefault(json.loads(body)["data"]["deploymentId"], time.time())
            self.send_response(204)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *more: Any) -> None:
            return

    receiver = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{receiver.server_address[1]}/hook"
    with tempfile.TemporaryDirectory(prefix="berth-bench-") as scratch:
        process = BerthProcess(Path(scratch), env={"BERTH_QUEUE_TIMEOUT": "2"}).start()
        try:
            _, token = process.new_user("bench")
            with process.api(token) as api:
                api.post("/api/agent/webhooks", json={"url": url, "events": ["deployment.failed"]})
                server = new_server(api)
                ids = []
                for n in range(args.deployments):
                    response = api.post(
                        "/api/agent/docker/deploy",
                        json={
                            "serverId": server["id"],
                            "name": f"bench-{n}",
                            "image": "web:1.0",
                            "port": 4000 + n,
                        },
                    )
                    ids.append(response.json()["deployment"]["id"])
                progress(f"queued {len(ids)}; waiting for their events")
                deadline = time.monotonic() + 120
                while len(arrived) < len(ids) and time.monotonic() < deadline:
                    time.sleep(0.2)
                latencies = []
                for deployment_id in ids:
                    finished = api.get(f"/api/agent/deployments/{deployment_id}").json()
                    end = datetime.fromisoformat(finished["finishedAt"]).timestamp()
                    if deployment_id in arrived:
                        latencies.append((arrived[deployment_id] - end) * 1000)
        finally:
            process.stop()
            receiver.shutdown()
    missing = len(ids) - len(latencies)
    print("| events | p50 ms | p99 ms | max ms | missing |")
    print("|---|---|---|---|---|")
    print(
        f"| {len(latencies)} | {percentile(latencies, 0.5):.0f} | "
        f"{percentile(latencies, 0.99):.0f} | {max(latencies):.0f} | {missing} |"
    )
    return 0 if not missing else 1


if __name__ == "__main__":
    sys.exit(main())
