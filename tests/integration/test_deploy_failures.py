"""Deployments that cannot succeed, end to end: each ends in a clear final state with a
message that names the step and quotes Docker, and leaves no container behind.

Over a real sshd and locally (``berth serve --local``); health and queue deadlines are
3 s (``deploy_support.FAST_ENV``) so every failure shows within seconds.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import docker.errors
import pytest
from deploy_support import (
    RUN,
    Stack,
    add_ssh_server,
    containers_of,
    deploy,
    deployed,
    get_json,
    host_port,
    inspect_named,
    log_lines,
    random_host_key,
    server_of,
    steps,
    wait_until,
)
from harness import Api, problem
from infra import RUN_LABEL, docker_client, held_port

pytestmark = pytest.mark.integration

MISSING_IMAGE = f"berth-test/missing-{RUN}:nope"


# -- on the server -----------------------------------------------------------------------


def test_missing_image_fails_at_pull_quoting_docker(
    stack: Stack, target: tuple[Api, str, str]
) -> None:
    """An image Docker cannot pull fails quickly at step pull, naming the cause (no
    registry answers here) and quoting Docker's reason."""
    api, server_id, transport = target
    client = docker_client()
    try:
        with pytest.raises(docker.errors.APIError) as refused:
            client.api.pull(MISSING_IMAGE)
    finally:
        client.close()
    docker_says = str(refused.value.explanation)
    started = time.monotonic()
    response = deploy(
        api, server_id, stack.name(f"missing-{transport}"), host_port(), image=MISSING_IMAGE
    )
    deployment, installation = deployed(response, "failed")
    assert time.monotonic() - started < 15
    assert deployment["step"] == "pull"
    assert deployment["error"].startswith(
        ("pull: registry unreachable: docker.io", "pull: unauthorized: registry docker.io")
    ), deployment["error"]
    assert f"Pulling {MISSING_IMAGE} failed: " in deployment["error"]
    assert docker_says in deployment["error"]
    assert steps(deployment)[-1] == "failed"
    assert "create" not in steps(deployment)
    assert installation["status"] == "failed"
    assert containers_of(installation["id"]) == []


def seconds_between(deployment: dict[str, Any], first: str, then: str) -> float:
    """Seconds from the deployment's first event whose message starts with ``first`` to
    the next one starting with ``then`` (their times, as berth recorded them)."""
    times = iter((e["message"], datetime.fromisoformat(e["at"])) for e in deployment["events"])
    began = next(at for message, at in times if message.startswith(first))
    ended = next(at for message, at in times if message.startswith(then))
    return (ended - began).total_seconds()


def test_container_exiting_at_once_fails_at_health_with_exit_code_and_logs(
    stack: Stack, target: tuple[Api, str, str]
) -> None:
    """A container that exits at once fails at health, naming its exit code, with its output."""
    api, server_id, transport = target
    response = deploy(
        api,
        server_id,
        stack.name(f"exit-{transport}"),
        host_port(),
        env={"BERTH_TEST_MODE": "exit"},
    )
    deployment, installation = deployed(response, "failed")
    assert deployment["step"] == "health"
    # Seen at once, not at the health deadline (3 s): a wait that reaches the deadline ends
    # "did not answer within 3 s" (next test), whatever the container did meanwhile. No
    # clock is read here: on a busy machine the queue, the steps before and the removal
    # after take seconds of their own (the test's clock, and berth's, passed 3 s so).
    assert deployment["error"] == "health: The container exited with code 3 before answering."
    # Its output, with env values scrubbed (the value "exit" of BERTH_TEST_MODE included).
    assert any(
        line.startswith("log: echo v1: ") and line.endswith("ing at once as asked")
        for line in log_lines(deployment)
    ), deployment["events"]
    assert steps(deployment)[-1] == "failed"
    assert installation["status"] == "failed"
    assert containers_of(installation["id"]) == []  # the failed container is removed


def test_port_never_answering_fails_at_health_after_its_timeout(
    stack: Stack, target: tuple[Api, str, str]
) -> None:
    """A container that never opens its port fails at health after BERTH_HEALTH_TIMEOUT."""
    api, server_id, transport = target
    port = host_port()
    response = deploy(
        api,
        server_id,
        stack.name(f"nolisten-{transport}"),
        port,
        env={"BERTH_TEST_MODE": "nolisten"},
    )
    deployment, installation = deployed(response, "failed")
    waited = seconds_between(deployment, "Waiting for port ", "Removed the container that failed.")
    assert 3 <= waited < 15, deployment["events"]
    assert deployment["step"] == "health"
    assert deployment["error"] == f"health: Port {port} did not answer within 3 s."
    assert "log: echo v1: not listening, as asked" in log_lines(deployment)
    assert installation["status"] == "failed"
    assert containers_of(installation["id"]) == []


def test_a_host_port_a_process_holds_is_a_409_before_deploying(
    stack: Stack, target: tuple[Api, str, str]
) -> None:
    """A host port something outside Docker holds is a 409 port-in-use at `body.port`
    before anything is written (checked by a TCP connect over the transport)."""
    api, server_id, transport = target
    port = host_port()
    name = stack.name(f"taken-{transport}")
    with held_port(port):
        body = problem(deploy(api, server_id, name, port), 409)
    assert body["type"].endswith(":port-in-use")
    assert [e["location"] for e in body["errors"]] == ["body.port"]
    assert f"Host port {port} is already in use on this server" in body["detail"]
    assert "a process on the server outside Docker" in body["detail"]
    listed = get_json(api, f"/api/agent/install?serverId={server_id}")["installations"]
    assert name not in [i["name"] for i in listed]


