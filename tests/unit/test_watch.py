"""Apps under watch: the rule (``berth.core.watch``) and its use case with fakes -- what
a container is seen doing, what is recorded and what is told (once per change, a crash
loop once), and the monitor's and the event stream's refreshes."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

from berth.core.errors import StoreUnavailable
from berth.core.models import (
    ContainerState,
    DeploymentState,
    InstallationStatus,
    RunState,
    WebhookEvent,
)
from berth.core.use_cases.monitor import MonitorServers
from berth.core.use_cases.watch import ContainerEvents, WatchContainers, listed_state
from berth.core.watch import STABLE, AppWatch, ContainerEvent, Seen, WatchTarget, decide, seen_of
from fakes.basics import FakeClock
from fakes.fleet import FakeFleet
from fakes.gateway import FakeGateway
from fakes.runtime import FakeRuntime
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs
from test_monitor import a_server

T0 = datetime(2026, 11, 27, 2, 0, tzinfo=UTC)
APP = UUID("00000000-0000-4000-8000-000000000024")


def _state(status: str, *, restarts: int = 0, exit_code: int | None = None, cid: str = "c1"):
    return ContainerState(
        id=cid,
        name="shop",
        status=status,
        running=status == "running",
        exit_code=exit_code,
        host_port=None,
        restart_count=restarts,
        started_at=T0,
        finished_at=T0 if status != "running" else None,
    )


class TestSeenOf:
    def test_states(self) -> None:
        """running, restarting, exited (and dead, created, paused: not serving), none."""
        assert seen_of([_state("running")], "shop").state is RunState.RUNNING
        assert seen_of([_state("restarting", exit_code=1)], "shop").state is RunState.RESTARTING
        for status in ("exited", "dead", "created", "paused"):
            assert seen_of([_state(status)], "shop").state is RunState.EXITED
        assert seen_of([], "shop") == Seen(state=RunState.MISSING)

    def test_exit_code_and_time_only_while_not_running(self) -> None:
        """An exited container keeps its code and time; a running one has none."""
        exited = seen_of([_state("exited", exit_code=137, restarts=2)], "shop")
        assert (exited.exit_code, exited.exited_at, exited.restart_count) == (137, T0, 2)
        running = seen_of([_state("running", restarts=2)], "shop")
        assert (running.exit_code, running.exited_at) == (None, None)

    def test_the_named_container_wins_over_a_newer_one(self) -> None:
        """During a switch-over the installation's own container is the one watched."""
        other = msgspec_replace(_state("exited", cid="new"), name="shop-next")
        assert seen_of([other, _state("running")], "shop").container_id == "c1"
        assert seen_of([other], "shop").container_id == "new"

    def test_a_listed_state_reads_as_an_inspect_would(self) -> None:
        """The container list's states map onto the same three as ``seen_of``."""
        assert listed_state("running") is RunState.RUNNING
        assert listed_state("restarting") is RunState.RESTARTING
        assert {listed_state(s) for s in ("exited", "dead", "created", "paused")} == {
            RunState.EXITED
        }


def msgspec_replace(state: ContainerState, **changes: object) -> ContainerState:
    import msgspec

    return msgspec.structs.replace(state, **changes)


def _run(
    seens: list[tuple[Seen, datetime]], *, quiet: bool = False
) -> tuple[AppWatch | None, list[WebhookEvent]]:
    watch: AppWatch | None = None
    told: list[WebhookEvent] = []
    for seen, at in seens:
        watch, report = decide(watch, seen, installation_id=APP, at=at, quiet=quiet)
        if report is not None:
            told.append(report.event)
    return watch, told


RUNNING = Seen(state=RunState.RUNNING, container_id="c1", started_at=T0)

# What a container may be seen doing, one observation after another (same container or
# another, restart counts that only grow per container), each a few seconds later.
_seens = st.lists(
    st.tuples(
        st.sampled_from(list(RunState)),
        st.sampled_from(["c1", "c2"]),
        st.integers(min_value=0, max_value=3),
        st.integers(min_value=0, max_value=60),
    ),
    max_size=25,
)


def _as_seens(raw: list[tuple[RunState, str, int, int]]) -> list[tuple[Seen, datetime]]:
    out, at, counts = [], T0, {"c1": 0, "c2": 0}
    for state, cid, grow, seconds in raw:
        at += timedelta(seconds=seconds)
        counts[cid] += grow
        if state is RunState.MISSING:
            out.append((Seen(state=state), at))
        else:
            out.append((Seen(state=state, container_id=cid, restart_count=counts[cid]), at))
    return out


