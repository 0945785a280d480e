"""Operating berth itself, on real processes: ``/metrics`` after real deploys, and a
backup taken while deploys run, restored into another data dir that berth then serves.

SQLite and the local transport (``serve --local``); the scale-out on PostgreSQL is
``test_scale_out.py``.
"""

from __future__ import annotations

import base64
import http.client
import socket
import sqlite3
import time
import uuid
from pathlib import Path

import httpx
import pytest
from deploy_support import (
    FAST_ENV,
    FINAL,
    RUN,
    deploy,
    deployed,
    environ_of,
    get_app,
    host_port,
    online_server_id,
    queue_delayed,
    remove_containers,
    serving_local,
    wait_final,
    wait_one_running,
)
from harness import PASSWORD, BerthProcess, cli, new_server, problem, scrape
from infra import http_get

pytestmark = pytest.mark.integration


def _own_address() -> str | None:
    """An address of this machine that is not loopback (the route out, else Docker's
    bridge), or ``None``."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: UDP connect picks a route
            address = str(probe.getsockname()[0])
            if not address.startswith("127."):
                return address
    except OSError:
        pass
    return None


# -- metrics -----------------------------------------------------------------------------


class TestMetrics:
    def test_a_scrape_after_deploys_reports_them(self, tmp_path: Path, echo_image: str) -> None:
        """After one deploy that succeeds, one that fails and one queued for an offline
        server then canceled: /metrics counts each final state, the step durations, the
        servers by status, the queue and the API requests by route template."""
        env = {**FAST_ENV, "BERTH_QUEUE_TIMEOUT": "600", "BERTH_METRICS_TOKEN": "m-" + RUN}
        prefix = f"ops-{RUN}-metrics-"
        with serving_local(tmp_path / "data", env, "metrics", prefix) as local:
            process, api, server_id = local.process, local.api, local.server_id
            deployed(deploy(api, server_id, prefix + "ok", host_port()), "succeeded")
            deployed(
                deploy(
                    api, server_id, prefix + "bad", host_port(), env={"BERTH_TEST_MODE": "exit"}
                ),
                "failed",
            )
            offline = new_server(api)["id"]
            queued = deploy(api, offline, prefix + "waits", host_port(), wait=None)
            assert queued.status_code == 202, queued.text
            waiting = queued.json()["deployment"]["id"]

            during = scrape(process.url, env["BERTH_METRICS_TOKEN"])
            assert during.value("berth_queue_depth") == 1
            assert during.value("berth_queue_oldest_age_seconds") >= 0
            assert during.value("berth_servers", status="online") == 1
            assert during.value("berth_servers", status="offline") == 1
            assert during.value("berth_servers", status="pending") == 0

            canceled = api.post(f"/api/agent/deployments/{waiting}/cancel")
            assert canceled.status_code in (200, 202), canceled.text
            assert wait_final(api, waiting, 10)["state"] == "canceled"

            after = scrape(process.url, env["BERTH_METRICS_TOKEN"])
            finished = {
                state: after.value("berth_deployments_finished", state=state)
                for state in sorted(FINAL)
            }
            assert finished == {"succeeded": 1, "failed": 1, "canceled": 1, "timed_out": 0}
            assert after.value("berth_queue_depth") == 0
            assert after.value("berth_queue_oldest_age_seconds") == 0
            for step in ("pull", "create", "start", "health"):
                assert after.value("berth_deployment_step_duration_seconds_count", step=step) == 2
            assert after.value("berth_deployment_step_duration_seconds_sum", step="health") > 0
            assert after.value("berth_lease_takeovers_total") == 0
            route = "/api/agent/docker/deploy"
            ok = after.value("berth_http_requests_total", method="POST", route=route, status="200")
            assert ok == 2
            assert (
                after.value("berth_http_requests_total", method="POST", route=route, status="202")
                == 1
            )
            cancel_route = "/api/agent/deployments/{deploymentId}/cancel"
            assert (
                sum(
                    after.value(
                        "berth_http_requests_total", method="POST", route=cancel_route, status=s
                    )
                    for s in ("200", "202")
                )
                == 1
            )

    def test_with_a_token_every_scrape_must_bear_it(self, fresh_berth: BerthProcess) -> None:
        """BERTH_METRICS_TOKEN set: no token or a wrong one is a 401 problem (even from
        this machine); the token gets the metrics."""
        fresh_berth.stop()
        fresh_berth.env["BERTH_METRICS_TOKEN"] = "metrics-" + RUN
        fresh_berth.start()
        url = f"{fresh_berth.url}/metrics"
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": "Basic " + "metrics-" + RUN},
            {"Authorization": "Bearer metrics-" + RUN + "x"},
        ):
            refused = problem(httpx.get(url, headers=headers, timeout=10), 401)
            assert "metrics token" in refused["detail"]
        assert scrape(fresh_berth.url, "metrics-" + RUN).value("berth_queue_depth") == 0

    @pytest.mark.parametrize(
        "path", ["/metrics/", "//metrics", "///metrics", "/metrics%2F", "/metrics%2f", "/%6detrics"]
    )
    def test_only_the_path_metrics_as_written_is_answered(
        self, berth: BerthProcess, path: str
    ) -> None:
        """/metrics/, //metrics, /metrics%2F (which Litestar's router would route to
        /metrics, and a proxy hiding only the exact /metrics passes on) are a 404 from
        berth itself, as any unknown path; /metrics is answered."""
        status, headers, body = http_get(berth.port, "127.0.0.1", path)
        assert status == 404, body[:200]
        assert headers["content-type"] == "application/problem+json"
        assert b"berth_queue_depth" not in body
        status, _, body = http_get(berth.port, "127.0.0.1", "/metrics")
        assert status == 200
        assert b"berth_queue_depth" in body

    def test_without_a_token_only_this_machine_may_scrape(self, tmp_path: Path) -> None:
        """No BERTH_METRICS_TOKEN: a scrape from loopback is answered, the same berth asked
        on one of this machine's other addresses refuses with a 403 problem."""
        address = _own_address()
        if address is None:
            pytest.skip("this machine has no address but loopback")
        process = BerthProcess(tmp_path / "data")
        process.args = ["--listen", f"0.0.0.0:{process.port}"]
        process.start()
        try:
            assert scrape(process.url).value("berth_servers", status="online") == 0
            refused = problem(
                httpx.get(f"http://{address}:{process.port}/metrics", timeout=10), 403
            )
            assert "BERTH_METRICS_TOKEN" in refused["detail"]
            # The rest of berth answers on that address: the refusal is /metrics' own.
            assert httpx.get(f"http://{address}:{process.port}/healthz", timeout=10).is_success
        finally:
            process.stop()


