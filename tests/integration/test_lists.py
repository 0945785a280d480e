"""Paging and filters of the lists on a real berth (issue 27, item 5): servers,
installations and webhooks page with `limit` and `cursor` (`nextCursor`), filter by
status and name, and a cursor that names nothing is a 422, as is a revisions `before`
that is no deployment of that installation.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from harness import Api, BerthProcess, new_server, problem, queue_deploy

pytestmark = pytest.mark.integration


@pytest.fixture
def api(berth: BerthProcess) -> Api:
    _, token = berth.new_users(1, prefix="lists")[0]
    return berth.api(token)


def _walk(api: Api, path: str, key: str, **params: Any) -> list[dict[str, Any]]:
    """Every entry, following `nextCursor` page by page (at most 50 pages)."""
    seen: list[dict[str, Any]] = []
    cursor = None
    for _ in range(50):
        query = {**params, **({"cursor": cursor} if cursor else {})}
        response = api.get(path, params=query)
        assert response.status_code == 200, response.text
        body = response.json()
        assert len(body[key]) <= int(params.get("limit", 10**6))
        seen += body[key]
        cursor = body.get("nextCursor")
        if cursor is None:
            return seen
    raise AssertionError("the pages never ended")


def test_servers_page_and_filter(api: Api) -> None:
    """Servers page with limit/cursor (every one once, in order), filter by status and by
    a name part in any case; unpaged, the whole list without `nextCursor`."""
    tag = uuid.uuid4().hex[:6]
    pending = [new_server(api, f"web-{tag}-{i}", enrolled=False) for i in range(3)]
    offline = new_server(api, f"db-{tag}")
    everything = api.get("/api/agent/servers").json()
    assert "nextCursor" not in everything
    ids = [s["id"] for s in everything["servers"]]
    assert [s["id"] for s in _walk(api, "/api/agent/servers", "servers", limit=2)] == ids
    by_name = api.get("/api/agent/servers", params={"name": f"WEB-{tag}"}).json()
    assert [s["id"] for s in by_name["servers"]] == [s["id"] for s in pending]
    by_status = api.get("/api/agent/servers", params={"status": "pending"}).json()
    assert offline["id"] not in [s["id"] for s in by_status["servers"]]
    assert {s["status"] for s in by_status["servers"]} == {"pending"}


def test_an_unknown_cursor_is_a_422(api: Api) -> None:
    """A cursor that names no entry is a 422 at `query.cursor` (not an empty 200), for
    servers, installations and webhooks; a bad limit or status is named too."""
    server = new_server(api, enrolled=False)
    stale = str(uuid.uuid4())
    for path, params in (
        ("/api/agent/servers", {}),
        ("/api/agent/install", {"serverId": server["id"]}),
        ("/api/agent/webhooks", {}),
    ):
        found = problem(api.get(path, params={**params, "cursor": stale, "limit": "1"}), 422)
        assert [e["location"] for e in found["errors"]] == ["query.cursor"], path
    bad = problem(api.get("/api/agent/servers", params={"limit": "0", "status": "up"}), 422)
    assert sorted(e["location"] for e in bad["errors"]) == ["query.limit", "query.status"]


def test_an_unknown_revisions_before_is_a_422(api: Api) -> None:
    """`before` that is no deployment of the installation is a 422 at `query.before`, not
    an empty page."""
    server = new_server(api)
    queued = queue_deploy(api, server["id"], f"app-{uuid.uuid4().hex[:6]}", "nginx:1.27")
    installation = queued["installation"]["id"]
    path = f"/api/agent/installations/{installation}/deployments"
    found = problem(api.get(path, params={"before": str(uuid.uuid4())}), 422)
    assert [e["location"] for e in found["errors"]] == ["query.before"]
    own = api.get(path, params={"before": queued["deployment"]["id"]})
    assert own.status_code == 200
    assert own.json()["deployments"] == []
