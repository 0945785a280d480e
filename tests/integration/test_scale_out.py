"""berth at scale, as the README's "Running at scale" describes it: PostgreSQL, two API
replicas (``serve --no-worker``) and two ``berth worker`` processes, each with a data
dir of its own and one shared ``BERTH_SECRET_KEY``, all started at the same moment on
an empty database (the migrations' lock lets one migrate while the others wait).
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import time
from collections import Counter
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from deploy_support import (
    FAST_ENV,
    RUN,
    add_ssh_server,
    all_succeeded,
    containers_of,
    deploy,
    environ_of,
    get_json,
    host_port,
    online_server_id,
    remove_containers,
    wait_final,
    wait_until,
)
from harness import Api, BerthProcess, WorkerProcess, free_port, scrape
from infra import Sshd, postgres_database
from sim_worker import SimWorker, insert_fleet
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

pytestmark = pytest.mark.integration

T = TypeVar("T")


def _schema_version(url: str) -> list[str]:
    async def read() -> list[str]:
        engine = create_async_engine(url)
        try:
            async with engine.connect() as conn:
                rows = await conn.execute(text("SELECT version_num FROM alembic_version"))
                return [str(row[0]) for row in rows]
        finally:
            await engine.dispose()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, read()).result(timeout=30)


def _shared_env(url: str) -> dict[str, str]:
    """``FAST_ENV`` on the PostgreSQL at ``url``, with one ``BERTH_SECRET_KEY`` for every
    process (what one seals -- a server's SSH key, a deploy's env -- another unseals)."""
    key = base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")
    return {**FAST_ENV, "BERTH_DATABASE_URL": url, "BERTH_SECRET_KEY": key}


def test_two_replicas_and_two_workers_started_at_once_on_an_empty_database(
    tmp_path: Path, echo_image: str
) -> None:
    """Four processes started together on an empty PostgreSQL all come up (one migrated,
    once); deploys through both replicas are run by the workers (which unseal what the
    replicas sealed: the shared key), and every replica reports the same store counts."""
    from berth.adapters.sql.archive import schema_versions

    with postgres_database("berth_scale") as url:
        env = {**_shared_env(url), "BERTH_QUEUE_TIMEOUT": "120"}
        replicas = [
            BerthProcess(tmp_path / "api-1", env=env, args=["--no-worker", "--local"]),
            BerthProcess(tmp_path / "api-2", env=env, args=["--no-worker"]),
        ]
        metrics_ports = [free_port(), free_port()]
        workers = [
            WorkerProcess(tmp_path / f"worker-{n}", env, ["--metrics-listen", f"127.0.0.1:{port}"])
            for n, port in enumerate(metrics_ports)
        ]
        prefix = f"scale-{RUN}-"
        try:
            for process in (*replicas, *workers):  # at once: nobody waits for anybody
                process.launch()
            for replica in replicas:
                replica.wait_healthy()
            worker_ids = {worker.worker_id() for worker in workers}
            assert len(worker_ids) == 2
            assert _schema_version(url) == [schema_versions()[-1]]
            for replica in replicas:
                ready = httpx.get(f"{replica.url}/readyz", timeout=10)
                assert ready.status_code == 200, ready.text
                assert ready.json() == {"status": "ready", "database": "postgresql"}
            assert not any((p.data_dir / "secret.key").exists() for p in (*replicas, *workers))

            _, token = replicas[0].new_user("scale")
            apis = [replica.api(token) for replica in replicas]
            server_id = online_server_id(
                apis[1], 30, "local server online, seen through the second replica"
            )
            names = [f"{prefix}{n}" for n in range(4)]
            ports = [host_port() for _ in names]
            ids = []
            for n, (name, port) in enumerate(zip(names, ports, strict=True)):
                response = deploy(
                    apis[n % 2], server_id, name, port, env={"SEALED": f"v{n}"}, wait=None
                )
                assert response.status_code == 202, response.text
                ids.append(response.json()["deployment"]["id"])
            # Each is read back through the replica it was not sent to.
            finals = [wait_final(apis[(n + 1) % 2], i, 90) for n, i in enumerate(ids)]
            all_succeeded(finals)
            for n, (final, port) in enumerate(zip(finals, ports, strict=True)):
                assert environ_of(port)["SEALED"] == f"v{n}"
                [container] = containers_of(final["installationId"])
                assert container["Name"] == f"/{names[n]}"

            scrapes = [scrape(replica.url) for replica in replicas]
            for seen in scrapes:
                assert seen.value("berth_deployments_finished", state="succeeded") == 4
                assert seen.value("berth_servers", status="online") == 1
                assert seen.value("berth_queue_depth") == 0
            # Step durations are the workers' own: together they timed every deployment.
            runs = [scrape(f"http://127.0.0.1:{port}") for port in metrics_ports]
            for step in ("pull", "create", "start", "health"):
                timed = sum(
                    seen.value("berth_deployment_step_duration_seconds_count", step=step)
                    for seen in runs
                )
                assert timed == 4, (step, timed)
            assert runs[0].value("berth_deployments_finished", state="succeeded") == 4
            for api in apis:
                api.close()
            for process in (*replicas, *workers):
                assert process.proc is not None
                assert process.proc.poll() is None, process.logs()
            for worker in workers:  # SIGTERM stops a worker serving its metrics, cleanly
                assert worker.stop() == 0, worker.logs()
        finally:
            for worker in workers:
                worker.stop()
            for replica in replicas:
                replica.stop()
            remove_containers(prefix)


# --- each server watched by one worker; replicas touch none -------------------------------------


class _Store:
    """Reads of the shared PostgreSQL as the workers left it, on an engine and a loop of
    their own (in a thread: the test itself is synchronous)."""

    def __init__(self, url: str) -> None:
        self._thread = ThreadPoolExecutor(1)
        self._loop = asyncio.new_event_loop()
        self.engine = create_async_engine(url)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """``coro`` run to its end on the store's loop."""
        return self._thread.submit(self._loop.run_until_complete, coro).result(timeout=60)

    def count(self, where: str) -> int:
        """How many servers match the SQL condition ``where``."""

        async def read() -> int:
            async with self.engine.connect() as conn:
                found = await conn.execute(text(f"SELECT count(*) FROM server WHERE {where}"))
                return int(found.scalar_one())

        return self.run(read())

    def watch(self) -> dict[str, tuple[str | None, datetime | None]]:
        """Each server's watcher and when it last stood by its status, by server id."""

        async def read() -> dict[str, tuple[str | None, datetime | None]]:
            async with self.engine.connect() as conn:
                rows = await conn.execute(text("SELECT id, watched_by, checked_at FROM server"))
                return {str(row[0]): (row[1], row[2]) for row in rows}

        return self.run(read())

    def watchers(self) -> list[str]:
        """The watcher of each server, sorted (``"-"``: none)."""
        return sorted(watcher or "-" for watcher, _ in self.watch().values())

    def close(self) -> None:
        self.run(self.engine.dispose())
        self._thread.submit(self._loop.close).result(timeout=30)
        self._thread.shutdown()


