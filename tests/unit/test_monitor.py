"""The monitor at fleet scale: which servers a pass checks, how many at once, what it
writes (only changes, batched), and which connections it keeps."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from uuid import uuid4

import builders
import msgspec
import pytest
from berth.core.errors import ServerUnreachable, StoreUnavailable
from berth.core.models import (
    Container,
    ProxyRoute,
    Server,
    ServerFacts,
    ServerObservation,
    ServerStatus,
)
from berth.core.use_cases import MonitorServers
from berth.core.use_cases.monitor import (
    DROP_AFTER_TIMEOUTS,
    FACTS_EVERY,
    PROXY_EVERY_PASSES,
    SEEN_EVERY,
    Backoff,
)
from berth.core.use_cases.routes import RouteTable
from berth.core.use_cases.watch import WatchContainers
from berth.core.watch import WatchTarget
from fakes import EPOCH, FakeClock, FakeFleet, FakeGateway
from fakes.gateway import FakeConnection, FakeProxy
from hypothesis import given
from hypothesis import strategies as st


def a_server(status: ServerStatus = ServerStatus.OFFLINE) -> Server:
    return builders.a_server(status=status, created_at=EPOCH)


def a_target(server: Server) -> WatchTarget:
    return WatchTarget(
        installation_id=uuid4(),
        owner_id=server.owner_id,
        container_name=f"app-{server.name}",
        current_deployment_id=uuid4(),
        quiet=False,
    )


def a_container(name: str, status: str = "Up 2 minutes") -> Container:
    return builders.a_container(
        id=f"id-{name}", name=name, image="nginx:1.27", status=status, created_at=None
    )


class AtOnce:
    """A fake's mixin: counts how many of its counted calls run at once (``running``)
    and the most that ever did (``most``)."""

    running = 0
    most = 0

    @contextlib.asynccontextmanager
    async def counted(self, lasting: float) -> AsyncIterator[None]:
        """One call, which takes ``lasting`` seconds before its body runs."""
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await asyncio.sleep(lasting)
            yield
        finally:
            self.running -= 1


class CountingGateway(AtOnce, FakeGateway):
    """A FakeGateway whose connects take a moment, counting how many run at once."""

    async def connect(self, server: Server) -> FakeConnection:
        async with self.counted(0.001):
            return await super().connect(server)


@dataclass
class Rig:
    fleet: FakeFleet = field(default_factory=FakeFleet)
    gateway: FakeGateway = field(default_factory=FakeGateway)
    clock: FakeClock = field(default_factory=FakeClock)
    options: dict[str, Any] = field(default_factory=dict)
    monitor: MonitorServers | None = None

    def add(self, status: ServerStatus = ServerStatus.OFFLINE, **runtime: Any) -> Server:
        server = a_server(status)
        self.fleet.by_id[server.id] = server
        self.gateway.runtime(server.id, **runtime)
        return server

    async def run(self) -> None:
        if self.monitor is None:
            self.monitor = MonitorServers(
                self.fleet,
                self.gateway,
                self.clock,
                **({"timeout": 0.05, "rng": random.Random(7)} | self.options),
            )
        await self.monitor()

    def now(self, server: Server) -> Server:
        return self.fleet.by_id[server.id]

    def written(self) -> list[ServerObservation]:
        return [seen for batch in self.fleet.batches for seen in batch]


@pytest.fixture
def rig() -> Rig:
    return Rig()


class TestWrites:
    async def test_an_unchanged_pass_writes_nothing(self, rig: Rig) -> None:
        """A second pass within a minute that sees the same servers writes nothing."""
        for _ in range(3):
            rig.add()
        await rig.run()
        assert len(rig.fleet.batches) == 1
        rig.clock.advance(5)
        await rig.run()
        assert len(rig.fleet.batches) == 1

    async def test_changes_of_a_pass_are_one_batch(self, rig: Rig) -> None:
        """Many servers coming online are written together, each once."""
        servers = [rig.add() for _ in range(20)]
        await rig.run()
        assert len(rig.fleet.batches) == 1
        assert sorted(seen.server_id for seen in rig.fleet.batches[0]) == sorted(
            server.id for server in servers
        )
        assert all(rig.now(server).status is ServerStatus.ONLINE for server in servers)

    async def test_last_seen_moves_at_most_once_a_minute(self, rig: Rig) -> None:
        """``last_seen_at`` is written when a server comes online, then only once it is
        ``SEEN_EVERY`` old."""
        server = rig.add()
        first = rig.clock.now()
        await rig.run()
        rig.clock.advance(SEEN_EVERY - timedelta(seconds=1))
        await rig.run()
        assert rig.now(server).last_seen_at == first
        later = rig.clock.advance(1)
        await rig.run()
        assert rig.now(server).last_seen_at == later

    async def test_a_changed_list_is_written_at_once(self, rig: Rig) -> None:
        """A container appearing is in the snapshot at the next pass."""
        server = rig.add()
        await rig.run()
        rig.gateway.runtimes[server.id].listed = [a_container("web")]
        at = rig.clock.advance(5)
        await rig.run()
        snapshot = rig.fleet.snapshots[server.id]
        assert (snapshot.observed_at, [c.name for c in snapshot.containers]) == (at, ["web"])

    async def test_uptime_text_alone_is_no_change(self, rig: Rig) -> None:
        """Docker's ageing status text ("Up 3 minutes") does not rewrite the snapshot."""
        server = rig.add()
        rig.gateway.runtimes[server.id].listed = [a_container("web", "Up 2 minutes")]
        await rig.run()
        rig.gateway.runtimes[server.id].listed = [a_container("web", "Up 3 minutes")]
        rig.clock.advance(5)
        await rig.run()
        assert len(rig.fleet.batches) == 1

    async def test_a_repeated_failure_is_not_written_again(self, rig: Rig) -> None:
        """A server offline for the same reason is not written again."""
        server = rig.add(ServerStatus.ONLINE)
        rig.gateway.failures[server.id] = ServerUnreachable("No route to host")
        await rig.run()
        await rig.run()
        assert rig.fleet.statuses == [
            (server.id, ServerStatus.OFFLINE, "Unreachable: No route to host")
        ]

    async def test_a_failed_write_is_written_at_the_next_pass(self, rig: Rig) -> None:
        """When the store refuses a pass's batch, the next pass writes it again."""
        server = rig.add()
        rig.gateway.runtimes[server.id].listed = [a_container("web")]
        record = rig.fleet.record

        async def refuse(_: Any) -> None:
            raise StoreUnavailable("database is locked")

        rig.fleet.record = refuse  # type: ignore[method-assign]
        with pytest.raises(StoreUnavailable):
            await rig.run()
        rig.fleet.record = record  # type: ignore[method-assign]
        await rig.run()
        assert rig.now(server).status is ServerStatus.ONLINE
        assert [c.name for c in rig.fleet.snapshots[server.id].containers] == ["web"]


