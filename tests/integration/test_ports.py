"""Ports and stops on real Docker (issue 24): ``hostPort`` publishes the container port
on another host port (pre-checked, recorded), ``stopGraceSeconds`` bounds a stop (with a
``stopping`` status while it runs), and a health wait ends as soon as the app logs that
it listens on another port.

Over a real sshd and locally (``berth serve --local``). The health deadline here is
30 s (not ``FAST_ENV``'s 3 s), so a wait that ends early is seen to.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from deploy_support import (
    ECHO_V1,
    Stack,
    containers_of,
    deployed,
    get_app,
    get_json,
    holders_of,
    host_port,
)
from harness import Api, problem
from infra import held_port

pytestmark = pytest.mark.integration

#: The container port the apps of this module listen on: one host port cannot be
#: published twice, but every container can listen on the same port inside.
INSIDE = 8080


STACK_ENV = {"BERTH_HEALTH_TIMEOUT": "30"}


def deploy_body(server_id: str, name: str, **fields: Any) -> dict[str, Any]:
    """A deploy of the echo app listening on ``INSIDE``, with ``fields`` added."""
    env = {"PORT": str(INSIDE), **fields.pop("env", {})}
    return {"serverId": server_id, "name": name, "image": ECHO_V1, "port": INSIDE, "env": env}


def post_deploy(api: Api, body: dict[str, Any], wait: int = 60) -> Any:
    return api.post("/api/agent/docker/deploy", params={"wait": wait}, json=body, timeout=wait + 30)


def bindings(installation_id: str) -> dict[str, Any]:
    """The port bindings of the installation's port holder, as Docker has them (its only
    container, which joins the holder, publishes none)."""
    [container] = containers_of(installation_id)
    assert not container["HostConfig"]["PortBindings"]
    [holder] = holders_of(installation_id)
    found: dict[str, Any] = holder["HostConfig"]["PortBindings"]
    return found


# -- hostPort ------------------------------------------------------------------------------


def test_host_port_publishes_the_container_port_and_is_recorded(
    stack: Stack, target: tuple[Api, str, str]
) -> None:
    """``hostPort`` publishes ``port`` on another host port: the app answers there, the
    installation, its revision and the containers list say so, and a second app on the
    same container port with another host port deploys beside it."""
    api, server_id, transport = target
    outside = host_port()
    body = {**deploy_body(server_id, stack.name(f"hp-{transport}")), "hostPort": outside}
    deployment, installation = deployed(post_deploy(api, body), "succeeded")
    assert get_app(outside).text == "hello from v1\n"
    assert bindings(installation["id"]) == {
        f"{INSIDE}/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(outside)}]
    }
    assert installation["hostPort"] == outside
    assert installation["url"].endswith(f":{outside}")
    assert deployment["port"] == INSIDE
    assert deployment["hostPort"] == outside
    revisions = get_json(api, f"/api/agent/installations/{installation['id']}/deployments")
    assert revisions["deployments"][0]["hostPort"] == outside
    listed = get_json(api, f"/api/agent/servers/{server_id}/containers")["containers"]
    [mine] = [c for c in listed if c["installationId"] == installation["id"]]
    assert {"hostPort": outside, "containerPort": INSIDE} in [
        {"hostPort": p.get("hostPort"), "containerPort": p["containerPort"]} for p in mine["ports"]
    ]

    beside = host_port()
    body = {**deploy_body(server_id, stack.name(f"hp2-{transport}")), "hostPort": beside}
    _, second = deployed(post_deploy(api, body), "succeeded")
    assert get_app(beside).text == "hello from v1\n"
    assert second["hostPort"] == beside


def test_a_held_host_port_is_a_409_at_host_port(stack: Stack, target: tuple[Api, str, str]) -> None:
    """The pre-check asks about the host port, not the container port: a host port a
    process holds is a 409 port-in-use at ``body.hostPort`` naming it, before anything is
    written; the container port being held on the host does not matter."""
    api, server_id, transport = target
    outside = host_port()
    name = stack.name(f"hp-held-{transport}")
    with held_port(outside):
        body = problem(post_deploy(api, {**deploy_body(server_id, name), "hostPort": outside}), 409)
    assert body["type"].endswith(":port-in-use")
    assert [e["location"] for e in body["errors"]] == ["body.hostPort"]
    assert f"Host port {outside} is already in use on this server" in body["detail"]
    listed = get_json(api, f"/api/agent/install?serverId={server_id}")["installations"]
    assert name not in [i["name"] for i in listed]


def test_host_port_is_checked_like_a_port_and_refused_with_a_domain(stack: Stack) -> None:
    """``hostPort`` outside 1-65535 is a 422 at ``body.hostPort``; with a domain (reached
    through the proxy, so published on no host port of its own) it is a 422 too."""
    api, server_id = stack.alice.api, stack.alice.servers["local"]
    name = stack.name("hp-bad")
    wrong = problem(post_deploy(api, {**deploy_body(server_id, name), "hostPort": 70000}), 422)
    assert [e["location"] for e in wrong["errors"]] == ["body.hostPort"]
    body = {**deploy_body(server_id, name), "hostPort": host_port(), "domain": "hp.example.com"}
    with_domain = problem(post_deploy(api, body), 422)
    assert [e["location"] for e in with_domain["errors"]] == ["body.hostPort"]


# -- stopGraceSeconds and the stopping state ----------------------------------------------


def test_stop_grace_bounds_a_stop_and_the_app_reads_stopping_meanwhile(
    stack: Stack, target: tuple[Api, str, str]
) -> None:
    """An app that ignores SIGTERM stops after its ``stopGraceSeconds`` (not Docker's
    10 s); while the stop runs, the installation's status is ``stopping``; then
    ``stopped``."""
    api, server_id, transport = target
    body = {
        **deploy_body(
            server_id, stack.name(f"grace-{transport}"), env={"BERTH_TEST_IGNORE_TERM": "1"}
        ),
        "hostPort": host_port(),
        "stopGraceSeconds": 3,
    }
    deployment, installation = deployed(post_deploy(api, body), "succeeded")
    assert deployment["stopGraceSeconds"] == 3
    path = f"/api/agent/installations/{installation['id']}"
    seen: list[str] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():  # ends with the stop call below
            seen.append(get_json(api, path)["status"])
            time.sleep(0.1)

    watcher = threading.Thread(target=watch)
    watcher.start()
    started = time.monotonic()
    try:
        stopped = api.post(f"{path}/stop", timeout=60)
    finally:
        took = time.monotonic() - started
        done.set()
        watcher.join()
    assert stopped.status_code == 200, stopped.text
    assert stopped.json()["status"] == "stopped"
    assert 2.5 <= took < 8, took  # SIGKILL after 3 s, not after Docker's 10
    assert "stopping" in seen, seen

    started = time.monotonic()
    restarted = api.post(f"{path}/restart", timeout=60)
    assert restarted.status_code == 200, restarted.text
    assert time.monotonic() - started < 8  # a restart that stops nothing running is quick


def test_stop_grace_is_checked(stack: Stack) -> None:
    """``stopGraceSeconds`` outside 0-600 is a 422 at ``body.stopGraceSeconds``."""
    api, server_id = stack.alice.api, stack.alice.servers["local"]
    for wrong in (-1, 601, 1.5, "10"):
        body = {**deploy_body(server_id, stack.name("grace-bad")), "stopGraceSeconds": wrong}
        refused = problem(post_deploy(api, body), 422)
        assert [e["location"] for e in refused["errors"]] == ["body.stopGraceSeconds"], wrong


# -- the health wait ends early -------------------------------------------------------------


def test_a_health_wait_ends_when_the_app_logs_another_port(
    stack: Stack, target: tuple[Api, str, str]
) -> None:
    """An app that logs that it listens on another port than the deployed one fails at
    health within seconds (the deadline is 30 s here), saying which port it logged."""
    api, server_id, transport = target
    outside = host_port()
    body = {
        **deploy_body(server_id, stack.name(f"early-{transport}"), env={"PORT": "3000"}),
        "hostPort": outside,
    }
    started = time.monotonic()
    deployment, installation = deployed(post_deploy(api, body), "failed")
    assert time.monotonic() - started < 15
    assert deployment["step"] == "health"
    assert deployment["error"] == (
        "health: The app logged 'listening on 3000'; it was deployed with port "
        f"{INSIDE}: set port to 3000, or make the app listen on {INSIDE}."
    ), deployment["error"]
    assert containers_of(installation["id"]) == []