class TestDecide:
    @given(_seens)
    def test_down_and_up_alternate_starting_with_down(self, raw: list) -> None:
        """Whatever is seen, reports alternate down, up, down…; the record says whether
        the last one was down."""
        watch, told = _run(_as_seens(raw))
        assert told[::2] == [WebhookEvent.INSTALLATION_DOWN] * len(told[::2])
        assert told[1::2] == [WebhookEvent.INSTALLATION_UP] * len(told[1::2])
        if watch is not None:
            assert (watch.down_since is not None) == (told[-1:] == [WebhookEvent.INSTALLATION_DOWN])

    @given(_seens)
    def test_while_berth_changes_the_app_nothing_is_told(self, raw: list) -> None:
        """Deploying, stopped on request, nothing serving: recorded, never told, never
        left down."""
        watch, told = _run(_as_seens(raw), quiet=True)
        assert told == []
        assert watch is None or watch.down_since is None

    @given(st.integers(min_value=2, max_value=30), st.integers(min_value=0, max_value=9))
    def test_a_crash_loop_is_told_once(self, loops: int, pause: int) -> None:
        """Restarting, running again a moment, restarting…: one down, no up, until it
        keeps running ``STABLE``; then one up."""
        seens, at = [(RUNNING, T0)], T0
        for n in range(1, loops + 1):
            at += timedelta(seconds=pause)
            seens.append((Seen(state=RunState.RESTARTING, container_id="c1", restart_count=n), at))
            at += timedelta(seconds=1)
            started = Seen(
                state=RunState.RUNNING, container_id="c1", restart_count=n, started_at=at
            )
            seens.append((started, at))
        _, told = _run(seens)
        assert told == [WebhookEvent.INSTALLATION_DOWN]
        seens.append((started, at + STABLE))
        _, told = _run(seens)
        assert told == [WebhookEvent.INSTALLATION_DOWN, WebhookEvent.INSTALLATION_UP]

    def test_a_restart_seen_only_as_a_higher_count_is_trouble(self) -> None:
        """Running, then running with one more restart (the exit fell between two looks):
        told down."""
        again = Seen(state=RunState.RUNNING, container_id="c1", restart_count=1, started_at=T0)
        _, told = _run([(RUNNING, T0), (again, T0 + timedelta(seconds=5))])
        assert told == [WebhookEvent.INSTALLATION_DOWN]

    def test_exited_then_started_by_someone_is_up_at_once(self) -> None:
        """restart "no", killed, then ``docker start``: down, then up with no wait."""
        exited = Seen(state=RunState.EXITED, container_id="c1", exit_code=137, exited_at=T0)
        later = T0 + timedelta(seconds=1)
        watch, told = _run([(RUNNING, T0), (exited, T0), (RUNNING, later)])
        assert told == [WebhookEvent.INSTALLATION_DOWN, WebhookEvent.INSTALLATION_UP]
        assert watch is not None
        assert watch.down_since is None

    def test_missing_then_a_new_container_is_up(self) -> None:
        """Removed behind berth's back, then a container made anew: down, up."""
        new = Seen(state=RunState.RUNNING, container_id="c2", started_at=T0)
        _, told = _run([(RUNNING, T0), (Seen(state=RunState.MISSING), T0), (new, T0)])
        assert told == [WebhookEvent.INSTALLATION_DOWN, WebhookEvent.INSTALLATION_UP]


