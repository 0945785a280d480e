"""Shared by the end-to-end deployment tests (``test_deploy_e2e.py``,
``test_deploy_failures.py``): a ``berth serve --local`` with two users and their servers,
and helpers to deploy through the public API and check the result with ``docker inspect``.

Both transports reach the same Docker Engine here (the sshd is on this machine), and so
do other test runs on this machine: every container name carries ``RUN`` (this run's id,
``infra.RUN``) and a per-module tag, and every host port is handed out once; each module
removes its own containers at the end (``remove_containers``: this run's only).
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import asyncssh
import docker.errors
import httpx
from harness import Api, BerthProcess, new_server
from infra import RUN, Caddy, InfraUnavailable, Sshd, docker_client, echo_tag, unavailable

__all__ = [
    "ECHO_V1",
    "FAST_ENV",
    "FINAL",
    "RUN",
    "TRANSPORTS",
    "TRICKY_ENV",
    "Stack",
    "Tenant",
    "add_ssh_server",
    "all_succeeded",
    "behind_caddy",
    "containers_of",
    "deploy",
    "deployed",
    "deployment_of",
    "environ_of",
    "get_app",
    "get_json",
    "holders_of",
    "host_port",
    "inspect_named",
    "local_server_id",
    "log_lines",
    "online_server_id",
    "open_stack",
    "queue_delayed",
    "random_host_key",
    "remove_containers",
    "server_of",
    "steps",
    "wait_final",
    "wait_one_running",
    "wait_online",
    "wait_until",
]

T = TypeVar("T")

ECHO_V1 = echo_tag("v1")
FINAL = {"succeeded", "failed", "timed_out", "canceled"}
TRANSPORTS = ["ssh", "local"]

# Fast loops for tests: servers checked twice a second, failures within seconds, and no
# deploy rate limit in the way of a module's worth of deploys by one user.
FAST_ENV = {
    "BERTH_MONITOR_SECONDS": "0.5",
    "BERTH_HEALTH_TIMEOUT": "3",
    "BERTH_QUEUE_TIMEOUT": "3",
    "BERTH_DEPLOY_RATE_LIMIT": "1000",
}

# Values a shell would mangle; Docker's API must deliver them byte for byte.
TRICKY_ENV = {
    "SINGLE_QUOTE": "it's",
    "DOUBLE_QUOTE": 'say "hi"',
    "DOLLAR_HOME": "$HOME",
    "BACKTICKS": "`id`",
    "SUBSHELL": "$(id)",
    "SEMICOLON": "a; echo pwned",
    "AND_AND": "true && echo pwned",
    "HASH": "value # not a comment",
    "NEWLINES": "line one\nline two\n",
    "EQUALS": "a=b==c",
    "SPACES": "  two  spaces  around  ",
    "EMPTY": "",
    "NON_ASCII": "héllo wörld ✓ 日本語 🚢",
    "EVERYTHING": "'\"$HOME`id`$(id);&&#\n= ü",
}


# -- waiting and reading ---------------------------------------------------------------


def wait_until(fetch: Callable[[], T], done: Callable[[T], bool], timeout: float, what: str) -> T:
    """Poll ``fetch`` every 0.1 s until ``done(value)``; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = fetch()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached within {timeout:g} s; last: {value!r}")
        time.sleep(0.1)


def get_json(api: Api, path: str, **params: Any) -> dict[str, Any]:
    """``GET path`` that must answer 200; its JSON body."""
    response = api.get(path, params=params or None)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def server_of(api: Api, server_id: str) -> dict[str, Any]:
    return get_json(api, f"/api/agent/servers/{server_id}")


def wait_online(api: Api, server_id: str, timeout: float = 15.0) -> dict[str, Any]:
    return wait_until(
        lambda: server_of(api, server_id),
        lambda s: s["status"] == "online",
        timeout,
        f"server {server_id} online",
    )


def local_server_id(api: Api, timeout: float = 15.0) -> str:
    """The id of this machine's server (``serve --local``) among the caller's, once it is
    registered."""
    servers = wait_until(
        lambda: get_json(api, "/api/agent/servers")["servers"],
        lambda found: any(s["transport"] == "local" for s in found),
        timeout,
        "this machine registered as a server",
    )
    return str(next(s["id"] for s in servers if s["transport"] == "local"))


def online_server_id(api: Api, timeout: float = 20.0, what: str = "this machine online") -> str:
    """The id of the first of the caller's servers (this machine's, under ``serve
    --local``) once one of them is online."""
    servers = wait_until(
        lambda: get_json(api, "/api/agent/servers")["servers"],
        lambda found: any(s["status"] == "online" for s in found),
        timeout,
        what,
    )
    return str(servers[0]["id"])