_ACCEPTED = re.compile(r"Accepted publickey for berth from \S+ port (\d+) ssh2: \S+ (\S+)")


def _logins(sshd: Sshd) -> int:
    """Logins sshd accepted so far (one per connection a berth process opened)."""
    return sshd.log().count("Accepted publickey for berth")


def _open_sessions(sshd: Sshd) -> list[int]:
    """How many connections are open now to each key that has one (one key per server),
    sorted: the ``Accepted publickey`` lines whose client port has no ``Connection
    closed``, ``Connection reset`` or ``Disconnected`` line since."""
    opened: dict[str, str] = {}  # client port -> key fingerprint
    for line in sshd.log().splitlines():
        accepted = re.search(
            r"Accepted publickey for berth from \S+ port (\d+) ssh2: \S+ (\S+)", line
        )
        if accepted:
            opened[accepted.group(1)] = accepted.group(2)
            continue
        closed = re.search(
            r"(?:Connection closed|Connection reset|Disconnected from) .*port (\d+)", line
        )
        if closed:
            opened.pop(closed.group(1), None)
    return sorted(Counter(opened.values()).values())


def _wait_one_session_each(sshd: Sshd, servers: int, what: str) -> None:
    """Wait (30 s at most) until each of ``servers`` servers has exactly one connection
    open to ``sshd``."""
    wait_until(lambda: _open_sessions(sshd), lambda sessions: sessions == [1] * servers, 30, what)


