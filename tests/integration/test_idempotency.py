"""Idempotency-Key, ``?wait=`` and redeploying over a queued deployment, over real HTTP.

No worker runs yet, so every deployment stays ``queued``: that is what makes
replays, waits that time out, and superseding observable here. The module runs
twice, on a ``berth serve`` of its own on SQLite and on one on PostgreSQL (a new
database on the server of ``BERTH_TEST_POSTGRES_URL``; skipped without it).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from harness import Api, BerthProcess, new_server, problem
from infra import DATABASES, berth_database_env

DEPLOY = "/api/agent/docker/deploy"


@dataclass
class Pair:
    a: Api
    b: Api


@pytest.fixture(scope="module", params=DATABASES)
def berth(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BerthProcess]:
    """This module's own ``berth serve``, on each database in turn."""
    with berth_database_env(request.param) as env:
        data_dir = tmp_path_factory.mktemp(f"berth-idempotency-{request.param}")
        process = BerthProcess(data_dir, env=env).start()
        yield process
        process.stop()


@pytest.fixture(scope="module")
def pair(berth: BerthProcess) -> Iterator[Pair]:
    """Two users; each test uses its own servers, names and keys."""
    (_, token_a), (_, token_b) = berth.new_users(2, "idem")
    with berth.api(token_a) as a, berth.api(token_b) as b:
        yield Pair(a, b)


def _key() -> str:
    return f"key-{uuid.uuid4()}"


def _body(server: dict[str, Any], name: str, **extra: Any) -> dict[str, Any]:
    return {"serverId": server["id"], "name": name, "image": "shop:1.0", **extra}


def _deploy(
    api: Api, body: dict[str, Any], key: str | None = None, **params: Any
) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key else {}
    return api.post(DEPLOY, json=body, headers=headers, params=params)


def _at_once(
    berth: BerthProcess, token: str, requests: list[tuple[dict[str, Any], str | None]]
) -> list[httpx.Response]:
    """Send every deploy ``(body, key)`` at the same moment, each on its own connection."""
    gate = threading.Barrier(len(requests))

    def send(request: tuple[dict[str, Any], str | None]) -> httpx.Response:
        with berth.api(token) as api:
            api.get("/healthz")  # connected before the gate, so the deploys leave together
            gate.wait()
            return _deploy(api, *request)

    with ThreadPoolExecutor(len(requests)) as pool:
        return list(pool.map(send, requests))


def _installations(api: Api, server: dict[str, Any]) -> list[dict[str, Any]]:
    response = api.get("/api/agent/install", params={"serverId": server["id"]})
    assert response.status_code == 200
    found: list[dict[str, Any]] = response.json()["installations"]
    return found


