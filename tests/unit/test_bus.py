"""The message bus and the flows written once on it (deploy, wait), over in-memory fakes."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID, uuid4

import msgspec
import pytest
from berth.core import commands as c
from berth.core.access import Actor
from berth.core.bus import MessageBus
from berth.core.errors import Conflict, InvalidInput, NotFound, RateLimited, Unauthorized
from berth.core.events import DeploymentFinished, DeploymentQueued, ServerRegistered
from berth.core.limits import Limit
from berth.core.models import DeploymentState, Server, User
from berth.core.ports import UnitOfWork
from fakes import HOST_KEY
from wiring import App, build_app, finish, unique_email


def _deploy(server: Server, **over: Any) -> c.DeployCommand:
    raw: dict[str, Any] = {"server_id": str(server.id), "name": "web", "image": "nginx:1.27"}
    options = {k: over.pop(k) for k in ("idempotency_key", "wait") if k in over}
    return c.parse_deploy(raw | over, **options)


async def _limited(deploys: int) -> tuple[App, User, Server]:
    """A bus that lets ``deploys`` deploys a minute, a new user and their enrolled server."""
    app = build_app(deploy_limit=Limit(count=deploys, period=60.0))
    user = await app.bus.handle(
        c.CreateUser(email=unique_email(), password="correct horse battery staple")
    )
    raw = {"name": "s", "address": "h", "host_keys": [HOST_KEY]}
    return app, user, (await app.bus.handle(c.parse_create_server(raw), user)).server


class TestMessageBus:
    async def test_a_command_reaches_its_one_handler(self) -> None:
        """``handle`` runs the handler registered for the command's type, with the actor."""
        bus = MessageBus()
        seen: list[tuple[Any, Any]] = []

        async def handler(actor: Any, cmd: c.GetServer) -> str:
            seen.append((actor, cmd))
            return "done"

        bus.register(c.GetServer, handler)
        user = User(id=uuid4(), email="a@example.com", password_hash="x", created_at=_now())
        cmd = c.GetServer(server_id=uuid4())
        assert await bus.handle(cmd, user) == "done"
        assert seen == [(Actor.personal(user, token_name="library"), cmd)]

    async def test_without_an_actor_only_public_commands_run(self) -> None:
        """A command that is not public refuses a missing actor before its handler runs."""
        bus = MessageBus()
        ran: list[str] = []

        async def handler(actor: Any, cmd: Any) -> None:
            ran.append(type(cmd).__name__)

        bus.register(c.ListServers, handler)
        bus.register(c.SignUpPolicy, handler, public=True)
        with pytest.raises(Unauthorized):
            await bus.handle(c.ListServers())
        await bus.handle(c.SignUpPolicy())
        assert ran == ["SignUpPolicy"]

    def test_one_handler_per_command(self) -> None:
        """Registering a second handler for a command is refused."""
        bus = MessageBus()

        async def handler(actor: Any, cmd: Any) -> None:
            return None

        bus.register(c.ListServers, handler)
        with pytest.raises(ValueError, match="already has a handler"):
            bus.register(c.ListServers, handler)

    async def test_an_unregistered_command_is_a_bug(self) -> None:
        """A command nobody handles is a LookupError, not a silent no-op."""
        with pytest.raises(LookupError):
            await MessageBus().handle(c.SignUpPolicy())

    def test_events_reach_every_subscriber_even_after_one_fails(self) -> None:
        """A failing subscriber is logged and skipped; the others still get the event."""
        bus = MessageBus()
        got: list[UUID] = []

        def broken(event: ServerRegistered) -> None:
            raise RuntimeError("boom")

        bus.subscribe(ServerRegistered, broken)
        bus.subscribe(ServerRegistered, lambda e: got.append(e.server_id))
        key = uuid4()
        bus.publish(ServerRegistered(server_id=key))
        bus.publish(
            DeploymentQueued(deployment_id=uuid4(), installation_id=uuid4(), server_id=uuid4())
        )
        assert got == [key]

    def test_every_command_has_a_handler(self) -> None:
        """The composition registers a handler for every command the core defines (a
        generic base, its type parameters open, is none: ``AddHostCredentials``)."""
        app = build_app()
        kinds = [
            k
            for k in vars(c).values()
            if isinstance(k, type) and issubclass(k, c.Command) and not k.__parameters__
        ]
        assert c.AddRegistry in kinds
        for kind in kinds:
            assert kind in app.bus._handlers, kind.__name__


def _now() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC)


