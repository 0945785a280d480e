"""Revisions through the public API, on real Docker over SSH and locally: rollback, the
history kept after removal, stop/start/restart, cancel, deploy options, and the servers
that refuse deploys at once.

The run side (safe redeploys, failover) is in ``test_safe_redeploys.py``.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import pytest
from deploy_support import (
    ECHO_V1,
    RUN,
    Stack,
    containers_of,
    deploy,
    deployed,
    deployment_of,
    get_app,
    get_json,
    host_port,
    queue_never_listening,
    wait_final,
)
from harness import Api, new_server, problem
from infra import build_echo_image

pytestmark = pytest.mark.integration

# Health waits long enough for a cancel to come while a deployment is in it.
STACK_ENV = {"BERTH_HEALTH_TIMEOUT": "30"}


@pytest.fixture(scope="module")
def echo_v2(docker_ready: None) -> str:
    return build_echo_image("v2")


def _answer(port: int, seconds: float = 10) -> str:
    """What the app answers once it listens: a start on request returns when Docker has
    started its container, and the app may still be opening its port (refused then:
    nothing listens in its port holder's namespace yet)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return get_app(port).text.strip()
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _refused(port: int) -> bool:
    try:
        get_app(port)
    except httpx.TransportError:
        return True
    return False


def _revisions(api: Api, installation_id: str, **params: Any) -> dict[str, Any]:
    return get_json(api, f"/api/agent/installations/{installation_id}/deployments", **params)


def _rollback(api: Api, installation_id: str, body: Any = None, **params: Any) -> httpx.Response:
    kwargs: dict[str, Any] = {"params": params or None, "timeout": 90}
    if body is not None:
        kwargs["json"] = body
    return api.post(f"/api/agent/installations/{installation_id}/rollback", **kwargs)


class TestRollback:
    def test_rollback_runs_the_previous_revision_again(
        self, stack: Stack, target: tuple[Api, str, str], echo_v2: str
    ) -> None:
        """After v1 then v2, a rollback with no body deploys v1's spec again; the app
        answers as v1 and the rollback is the current revision."""
        api, server_id, transport = target
        name, port = stack.name(f"rollback-{transport}"), host_port()
        first, _ = deployed(deploy(api, server_id, name, port, env={"MARK": "one"}), "succeeded")
        second, _ = deployed(deploy(api, server_id, name, port, image=echo_v2), "succeeded")
        assert _answer(port) == "hello from v2"
        response = _rollback(api, second["installationId"], wait=60)
        rolled, installation = deployed(response, "succeeded")
        assert rolled["rollbackOf"] == first["id"]
        assert rolled["image"] == ECHO_V1
        assert rolled["envKeys"] == ["MARK", "PORT"]
        assert _answer(port) == "hello from v1"
        assert installation["currentDeploymentId"] == rolled["id"]
        assert installation["image"] == ECHO_V1
        assert installation["status"] == "running"
        history = _revisions(api, installation["id"])
        assert [d["id"] for d in history["deployments"]] == [
            rolled["id"],
            second["id"],
            first["id"],
        ]
        assert history["nextBefore"] is None
        running = [c for c in containers_of(installation["id"]) if c["State"]["Running"]]
        assert len(running) == 1

    def test_rollback_to_a_named_revision_and_its_refusals(
        self, stack: Stack, echo_v2: str
    ) -> None:
        """``deploymentId`` picks the revision; a failed one is a 409 at body.deploymentId,
        another user's a 404, a malformed one or an unknown field a 422."""
        api, server_id = stack.alice.api, stack.alice.servers["local"]
        name, port = stack.name("rollback-named"), host_port()
        first, _ = deployed(deploy(api, server_id, name, port), "succeeded")
        broken, installation = deployed(
            deploy(api, server_id, name, port, env={"BERTH_TEST_MODE": "exit"}), "failed"
        )
        refused = problem(_rollback(api, installation["id"], {"deploymentId": broken["id"]}), 409)
        assert refused["type"] == "urn:berth:problem:revision-unavailable"
        assert [e["location"] for e in refused["errors"]] == ["body.deploymentId"]
        theirs, _ = deployed(
            deploy(stack.bob.api, stack.bob.servers["ssh"], stack.name("bobs"), host_port()),
            "succeeded",
        )
        problem(_rollback(api, installation["id"], {"deploymentId": theirs["id"]}), 404)
        bad = problem(_rollback(api, installation["id"], {"deploymentId": "nope", "x": 1}), 422)
        assert sorted(e["location"] for e in bad["errors"]) == ["body.deploymentId", "body.x"]
        problem(_rollback(stack.bob.api, installation["id"]), 404)  # not bob's installation
        response = _rollback(api, installation["id"], {"deploymentId": first["id"]}, wait=60)
        rolled, _ = deployed(response, "succeeded")
        assert rolled["rollbackOf"] == first["id"]
        assert _answer(port) == "hello from v1"

    def test_nothing_to_roll_back_to_is_a_409(self, stack: Stack) -> None:
        """A first revision has nothing before it."""
        api, server_id = stack.alice.api, stack.alice.servers["local"]
        _, installation = deployed(
            deploy(api, server_id, stack.name("rollback-none"), host_port()), "succeeded"
        )
        body = problem(_rollback(api, installation["id"]), 409)
        assert body["type"] == "urn:berth:problem:revision-unavailable"


class TestHistory:
    def test_removal_keeps_the_history(self, stack: Stack, target: tuple[Api, str, str]) -> None:
        """Removing an app removes its containers and marks it removed; its deployments stay
        readable and listable; the name deploys again as a new installation."""
        api, server_id, transport = target
        name, port = stack.name(f"history-{transport}"), host_port()
        first, installation = deployed(deploy(api, server_id, name, port), "succeeded")
        assert api.delete(f"/api/agent/installations/{installation['id']}").status_code == 204
        assert containers_of(installation["id"]) == []
        assert deployment_of(api, first["id"])["state"] == "succeeded"
        removed = get_json(api, f"/api/agent/installations/{installation['id']}")
        assert removed["status"] == "removed"
        assert removed["removedAt"] is not None
        listed = get_json(api, "/api/agent/install", serverId=server_id)["installations"]
        assert installation["id"] not in [i["id"] for i in listed]
        everything = get_json(api, "/api/agent/install", serverId=server_id, include="removed")
        assert installation["id"] in [i["id"] for i in everything["installations"]]
        assert [d["id"] for d in _revisions(api, installation["id"])["deployments"]] == [
            first["id"]
        ]
        problem(api.delete(f"/api/agent/installations/{installation['id']}"), 404)
        again, reborn = deployed(deploy(api, server_id, name, port), "succeeded")
        assert reborn["id"] != installation["id"]
        assert again["installationId"] == reborn["id"]
        assert _answer(port) == "hello from v1"

    def test_pages_of_revisions(self, stack: Stack) -> None:
        """``limit`` and ``before`` walk the history newest first; bad values are 422s."""
        api, server_id = stack.alice.api, stack.alice.servers["local"]
        name, port = stack.name("pages"), host_port()
        ids = []
        for _ in range(3):
            deployment, installation = deployed(deploy(api, server_id, name, port), "succeeded")
            ids.append(deployment["id"])
        page = _revisions(api, installation["id"], limit=2)
        assert [d["id"] for d in page["deployments"]] == ids[::-1][:2]
        rest = _revisions(api, installation["id"], limit=2, before=page["nextBefore"])
        assert [d["id"] for d in rest["deployments"]] == [ids[0]]
        assert rest["nextBefore"] is None
        path = f"/api/agent/installations/{installation['id']}/deployments"
        bad = problem(api.get(path, params={"limit": "0", "before": "x"}), 422)
        assert sorted(e["location"] for e in bad["errors"]) == ["query.before", "query.limit"]
        include = problem(
            api.get("/api/agent/install", params={"serverId": server_id, "include": "all"}), 422
        )
        assert [e["location"] for e in include["errors"]] == ["query.include"]
        problem(stack.bob.api.get(path), 404)


class TestLifecycle:
    def test_stop_start_restart(self, stack: Stack, target: tuple[Api, str, str]) -> None:
        """Stop keeps the container but stops it (status stopped, port refused); start and
        restart bring it back; each is an event of the current revision."""
        api, server_id, transport = target
        port = host_port()
        deployment, installation = deployed(
            deploy(api, server_id, stack.name(f"life-{transport}"), port), "succeeded"
        )
        base = f"/api/agent/installations/{installation['id']}"
        stopped = api.post(f"{base}/stop")
        assert stopped.status_code == 200, stopped.text
        assert stopped.json()["status"] == "stopped"
        assert _refused(port)
        (container,) = containers_of(installation["id"])
        assert container["State"]["Running"] is False
        started = api.post(f"{base}/start")
        assert started.status_code == 200, started.text
        assert started.json()["status"] == "running"
        assert _answer(port) == "hello from v1"
        restarted = api.post(f"{base}/restart")
        assert restarted.status_code == 200, restarted.text
        assert _answer(port) == "hello from v1"
        messages = [e["message"] for e in deployment_of(api, deployment["id"])["events"]]
        assert messages[-3:] == [
            "Stopped on request.",
            "Started on request.",
            "Restarted on request.",
        ]
        problem(stack.bob.api.post(f"{base}/stop"), 404)


class TestCancel:
    def test_cancel_a_queued_deployment(self, stack: Stack) -> None:
        """A deployment waiting for an offline server is canceled at once; canceling it
        again is a 409; another user's is a 404; the installation is not running."""
        api = stack.alice.api
        server = new_server(api)  # enrolled, but nothing answers: its deployments wait
        response = deploy(api, server["id"], stack.name("cancel-queued"), host_port(), wait=None)
        assert response.status_code == 202, response.text
        queued = response.json()["deployment"]
        assert any("waits" in e["message"] for e in queued["events"])
        path = f"/api/agent/deployments/{queued['id']}/cancel"
        problem(stack.bob.api.post(path), 404)
        canceled = api.post(path)
        assert canceled.status_code == 200, canceled.text
        assert canceled.json()["state"] == "canceled"
        again = problem(api.post(path), 409)
        assert again["type"] == "urn:berth:problem:deployment-finished"
        problem(api.post(f"/api/agent/deployments/{uuid.uuid4()}/cancel"), 404)

    def test_cancel_a_running_redeploy_puts_the_previous_revision_back(
        self, stack: Stack, target: tuple[Api, str, str]
    ) -> None:
        """A running redeploy canceled: the call answers 200 ``canceled`` once its worker
        stopped it, and the previous revision answers on the port again."""
        api, server_id, transport = target
        name, port = stack.name(f"cancel-running-{transport}"), host_port()
        first, _ = deployed(deploy(api, server_id, name, port), "succeeded")
        running = queue_never_listening(
            api,
            server_id,
            name,
            port,
            lambda d: d["state"] == "running",
            15,
            "the redeploy running",
        )["deployment"]
        canceled = api.post(f"/api/agent/deployments/{running['id']}/cancel", timeout=60)
        assert canceled.status_code == 200, canceled.text
        assert canceled.json()["state"] == "canceled"
        assert canceled.headers["location"] == f"/api/agent/deployments/{running['id']}"
        installation = get_json(api, f"/api/agent/installations/{first['installationId']}")
        assert installation["status"] == "running"
        assert installation["currentDeploymentId"] == first["id"]
        assert _answer(port) == "hello from v1"

    def test_cancel_a_running_first_deploy_ends_canceled(
        self, stack: Stack, target: tuple[Api, str, str]
    ) -> None:
        """An app's first deployment canceled while it waits for its port ends
        ``canceled``, says no earlier revision serves instead, leaves no container, and
        the app is ``pending`` as before it (never deployed), not ``failed`` (issue 28)."""
        api, server_id, transport = target
        name, port = stack.name(f"cancel-first-{transport}"), host_port()
        running = queue_never_listening(
            api,
            server_id,
            name,
            port,
            lambda d: d["state"] == "running" and d["step"] == "health",
            30,
            "the first deploy waiting for its port",
        )["deployment"]
        canceled = api.post(f"/api/agent/deployments/{running['id']}/cancel", timeout=60)
        assert canceled.status_code == 200, canceled.text
        ended = canceled.json()
        assert ended["state"] == "canceled", ended
        assert ended["error"] == "canceled on request", ended
        last = ended["events"][-1]["message"]
        assert "no previous revision" in last, ended["events"]
        assert "previous revision is serving" not in last
        installation = get_json(api, f"/api/agent/installations/{running['installationId']}")
        assert installation["currentDeploymentId"] is None, installation
        assert installation["status"] == "pending", installation
        assert containers_of(installation["id"]) == []

    def test_a_pending_server_refuses_deploys(self, stack: Stack) -> None:
        """A server that never enrolled is a 409 naming why, and nothing is written."""
        api = stack.alice.api
        pending = new_server(api, enrolled=False)
        body = problem(deploy(api, pending["id"], stack.name("pending"), host_port()), 409)
        assert body["type"] == "urn:berth:problem:server-pending"
        assert "install command" in body["detail"]
        listed = get_json(api, "/api/agent/install", serverId=pending["id"])["installations"]
        assert listed == []


class TestOptions:
    def test_options_reach_docker(self, stack: Stack, target: tuple[Api, str, str]) -> None:
        """memory, cpus, restart and command become the container's limits, policy and Cmd;
        the deployment and the installation report them."""
        api, server_id, transport = target
        port = host_port()
        response = api.post(
            "/api/agent/docker/deploy",
            params={"wait": 60},
            json={
                "serverId": server_id,
                "name": stack.name(f"options-{transport}"),
                "image": ECHO_V1,
                "port": port,
                "env": {"PORT": str(port)},
                "memory": "64m",
                "cpus": 0.5,
                "restart": "on-failure",
                "command": ["--ignored", "$(id)", "a b"],
            },
            timeout=90,
        )
        deployment, installation = deployed(response, "succeeded")
        for shown in (deployment, installation):
            assert shown["memory"] == 64 * 1024 * 1024
            assert shown["cpus"] == 0.5
            assert shown["restart"] == "on-failure"
            assert shown["command"] == ["--ignored", "$(id)", "a b"]
        (container,) = containers_of(installation["id"])
        host = container["HostConfig"]
        assert host["Memory"] == 64 * 1024 * 1024
        assert host["NanoCpus"] == 500_000_000
        assert host["RestartPolicy"]["Name"] == "on-failure"
        assert container["Config"]["Cmd"] == ["--ignored", "$(id)", "a b"]

    def test_bad_options_are_named(self, stack: Stack) -> None:
        """Every wrong option is a 422 at its own location, all at once, nothing written."""
        api, server_id = stack.alice.api, stack.alice.servers["local"]
        name = stack.name("bad-options")
        body = problem(
            api.post(
                "/api/agent/docker/deploy",
                json={
                    "serverId": server_id,
                    "name": name,
                    "image": ECHO_V1,
                    "memory": "5m",
                    "cpus": 0,
                    "restart": "sometimes",
                    "healthPath": "health check",
                    "command": "node server.js",
                },
            ),
            422,
        )
        assert sorted(e["location"] for e in body["errors"]) == [
            "body.command",
            "body.cpus",
            "body.healthPath",
            "body.memory",
            "body.restart",
        ]
        listed = get_json(api, "/api/agent/install", serverId=server_id)["installations"]
        assert name not in [i["name"] for i in listed]


def test_a_finished_deployment_is_not_running(stack: Stack) -> None:
    """Cancel of a succeeded deployment is a 409 and changes nothing."""
    api, server_id = stack.alice.api, stack.alice.servers["local"]
    port = host_port()
    deployment, _ = deployed(deploy(api, server_id, stack.name("cancel-done"), port), "succeeded")
    problem(api.post(f"/api/agent/deployments/{deployment['id']}/cancel"), 409)
    assert wait_final(api, deployment["id"], 1)["state"] == "succeeded"
    assert _answer(port) == "hello from v1"
    assert RUN in stack.prefix