def deployment_of(api: Api, deployment_id: str) -> dict[str, Any]:
    return get_json(api, f"/api/agent/deployments/{deployment_id}")


def wait_final(api: Api, deployment_id: str, timeout: float) -> dict[str, Any]:
    return wait_until(
        lambda: deployment_of(api, deployment_id),
        lambda d: d["state"] in FINAL,
        timeout,
        f"deployment {deployment_id} final",
    )


# -- deploying -------------------------------------------------------------------------

_ports_given: set[int] = set()


def host_port() -> int:
    """A TCP port free on 0.0.0.0 a moment ago, never handed out twice in this session."""
    while True:
        with socket.socket() as sock:
            sock.bind(("0.0.0.0", 0))
            port = int(sock.getsockname()[1])
        if port not in _ports_given:
            _ports_given.add(port)
            return port


def deploy(
    api: Api,
    server_id: str,
    name: str,
    port: int,
    *,
    image: str = ECHO_V1,
    env: dict[str, str] | None = None,
    wait: int | None = 60,
    domain: str | None = None,
    restart: str | None = None,
) -> httpx.Response:
    """``POST /api/agent/docker/deploy`` (with ``?wait`` unless ``wait`` is ``None``); the
    echo server listens on ``$PORT``, so ``PORT`` is set to the container port."""
    body: dict[str, Any] = {
        "serverId": server_id,
        "name": name,
        "image": image,
        "port": port,
        "env": {"PORT": str(port), **(env or {})},
    }
    if domain is not None:
        body["domain"] = domain
    if restart is not None:
        body["restart"] = restart
    return api.post(
        "/api/agent/docker/deploy",
        params={"wait": wait} if wait else None,
        json=body,
        timeout=(wait or 0) + 30,
    )


def deployed(response: httpx.Response, state: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The deployment and installation of a ``?wait`` deploy that ended in ``state``."""
    assert response.status_code == 200, response.text
    body = response.json()
    deployment, installation = body["deployment"], body["installation"]
    assert deployment["state"] == state, deployment
    assert response.headers["location"] == f"/api/agent/deployments/{deployment['id']}"
    return deployment, installation


def queue_delayed(api: Api, server_id: str, name: str, port: int, image: str, delay: int) -> str:
    """Queue a deploy (no ``?wait``: a 202) of ``image``, an echo app that answers ``delay``
    seconds after it starts (``BERTH_TEST_DELAY``); the deployment's id."""
    env = {"BERTH_TEST_DELAY": str(delay)}
    response = deploy(api, server_id, name, port, image=image, env=env, wait=None)
    assert response.status_code == 202, response.text
    return str(response.json()["deployment"]["id"])


def queue_never_listening(
    api: Api,
    server_id: str,
    name: str,
    port: int,
    until: Callable[[dict[str, Any]], bool],
    timeout: float,
    what: str,
) -> dict[str, Any]:
    """Queue a deploy (a 202) of an app that never listens (``BERTH_TEST_MODE=nolisten``:
    its health check waits) and wait (bounded) until its deployment is as ``until`` says;
    the 202's body (``deployment``, ``installation``)."""
    env = {"BERTH_TEST_MODE": "nolisten"}
    response = deploy(api, server_id, name, port, env=env, wait=None)
    assert response.status_code == 202, response.text
    queued: dict[str, Any] = response.json()
    wait_until(lambda: deployment_of(api, queued["deployment"]["id"]), until, timeout, what)
    return queued


def wait_one_running(api: Api, deployment_ids: list[str], timeout: float) -> None:
    """Wait (bounded) until one of the deployments runs."""
    wait_until(
        lambda: [deployment_of(api, i)["state"] for i in deployment_ids],
        lambda states: "running" in states,
        timeout,
        "a deployment running",
    )


def all_succeeded(finals: list[dict[str, Any]]) -> None:
    """Assert that every deployment of ``finals`` succeeded; the message shows each one
    that did not with its error and its events, to tell why."""
    failed = [
        f"{final['id']} {final['state']}: {final['error']}\n"
        + "".join(f"    {e['at'][11:23]} {e['step']}: {e['message']}\n" for e in final["events"])
        for final in finals
        if final["state"] != "succeeded"
    ]
    assert not failed, f"{len(failed)} of {len(finals)} did not succeed:\n" + "".join(failed)


def steps(deployment: dict[str, Any]) -> list[str]:
    """The step of each event, in order."""
    return [event["step"] for event in deployment["events"]]


def log_lines(deployment: dict[str, Any]) -> list[str]:
    """The events that carry the container's output (``log: …``)."""
    return [e["message"] for e in deployment["events"] if e["message"].startswith("log: ")]


# -- Docker and the apps themselves ----------------------------------------------------


def containers_of(installation_id: str) -> list[dict[str, Any]]:
    """``docker inspect`` of every container (running or not) labelled with the installation."""
    return _inspect_labelled(f"berth.installation={installation_id}")


def holders_of(installation_id: str) -> list[dict[str, Any]]:
    """``docker inspect`` of the installation's port holders (``berth.holder`` label)."""
    return _inspect_labelled(f"berth.holder={installation_id}")


def _inspect_labelled(label: str) -> list[dict[str, Any]]:
    """``docker inspect`` of every container (running or not) with ``label`` (``k=v``);
    one removed meanwhile is left out."""
    client = docker_client()
    try:
        rows = client.api.containers(all=True, filters={"label": label})
        found = []
        for row in rows:
            with contextlib.suppress(docker.errors.NotFound):
                found.append(client.api.inspect_container(row["Id"]))
        return found
    finally:
        client.close()


def inspect_named(name: str) -> dict[str, Any] | None:
    """``docker inspect`` of the container called ``name``, or ``None``."""
    client = docker_client()
    try:
        inspected: dict[str, Any] = client.api.inspect_container(name)
        return inspected
    except docker.errors.NotFound:
        return None
    finally:
        client.close()


def remove_containers(name_part: str) -> None:
    """Force-remove every container whose name contains ``name_part``, which must carry
    this run's id (``RUN``): a run never removes another run's containers."""
    assert RUN in name_part, f"{name_part!r} does not name containers of this run ({RUN})"
    client = docker_client()
    try:
        for row in client.api.containers(all=True, filters={"name": name_part}):
            with contextlib.suppress(docker.errors.APIError):
                client.api.remove_container(row["Id"], force=True)
    finally:
        client.close()


def get_app(port: int, path: str = "/") -> httpx.Response:
    """Ask the deployed app itself, on the host port Docker publishes."""
    return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=5)


