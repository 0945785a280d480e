"""The fleet divided among workers (``FleetShare``), the monitor that watches a worker's
share, fleet-wide failures (the network, not the servers) and the ``checking`` status."""

from __future__ import annotations

import random
from datetime import timedelta
from uuid import UUID

import msgspec
import pytest
from berth.core.errors import ServerUnreachable
from berth.core.models import FleetCensus, ServerStatus
from berth.core.use_cases import FleetShare, MonitorServers, status_fresh_for
from berth.core.use_cases.fleet_share import SERVER_LEASE
from berth.core.use_cases.monitor import CORRELATED_MIN, PROBE_SAMPLE
from fakes import EPOCH, FakeClock, FakeFleet, FakeGateway
from hypothesis import given, settings
from hypothesis import strategies as st
from test_monitor import a_server


def fleet_of(count: int) -> FakeFleet:
    return FakeFleet(a_server() for _ in range(count))


def gateway_to(fleet: FakeFleet) -> FakeGateway:
    """A gateway that reaches every server of ``fleet``."""
    gateway = FakeGateway()
    for server_id in fleet.by_id:
        gateway.runtime(server_id)
    return gateway


def watchers(fleet: FakeFleet) -> dict[str, int]:
    found: dict[str, int] = {}
    for worker in fleet.watcher.values():
        found[worker] = found.get(worker, 0) + 1
    return found


class TestShares:
    async def test_one_worker_takes_every_server(self) -> None:
        """Alone, a worker's fair share is the whole fleet."""
        fleet, clock = fleet_of(10), FakeClock()
        share = FleetShare(fleet, clock, "w1")
        assert await share.beat() == (10, [])
        assert watchers(fleet) == {"w1": 10}
        assert share.holding()

    async def test_a_joining_worker_gets_half(self) -> None:
        """A second worker: the first gives back what is over its share, the second takes it."""
        fleet, clock = fleet_of(10), FakeClock()
        first, second = FleetShare(fleet, clock, "w1"), FleetShare(fleet, clock, "w2")
        await first.beat()
        assert await second.beat() == (0, [])  # nothing free yet: w1 is alive
        taken, given = await first.beat()
        assert (taken, len(given)) == (0, 5)
        await second.beat()
        assert watchers(fleet) == {"w1": 5, "w2": 5}

    async def test_a_server_being_checked_is_not_given_back(self) -> None:
        """What the monitor checks at that moment stays with the worker."""
        fleet, clock = fleet_of(4), FakeClock()
        first, second = FleetShare(fleet, clock, "w1"), FleetShare(fleet, clock, "w2")
        await first.beat()
        await second.beat()
        busy = set(fleet.watcher)
        _, given = await first.beat(lambda: busy)
        assert given == []

    async def test_a_dead_workers_servers_are_taken_once_its_lease_ran_out(self) -> None:
        """Nobody takes a live worker's servers; once its heartbeat is older than the lease
        the survivor takes them all."""
        fleet, clock = fleet_of(6), FakeClock()
        dead, alive = FleetShare(fleet, clock, "w1"), FleetShare(fleet, clock, "w2")
        await dead.beat()
        await alive.beat()
        await dead.beat()
        await alive.beat()
        assert watchers(fleet) == {"w1": 3, "w2": 3}
        clock.advance(SERVER_LEASE - timedelta(seconds=1))
        await alive.beat()
        assert watchers(fleet)["w1"] == 3  # still alive, as far as anyone can tell
        clock.advance(2)
        await alive.beat()
        assert watchers(fleet) == {"w2": 6}

    async def test_a_lease_not_renewed_stops_the_watch(self) -> None:
        """A worker whose last beat is older than the lease no longer holds its servers."""
        fleet, clock = fleet_of(1), FakeClock()
        share = FleetShare(fleet, clock, "w1")
        await share.beat()
        clock.advance(SERVER_LEASE)
        assert not share.holding()

    async def test_leaving_frees_every_server_at_once(self) -> None:
        """A graceful stop gives its servers back: another worker takes them at its beat."""
        fleet, clock = fleet_of(4), FakeClock()
        first, second = FleetShare(fleet, clock, "w1"), FleetShare(fleet, clock, "w2")
        await first.beat()
        await first.leave()
        await second.beat()
        assert watchers(fleet) == {"w2": 4}

    @settings(max_examples=60, deadline=None)
    @given(
        servers=st.integers(min_value=0, max_value=40),
        beats=st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=30),
    )
    async def test_never_two_watchers_and_every_server_watched_once_settled(
        self, servers: int, beats: list[int]
    ) -> None:
        """Whatever order up to four workers beat in, no server has two watchers, none holds
        more than its fair share once all have beaten twice, and every server is watched."""
        fleet, clock = fleet_of(servers), FakeClock()
        shares = [FleetShare(fleet, clock, f"w{n}") for n in range(4)]
        for n in beats:
            await shares[n].beat()
            assert sum(watchers(fleet).values()) <= servers
        for _ in range(3):
            for share in shares:
                await share.beat()
        census = FleetCensus(servers=servers, workers=len(shares), held=0)
        assert all(n <= census.share for n in watchers(fleet).values())
        assert sum(watchers(fleet).values()) == servers