def _statuses(api: Api) -> dict[str, tuple[str, str | None]]:
    """Each server's ``(status, lastKnownStatus)`` as the API reads them, by id."""
    listed = get_json(api, "/api/agent/servers")["servers"]
    return {s["id"]: (s["status"], s.get("lastKnownStatus")) for s in listed}


class TestOnlyWorkersTouchServers:
    def test_a_replica_never_connects_and_reads_checking_what_no_worker_verifies(
        self, tmp_path: Path
    ) -> None:
        """``serve --no-worker`` with a server registered: over many monitor intervals
        sshd sees no login, and the server reads ``checking`` (no worker verified it);
        once a worker runs it connects (one connection) and the replica reads ``online``
        from the store; the worker SIGKILLed, within two passes' time the replica reads
        ``checking`` with ``lastKnownStatus`` ``online``, and still never connects."""
        sshd = Sshd().start()
        with postgres_database("berth_replica") as url:
            env = _shared_env(url)
            replica = BerthProcess(tmp_path / "api", env=env, args=["--no-worker"])
            worker = WorkerProcess(tmp_path / "worker", env)
            try:
                replica.start()
                [(_, token)] = replica.new_users(1, "replica")
                with replica.api(token) as api:
                    server_id = add_ssh_server(api, sshd, f"replica-{RUN}")["id"]
                    time.sleep(10 * float(FAST_ENV["BERTH_MONITOR_SECONDS"]))  # many intervals
                    assert _logins(sshd) == 0, sshd.log()[-2000:]
                    seen = get_json(api, f"/api/agent/servers/{server_id}")
                    assert (seen["status"], seen["lastKnownStatus"]) == ("checking", "offline")

                    worker.launch()
                    wait_until(
                        lambda: _statuses(api),
                        lambda found: found == {server_id: ("online", None)},
                        60,
                        "the server online, read through the replica",
                    )
                    assert _open_sessions(sshd) == [1], sshd.log()[-2000:]

                    worker.kill()
                    logins = _logins(sshd)
                    wait_until(
                        lambda: _statuses(api),
                        lambda found: found == {server_id: ("checking", "online")},
                        60,  # stale after 2 * (0.5 s + 10 s): two passes' time
                        "the server checking, nobody verifying it any more",
                    )
                    assert _logins(sshd) == logins, sshd.log()[-2000:]
            finally:
                worker.stop()
                replica.stop()
                sshd.stop()


