"""Apps under watch, end to end (issue 24): a real ``berth serve --local`` with the monitor
at its default pace (a pass every 5 s), an app deployed to a real sshd and to this
machine, and Docker changed behind berth's back -- killed, stopped, started, removed,
crashing in a loop. Each change reads in the API within 30 s and reaches a webhook
receiver on loopback as ``installation.down`` / ``installation.up``; a crash loop is
told once. The same with the event streams off shows the monitor's inventory alone
keeps the promise (the fallback)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import docker.errors
import pytest
from deploy_support import ECHO_V1, TRANSPORTS, Stack, deployed, get_json, host_port
from harness import Api
from infra import docker_client
from test_webhooks import Receiver

pytestmark = pytest.mark.integration

#: The monitor at its default pace; webhooks polled fast; loopback receivers allowed.
ENV = {
    "BERTH_MONITOR_SECONDS": "5",
    "BERTH_WEBHOOK_POLL_SECONDS": "0.2",
    "BERTH_ALLOW_PRIVATE_TARGETS": "1",
}
#: What the issue asks: a change seen within this many seconds.
SEEN_WITHIN = 30.0


@pytest.fixture(scope="module", params=["events", "inventory"])
def stack_env(request: pytest.FixtureRequest) -> dict[str, str]:
    """The ``stack`` (conftest's) with Docker's event streams held open (``events``), or
    without them (``inventory``: the monitor's pass alone)."""
    return dict(ENV, BERTH_CONTAINER_EVENTS="1" if request.param == "events" else "0")


@pytest.fixture(scope="module")
def receiver(stack: Stack) -> Iterator[Receiver]:
    """A receiver on loopback, alice's webhook for installation.down and .up to it."""
    found = Receiver(failures=0)
    created = stack.alice.api.post(
        "/api/agent/webhooks",
        json={"url": found.url, "events": ["installation.down", "installation.up"]},
    )
    assert created.status_code == 201, created.text
    yield found
    found.close()


def _deploy(stack: Stack, transport: str, what: str, restart: str) -> tuple[str, str]:
    """Deploy the echo app with ``restart``; its installation id and container id."""
    api, server_id = stack.alice.api, stack.alice.servers[transport]
    port = host_port()
    name = stack.name(f"{what}-{transport}")
    body: dict[str, Any] = {
        "serverId": server_id,
        "name": name,
        "image": ECHO_V1,
        "port": port,
        "env": {"PORT": str(port)},
        "restart": restart,
    }
    response = api.post("/api/agent/docker/deploy", params={"wait": 60}, json=body, timeout=90)
    _, installation = deployed(response, "succeeded")
    assert installation["status"] == "running"
    client = docker_client()
    try:
        (row,) = client.api.containers(
            filters={"label": f"berth.installation={installation['id']}"}
        )
    finally:
        client.close()
    return installation["id"], row["Id"]


def _installation(api: Api, installation_id: str) -> dict[str, Any]:
    return get_json(api, f"/api/agent/installations/{installation_id}")


def _until_status(api: Api, installation_id: str, status: str) -> dict[str, Any]:
    """The installation once its status is ``status``; fails past ``SEEN_WITHIN``."""
    deadline = time.monotonic() + SEEN_WITHIN
    while True:
        found = _installation(api, installation_id)
        if found["status"] == status:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"still {found['status']!r}, not {status!r}, after 30 s")
        time.sleep(0.2)


def _events(receiver: Receiver, installation_id: str) -> list[dict[str, Any]]:
    with receiver.lock:
        bodies = [json.loads(body) for _, body, _ in receiver.requests]
    return [b for b in bodies if b["data"].get("installationId") == installation_id]


def _until_told(receiver: Receiver, installation_id: str, count: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + SEEN_WITHIN
    while len(found := _events(receiver, installation_id)) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(found)} of {count} webhook events after 30 s: {found}")
        time.sleep(0.2)
    return found


def _docker(action: str, container_id: str) -> None:
    client = docker_client()
    try:
        if action == "kill":
            client.api.kill(container_id)
        elif action == "stop":
            client.api.stop(container_id, timeout=1)
        elif action == "start":
            client.api.start(container_id)
        elif action == "rm":
            client.api.remove_container(container_id, force=True)
    finally:
        client.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_killed_then_started_behind_berths_back(
    stack: Stack, receiver: Receiver, transport: str
) -> None:
    """restart "no", docker kill: exited (137, with its time) within 30 s and one
    installation.down; docker start: running within 30 s and one installation.up."""
    api = stack.alice.api
    installation_id, container_id = _deploy(stack, transport, "killed", "no")
    _docker("kill", container_id)
    exited = _until_status(api, installation_id, "exited")
    assert exited["exitCode"] == 137
    assert exited["exitedAt"] is not None
    (down,) = _until_told(receiver, installation_id, 1)
    assert down["type"] == "installation.down"
    assert down["data"]["state"] == "exited"
    assert down["data"]["exitCode"] == 137
    assert down["data"]["installationName"] == stack.name(f"killed-{transport}")

    _docker("start", container_id)
    running = _until_status(api, installation_id, "running")
    assert running["exitCode"] is None
    told = _until_told(receiver, installation_id, 2)
    assert [e["type"] for e in told] == ["installation.down", "installation.up"]
    # The history: both changes are events in the current revision's log.
    deployment = get_json(api, f"/api/agent/deployments/{running['currentDeploymentId']}")
    assert [e["step"] for e in deployment["events"] if e["step"] in ("down", "up")] == [
        "down",
        "up",
    ]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_stopped_behind_berths_back(stack: Stack, receiver: Receiver, transport: str) -> None:
    """docker stop of an app berth did not stop: exited within 30 s, told down; berth's
    Start brings it back (running, told up)."""
    api = stack.alice.api
    installation_id, container_id = _deploy(stack, transport, "stopped", "unless-stopped")
    _docker("stop", container_id)
    exited = _until_status(api, installation_id, "exited")
    assert exited["exitCode"] is not None
    _until_told(receiver, installation_id, 1)
    started = api.post(f"/api/agent/installations/{installation_id}/start")
    assert started.status_code == 200, started.text
    assert started.json()["status"] == "running"
    told = _until_told(receiver, installation_id, 2)
    assert [e["type"] for e in told] == ["installation.down", "installation.up"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_removed_behind_berths_back(stack: Stack, receiver: Receiver, transport: str) -> None:
    """docker rm -f: missing within 30 s (not "running" for 10 minutes), told down."""
    api = stack.alice.api
    installation_id, container_id = _deploy(stack, transport, "removed", "unless-stopped")
    _docker("rm", container_id)
    _until_status(api, installation_id, "missing")
    (down,) = _until_told(receiver, installation_id, 1)
    assert down["type"] == "installation.down"
    # Docker's stream tells the kill (exited) before the removal: the first is told.
    assert down["data"]["state"] in ("exited", "missing")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_crash_loop_is_told_once(
    stack: Stack, receiver: Receiver, transport: str, request: pytest.FixtureRequest
) -> None:
    """An app whose process dies again and again (killed from the host, so Docker's
    restart policy restarts it each time): restartCount climbs, one installation.down,
    no installation.up while it loops."""
    if request.node.callspec.params["stack_env"] == "inventory":
        pytest.skip("three crashes in a second fall between two passes of the inventory")
    api = stack.alice.api
    installation_id, container_id = _deploy(stack, transport, "looping", "always")
    client = docker_client()
    try:
        for crash in range(1, 4):
            pid = _pid_when_running(client, container_id, crash - 1)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _pid_when_running(client, container_id, 3)
    finally:
        client.close()
    (down,) = _until_told(receiver, installation_id, 1)
    assert down["type"] == "installation.down"
    seen = _until_count(api, installation_id, 3)
    assert seen["status"] in ("running", "restarting")
    time.sleep(6)  # more than a monitor pass: nothing more is told while it loops
    assert [e["type"] for e in _events(receiver, installation_id)] == ["installation.down"]


def _pid_when_running(client: Any, container_id: str, restarts: int) -> int:
    """The container's process id once it runs after ``restarts`` restarts."""
    deadline = time.monotonic() + SEEN_WITHIN
    while time.monotonic() < deadline:
        with contextlib.suppress(docker.errors.NotFound):
            state = client.api.inspect_container(container_id)
            pid = int(state["State"]["Pid"] or 0)
            if state["State"]["Running"] and state["RestartCount"] >= restarts and pid:
                return pid
        time.sleep(0.05)
    raise AssertionError(f"the container did not run again after {restarts} restarts")


def _until_count(api: Api, installation_id: str, restarts: int) -> dict[str, Any]:
    deadline = time.monotonic() + SEEN_WITHIN
    while True:
        found = _installation(api, installation_id)
        if found["restartCount"] >= restarts:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"restartCount {found['restartCount']} after 30 s")
        time.sleep(0.2)