class TestMonitorOfAShare:
    async def test_only_the_workers_servers_are_checked(self) -> None:
        """A worker's monitor reaches its share and nothing else."""
        fleet, clock = fleet_of(4), FakeClock()
        gateway = gateway_to(fleet)
        mine, theirs = FleetShare(fleet, clock, "w1"), FleetShare(fleet, clock, "w2")
        await mine.beat()
        await theirs.beat()
        await mine.beat()
        await theirs.beat()
        monitor = MonitorServers(fleet, gateway, clock, share=mine, timeout=0.05)
        await monitor()
        checked = set(gateway.calls)
        assert checked == {sid for sid, w in fleet.watcher.items() if w == "w1"}
        assert len(checked) == 2

    async def test_no_check_once_the_lease_lapsed(self) -> None:
        """With its lease run out (the store gone), a worker checks nothing: another may
        have taken its servers."""
        fleet, clock = fleet_of(3), FakeClock()
        gateway = gateway_to(fleet)
        share = FleetShare(fleet, clock, "w1")
        await share.beat()
        clock.advance(SERVER_LEASE)
        await MonitorServers(fleet, gateway, clock, share=share)()
        assert gateway.calls == []

    async def test_a_pass_stands_by_each_status_it_checked(self) -> None:
        """At the end of a pass every server it verified has ``checked_at`` of the pass."""
        fleet, clock = fleet_of(3), FakeClock()
        gateway = gateway_to(fleet)
        dead = next(iter(fleet.by_id))
        gateway.failures[dead] = ServerUnreachable("No route to host")
        share = FleetShare(fleet, clock, "w1")
        await share.beat()
        await MonitorServers(fleet, gateway, clock, share=share, timeout=0.05)()
        assert {s.checked_at for s in fleet.by_id.values()} == {clock.now()}

    async def test_a_server_given_back_loses_its_connection(self) -> None:
        """Forgotten, a server's pooled connection is closed (unless a deployment uses it)."""
        fleet, clock = fleet_of(2), FakeClock()
        gateway = gateway_to(fleet)
        share = FleetShare(fleet, clock, "w1")
        await share.beat()
        used = next(iter(fleet.by_id))
        monitor = MonitorServers(
            fleet, gateway, clock, share=share, in_use=lambda sid: sid == used, timeout=0.05
        )
        await monitor()
        await monitor.forget(list(fleet.by_id))
        assert set(gateway.disconnected) == set(fleet.by_id) - {used}