def remove_built_images(name_part: str) -> None:
    """Remove the images berth built for apps whose container name starts with
    ``name_part`` (tagged ``berth/<containerName>:…``), which must carry this run's id."""
    assert RUN in name_part, f"{name_part!r} does not name images of this run ({RUN})"
    client = docker_client()
    try:
        for image in client.api.images(name="berth/*"):
            tags = [t for t in image.get("RepoTags") or () if t.startswith(f"berth/{name_part}")]
            for tag in tags:
                with contextlib.suppress(docker.errors.APIError):
                    client.api.remove_image(tag)
    finally:
        client.close()


def environ_of(port: int) -> dict[str, str]:
    """The container's environment, from the echo server's ``GET /env`` (NUL-separated)."""
    response = get_app(port, "/env")
    assert response.status_code == 200
    entries = response.content.split(b"\0")
    assert entries[-1] == b""
    environ = {}
    for entry in entries[:-1]:
        key, sep, value = entry.decode("utf-8").partition("=")
        assert sep, entry
        environ[key] = value
    return environ


# -- servers and users -----------------------------------------------------------------


def random_host_key() -> str:
    """A valid ``ssh-ed25519`` public key line that no sshd here uses."""
    key = asyncssh.generate_private_key("ssh-ed25519")
    return key.export_public_key("openssh").decode().strip()


def add_ssh_server(
    api: Api, sshd: Sshd, name: str, *, port: int | None = None, host_keys: list[str] | None = None
) -> dict[str, Any]:
    """Register an SSH server (``201`` body) and authorize berth's key for it on ``sshd``,
    forward-only, as the install script does."""
    created = new_server(
        api,
        name,
        address="127.0.0.1",
        sshPort=port or sshd.port,
        sshUser="berth",
        hostKeys=host_keys or [sshd.host_public_key],
    )
    sshd.authorize(created["publicKey"])
    return created


@dataclass
class Tenant:
    email: str
    token: str
    api: Api
    servers: dict[str, str] = field(default_factory=dict)  # "local" / "ssh" -> server id
    created: dict[str, dict[str, Any]] = field(default_factory=dict)  # POST /servers bodies