class TestDeployFlow:
    """The deploy flow, written once: every entrypoint gets it through the bus."""

    async def test_queued_deploy_wakes_subscribers_once(
        self, app: App, owner: User, server: Server
    ) -> None:
        """A queued deployment is announced; a replay (same Idempotency-Key) is not."""
        queued: list[DeploymentQueued] = []
        app.bus.subscribe(DeploymentQueued, queued.append)
        first = await app.bus.handle(_deploy(server, idempotency_key="k-1"), owner)
        again = await app.bus.handle(_deploy(server, idempotency_key="k-1"), owner)
        assert again.replayed
        assert again.deployment.id == first.deployment.id
        assert [e.deployment_id for e in queued] == [first.deployment.id]
        assert queued[0].server_id == server.id

    async def test_other_users_server_is_404_before_the_rate_limit(
        self, owner: User, server: Server
    ) -> None:
        """Past the deploy limit, a stranger's server id is still NotFound, never 429."""
        app, user, mine = await _limited(1)
        await app.bus.handle(_deploy(mine), user)
        with pytest.raises(RateLimited) as limited:
            await app.bus.handle(_deploy(mine, name="other"), user)
        assert limited.value.retry_after >= 1
        with pytest.raises(NotFound):
            await app.bus.handle(_deploy(server), user)  # ``server`` is another app's

    async def test_rate_limited_deploy_writes_nothing(self, owner: User) -> None:
        """A deploy refused by the limit leaves no installation behind."""
        app, user, mine = await _limited(1)
        await app.bus.handle(_deploy(mine), user)
        with pytest.raises(RateLimited):
            await app.bus.handle(_deploy(mine, name="second"), user)
        listing = await app.bus.handle(c.ListInstallations(server_id=mine.id), user)
        assert [i.name for i in listing.installations] == ["web"]

    async def test_refused_and_replayed_deploys_do_not_count_against_the_limit(
        self, owner: User
    ) -> None:
        """Deploys refused with a conflict (the port taken) and an idempotent replay cost
        nothing: with a limit of 2, two deploys still queue after them."""
        app, user, mine = await _limited(2)
        first = c.parse_deploy(
            {"server_id": str(mine.id), "name": "web", "image": "nginx:1.27", "port": 8080},
            idempotency_key="k-1",
        )
        await app.bus.handle(first, user)
        await app.bus.handle(first, user)  # the same key again: a replay
        for name in ("clash-1", "clash-2", "clash-3"):
            with pytest.raises(Conflict):  # port 8080 is web's
                await app.bus.handle(_deploy(mine, name=name, port=8080), user)
        await app.bus.handle(_deploy(mine, name="second", port=8081), user)
        with pytest.raises(RateLimited):
            await app.bus.handle(_deploy(mine, name="third", port=8082), user)

    async def test_wait_returns_when_the_worker_announces_the_end(
        self, app: App, owner: User, server: Server
    ) -> None:
        """With ``wait``, the flow returns the final deployment as soon as it ends."""
        ends: list[UUID] = []

        def finish_soon(event: DeploymentQueued) -> None:
            async def later() -> None:
                await asyncio.sleep(0.05)
                await finish(app, owner, event.deployment_id)  # records DeploymentFinished
                ends.append(event.deployment_id)

            asyncio.get_running_loop().create_task(later())

        app.bus.subscribe(DeploymentQueued, finish_soon)
        result = await asyncio.wait_for(app.bus.handle(_deploy(server, wait=30.0), owner), 5)
        assert result.deployment.state is DeploymentState.SUCCEEDED
        assert ends == [result.deployment.id]
        assert result.installation.last_deployment is not None
        assert result.installation.last_deployment.state is DeploymentState.SUCCEEDED

    async def test_wait_gives_up_with_the_deployment_as_it_stands(
        self, app: App, owner: User, server: Server
    ) -> None:
        """Nobody runs it: after ``wait`` seconds the queued deployment comes back."""
        result = await app.bus.handle(_deploy(server, wait=0.05), owner)
        assert result.deployment.state is DeploymentState.QUEUED

    async def test_wait_and_keep_env_are_not_part_of_the_idempotency_fingerprint(
        self, app: App, owner: User, server: Server
    ) -> None:
        """A retry that waits (or not) with the same key and body is the same request."""
        first = await app.bus.handle(_deploy(server, idempotency_key="k-2"), owner)
        again = await app.bus.handle(_deploy(server, idempotency_key="k-2", wait=0.01), owner)
        assert again.replayed
        assert again.deployment.id == first.deployment.id

    async def test_a_stranger_cannot_wait_on_a_deployment(
        self, app: App, owner: User, server: Server
    ) -> None:
        """Waiting on someone else's deployment is NotFound, as reading it is."""
        result = await app.bus.handle(_deploy(server), owner)
        stranger = await app.bus.handle(
            c.CreateUser(email=unique_email(), password="correct horse battery staple")
        )
        cmd = c.WaitForDeployment(deployment_id=result.deployment.id, seconds=0)
        with pytest.raises(NotFound):
            await app.bus.handle(cmd, stranger)