class TestIdempotencyKey:
    """A retried deploy with the same Idempotency-Key deploys once."""

    def test_same_key_same_body_replays(self, pair: Pair) -> None:
        """The retry gets the first deployment back, marked replayed, and nothing new exists."""
        server = new_server(pair.a)
        body = _body(server, "shop", env={"GREETING": "it's $HOME", "Z": "1"}, port=8080)
        key = _key()
        first = _deploy(pair.a, body, key)
        assert first.status_code == 202, first.text
        assert "idempotent-replayed" not in first.headers
        again = _deploy(pair.a, dict(reversed(body.items())), key)
        assert again.status_code == 202, again.text
        assert again.headers["idempotent-replayed"] == "true"
        assert again.headers["location"] == first.headers["location"]
        assert again.json() == first.json()
        deployment_id = first.json()["deployment"]["id"]
        (installation,) = _installations(pair.a, server)
        assert installation["lastDeployment"]["id"] == deployment_id
        state = pair.a.get(f"/api/agent/deployments/{deployment_id}").json()
        assert state["state"] == "queued"  # not superseded by a second deployment

    @pytest.mark.parametrize(
        "change",
        [
            pytest.param({"env": {"GREETING": "hello", "Z": "2"}}, id="one env value"),
            pytest.param({"env": {"GREETING": "hello"}}, id="one env key fewer"),
            pytest.param({"image": "shop:1.1"}, id="image"),
            pytest.param({"port": 8081}, id="port"),
            pytest.param({"name": "other"}, id="name"),
        ],
    )
    def test_same_key_different_body_conflicts(self, pair: Pair, change: dict[str, Any]) -> None:
        """Reusing a key with any difference in the body is a 409 and deploys nothing."""
        server = new_server(pair.a)
        body = _body(server, "shop", env={"GREETING": "hello", "Z": "1"}, port=8080)
        key = _key()
        first = _deploy(pair.a, body, key)
        assert first.status_code == 202, first.text
        problem(_deploy(pair.a, {**body, **change}, key), 409)
        (installation,) = _installations(pair.a, server)
        assert installation["lastDeployment"]["id"] == first.json()["deployment"]["id"]
        assert installation["image"] == "shop:1.0"

    def test_same_key_other_server_conflicts(self, pair: Pair) -> None:
        """The same key and app on another of the user's servers is a different request: 409."""
        one, two = new_server(pair.a), new_server(pair.a)
        key = _key()
        assert _deploy(pair.a, _body(one, "shop"), key).status_code == 202
        problem(_deploy(pair.a, _body(two, "shop"), key), 409)
        assert _installations(pair.a, two) == []

    def test_keys_are_per_user(self, pair: Pair) -> None:
        """B may use the key A used: B gets a deployment of its own, not A's, not a replay."""
        server_a, server_b = new_server(pair.a), new_server(pair.b)
        key = _key()
        mine = _deploy(pair.a, _body(server_a, "shop"), key)
        theirs = _deploy(pair.b, _body(server_b, "shop"), key)
        assert mine.status_code == theirs.status_code == 202
        assert "idempotent-replayed" not in theirs.headers
        assert theirs.json()["deployment"]["id"] != mine.json()["deployment"]["id"]
        assert theirs.json()["deployment"]["serverId"] == server_b["id"]
        again = _deploy(pair.b, _body(server_b, "shop"), key)
        assert again.headers["idempotent-replayed"] == "true"
        assert again.json()["deployment"]["id"] == theirs.json()["deployment"]["id"]

    def test_without_key_each_request_deploys(self, pair: Pair) -> None:
        """Without a key, the same body twice makes two deployments (the first is canceled)."""
        server = new_server(pair.a)
        first = _deploy(pair.a, _body(server, "shop"))
        second = _deploy(pair.a, _body(server, "shop"))
        assert first.status_code == second.status_code == 202
        assert first.json()["deployment"]["id"] != second.json()["deployment"]["id"]
        assert "idempotent-replayed" not in second.headers


class TestWait:
    """``?wait=`` returns at a final state or when the wait ends."""

    def test_wait_without_worker_returns_202_queued_after_the_wait(self, pair: Pair) -> None:
        """``?wait=1`` with nothing executing answers 202 after about a second, still queued."""
        server = new_server(pair.a)
        started = time.monotonic()
        response = _deploy(pair.a, _body(server, "shop"), wait=1)
        elapsed = time.monotonic() - started
        assert response.status_code == 202, response.text
        assert response.json()["deployment"]["state"] == "queued"
        assert 0.9 <= elapsed < 5, elapsed

    def test_replay_with_wait_also_waits(self, pair: Pair) -> None:
        """A replayed request with ``?wait=1`` answers like the original: 202, queued, replayed."""
        server = new_server(pair.a)
        key = _key()
        first = _deploy(pair.a, _body(server, "shop"), key)
        started = time.monotonic()
        again = _deploy(pair.a, _body(server, "shop"), key, wait=1)
        assert time.monotonic() - started >= 0.9
        assert again.status_code == 202
        assert again.headers["idempotent-replayed"] == "true"
        assert again.json()["deployment"]["id"] == first.json()["deployment"]["id"]


class TestRedeployWhileQueued:
    """A new deploy of an installation whose deployment is still queued supersedes it."""

    def test_previous_deployment_is_canceled(self, pair: Pair) -> None:
        """The queued one becomes canceled, naming the new deployment; the installation stays."""
        server = new_server(pair.a)
        first = _deploy(pair.a, _body(server, "Shop App"))
        second = _deploy(pair.a, _body(server, "shop-app", image="shop:2.0"))
        assert first.status_code == second.status_code == 202
        old, new = first.json(), second.json()
        new_id = new["deployment"]["id"]
        assert new["installation"]["id"] == old["installation"]["id"]
        assert new["deployment"]["state"] == "queued"
        canceled = pair.a.get(f"/api/agent/deployments/{old['deployment']['id']}").json()
        assert canceled["state"] == "canceled"
        assert new_id in canceled["error"]
        assert canceled["finishedAt"] is not None
        assert canceled["events"][-1]["step"] == "canceled"
        (installation,) = _installations(pair.a, server)
        assert installation["id"] == old["installation"]["id"]
        assert installation["image"] == "shop:2.0"
        assert installation["name"] == "shop-app"
        assert installation["lastDeployment"] == {
            "id": new_id,
            "state": "queued",
            "finishedAt": None,
        }
        assert installation["status"] == "deploying"

    def test_superseded_replay_still_answers_the_first_deployment(self, pair: Pair) -> None:
        """Replaying the key of a superseded deploy returns that (now canceled) deployment."""
        server = new_server(pair.a)
        key = _key()
        first = _deploy(pair.a, _body(server, "shop"), key)
        assert _deploy(pair.a, _body(server, "shop")).status_code == 202
        again = _deploy(pair.a, _body(server, "shop"), key)
        assert again.status_code == 202
        assert again.headers["idempotent-replayed"] == "true"
        assert again.json()["deployment"]["id"] == first.json()["deployment"]["id"]
        assert again.json()["deployment"]["state"] == "canceled"


