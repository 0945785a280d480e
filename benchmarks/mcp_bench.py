"""MCP ``deploy`` overhead against the HTTP API: the same deploy queued both ways.

Starts ``berth serve --no-worker`` on a temp data dir (rate limits out of the way; no
worker, so a queued deployment stays queued and only the call itself is timed), creates
a user, a token and an enrolled server, then queues ``--calls`` deployments through
``POST /api/agent/docker/deploy`` and as many through the MCP ``deploy`` tool at
``/mcp`` (the SDK's client over streamable HTTP, one session, as an agent holds it),
alternating, each with its own app name and port. Both clients keep their connections
alive. Prints one Markdown table (p50, p99 per call; the MCP overhead) on stdout;
progress on stderr.

    python benchmarks/mcp_bench.py [--calls 100]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import httpx
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from harness import BerthProcess, new_server  # noqa: E402

HIGH_LIMIT = "1000000000"
FIRST_PORT = 20000


def progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure(url: str, token: str, server_id: str, calls: int) -> dict[str, list[float]]:
    """Milliseconds per queued deploy, by way: ``http`` and ``mcp``."""
    times: dict[str, list[float]] = {"http": [], "mcp": []}
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as api,
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        for n in range(calls * 2 + 4):
            name, port = f"app-{n}", FIRST_PORT + n
            way = "http" if n % 2 == 0 else "mcp"
            started = time.perf_counter()
            if way == "http":
                body = {"serverId": server_id, "name": name, "image": "bench:1", "port": port}
                response = await api.post("/api/agent/docker/deploy", json=body)
                if response.status_code != 202:
                    raise RuntimeError(f"deploy: {response.status_code} {response.text}")
            else:
                args = {"server_id": server_id, "name": name, "image": "bench:1", "port": port}
                result = await session.call_tool("deploy", args)
                if result.is_error:
                    raise RuntimeError(f"deploy tool: {result.content}")
            elapsed = (time.perf_counter() - started) * 1000
            if n >= 4:  # the first two of each way warm up
                times[way].append(elapsed)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args(argv)
    env = {"BERTH_RATE_LIMIT": HIGH_LIMIT, "BERTH_DEPLOY_RATE_LIMIT": HIGH_LIMIT}
    with tempfile.TemporaryDirectory(prefix="berth-mcp-bench-") as tmp:
        process = BerthProcess(Path(tmp), args=["--no-worker"], env=env).start()
        try:
            _, token = process.new_user("bench")
            api = process.api(token)
            server = new_server(api)
            api.close()
            progress(f"queuing {args.calls} deploys through the API and {args.calls} through MCP")
            times = asyncio.run(measure(process.url, token, server["id"], args.calls))
        finally:
            process.stop()
    http, mcp = times["http"], times["mcp"]
    print("| way | calls | p50 | p99 |")
    print("|---|---|---|---|")
    for label, values in (("HTTP API `POST /docker/deploy`", http), ("MCP `deploy` tool", mcp)):
        print(
            f"| {label} | {len(values)} | {percentile(values, 0.5):.1f} ms "
            f"| {percentile(values, 0.99):.1f} ms |"
        )
    overhead = percentile(mcp, 0.5) - percentile(http, 0.5)
    print(f"\nMCP overhead at p50: {overhead:+.1f} ms per deploy call.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