class TestStatus:
    @given(st.sampled_from(list(RunState)))
    def test_a_serving_app_reads_as_its_container(self, state: RunState) -> None:
        """A revision serves: the status is what its container does."""
        status = InstallationStatus.derive(
            any_active=False, last_final=None, serving=True, container=state
        )
        assert status.value == state.value
        assert status.down is (state is not RunState.RUNNING)

    @given(st.sampled_from([None, *RunState]))
    def test_berths_own_changes_come_first(self, state: RunState | None) -> None:
        """Removed, deploying, stopped on request: whatever the container does."""
        derive = InstallationStatus.derive
        assert derive(any_active=True, last_final=None, serving=True, container=state) is (
            InstallationStatus.DEPLOYING
        )
        assert (
            derive(any_active=False, last_final=None, serving=True, stopped=True, container=state)
            is InstallationStatus.STOPPED
        )
        assert (
            derive(any_active=False, last_final=None, serving=True, removed=True, container=state)
            is InstallationStatus.REMOVED
        )

    @given(st.sampled_from([DeploymentState.FAILED, DeploymentState.TIMED_OUT]))
    def test_only_canceled_deployments_are_never_deployed(self, other: DeploymentState) -> None:
        """Nothing serves: pending while every deployment that ended was canceled (a
        first deployment canceled, issue 28), failed once one ended otherwise."""
        derive = InstallationStatus.derive
        canceled = DeploymentState.CANCELED
        assert derive(any_active=False, last_final=canceled, only_canceled=True) is (
            InstallationStatus.PENDING
        )
        assert derive(any_active=False, last_final=canceled, only_canceled=False) is (
            InstallationStatus.FAILED
        )
        assert derive(any_active=False, last_final=other, only_canceled=False) is (
            InstallationStatus.FAILED
        )


# -- the use case with fakes ----------------------------------------------------------------


def _target(*, quiet: bool = False) -> WatchTarget:
    return WatchTarget(
        installation_id=APP,
        owner_id=uuid4(),
        container_name="shop",
        current_deployment_id=uuid4(),
        quiet=quiet,
    )


def _container_of(runtime: FakeRuntime, status: str, **kw: object) -> None:
    state = msgspec_replace(_state(status, **kw), labels={"berth.installation": str(APP)})
    runtime.containers = {state.id: state}


class TestWatchContainers:
    async def test_a_change_is_written_and_told_once(self) -> None:
        """Killed: one change with a down report; looked at again, nothing is written."""
        server_id, fleet, clock, runtime = uuid4(), FakeFleet(), FakeClock(T0), FakeRuntime()
        fleet.targets[server_id] = [_target()]
        watch = WatchContainers(fleet, clock)
        _container_of(runtime, "running")
        await watch.refresh(server_id, runtime)
        _container_of(runtime, "exited", exit_code=137)
        await watch.refresh(server_id, runtime)
        await watch.refresh(server_id, runtime)
        reports = [c.report for c in fleet.watch_changes if c.report is not None]
        assert [r.event for r in reports] == [WebhookEvent.INSTALLATION_DOWN]
        assert "137" in reports[0].message
        assert len(fleet.watch_changes) == 2  # the first look, the exit; not the repeat

    async def test_an_app_that_agrees_with_the_list_is_not_inspected(self) -> None:
        """A reconciliation inspects only the apps whose record the list contradicts."""
        server_id, fleet, runtime = uuid4(), FakeFleet(), FakeRuntime()
        fleet.targets[server_id] = [_target()]
        watch = WatchContainers(fleet, FakeClock(T0))
        _container_of(runtime, "running")
        await watch.refresh(server_id, runtime)
        finds = len([c for c in runtime.calls if c[0] == "find"])
        await watch.refresh(server_id, runtime, listed={APP: {("c1", "running")}})
        assert len([c for c in runtime.calls if c[0] == "find"]) == finds
        await watch.refresh(server_id, runtime, listed={APP: {("c1", "exited")}})
        assert len([c for c in runtime.calls if c[0] == "find"]) == finds + 1

    async def test_a_stop_on_request_begun_after_the_targets_were_read_is_not_told(
        self,
    ) -> None:
        """A refresh reads its targets, then inspects: a stop (or restart) on request
        that marks the app ``stopping`` in between, and stops its container before the
        inspect, is still berth's own change -- not a crash told down (seen in CI: a
        restart logged "Its container exited with code 0.")."""
        server_id, fleet, clock = uuid4(), FakeFleet(), FakeClock(T0)
        fleet.targets[server_id] = [_target()]
        watch = WatchContainers(fleet, clock)

        class StoppedOnRequestMeanwhile(FakeRuntime):
            async def find(self, labels: dict[str, str]) -> list[ContainerState]:
                fleet.targets[server_id] = [_target(quiet=True)]  # marked stopping ...
                _container_of(self, "exited", exit_code=0)  # ... then stopped
                return await super().find(labels)

        runtime = FakeRuntime()
        _container_of(runtime, "running")
        await watch.refresh(server_id, runtime)
        await watch.refresh(server_id, StoppedOnRequestMeanwhile())
        assert fleet.watches[APP].seen.state is RunState.EXITED  # recorded ...
        assert [c.report for c in fleet.watch_changes] == [None, None]  # ... not told

    async def test_the_event_stream_refreshes_the_app_it_names(self) -> None:
        """An event naming the installation refreshes it at once; the stream's end is
        remembered as where the next one resumes."""
        server_id, fleet, runtime = uuid4(), FakeFleet(), FakeRuntime()
        fleet.targets[server_id] = [_target()]
        watch = WatchContainers(fleet, FakeClock(T0))
        streams = ContainerEvents(watch)
        _container_of(runtime, "exited", exit_code=1)
        streams.ensure(server_id, runtime)
        assert streams.held == 1
        event = ContainerEvent(action="die", container_id="c1", installation_id=APP, since="1.5")
        await runtime.events.put(event)
        await runtime.events.put(None)
        for _ in range(100):
            if not streams.held:
                break
            await asyncio.sleep(0.01)
        assert fleet.watches[APP].seen.state is RunState.EXITED
        streams.ensure(server_id, runtime)  # reopened, from the last event
        await asyncio.sleep(0)
        assert ("container_events", str(server_id), "1.5") in runtime.calls
        await streams.close()
        assert streams.held == 0

    async def test_a_store_outage_ends_the_stream_quietly_and_the_event_is_read_again(
        self,
    ) -> None:
        """The store out of reach while an event is recorded: the stream ends with a
        warning, no traceback (it is an outage, not a fault), and the next stream resumes
        before that event, so it is recorded then (CI: a traceback per PostgreSQL
        outage)."""
        server_id, runtime = uuid4(), FakeRuntime()

        class Unreachable(FakeFleet):
            async def watch_targets(self, *args: Any, **kwargs: Any) -> Any:
                raise StoreUnavailable("The database is unreachable; try again shortly.")

        watch = WatchContainers(Unreachable(), FakeClock(T0))
        streams = ContainerEvents(watch)
        _container_of(runtime, "exited", exit_code=1)
        streams.ensure(server_id, runtime)
        event = ContainerEvent(action="die", container_id="c1", installation_id=APP, since="1.5")
        with capture_logs() as logs:
            await runtime.events.put(event)
            for _ in range(100):
                if not streams.held:
                    break
                await asyncio.sleep(0.01)
        assert streams.held == 0
        assert [(e["event"], e["log_level"]) for e in logs] == [
            ("container_events_ended", "warning")
        ]
        streams.ensure(server_id, runtime)  # reopened: from before the unrecorded event
        await asyncio.sleep(0)
        assert runtime.calls[-1] == ("container_events", str(server_id), "")  # no `since`
        await streams.close()