class TestEachServerOneWorker:
    def test_workers_share_the_servers_and_take_a_killed_ones_within_30_s(
        self, tmp_path: Path
    ) -> None:
        """One ``berth worker`` on PostgreSQL watches all four servers; a second joins and
        they hold two each, the first giving its two back (their connections closed: one
        open connection per server throughout); the first SIGKILLed, within 30 s the
        second watches its two and has verified them again."""
        sshd = Sshd().start()
        with postgres_database("berth_share") as url:
            env = _shared_env(url)
            replica = BerthProcess(tmp_path / "api", env=env, args=["--no-worker"])
            workers = [WorkerProcess(tmp_path / f"worker-{n}", env) for n in range(2)]
            store = _Store(url)
            try:
                replica.start()
                [(_, token)] = replica.new_users(1, "share")
                with replica.api(token) as api:
                    ids = [add_ssh_server(api, sshd, f"share-{RUN}-{n}")["id"] for n in range(4)]
                    first = workers[0].launch().worker_id()
                    wait_until(store.watchers, lambda found: found == [first] * 4, 60, "all four")
                    online = dict.fromkeys(ids, ("online", None))
                    wait_until(lambda: _statuses(api), lambda found: found == online, 60, "online")
                    _wait_one_session_each(sshd, 4, "one open connection per server")

                    second = workers[1].launch().worker_id()
                    wait_until(
                        store.watchers,
                        lambda found: found == sorted([first, first, second, second]),
                        60,
                        "two servers each",
                    )
                    wait_until(lambda: _statuses(api), lambda found: found == online, 60, "online")
                    _wait_one_session_each(
                        sshd, 4, "one open connection per server: the given-back ones closed"
                    )
                    assert len(_open_sessions(sshd)) == 4  # and every server has one
                    watch = store.watch()
                    theirs = {sid for sid, (watcher, _) in watch.items() if watcher == first}

                    killed_at = datetime.now(UTC)
                    workers[0].kill()
                    wait_until(
                        store.watch,
                        lambda found: all(
                            watcher == second and checked is not None and checked > killed_at
                            for watcher, checked in (found[sid] for sid in theirs)
                        ),
                        30,
                        "the killed worker's servers taken over and verified again",
                    )
                    assert _statuses(api) == online
                    _wait_one_session_each(
                        sshd, 4, "one open connection per server, the survivor's"
                    )
            finally:
                for worker in workers:
                    worker.stop()
                replica.stop()
                store.close()
                sshd.stop()


# --- a simulated fleet: shares at scale --------------------------------------------------------

#: Simulated servers and workers: enough that a worker checking the whole fleet would show.
SIM_SERVERS = 900
SIM_WORKERS = 3


class TestASimulatedFleet:
    def test_three_workers_watch_a_third_each_and_take_a_killed_ones_within_30_s(
        self, tmp_path: Path
    ) -> None:
        """900 simulated servers (``sim_worker.py``: berth's own worker, only its SSH
        transport simulated) and three workers on PostgreSQL: every server online, each
        worker watches 300 and its passes check those 300, not the fleet; one SIGKILLed,
        within 30 s the other two watch its servers and have verified them again, and
        then hold 450 each."""
        with postgres_database("berth_sim_fleet") as url:
            env = {
                **_shared_env(url),
                "BERTH_MONITOR_SECONDS": "2",
                "BERTH_LOG_LEVEL": "debug",  # the monitor_pass lines
            }
            workers = [SimWorker(tmp_path / f"sim-{n}", env) for n in range(SIM_WORKERS)]
            store = _Store(url)
            try:
                ids = [worker.launch().worker_id() for worker in workers]
                store.run(insert_fleet(store.engine, SIM_SERVERS))
                share = SIM_SERVERS // SIM_WORKERS
                # Each worker's passes check its share, not the fleet (the last two of each).
                wait_until(
                    lambda: [[n for n, _ in worker.passes(0)[-2:]] for worker in workers],
                    lambda found: found == [[share, share]] * SIM_WORKERS,
                    120,
                    "each worker's passes checking a third of the fleet",
                )
                assert Counter(store.watchers()) == dict.fromkeys(ids, share)
                wait_until(
                    lambda: store.count("status = 'online' AND checked_at IS NOT NULL"),
                    lambda online: online == SIM_SERVERS,
                    60,
                    "every server online and verified",
                )

                killed = ids[0]
                theirs = {sid for sid, (watcher, _) in store.watch().items() if watcher == killed}
                killed_at = datetime.now(UTC)
                workers[0].kill()
                wait_until(
                    store.watch,
                    lambda found: all(
                        watcher in ids[1:] and checked is not None and checked > killed_at
                        for watcher, checked in (found[sid] for sid in theirs)
                    ),
                    30,
                    "the killed worker's servers watched and verified again",
                )
                wait_until(
                    lambda: Counter(store.watchers()),
                    lambda found: found == dict.fromkeys(ids[1:], SIM_SERVERS // 2),
                    30,
                    "half each",
                )
            finally:
                for worker in workers:
                    worker.stop()
                store.close()