# -- backups -----------------------------------------------------------------------------


def _sign_in(url: str, email: str, password: str) -> httpx.Response:
    """The dashboard's sign-in form, as a browser posts it; the response after redirects."""
    with httpx.Client(base_url=url, timeout=10, follow_redirects=True) as client:
        page = client.get("/login")
        marker = 'name="_csrf_token" value="'
        start = page.text.index(marker) + len(marker)
        csrf = page.text[start : page.text.index('"', start)]
        return client.post(
            "/login", data={"email": email, "password": password, "_csrf_token": csrf}
        )


class TestBackup:
    def test_backup_while_deploying_restores_into_a_berth_that_works(
        self, tmp_path: Path, slow_image: str
    ) -> None:
        """A backup taken while deployments run is restored into another data dir (with the
        old data dir's key file); berth served from it knows the user's token and password,
        unseals the env of earlier revisions (a rollback gets it back), and deploys."""
        env = {**FAST_ENV, "BERTH_HEALTH_TIMEOUT": "30", "BERTH_QUEUE_TIMEOUT": "120"}
        first = BerthProcess(tmp_path / "one", env=env, args=["--local"]).start()
        prefix = f"ops-{RUN}-backup-"
        backup = tmp_path / "berth-backup.db"
        second: BerthProcess | None = None
        try:
            email, token = first.new_users(1, "backup")[0]
            api = first.api(token)
            server_id = online_server_id(api)
            secret_port = host_port()
            secret_app = prefix + "secret"
            revision, installation = deployed(
                deploy(api, server_id, secret_app, secret_port, env={"SECRET": "s3cr3t $x"}),
                "succeeded",
            )
            deployed(deploy(api, server_id, secret_app, secret_port), "succeeded")
            assert "SECRET" not in environ_of(secret_port)
            busy = [
                queue_delayed(api, server_id, f"{prefix}busy-{n}", host_port(), slow_image, 10)
                for n in range(4)
            ]
            wait_one_running(api, busy, 30)
            done = cli(first.data_dir, "backup", str(backup), env=env)
            assert "schema" in done.stdout
            assert "secret.key" in done.stderr  # where the key is, which the file lacks
            finals = [wait_final(api, i, 90)["state"] for i in busy]
            assert finals == ["succeeded"] * 4, finals
            api.close()
            first.stop()

            # The backup is a self-contained SQLite file, without the key, taken mid-way.
            with sqlite3.connect(backup) as conn:
                states = [
                    conn.execute(
                        "SELECT state FROM deployment WHERE id = ?", (uuid.UUID(i).hex,)
                    ).fetchone()
                    for i in busy
                ]
                assert ("running",) in states, states
                assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
                assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
            assert b"s3cr3t" not in backup.read_bytes()

            restored = tmp_path / "two"
            without_key = cli(restored, "restore", str(backup), check=False)
            assert without_key.returncode == 2
            assert "secret_key" in without_key.stderr
            assert not restored.exists() or not any(restored.iterdir())
            wrong = tmp_path / "wrong.key"
            wrong.write_text("A" * 43 + "=\n")
            mismatched = cli(
                restored, "restore", str(backup), "--secret-key-file", str(wrong), check=False
            )
            assert mismatched.returncode == 2
            assert "did not seal" in mismatched.stderr
            assert not (restored / "berth.db").exists()
            cli(
                restored,
                "restore",
                str(backup),
                "--secret-key-file",
                str(first.data_dir / "secret.key"),
            )
            again = cli(restored, "restore", str(backup), check=False)
            assert again.returncode == 1
            assert "already holds a store" in again.stderr
            forced = cli(restored, "restore", str(backup), "--force")  # its own key opens it
            assert "Restored" in forced.stdout
            assert (restored / "secret.key").read_bytes() == (
                first.data_dir / "secret.key"
            ).read_bytes()

            second = BerthProcess(restored, env=env, args=["--local"]).start()
            api = second.api(token)  # the old token
            assert online_server_id(api) == server_id
            # What ran when the backup was taken is carried on (taken over) to its end.
            carried = [wait_final(api, i, 120) for i in busy]
            assert [d["state"] for d in carried] == ["succeeded"] * 4, [
                (d["state"], d["error"]) for d in carried
            ]
            signed_in = _sign_in(second.url, email, PASSWORD)
            assert signed_in.status_code == 200
            assert str(signed_in.url).rstrip("/").endswith(("/servers", second.url))
            rolled = api.post(
                f"/api/agent/installations/{installation['id']}/rollback",
                params={"wait": 60},
                json={"deploymentId": revision["id"]},
                timeout=90,
            )
            deployed(rolled, "succeeded")
            assert environ_of(secret_port)["SECRET"] == "s3cr3t $x"  # unsealed by the key
            fresh_port = host_port()
            deployed(deploy(api, server_id, prefix + "after", fresh_port), "succeeded")
            assert get_app(fresh_port).text == "hello from v1\n"
            api.close()
        finally:
            first.stop()
            if second is not None:
                second.stop()
            remove_containers(prefix)

    def test_a_backup_of_webhooks_needs_the_key_and_keeps_their_urls(self, tmp_path: Path) -> None:
        """A store whose only secrets are a webhook's (its URL and signing secret, both
        sealed): the backup holds neither in the clear, restoring it needs the key, and
        the restored berth knows the webhook."""
        import asyncio

        import berth as library

        one, two, backup = tmp_path / "one", tmp_path / "two", tmp_path / "hooks.db"
        token = f"t0k3n-{uuid.uuid4().hex}"

        async def make() -> tuple[str, str]:
            async with library.open(one) as app:
                user = await app.create_user("hooks@example.com", PASSWORD)
                created = await app.create_webhook(
                    user,
                    url=f"https://93.184.215.14/hooks/{token}",
                    events=["server.online"],
                )
                return await app.regenerate_token(user), str(created.webhook.id)

        api_token, webhook_id = asyncio.run(make())
        cli(one, "backup", str(backup))
        assert token.encode() not in backup.read_bytes()
        refused = cli(two, "restore", str(backup), check=False)
        assert refused.returncode == 2
        assert "secret_key" in refused.stderr
        cli(two, "restore", str(backup), "--secret-key-file", str(one / "secret.key"))
        process = BerthProcess(two).start()
        try:
            with process.api(api_token) as api:
                (hook,) = api.get("/api/agent/webhooks").json()["webhooks"]
            assert hook["id"] == webhook_id
            assert hook["url"] == "https://93.184.215.14/…"
        finally:
            process.stop()

    def test_an_older_backup_gets_its_webhook_urls_sealed(self, tmp_path: Path) -> None:
        """A backup from before webhook URLs were sealed (schema 0007, the URL in the
        clear) is restored with its key; the berth started on it seals each URL with that
        key (nothing of it left in the clear) and still knows it."""
        from alembic import command
        from berth.adapters.secrets import KeyBox
        from berth.adapters.sql import alembic_config, sqlite_url

        old, target, backup = tmp_path / "old", tmp_path / "new", tmp_path / "old.db"
        old.mkdir()
        command.upgrade(alembic_config(sqlite_url(old)), "0007")
        key = bytes(range(32))
        key_file = tmp_path / "secret.key"
        key_file.write_bytes(base64.urlsafe_b64encode(key) + b"\n")
        token = f"t0k3n-{uuid.uuid4().hex}"
        user_id, hook_id = uuid.uuid4(), uuid.uuid4()
        with sqlite3.connect(old / "berth.db") as conn:
            conn.execute(
                "INSERT INTO user_account (id, email, password_hash, created_at) "
                "VALUES (?, 'old@example.com', 'x', '2026-01-01 00:00:00.000000')",
                (user_id.hex,),
            )
            conn.execute(
                "INSERT INTO webhook (id, owner_id, url, events, secret_sealed, created_at) "
                "VALUES (?, ?, ?, '[\"server.online\"]', ?, '2026-01-01 00:00:00.000000')",
                (
                    hook_id.hex,
                    user_id.hex,
                    f"https://93.184.215.14/hooks/{token}",
                    KeyBox(key).seal(b"whsec_" + base64.b64encode(b"s" * 32)),
                ),
            )
        cli(old, "backup", str(backup))
        cli(target, "restore", str(backup), "--secret-key-file", str(key_file))
        process = BerthProcess(target).start()
        try:
            process.stop()
            with sqlite3.connect(target / "berth.db") as conn:
                (version,) = conn.execute("SELECT version_num FROM alembic_version").fetchone()
                (sealed,) = conn.execute("SELECT url_sealed FROM webhook").fetchone()
            assert version >= "0008"
            assert KeyBox(key).open(sealed).decode() == f"https://93.184.215.14/hooks/{token}"
            for path in target.iterdir():
                if path.is_file():
                    assert token.encode() not in path.read_bytes(), path
        finally:
            process.stop()

    def test_restore_refuses_what_is_not_a_berth_backup(self, tmp_path: Path) -> None:
        """A file that is not SQLite, an SQLite file without berth's schema, one of an
        unknown schema version, and a missing file: refused, nothing written."""
        target = tmp_path / "data"
        garbage = tmp_path / "garbage.db"
        garbage.write_bytes(b"not a database at all" * 100)
        foreign = tmp_path / "foreign.db"
        with sqlite3.connect(foreign) as conn:
            conn.execute("CREATE TABLE t (x)")
        future = tmp_path / "future.db"
        source = tmp_path / "source"
        cli(source, "user", "create", "--email", "f@example.com", stdin=PASSWORD + "\n")
        cli(source, "backup", str(future))
        with sqlite3.connect(future) as conn:
            conn.execute("UPDATE alembic_version SET version_num = '9999'")
        for path, why in (
            (garbage, "not a berth database"),
            (foreign, "not a berth database"),
            (future, "9999"),
            (tmp_path / "missing.db", "no file"),
        ):
            refused = cli(target, "restore", str(path), check=False)
            assert refused.returncode in (1, 2), refused
            assert why in refused.stderr, refused.stderr
            assert not (target / "berth.db").exists()

    def test_backup_of_a_postgresql_store_names_pg_dump(self, tmp_path: Path) -> None:
        """On PostgreSQL, backup and restore refuse and point at pg_dump/pg_restore."""
        env = {"BERTH_DATABASE_URL": "postgresql+asyncpg://berth@127.0.0.1:1/berth"}
        for args in (("backup", str(tmp_path / "x.db")), ("restore", str(tmp_path / "x.db"))):
            refused = cli(tmp_path / "data", *args, env=env, check=False)
            assert refused.returncode == 1
            assert "pg_dump" in refused.stderr
        assert not (tmp_path / "x.db").exists()


class TestConnections:
    def test_an_idle_connection_outlives_a_clients_keep_alive(self, berth: BerthProcess) -> None:
        """A keep-alive connection idle for longer than a client keeps one (httpx: 5 s)
        still takes the next request: a server that closed it first would race the
        client's next request on it ("Server disconnected without sending a response")."""
        conn = http.client.HTTPConnection("127.0.0.1", berth.port, timeout=10)
        try:  # http.client reads whole answers (headers and body may come in two reads)
            conn.request("GET", "/healthz")
            response = conn.getresponse()
            assert (response.status, response.read()) == (200, b'{"status":"ok"}')
            first = conn.sock
            time.sleep(httpx.Limits().keepalive_expiry + 1)  # idle past the client's expiry
            conn.request("GET", "/healthz")
            assert conn.sock is first  # the same connection, not a new one
            assert conn.getresponse().status == 200  # RemoteDisconnected: closed by berth
        finally:
            conn.close()
