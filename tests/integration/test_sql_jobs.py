"""The job queue and the fleet of the SQL store (``SqlJobQueue``, ``SqlFleet``).

Each test gets a fresh, migrated database: a claim takes the oldest runnable
deployment of the whole store, so tests must not see each other's. SQLite
files in ``tmp_path``, and every test also runs on a throwaway database created
on the PostgreSQL server of ``BERTH_TEST_POSTGRES_URL=postgresql+asyncpg://…``
(``scripts/dev test`` starts one; without it those variants are skipped).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import sys
import textwrap
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import builders
import msgspec
import pytest
from berth.adapters.secrets import KeyBox
from berth.adapters.sql import (
    SqlFleet,
    SqlJobQueue,
    SqlUnitOfWorkFactory,
    create_engine,
    dialect,
    migrate,
)
from berth.adapters.sql.rows import servers_t
from berth.adapters.sql.tables import DeploymentRow
from berth.adapters.sql.transaction import shared_write_lock, transaction
from berth.core.errors import StoreUnavailable
from berth.core.events import ServerStatusChanged
from berth.core.models import (
    ContainerSnapshot,
    Deployment,
    DeploymentEvent,
    DeploymentSpec,
    DeploymentState,
    Ending,
    FleetCensus,
    Installation,
    InstallationStatus,
    Job,
    Registry,
    RegistryAuth,
    Server,
    ServerFacts,
    ServerObservation,
    ServerStatus,
    SshCredentials,
    TlsState,
    TlsStatus,
    Transport,
    User,
)
from berth.core.ports import CALL_LANE
from berth.core.unit_of_work import EventHandlers
from infra import DATABASES, fill, migrated_database, observe, small_disk
from sql_support import (
    KEY,
    T0,
    add_user,
    at,
    deployment_of,
    finished,
    installation_of,
    released_together,
    tag,
)
from sqlalchemy import event, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine
from structlog.testing import capture_logs

QUEUE_TIMEOUT = 600.0


# --- fixtures --------------------------------------------------------------------------------


@pytest.fixture(params=DATABASES)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with migrated_database(request.param, tmp_path, "berth_jobs") as url:
        yield url


@pytest.fixture
def jobs(engine: AsyncEngine, box: KeyBox) -> SqlJobQueue:
    return SqlJobQueue(engine, box, queue_timeout=QUEUE_TIMEOUT)


@pytest.fixture
def fleet(engine: AsyncEngine, box: KeyBox) -> SqlFleet:
    return SqlFleet(engine, box)


# --- builders --------------------------------------------------------------------------------


async def add_server(
    uow: SqlUnitOfWorkFactory,
    owner: User,
    private_key: bytes | None = b"-----BEGIN OPENSSH PRIVATE KEY-----\nkey\n",
    **changes: Any,
) -> Server:
    keys = {
        "host_keys": ("ssh-ed25519 AAAAC3Nza host-a",),
        "public_key": "ssh-ed25519 AAAAC3Nzb berth",
    }
    server = builders.a_server(owner_id=owner.id, **(keys | changes))
    async with uow() as tx:
        await tx.servers.add(server, None, private_key)
        await tx.commit()
    return server


async def add_installation(
    uow: SqlUnitOfWorkFactory, owner: User, server: Server, **changes: Any
) -> Installation:
    spec = builders.a_spec(env_keys=("API_KEY",))
    installation = builders.an_installation(server, **({"spec": spec} | changes))
    async with uow() as tx:
        await tx.installations.save(owner.id, installation, {"API_KEY": "k"})
        await tx.commit()
    return installation


async def queue(
    uow: SqlUnitOfWorkFactory,
    owner: User,
    server: Server,
    created_at: datetime = T0,
    *,
    installation: Installation | None = None,
    env: dict[str, str] | None = None,
) -> Deployment:
    """Queue a deployment (of a new installation unless one is given)."""
    installation = installation or await add_installation(uow, owner, server)
    env = {"API_KEY": "k"} if env is None else env
    deployment = builders.a_deployment(
        installation,
        spec=msgspec.structs.replace(installation.spec, env_keys=tuple(sorted(env))),
        created_at=created_at,
        events=(DeploymentEvent(at=created_at, step="queued", message="Deployment queued."),),
    )
    async with uow() as tx:
        await tx.deployments.add(owner.id, deployment, env)
        await tx.commit()
    return deployment


async def setup(uow: SqlUnitOfWorkFactory, **server: Any) -> tuple[User, Server]:
    owner = await add_user(uow)
    return owner, await add_server(uow, owner, **server)


async def claim(jobs: SqlJobQueue, worker: str = "w1", now: float = 10) -> Job | None:
    return await jobs.claim(worker, at(now), at(now + 15))


async def claimed(jobs: SqlJobQueue, worker: str = "w1", now: float = 10) -> Job:
    job = await claim(jobs, worker, now)
    assert job is not None
    return job


async def enter(
    jobs: SqlJobQueue, deployment_id: UUID, worker: str, step: str, message: str, when: datetime
) -> None:
    """``worker`` enters ``step``, ``message`` its event (one write, as a run's)."""
    event = DeploymentEvent(at=when, step=step, message=message)
    await jobs.progress(deployment_id, worker, [event], step=step)


async def log(
    jobs: SqlJobQueue, deployment_id: UUID, worker: str, step: str, message: str, when: datetime
) -> None:
    """``worker`` logs ``message`` as an event of ``step``."""
    event = DeploymentEvent(at=when, step=step, message=message)
    await jobs.progress(deployment_id, worker, [event])


async def lease_of(engine: AsyncEngine, deployment_id: UUID) -> dict[str, Any]:
    """The deployment row's lease columns, as stored."""
    d = DeploymentRow.__table__.c
    stmt = select(d.lease_owner, d.lease_expires_at, d.attempts).where(d.id == deployment_id)
    async with engine.connect() as conn:
        return dict((await conn.execute(stmt)).one()._mapping)


async def set_attempts(engine: AsyncEngine, deployment_id: UUID, attempts: int) -> None:
    d = DeploymentRow.__table__.c
    async with engine.begin() as conn:
        await conn.execute(
            update(DeploymentRow.__table__).where(d.id == deployment_id).values(attempts=attempts)
        )


async def set_deadline(engine: AsyncEngine, deployment_id: UUID, deadline: datetime) -> None:
    """Store an explicit deadline_at on a deployment (nothing in berth writes one yet)."""
    d = DeploymentRow.__table__.c
    async with engine.begin() as conn:
        await conn.execute(
            update(DeploymentRow.__table__)
            .where(d.id == deployment_id)
            .values(deadline_at=deadline)
        )


# --- claiming --------------------------------------------------------------------------------


class TestClaim:
    async def test_claims_take_the_oldest_first_then_none(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue
    ) -> None:
        """Queued deployments are claimed oldest first, each once; then claim() is None."""
        owner, server = await setup(uow)
        third = await queue(uow, owner, server, at(3))
        first = await queue(uow, owner, server, at(1))
        second = await queue(uow, owner, server, at(2))
        order = [(await claimed(jobs)).deployment.id for _ in range(3)]
        assert order == [first.id, second.id, third.id]
        assert await claim(jobs) is None

    async def test_a_job_carries_everything_the_worker_needs(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue
    ) -> None:
        """The job has the running deployment with its events, owner, container, server, env."""
        owner, server = await setup(uow, status_detail=None, facts=ServerFacts(os="debian"))
        installation = await add_installation(uow, owner, server)
        deployment = await queue(uow, owner, server, installation=installation)
        job = await claimed(jobs, now=10)
        assert job == Job(
            deployment=msgspec.structs.replace(
                deployment, state=DeploymentState.RUNNING, started_at=at(10), attempts=1
            ),
            owner_id=owner.id,
            installation_id=installation.id,
            container_name=installation.container_name,
            server=server,
            env={"API_KEY": "k"},
        )
        assert await deployment_of(uow, owner, deployment.id) == job.deployment

    async def test_a_claim_takes_a_lease(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue, engine: AsyncEngine
    ) -> None:
        """The claimer holds the lease until lease_until; the attempt is counted; no step yet."""
        owner, server = await setup(uow)
        deployment = await queue(uow, owner, server)
        job = await jobs.claim("worker-a", at(10), at(25))
        assert job is not None
        assert job.deployment.step is None
        lease = await lease_of(engine, deployment.id)
        assert lease["lease_owner"] == "worker-a"
        assert lease["attempts"] == 1
        assert lease["lease_expires_at"] == at(25)

    async def test_deployments_wait_for_their_server_to_be_online(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue, fleet: SqlFleet
    ) -> None:
        """Deployments to pending or offline servers are not claimed until the server is online."""
        owner = await add_user(uow)
        offline = await add_server(uow, owner, status=ServerStatus.OFFLINE)
        pending = await add_server(uow, owner, status=ServerStatus.PENDING)
        waiting = await queue(uow, owner, offline)
        await queue(uow, owner, pending)
        assert await claim(jobs) is None
        await observe(fleet, offline.id, ServerStatus.ONLINE, at(5))
        assert (await claimed(jobs)).deployment.id == waiting.id
        assert await claim(jobs) is None

    async def test_a_deployment_past_its_deadline_is_not_claimed(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue
    ) -> None:
        """Queued longer than queue_timeout: not claimed, though its server is online."""
        owner, server = await setup(uow)
        await queue(uow, owner, server, at(0))
        fresh = await queue(uow, owner, server, at(100))
        assert (await claimed(jobs, now=QUEUE_TIMEOUT + 1)).deployment.id == fresh.id
        assert await claim(jobs, now=QUEUE_TIMEOUT + 1) is None

    async def test_the_deadline_is_inclusive(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue
    ) -> None:
        """At exactly created_at + queue_timeout the deployment may still be claimed."""
        owner, server = await setup(uow)
        deployment = await queue(uow, owner, server, at(0))
        assert (await claimed(jobs, now=QUEUE_TIMEOUT)).deployment.id == deployment.id

    async def test_a_stored_deadline_overrides_the_queue_timeout(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue, engine: AsyncEngine
    ) -> None:
        """A deployment's own deadline_at, when set, is its deadline."""
        owner, server = await setup(uow)
        deployment = await queue(uow, owner, server, at(0))
        await set_deadline(engine, deployment.id, at(5))
        assert await claim(jobs, now=6) is None
        assert await jobs.expire(at(6)) == [(deployment.id, DeploymentState.TIMED_OUT)]
        assert (await deployment_of(uow, owner, deployment.id)).error == (
            "No worker started it within 5 s of queueing (is a worker running: "
            "`berth serve`, or `berth worker`?)."
        )

    async def test_timed_out_on_an_online_server_says_no_worker_took_it(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue
    ) -> None:
        """Past its deadline on a server that is online, the error blames no worker, not
        the server."""
        owner, server = await setup(uow)
        deployment = await queue(uow, owner, server, at(0))
        assert await jobs.expire(at(QUEUE_TIMEOUT + 1)) == [
            (deployment.id, DeploymentState.TIMED_OUT)
        ]
        error = (await deployment_of(uow, owner, deployment.id)).error
        assert error is not None
        assert error.startswith(f"No worker started it within {QUEUE_TIMEOUT:g} s")

    async def test_queued_deployments_of_a_changed_host_key_end_at_once(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue, fleet: SqlFleet
    ) -> None:
        """A server in host_key_mismatch: its queued deployments end timed_out at the next
        sweep, long before their deadline, naming the host key; others wait on."""
        owner, server = await setup(uow, status=ServerStatus.OFFLINE)
        other = await add_server(uow, owner, status=ServerStatus.OFFLINE)
        waiting = await queue(uow, owner, server, at(0))
        unaffected = await queue(uow, owner, other, at(0))
        assert await jobs.expire(at(1)) == []
        await observe(
            fleet,
            server.id,
            ServerStatus.HOST_KEY_MISMATCH,
            at(1),
            offered_host_key="ssh-ed25519 AAAA",
        )
        assert await jobs.expire(at(2)) == [(waiting.id, DeploymentState.TIMED_OUT)]
        error = (await deployment_of(uow, owner, waiting.id)).error
        assert error is not None
        assert "host key" in error
        assert (await deployment_of(uow, owner, unaffected.id)).state is DeploymentState.QUEUED

    async def test_tls_is_recorded_on_the_installation(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue
    ) -> None:
        """record_tls puts the check's result on the deployment's installation."""
        owner, server = await setup(uow)
        deployment = await queue(uow, owner, server, at(0))
        tls = TlsStatus(state=TlsState.PENDING, reason="waiting", issuer="acme", checked_at=at(3))
        await jobs.record_tls(deployment.id, tls)
        assert (await installation_of(uow, owner, deployment.installation_id)).tls == tls

    async def test_an_installation_runs_one_deployment_at_a_time(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue
    ) -> None:
        """While an installation has a running deployment, its next one is not claimed."""
        owner, server = await setup(uow)
        installation = await add_installation(uow, owner, server)
        first = await queue(uow, owner, server, at(1), installation=installation)
        second = await queue(uow, owner, server, at(2), installation=installation)
        other = await queue(uow, owner, server, at(3))
        assert (await claimed(jobs)).deployment.id == first.id
        assert (await claimed(jobs)).deployment.id == other.id  # the second one is passed over
        assert await claim(jobs) is None
        assert await jobs.finish(
            first.id,
            "w1",
            Ending(state=DeploymentState.SUCCEEDED, at=at(11), error=None, message="ok"),
        )
        assert (await claimed(jobs)).deployment.id == second.id

    async def test_env_values_round_trip_byte_for_byte(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue
    ) -> None:
        """Env values with $, quotes, #, =, newlines, unicode and empties come back exactly."""
        env = {
            "DOLLAR": "pa$$word$HOME${X}",
            "QUOTES": 'it\'s "quoted" `tick`',
            "HASH": "value # not a comment",
            "EQUALS": "a=b=c",
            "NEWLINES": "line1\nline2\r\n\ttab",
            "UNICODE": "héllo wörld ✓ 🚀",
            "EMPTY": "",
            "SPACES": "  padded  ",
            "BACKSLASH": "C:\\path\\n",
        }
        owner, server = await setup(uow)
        await queue(uow, owner, server, env=env)
        job = await claimed(jobs)
        assert job.env == env
        assert [ord(c) for c in job.env["NEWLINES"]] == [ord(c) for c in env["NEWLINES"]]
        assert job.deployment.spec.env_keys == tuple(sorted(env))

    async def test_an_env_sealed_with_another_key_fails_instead_of_running(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue, engine: AsyncEngine
    ) -> None:
        """A deployment whose env cannot be unsealed ends failed; the next one is claimed."""
        owner, server = await setup(uow)
        foreign = SqlUnitOfWorkFactory(engine, KeyBox(os.urandom(32)))
        installation = await add_installation(foreign, owner, server)
        unreadable = await queue(foreign, owner, server, at(1), installation=installation)
        good = await queue(uow, owner, server, at(2))
        assert (await claimed(jobs)).deployment.id == good.id
        failed = await deployment_of(uow, owner, unreadable.id)
        assert failed.state is DeploymentState.FAILED
        assert "cannot be unsealed" in (failed.error or "")
        assert failed.events[-1].step == "failed"


class TestClaimMany:
    async def test_a_batch_takes_the_oldest_up_to_its_limit(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue, engine: AsyncEngine
    ) -> None:
        """claim_many takes the oldest runnable deployments up to its limit, each running
        and leased to the claimer; the next batch takes the rest, then none."""
        owner, server = await setup(uow)
        queued = [await queue(uow, owner, server, at(n)) for n in range(4)]
        batch = await jobs.claim_many("w1", at(10), at(25), limit=3)
        assert [job.deployment.id for job in batch] == [d.id for d in queued[:3]]
        for job in batch:
            deployment = job.deployment
            assert (deployment.state, deployment.started_at, deployment.attempts) == (
                DeploymentState.RUNNING,
                at(10),
                1,
            )
            assert job.env == {"API_KEY": "k"}
            assert (await lease_of(engine, deployment.id))["lease_owner"] == "w1"
        rest = await jobs.claim_many("w1", at(11), at(26), limit=3)
        assert [job.deployment.id for job in rest] == [queued[3].id]
        assert await jobs.claim_many("w1", at(12), at(27), limit=3) == []

    async def test_a_batch_takes_one_deployment_per_installation(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue
    ) -> None:
        """Two queued deployments of one installation: a batch takes the first only."""
        owner, server = await setup(uow)
        installation = await add_installation(uow, owner, server)
        first = await queue(uow, owner, server, at(1), installation=installation)
        await queue(uow, owner, server, at(2), installation=installation)
        other = await queue(uow, owner, server, at(3))
        batch = await jobs.claim_many("w1", at(10), at(25), limit=5)
        assert [job.deployment.id for job in batch] == [first.id, other.id]

    async def test_a_batch_takes_over_a_lapsed_run_then_queued_ones(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue
    ) -> None:
        """A run whose lease ran out comes first in a batch (its next attempt), then the
        queued deployments fill the limit."""
        owner, server = await setup(uow)
        lapsed = await queue(uow, owner, server, at(0))
        await claimed(jobs, now=10)
        waiting = [await queue(uow, owner, server, at(n)) for n in (11, 12, 13)]
        batch = await jobs.claim_many("w2", at(26), at(40), limit=3)
        assert [(job.deployment.id, job.deployment.attempts) for job in batch] == [
            (lapsed.id, 2),
            (waiting[0].id, 1),
            (waiting[1].id, 1),
        ]

    async def test_a_batch_fails_an_unreadable_env_and_still_fills_its_limit(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue, engine: AsyncEngine
    ) -> None:
        """A deployment whose env cannot be unsealed ends failed; the batch takes the next
        ones in its place, up to its limit."""
        owner, server = await setup(uow)
        foreign = SqlUnitOfWorkFactory(engine, KeyBox(os.urandom(32)))
        installation = await add_installation(foreign, owner, server)
        unreadable = await queue(foreign, owner, server, at(1), installation=installation)
        good = [await queue(uow, owner, server, at(n)) for n in (2, 3, 4)]
        batch = await jobs.claim_many("w1", at(10), at(25), limit=2)
        assert [job.deployment.id for job in batch] == [good[0].id, good[1].id]
        failed = await deployment_of(uow, owner, unreadable.id)
        assert failed.state is DeploymentState.FAILED
        assert "cannot be unsealed" in (failed.error or "")


class TestConcurrentClaims:
    async def test_concurrent_claimers_never_share_a_deployment(
        self, uow: SqlUnitOfWorkFactory, db_url: str, box: KeyBox
    ) -> None:
        """20 claims at once, through two engines, over 10 deployments: each claimed once."""
        owner, server = await setup(uow)
        queued = {(await queue(uow, owner, server, at(n))).id for n in range(10)}
        engines = [create_engine(db_url), create_engine(db_url)]
        try:
            queues = [SqlJobQueue(e, box, queue_timeout=QUEUE_TIMEOUT) for e in engines]
            jobs = await asyncio.wait_for(
                asyncio.gather(
                    *(claim(queues[n % 2], f"worker-{n % 2}-{n}", now=20) for n in range(20))
                ),
                60,
            )
        finally:
            for e in engines:
                await e.dispose()
        ids = [job.deployment.id for job in jobs if job is not None]
        assert len(ids) == len(set(ids)) == 10
        assert set(ids) == queued

    def test_processes_claiming_at_once_never_share_a_deployment(
        self, db_url: str, tmp_path: Path
    ) -> None:
        """Four processes claiming until the queue is empty take 40 deployments, each once."""
        queued = asyncio.run(self._queue_many(db_url, 40))
        go = tmp_path / "go"
        script = textwrap.dedent(
            """
            import asyncio, base64, pathlib, sys, time
            from datetime import datetime, timedelta
            from berth.adapters.secrets import KeyBox
            from berth.adapters.sql import SqlJobQueue, create_engine

            async def main() -> None:
                url, key, go, worker = sys.argv[1:5]
                engine = create_engine(url)
                jobs = SqlJobQueue(engine, KeyBox(base64.b64decode(key)), queue_timeout=600)
                now = datetime.fromisoformat(sys.argv[5])
                await jobs.expire(now)  # connect (and warm up) before the start
                pathlib.Path(go + ".ready-" + worker).touch()
                while not pathlib.Path(go).exists():
                    time.sleep(0.002)
                while (job := await jobs.claim(worker, now, now + timedelta(60))) is not None:
                    print("claimed", job.deployment.id, flush=True)
                await engine.dispose()

            asyncio.run(main())
            """
        )
        key = base64.b64encode(KEY).decode()
        commands = [
            [sys.executable, "-c", script, db_url, key, str(go), f"p{n}", at(20).isoformat()]
            for n in range(4)
        ]
        ids: list[UUID] = []
        with released_together(go, commands) as processes:
            for process in processes:  # (berth's own log lines may come between)
                lines = finished(process).splitlines()
                ids += [UUID(line.split()[1]) for line in lines if line.startswith("claimed ")]
        assert len(ids) == len(set(ids)) == 40
        assert set(ids) == queued

    @staticmethod
    async def _queue_many(db_url: str, count: int) -> set[UUID]:
        engine = create_engine(db_url)
        try:
            uow = SqlUnitOfWorkFactory(engine, KeyBox(KEY))
            owner, server = await setup(uow)
            return {(await queue(uow, owner, server, at(n / 10))).id for n in range(count)}
        finally:
            await engine.dispose()


# --- the lease -------------------------------------------------------------------------------


class TestLease:
    async def test_only_the_holder_renews_the_lease(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue, engine: AsyncEngine
    ) -> None:
        """renew() extends the holder's lease; another worker's renew is refused."""
        owner, server = await setup(uow)
        deployment = await queue(uow, owner, server)
        await claimed(jobs, "w1", now=10)
        assert await jobs.renew(deployment.id, "w2", at(100)) is False
        assert await jobs.renew(deployment.id, "w1", at(40)) is True
        assert (await lease_of(engine, deployment.id))["lease_expires_at"] == at(40)
        assert await jobs.renew(uuid4(), "w1", at(40)) is False

    async def test_only_the_holder_writes_steps_and_events(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue
    ) -> None:
        """progress() logs, entering the step when told; another worker's writes are ignored."""
        owner, server = await setup(uow)
        deployment = await queue(uow, owner, server)
        await claimed(jobs, "w1")
        await enter(jobs, deployment.id, "w2", "pull", "intruder step", at(11))
        await log(jobs, deployment.id, "w2", "pull", "intruder event", at(11))
        await enter(jobs, deployment.id, "w1", "pull", "Looking for image.", at(12))
        await log(jobs, deployment.id, "w1", "pull", "Image is present.", at(13))
        found = await deployment_of(uow, owner, deployment.id)
        assert found.step == "pull"
        assert [(e.step, e.message) for e in found.events] == [
            ("queued", "Deployment queued."),
            ("pull", "Looking for image."),
            ("pull", "Image is present."),
        ]

    async def test_a_runs_events_are_written_together_and_with_its_end(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue
    ) -> None:
        """Events of one progress() write land in order, the last one entering its step;
        an end writes the run's last events (and the step they entered) before its own."""
        owner, server = await setup(uow)
        deployment = await queue(uow, owner, server)
        await claimed(jobs, "w1")
        written = [
            DeploymentEvent(at=at(11), step="build", message="Building commit abc."),
            DeploymentEvent(at=at(12), step="build", message="Step 1/2 : FROM echo"),
            DeploymentEvent(at=at(13), step="create", message="Creating a new container."),
        ]
        await jobs.progress(deployment.id, "w1", written, step="create")
        assert (await deployment_of(uow, owner, deployment.id)).step == "create"
        last = (
            DeploymentEvent(at=at(14), step="health", message="Waiting for port 80."),
            DeploymentEvent(at=at(15), step="health", message="Port 80 answered: HTTP 200."),
        )
        ending = Ending(
            state=DeploymentState.SUCCEEDED,
            at=at(16),
            error=None,
            message="Done.",
            events=last,
            step="health",
        )
        assert await jobs.finish(deployment.id, "w1", ending)
        found = await deployment_of(uow, owner, deployment.id)
        assert found.step == "health"
        assert list(found.events[1:]) == [
            *written,
            *last,
            DeploymentEvent(at=at(16), step="succeeded", message="Done."),
        ]

    async def test_only_the_holder_finishes(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue, engine: AsyncEngine
    ) -> None:
        """finish() by the holder ends the deployment and frees the lease; others get False."""
        owner, server = await setup(uow)
        deployment = await queue(uow, owner, server)
        await claimed(jobs, "w1")
        await enter(jobs, deployment.id, "w1", "health", "Waiting.", at(12))
        failed = DeploymentState.FAILED
        assert (
            await jobs.finish(
                deployment.id, "w2", Ending(state=failed, at=at(13), error="x", message="x")
            )
            is False
        )
        assert (await deployment_of(uow, owner, deployment.id)).state is DeploymentState.RUNNING
        assert await jobs.finish(
            deployment.id,
            "w1",
            Ending(state=failed, at=at(14), error="health: no answer", message="Bad."),
        )
        found = await deployment_of(uow, owner, deployment.id)
        assert (found.state, found.error, found.finished_at, found.step) == (
            failed,
            "health: no answer",
            at(14),
            "health",
        )
        assert found.events[-1] == DeploymentEvent(at=at(14), step="failed", message="Bad.")
        lease = await lease_of(engine, deployment.id)
        assert (lease["lease_owner"], lease["lease_expires_at"]) == (None, None)

    async def test_nothing_is_written_after_finishing(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue
    ) -> None:
        """Once finished, the former holder can neither finish again, renew, step nor log."""
        owner, server = await setup(uow)
        deployment = await queue(uow, owner, server)
        await claimed(jobs, "w1")
        succeeded = DeploymentState.SUCCEEDED
        assert await jobs.finish(
            deployment.id, "w1", Ending(state=succeeded, at=at(12), error=None, message="Done.")
        )
        before = await deployment_of(uow, owner, deployment.id)
        assert await jobs.finish(
            deployment.id,
            "w1",
            Ending(state=DeploymentState.FAILED, at=at(13), error="x", message="x"),
        ) is (False)
        assert await jobs.renew(deployment.id, "w1", at(40)) is False
        await enter(jobs, deployment.id, "w1", "retire", "late", at(14))
        await log(jobs, deployment.id, "w1", "retire", "late", at(14))
        assert await deployment_of(uow, owner, deployment.id) == before
        assert before.events[-1] == DeploymentEvent(at=at(12), step="succeeded", message="Done.")

    async def test_a_state_that_is_not_final_is_refused(self, jobs: SqlJobQueue) -> None:
        """finish() with queued or running raises ValueError."""
        with pytest.raises(ValueError, match="not a final state"):
            await jobs.finish(
                uuid4(),
                "w1",
                Ending(state=DeploymentState.RUNNING, at=at(1), error=None, message="x"),
            )


# --- expiry ----------------------------------------------------------------------------------


async def first_at_the_lock(
    engine: AsyncEngine,
    server: Server,
    behind: list[Callable[[], Awaitable[str]]],
    ahead: Callable[[], Awaitable[str]],
) -> list[str]:
    """What each writer returned, in the order they took the write lock: ``behind``
    queued at SQLite's write lock while a write is under way, then ``ahead`` queued
    behind them all. The order they took it in, not the order they returned in: a writer
    may still await after its commit, and under load another writer ends first."""
    lock = shared_write_lock(engine)
    assert lock is not None
    label: dict[asyncio.Task[Any] | None, str] = {}
    took: list[asyncio.Task[Any] | None] = []

    async def write(writer: Callable[[], Awaitable[str]]) -> None:
        label[asyncio.current_task()] = await writer()

    async def queued(count: int) -> None:  # waits until that many wait for the lock
        for _ in range(500):
            if lock.waiting() >= count:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"{count} writers did not queue within 5 s")

    acquire = lock.acquire

    async def acquire_noted() -> bool:
        taken = await acquire()
        took.append(asyncio.current_task())
        return taken

    lock.acquire = acquire_noted  # type: ignore[method-assign]
    tasks: list[asyncio.Task[None]] = []
    try:
        async with transaction(engine) as under_way:
            s = servers_t.c
            await under_way.write(
                update(servers_t).where(s.id == server.id).values(last_seen_at=at(1))
            )
            tasks += [asyncio.create_task(write(writer)) for writer in behind]
            await queued(len(behind))
            tasks.append(asyncio.create_task(write(ahead)))
            await queued(len(behind) + 1)
        await asyncio.gather(*tasks)
    finally:
        del lock.acquire  # the class's own again
    order = [label[task] for task in dict.fromkeys(took) if task in label]
    assert sorted(order) == sorted(label.values()), (order, label)  # each took it itself
    return order