def test_a_host_port_a_container_holds_is_a_409_naming_it(
    stack: Stack, target: tuple[Api, str, str], echo_image: str
) -> None:
    """A host port another (unmanaged) container publishes is a 409 naming it; a
    redeploy of an installation on its own port still succeeds."""
    api, server_id, transport = target
    port = host_port()
    squatter = stack.name(f"squatter-{transport}")
    client = docker_client()
    try:
        client.containers.run(
            echo_image,
            name=squatter,
            detach=True,
            environment={"PORT": str(port)},
            labels={RUN_LABEL: RUN},
            ports={f"{port}/tcp": ("0.0.0.0", port)},
        )
        body = problem(deploy(api, server_id, stack.name(f"clash-{transport}"), port), 409)
    finally:
        client.containers.get(squatter).remove(force=True)
        client.close()
    assert body["type"].endswith(":port-in-use")
    assert f"container '{squatter}'" in body["detail"]

    own = stack.name(f"own-{transport}")
    deployed(deploy(api, server_id, own, port), "succeeded")
    deployed(deploy(api, server_id, own, port, env={"AGAIN": "1"}), "succeeded")


def test_an_app_listening_elsewhere_is_named_after_its_health_check(
    stack: Stack, target: tuple[Api, str, str]
) -> None:
    """An app whose output says it listens on another port than the deployed one fails
    at health with that pointed out."""
    api, server_id, transport = target
    port = host_port()
    response = deploy(
        api, server_id, stack.name(f"elsewhere-{transport}"), port, env={"PORT": "3000"}
    )
    deployment, _ = deployed(response, "failed")
    assert deployment["step"] == "health"
    assert deployment["error"].endswith(
        f"Note: the app logged 'listening on 3000'; it was deployed with port {port}."
    ), deployment["error"]


# -- before the server -------------------------------------------------------------------


def test_unreachable_server_goes_offline_and_its_deploy_times_out(stack: Stack) -> None:
    """A server where nothing listens is offline with a reason; its deploy ends timed_out."""
    api = stack.alice.api
    dead_port = host_port()
    server = add_ssh_server(api, stack.sshd, stack.name("unreachable"), port=dead_port)
    offline = wait_until(
        lambda: server_of(api, server["id"]),
        lambda s: s["status"] == "offline" and s["statusDetail"],
        10,
        "unreachable server offline",
    )
    assert offline["statusDetail"].startswith("Unreachable: ")
    # In words, not asyncio's "Connect call failed ('127.0.0.1', N)" (issue 15, item 6),
    # and not which failure it was (refused here): a port scanner otherwise (issue 21).
    assert (
        f"berth could not reach 127.0.0.1 on port {dead_port} over SSH (unreachable"
        in offline["statusDetail"]
    )
    assert "Connect call failed" not in offline["statusDetail"]
    assert "refused" not in offline["statusDetail"]
    assert offline["lastSeenAt"] is None

    started = time.monotonic()
    response = deploy(api, server["id"], stack.name("to-unreachable"), host_port(), wait=30)
    deployment, installation = deployed(response, "timed_out")
    assert time.monotonic() - started < 10
    assert deployment["error"] == "The server was not reachable within 3 s of queueing."
    assert deployment["startedAt"] is None
    # queued, then "the server is offline … the deployment waits for it", then the end
    assert steps(deployment) == ["queued", "queued", "timed_out"]
    assert "waits for it" in deployment["events"][1]["message"]
    assert installation["status"] == "failed"
    containers = get_json(api, f"/api/agent/servers/{server['id']}/containers")
    assert containers["serverStatus"] == "offline"
    assert containers["observedAt"] is None


def test_host_key_mismatch_keeps_the_server_away_and_nothing_runs(stack: Stack) -> None:
    """With the wrong pinned host key berth never connects: the server is
    ``host_key_mismatch`` (with both fingerprints), a deploy to it is refused at once (409
    host-key-mismatch), nothing is written or run."""
    api = stack.alice.api
    server = add_ssh_server(api, stack.sshd, stack.name("wrong-key"), host_keys=[random_host_key()])
    offline = wait_until(
        lambda: server_of(api, server["id"]),
        lambda s: s["status"] == "host_key_mismatch" and s["statusDetail"],
        10,
        "server with a wrong host key refused",
    )
    assert "host key" in offline["statusDetail"].lower()
    assert offline["offeredHostKeyFingerprint"].startswith("SHA256:")
    assert offline["lastSeenAt"] is None
    assert offline["facts"]["dockerVersion"] is None

    name = stack.name("behind-wrong-key")
    response = deploy(api, server["id"], name, host_port(), wait=30)
    refused = problem(response, 409)  # at once, not after the queue's deadline
    assert refused["type"] == "urn:berth:problem:host-key-mismatch"
    assert "host key" in refused["detail"]
    listed = get_json(api, "/api/agent/install", serverId=server["id"])["installations"]
    assert listed == []
    assert inspect_named(name) is None
    assert server_of(api, server["id"])["status"] == "host_key_mismatch"