class TestFacts:
    async def test_facts_are_asked_on_connect_then_rarely(self, rig: Rig) -> None:
        """Facts are asked on a new connection and again only after ``FACTS_EVERY``."""
        facts = ServerFacts(os="Debian 12", docker_version="27.3.1")
        server = rig.add(facts=facts)
        runtime = rig.gateway.runtimes[server.id]
        await rig.run()
        rig.clock.advance(5)
        await rig.run()
        assert runtime.calls.count(("facts",)) == 1
        assert rig.now(server).facts == facts
        rig.clock.advance(FACTS_EVERY)
        await rig.run()
        assert runtime.calls.count(("facts",)) == 2

    async def test_a_new_connection_asks_facts_again(self, rig: Rig) -> None:
        """Docker may have been upgraded while the connection was down."""
        server = rig.add()
        runtime = rig.gateway.runtimes[server.id]
        await rig.run()
        await rig.gateway.disconnect(server.id)
        rig.clock.advance(5)
        await rig.run()
        assert runtime.calls.count(("facts",)) == 2

    async def test_unchanged_facts_are_not_written(self, rig: Rig) -> None:
        """Facts asked again but equal are not written."""
        server = rig.add(facts=ServerFacts(os="Debian 12"))
        await rig.run()
        rig.clock.advance(FACTS_EVERY)
        await rig.run()
        assert [seen.facts for seen in rig.written() if seen.facts is not None] == [
            ServerFacts(os="Debian 12")
        ]
        assert rig.now(server).facts == ServerFacts(os="Debian 12")