def monitor_write(fleet: SqlFleet, server: Server) -> Callable[[], Awaitable[str]]:
    """A writer as the monitor writes (its lane, the default): an observation."""

    async def write() -> str:
        await fleet.record([ServerObservation(server_id=server.id, at=at(20), seen=True)])
        return "monitor"

    return write


def event_write(jobs: SqlJobQueue, job: Job) -> Callable[[int], Callable[[], Awaitable[str]]]:
    """Writers as a run's events are written (the ``journal`` lane): ``event(i)``."""

    def event(i: int) -> Callable[[], Awaitable[str]]:
        async def write() -> str:
            CALL_LANE.set("journal")  # as a run's event writer
            await log(jobs, job.deployment.id, "w1", "pull", f"Event {i}.", at(20 + i))
            return f"event {i}"

        return write

    return event


class TestDeploymentsWriteFirst:
    async def test_a_deployments_write_goes_before_the_monitors_queued_ones(
        self, engine: AsyncEngine, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue, fleet: SqlFleet
    ) -> None:
        """Where one writer writes at a time (SQLite), a deployment's write queued behind
        the monitor's writes waits for none of them: it commits as soon as the write under
        way ends (a run's events and lease renewals waited seconds behind a thousand
        servers' observations)."""
        if not dialect.single_writer(engine):
            pytest.skip("PostgreSQL's writers do not queue in this process")
        owner, server = await setup(uow)
        await queue(uow, owner, server)
        job = await claimed(jobs)

        def monitor(i: int) -> Callable[[], Awaitable[str]]:
            async def record() -> str:
                await fleet.record(
                    [ServerObservation(server_id=server.id, at=at(20 + i), seen=True)]
                )
                return f"monitor {i}"

            return record

        async def deployment() -> str:
            CALL_LANE.set("deploy")  # as in a deployment's run
            await log(jobs, job.deployment.id, "w1", "pull", "Looking for the image.", at(30))
            return "deployment"

        done = await first_at_the_lock(engine, server, [monitor(i) for i in range(3)], deployment)
        assert done[0] == "deployment"
        assert sorted(done[1:]) == ["monitor 0", "monitor 1", "monitor 2"]

    async def test_a_workers_claim_goes_before_the_deployments_writes(
        self, engine: AsyncEngine, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue
    ) -> None:
        """Where one writer writes at a time (SQLite), a worker's claim queued behind the
        writes of running deployments waits for none of them: it takes the write lock
        as soon as the write under way ends (claims queued behind twenty deploys' writes
        had waited seconds each)."""
        if not dialect.single_writer(engine):
            pytest.skip("PostgreSQL's writers do not queue in this process")
        owner, server = await setup(uow)
        await queue(uow, owner, server, at(1))
        job = await claimed(jobs)
        waiting = await queue(uow, owner, server, at(2))

        def event(i: int) -> Callable[[], Awaitable[str]]:
            async def write() -> str:
                CALL_LANE.set("deploy")  # as in a deployment's run
                await log(jobs, job.deployment.id, "w1", "pull", f"Event {i}.", at(20 + i))
                return f"event {i}"

            return write

        async def claim_waiting() -> str:
            CALL_LANE.set("claim")  # as the worker's loop claims
            batch = await jobs.claim_many("w1", at(12), at(27), limit=4)
            assert [j.deployment.id for j in batch] == [waiting.id]
            return "claim"

        done = await first_at_the_lock(engine, server, [event(i) for i in range(3)], claim_waiting)
        assert done[0] == "claim"
        assert sorted(done[1:]) == ["event 0", "event 1", "event 2"]

    async def test_a_runs_awaited_write_goes_before_the_runs_events(
        self, engine: AsyncEngine, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue, fleet: SqlFleet
    ) -> None:
        """Where one writer writes at a time (SQLite), the writes a run waits for (here its
        container's host port) go before the runs' events (the ``journal`` lane, written
        in the background), and those before the monitor's: twenty runs' events had
        queued ahead of each run's awaited writes, seconds each in a fleet."""
        if not dialect.single_writer(engine):
            pytest.skip("PostgreSQL's writers do not queue in this process")
        owner, server = await setup(uow)
        await queue(uow, owner, server)
        job = await claimed(jobs)

        monitor, event = monitor_write(fleet, server), event_write(jobs, job)

        async def host_port() -> str:
            CALL_LANE.set("deploy")  # as in a deployment's run
            await jobs.set_host_port(job.deployment.id, 49153)
            return "host port"

        queued = [monitor, event(0), event(1)]
        done = await first_at_the_lock(engine, server, queued, host_port)
        assert done[0] == "host port"
        assert sorted(done[1:3]) == ["event 0", "event 1"]  # queued together: either first
        assert done[3] == "monitor"

    async def test_a_runs_awaited_write_goes_before_deployments_being_queued(
        self, engine: AsyncEngine, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue, fleet: SqlFleet
    ) -> None:
        """Where one writer writes at a time (SQLite), a running deployment's write goes
        before the transactions of deployments being queued (the ``queue`` lane), and
        those before the runs' events and the monitor's writes: twenty deploys asked at
        once had each run's image id wait seconds behind the others' queuing."""
        if not dialect.single_writer(engine):
            pytest.skip("PostgreSQL's writers do not queue in this process")
        owner, server = await setup(uow)
        await queue(uow, owner, server)
        job = await claimed(jobs)

        monitor, event = monitor_write(fleet, server), event_write(jobs, job)

        def queuing(i: int) -> Callable[[], Awaitable[str]]:
            async def write() -> str:
                CALL_LANE.set("queue")  # as a deploy request queues its deployment
                await queue(uow, owner, server, at(10 + i))
                return f"queued {i}"

            return write

        async def image_id() -> str:
            CALL_LANE.set("deploy")  # as in a deployment's run
            await jobs.set_image_id(job.deployment.id, "w1", "sha256:" + "a" * 64)
            return "image id"

        behind = [monitor, event(0), queuing(0), queuing(1)]
        done = await first_at_the_lock(engine, server, behind, image_id)
        assert done[0] == "image id"
        assert sorted(done[1:3]) == ["queued 0", "queued 1"]
        assert done[3:] == ["event 0", "monitor"]


