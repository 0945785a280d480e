"""Durability: what the API accepted survives a graceful stop and a kill.

One ``berth serve`` on its own data dir gets users, servers, installations and
queued deployments; it is stopped with SIGTERM and started again, then killed
with SIGKILL and started again, and must answer exactly as before each time --
on SQLite in its data dir, and on PostgreSQL (a new database on the server of
``BERTH_TEST_POSTGRES_URL``; skipped without it).
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import PASSWORD, BerthProcess, cli, new_server, problem, unique_email
from infra import DATABASES, berth_database_env

DEPLOY = "/api/agent/docker/deploy"


@pytest.fixture(params=DATABASES)
def fresh_berth(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BerthProcess]:
    """A ``berth serve`` of this test's own (not started yet), on each database in turn."""
    with berth_database_env(request.param) as env:
        process = BerthProcess(tmp_path / "data", env=env)
        yield process
        process.stop()


@dataclass
class Account:
    token: str
    key: str  # an Idempotency-Key already used for ``replay_body``
    replay_body: dict[str, Any] = field(default_factory=dict)
    deployment_ids: list[str] = field(default_factory=list)


def _populate(process: BerthProcess) -> list[Account]:
    """Two users with servers, installations and queued (and one canceled) deployments."""
    accounts = []
    for n, (_, token) in enumerate(process.new_users(2, "durable")):
        account = Account(token=token, key=f"durable-{uuid.uuid4()}")
        with process.api(token) as api:
            with_address = new_server(api, f"web-{n}")
            bare = new_server(api, f"bare-{n}")
            bodies = [
                {
                    "serverId": with_address["id"],
                    "name": "Shop",
                    "image": "shop:1.0",
                    "port": 8080,
                    "env": {"GREETING": "it's $HOME `x` $(y)\nline 2 ✓", "EMPTY": ""},
                    "volumes": ["data:/var/lib/shop", "/srv/shared:/shared:ro"],
                },
                {
                    "serverId": with_address["id"],
                    "name": "blog",
                    "image": "ghost:5.80@sha256:" + "a" * 64,
                    "domain": f"blog-{n}.example.com",
                    "port": 2368,
                },
                {"serverId": bare["id"], "name": "worker", "image": "worker:2", "port": 9000},
                # Redeploys "Shop": the first Shop deployment becomes canceled.
                {
                    "serverId": with_address["id"],
                    "name": "shop",
                    "image": "shop:1.1",
                    "port": 8080,
                    "env": {"GREETING": "v2"},
                },
            ]
            for i, body in enumerate(bodies):
                headers = {"Idempotency-Key": account.key} if i == 2 else {}
                response = api.post(DEPLOY, json=body, headers=headers)
                assert response.status_code == 202, response.text
                account.deployment_ids.append(response.json()["deployment"]["id"])
            account.replay_body = bodies[2]
        accounts.append(account)
    return accounts


def _snapshot(process: BerthProcess, accounts: list[Account]) -> list[dict[str, Any]]:
    """Everything each user can read through the API."""
    seen = []
    for account in accounts:
        with process.api(account.token) as api:
            servers = api.get("/api/agent/servers")
            assert servers.status_code == 200, servers.text
            listed = [_durable(server) for server in servers.json()["servers"]]
            state: dict[str, Any] = {"servers": {"servers": listed}}
            for server in servers.json()["servers"]:
                sid = server["id"]
                state[sid] = [
                    _durable(api.get(f"/api/agent/servers/{sid}").json()),
                    api.get("/api/agent/install", params={"serverId": sid}).json(),
                    api.get(f"/api/agent/servers/{sid}/containers").json(),
                ]
            state["deployments"] = [
                api.get(f"/api/agent/deployments/{d}").json() for d in account.deployment_ids
            ]
        seen.append(state)
    return seen


def _durable(server: dict[str, Any]) -> dict[str, Any]:
    """A server as stored, less what the monitor's checks say of it now (why it is
    offline, and whether a check stood by its status lately -- ``checking`` until the
    first check after a start: the stored status is ``lastKnownStatus`` then)."""
    durable = {k: v for k, v in server.items() if k not in ("statusDetail", "lastKnownStatus")}
    if server["status"] == "checking":
        durable["status"] = server["lastKnownStatus"]
    return durable


def _check_replay(process: BerthProcess, account: Account) -> None:
    """The Idempotency-Key still replays (same deployment) and still refuses a changed body."""
    with process.api(account.token) as api:
        again = api.post(DEPLOY, json=account.replay_body, headers={"Idempotency-Key": account.key})
        assert again.status_code == 202, again.text
        assert again.headers["idempotent-replayed"] == "true"
        assert again.json()["deployment"]["id"] == account.deployment_ids[2]
        changed = {**account.replay_body, "env": {"NEW": "x"}}
        problem(api.post(DEPLOY, json=changed, headers={"Idempotency-Key": account.key}), 409)


