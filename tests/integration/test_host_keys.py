"""Host-key changes on a real sshd: berth notices a restarted sshd's new key while its
old connection still works, shows both fingerprints, refuses deploys at once, ends the
deployments queued for it, and reconnects after an explicit re-pin.

Each test has an sshd of its own (its host key changes) and a berth of its own.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deploy_support import (
    FAST_ENV,
    RUN,
    add_ssh_server,
    deploy,
    deployed,
    host_port,
    remove_containers,
    server_of,
    wait_final,
    wait_online,
    wait_until,
)
from harness import BERTH, Api, BerthProcess, problem, serving_one_user
from infra import Sshd, serve_sshd

pytestmark = pytest.mark.integration

ENV = {**FAST_ENV, "BERTH_QUEUE_TIMEOUT": "600", "BERTH_HOST_KEY_CHECK_SECONDS": "1"}


def fingerprint(key: str, tmp: Path) -> str:
    """The key's fingerprint as `ssh-keygen -lf` prints it (the independent reference)."""
    path = tmp / "key.pub"
    path.write_text(key + "\n")
    out = subprocess.run(["ssh-keygen", "-lf", str(path)], check=True, capture_output=True)
    return out.stdout.decode().split()[1]


@pytest.fixture
def own_sshd(docker_ready: None) -> Iterator[Sshd]:
    yield from serve_sshd()


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[BerthProcess, str]]:
    yield from serving_one_user(tmp_path / "data", ENV, "keys")


@pytest.fixture
def api(running: tuple[BerthProcess, str]) -> Iterator[Api]:
    process, token = running
    client = process.api(token)
    yield client
    client.close()


def client_cli(running: tuple[BerthProcess, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The ``berth`` client command against the running berth, as a user runs it."""
    process, token = running
    env = {**os.environ, "BERTH_URL": process.url, "BERTH_TOKEN": token}
    return subprocess.run(
        [BERTH, *args], capture_output=True, text=True, timeout=60, check=False, env=env
    )


def _mismatch(api: Api, server_id: str) -> dict[str, Any]:
    return wait_until(
        lambda: server_of(api, server_id),
        lambda s: s["status"] == "host_key_mismatch",
        20,
        "server in host_key_mismatch",
    )


def test_a_new_host_key_is_shown_refused_and_accepted_once_confirmed(
    api: Api, own_sshd: Sshd, tmp_path: Path
) -> None:
    """sshd re-reads a new key (its old session goes on): the server turns
    host_key_mismatch with both fingerprints; deploys are refused at once; a wrong
    fingerprint is refused naming it; the right one re-pins and a deploy succeeds."""
    old_key = own_sshd.host_public_key
    server = add_ssh_server(api, own_sshd, f"keys-{RUN}")
    wait_online(api, server["id"])
    assert server_of(api, server["id"])["hostKeyFingerprints"] == [fingerprint(old_key, tmp_path)]

    new_key = own_sshd.new_host_key()
    seen = _mismatch(api, server["id"])
    assert seen["hostKeyFingerprints"] == [fingerprint(old_key, tmp_path)]
    assert seen["offeredHostKey"].split()[:2] == new_key.split()[:2]
    assert seen["offeredHostKeyFingerprint"] == fingerprint(new_key, tmp_path)
    assert fingerprint(new_key, tmp_path) in seen["statusDetail"]

    name = f"keys-{RUN}-app"
    port = host_port()
    try:
        refused = problem(deploy(api, server["id"], name, port, wait=None), 409)
        assert refused["type"] == "urn:berth:problem:host-key-mismatch"

        wrong = api.post(
            f"/api/agent/servers/{server['id']}/host-keys",
            json={"hostKeys": [new_key], "fingerprint": fingerprint(old_key, tmp_path)},
        )
        body = problem(wrong, 409)
        assert body["type"] == "urn:berth:problem:fingerprint-mismatch"
        assert [e["location"] for e in body["errors"]] == ["body.fingerprint"]
        bad = problem(
            api.post(
                f"/api/agent/servers/{server['id']}/host-keys",
                json={"hostKeys": ["ssh-ed25519 nope"], "fingerprint": "SHA256:x", "x": 1},
            ),
            422,
        )
        assert {e["location"] for e in bad["errors"]} == {
            "body.hostKeys",
            "body.fingerprint",
            "body.x",
        }
        assert server_of(api, server["id"])["status"] == "host_key_mismatch"

        repinned = api.post(
            f"/api/agent/servers/{server['id']}/host-keys",
            json={"hostKeys": [new_key], "fingerprint": fingerprint(new_key, tmp_path)},
        )
        assert repinned.status_code == 200, repinned.text
        assert repinned.json()["hostKeyFingerprints"] == [fingerprint(new_key, tmp_path)]
        assert repinned.json()["offeredHostKey"] is None
        online = wait_online(api, server["id"], timeout=20)
        assert online["hostKeyFingerprints"] == [fingerprint(new_key, tmp_path)]

        deployment, _ = deployed(deploy(api, server["id"], name, port), "succeeded")
        assert deployment["state"] == "succeeded"
        again = api.post(
            f"/api/agent/servers/{server['id']}/host-keys",
            json={"hostKeys": [new_key], "fingerprint": fingerprint(new_key, tmp_path)},
        )
        assert problem(again, 409)["type"] == "urn:berth:problem:no-host-key-change"
    finally:
        remove_containers(name)


def test_queued_deployments_end_at_once_when_the_key_changed(
    api: Api, own_sshd: Sshd, tmp_path: Path, running: tuple[BerthProcess, str]
) -> None:
    """A deployment queued while the server is down ends (timed_out, naming the host key)
    as soon as the server comes back with another key, not at its 10-minute deadline;
    `berth servers` shows the change and `berth servers repin` accepts it."""
    server = add_ssh_server(api, own_sshd, f"keys-{RUN}-q")
    wait_online(api, server["id"])
    own_sshd.halt()
    wait_until(
        lambda: server_of(api, server["id"]),
        lambda s: s["status"] == "offline",
        20,
        "server offline",
    )
    name = f"keys-{RUN}-queued"
    response = deploy(api, server["id"], name, host_port(), wait=None)
    assert response.status_code == 202, response.text
    deployment_id = response.json()["deployment"]["id"]

    new_key = own_sshd.new_host_key()
    own_sshd.start()
    _mismatch(api, server["id"])
    ended = wait_final(api, deployment_id, 20)  # the queue deadline is 600 s
    assert ended["state"] == "timed_out"
    assert "host key" in ended["error"]

    listed = client_cli(running, "servers")
    assert listed.returncode == 0, listed.stderr
    assert fingerprint(new_key, tmp_path) in listed.stdout
    key_file = tmp_path / "ssh_host_ed25519_key.pub"
    key_file.write_text(new_key + "\n")
    wrong = client_cli(
        running, "servers", "repin", server["id"],
        "--fingerprint", "SHA256:" + "A" * 43, "--key-file", str(key_file),
    )  # fmt: skip
    assert wrong.returncode == 1
    assert "fingerprint" in wrong.stderr
    done = client_cli(
        running, "servers", "repin", server["id"],
        "--fingerprint", fingerprint(new_key, tmp_path), "--key-file", str(key_file),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert fingerprint(new_key, tmp_path) in done.stdout
    wait_online(api, server["id"], timeout=20)