class TestExpire:
    async def test_a_lease_that_ran_out_is_taken_over(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue
    ) -> None:
        """A running deployment whose lease expired is not ended: the next claim takes it
        over (attempt 2, an event naming the worker and step); the old worker's writes
        are refused, the new one's count."""
        owner, server = await setup(uow)
        deployment = await queue(uow, owner, server)
        await jobs.claim("w1", at(10), at(25))
        await enter(jobs, deployment.id, "w1", "health", "Waiting.", at(11))
        assert await jobs.expire(at(26)) == []
        assert await jobs.claim("w2", at(25), at(40)) is None  # not expired yet
        job = await jobs.claim("w2", at(26), at(40))
        assert job is not None
        assert job.deployment.id == deployment.id
        assert (job.deployment.state, job.deployment.attempts) == (DeploymentState.RUNNING, 2)
        message = "attempt 2 of 3: worker w1 stopped renewing its lease during step health"
        assert job.deployment.events[-1] == DeploymentEvent(
            at=at(26), step="health", message=message
        )
        assert await jobs.claim("w3", at(27), at(40)) is None  # taken once
        assert not await jobs.renew(deployment.id, "w1", at(50))
        assert not await jobs.finish(
            deployment.id,
            "w1",
            Ending(state=DeploymentState.SUCCEEDED, at=at(27), error=None, message=""),
        )
        assert await jobs.finish(
            deployment.id,
            "w2",
            Ending(state=DeploymentState.SUCCEEDED, at=at(28), error=None, message=""),
        )
        assert (await deployment_of(uow, owner, deployment.id)).state is DeploymentState.SUCCEEDED

    async def test_a_run_its_worker_still_has_going_is_not_taken_over_by_it(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue
    ) -> None:
        """A lease that ran out while its worker still runs the deployment (``running``):
        that worker does not take it over (it would run it twice) and renews it again;
        another worker does take it over, and so does a worker whose run of it is over."""
        owner, server = await setup(uow)
        deployment = await queue(uow, owner, server)
        await jobs.claim("w1", at(10), at(25))
        assert await jobs.claim("w1", at(26), at(40), running={deployment.id}) is None
        assert await jobs.renew(deployment.id, "w1", at(45))  # still its lease: it renews
        other = await jobs.claim("w2", at(46), at(60), running={uuid4()})
        assert other is not None  # another worker takes it over
        assert (other.deployment.id, other.deployment.attempts) == (deployment.id, 2)
        again = await jobs.claim("w1", at(61), at(70))  # w2's run ended, unfinished
        assert again is not None
        assert (again.deployment.id, again.deployment.attempts) == (deployment.id, 3)

    async def test_after_the_last_attempt_it_fails_naming_the_worker(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue
    ) -> None:
        """Three attempts whose workers all stopped: expire() ends it failed, once."""
        owner, server = await setup(uow)
        deployment = await queue(uow, owner, server)
        await jobs.claim("w1", at(10), at(20))
        assert await jobs.claim("w2", at(21), at(30)) is not None
        assert await jobs.claim("w3", at(31), at(40)) is not None
        assert await jobs.claim("w4", at(41), at(50)) is None  # no attempt left
        assert await jobs.expire(at(40)) == []
        assert await jobs.expire(at(41)) == [(deployment.id, DeploymentState.FAILED)]
        found = await deployment_of(uow, owner, deployment.id)
        error = (
            "attempt 3 of 3: worker w3 stopped renewing its lease before its first step; "
            "not tried again"
        )
        assert (found.state, found.error, found.attempts) == (DeploymentState.FAILED, error, 3)
        assert found.events[-1] == DeploymentEvent(at=at(41), step="failed", message=error)
        assert await jobs.expire(at(42)) == []

    async def test_takers_at_once_take_each_deployment_once(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue, db_url: str, box: KeyBox
    ) -> None:
        """Six claims at once through two engines take over each of three expired runs once."""
        owner, server = await setup(uow)
        running = [await queue(uow, owner, server, at(n)) for n in range(3)]
        for _ in running:
            await claimed(jobs, now=10)
        engines = [create_engine(db_url), create_engine(db_url)]
        try:
            queues = [SqlJobQueue(e, box, queue_timeout=QUEUE_TIMEOUT) for e in engines]
            results = await asyncio.gather(
                *(queues[n % 2].claim(f"t{n}", at(30), at(60)) for n in range(6))
            )
        finally:
            for e in engines:
                await e.dispose()
        taken = [job.deployment.id for job in results if job is not None]
        assert sorted(taken) == sorted(d.id for d in running)

    async def test_a_renewed_lease_does_not_expire(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue
    ) -> None:
        """Renewing moves the expiry: the deployment stays running past the first lease."""
        owner, server = await setup(uow)
        deployment = await queue(uow, owner, server)
        await jobs.claim("w1", at(10), at(25))
        assert await jobs.renew(deployment.id, "w1", at(60))
        assert await jobs.expire(at(30)) == []
        assert await jobs.claim("w2", at(30), at(45)) is None
        assert (await deployment_of(uow, owner, deployment.id)).state is DeploymentState.RUNNING

    async def test_a_deployment_queued_past_its_deadline_ends_timed_out(
        self, uow: SqlUnitOfWorkFactory, engine: AsyncEngine, box: KeyBox
    ) -> None:
        """Queued longer than queue_timeout (server offline): timed_out, with the wait in s."""
        jobs = SqlJobQueue(engine, box, queue_timeout=30)
        owner, server = await setup(uow, status=ServerStatus.OFFLINE)
        late = await queue(uow, owner, server, at(0))
        later = await queue(uow, owner, server, at(10))
        assert await jobs.expire(at(30)) == []
        assert await jobs.expire(at(31)) == [(late.id, DeploymentState.TIMED_OUT)]
        assert await jobs.expire(at(45)) == [(later.id, DeploymentState.TIMED_OUT)]
        found = await deployment_of(uow, owner, late.id)
        error = "The server was not reachable within 30 s of queueing."
        assert (found.state, found.error, found.finished_at) == (
            DeploymentState.TIMED_OUT,
            error,
            at(31),
        )
        assert found.events[-1] == DeploymentEvent(at=at(31), step="timed_out", message=error)

    async def test_workers_expiring_at_once_expire_each_deployment_once(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue, db_url: str, box: KeyBox
    ) -> None:
        """Four expire() calls at once, through two engines, return each expired id once."""
        owner, server = await setup(uow)
        running = [await queue(uow, owner, server, at(n)) for n in range(5)]
        for _ in running:
            await claimed(jobs, now=10)
        for deployment in running:  # on their last attempt
            await set_attempts(uow.engine, deployment.id, 3)
        waiting = [await queue(uow, owner, server, at(n)) for n in range(5)]
        for deployment in waiting:
            await set_deadline(uow.engine, deployment.id, at(11))
        engines = [create_engine(db_url), create_engine(db_url)]
        try:
            queues = [SqlJobQueue(e, box, queue_timeout=QUEUE_TIMEOUT) for e in engines]
            results = await asyncio.gather(*(queues[n % 2].expire(at(30)) for n in range(4)))
        finally:
            for e in engines:
                await e.dispose()
        ids = [i for result in results for i, _ in result]
        assert sorted(ids) == sorted(d.id for d in running + waiting)
        ended = [await deployment_of(uow, owner, d.id) for d in running + waiting]
        events = [e.step for d in ended for e in d.events]
        assert (events.count("timed_out"), events.count("failed")) == (5, 5)

    async def test_finished_and_fresh_deployments_are_left_alone(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue
    ) -> None:
        """expire() touches neither finished deployments nor queued ones within their time."""
        owner, server = await setup(uow)
        done = await queue(uow, owner, server, at(0))
        await claimed(jobs)
        await jobs.finish(
            done.id,
            "w1",
            Ending(state=DeploymentState.SUCCEEDED, at=at(11), error=None, message="ok"),
        )
        await queue(uow, owner, server, at(100))
        assert await jobs.expire(at(QUEUE_TIMEOUT + 50)) == []
        assert (await deployment_of(uow, owner, done.id)).state is DeploymentState.SUCCEEDED