class TestEventsOfAUnitOfWork:
    """Events recorded on a unit of work go to their handlers when it commits."""

    async def test_subscribers_hear_only_what_was_committed(self, app: App) -> None:
        """Recorded and committed: heard once, after the commit; rolled back: never."""
        heard: list[UUID] = []
        app.bus.subscribe(ServerRegistered, lambda e: heard.append(e.server_id))
        kept, dropped = uuid4(), uuid4()
        async with app.uow() as uow:
            uow.record(ServerRegistered(server_id=dropped))
        async with app.uow() as uow:
            uow.record(ServerRegistered(server_id=kept))
            assert heard == []
            await uow.commit()
            assert heard == [kept]
            await uow.commit()  # a later commit hands on only what was recorded since
        assert heard == [kept]

    async def test_handlers_in_the_transaction_write_with_it(
        self, app: App, owner: User, server: Server
    ) -> None:
        """An in-transaction handler runs before the commit, in the same unit of work: if
        it fails the change is rolled back and no subscriber hears of it."""
        heard: list[DeploymentFinished] = []
        app.bus.subscribe(DeploymentFinished, heard.append)

        async def refuse(event: DeploymentFinished, uow: UnitOfWork) -> None:
            raise RuntimeError("the audit log is full")

        queued = await app.bus.handle(_deploy(server), owner)
        app.bus.events.in_transaction(DeploymentFinished, refuse)
        cancel = c.CancelDeployment(deployment_id=queued.deployment.id)
        with pytest.raises(RuntimeError):
            await app.bus.handle(cancel, owner)
        found = await app.bus.handle(c.GetDeployment(deployment_id=queued.deployment.id), owner)
        assert found.state is DeploymentState.QUEUED
        assert heard == []


class TestLimits:
    """The limits are the commands': whichever entrypoint builds one gets them."""

    @pytest.mark.parametrize(
        ("build", "where"),
        [
            (lambda: c.WaitForDeployment(deployment_id=uuid4(), seconds=c.WAIT_MAX + 1), "seconds"),
            (lambda: c.WaitForDeployment(deployment_id=uuid4(), seconds=-1), "seconds"),
            (lambda: c.CancelDeployment(deployment_id=uuid4(), wait=float("nan")), "wait"),
            (lambda: c.Rollback(installation_id=uuid4(), wait=c.WAIT_MAX + 1), "wait"),
            (lambda: c.InstallationLogs(installation_id=uuid4(), tail=c.TAIL_MAX + 1), "tail"),
            (lambda: c.FollowInstallationLogs(installation_id=uuid4(), tail=0), "tail"),
            (lambda: c.ListRevisions(installation_id=uuid4(), limit=c.PAGE_MAX + 1), "limit"),
            (lambda: c.ListDeployments(server_id=uuid4(), limit=0), "limit"),
            (lambda: c.ListWebhookDeliveries(webhook_id=uuid4(), limit=c.PAGE_MAX + 1), "limit"),
            (lambda: c.FollowDeployment(deployment_id=uuid4(), after=-1), "after"),
        ],
    )
    def test_a_command_out_of_its_limits_is_not_built(self, build: Any, where: str) -> None:
        """Built past a limit, a command is InvalidInput naming the field, never clamped."""
        with pytest.raises(InvalidInput) as caught:
            build()
        assert [e.location for e in caught.value.errors] == [where]

    def test_a_deploy_waits_at_most_the_cap(self) -> None:
        """A deploy asking to wait past ``WAIT_MAX`` is refused at ``wait``; the cap
        itself is a wait."""
        raw = {"server_id": str(uuid4()), "name": "web", "image": "nginx:1.27"}
        assert c.parse_deploy(raw, wait=c.WAIT_MAX).wait == c.WAIT_MAX
        with pytest.raises(InvalidInput) as caught:
            c.parse_deploy(raw, wait=c.WAIT_MAX + 0.5)
        assert [e.location for e in caught.value.errors] == ["wait"]


class TestInvalidInputNamesItsFields:
    def test_str_names_every_field(self) -> None:
        """``str(InvalidInput)`` says which fields and why, not only how many."""
        with pytest.raises(InvalidInput) as caught:
            c.parse_deploy({"server_id": "x", "name": "", "image": "nginx", "port": 0})
        text = str(caught.value)
        for field in ("server_id", "name", "image", "port"):
            assert f"{field}: " in text
        assert msgspec.json.encode(caught.value.detail)  # the detail is still a plain sentence
