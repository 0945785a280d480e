"""Store faults survived (issue 11), with the real parts.

A real ``berth serve`` on a PostgreSQL cluster of this module's own (``initdb`` and
``pg_ctl`` on a free port, so stopping it disturbs no other test): while it is stopped
an authenticated call answers 503 store-unavailable with ``Retry-After``, ``/readyz``
503, ``/healthz`` 200, and the log gets a warning per interval, not a traceback per
request; once it runs again the same call answers 200, berth never restarted.

On SQLite: a store that refuses writes -- another process holding the database's
write lock past the busy timeout, which SQLite reports with the same error class as a
full disk -- does not fail an authenticated read whose "last used" write is due; and
the adapter turns SQLite's real "database or disk is full" into ``StoreUnavailable``.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import logging
import os
import shutil
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from berth.adapters.sql import create_engine, sqlite_url
from berth.adapters.sql.faults import unavailable
from berth.adapters.sql.transaction import transaction
from berth.core.errors import StoreUnavailable
from deploy_support import (
    FAST_ENV,
    RUN,
    all_succeeded,
    containers_of,
    deployment_of,
    get_app,
    host_port,
    queue_delayed,
    serving_local,
    wait_final,
    wait_one_running,
    wait_until,
)
from harness import BerthProcess, free_port
from infra import DATABASES, build_echo_image, fill, postgres_database, small_disk
from infra import unavailable as infra_unavailable
from sqlalchemy import event, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

REQUESTS = 50


class Cluster:
    """A throwaway PostgreSQL cluster on 127.0.0.1 (trust auth), run as a non-root user."""

    def __init__(self) -> None:
        bindirs = [
            d
            for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"))
            if os.access(f"{d}/initdb", os.X_OK) and os.access(f"{d}/pg_ctl", os.X_OK)
        ]
        if not bindirs:
            infra_unavailable("no PostgreSQL server under /usr/lib/postgresql")
        self.bin = bindirs[-1]
        self.user: str | None = None  # initdb and postgres refuse root: as scripts/dev
        if os.geteuid() == 0:
            known = subprocess.run(["id", "-u", "postgres"], capture_output=True).returncode == 0
            self.user = "postgres" if known else "nobody"
        # In /tmp, not pytest's tmp_path (mode 0700): the server's user must reach it.
        self.dir = Path(tempfile.mkdtemp(prefix="berth-pg-outage.", dir="/tmp"))
        if self.user is not None:
            shutil.chown(self.dir, self.user)
        self.port = free_port()
        self.url = f"postgresql+asyncpg://berth@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        command = [f"{self.bin}/{args[0]}", *args[1:]]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        done = subprocess.run(command, cwd="/", capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, (command, done.stdout, done.stderr, self.server_log())

    def server_log(self) -> str:
        path = self.dir / "postgres.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def init(self) -> Cluster:
        data = str(self.dir / "data")
        self._run("initdb", f"--pgdata={data}", "--username=berth", "--auth=trust")
        with open(self.dir / "data" / "postgresql.conf", "a") as conf:
            conf.write(
                f"listen_addresses = '127.0.0.1'\nport = {self.port}\n"
                f"unix_socket_directories = '{self.dir}'\nfsync = off\n"
            )
        return self

    def start(self) -> None:
        log = str(self.dir / "postgres.log")
        self._run("pg_ctl", f"--pgdata={self.dir}/data", f"--log={log}", "--wait", "start")

    def stop(self) -> None:
        self._run("pg_ctl", f"--pgdata={self.dir}/data", "--mode=fast", "--wait", "stop")

    def remove(self) -> None:
        if (self.dir / "data" / "postmaster.pid").exists():
            self._run("pg_ctl", f"--pgdata={self.dir}/data", "--mode=immediate", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def echo_delay_image(docker_ready: None) -> str:
    """The echo image (which waits ``BERTH_TEST_DELAY`` seconds before it listens)."""
    return build_echo_image("v1")


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    found = Cluster().init()
    found.start()
    try:
        yield found
    finally:
        found.remove()


def _tracebacks(records: list[dict[str, Any]], raw: str) -> int:
    """Tracebacks in a JSON log: records carrying one, and any raw ``Traceback`` lines."""
    in_records = sum(1 for r in records if "exception" in r or "exc_info" in r)
    return max(in_records, raw.count("Traceback (most recent call last)"))


def _store_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert int(response.headers["retry-after"]) >= 1
    body = response.json()
    assert body["type"] == "urn:berth:problem:store-unavailable", body
    assert "database" in body["detail"].lower(), body
    assert "restarted" not in body["detail"], body


class TestPostgresStopped:
    def test_503_while_down_and_200_again_once_back(self, cluster: Cluster, tmp_path: Path) -> None:
        """PostgreSQL stopped: authenticated calls and /readyz are 503 with Retry-After,
        /healthz 200, far fewer log tracebacks than requests; started again: 200, no
        restart of berth."""
        berth = BerthProcess(tmp_path / "data", env={"BERTH_DATABASE_URL": cluster.url})
        berth.start()
        try:
            [(_, token)] = berth.new_users(1, "outage")
            with berth.api(token) as api:
                assert api.get("/api/agent/servers").status_code == 200
                assert httpx.get(f"{berth.url}/readyz", timeout=10).status_code == 200
                log_before = len(berth.logs().encode())
                records_before = len(berth.log_records())
                pid = berth.proc.pid if berth.proc else None

                cluster.stop()
                started = time.monotonic()
                for _ in range(REQUESTS):  # spread over some seconds, as real traffic is
                    _store_unavailable(api.get("/api/agent/servers"))
                    time.sleep(0.1)
                took = time.monotonic() - started
                _store_unavailable(api.get("/readyz"))
                assert httpx.get(f"{berth.url}/healthz", timeout=10).status_code == 200
                time.sleep(0.5)  # the last request lines reach the log

                raw = berth.logs().encode()[log_before:].decode(errors="replace")
                records = berth.log_records()[records_before:]
                assert _tracebacks(records, raw) <= 2, raw[-4000:]
                warnings = [r for r in records if r.get("event") == "store_unavailable"]
                assert 1 <= len(warnings) <= 1 + int(took // 10), warnings
                # About one request line each, nothing like 9 KB of traceback per request.
                assert len(raw) < REQUESTS * 1000, len(raw)

                cluster.start()
                deadline = time.monotonic() + 30
                while httpx.get(f"{berth.url}/readyz", timeout=10).status_code != 200:
                    assert time.monotonic() < deadline, "/readyz never became 200 again"
                    time.sleep(0.2)
                assert api.get("/api/agent/servers").status_code == 200
                assert berth.proc is not None
                assert berth.proc.pid == pid
                assert berth.proc.poll() is None
        finally:
            berth.stop()


class TestDeploysThroughAnOutage:
    def test_ten_deploys_through_a_20_second_outage_all_succeed(
        self, cluster: Cluster, tmp_path: Path, echo_delay_image: str
    ) -> None:
        """PostgreSQL stopped for 20 s while ten deployments are queued or running on
        ``serve --local``: once it is back every deployment ends ``succeeded`` (none
        ``timed_out``), each app answers, and each has exactly one container — nothing
        left serving unseen."""
        env = {
            **FAST_ENV,
            "BERTH_DATABASE_URL": cluster.url,
            "BERTH_QUEUE_TIMEOUT": "300",
            "BERTH_HEALTH_TIMEOUT": "60",
        }
        prefix = f"e2e-{RUN}-outage-"
        with serving_local(tmp_path / "data", env, "outage-deploys", prefix) as local:
            api = local.api
            names = [f"{prefix}{n}" for n in range(10)]
            ports = [host_port() for _ in names]
            # Each app answers 5 s after it starts, so the deployments still run when the
            # outage begins: with 1 s, on a busy machine all ten had ended before the first
            # look at their states (the ten requests that queue them take a while there).
            ids = [
                queue_delayed(api, local.server_id, name, port, echo_delay_image, 5)
                for name, port in zip(names, ports, strict=True)
            ]
            wait_one_running(api, ids, 20)
            cluster.stop()
            time.sleep(20)
            cluster.start()
            finals = [wait_final(api, i, 120) for i in ids]
            all_succeeded(finals)
            for final, name, port in zip(finals, names, ports, strict=True):
                [container] = containers_of(final["installationId"])
                assert container["Name"] == f"/{name}"
                assert get_app(port).text == "hello from v1\n"


class TestLeaseClockPaused:
    def test_an_outage_longer_than_the_lease_spends_no_attempt(
        self, cluster: Cluster, tmp_path: Path, echo_delay_image: str
    ) -> None:
        """PostgreSQL stopped for several leases while a deployment runs: once it is back
        the run carries on under its own lease (the clock stood still: ``leases_paused``),
        it succeeds on its first attempt, nothing is taken over, no traceback is logged,
        and the failed renewals and cancel checks are a warning per interval, not per tick."""
        lease = 3.0
        env = {
            **FAST_ENV,
            "BERTH_DATABASE_URL": cluster.url,
            "BERTH_LEASE_SECONDS": str(lease),
            "BERTH_QUEUE_TIMEOUT": "120",
            "BERTH_HEALTH_TIMEOUT": "60",
        }
        prefix = f"e2e-{RUN}-paused-"
        with serving_local(tmp_path / "data", env, "paused-lease", prefix, 30) as local:
            api, berth = local.api, local.process
            port = host_port()
            deployment_id = queue_delayed(
                api, local.server_id, f"{prefix}app", port, echo_delay_image, 3
            )
            wait_until(
                lambda: deployment_of(api, deployment_id)["state"],
                lambda state: state == "running",
                30,
                "the deployment running",
            )
            records_before = len(berth.log_records())
            log_before = len(berth.logs().encode())
            cluster.stop()
            stopped = time.monotonic()
            time.sleep(4 * lease)
            cluster.start()
            outage = time.monotonic() - stopped
            final = wait_final(api, deployment_id, 120)
            assert (final["state"], final["error"]) == ("succeeded", None)
            assert final["attempts"] == 1, final
            assert get_app(port).text == "hello from v1\n"
            time.sleep(0.5)
            records = berth.log_records()[records_before:]
            events = [r.get("event") for r in records]
            raw = berth.logs().encode()[log_before:].decode(errors="replace")
            assert "deployment_taken_over" not in events, raw[-3000:]
            assert "leases_paused" in events, raw[-3000:]
            assert _tracebacks(records, raw) == 0, raw[-4000:]
            for kind in ("deployment_lease_renewal_failed", "deployment_cancel_check_failed"):
                assert events.count(kind) <= 1 + int(outage // 10) + 1, (kind, events.count(kind))


class TestReadyOnAFullDisk:
    def test_readyz_is_503_while_writes_fail_and_200_once_there_is_room(
        self, tmp_path: Path
    ) -> None:
        """The SQLite database on a small filesystem filled up: reads still answer, but
        /readyz is 503 store-unavailable (it commits a write); once room is made, 200."""
        with small_disk(tmp_path / "disk") as disk:
            database = f"sqlite+aiosqlite:///{disk / 'berth.db'}"
            berth = BerthProcess(tmp_path / "data", env={"BERTH_DATABASE_URL": database})
            try:
                berth.start()
                [(_, token)] = berth.new_users(1, "full-disk")
                assert httpx.get(f"{berth.url}/readyz", timeout=10).status_code == 200
                filler = fill(disk)
                full = wait_until(
                    lambda: httpx.get(f"{berth.url}/readyz", timeout=10),
                    lambda response: response.status_code == 503,
                    30,
                    "/readyz 503 on the full disk",
                )
                _store_unavailable(full)
                assert "full" in full.json()["detail"], full.json()
                with berth.api(token) as api:  # reads still answer
                    assert api.get("/api/agent/servers").status_code == 200
                filler.unlink()
                wait_until(
                    lambda: httpx.get(f"{berth.url}/readyz", timeout=10).status_code,
                    lambda status: status == 200,
                    30,
                    "/readyz 200 again",
                )
            finally:
                berth.stop()


class TestSqliteRefusingWrites:
    def test_a_due_touch_refused_by_a_locked_store_does_not_fail_the_read(
        self, tmp_path: Path
    ) -> None:
        """Another process holds SQLite's write lock: an authenticated GET whose
        "last used" write is due still answers 200, and the write is skipped."""
        data = tmp_path / "data"
        berth = BerthProcess(data).start()
        try:
            [(_, token)] = berth.new_users(1, "locked")  # never used: the touch is due
            holder = sqlite3.connect(data / "berth.db", isolation_level=None, timeout=30)
            try:
                holder.execute("BEGIN IMMEDIATE")  # the write lock, until ROLLBACK
                response = httpx.get(
                    f"{berth.url}/api/agent/servers",
                    headers={"Authorization": f"Bearer {token}"},
                    timeout=60,
                )
                assert response.status_code == 200, response.text
                last_used = holder.execute("SELECT last_used_at FROM api_token").fetchall()
            finally:
                holder.execute("ROLLBACK")
                holder.close()
            assert last_used == [(None,)]  # refused, not recorded
            deadline = time.monotonic() + 10
            while not any(
                r.get("event") == "token_last_used_not_recorded" for r in berth.log_records()
            ):
                assert time.monotonic() < deadline, berth.logs()[-3000:]
                time.sleep(0.1)
            assert "Traceback" not in berth.logs()
        finally:
            berth.stop()


async def _grow_past_max_page_count(engine: AsyncEngine) -> None:
    """One transaction that caps the database at its size, then needs 1 MB more."""
    async with transaction(engine) as tx:
        pages = (await tx.read(text("PRAGMA page_count"))).scalar_one()
        await tx.write(text(f"PRAGMA max_page_count = {int(pages)}"))
        await tx.write(text("INSERT INTO filler VALUES (randomblob(1000000))"))


class TestSqliteErrorsTranslated:
    async def test_a_full_database_raises_store_unavailable(self, tmp_path: Path) -> None:
        """SQLite's real "database or disk is full" (SQLITE_FULL, here from
        ``max_page_count``) comes out of a transaction as StoreUnavailable, from it."""
        engine = create_engine(sqlite_url(tmp_path))
        try:
            async with transaction(engine) as tx:
                await tx.write(text("CREATE TABLE filler (data BLOB)"))
            with pytest.raises(StoreUnavailable) as info:
                await _grow_past_max_page_count(engine)
            assert "full" in info.value.detail
            cause = info.value.__cause__
            assert cause is not None
            assert getattr(getattr(cause, "orig", None), "sqlite_errorcode", 0) & 0xFF == 13
        finally:
            await engine.dispose()

    async def test_a_broken_unique_key_is_not_an_outage(self, tmp_path: Path) -> None:
        """Errors that are not outages (a unique violation) pass through unchanged."""
        engine = create_engine(sqlite_url(tmp_path))
        try:
            async with transaction(engine) as tx:
                await tx.write(text("CREATE TABLE t (k INTEGER PRIMARY KEY)"))
                await tx.write(text("INSERT INTO t VALUES (1)"))
            with pytest.raises(IntegrityError) as info:
                async with transaction(engine) as tx:
                    await tx.write(text("INSERT INTO t VALUES (1)"))
            assert unavailable(info.value) is None
        finally:
            await engine.dispose()


class TestCancelledTransactions:
    @pytest.mark.parametrize("database", DATABASES)
    async def test_a_task_cancelled_as_its_transaction_ends_leaves_no_error(
        self, database: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A task cancelled while its transaction gives the connection back (a lease keeper
        stopped as its run ends, a run stopped by a shutdown) is cancelled, the connection
        goes back to the pool whole, and nothing is logged as an error (the pool's "Exception
        during reset" made the tests of a stopped berth fail on a busy machine)."""
        with contextlib.ExitStack() as stack:
            url = (
                sqlite_url(tmp_path)
                if database == "sqlite"
                else stack.enter_context(postgres_database("berth_cancel"))
            )
            engine = create_engine(url)
            try:
                ending: list[asyncio.Task[None]] = []

                def cancel_it(*_: object) -> None:  # the pool resets the connection it gets back
                    if ending:
                        ending.pop().cancel()

                event.listen(engine.sync_engine.pool, "reset", cancel_it)

                async def read() -> None:
                    async with transaction(engine) as tx:
                        await tx.read(text("SELECT 1"))

                task = asyncio.create_task(read())
                ending.append(task)
                with caplog.at_level(logging.ERROR), pytest.raises(asyncio.CancelledError):
                    await task
                assert not ending, "the connection was never given back"
                assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
                assert engine.sync_engine.pool.checkedout() == 0
                async with transaction(engine) as tx:
                    assert (await tx.read(text("SELECT 1"))).scalar_one() == 1
            finally:
                await engine.dispose()
