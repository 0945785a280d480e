"""Ownership over real HTTP: another user's ids answer exactly like ids that do not exist.

User A owns a server, an installation (deployed through the API) and a
deployment; user B tries every endpoint that takes an id with A's ids. Each
answer must be the 404 B gets for a random UUID (same body but for the
request id), and A's data must be untouched afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import httpx
import pytest
from harness import Api, BerthProcess, new_server, problem, without_request_id


@dataclass(frozen=True)
class Ids:
    server: str
    installation: str
    deployment: str
    app_name: str
    idempotency_key: str


@dataclass
class Tenants:
    a: Api
    b: Api
    a_ids: Ids
    a_server_ids: list[str]
    b_server_ids: list[str]

    def a_state(self) -> dict[str, Any]:
        """Everything A can see of A's own data."""
        servers = self.a.get("/api/agent/servers").json()
        state: dict[str, Any] = {"servers": [_stored(s) for s in servers["servers"]]}
        for server in servers["servers"]:
            sid = server["id"]
            state[sid] = {
                "server": _stored(self.a.get(f"/api/agent/servers/{sid}").json()),
                "installations": self.a.get("/api/agent/install", params={"serverId": sid}).json(),
                "containers": self.a.get(f"/api/agent/servers/{sid}/containers").json(),
            }
        state["deployment"] = self.a.get(f"/api/agent/deployments/{self.a_ids.deployment}").json()
        return state


def _stored(server: dict[str, Any]) -> dict[str, Any]:
    """A server as its owner stored it, less what the monitor's latest check says of it
    (why it is offline, and ``checking`` until a worker stands by its status: the first
    check may land between two reads); its status is the stored one."""
    stored = {k: v for k, v in server.items() if k not in ("statusDetail", "lastKnownStatus")}
    stored["status"] = server.get("lastKnownStatus") or server["status"]
    return stored


@pytest.fixture(scope="module")
def tenants(berth: BerthProcess) -> Iterator[Tenants]:
    """A with a server, an installation and a queued deployment; B with a server of its own."""
    (_, token_a), (_, token_b) = berth.new_users(2, "tenant")
    with berth.api(token_a) as a, berth.api(token_b) as b:
        server = new_server(a)
        app_name = f"shop-{uuid.uuid4().hex[:8]}"
        key = f"tenant-key-{uuid.uuid4().hex}"
        deployed = a.post(
            "/api/agent/docker/deploy",
            json={
                "serverId": server["id"],
                "name": app_name,
                "image": "shop:1.0",
                "env": {"SECRET": "a-only"},
            },
            headers={"Idempotency-Key": key},
        )
        assert deployed.status_code == 202, deployed.text
        body = deployed.json()
        ids = Ids(
            server=server["id"],
            installation=body["installation"]["id"],
            deployment=body["deployment"]["id"],
            app_name=app_name,
            idempotency_key=key,
        )
        b_server = new_server(b)
        yield Tenants(
            a=a,
            b=b,
            a_ids=ids,
            a_server_ids=[server["id"]],
            b_server_ids=[b_server["id"]],
        )


def _random(ids: Ids) -> Ids:
    return replace(
        ids,
        server=str(uuid.uuid4()),
        installation=str(uuid.uuid4()),
        deployment=str(uuid.uuid4()),
    )


def _deploy(api: Api, ids: Ids, **headers: str) -> httpx.Response:
    body = {"serverId": ids.server, "name": ids.app_name, "image": "evil:6.6", "port": 8081}
    return api.post("/api/agent/docker/deploy", json=body, headers=headers)


# Every request that names one of A's ids, by what it does.
ENDPOINTS: dict[str, Callable[[Api, Ids], httpx.Response]] = {
    "GET install?serverId=": lambda api, ids: api.get(
        "/api/agent/install", params={"serverId": ids.server}
    ),
    "GET servers/{id}": lambda api, ids: api.get(f"/api/agent/servers/{ids.server}"),
    "GET servers/{id}/containers": lambda api, ids: api.get(
        f"/api/agent/servers/{ids.server}/containers"
    ),
    "POST docker/deploy (A's serverId and app name)": _deploy,
    "POST docker/deploy (A's serverId and Idempotency-Key)": lambda api, ids: _deploy(
        api, ids, **{"Idempotency-Key": ids.idempotency_key}
    ),
    "GET deployments/{id}": lambda api, ids: api.get(f"/api/agent/deployments/{ids.deployment}"),
    "GET deployments/{installation id}": lambda api, ids: api.get(
        f"/api/agent/deployments/{ids.installation}"
    ),
    "GET installations/{id}": lambda api, ids: api.get(
        f"/api/agent/installations/{ids.installation}"
    ),
    "GET installations/{id}/logs": lambda api, ids: api.get(
        f"/api/agent/installations/{ids.installation}/logs", params={"tail": 5}
    ),
    "GET deployments/{id}/events": lambda api, ids: api.get(
        f"/api/agent/deployments/{ids.deployment}/events"
    ),
    "GET installations/{id}/logs?follow=1": lambda api, ids: api.get(
        f"/api/agent/installations/{ids.installation}/logs", params={"follow": 1}
    ),
    "GET deployments/{id}/events/text": lambda api, ids: api.get(
        f"/api/agent/deployments/{ids.deployment}/events/text"
    ),
    "GET installations/{id}/logs/follow": lambda api, ids: api.get(
        f"/api/agent/installations/{ids.installation}/logs/follow"
    ),
    "DELETE installations/{id}": lambda api, ids: api.delete(
        f"/api/agent/installations/{ids.installation}"
    ),
    "DELETE servers/{id}": lambda api, ids: api.delete(f"/api/agent/servers/{ids.server}"),
    "GET servers/{installation id}": lambda api, ids: api.get(
        f"/api/agent/servers/{ids.installation}"
    ),
}