@dataclass
class Stack:
    """A running berth, its sshd, alice (first user: local + ssh server), bob (ssh server)."""

    berth: BerthProcess
    sshd: Sshd
    alice: Tenant
    bob: Tenant
    prefix: str  # every container name of the module starts with it

    def name(self, what: str) -> str:
        """An app name (and container name) unique to this module and session."""
        return f"{self.prefix}{what}"


def assert_no_errors_logged(process: BerthProcess) -> None:
    """Fail if berth logged an error (or an exception) in its current or last start."""
    errors = [
        record
        for record in process.log_records()
        if record.get("level") in ("error", "critical") or "exception" in record
    ]
    assert not errors, f"berth logged errors: {errors[:3]}"


@contextlib.contextmanager
def behind_caddy(
    data_dir: Path,
    transport: str,
    sshd: Sshd,
    prefix: str,
    user: str,
    env: dict[str, str | None],
) -> Iterator[tuple[BerthProcess, Caddy, Api, str]]:
    """A Caddy of its own and a ``berth serve`` on ``data_dir`` using it (``env``: over
    ``FAST_ENV`` and Caddy's settings, ``None`` values unset) whose one user (``user…``)
    has one online server: over SSH at ``sshd``, or this machine (``transport``
    ``local``, served ``--local``). Yields berth, the Caddy, the user's API and the
    server's id; at the end both stop and the containers named ``prefix…`` go."""
    try:
        caddy = Caddy().start()
    except InfraUnavailable as exc:
        unavailable(str(exc))
    settings: dict[str, str | None] = {**FAST_ENV, **caddy.berth_env(), **env}
    process = BerthProcess(
        data_dir,
        env={key: value for key, value in settings.items() if value is not None},
        args=["--local"] if transport == "local" else [],
    )
    api: Api | None = None
    try:
        process.start()
        _, token = process.new_users(1, user)[0]
        api = process.api(token)
        if transport == "local":
            server_id = local_server_id(api)
        else:
            server_id = add_ssh_server(api, sshd, f"{prefix}server")["id"]
        wait_online(api, server_id)
        yield process, caddy, api, server_id
    finally:
        if api is not None:
            api.close()
        process.stop()
        remove_containers(prefix)
        caddy.stop()


@dataclass
class Local:
    """A test's own ``berth serve --local``, its one user and this machine's server."""

    process: BerthProcess
    token: str
    api: Api
    server_id: str


@contextlib.contextmanager
def serving_local(
    data_dir: Path, env: dict[str, str], user: str, prefix: str, online_within: float = 20.0
) -> Iterator[Local]:
    """``berth serve --local`` on ``data_dir`` with ``env`` (as given: ``FAST_ENV`` is not
    added), one new user (``user…``) with its API, once this machine is online (within
    ``online_within`` s). At the end: the API closed, berth stopped, and the containers
    named ``prefix…`` removed."""
    process = BerthProcess(data_dir, env=env, args=["--local"]).start()
    try:
        [(_, token)] = process.new_users(1, user)
        with process.api(token) as api:
            yield Local(process, token, api, online_server_id(api, online_within))
    finally:
        process.stop()
        remove_containers(prefix)


@contextlib.contextmanager
def open_stack(
    data_dir: Path, sshd: Sshd, tag: str, env: dict[str, str] | None = None
) -> Iterator[Stack]:
    """Start ``berth serve --local`` with ``FAST_ENV`` (and ``env``) on ``data_dir``, make
    alice (the first user, so the owner of the local server) and bob, give each an SSH
    server on ``sshd``, and wait until all three servers are online. At the end: stop
    berth, remove the module's containers, and fail if berth logged an error."""
    process = BerthProcess(data_dir, env={**FAST_ENV, **(env or {})}, args=["--local"]).start()
    prefix = f"e2e-{RUN}-{tag}-"
    tenants: list[Tenant] = []
    try:
        for who in ("alice", "bob"):  # one at a time: alice must be the first user
            email, token = process.new_users(1, who)[0]
            tenants.append(Tenant(email, token, process.api(token)))
        alice, bob = tenants
        alice.servers["local"] = local_server_id(alice.api)
        for tenant, who in ((alice, "alice"), (bob, "bob")):
            created = add_ssh_server(tenant.api, sshd, f"{prefix}{who}-ssh")
            tenant.created["ssh"] = created
            tenant.servers["ssh"] = created["id"]
        for tenant in tenants:
            for server_id in tenant.servers.values():
                wait_online(tenant.api, server_id)
        yield Stack(process, sshd, alice, bob, prefix)
    finally:
        for tenant in tenants:
            tenant.api.close()
        process.stop()
        remove_containers(prefix)
    assert_no_errors_logged(process)
