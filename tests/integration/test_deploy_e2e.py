"""Deployments end to end: ``berth serve`` deploys the echo image through the public API
to a real sshd (forward-only key, pinned host key) and to this machine (``--local``);
every answer is checked against ``docker inspect`` and the running container itself.

Failure paths are in ``test_deploy_failures.py``; the shared set-up in ``deploy_support``.
"""

from __future__ import annotations

import signal
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from deploy_support import (
    ECHO_V1,
    FAST_ENV,
    RUN,
    TRICKY_ENV,
    Stack,
    containers_of,
    deploy,
    deployed,
    deployment_of,
    environ_of,
    get_app,
    get_json,
    holders_of,
    host_port,
    inspect_named,
    queue_never_listening,
    remove_containers,
    server_of,
    steps,
    wait_final,
    wait_online,
    wait_until,
)
from harness import Api, BerthProcess, problem, without_request_id
from infra import RUN_LABEL, build_echo_image, docker_client

pytestmark = pytest.mark.integration


# -- servers -----------------------------------------------------------------------------


def test_ssh_server_enrolls_with_host_keys_and_comes_online(stack: Stack) -> None:
    """POST /servers with sshUser + hostKeys returns berth's key; authorized, it goes online."""
    created = stack.alice.created["ssh"]
    assert created["transport"] == "ssh"
    assert created["sshUser"] == "berth"
    assert created["sshPort"] == stack.sshd.port
    assert created["hostKeys"] == [stack.sshd.host_public_key]
    assert created["publicKey"].startswith("ssh-ed25519 ")
    assert created["authorizedKeysLine"] == (
        'restrict,port-forwarding,permitlisten="127.0.0.1:1",command="/bin/false" '
        + created["publicKey"]
    )
    assert created["status"] in ("offline", "online")  # enrolled: never pending
    assert "PRIVATE KEY" not in str(created)  # the private key never leaves berth
    server = server_of(stack.alice.api, created["id"])
    assert server["status"] == "online"
    assert server["statusDetail"] is None
    assert server["lastSeenAt"] is not None
    client = docker_client()
    try:
        version, info = client.api.version(), client.api.info()
    finally:
        client.close()
    facts = server["facts"]
    assert facts["dockerVersion"] == version["Version"]
    assert facts["os"] == info["OperatingSystem"]
    assert facts["arch"] == info["Architecture"]
    assert facts["cpus"] == info["NCPU"]
    assert facts["memoryBytes"] == info["MemTotal"]
    # Two servers behind one sshd, each with a key pair of its own.
    assert stack.bob.created["ssh"]["publicKey"] != created["publicKey"]


def test_local_server_belongs_to_the_first_user_only(stack: Stack) -> None:
    """With --local, the first user gets one online server "local"; later users get none."""
    servers = get_json(stack.alice.api, "/api/agent/servers")["servers"]
    local = [s for s in servers if s["transport"] == "local"]
    assert len(local) == 1
    assert local[0]["name"] == "local"
    assert local[0]["status"] == "online"
    assert local[0]["facts"]["dockerVersion"]
    bob_servers = get_json(stack.bob.api, "/api/agent/servers")["servers"]
    assert [s["transport"] for s in bob_servers] == ["ssh"]


# -- deploying ---------------------------------------------------------------------------