class TestMonitor:
    async def test_a_pass_refreshes_the_apps_whose_containers_changed(self) -> None:
        """The first pass looks at every app; later ones only at an app whose container
        list changed; the event stream is held while the server is online."""
        server = a_server()
        fleet, clock, runtime = FakeFleet([server]), FakeClock(T0), FakeRuntime()
        gateway = FakeGateway()
        gateway.runtimes[server.id] = runtime
        fleet.targets[server.id] = [_target()]
        watch = WatchContainers(fleet, clock)
        streams = ContainerEvents(watch)
        monitor = MonitorServers(fleet, gateway, clock, watch=watch, events=streams)
        _container_of(runtime, "running")
        await monitor()
        assert fleet.watches[APP].seen.state is RunState.RUNNING
        assert streams.held == 1
        changes = len(fleet.watch_changes)
        await monitor()
        assert len(fleet.watch_changes) == changes  # nothing changed, nothing written
        _container_of(runtime, "exited", exit_code=137)
        await monitor()
        assert fleet.watches[APP].seen.state is RunState.EXITED
        assert fleet.watches[APP].down_since is not None
        await streams.close()

    async def test_an_offline_server_closes_its_stream(self) -> None:
        """A server that cannot be reached: its stream is closed."""
        server = a_server()
        fleet, clock, runtime = FakeFleet([server]), FakeClock(T0), FakeRuntime()
        gateway = FakeGateway()
        gateway.runtimes[server.id] = runtime
        watch = WatchContainers(fleet, clock)
        streams = ContainerEvents(watch)
        monitor = MonitorServers(fleet, gateway, clock, watch=watch, events=streams)
        await monitor()
        assert streams.held == 1
        runtime.unreachable.add("list_containers")
        await monitor()
        await monitor()
        assert streams.held == 0
        await streams.close()
