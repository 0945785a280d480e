"""Following a deployment (``FollowDeployment``): its past events, its live ones, its end;
and following an installation's container output (``FollowInstallationLogs``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from uuid import UUID, uuid4

import pytest
from berth.core import commands as c
from berth.core.access import Actor
from berth.core.commands import FollowDeployment as FollowCommand
from berth.core.commands import FollowInstallationLogs as FollowLogsCommand
from berth.core.commands import parse_deploy
from berth.core.errors import NotFound
from berth.core.models import DeploymentEvent, DeploymentState, Server, User
from berth.core.results import DeploymentFeed, FeedEnd, FeedEvent, FeedHeartbeat
from berth.core.use_cases import FollowDeployment
from berth.core.use_cases.follow import PAGE
from wiring import App, finish


async def queued(app: App, owner: User, server: Server) -> UUID:
    cmd = parse_deploy({"server_id": str(server.id), "name": "web", "image": "nginx:1.27"})
    return (await app.bus.handle(cmd, owner)).deployment.id


async def log_event(app: App, owner: User, deployment_id: UUID, step: str) -> None:
    async with app.uow() as uow:
        event = DeploymentEvent(at=app.clock.now(), step=step, message=f"{step} done")
        await uow.deployments.add_event(owner.id, deployment_id, event)
        await uow.commit()


async def collect(feed: DeploymentFeed) -> list[FeedEvent | FeedHeartbeat | FeedEnd]:
    return [item async for item in feed]


def steps(items: list[FeedEvent | FeedHeartbeat | FeedEnd]) -> list[str]:
    """The steps sent, but the ones the fake's claim and queueing write."""
    return [
        i.event.step
        for i in items
        if isinstance(i, FeedEvent) and i.event.message != "Deployment started."
    ]


class TestFollowDeployment:
    async def test_finished_deployment_replays_and_ends(
        self, app: App, owner: User, server: Server
    ) -> None:
        """A final deployment's feed is its whole log, then its end, at once."""
        key = await queued(app, owner, server)
        await log_event(app, owner, key, "pull")
        await finish(app, owner, key)
        feed = await app.bus.handle(FollowCommand(deployment_id=key), owner)
        items = await asyncio.wait_for(collect(feed), timeout=2)
        assert steps(items)[-2:] == ["pull", "done"]
        assert items[-1] == FeedEnd(state=DeploymentState.SUCCEEDED)
        ids = [i.id for i in items if isinstance(i, FeedEvent)]
        assert ids == sorted(ids)
        assert len(set(ids)) == len(ids)

    async def test_live_events_follow_the_replay_in_order(
        self, app: App, owner: User, server: Server
    ) -> None:
        """Events written while the feed is read arrive after the past ones, in order."""
        key = await queued(app, owner, server)
        follow = FollowDeployment(app.uow, app.waiters, poll=0.01)
        reading = asyncio.create_task(
            collect(await follow(Actor.personal(owner), c.FollowDeployment(deployment_id=key)))
        )
        await asyncio.sleep(0.05)
        assert not reading.done()
        for step in ("create", "start", "health"):
            await log_event(app, owner, key, step)
            await asyncio.sleep(0.02)
        await finish(app, owner, key, DeploymentState.FAILED)
        items = await asyncio.wait_for(reading, timeout=2)
        assert steps(items)[-4:] == ["create", "start", "health", "done"]
        assert items[-1] == FeedEnd(state=DeploymentState.FAILED)

    async def test_resumes_after_the_given_event_without_repeats(
        self, app: App, owner: User, server: Server
    ) -> None:
        """A feed from event id N starts with the event after N."""
        key = await queued(app, owner, server)
        for step in ("pull", "create", "start"):
            await log_event(app, owner, key, step)
        await finish(app, owner, key)
        whole = await collect(await app.bus.handle(c.FollowDeployment(deployment_id=key), owner))
        events = [i for i in whole if isinstance(i, FeedEvent)]
        rest = await collect(
            await app.bus.handle(c.FollowDeployment(deployment_id=key, after=events[1].id), owner)
        )
        assert [i for i in rest if isinstance(i, FeedEvent)] == events[2:]
        assert rest[-1] == FeedEnd(state=DeploymentState.SUCCEEDED)

    async def test_another_users_deployment_is_not_found(
        self, app: App, owner: User, server: Server, make_user: Callable[[], Awaitable[User]]
    ) -> None:
        """Another user's deployment, or an unknown one, is NotFound before any feed."""
        key = await queued(app, owner, server)
        stranger = await make_user()
        with pytest.raises(NotFound):
            await app.bus.handle(FollowCommand(deployment_id=key), stranger)
        with pytest.raises(NotFound):
            await app.bus.handle(FollowCommand(deployment_id=uuid4()), owner)

    async def test_quiet_feed_sends_heartbeats(self, app: App, owner: User, server: Server) -> None:
        """Nothing written for ``heartbeat`` seconds: the feed yields a heartbeat."""
        key = await queued(app, owner, server)
        follow = FollowDeployment(app.uow, app.waiters, poll=0.01, heartbeat=0.05)
        feed = await follow(Actor.personal(owner), c.FollowDeployment(deployment_id=key))
        items: list[FeedEvent | FeedHeartbeat | FeedEnd] = []

        async def read() -> None:
            async for item in feed:
                items.append(item)
                if isinstance(item, FeedHeartbeat):
                    return

        await asyncio.wait_for(read(), timeout=2)
        assert isinstance(items[-1], FeedHeartbeat)

    async def test_an_end_in_this_process_wakes_the_feed_before_its_poll(
        self, app: App, owner: User, server: Server
    ) -> None:
        """``DeploymentFinished``, committed in this process, makes the feed read at once,
        not a poll later."""
        key = await queued(app, owner, server)
        follow = FollowDeployment(app.uow, app.waiters, poll=30)
        reading = asyncio.create_task(
            collect(await follow(Actor.personal(owner), c.FollowDeployment(deployment_id=key)))
        )
        await asyncio.sleep(0.05)
        started = time.monotonic()
        await finish(app, owner, key)  # records DeploymentFinished, as the job queue does
        items = await asyncio.wait_for(reading, timeout=5)
        assert time.monotonic() - started < 1
        assert items[-1] == FeedEnd(state=DeploymentState.SUCCEEDED)

    async def test_a_log_longer_than_a_page_is_sent_whole_before_the_end(
        self, app: App, owner: User, server: Server
    ) -> None:
        """More events than one read returns: all of them, then the end."""
        key = await queued(app, owner, server)
        for n in range(PAGE + 5):
            await log_event(app, owner, key, f"s{n}")
        await finish(app, owner, key)
        items = await asyncio.wait_for(
            collect(await app.bus.handle(c.FollowDeployment(deployment_id=key), owner)), 5
        )
        assert steps(items)[-(PAGE + 6) :] == [f"s{n}" for n in range(PAGE + 5)] + ["done"]
        assert items[-1] == FeedEnd(state=DeploymentState.SUCCEEDED)