class TestRestart:
    """A restarted serve on the same data dir answers exactly as before."""

    def test_state_survives_sigterm_and_sigkill(self, fresh_berth: BerthProcess) -> None:
        """State survives SIGTERM (graceful: in-flight request answered, exit 0) and SIGKILL."""
        fresh_berth.start()
        accounts = _populate(fresh_berth)
        before = _snapshot(fresh_berth, accounts)
        states = [d["state"] for d in before[0]["deployments"]]
        assert states == ["canceled", "queued", "queued", "queued"]

        account = accounts[0]
        with fresh_berth.api(account.token) as api, ThreadPoolExecutor(1) as pool:
            in_flight = pool.submit(
                api.post,
                DEPLOY,
                json=account.replay_body,
                headers={"Idempotency-Key": account.key},
                params={"wait": 2},  # a replay: waits for the queued deployment, changes nothing
            )
            time.sleep(0.7)
            assert fresh_berth.stop(signal.SIGTERM) == 0
            answered = in_flight.result(timeout=30)
        assert answered.status_code == 202, answered.text
        assert answered.json()["deployment"]["id"] == account.deployment_ids[2]
        assert "Application shutdown complete" in fresh_berth.logs()
        fresh_berth.start()
        assert _snapshot(fresh_berth, accounts) == before
        for account in accounts:
            _check_replay(fresh_berth, account)

        assert fresh_berth.stop(signal.SIGKILL) == -signal.SIGKILL
        fresh_berth.start()
        assert _snapshot(fresh_berth, accounts) == before
        for account in accounts:
            _check_replay(fresh_berth, account)
        with fresh_berth.api(accounts[0].token) as api:
            server = before[0]["servers"]["servers"][1]["id"]
            fresh = api.post(DEPLOY, json={"serverId": server, "name": "new", "image": "n:1"})
            assert fresh.status_code == 202, fresh.text


class TestAdminWhileServing:
    """The admin commands share the data dir with a running serve (SQLite WAL)."""

    def test_two_admin_commands_while_serve_writes(self, berth: BerthProcess) -> None:
        """``user create`` and ``token regenerate`` run concurrently with API writes, unlocked."""
        ((email_existing, token),) = berth.new_users(1, "admin-busy")
        email_new = unique_email("admin-new")
        stop = threading.Event()
        statuses: list[int] = []

        def write_continuously() -> None:
            with berth.api(token) as api:
                while not stop.is_set():
                    status = api.post("/api/agent/servers", json={"name": "busy"}).status_code
                    statuses.append(status)
                    if status == 401:  # regenerated; failures would be throttled per address
                        return

        writer = threading.Thread(target=write_continuously)
        writer.start()
        try:
            with ThreadPoolExecutor(2) as pool:
                created = pool.submit(
                    cli,
                    berth.data_dir,
                    "user",
                    "create",
                    "--email",
                    email_new,
                    stdin=PASSWORD + "\n",
                    check=False,
                )
                regenerated = pool.submit(
                    cli,
                    berth.data_dir,
                    "token",
                    "regenerate",
                    "--email",
                    email_existing,
                    check=False,
                )
                done = [created.result(), regenerated.result()]
        finally:
            stop.set()
            writer.join()
        for result in done:
            assert result.returncode == 0, result.stderr
            assert "locked" not in result.stderr.lower()
        assert statuses
        assert set(statuses) <= {201, 401}  # 401 once the token was regenerated
        new_token = done[1].stdout.strip()
        assert (
            httpx.get(
                f"{berth.url}/api/agent/servers", headers={"Authorization": f"Bearer {new_token}"}
            ).status_code
            == 200
        )
        assert "database is locked" not in berth.logs()


def test_a_new_data_dir_is_readable_by_its_owner_only(tmp_path_factory: Any) -> None:
    """The data dir, the database (and its WAL files) and the key are created owner-only:
    they hold password and token hashes and the key that unseals env values."""
    data = tmp_path_factory.mktemp("private") / "data"
    email = unique_email("private")
    cli(data, "user", "create", "--email", email, stdin=PASSWORD + "\n")  # creates it all
    token = cli(data, "token", "regenerate", "--email", email).stdout.strip()
    process = BerthProcess(data).start()
    try:
        with process.api(token) as api:
            new_server(api)  # a write through serve: the WAL files exist now
        modes = {p.name: p.stat().st_mode & 0o777 for p in data.iterdir() if p.suffix != ".log"}
    finally:
        process.stop()
    assert data.stat().st_mode & 0o777 == 0o700
    assert modes["berth.db"] == 0o600
    assert modes["secret.key"] == 0o600
    assert all(mode & 0o077 == 0 for mode in modes.values()), modes


def test_a_stopped_berth_leaves_no_socket_directory(tmp_path: Path) -> None:
    """berth makes no ``berth-ssh-*`` directory in the temp dir until it reaches a server
    over SSH, and a graceful stop leaves none (the gateway's close removes its own; the
    one made at a first connection is covered in ``test_transports.py``)."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    process = BerthProcess(tmp_path / "data", env={"TMPDIR": str(temp)})
    try:
        process.start()
        assert [p.name for p in temp.iterdir() if p.name.startswith("berth-ssh-")] == []
    finally:
        assert process.stop() == 0
    assert [p.name for p in temp.iterdir() if p.name.startswith("berth-ssh-")] == []