class TestConnections:
    async def test_a_slow_check_keeps_the_connection(self, rig: Rig) -> None:
        """Docker answering too late makes the server offline but keeps its connection."""
        server = rig.add(ServerStatus.ONLINE)
        await rig.run()
        runtime = rig.gateway.runtimes[server.id]
        runtime.hangs.add("list_containers")
        rig.clock.advance(5)
        await rig.run()
        assert rig.now(server).status_detail == "Unreachable: No answer in time."
        assert rig.gateway.disconnected == []
        runtime.hangs.clear()
        rig.clock.advance(5)
        await rig.run()
        assert rig.now(server).status is ServerStatus.ONLINE
        assert rig.gateway.opened == [server.id]

    async def test_a_connection_silent_too_often_is_dropped(self, rig: Rig) -> None:
        """After ``DROP_AFTER_TIMEOUTS`` slow checks in a row the connection is dropped."""
        rig.options["backoff"] = Backoff(first=timedelta(0), longest=timedelta(0))
        server = rig.add()
        rig.gateway.runtimes[server.id].hangs.add("list_containers")
        for _ in range(DROP_AFTER_TIMEOUTS - 1):
            await rig.run()
        assert rig.gateway.disconnected == []
        await rig.run()
        assert rig.gateway.disconnected == [server.id]

    async def test_a_failed_connect_is_dropped(self, rig: Rig) -> None:
        """A server that cannot be reached leaves nothing pooled."""
        server = rig.add(ServerStatus.ONLINE)
        rig.gateway.failures[server.id] = ServerUnreachable("Connection refused")
        await rig.run()
        assert rig.gateway.disconnected == [server.id]


class TestProxy:
    @staticmethod
    async def _routed(rig: Rig) -> tuple[Server, Any]:
        """A server with one app on blog.example.com, after the first pass; its proxy."""
        server = rig.add()
        rig.fleet.installations[uuid4()] = (server.id, "blog.example.com", 8080)
        rig.options["routes"] = RouteTable(rig.fleet)
        await rig.run()
        return server, rig.gateway.proxies[server.id]

    async def test_a_drifted_proxy_is_healed_within_its_passes(self, rig: Rig) -> None:
        """A proxy checked on connect is checked again once in ``PROXY_EVERY_PASSES``."""
        _, proxy = await self._routed(rig)
        route = [ProxyRoute(domain="blog.example.com", upstream_port=8080)]
        assert proxy.applied == [route]
        proxy.routes = None  # the proxy restarted
        for _ in range(PROXY_EVERY_PASSES):
            await rig.run()
        assert proxy.applied == [route, route]

    async def test_a_new_connection_checks_the_proxy(self, rig: Rig) -> None:
        """After a reconnect the proxy is checked at the first pass."""
        server, proxy = await self._routed(rig)
        proxy.routes = None
        await rig.gateway.disconnect(server.id)
        await rig.run()
        assert len(proxy.applied) == 2


class TestRecheck:
    async def test_a_recheck_checks_only_the_servers_asked_for(self, rig: Rig) -> None:
        """A recheck (a deployment on the server just ended) connects to that server
        alone and writes its changed container list, as a pass would."""
        servers = [rig.add() for _ in range(5)]
        await rig.run()
        assert rig.monitor is not None
        rig.gateway.calls.clear()
        rig.gateway.runtimes[servers[2].id].listed = [a_container("web")]
        at = rig.clock.advance(1)
        await rig.monitor.recheck({servers[2].id})
        assert rig.gateway.calls == [servers[2].id]
        snapshot = rig.fleet.snapshots[servers[2].id]
        assert (snapshot.observed_at, [c.name for c in snapshot.containers]) == (at, ["web"])

    async def test_a_recheck_leaves_servers_not_watched_here_and_failing(self, rig: Rig) -> None:
        """A server no pass checked here yet, and one backing off after failures, are
        left to the passes."""
        failing = rig.add()
        rig.gateway.failures[failing.id] = ServerUnreachable("No route to host")
        await rig.run()
        assert rig.monitor is not None
        newcomer = rig.add()
        rig.gateway.calls.clear()
        await rig.monitor.recheck({failing.id, newcomer.id})
        assert rig.gateway.calls == []


class SlowStoreFleet(AtOnce, FakeFleet):
    """A FakeFleet whose reads of a server's apps take a moment, counting how many run at
    once (a store busy with the deployments)."""

    async def watch_targets(self, server_id: Any) -> Any:
        async with self.counted(0.3):
            return await super().watch_targets(server_id)


