"""A bare Litestar app served like ``berth serve``: the baseline for ``api_bench.py``.

One GET route, ``/api/agent/install``, answers fixed bytes from memory as
``application/json``; no middleware, no auth, no database. The uvicorn options
are the ones ``berth serve`` uses (see ``src/entrypoints/cli/main.py``).

    python benchmarks/bare_app.py BODY_FILE [HOST:PORT]

``BODY_FILE`` may instead come from ``BENCH_BODY_FILE``; HOST:PORT defaults to
``127.0.0.1:8090``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import uvicorn
from litestar import Litestar, MediaType, Response, get

USAGE = "usage: bare_app.py BODY_FILE [HOST:PORT]  (or BENCH_BODY_FILE=...)"


def create_app(body: bytes) -> Litestar:
    """A Litestar app whose only route returns ``body`` as JSON."""

    @get("/api/agent/install", media_type=MediaType.JSON, sync_to_thread=False)
    def install() -> Response[bytes]:
        return Response(content=body, media_type=MediaType.JSON)

    return Litestar(route_handlers=[install], logging_config=None, debug=False)


def main(argv: list[str]) -> int:
    body_file = argv[0] if argv else os.environ.get("BENCH_BODY_FILE")
    if not body_file:
        print(USAGE, file=sys.stderr)
        return 2
    host, _, port = (argv[1] if len(argv) > 1 else "127.0.0.1:8090").rpartition(":")
    config = uvicorn.Config(
        create_app(Path(body_file).read_bytes()),
        host=host or "127.0.0.1",
        port=int(port),
        log_config=None,
        access_log=False,
        server_header=False,
        lifespan="on",
        timeout_graceful_shutdown=10,
    )
    uvicorn.Server(config).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