OWNER_READS = [
    "GET install?serverId=",
    "GET servers/{id}",
    "GET servers/{id}/containers",
    "GET deployments/{id}",
    "GET installations/{id}",
]


class TestOwnership:
    """Another user's ids are indistinguishable from ids that do not exist."""

    @pytest.mark.parametrize("endpoint", list(ENDPOINTS))
    def test_other_users_id_is_a_404_like_a_random_uuid(
        self, tenants: Tenants, endpoint: str
    ) -> None:
        """B naming A's id gets the very 404 (but the request id) that a random UUID gets."""
        call = ENDPOINTS[endpoint]
        before = tenants.a_state()
        foreign = problem(call(tenants.b, tenants.a_ids), 404)
        unknown = problem(call(tenants.b, _random(tenants.a_ids)), 404)
        assert without_request_id(foreign) == without_request_id(unknown)
        assert foreign["requestId"] != unknown["requestId"]
        assert tenants.a_state() == before

    @pytest.mark.parametrize("endpoint", OWNER_READS)
    def test_owner_reaches_the_same_ids(self, tenants: Tenants, endpoint: str) -> None:
        """The ids B was refused are real: the same reads by A succeed."""
        response = ENDPOINTS[endpoint](tenants.a, tenants.a_ids)
        assert response.status_code == 200, response.text

    def test_deploy_to_others_server_leaves_owner_data_unchanged(self, tenants: Tenants) -> None:
        """A's installation keeps its image, port and deployment after B's deploy attempts."""
        listing = tenants.a.get(
            "/api/agent/install", params={"serverId": tenants.a_ids.server}
        ).json()
        (installation,) = listing["installations"]
        assert installation["id"] == tenants.a_ids.installation
        assert installation["image"] == "shop:1.0"
        assert installation["port"] == 3000
        assert installation["lastDeployment"]["id"] == tenants.a_ids.deployment
        deployment = tenants.a.get(f"/api/agent/deployments/{tenants.a_ids.deployment}").json()
        assert deployment["state"] == "queued"


class TestListServers:
    """GET /api/agent/servers lists the caller's servers and nobody else's."""

    def test_each_user_sees_only_own_servers(self, tenants: Tenants) -> None:
        """A sees exactly A's servers, B exactly B's."""
        a_ids = [s["id"] for s in tenants.a.get("/api/agent/servers").json()["servers"]]
        b_ids = [s["id"] for s in tenants.b.get("/api/agent/servers").json()["servers"]]
        assert a_ids == tenants.a_server_ids
        assert b_ids == tenants.b_server_ids


class TestDeleteServer:
    """DELETE /api/agent/servers/{id} forgets one of the caller's servers and what hangs on it."""

    def test_owner_deletes_a_server_with_a_queued_deployment(self, berth: BerthProcess) -> None:
        """204; then the server, its installation and its queued deployment are all 404."""
        ((_, token),) = berth.new_users(1, "deleter")
        with berth.api(token) as api:
            keep = new_server(api)
            gone = new_server(api)
            deployed = api.post(
                "/api/agent/docker/deploy",
                json={"serverId": gone["id"], "name": "web", "image": "shop:1.0"},
            )
            assert deployed.status_code == 202, deployed.text
            body = deployed.json()

            response = api.delete(f"/api/agent/servers/{gone['id']}")
            assert response.status_code == 204, response.text
            assert response.content == b""

            listed = [s["id"] for s in api.get("/api/agent/servers").json()["servers"]]
            assert listed == [keep["id"]]
            problem(api.get(f"/api/agent/servers/{gone['id']}"), 404)
            problem(api.get("/api/agent/install", params={"serverId": gone["id"]}), 404)
            problem(api.get(f"/api/agent/installations/{body['installation']['id']}"), 404)
            problem(api.get(f"/api/agent/deployments/{body['deployment']['id']}"), 404)
            problem(api.delete(f"/api/agent/servers/{gone['id']}"), 404)
            assert api.get(f"/api/agent/servers/{keep['id']}").status_code == 200

    def test_malformed_id_is_a_404(self, berth: BerthProcess) -> None:
        """A path id that is no UUID names nothing."""
        ((_, token),) = berth.new_users(1, "deleter")
        with berth.api(token) as api:
            problem(api.delete("/api/agent/servers/not-a-uuid"), 404)
            problem(api.delete("/api/agent/servers/1;rm -rf"), 404)
