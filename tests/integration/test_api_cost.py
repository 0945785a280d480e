"""What berth's process does per API request, counted rather than timed.

Issue 23 asks that authorization cost the API no more than 5 % of its throughput
(``benchmarks/api_bench.py``: ``GET /api/agent/install``). A shared machine cannot time
that steadily, so these tests count the Python calls one such request makes in the
process that serves it -- the app as ``berth serve`` builds it, on a real SQLite store,
called as ASGI without a socket. The counts do not depend on the machine's load; a
Litestar or structlog upgrade may move them a little (then look at what changed before
raising a budget).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import Any

import berth
import pytest
import structlog
from berth.entrypoints.bootstrap import bootstrap
from berth.entrypoints.http import create_app
from berth.entrypoints.http.forwarded import behind_proxies
from berth.entrypoints.settings import Settings
from harness import HOST_KEY, PASSWORD, unique_email

#: Python calls per ``GET /install`` (token check, rate limit, listing, ETag, request
#: log). Before teams and tokens (176fb2f) it made about 260 (counted so); with them, 312 before
#: ``2026-11-27-api-work-per-request-counted``, 286 after, 274-276 after
#: ``2026-11-27-api-cpu-per-request-after-teams`` (it varies by a call or two between runs
#: and machines: the budget leaves that room, not a regression's).
LISTING_CALL_BUDGET = 280

Asgi = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


async def _listing_request(data_dir: Path) -> Callable[[], Awaitable[int]]:
    """A served app and its ``GET /install`` for a user with three apps on a server:
    each call answers one request and returns its status."""
    async with berth.open(data_dir) as facade:
        user = await facade.create_user(unique_email("cost"), PASSWORD)
        token = await facade.regenerate_token(user)
        created = await facade.create_server(
            user, name="cost", address="127.0.0.1", ssh_port=1, host_keys=[HOST_KEY]
        )
        server_id = created.server.id
        for i in range(3):
            await facade.deploy(
                user, server_id=server_id, name=f"app-{i}", image="cost/app:1.0", port=20000 + i
            )
    settings = replace(Settings(data_dir=data_dir), rate_limit_per_minute=10**9)
    runtime = await bootstrap(settings)
    app: Asgi = behind_proxies(
        create_app(
            runtime.bus,
            settings,
            limiter=runtime.limiter,
            metrics=runtime.metrics,
            csrf_secret=runtime.csrf_secret,
        ),
        None,
    )
    headers = [(b"host", b"127.0.0.1"), (b"authorization", f"Bearer {token}".encode())]

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def one() -> int:
        answer: dict[str, Any] = {}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]

        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": "/api/agent/install",
            "raw_path": b"/api/agent/install",
            "query_string": f"serverId={server_id}".encode(),
            "root_path": "",
            "headers": list(headers),
            "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", 8000),
            "state": {},
        }
        await app(scope, receive, send)
        return int(answer["status"])

    one.close = runtime.close  # type: ignore[attr-defined]
    return one


@pytest.fixture
def quiet_logs() -> Iterator[None]:
    """Logs as ``api_bench`` runs berth (``BERTH_LOG_LEVEL=warning``: no line per request),
    whatever an earlier test configured; nothing cached, the configuration given back."""
    saved = structlog.get_config()
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        cache_logger_on_first_use=False,
    )
    try:
        yield
    finally:
        structlog.configure(**saved)


@pytest.mark.usefixtures("quiet_logs")
async def test_a_listing_request_stays_within_its_call_budget(tmp_path: Path) -> None:
    """``GET /install`` makes at most ``LISTING_CALL_BUDGET`` Python calls in berth's
    process once warm (cached reads, memoized body): authorization adds little."""
    one = await _listing_request(tmp_path / "data")
    try:
        for _ in range(20):  # warm: the read cache, the listing memo, the ETag memo
            assert await one() == 200
        calls = 0

        def count(frame: FrameType, event: str, arg: object) -> None:
            nonlocal calls
            if event == "call":
                calls += 1

        requests = 50
        sys.setprofile(count)
        try:
            statuses = [await one() for _ in range(requests)]
        finally:
            sys.setprofile(None)
        assert statuses == [200] * requests
        per_request = calls / requests
        assert per_request <= LISTING_CALL_BUDGET, f"{per_request:.1f} Python calls per request"
    finally:
        await one.close()  # type: ignore[attr-defined]