CONCURRENT = 8


class TestConcurrentDeploys:
    """Deploys that arrive together behave as if they had arrived one after the other.

    Each test uses a user of its own: the deploy rate limit is per token.
    """

    @pytest.fixture
    def token(self, berth: BerthProcess) -> str:
        ((_, token),) = berth.new_users(1, "race")
        return token

    def _deployment(self, api: Api, deployment_id: str) -> dict[str, Any]:
        response = api.get(f"/api/agent/deployments/{deployment_id}")
        assert response.status_code == 200, response.text
        found: dict[str, Any] = response.json()
        return found

    def test_retries_with_one_key_deploy_once(self, berth: BerthProcess, token: str) -> None:
        """Concurrent retries with the same key all answer the first request's deployment."""
        with berth.api(token) as api:
            server = new_server(api)
            body = _body(server, "Idem2", image="nginx:1", port=6010)
            key = _key()
            responses = _at_once(berth, token, [(body, key)] * CONCURRENT)
            assert [r.status_code for r in responses] == [202] * CONCURRENT, [
                r.text for r in responses
            ]
            ids = {r.json()["deployment"]["id"] for r in responses}
            assert len(ids) == 1, ids
            replayed = [r.headers.get("idempotent-replayed") for r in responses]
            assert sorted(replayed, key=str) == [None] + ["true"] * (CONCURRENT - 1)
            (deployment_id,) = ids
            (installation,) = _installations(api, server)
            assert installation["lastDeployment"]["id"] == deployment_id
            assert self._deployment(api, deployment_id)["state"] == "queued"  # never superseded

    @pytest.mark.parametrize("deployed_before", [False, True], ids=["new-name", "existing-name"])
    def test_same_name_each_supersedes_the_previous(
        self, berth: BerthProcess, token: str, deployed_before: bool
    ) -> None:
        """Concurrent deploys of one name, new or deployed before (and still queued): all
        202, one installation, each supersedes the one queued before it, one left queued."""
        with berth.api(token) as api:
            server = new_server(api)
            body = _body(server, "Idem2", image="nginx:1", port=6010)
            earlier = [_deploy(api, body)] if deployed_before else []
            for first in earlier:
                assert first.status_code == 202, first.text
            responses = _at_once(berth, token, [(body, None)] * CONCURRENT)
            self._assert_serialized(api, server, responses, earlier=earlier)

    def _assert_serialized(
        self,
        api: Api,
        server: dict[str, Any],
        responses: list[httpx.Response],
        earlier: list[httpx.Response],
    ) -> None:
        """Every deploy was accepted and each canceled the one queued before it."""
        assert [r.status_code for r in responses] == [202] * len(responses), [
            r.text for r in responses
        ]
        (installation,) = _installations(api, server)
        every = earlier + responses
        assert {r.json()["installation"]["id"] for r in every} == {installation["id"]}
        ids = [r.json()["deployment"]["id"] for r in every]
        assert len(set(ids)) == len(ids)
        deployments = [self._deployment(api, i) for i in ids]
        queued = [d for d in deployments if d["state"] == "queued"]
        canceled = [d for d in deployments if d["state"] == "canceled"]
        assert len(queued) == 1, [d["state"] for d in deployments]
        assert len(canceled) == len(deployments) - 1
        assert installation["lastDeployment"]["id"] == queued[0]["id"]
        # A chain: each canceled one names the deployment that superseded it, all different.
        successors = [d["error"].removeprefix("Superseded by deployment ") for d in canceled]
        assert sorted(s.rstrip(".") for s in successors) == sorted(
            i for i in ids if i != canceled_root(deployments)
        )


def canceled_root(deployments: list[dict[str, Any]]) -> str:
    """The deployment no other one superseded: the first, by creation."""
    first: str = min(deployments, key=lambda d: (d["createdAt"], d["id"]))["id"]
    return first