# --- host ports and installation status ------------------------------------------------------


class TestInstallations:
    async def test_the_host_port_is_recorded_on_the_installation(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue
    ) -> None:
        """set_host_port() stores the published port on the deployment's installation."""
        owner, server = await setup(uow)
        installation = await add_installation(uow, owner, server)
        deployment = await queue(uow, owner, server, installation=installation)
        await jobs.set_host_port(deployment.id, 49153)
        assert (await installation_of(uow, owner, installation.id)).host_port == 49153
        await jobs.set_host_port(deployment.id, None)
        assert (await installation_of(uow, owner, installation.id)).host_port is None

    async def test_a_host_port_another_installation_holds_is_not_recorded(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue
    ) -> None:
        """A clash with another installation's port on the server is skipped, not raised."""
        owner, server = await setup(uow)
        await add_installation(uow, owner, server, host_port=8080)
        installation = await add_installation(uow, owner, server, host_port=9090)
        deployment = await queue(uow, owner, server, installation=installation)
        await jobs.set_host_port(deployment.id, 8080)
        assert (await installation_of(uow, owner, installation.id)).host_port == 9090
        await jobs.set_host_port(uuid4(), 7070)  # an unknown deployment: nothing happens

    async def test_the_same_port_on_another_server_is_recorded(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue
    ) -> None:
        """Host ports are unique per server only."""
        owner, server = await setup(uow)
        elsewhere = await add_server(uow, owner)
        await add_installation(uow, owner, elsewhere, host_port=8080)
        installation = await add_installation(uow, owner, server)
        deployment = await queue(uow, owner, server, installation=installation)
        await jobs.set_host_port(deployment.id, 8080)
        assert (await installation_of(uow, owner, installation.id)).host_port == 8080

    async def test_the_installation_status_follows_the_job(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue
    ) -> None:
        """Queued and running → deploying; succeeded → running; a later deployment that
        times out leaves the succeeded revision current: still running."""
        owner, server = await setup(uow)
        installation = await add_installation(uow, owner, server)

        async def status() -> InstallationStatus:
            return (await installation_of(uow, owner, installation.id)).status

        first = await queue(uow, owner, server, at(0), installation=installation)
        assert await status() is InstallationStatus.DEPLOYING
        await claimed(jobs)
        assert await status() is InstallationStatus.DEPLOYING
        await jobs.finish(
            first.id,
            "w1",
            Ending(state=DeploymentState.SUCCEEDED, at=at(11), error=None, message="ok"),
        )
        assert await status() is InstallationStatus.RUNNING
        second = await queue(uow, owner, server, at(20), installation=installation)
        await jobs.claim("w1", at(21), at(30))
        await jobs.finish(
            second.id,
            "w1",
            Ending(state=DeploymentState.FAILED, at=at(22), error="health: x", message="x"),
            serving=True,
        )
        assert await status() is InstallationStatus.RUNNING  # the previous revision serves
        third = await queue(uow, owner, server, at(30), installation=installation)
        await jobs.claim("w1", at(31), at(40))
        await jobs.finish(
            third.id,
            "w1",
            Ending(state=DeploymentState.FAILED, at=at(32), error="health: x", message="x"),
            serving=False,
        )
        assert await status() is InstallationStatus.FAILED

    async def test_a_failed_redeploy_puts_the_installation_back(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue
    ) -> None:
        """With the previous revision serving, the installation's spec, env and host port
        are the current revision's again; the current revision stays."""
        owner, server = await setup(uow)
        installation = await add_installation(uow, owner, server, host_port=8080)
        first = await queue(uow, owner, server, at(0), installation=installation)
        await claimed(jobs)
        await jobs.finish(
            first.id,
            "w1",
            Ending(state=DeploymentState.SUCCEEDED, at=at(11), error=None, message="ok"),
        )
        changed = msgspec.structs.replace(
            installation,
            spec=DeploymentSpec(
                image="shop:2.0", port=9090, domain=None, env_keys=("OTHER",), volumes=("a:/a",)
            ),
            host_port=9090,
        )
        async with uow() as tx:  # what a redeploy writes when it is queued
            await tx.installations.save(owner.id, changed, {"OTHER": "o"})
            await tx.commit()
        second = await queue(uow, owner, server, at(20), installation=changed, env={"OTHER": "o"})
        await jobs.claim("w1", at(21), at(40))
        await jobs.finish(
            second.id,
            "w1",
            Ending(state=DeploymentState.FAILED, at=at(22), error="start: x", message="x"),
            serving=True,
        )
        now = await installation_of(uow, owner, installation.id)
        assert now.spec == first.spec
        assert now.host_port == 8080
        assert now.current_deployment_id == first.id
        assert now.status is InstallationStatus.RUNNING
        async with uow() as tx:
            assert await tx.installations.get(owner.id, installation.id) is not None
        job_env = await jobs_env(uow, owner, installation.id)
        assert job_env == {"API_KEY": "k"}

    async def test_image_id_and_cancel_request_are_stored(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue
    ) -> None:
        """set_image_id() records the image on the lease holder's deployment only;
        cancel_requested() sees the API's request."""
        owner, server = await setup(uow)
        deployment = await queue(uow, owner, server)
        await claimed(jobs)
        await jobs.set_image_id(deployment.id, "other", "sha256:" + "0" * 64)
        assert (await deployment_of(uow, owner, deployment.id)).image_id is None
        await jobs.set_image_id(deployment.id, "w1", "sha256:" + "1" * 64)
        assert (await deployment_of(uow, owner, deployment.id)).image_id == "sha256:" + "1" * 64
        assert not await jobs.cancel_requested(deployment.id)
        async with uow() as tx:
            assert await tx.deployments.request_cancel(owner.id, deployment.id, at(12))
            await tx.commit()
        assert await jobs.cancel_requested(deployment.id)