def test_deploy_answers_and_every_view_agrees_with_docker(
    stack: Stack, target: tuple[Api, str, str]
) -> None:
    """A deploy passes every step and answers; install, deployment, containers match Docker."""
    api, server_id, transport = target
    port = host_port()
    name = f"E2E {RUN} Deploy E2E Show {transport}!"  # sanitized into the module's prefix
    response = deploy(api, server_id, name, port, env={"GREETING": "hi there"})
    deployment, installation = deployed(response, "succeeded")
    assert steps(deployment)[0] == "queued"
    assert {"pull", "create", "start", "health"} <= set(steps(deployment))
    assert steps(deployment)[-1] == "succeeded"
    assert deployment["error"] is None
    assert deployment["finishedAt"] is not None
    assert get_app(port).text == "hello from v1\n"

    container_name = stack.name(f"show-{transport}")
    assert installation["containerName"] == container_name
    assert installation["name"] == name

    # The installation, as listed.
    listing = get_json(api, "/api/agent/install", serverId=server_id)
    assert listing["serverId"] == server_id
    (listed,) = [i for i in listing["installations"] if i["id"] == installation["id"]]
    assert listed["containerName"] == container_name
    assert listed["image"] == ECHO_V1
    assert listed["port"] == port
    assert listed["domain"] is None
    assert listed["url"] == f"http://127.0.0.1:{port}"
    assert listed["envKeys"] == ["GREETING", "PORT"]
    assert listed["status"] == "running"
    assert listed["lastDeployment"]["id"] == deployment["id"]
    assert listed["lastDeployment"]["state"] == "succeeded"
    assert "hi there" not in str(listing)  # env values are never returned

    # The deployment, as read back.
    read = deployment_of(api, deployment["id"])
    assert read["state"] == "succeeded"
    assert read["installationId"] == installation["id"]
    assert read["serverId"] == server_id
    assert read["image"] == ECHO_V1
    assert read["port"] == port
    assert read["envKeys"] == ["GREETING", "PORT"]
    assert steps(read) == steps(deployment)

    # docker inspect: the one container of this installation.
    (inspected,) = containers_of(installation["id"])
    assert inspected["Name"] == f"/{container_name}"
    assert inspected["State"]["Running"] is True
    assert inspected["Config"]["Image"] == ECHO_V1
    labels = inspected["Config"]["Labels"]
    assert labels["berth.managed"] == "true"
    assert labels["berth.installation"] == installation["id"]
    assert labels["berth.deployment"] == deployment["id"]
    assert {f"PORT={port}", "GREETING=hi there"} <= set(inspected["Config"]["Env"])
    assert inspected["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    # Its port is its port holder's, whose network it joins (the holder is berth's own).
    (holder,) = holders_of(installation["id"])
    assert inspected["HostConfig"]["NetworkMode"] in (
        f"container:{holder['Name'].lstrip('/')}",
        f"container:{holder['Id']}",
    )
    assert holder["HostConfig"]["PortBindings"] == {
        f"{port}/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(port)}]
    }

    # The container list, live from the server.
    containers = get_json(api, f"/api/agent/servers/{server_id}/containers")
    assert containers["serverId"] == server_id
    assert containers["serverStatus"] == "online"
    assert containers["observedAt"] is not None
    (row,) = [c for c in containers["containers"] if c["id"] == inspected["Id"]]
    assert row["name"] == container_name
    assert row["image"] == ECHO_V1
    assert row["state"] == "running"
    assert row["installationId"] == installation["id"]
    assert {"containerPort": port, "hostIp": "0.0.0.0", "hostPort": port, "protocol": "tcp"} in (
        row["ports"]
    )


def test_each_listed_container_names_the_image_docker_says_it_runs(
    stack: Stack, target: tuple[Api, str, str]
) -> None:
    """A container's ``imageId`` in the list is the ``Image`` of ``docker inspect``: the
    id of the image it runs, not the tag it was made from."""
    api, server_id, transport = target
    client = docker_client()
    try:
        made = client.api.create_container(
            ECHO_V1, name=stack.name(f"image-id-{transport}"), labels={RUN_LABEL: RUN}
        )
        inspected = client.api.inspect_container(made["Id"])
    finally:
        client.close()
    containers = get_json(api, f"/api/agent/servers/{server_id}/containers")["containers"]
    (row,) = [c for c in containers if c["id"] == inspected["Id"]]
    assert row["image"] == ECHO_V1
    assert row["imageId"] == inspected["Image"]
    assert row["imageId"].startswith("sha256:")


def test_env_values_arrive_in_the_container_byte_for_byte(
    stack: Stack, target: tuple[Api, str, str]
) -> None:
    """Quotes, $, `…`, $(…), ;, &&, #, newlines, =, spaces, "" and non-ASCII arrive intact."""
    api, server_id, transport = target
    port = host_port()
    response = deploy(api, server_id, stack.name(f"env-{transport}"), port, env=TRICKY_ENV)
    deployed(response, "succeeded")
    environ = environ_of(port)
    for key, value in TRICKY_ENV.items():
        assert key in environ, key
        assert environ[key].encode() == value.encode(), key
    assert environ["PORT"] == str(port)


def test_redeploy_replaces_the_container(stack: Stack, target: tuple[Api, str, str]) -> None:
    """Redeploying a name replaces its container: one container, the new deployment's label."""
    api, server_id, transport = target
    v2 = build_echo_image("v2")
    port = host_port()
    name = stack.name(f"redeploy-{transport}")
    first, installation = deployed(deploy(api, server_id, name, port), "succeeded")
    (old,) = containers_of(installation["id"])
    assert get_app(port).text == "hello from v1\n"

    second, again = deployed(deploy(api, server_id, name, port, image=v2), "succeeded")
    assert again["id"] == installation["id"]
    assert second["id"] != first["id"]
    assert get_app(port).text == "hello from v2\n"
    (new,) = containers_of(installation["id"])
    assert new["Id"] != old["Id"]
    assert new["Config"]["Labels"]["berth.deployment"] == second["id"]
    assert new["Config"]["Image"] == v2
    listing = get_json(api, "/api/agent/install", serverId=server_id)["installations"]
    (listed,) = [i for i in listing if i["id"] == installation["id"]]
    assert listed["image"] == v2
    assert listed["lastDeployment"]["id"] == second["id"]


# -- logs and removal --------------------------------------------------------------------


def test_logs_then_delete_removes_container_and_keeps_the_record(
    stack: Stack, target: tuple[Api, str, str]
) -> None:
    """Logs return the container's output; DELETE removes the container, then the record."""
    api, server_id, transport = target
    port = host_port()
    deployment, installation = deployed(
        deploy(api, server_id, stack.name(f"logs-{transport}"), port), "succeeded"
    )
    installation_id = installation["id"]
    (inspected,) = containers_of(installation_id)
    logs = get_json(api, f"/api/agent/installations/{installation_id}/logs", tail=10)
    assert logs["installationId"] == installation_id
    assert logs["containerId"] == inspected["Id"]
    assert f"echo v1: listening on {port}" in logs["lines"]

    got = get_json(api, f"/api/agent/installations/{installation_id}")
    assert got["id"] == installation_id
    assert got["lastDeployment"]["id"] == deployment["id"]

    response = api.delete(f"/api/agent/installations/{installation_id}")
    assert response.status_code == 204, response.text
    assert containers_of(installation_id) == []
    assert inspect_named(installation["containerName"]) is None
    removed = get_json(api, f"/api/agent/installations/{installation_id}")
    assert removed["status"] == "removed"
    assert removed["url"] is None  # nothing serves it any more
    logs = get_json(api, f"/api/agent/installations/{installation_id}/logs")
    assert logs["lines"] == []
    assert logs["containerId"] is None
    assert deployment_of(api, deployment["id"])["state"] == "succeeded"  # history kept
    problem(api.delete(f"/api/agent/installations/{installation_id}"), 404)
    listing = get_json(api, "/api/agent/install", serverId=server_id)["installations"]
    assert installation_id not in [i["id"] for i in listing]
    with pytest.raises(httpx.HTTPError):
        get_app(port)


def test_delete_while_deploying_cancels_it_first(stack: Stack) -> None:
    """DELETE while a deployment of the installation runs cancels it (its worker stops it
    where it is) and then removes the app: 204, the deployment canceled, nothing left."""
    api, server_id = stack.alice.api, stack.alice.servers["local"]
    queued = queue_never_listening(  # health would wait its 3 s
        api,
        server_id,
        stack.name("busy"),
        host_port(),
        lambda d: d["state"] == "running",
        10,
        "deployment running",
    )
    deployment_id = queued["deployment"]["id"]
    installation_id = queued["installation"]["id"]
    response = api.delete(f"/api/agent/installations/{installation_id}", timeout=90)
    assert response.status_code == 204, response.text
    ended = deployment_of(api, deployment_id)
    assert ended["state"] == "canceled", ended
    assert containers_of(installation_id) == []
    removed = get_json(api, f"/api/agent/installations/{installation_id}")
    assert removed["status"] == "removed"


# -- tenants -----------------------------------------------------------------------------


def test_users_cannot_see_or_touch_each_others_servers_and_apps(stack: Stack) -> None:
    """Each user gets the unknown-id 404 for every server, app and deployment of the other."""
    apps = {}
    for tenant, transport in ((stack.alice, "local"), (stack.bob, "ssh")):
        port = host_port()
        name = stack.name(f"tenant-{transport}")
        deployment, installation = deployed(
            deploy(tenant.api, tenant.servers[transport], name, port), "succeeded"
        )
        apps[tenant.email] = (deployment, installation, port)

    unknown = str(uuid.uuid4())
    intruder = stack.name("intruder")
    for me, other in ((stack.alice, stack.bob), (stack.bob, stack.alice)):
        deployment, installation, port = apps[other.email]
        api = me.api
        listed = get_json(api, "/api/agent/servers")["servers"]
        assert not set(other.servers.values()) & {s["id"] for s in listed}

        def same_404(path: str, their_id: str, method: str = "GET") -> None:
            """Their id gets exactly the 404 an id that exists nowhere gets."""
            nobody = problem(api.request(method, path.format(unknown)), 404)  # noqa: B023
            theirs = problem(api.request(method, path.format(their_id)), 404)  # noqa: B023
            assert without_request_id(theirs) == without_request_id(nobody), path

        for server in other.servers.values():
            same_404("/api/agent/servers/{}", server)
            same_404("/api/agent/servers/{}/containers", server)
            problem(api.get("/api/agent/install", params={"serverId": server}), 404)
            body = {"serverId": server, "name": intruder, "image": ECHO_V1, "port": host_port()}
            problem(api.post("/api/agent/docker/deploy", json=body), 404)
        same_404("/api/agent/deployments/{}", deployment["id"])
        same_404("/api/agent/installations/{}", installation["id"])
        same_404("/api/agent/installations/{}/logs", installation["id"])
        same_404("/api/agent/installations/{}", installation["id"], "DELETE")

        # Untouched: the other's app still runs and is still theirs.
        assert get_app(port).text == "hello from v1\n"
        assert len(containers_of(installation["id"])) == 1
        still = get_json(other.api, f"/api/agent/installations/{installation['id']}")
        assert still["status"] == "running"
    assert inspect_named(intruder) is None


# -- a crash in the middle of a deployment -----------------------------------------------


@dataclass
class AtHealth:
    """A deployment of a container that never answers, caught at step health."""

    api: Api
    server_id: str
    deployment_id: str
    installation_id: str
    port: int


def _deploy_until_health(process: BerthProcess, name: str) -> AtHealth:
    """On ``process`` (``--local``): a user, its online local server, and a deployment
    of ``name`` that never answers, once it has reached step ``health``."""
    _, token = process.new_users(1, name.rsplit("-", 1)[-1])[0]
    api = process.api(token)
    servers = wait_until(
        lambda: get_json(api, "/api/agent/servers")["servers"],
        bool,
        15,
        "local server registered",
    )
    server_id = servers[0]["id"]
    wait_online(api, server_id)
    port = host_port()
    queued = queue_never_listening(
        api, server_id, name, port, lambda d: d["step"] == "health", 15, "deployment at step health"
    )
    deployment_id, installation_id = queued["deployment"]["id"], queued["installation"]["id"]
    return AtHealth(api, server_id, deployment_id, installation_id, port)


def test_sigkill_during_health_is_taken_over_after_the_restart(
    tmp_path: Path, echo_image: str
) -> None:
    """serve SIGKILLed at health: restarted, it takes the deployment over (attempt 2) from
    the container the killed run left, which still never answers: failed at health, the
    container removed; a redeploy of the name then succeeds with one container."""
    env = {**FAST_ENV, "BERTH_HEALTH_TIMEOUT": "5", "BERTH_LEASE_SECONDS": "2"}
    process = BerthProcess(tmp_path / "data", env=env, args=["--local"]).start()
    name = f"e2e-{RUN}-crash"
    try:
        run = _deploy_until_health(process, name)
        api, server_id, deployment_id = run.api, run.server_id, run.deployment_id
        installation_id, port = run.installation_id, run.port
        assert process.stop(signal.SIGKILL) == -signal.SIGKILL
        # The killed worker had created and started the container; nothing removes it.
        assert len(containers_of(installation_id)) == 1

        process.start()
        ended = wait_final(api, deployment_id, 45)
        assert ended["state"] == "failed"
        assert ended["error"].startswith("health: ")
        assert any(
            e["message"].startswith("attempt 2 of 3: worker ")
            and "during step health" in e["message"]
            for e in ended["events"]
        ), ended["events"]
        assert steps(ended)[-1] == "failed"
        assert containers_of(installation_id) == []  # the taker reused, then removed it
        installation = get_json(api, f"/api/agent/installations/{installation_id}")
        assert installation["status"] == "failed"

        redeployed, _ = deployed(deploy(api, server_id, name, port), "succeeded")
        (only,) = containers_of(installation_id)
        assert only["Config"]["Labels"]["berth.deployment"] == redeployed["id"]
        assert get_app(port).text == "hello from v1\n"
    finally:
        process.stop()
        remove_containers(name)


def test_sigterm_during_health_fails_it_at_once_and_leaves_no_container(
    tmp_path: Path, echo_image: str
) -> None:
    """serve stopped gracefully at health: the run's container is removed and the
    deployment ends ``failed`` (interrupted) before the process exits, not at lease expiry."""
    process = BerthProcess(
        tmp_path / "data", env={**FAST_ENV, "BERTH_HEALTH_TIMEOUT": "120"}, args=["--local"]
    ).start()
    try:
        run = _deploy_until_health(process, f"e2e-{RUN}-term")
        api, deployment_id, installation_id = run.api, run.deployment_id, run.installation_id
        assert process.stop(signal.SIGTERM) == 0
        assert containers_of(installation_id) == []

        process.start()
        ended = deployment_of(api, deployment_id)  # final already: no wait for a lease
        assert ended["state"] == "failed"
        assert ended["error"].startswith("interrupted: berth was stopped")
    finally:
        process.stop()
