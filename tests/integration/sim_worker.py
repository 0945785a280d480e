"""``berth worker`` with simulated servers, for ``test_scale_out.py`` and
``benchmarks/scale_out_bench.py``.

Runs berth's own ``worker`` command (its bootstrap, leases, monitor, store writes: all
real) with one part replaced: the SSH transport. A simulated server answers as a
Docker Engine over SSH would, without sshd and Docker (ten thousand real sshd children
would not fit the machine): a new connection takes ``HANDSHAKE`` seconds, each Docker
call ``CALL`` seconds, and each server has a container list of its own (2 to 6
containers, one of which exits and comes back every ``CHURN`` seconds on 1 % of them).

While the file ``$BERTH_SIM_DOWN`` exists every server refuses connections, and open
connections fail: a fleet-wide SSH outage.

    python tests/integration/sim_worker.py worker --data DIR   (BERTH_DATABASE_URL etc.)

``SimWorker`` starts one (a ``WorkerProcess``); ``insert_fleet`` stores the servers.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from berth.core.errors import ServerUnreachable
from berth.core.models import Container, ProxyRoute, Server, ServerFacts
from harness import WorkerProcess
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

HANDSHAKE = 0.04
CALL = 0.006
CHURN = 30.0

_DOWN = Path(os.environ.get("BERTH_SIM_DOWN", "/nonexistent/berth-sim-down"))
_REFUSED = "Connection refused by 127.0.0.1 port 22 (simulated SSH outage)."


def _down() -> bool:
    return _DOWN.exists()


def containers_of(server_id: UUID, now: float) -> list[Container]:
    """The server's own containers (a stable function of its id and the time)."""
    seed = hashlib.sha256(server_id.bytes).digest()
    count = 2 + seed[0] % 5
    flips = seed[1] % 100 == 0 and int(now / CHURN) % 2 == 1
    return [
        Container(
            id=hashlib.sha256(seed + bytes([n])).hexdigest(),
            name=f"svc-{seed.hex()[:6]}-{n}",
            image=f"registry.example/team/svc{n}:{seed[2 + n] % 9}",
            state="exited" if flips and n == 0 else "running",
            status="Exited (0) 1 second ago" if flips and n == 0 else "Up 3 hours",
            created_at=None,
            ports=(),
            installation_id=None,
        )
        for n in range(count)
    ]


class SimDocker:
    def __init__(self, server_id: UUID) -> None:
        self._id = server_id

    async def _call(self) -> None:
        await asyncio.sleep(CALL)
        if _down():
            raise ServerUnreachable(_REFUSED)

    async def facts(self) -> ServerFacts:
        await self._call()
        return ServerFacts(
            os="Debian GNU/Linux 12",
            arch="x86_64",
            docker_version="24.0.7",
            cpus=2,
            memory_bytes=4 << 30,
        )

    async def list_containers(self) -> list[Container]:
        await self._call()
        return containers_of(self._id, time.time())


class SimProxy:
    async def matches(self, routes: list[ProxyRoute]) -> bool:
        await asyncio.sleep(CALL)
        return True

    async def apply(self, routes: list[ProxyRoute]) -> None:
        return None


class SimConnection:
    def __init__(self, server: Server) -> None:
        self.docker = SimDocker(server.id)
        self.proxy = SimProxy()

    async def probe(self, port: int, path: str | None = None) -> str | None:
        return None

    async def accepts(self, port: int) -> bool:
        return False


class SimGateway:
    """Stands in for ``SshGateway`` (same constructor, arguments ignored)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._pool: dict[UUID, SimConnection] = {}

    async def connect(self, server: Server) -> SimConnection:
        if _down():
            self._pool.pop(server.id, None)
            await asyncio.sleep(CALL)
            raise ServerUnreachable(_REFUSED)
        conn = self._pool.get(server.id)
        if conn is None:
            await asyncio.sleep(HANDSHAKE)
            conn = self._pool[server.id] = SimConnection(server)
        return conn

    async def disconnect(self, server_id: UUID) -> None:
        self._pool.pop(server_id, None)

    async def close(self) -> None:
        self._pool.clear()


@dataclass
class SimWorker(WorkerProcess):
    """A ``berth worker`` whose SSH transport is simulated (this file, run as a script)."""

    def launch(self) -> SimWorker:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.data_dir / "worker.log"
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "worker", "--data", str(self.data_dir)],
            stdout=self.log_path.open("wb"),
            stderr=subprocess.STDOUT,
            env={**os.environ, "BERTH_LOG_FORMAT": "json", **self.env},
        )
        return self

    def passes(self, since: float) -> list[tuple[int, float]]:
        """``(servers, seconds)`` of each pass that checked servers and ended after
        ``since`` (wall clock), from its ``monitor_pass`` lines (``BERTH_LOG_LEVEL=debug``)."""
        found = []
        for line in self.logs().splitlines():
            if '"monitor_pass"' not in line:
                continue
            with contextlib.suppress(ValueError, KeyError):
                entry = json.loads(line)
                at = datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00"))
                if at.timestamp() >= since and int(entry["servers"]) > 0:
                    found.append((int(entry["servers"]), float(entry["seconds"])))
        return found


async def insert_fleet(engine: AsyncEngine, count: int) -> None:
    """One user (with their personal team) and ``count`` enrolled SSH servers (``offline``,
    never checked) of that team, as the API would store them, straight into the database."""
    from berth.adapters.sql.rows import servers_t, users_t
    from berth.adapters.sql.tables import TeamMemberRow, TeamRow

    now = datetime.now(UTC)
    owner = uuid.uuid4()
    async with engine.begin() as conn:
        await conn.execute(
            users_t.insert().values(
                id=owner,
                email=f"sim-{owner.hex[:8]}@example.com",
                password_hash="x",  # nobody signs in
                created_at=now,
            )
        )
        # A personal team's id is its user's: the servers' owner_id names the team.
        await conn.execute(
            TeamRow.__table__.insert().values(
                id=owner, name="sim", personal_of=owner, created_at=now
            )
        )
        await conn.execute(
            TeamMemberRow.__table__.insert().values(
                team_id=owner, user_id=owner, role="owner", joined_at=now
            )
        )
        rows = [
            {
                "id": uuid.uuid4(),
                "owner_id": owner,
                "name": f"sim-{i:05d}",
                "transport": "ssh",
                "address": f"sim-{i:05d}.example.net",
                "ssh_port": 22,
                "ssh_user": "berth",
                "status": "offline",
                "created_at": now,
                "facts": {},
                "host_keys": [],
            }
            for i in range(count)
        ]
        for start in range(0, count, 1000):
            await conn.execute(servers_t.insert(), rows[start : start + 1000])
        total = await conn.execute(select(func.count()).select_from(servers_t))
        assert total.scalar_one() == count


def main() -> int:
    import berth.adapters.ssh as ssh

    ssh.SshGateway = SimGateway  # type: ignore[misc,assignment]
    from berth.entrypoints.cli.main import main as berth_main

    return berth_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