async def jobs_env(uow: SqlUnitOfWorkFactory, owner: User, installation_id: UUID) -> dict[str, str]:
    """The env the installation row holds, unsealed (as the next deploy would read it)."""
    from berth.adapters.sql.tables import InstallationRow

    i = InstallationRow.__table__.c
    async with uow.engine.connect() as conn:
        sealed = (await conn.execute(select(i.env_sealed).where(i.id == installation_id))).one()[0]
    decoded: dict[str, str] = msgspec.json.decode(KeyBox(KEY).open(sealed))
    return decoded


# --- the fleet -------------------------------------------------------------------------------


class TestFleet:
    async def test_servers_are_every_enrolled_server_of_every_owner(
        self, uow: SqlUnitOfWorkFactory, fleet: SqlFleet
    ) -> None:
        """servers() lists online and offline servers of all owners, oldest first; not pending."""
        alice, bob = await add_user(uow), await add_user(uow)
        newer = await add_server(uow, alice, created_at=at(2), status=ServerStatus.ONLINE)
        older = await add_server(
            uow,
            bob,
            created_at=at(1),
            status=ServerStatus.OFFLINE,
            status_detail="Unreachable: refused.",
            facts=ServerFacts(os="debian", cpus=2),
        )
        await add_server(uow, alice, status=ServerStatus.PENDING)
        assert await fleet.servers() == [older, newer]

    async def test_a_pass_view_is_each_servers_routes_and_watch_targets(
        self, uow: SqlUnitOfWorkFactory, fleet: SqlFleet
    ) -> None:
        """``pass_view`` reads for many servers at once what ``routes`` and
        ``watch_targets`` read for one; a server with no app is in neither."""
        owner = await add_user(uow)
        servers = [await add_server(uow, owner, created_at=at(n)) for n in range(3)]
        for n, server in enumerate(servers[:2]):
            await add_installation(
                uow,
                owner,
                server,
                host_port=8080 + n,
                spec=builders.a_spec(env_keys=("API_KEY",), domain=f"app{n}.example.com"),
            )
            await add_installation(uow, owner, server, host_port=9090 + n)
        view = await fleet.pass_view([s.id for s in servers])
        assert view.routes == {s.id: await fleet.routes(s.id) for s in servers[:2]}
        assert view.targets == {s.id: await fleet.watch_targets(s.id) for s in servers[:2]}
        assert [len(view.routes[s.id]) for s in servers[:2]] == [1, 1]
        assert [len(view.targets[s.id]) for s in servers[:2]] == [2, 2]

    async def test_credentials_unseal_the_private_key(
        self, uow: SqlUnitOfWorkFactory, fleet: SqlFleet, engine: AsyncEngine
    ) -> None:
        """credentials() gives the private key in the clear and the pinned host keys."""
        owner = await add_user(uow)
        key = b"-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\x00bytes\n"
        server = await add_server(
            uow, owner, key, host_keys=("ssh-ed25519 AAAA one", "ssh-rsa AAAA two")
        )
        assert await fleet.credentials(server.id) == SshCredentials(
            private_key=key, host_keys=("ssh-ed25519 AAAA one", "ssh-rsa AAAA two")
        )
        keyless = await add_server(uow, owner, None, transport=Transport.LOCAL)
        assert await fleet.credentials(keyless.id) is None
        assert await fleet.credentials(uuid4()) is None
        foreign = await add_server(SqlUnitOfWorkFactory(engine, KeyBox(os.urandom(32))), owner, key)
        assert await fleet.credentials(foreign.id) is None

    async def test_going_online_records_facts_and_last_seen(
        self, uow: SqlUnitOfWorkFactory, fleet: SqlFleet
    ) -> None:
        """Online: status, last_seen_at and facts are stored and the detail is cleared."""
        owner, server = await setup(
            uow, status=ServerStatus.OFFLINE, status_detail="Unreachable: refused."
        )
        facts = ServerFacts(os="debian", arch="x86_64", docker_version="24.0", cpus=4)
        await observe(fleet, server.id, ServerStatus.ONLINE, at(7), facts=facts, detail="x")
        found = await server_of(uow, owner, server.id)
        assert (found.status, found.last_seen_at, found.facts, found.status_detail) == (
            ServerStatus.ONLINE,
            at(7),
            facts,
            None,
        )

    async def test_going_offline_keeps_last_seen_and_facts(
        self, uow: SqlUnitOfWorkFactory, fleet: SqlFleet
    ) -> None:
        """Offline: the detail is stored; last_seen_at and facts stay as they were."""
        owner, server = await setup(uow)
        facts = ServerFacts(os="debian", cpus=4)
        await observe(fleet, server.id, ServerStatus.ONLINE, at(7), facts=facts)
        detail = "Host key mismatch: refusing to connect."
        await observe(fleet, server.id, ServerStatus.OFFLINE, at(9), detail=detail)
        found = await server_of(uow, owner, server.id)
        assert (found.status, found.last_seen_at, found.facts, found.status_detail) == (
            ServerStatus.OFFLINE,
            at(7),
            facts,
            detail,
        )
        await observe(fleet, uuid4(), ServerStatus.ONLINE, at(10))  # unknown: ignored

    async def test_a_snapshot_is_saved_for_the_servers_owner_and_replaced(
        self, uow: SqlUnitOfWorkFactory, fleet: SqlFleet
    ) -> None:
        """save_snapshot() upserts the server's snapshot, readable by its owner only."""
        owner, server = await setup(uow)
        stranger = await add_user(uow)
        first = ContainerSnapshot(
            server_id=server.id,
            observed_at=at(1),
            containers=(builders.a_container(created_at=at(0)),),
        )
        await fleet.save_snapshot(first)
        second = ContainerSnapshot(server_id=server.id, observed_at=at(2), containers=())
        async with uow() as tx:
            assert await tx.servers.snapshot(owner.id, server.id) == first
            assert await tx.servers.snapshot(stranger.id, server.id) is None
        await fleet.save_snapshot(second)
        async with uow() as tx:
            assert await tx.servers.snapshot(owner.id, server.id) == second
        await fleet.save_snapshot(  # an unknown server: nothing is written, nothing raised
            ContainerSnapshot(server_id=uuid4(), observed_at=at(3), containers=())
        )

    async def test_a_batch_of_status_changes_tells_each_change_once(
        self, uow: SqlUnitOfWorkFactory, engine: AsyncEngine, box: KeyBox
    ) -> None:
        """One ``record`` of many servers (a fleet back online at once, one going offline,
        one already online, one removed): each status that changed is written and told of
        once (``ServerStatusChanged``, at its observation's time), a new detail is
        written without an event, and a removed server stays removed."""
        told: list[ServerStatusChanged] = []
        events = EventHandlers()
        events.subscribe(ServerStatusChanged, told.append)
        fleet = SqlFleet(engine, box, events)
        owner = await add_user(uow)
        back = [await add_server(uow, owner, status=ServerStatus.OFFLINE) for _ in range(5)]
        staying = await add_server(uow, owner, status=ServerStatus.ONLINE)
        leaving = await add_server(uow, owner, status=ServerStatus.ONLINE)
        failing = await add_server(
            uow, owner, status=ServerStatus.OFFLINE, status_detail="Unreachable: refused."
        )
        removed = await add_server(uow, owner, status=ServerStatus.REMOVED)
        online = ServerStatus.ONLINE
        seen = [
            *(
                ServerObservation(server_id=s.id, at=at(n), status=online, seen=True)
                for n, s in enumerate([*back, staying, removed])
            ),
            ServerObservation(
                server_id=leaving.id, at=at(9), status=ServerStatus.OFFLINE, detail="Timed out."
            ),
            ServerObservation(
                server_id=failing.id, at=at(9), status=ServerStatus.OFFLINE, detail="Timed out."
            ),
        ]
        await fleet.record(seen)
        assert sorted((e.server_id, e.status, e.at) for e in told) == sorted(
            [(s.id, online, at(n)) for n, s in enumerate(back)]
            + [(leaving.id, ServerStatus.OFFLINE, at(9))]
        )
        assert all(e.owner_id == owner.id for e in told)
        async with uow() as tx:
            stored = {s.id: s for s in await tx.servers.list(owner.id)}
        assert [stored[s.id].status for s in back] == [online] * 5
        assert (stored[staying.id].status, stored[removed.id].status) == (
            online,
            ServerStatus.REMOVED,
        )
        assert (stored[leaving.id].status_detail, stored[failing.id].status_detail) == (
            "Timed out.",
            "Timed out.",
        )

    async def test_record_writes_only_what_each_observation_carries(
        self, uow: SqlUnitOfWorkFactory, fleet: SqlFleet
    ) -> None:
        """record(): one batch sets each server's given fields and leaves the rest alone."""
        owner, going = await setup(uow)
        _, coming = await add_user(uow), await add_server(uow, owner)
        facts = ServerFacts(os="debian", cpus=2)
        await observe(fleet, going.id, ServerStatus.ONLINE, at(1), facts=facts)
        listed = (builders.a_container(created_at=at(0)),)
        new_facts = ServerFacts(os="debian", cpus=8)
        await fleet.record(
            [
                ServerObservation(
                    server_id=going.id, at=at(5), status=ServerStatus.OFFLINE, detail="gone"
                ),
                ServerObservation(
                    server_id=coming.id,
                    at=at(6),
                    status=ServerStatus.ONLINE,
                    seen=True,
                    facts=new_facts,
                    containers=listed,
                ),
                ServerObservation(server_id=uuid4(), at=at(7), seen=True, containers=()),
            ]
        )
        gone, came = await server_of(uow, owner, going.id), await server_of(uow, owner, coming.id)
        assert (gone.status, gone.status_detail, gone.last_seen_at, gone.facts) == (
            ServerStatus.OFFLINE,
            "gone",
            at(1),
            facts,
        )
        assert (came.status, came.status_detail, came.last_seen_at, came.facts) == (
            ServerStatus.ONLINE,
            None,
            at(6),
            new_facts,
        )
        async with uow() as tx:
            assert await tx.servers.snapshot(owner.id, coming.id) == ContainerSnapshot(
                server_id=coming.id, observed_at=at(6), containers=listed
            )
            assert await tx.servers.snapshot(owner.id, going.id) is None
        await fleet.record([])  # nothing to write: no transaction at all