class Outage:
    """A fleet, its gateway and a monitor, with every server failing at will."""

    def __init__(self, count: int = 40) -> None:
        self.fleet, self.clock = fleet_of(count), FakeClock()
        self.gateway = gateway_to(self.fleet)
        self.monitor = MonitorServers(
            self.fleet, self.gateway, self.clock, timeout=0.05, rng=random.Random(3)
        )

    def down(self, ids: list[UUID] | None = None) -> None:
        for sid in ids if ids is not None else list(self.fleet.by_id):
            self.gateway.failures[sid] = ServerUnreachable("Connection refused")

    def up(self) -> None:
        self.gateway.failures.clear()

    async def passes(self, count: int, seconds: float = 5.0) -> list[int]:
        """Checks per pass (calls to the gateway), ``seconds`` apart."""
        per_pass = []
        for _ in range(count):
            before = len(self.gateway.calls)
            await self.monitor()
            per_pass.append(len(self.gateway.calls) - before)
            self.clock.advance(seconds)
        return per_pass

    def statuses(self) -> set[ServerStatus]:
        return {s.status for s in self.fleet.by_id.values()}


class TestFleetWideFailures:
    async def test_most_servers_failing_at_once_is_a_fault_of_the_network(self) -> None:
        """Every server failing in one pass: they are marked offline, then only a sample is
        tried per pass (not each on its own backoff)."""
        rig = Outage()
        await rig.passes(1)
        rig.down()
        checks = await rig.passes(4)
        assert checks[0] == 40
        assert rig.monitor.outage
        assert checks[1:] == [PROBE_SAMPLE] * 3
        assert rig.statuses() == {ServerStatus.OFFLINE}

    async def test_the_fleet_recovers_together_within_a_pass_of_the_end(self) -> None:
        """After a long outage (past the per-server backoff's minutes), the first pass once it
        ended finds a sampled server answering and checks every server again at once."""
        rig = Outage()
        await rig.passes(1)
        rig.down()
        await rig.passes(40, seconds=10.0)  # 400 s: a backoff of its own would be 5 minutes
        rig.up()
        await rig.passes(1)
        assert rig.statuses() == {ServerStatus.ONLINE}
        assert not rig.monitor.outage

    async def test_a_few_failing_servers_back_off_on_their_own(self) -> None:
        """Fewer failures than ``CORRELATED_MIN`` (or than half) are the servers' own: each
        waits out its backoff."""
        rig = Outage()
        await rig.passes(1)
        few = list(rig.fleet.by_id)[: CORRELATED_MIN - 1]
        rig.down(few)
        checks = await rig.passes(3)
        assert not rig.monitor.outage
        assert checks[2] == 40 - len(few)  # the failing ones wait their backoff


class TestShownStatus:
    @given(
        status=st.sampled_from(list(ServerStatus)),
        age=st.one_of(st.none(), st.integers(min_value=0, max_value=600)),
        interval=st.floats(min_value=1, max_value=60),
    )
    def test_a_status_nobody_stood_by_lately_reads_checking(
        self, status: ServerStatus, age: int | None, interval: float
    ) -> None:
        """A watched status no worker stood by within ``status_fresh_for`` (or never) reads
        ``checking`` with the stored one as ``last_known_status``; others read as stored."""
        if status is ServerStatus.CHECKING:
            return
        now = EPOCH + timedelta(days=1)
        checked = None if age is None else now - timedelta(seconds=age)
        server = msgspec.structs.replace(a_server(status), checked_at=checked)
        fresh_for = status_fresh_for(interval)
        shown = server.shown(now, fresh_for)
        watched = status in (
            ServerStatus.ONLINE,
            ServerStatus.OFFLINE,
            ServerStatus.HOST_KEY_MISMATCH,
        )
        stale = checked is None or now - checked > fresh_for
        if watched and stale:
            assert (shown.status, shown.last_known_status) == (ServerStatus.CHECKING, status)
        else:
            assert shown is server

    @pytest.mark.parametrize("seconds", [1.0, 5.0, 30.0])
    def test_fresh_for_outlasts_two_passes_at_their_longest(self, seconds: float) -> None:
        """A status stands at least from the end of one pass to the end of the next."""
        assert status_fresh_for(seconds) >= 2 * timedelta(seconds=seconds + 10)
