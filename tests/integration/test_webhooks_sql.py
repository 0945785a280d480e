"""The webhook outbox of the SQL store, on SQLite and PostgreSQL: deliveries written in the
transaction of the state change (a deployment's end, a server's online/offline) by the
core's handler of the event it records (``tell_webhooks``), claimed
by one worker at a time under a lease, taken again once a lease runs out, and the
delivery log read back."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from uuid import uuid4

import msgspec
import pytest
import sqlalchemy as sa
from alembic import command
from berth.adapters.secrets import KeyBox
from berth.adapters.sql import (
    SqlFleet,
    SqlJobQueue,
    SqlUnitOfWorkFactory,
    SqlWebhookOutbox,
    alembic_config,
    create_engine,
    migrate,
)
from berth.core.events import DeploymentFinished
from berth.core.models import (
    DeliveryAttempt,
    DeliveryState,
    Deployment,
    DeploymentEvent,
    DeploymentState,
    Ending,
    ServerStatus,
    User,
    Webhook,
    WebhookDelivery,
    WebhookEvent,
)
from berth.core.ports import UnitOfWork
from berth.core.unit_of_work import EventHandlers
from berth.core.use_cases import tell_webhooks
from berth.core.webhooks import generate_secret
from infra import DATABASES, USER_ACCOUNT, database_at, migrated_database, observe
from sql_support import KEY, T0, add_user, at, engine_on, migrate_twice
from sqlalchemy.ext.asyncio import AsyncEngine
from test_sql_jobs import QUEUE_TIMEOUT, add_server, claimed, queue

pytestmark = pytest.mark.integration


@pytest.fixture(params=DATABASES)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with migrated_database(request.param, tmp_path, "berth_webhooks") as url:
        yield url


@pytest.fixture
def outbox(engine: AsyncEngine, box: KeyBox) -> SqlWebhookOutbox:
    return SqlWebhookOutbox(engine, box)


def told() -> EventHandlers:
    """The event handlers of a berth: the webhook outbox written with each change."""
    events = EventHandlers()
    tell_webhooks(events)
    return events


def told_queue(engine: AsyncEngine, box: KeyBox) -> SqlJobQueue:
    """The job queue of a berth, its ends told to webhooks."""
    return SqlJobQueue(engine, box, queue_timeout=QUEUE_TIMEOUT, events=told())


async def add_webhook(
    uow: SqlUnitOfWorkFactory, owner: User, *events: WebhookEvent, secret: str | None = None
) -> tuple[Webhook, str]:
    secret = secret or generate_secret()
    webhook = Webhook(
        id=uuid4(),
        owner_id=owner.id,
        url="http://127.0.0.1:9/hook",
        events=events,
        created_at=at(0),
    )
    async with uow() as tx:
        await tx.webhooks.add(webhook, secret)
        await tx.commit()
    return webhook, secret


async def watched_deployment(
    uow: SqlUnitOfWorkFactory,
    engine: AsyncEngine,
    box: KeyBox,
    event: WebhookEvent,
    created_at: datetime = T0,
) -> tuple[User, SqlJobQueue, Webhook, Deployment]:
    """A user with a server, a webhook for ``event`` and a deployment queued there, and
    the job queue of a berth whose ends are told to webhooks: ``(owner, jobs, webhook,
    deployment)``."""
    owner, jobs = await add_user(uow), told_queue(engine, box)
    server = await add_server(uow, owner)
    webhook, _ = await add_webhook(uow, owner, event)
    deployment = await queue(uow, owner, server, created_at)
    return owner, jobs, webhook, deployment


async def deliveries(
    uow: SqlUnitOfWorkFactory, owner: User, webhook: Webhook
) -> list[WebhookDelivery]:
    async with uow() as tx:
        found = await tx.webhooks.deliveries(owner.id, webhook.id, 100)
    assert found is not None
    return found


class TestRepository:
    async def test_secret_sealed_and_ownership(
        self, uow: SqlUnitOfWorkFactory, engine: AsyncEngine
    ) -> None:
        """The secret is stored sealed; another user sees nothing and deletes nothing."""
        alice, bob = await add_user(uow), await add_user(uow)
        webhook, secret = await add_webhook(uow, alice, WebhookEvent.SERVER_ONLINE)
        async with engine.connect() as conn:
            raw = (await conn.exec_driver_sql("SELECT secret_sealed FROM webhook")).scalar_one()
        assert secret.encode() not in bytes(raw)
        async with uow() as tx:
            assert await tx.webhooks.list(alice.id) == [webhook]
            assert await tx.webhooks.get(bob.id, webhook.id) is None
            assert await tx.webhooks.deliveries(bob.id, webhook.id, 10) is None
            assert await tx.webhooks.list(bob.id) == []
            assert not await tx.webhooks.delete(bob.id, webhook.id)
            assert await tx.webhooks.count(alice.id) == 1
            assert await tx.webhooks.delete(alice.id, webhook.id)
            await tx.commit()
        async with uow() as tx:
            assert await tx.webhooks.list(alice.id) == []


class TestWrittenWithTheChange:
    async def test_a_server_status_change_is_told_once(
        self, uow: SqlUnitOfWorkFactory, engine: AsyncEngine, box: KeyBox
    ) -> None:
        """online, online again, offline: two deliveries, one per change, with the server in
        the body; a webhook for other events and another user's webhook get none."""
        owner = await add_user(uow)
        server = await add_server(uow, owner, status=ServerStatus.OFFLINE)
        webhook, _ = await add_webhook(
            uow, owner, WebhookEvent.SERVER_ONLINE, WebhookEvent.SERVER_OFFLINE
        )
        other, _ = await add_webhook(uow, owner, WebhookEvent.DEPLOYMENT_FAILED)
        stranger = await add_user(uow)
        foreign, _ = await add_webhook(uow, stranger, WebhookEvent.SERVER_ONLINE)
        fleet = SqlFleet(engine, box, told())
        await observe(fleet, server.id, ServerStatus.ONLINE, at(1))
        await observe(fleet, server.id, ServerStatus.ONLINE, at(2))
        await observe(fleet, server.id, ServerStatus.OFFLINE, at(3), detail="Unreachable: x")
        await observe(fleet, server.id, ServerStatus.OFFLINE, at(4), detail="Unreachable: y")
        found = await deliveries(uow, owner, webhook)
        assert [d.event for d in found] == [WebhookEvent.SERVER_OFFLINE, WebhookEvent.SERVER_ONLINE]
        assert all(d.state is DeliveryState.PENDING for d in found)
        assert await deliveries(uow, owner, other) == []
        assert await deliveries(uow, stranger, foreign) == []
        async with engine.connect() as conn:
            bodies = [
                json.loads(bytes(row[0]))
                for row in await conn.exec_driver_sql(
                    "SELECT body FROM webhook_delivery ORDER BY created_at"
                )
            ]
        assert bodies[1]["type"] == "server.offline"
        assert bodies[1]["data"]["serverId"] == str(server.id)
        assert bodies[1]["data"]["detail"] == "Unreachable: x"
        assert bodies[0]["data"]["serverName"] == server.name

    async def test_a_deployment_failing_is_told(
        self, uow: SqlUnitOfWorkFactory, engine: AsyncEngine, box: KeyBox
    ) -> None:
        """A worker ending a deployment failed writes a deployment.failed delivery with it."""
        owner, jobs, webhook, deployment = await watched_deployment(
            uow, engine, box, WebhookEvent.DEPLOYMENT_FAILED
        )
        job = await claimed(jobs)
        assert job.deployment.id == deployment.id
        assert await jobs.finish(
            deployment.id,
            "w1",
            Ending(
                state=DeploymentState.FAILED,
                at=at(20),
                error="pull: no such image",
                message="failed",
            ),
        )
        (delivery,) = await deliveries(uow, owner, webhook)
        assert delivery.event is WebhookEvent.DEPLOYMENT_FAILED
        async with engine.connect() as conn:
            body = json.loads(
                bytes(
                    (await conn.exec_driver_sql("SELECT body FROM webhook_delivery")).scalar_one()
                )
            )
        assert body["data"]["deploymentId"] == str(deployment.id)
        assert body["data"]["state"] == "failed"
        assert body["data"]["error"] == "pull: no such image"

    async def test_a_lost_lease_tells_nothing(
        self, uow: SqlUnitOfWorkFactory, engine: AsyncEngine, box: KeyBox
    ) -> None:
        """A finish refused (another worker holds the lease) writes no delivery."""
        owner, jobs, webhook, deployment = await watched_deployment(
            uow, engine, box, WebhookEvent.DEPLOYMENT_SUCCEEDED
        )
        await claimed(jobs)
        assert not await jobs.finish(
            deployment.id,
            "not-the-holder",
            Ending(state=DeploymentState.SUCCEEDED, at=at(20), error=None, message="ok"),
        )
        assert await deliveries(uow, owner, webhook) == []

    async def test_a_deployment_that_waited_too_long_is_told(
        self, uow: SqlUnitOfWorkFactory, engine: AsyncEngine, box: KeyBox
    ) -> None:
        """Expired (``timed_out``): a deployment.failed delivery, written with the end."""
        owner, jobs, webhook, deployment = await watched_deployment(
            uow, engine, box, WebhookEvent.DEPLOYMENT_FAILED, at(0)
        )
        assert await jobs.expire(at(QUEUE_TIMEOUT + 1)) == [
            (deployment.id, DeploymentState.TIMED_OUT)
        ]
        (delivery,) = await deliveries(uow, owner, webhook)
        assert delivery.event is WebhookEvent.DEPLOYMENT_FAILED

    async def test_the_repository_alone_writes_no_delivery(
        self, uow: SqlUnitOfWorkFactory, engine: AsyncEngine, box: KeyBox
    ) -> None:
        """Ending a deployment in a unit of work writes no outbox row by itself; recording
        ``DeploymentFinished`` with it does, in the same commit."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        webhook, _ = await add_webhook(uow, owner, WebhookEvent.DEPLOYMENT_CANCELED)
        quiet, told_one = await queue(uow, owner, server), await queue(uow, owner, server)
        await cancel(SqlUnitOfWorkFactory(engine, box, told()), owner, quiet, record=False)
        assert await deliveries(uow, owner, webhook) == []
        await cancel(SqlUnitOfWorkFactory(engine, box, told()), owner, told_one, record=True)
        assert [d.event for d in await deliveries(uow, owner, webhook)] == [
            WebhookEvent.DEPLOYMENT_CANCELED
        ]

    async def test_a_handler_that_fails_rolls_the_change_back(
        self, uow: SqlUnitOfWorkFactory, engine: AsyncEngine, box: KeyBox
    ) -> None:
        """The outbox stands or falls with the change: an in-transaction handler that fails
        leaves the deployment queued and writes no delivery."""
        owner = await add_user(uow)
        server = await add_server(uow, owner)
        webhook, _ = await add_webhook(uow, owner, WebhookEvent.DEPLOYMENT_CANCELED)
        deployment = await queue(uow, owner, server)
        events = told()

        async def broken(event: DeploymentFinished, work: UnitOfWork) -> None:
            raise RuntimeError("the audit log is full")

        events.in_transaction(DeploymentFinished, broken)
        with pytest.raises(RuntimeError):
            await cancel(SqlUnitOfWorkFactory(engine, box, events), owner, deployment, record=True)
        assert await deliveries(uow, owner, webhook) == []
        async with uow() as tx:
            found = await tx.deployments.get(owner.id, deployment.id)
        assert found is not None
        assert found.state is DeploymentState.QUEUED


async def cancel(
    units: SqlUnitOfWorkFactory, owner: User, deployment: Deployment, *, record: bool
) -> None:
    """End a queued deployment canceled in one unit of work, recording it if ``record``."""
    now = at(5)
    async with units() as tx:
        event = DeploymentEvent(at=now, step="canceled", message="Canceled.")
        state = DeploymentState.CANCELED
        await tx.deployments.finish(owner.id, deployment.id, state, now, "canceled", event)
        if record:
            tx.record(DeploymentFinished.of(deployment, owner.id, state, now, "canceled"))
        await tx.commit()


class TestClaims:
    async def _pending(
        self, uow: SqlUnitOfWorkFactory, engine: AsyncEngine, box: KeyBox, count: int
    ) -> tuple[User, Webhook, str]:
        owner = await add_user(uow)
        webhook, secret = await add_webhook(uow, owner, WebhookEvent.SERVER_ONLINE)
        fleet = SqlFleet(engine, box, told())
        for _ in range(count):
            server = await add_server(uow, owner, status=ServerStatus.OFFLINE)
            await observe(fleet, server.id, ServerStatus.ONLINE, at(1))
        return owner, webhook, secret

    async def test_two_workers_never_share_a_delivery(
        self, uow: SqlUnitOfWorkFactory, engine: AsyncEngine, box: KeyBox
    ) -> None:
        """Concurrent claims from two outboxes (two workers) split the due deliveries."""
        await self._pending(uow, engine, box, 12)
        first, second = SqlWebhookOutbox(engine, box), SqlWebhookOutbox(engine, box)
        now = at(5)
        taken_a, taken_b = await asyncio.gather(
            first.claim("a", now, now + timedelta(seconds=30), 8, 8),
            second.claim("b", now, now + timedelta(seconds=30), 8, 8),
        )
        ids_a = {m.delivery_id for m in taken_a}
        ids_b = {m.delivery_id for m in taken_b}
        assert not ids_a & ids_b
        rest = await first.claim("a", now, now + timedelta(seconds=30), 20, 8)
        assert len(ids_a) + len(ids_b) + len(rest) == 12

    async def test_a_dead_workers_delivery_is_taken_again(
        self, uow: SqlUnitOfWorkFactory, engine: AsyncEngine, box: KeyBox, outbox: SqlWebhookOutbox
    ) -> None:
        """Held until its lease runs out, then claimed again as attempt 2; the dead worker's
        late answer is not recorded."""
        _, _, secret = await self._pending(uow, engine, box, 1)
        (message,) = await outbox.claim("dead", at(5), at(35), 10, 8)
        assert message.attempt == 1
        assert message.secret == secret
        assert await outbox.claim("b", at(20), at(50), 10, 8) == []
        (again,) = await outbox.claim("b", at(36), at(66), 10, 8)
        assert again.delivery_id == message.delivery_id
        assert again.attempt == 2
        late = DeliveryAttempt(at=at(40), status_code=200)
        assert not await outbox.record(
            message.delivery_id, "dead", late, DeliveryState.DELIVERED, None
        )

    async def test_recorded_attempts_make_the_log(
        self, uow: SqlUnitOfWorkFactory, engine: AsyncEngine, box: KeyBox, outbox: SqlWebhookOutbox
    ) -> None:
        """Each attempt is logged; a pending one is due again at its next time, not before;
        a delivered one is never claimed again."""
        owner, webhook, _ = await self._pending(uow, engine, box, 1)
        (message,) = await outbox.claim("w", at(5), at(35), 10, 8)
        failed = DeliveryAttempt(at=at(6), status_code=500, error="HTTP 500")
        assert await outbox.record(message.delivery_id, "w", failed, DeliveryState.PENDING, at(16))
        assert await outbox.claim("w", at(10), at(40), 10, 8) == []
        (second,) = await outbox.claim("w", at(16), at(46), 10, 8)
        ok = DeliveryAttempt(at=at(17), status_code=204)
        assert await outbox.record(second.delivery_id, "w", ok, DeliveryState.DELIVERED, None)
        assert await outbox.claim("w", at(99), at(129), 10, 8) == []
        (delivery,) = await deliveries(uow, owner, webhook)
        assert delivery.state is DeliveryState.DELIVERED
        assert delivery.attempts == (failed, ok)
        assert delivery.delivered_at == at(17)
        assert delivery.next_attempt_at is None

    async def test_a_delivery_out_of_attempts_fails(
        self, uow: SqlUnitOfWorkFactory, engine: AsyncEngine, box: KeyBox, outbox: SqlWebhookOutbox
    ) -> None:
        """Its last attempt claimed by a worker that died: failed, not claimed again."""
        owner, webhook, _ = await self._pending(uow, engine, box, 1)
        await outbox.claim("dead", at(5), at(35), 10, 1)
        assert await outbox.claim("w", at(40), at(70), 10, 1) == []
        (delivery,) = await deliveries(uow, owner, webhook)
        assert delivery.state is DeliveryState.FAILED

    async def test_a_secret_sealed_with_another_key_is_not_sent(
        self, uow: SqlUnitOfWorkFactory, engine: AsyncEngine, box: KeyBox
    ) -> None:
        """Unsealable secret: the delivery fails with a reason, nothing is handed out."""
        owner, webhook, _ = await self._pending(uow, engine, box, 1)
        other = SqlWebhookOutbox(engine, KeyBox(bytes(32)))
        assert await other.claim("w", at(5), at(35), 10, 8) == []
        (delivery,) = await deliveries(uow, owner, webhook)
        assert delivery.state is DeliveryState.FAILED
        assert "cannot be unsealed" in (delivery.attempts[0].error or "")

    async def test_deleting_the_webhook_drops_its_deliveries(
        self, uow: SqlUnitOfWorkFactory, engine: AsyncEngine, box: KeyBox, outbox: SqlWebhookOutbox
    ) -> None:
        """Nothing more is sent to a deleted webhook."""
        owner, webhook, _ = await self._pending(uow, engine, box, 2)
        async with uow() as tx:
            assert await tx.webhooks.delete(owner.id, webhook.id)
            await tx.commit()
        assert await outbox.claim("w", at(5), at(35), 10, 8) == []


# --- the URL at rest (issue 21, finding 11) ----------------------------------------------


class TestUrlAtRest:
    async def test_the_url_is_sealed_in_the_store(
        self, uow: SqlUnitOfWorkFactory, engine: AsyncEngine, box: KeyBox, tmp_path: Path
    ) -> None:
        """No column holds the URL (it may carry a token) and, on SQLite, no byte of the
        database files does; the repository and the outbox read it back whole."""
        owner = await add_user(uow)
        token = f"t0k3n-{uuid4().hex}"
        url = f"https://hooks.example.com/services/{token}?token={token}"
        webhook = Webhook(
            id=uuid4(),
            owner_id=owner.id,
            url=url,
            events=(WebhookEvent.SERVER_ONLINE,),
            created_at=at(0),
        )
        async with uow() as tx:
            await tx.webhooks.add(webhook, generate_secret())
            await tx.commit()
        server = await add_server(uow, owner, status=ServerStatus.OFFLINE)
        await observe(SqlFleet(engine, box, told()), server.id, ServerStatus.ONLINE, at(1))
        async with engine.connect() as conn:
            row = (await conn.exec_driver_sql("SELECT * FROM webhook")).one()
        for value in row:
            raw = bytes(value) if isinstance(value, bytes | memoryview) else str(value).encode()
            assert token.encode() not in raw
        assert await asyncio.to_thread(_files_holding, tmp_path, token.encode()) == []
        async with uow() as tx:
            assert [w.url for w in await tx.webhooks.list(owner.id)] == [url]
        (message,) = await SqlWebhookOutbox(engine, box).claim("w", at(5), at(35), 10, 8)
        assert message.url == url
        assert token not in repr(message)


def _files_holding(directory: Path, needle: bytes) -> list[Path]:
    """The files under ``directory`` (a SQLite store's, with its -wal) that hold ``needle``."""
    return [p for p in directory.rglob("*") if p.is_file() and needle in p.read_bytes()]


_WEBHOOK_0007 = sa.table(
    "webhook",
    sa.column("id", sa.Uuid()),
    sa.column("owner_id", sa.Uuid()),
    sa.column("url", sa.String()),
    sa.column("events", sa.JSON()),
    sa.column("secret_sealed", sa.LargeBinary()),
    sa.column("created_at", sa.DateTime(timezone=True)),
)


@pytest.fixture(params=DATABASES)
def database_at_0007(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database migrated to revision 0007, when webhook URLs were stored in the clear."""
    with database_at(request.param, "0007", tmp_path) as url:
        yield url


async def user_at_0007(engine: AsyncEngine) -> User:
    """A user, written as revisions before teams (0010) wrote one: no personal team."""
    user = User(
        id=uuid4(), email=f"old-{uuid4().hex[:8]}@example.com", password_hash="x", created_at=at(0)
    )
    async with engine.begin() as conn:
        await conn.execute(sa.insert(USER_ACCOUNT).values(msgspec.structs.asdict(user)))
    return user


class TestMigration:
    async def _populate(self, url: str, box: KeyBox, hooks: int) -> tuple[User, list[str]]:
        """A user with ``hooks`` webhooks, written as revision 0007 wrote them."""
        engine = create_engine(url)
        try:
            owner = await user_at_0007(engine)
            urls = [
                f"https://hooks.example.com/{n}?token=t0k3n-{uuid4().hex}" for n in range(hooks)
            ]
            async with engine.begin() as conn:
                await conn.execute(
                    sa.insert(_WEBHOOK_0007),
                    [
                        {
                            "id": uuid4(),
                            "owner_id": owner.id,
                            "url": hook,
                            "events": ["server.online"],
                            "secret_sealed": box.seal(generate_secret().encode()),
                            "created_at": at(n),
                        }
                        for n, hook in enumerate(urls)
                    ],
                )
        finally:
            await engine.dispose()
        return owner, urls

    async def test_a_populated_database_has_its_urls_sealed(
        self, database_at_0007: str, box: KeyBox
    ) -> None:
        """Migrating a 0007 database that holds webhooks seals each URL with the key:
        the clear column is gone and the repository lists every URL as it was;
        migrating again changes nothing."""
        url = database_at_0007
        owner, urls = await self._populate(url, box, 3)
        await migrate_twice(url, box)
        async with engine_on(url) as engine:
            async with engine.connect() as conn:
                columns = await conn.run_sync(
                    lambda sync: [c["name"] for c in sa.inspect(sync).get_columns("webhook")]
                )
                sealed = (
                    (await conn.exec_driver_sql("SELECT url_sealed FROM webhook")).scalars().all()
                )
            assert "url" not in columns
            assert sorted(box.open(bytes(s)).decode() for s in sealed) == sorted(urls)
            async with SqlUnitOfWorkFactory(engine, box)() as tx:
                assert [w.url for w in await tx.webhooks.list(owner.id)] == urls

    async def test_without_the_key_nothing_changes(self, database_at_0007: str) -> None:
        """Migrating a database holding webhooks without berth's key stops, saying so,
        and leaves it at 0007 with its URLs as they were."""
        url = database_at_0007
        box = KeyBox(KEY)
        _, urls = await self._populate(url, box, 2)
        with pytest.raises(RuntimeError, match="secret key"):
            await asyncio.to_thread(migrate, url)
        engine = create_engine(url)
        try:
            async with engine.connect() as conn:
                version = (
                    await conn.exec_driver_sql("SELECT version_num FROM alembic_version")
                ).scalar_one()
                kept = (await conn.exec_driver_sql("SELECT url FROM webhook")).scalars().all()
        finally:
            await engine.dispose()
        assert version == "0007"
        assert sorted(kept) == sorted(urls)

    async def test_downgrading_unseals_them(self, database_at_0007: str, box: KeyBox) -> None:
        """Back to 0007 (with the key), the URLs are in the clear column again."""
        url = database_at_0007
        _, urls = await self._populate(url, box, 2)
        await asyncio.to_thread(migrate, url, box)
        await asyncio.to_thread(command.downgrade, alembic_config(url, box), "0007")
        engine = create_engine(url)
        try:
            async with engine.connect() as conn:
                kept = (await conn.exec_driver_sql("SELECT url FROM webhook")).scalars().all()
        finally:
            await engine.dispose()
        assert sorted(kept) == sorted(urls)
