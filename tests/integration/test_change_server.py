"""PATCH /api/agent/servers/{serverId} on a real berth and the session's real sshd: a
server given the wrong SSH port is moved to the right one and reached at once (the
monitor's own pass is ten minutes away), keeping its id; wrong fields are all named; the
CLI does the same.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from deploy_support import add_ssh_server, server_of, wait_online, wait_until
from harness import BERTH, Api, BerthProcess, free_port, problem, serving_one_user
from infra import Sshd

pytestmark = pytest.mark.integration

#: The monitor's pass is far away: only the change itself can make berth look again.
ENV = {"BERTH_MONITOR_SECONDS": "600"}


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[BerthProcess, str]]:
    yield from serving_one_user(tmp_path / "data", ENV, "change")


@pytest.fixture
def api(running: tuple[BerthProcess, str]) -> Api:
    return running[0].api(running[1])


def _offline(api: Api, server_id: str) -> None:
    wait_until(
        lambda: server_of(api, server_id),
        lambda s: s["status"] == "offline",
        20,
        "server checked and offline",
    )


def test_a_server_moved_to_its_real_port_is_reached_at_once(api: Api, sshd: Sshd) -> None:
    """A new name and SSH port are stored in place (same id) and berth checks the server
    there at once: it goes online without waiting for the monitor's next pass."""
    created = add_ssh_server(api, sshd, "wrong-port", port=free_port())
    _offline(api, created["id"])
    response = api.patch(
        f"/api/agent/servers/{created['id']}", json={"name": "moved", "sshPort": sshd.port}
    )
    assert response.status_code == 200, response.text
    changed = response.json()
    assert (changed["id"], changed["name"], changed["sshPort"]) == (
        created["id"],
        "moved",
        sshd.port,
    )
    assert changed["address"] == created["address"]
    online = wait_online(api, created["id"])
    assert online["name"] == "moved"


def test_wrong_fields_are_all_named_and_nothing_changes(api: Api) -> None:
    """Every wrong field (a bad port, a null, an unknown one) is named in one 422; the
    server is unchanged; another id is a 404."""
    created = add_server(api)
    response = api.patch(
        f"/api/agent/servers/{created['id']}",
        json={"sshPort": 0, "address": None, "name": "", "status": "online"},
    )
    found = problem(response, 422)
    assert sorted(e["location"] for e in found["errors"]) == [
        "body.address",
        "body.name",
        "body.sshPort",
        "body.status",
    ]
    assert server_of(api, created["id"])["name"] == created["name"]
    missing = api.patch(f"/api/agent/servers/{uuid.uuid4()}", json={"name": "x"})
    assert problem(missing, 404)["type"] == "urn:berth:problem:not-found"


def test_the_cli_renames_and_moves_a_server(running: tuple[BerthProcess, str], api: Api) -> None:
    """`berth servers edit ID --name N --address A --ssh-port P` changes the server as the
    API does, and prints it."""
    process, token = running
    created = add_server(api)
    env = {**os.environ, "BERTH_URL": process.url, "BERTH_TOKEN": token}
    done = subprocess.run(
        [BERTH, "servers", "edit", created["id"], "--name", "renamed", "--ssh-port", "2222"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert "renamed" in done.stdout
    stored = server_of(api, created["id"])
    assert (stored["name"], stored["sshPort"]) == ("renamed", 2222)


def add_server(api: Api) -> dict[str, object]:
    """A pending server (nothing to reach)."""
    response = api.post("/api/agent/servers", json={"name": f"srv-{uuid.uuid4().hex[:8]}"})
    assert response.status_code == 201, response.text
    created: dict[str, object] = response.json()
    return created