class TestStoreBudget:
    async def test_checks_use_the_store_a_few_at_a_time_and_wait_without_going_offline(
        self, rig: Rig
    ) -> None:
        """At most ``store_concurrency`` checks read the store at once (the rest of its
        connections stay the deployments'); a check waiting for its turn longer than
        Docker's timeout is not an offline server."""
        rig.fleet = SlowStoreFleet()
        rig.options |= {
            "watch": WatchContainers(rig.fleet, rig.clock),
            "store_concurrency": 2,
            # Each read (0.3 s) well within it; the last two wait 1.2 s for their turn.
            "timeout": 1.0,
        }
        servers = [rig.add() for _ in range(10)]
        for server in servers:  # an app each, never seen yet: inspected, then read again
            rig.fleet.targets[server.id] = [a_target(server)]
        await rig.run()
        assert isinstance(rig.fleet, SlowStoreFleet)
        assert rig.fleet.most == 2
        assert all(rig.now(server).status is ServerStatus.ONLINE for server in servers)


class CountingFleet(FakeFleet):
    """A FakeFleet counting the reads a check makes of one server's routes and apps."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    async def routes(self, server_id: Any) -> Any:
        self.reads += 1
        return await super().routes(server_id)

    async def watch_targets(self, server_id: Any) -> Any:
        self.reads += 1
        return await super().watch_targets(server_id)


class TestReconnectingPass:
    async def test_one_read_of_the_store_for_a_pass_that_reconnects_every_server(
        self, rig: Rig
    ) -> None:
        """A pass that connects to every server anew (a restart, the end of an outage)
        compares each server's proxy and apps with one read of the store for the pass, not
        two per server (that made it eight times as long as a steady pass)."""
        rig.fleet = CountingFleet()
        rig.options |= {
            "routes": RouteTable(rig.fleet),
            "watch": WatchContainers(rig.fleet, rig.clock),
        }
        for n in range(10):
            server = rig.add()
            rig.fleet.installations[uuid4()] = (server.id, f"app{n}.example.com", 8000 + n)
            rig.gateway.proxies[server.id] = FakeProxy()
            rig.gateway.proxies[server.id].routes = [
                ProxyRoute(domain=f"app{n}.example.com", upstream_port=8000 + n)
            ]
        await rig.run()
        assert isinstance(rig.fleet, CountingFleet)
        assert (rig.fleet.views, rig.fleet.reads) == (1, 0)
        assert all(not proxy.applied for proxy in rig.gateway.proxies.values())

    async def test_a_proxy_that_differs_is_loaded_from_a_fresh_read(self, rig: Rig) -> None:
        """A proxy that does not serve the routes the pass read is loaded with the routes
        read again under the server's lock: a route recorded since the pass began is in."""
        rig.fleet = CountingFleet()
        rig.options["routes"] = RouteTable(rig.fleet)
        server = rig.add()
        rig.fleet.installations[uuid4()] = (server.id, "blog.example.com", 8080)
        real_view = rig.fleet.pass_view

        async def view_then_a_new_app(server_ids: Any) -> Any:
            view = await real_view(server_ids)
            rig.fleet.installations[uuid4()] = (server.id, "shop.example.com", 8081)
            return view

        rig.fleet.pass_view = view_then_a_new_app  # type: ignore[method-assign]
        await rig.run()
        assert rig.gateway.proxies[server.id].applied == [
            [
                ProxyRoute(domain="blog.example.com", upstream_port=8080),
                ProxyRoute(domain="shop.example.com", upstream_port=8081),
            ]
        ]