async def server_of(uow: SqlUnitOfWorkFactory, owner: User, server_id: UUID) -> Server:
    async with uow() as tx:
        found = await tx.servers.get(owner.id, server_id)
    assert found is not None
    return found


class TestFleetShares:
    """The fleet divided among workers: heartbeats, each server's watcher, the leases'
    clock paused over an outage of the store."""

    async def test_a_census_counts_enrolled_servers_live_workers_and_what_one_holds(
        self, uow: SqlUnitOfWorkFactory, fleet: SqlFleet
    ) -> None:
        """A heartbeat counts the enrolled servers (not pending ones), the workers whose
        heartbeat runs (it included; not one that ran out) and the servers it watches."""
        owner = await add_user(uow)
        for n in range(3):
            await add_server(uow, owner, created_at=at(n))
        await add_server(uow, owner, status=ServerStatus.PENDING)
        await fleet.heartbeat("old", at(0), at(5))
        assert await fleet.heartbeat("w1", at(10), at(20)) == FleetCensus(
            servers=3, workers=1, held=0
        )
        assert await fleet.heartbeat("w2", at(11), at(21)) == FleetCensus(
            servers=3, workers=2, held=0
        )
        assert await fleet.claim_servers("w1", at(12), 2) == 2
        assert await fleet.claim_servers("w2", at(12), 5) == 1  # only one was free
        assert await fleet.heartbeat("w1", at(13), at(23)) == FleetCensus(
            servers=3, workers=2, held=2
        )
        assert [s.name for s in await fleet.servers("w2")] == [
            s.name for s in (await fleet.servers())[2:]
        ]

    async def test_a_heartbeat_holds_the_write_lock_for_its_writes_alone(
        self, engine: AsyncEngine, uow: SqlUnitOfWorkFactory, fleet: SqlFleet
    ) -> None:
        """A beat counts before it writes: SQLite's single writer is held for the renewal
        and the clean-up alone (counted after them, a beat every 2 s held it through the
        counts, up to a second on a busy event loop while deployments waited)."""
        lock = shared_write_lock(engine)
        if lock is None:
            pytest.skip("PostgreSQL's writers do not queue in this process")
        await add_server(uow, await add_user(uow), created_at=at(0))
        seen: list[tuple[bool, str]] = []

        def statement(conn: Any, cursor: Any, sql: str, *args: Any) -> None:
            seen.append((lock.locked(), sql.split()[0].upper()))

        event.listen(engine.sync_engine, "before_cursor_execute", statement)
        try:
            first = await fleet.heartbeat("w1", at(10), at(20))
            again = await fleet.heartbeat("w1", at(12), at(22))
        finally:
            event.remove(engine.sync_engine, "before_cursor_execute", statement)
        assert first == again == FleetCensus(servers=1, workers=1, held=0)
        under_lock = [verb for locked, verb in seen if locked]
        assert under_lock == ["UPDATE", "INSERT", "DELETE", "UPDATE", "DELETE"]
        assert [verb for locked, verb in seen if not locked] == ["SELECT"] * 4

    async def test_workers_claiming_at_once_never_watch_one_server_both(
        self, uow: SqlUnitOfWorkFactory, fleet: SqlFleet
    ) -> None:
        """Four workers each asking for every server at the same moment: each server gets
        exactly one watcher."""
        owner = await add_user(uow)
        servers = [await add_server(uow, owner, created_at=at(n)) for n in range(20)]
        workers = [f"w{n}" for n in range(4)]
        for worker in workers:
            await fleet.heartbeat(worker, at(10), at(20))
        taken = await asyncio.gather(*(fleet.claim_servers(w, at(11), 20) for w in workers))
        assert sum(taken) == 20
        held = [s.id for w in workers for s in await fleet.servers(w)]
        assert sorted(held) == sorted(s.id for s in servers)

    async def test_a_dead_workers_servers_are_free_once_its_heartbeat_ran_out(
        self, uow: SqlUnitOfWorkFactory, fleet: SqlFleet
    ) -> None:
        """Servers whose watcher's heartbeat still runs are not taken; from the moment it
        ran out, they are; a worker that leaves frees its servers at once."""
        owner = await add_user(uow)
        for n in range(3):
            await add_server(uow, owner, created_at=at(n))
        await fleet.heartbeat("w1", at(0), at(10))
        assert await fleet.claim_servers("w1", at(0), 3) == 3
        await fleet.heartbeat("w2", at(5), at(15))
        assert await fleet.claim_servers("w2", at(9), 3) == 0
        assert await fleet.claim_servers("w2", at(11), 2) == 2
        assert await fleet.heartbeat("w2", at(12), at(22)) == FleetCensus(
            servers=3, workers=1, held=2
        )
        await fleet.heartbeat("w3", at(12), at(22))
        await fleet.leave("w2")
        assert await fleet.claim_servers("w3", at(13), 3) == 3

    async def test_giving_back_the_newest_but_never_one_being_checked(
        self, uow: SqlUnitOfWorkFactory, fleet: SqlFleet
    ) -> None:
        """``release_servers`` gives back the worker's newest servers, skipping those
        ``keep`` names; the others stay its own."""
        owner = await add_user(uow)
        servers = [await add_server(uow, owner, created_at=at(n)) for n in range(4)]
        await fleet.heartbeat("w1", at(0), at(10))
        await fleet.claim_servers("w1", at(0), 4)
        released = await fleet.release_servers("w1", 2, keep={servers[3].id})
        assert released == [servers[2].id, servers[1].id]
        assert [s.id for s in await fleet.servers("w1")] == [servers[0].id, servers[3].id]

    async def test_a_worker_stands_by_the_statuses_of_its_own_servers_only(
        self, uow: SqlUnitOfWorkFactory, fleet: SqlFleet
    ) -> None:
        """``stood_by`` stamps ``checked_at`` on the servers the worker watches; a server
        given to another worker meanwhile keeps its own."""
        owner = await add_user(uow)
        mine, theirs = [await add_server(uow, owner, created_at=at(n)) for n in range(2)]
        await fleet.heartbeat("w1", at(0), at(10))
        await fleet.claim_servers("w1", at(0), 1)
        await fleet.heartbeat("w2", at(0), at(10))
        await fleet.claim_servers("w2", at(0), 1)
        await fleet.stood_by("w1", [mine.id, theirs.id], at(3))
        checked = {s.id: s.checked_at for s in await fleet.servers()}
        assert checked == {mine.id: at(3), theirs.id: None}

    async def test_an_outage_of_the_store_pauses_the_leases_once(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue, fleet: SqlFleet, engine: AsyncEngine
    ) -> None:
        """The store out of reach from 5 s to 30 s: the first worker back moves each lease
        that still ran at 5 s (a deployment's, a worker's heartbeat) 25 s later; a second
        worker back from the same outage moves nothing; so nothing is taken over."""
        owner, server = await setup(uow)
        deployment = await queue(uow, owner, server)
        await jobs.claim("w1", at(0), at(15))
        await fleet.heartbeat("w1", at(0), at(10))
        await fleet.claim_servers("w1", at(0), 1)
        await fleet.heartbeat("gone", at(0), at(4))  # ran out before the outage
        assert await jobs.pause_leases(at(5), at(30))
        assert not await jobs.pause_leases(at(5), at(31))
        assert (await lease_of(engine, deployment.id))["lease_expires_at"] == at(40)
        assert await jobs.claim("w2", at(39), at(50)) is None  # still w1's
        await fleet.heartbeat("w2", at(34), at(44))
        assert await fleet.claim_servers("w2", at(34), 1) == 0  # w1's heartbeat: until 35
        assert await fleet.claim_servers("w2", at(36), 1) == 1
        assert await fleet.heartbeat("w2", at(36), at(46)) == FleetCensus(
            servers=1, workers=1, held=1
        )


