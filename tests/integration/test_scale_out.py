"""berth at scale, as the README's "Running at scale" describes it: PostgreSQL, two API
replicas (``serve --no-worker``) and two ``berth worker`` processes, each with a data
dir of its own and one shared ``BERTH_SECRET_KEY``, all started at the same moment on
an empty database (the migrations' lock lets one migrate while the others wait).
"""

from __future__ import annotations

import asyncio
import base64
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from deploy_support import (
    FAST_ENV,
    RUN,
    all_succeeded,
    containers_of,
    deploy,
    environ_of,
    get_json,
    host_port,
    remove_containers,
    wait_final,
    wait_until,
)
from harness import BerthProcess, WorkerProcess, free_port, scrape
from infra import postgres_database
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

pytestmark = pytest.mark.integration


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


def test_two_replicas_and_two_workers_started_at_once_on_an_empty_database(
    tmp_path: Path, echo_image: str
) -> None:
    """Four processes started together on an empty PostgreSQL all come up (one migrated,
    once); deploys through both replicas are run by the workers (which unseal what the
    replicas sealed: the shared key), and every replica reports the same store counts."""
    from berth.adapters.sql.archive import schema_versions

    key = base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")
    with postgres_database("berth_scale") as url:
        env = {
            **FAST_ENV,
            "BERTH_DATABASE_URL": url,
            "BERTH_SECRET_KEY": key,
            "BERTH_QUEUE_TIMEOUT": "120",
        }
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
            servers = wait_until(
                lambda: get_json(apis[1], "/api/agent/servers")["servers"],
                lambda found: any(s["status"] == "online" for s in found),
                30,
                "local server online, seen through the second replica",
            )
            server_id = servers[0]["id"]
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