class TestScheduling:
    async def test_no_more_than_the_concurrency_at_once(self, rig: Rig) -> None:
        """At most ``concurrency`` servers are checked at the same time; all are checked."""
        rig.gateway = CountingGateway()
        # A generous timeout: on a loaded machine a 1 ms connect may take longer than the
        # rig's usual 50 ms, and a timed-out check would be an offline server, not a slot.
        rig.options |= {"concurrency": 4, "timeout": 30.0}
        servers = [rig.add() for _ in range(30)]
        await rig.run()
        assert isinstance(rig.gateway, CountingGateway)
        assert rig.gateway.most == 4
        assert all(rig.now(server).status is ServerStatus.ONLINE for server in servers)

    async def test_spread_only_when_over_the_concurrency(self, rig: Rig) -> None:
        """Fewer servers than slots are not delayed (a spread of an hour is not waited)."""
        rig.options |= {"concurrency": 8, "spread": 3600.0}
        server = rig.add()
        async with asyncio.timeout(5):
            await rig.run()
        assert rig.now(server).status is ServerStatus.ONLINE

    async def test_spread_starts_checks_over_the_spread(
        self, rig: Rig, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With more servers than slots, the i-th of n starts in the i-th n-th of ``spread``."""
        delays: list[float] = []
        sleep = asyncio.sleep

        async def record(delay: float, result: Any = None) -> Any:
            delays.append(delay)
            return await sleep(0, result)

        monkeypatch.setattr(asyncio, "sleep", record)
        rig.options |= {"concurrency": 2, "spread": 100.0}
        servers = [rig.add() for _ in range(10)]
        await rig.run()
        assert len(delays) == 10
        assert all(10 * i <= delay < 10 * (i + 1) for i, delay in enumerate(delays))
        assert all(rig.now(server).status is ServerStatus.ONLINE for server in servers)

    async def test_a_server_failing_again_and_again_is_skipped(self, rig: Rig) -> None:
        """After two failures in a row a server waits out its backoff; then it is tried."""
        backoff = Backoff(first=timedelta(seconds=10), longest=timedelta(seconds=40), jitter=0)
        rig.options["backoff"] = backoff
        dead = rig.add()
        rig.gateway.failures[dead.id] = ServerUnreachable("No route to host")
        await rig.run()
        await rig.run()
        assert rig.gateway.calls.count(dead.id) == 2
        rig.clock.advance(9)
        await rig.run()
        assert rig.gateway.calls.count(dead.id) == 2
        rig.clock.advance(1)
        await rig.run()
        assert rig.gateway.calls.count(dead.id) == 3
        rig.clock.advance(19)  # a third failure: 20 s
        await rig.run()
        assert rig.gateway.calls.count(dead.id) == 3

    async def test_a_recovered_server_is_checked_every_pass_again(self, rig: Rig) -> None:
        """Once a backed-off server answers, its backoff is forgotten."""
        rig.options["backoff"] = Backoff(jitter=0)
        server = rig.add()
        rig.gateway.failures[server.id] = ServerUnreachable("No route to host")
        await rig.run()
        await rig.run()
        del rig.gateway.failures[server.id]
        rig.clock.advance(Backoff().first)
        await rig.run()
        await rig.run()
        assert rig.gateway.calls.count(server.id) == 4
        assert rig.now(server).status is ServerStatus.ONLINE

    async def test_a_moved_server_is_tried_at_once(self, rig: Rig) -> None:
        """A server given another address is no longer held back by its old failures."""
        server = rig.add()
        rig.gateway.failures[server.id] = ServerUnreachable("No route to host")
        await rig.run()
        await rig.run()
        rig.fleet.by_id[server.id] = msgspec.structs.replace(rig.now(server), address="203.0.113.8")
        await rig.run()
        assert rig.gateway.calls.count(server.id) == 3

    async def test_one_dead_server_does_not_hold_the_pass(self, rig: Rig) -> None:
        """Silent servers time out on their own; the others are checked in the same pass."""
        rig.options["concurrency"] = 2
        dead = [rig.add() for _ in range(2)]
        for server in dead:
            rig.gateway.runtimes[server.id].hangs.add("facts")
        good = [rig.add() for _ in range(6)]
        await rig.run()
        assert all(rig.now(server).status is ServerStatus.OFFLINE for server in dead)
        assert all(rig.now(server).status is ServerStatus.ONLINE for server in good)


@given(
    failures=st.integers(min_value=0, max_value=200),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_backoff_stays_within_its_bounds(failures: int, seed: int) -> None:
    """The wait is none before a second failure, then within ±jitter of a doubling,
    never beyond ``longest`` (plus jitter)."""
    backoff = Backoff()
    delay = backoff.delay(failures, random.Random(seed))
    if failures < 2:
        assert delay == timedelta(0)
    else:
        base = min(backoff.first * 2 ** min(failures - 2, 30), backoff.longest)
        assert base * (1 - backoff.jitter) <= delay <= base * (1 + backoff.jitter)