class TestRegistryCredentials:
    """A claim carries the owner's credentials for the image's registry, unsealed."""

    async def test_a_claim_carries_the_owners_credentials_for_the_images_registry(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue
    ) -> None:
        """The owner's registry for the image's host; another user's for it is not used."""
        owner, server = await setup(uow)
        stranger = await add_user(uow)
        host = f"registry-{tag()}.example.com:5000"
        async with uow() as tx:
            for user, password in ((stranger, "not-yours"), (owner, "s3cret")):
                registry = Registry(
                    id=uuid4(), owner_id=user.id, host=host, username="bot", created_at=T0
                )
                await tx.registries.add(registry, password)
            await tx.commit()
        private = await add_installation(
            uow,
            owner,
            server,
            spec=DeploymentSpec(
                image=f"{host}/team/app:1", port=8080, domain=None, env_keys=(), volumes=()
            ),
        )
        await queue(uow, owner, server, installation=private, env={})
        job = await claimed(jobs)
        assert job.registry_auth == RegistryAuth(host=host, username="bot", password="s3cret")

    async def test_an_image_of_another_registry_gets_none(
        self, uow: SqlUnitOfWorkFactory, jobs: SqlJobQueue
    ) -> None:
        """No credentials saved for the image's registry: the claim carries none."""
        owner, server = await setup(uow)
        async with uow() as tx:
            registry = Registry(
                id=uuid4(), owner_id=owner.id, host="ghcr.io", username="bot", created_at=T0
            )
            await tx.registries.add(registry, "pw")
            await tx.commit()
        await queue(uow, owner, server)  # shop:1.0: Docker Hub's
        assert (await claimed(jobs)).registry_auth is None