def labelled(installation_id: UUID, deployment_id: UUID | None = None) -> dict[str, str]:
    labels = {"berth.managed": "true", "berth.installation": str(installation_id)}
    if deployment_id is not None:
        labels["berth.deployment"] = str(deployment_id)
    return labels


class TestFollowInstallationLogs:
    async def test_tail_then_later_lines_with_env_values_redacted(
        self, app: App, owner: User, server: Server
    ) -> None:
        """The last ``tail`` lines, then the lines written later, secrets redacted."""
        env = {"TOKEN": "s3cr3t-value-42"}
        cmd = parse_deploy(
            {"server_id": str(server.id), "name": "web", "image": "nginx:1.27", "env": env}
        )
        result = await app.bus.handle(cmd, owner)
        runtime = app.gateway.runtime(server.id, log_lines=["old 1", "old 2", "old 3"])
        runtime.later_lines = ["token is s3cr3t-value-42!", "new line"]
        current = runtime.add("web", labelled(result.installation.id, result.deployment.id))
        stream = await app.bus.handle(
            FollowLogsCommand(installation_id=result.installation.id, tail=2), owner
        )
        assert stream.container_id == current.id
        lines = [line async for line in stream]
        assert lines == ["old 2", "old 3", "token is [redacted]!", "new line"]

    async def test_no_container_streams_nothing(
        self, app: App, owner: User, server: Server
    ) -> None:
        """An installation without a container: an empty stream, no container id."""
        result = await app.bus.handle(
            parse_deploy({"server_id": str(server.id), "name": "web", "image": "x:1"}), owner
        )
        app.gateway.runtime(server.id)
        stream = await app.bus.handle(
            c.FollowInstallationLogs(installation_id=result.installation.id, tail=10), owner
        )
        assert stream.container_id is None
        assert [line async for line in stream] == []

    async def test_another_users_installation_is_not_found(
        self, app: App, owner: User, server: Server, make_user: Callable[[], Awaitable[User]]
    ) -> None:
        """Another user's installation is NotFound before any stream."""
        result = await app.bus.handle(
            parse_deploy({"server_id": str(server.id), "name": "web", "image": "x:1"}), owner
        )
        with pytest.raises(NotFound):
            await app.bus.handle(
                c.FollowInstallationLogs(installation_id=result.installation.id, tail=10),
                await make_user(),
            )

    async def test_a_broken_stream_ends_quietly(
        self, app: App, owner: User, server: Server
    ) -> None:
        """Docker refusing mid-way ends the stream instead of raising into the response."""
        result = await app.bus.handle(
            parse_deploy({"server_id": str(server.id), "name": "web", "image": "x:1"}), owner
        )
        runtime = app.gateway.runtime(server.id, log_lines=["a"])
        runtime.add("web", labelled(result.installation.id))
        runtime.failures["follow_logs"] = "No such container"
        stream = await app.bus.handle(
            c.FollowInstallationLogs(installation_id=result.installation.id, tail=10), owner
        )
        assert [line async for line in stream] == []