class TestTakeOverOnAFullDisk:
    async def test_a_take_over_that_cannot_commit_is_not_logged_as_done(
        self, tmp_path: Path
    ) -> None:
        """A running deployment whose lease ran out, its SQLite database on a full disk: a
        claim finds it but cannot commit taking it over -- ``StoreUnavailable``, nothing
        logged as taken over, the lease still the old worker's; with room again the next
        claim takes it over, logged once."""
        with small_disk(tmp_path / "disk") as disk:
            url = f"sqlite+aiosqlite:///{disk / 'berth.db'}"
            migrate(url)
            engine = create_engine(url)
            try:
                box = KeyBox(KEY)
                uow = SqlUnitOfWorkFactory(engine, box)
                jobs = SqlJobQueue(engine, box, queue_timeout=QUEUE_TIMEOUT)
                owner, server = await setup(uow)
                deployment = await queue(uow, owner, server)
                await jobs.claim("w1", at(10), at(25))
                async with transaction(engine) as tx:
                    await tx.write(text("CREATE TABLE filler (data BLOB)"))
                filler = fill(disk)
                with contextlib.suppress(StoreUnavailable):  # and the database's journal
                    for _ in range(1000):
                        async with transaction(engine) as tx:
                            await tx.write(
                                text("INSERT INTO filler VALUES (:d)"), {"d": b"\0" * 65536}
                            )
                with capture_logs() as logs:
                    for now in (26, 27, 28):  # a worker tries again at every poll
                        with pytest.raises(StoreUnavailable):
                            await jobs.claim("w2", at(now), at(now + 15))
                assert [e for e in logs if e["event"] == "deployment_taken_over"] == []
                lease = await lease_of(engine, deployment.id)
                assert (lease["lease_owner"], lease["attempts"]) == ("w1", 1)

                filler.unlink()
                with capture_logs() as logs:
                    job = await jobs.claim("w2", at(29), at(44))
                assert job is not None
                assert (job.deployment.id, job.deployment.attempts) == (deployment.id, 2)
                taken = [e for e in logs if e["event"] == "deployment_taken_over"]
                assert len(taken) == 1
                assert taken[0]["deployment_id"] == str(deployment.id)
            finally:
                await engine.dispose()
