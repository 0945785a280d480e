"""Apps with a domain against fakes of the server: the zero-downtime switch-over, its
failures, the route table, and the monitor's repair of a drifted proxy."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from uuid import UUID, uuid4

import builders
import pytest
from berth.core.errors import RuntimeFailure, ServerUnreachable
from berth.core.models import (
    ContainerState,
    Deployment,
    DeploymentSpec,
    DeploymentState,
    Job,
    ProxyRoute,
    Server,
    ServerStatus,
)
from berth.core.use_cases import MonitorServers, RouteTable, RunDeployment, StepTimeouts
from fakes import EPOCH, FakeClock, FakeFleet, FakeGateway, FakeJobQueue, FakeProxy, FakeRuntime

DOMAIN = "app.example.com"
OLD_PORT = 40001
TIMEOUTS = StepTimeouts(pull=0.2, create=0.2, start=0.2, health=0.3, route=0.2, retire=0.2)


def a_server() -> Server:
    return builders.a_server(name="box", created_at=EPOCH)


class ForgetfulProxy(FakeProxy):
    """Loses its configuration right after the first load berth makes (Caddy restarted)."""

    async def apply(self, routes: Sequence[ProxyRoute]) -> None:
        await super().apply(routes)
        if len(self.applied) == 1:
            self.routes = None


@dataclass
class Rig:
    """One server that runs the installation's current container on ``OLD_PORT``."""

    server: Server = field(default_factory=a_server)
    fleet: FakeFleet = field(default_factory=FakeFleet)
    gateway: FakeGateway = field(default_factory=FakeGateway)
    jobs: FakeJobQueue = field(init=False)
    installation_id: UUID = field(default_factory=uuid4)
    old: ContainerState = field(init=False)

    def __post_init__(self) -> None:
        self.jobs = FakeJobQueue(fleet=self.fleet)
        self.fleet.by_id[self.server.id] = self.server
        self.gateway.runtime(self.server.id)
        self.old = self.runtime.add(
            "web",
            {"berth.managed": "true", "berth.installation": str(self.installation_id)},
            host_port=OLD_PORT,
        )
        self.fleet.installations[self.installation_id] = (self.server.id, DOMAIN, OLD_PORT)
        self.proxy.routes = [ProxyRoute(domain=DOMAIN, upstream_port=OLD_PORT)]

    @property
    def runtime(self) -> FakeRuntime:
        return self.gateway.runtimes[self.server.id]

    @property
    def proxy(self) -> FakeProxy:
        return self.gateway.proxies.setdefault(self.server.id, FakeProxy())

    def job(self, domain: str = DOMAIN) -> Job:
        deployment = Deployment(
            id=uuid4(),
            installation_id=self.installation_id,
            server_id=self.server.id,
            spec=DeploymentSpec(
                image="nginx:1.27", port=8080, domain=domain, env_keys=(), volumes=()
            ),
            state=DeploymentState.RUNNING,
            step=None,
            error=None,
            created_at=EPOCH,
            started_at=EPOCH,
        )
        job = Job(
            deployment=deployment,
            owner_id=self.server.owner_id,
            installation_id=self.installation_id,
            container_name="web",
            server=self.server,
            env={},
        )
        self.jobs.track(job)
        return job

    async def run(self, *, routes: bool = True) -> DeploymentState:
        run = RunDeployment(
            self.jobs,
            self.gateway,
            FakeClock(),
            worker_id="w",
            timeouts=TIMEOUTS,
            routes=RouteTable(self.fleet) if routes else None,
            drain_seconds=0.0,
        )
        return await run(self.job())

    @property
    def outcome(self) -> tuple[DeploymentState, str | None]:
        [(state, error, _)] = self.jobs.finished
        return state, error


@pytest.fixture
def rig() -> Rig:
    return Rig()


class TestSwitchOver:
    async def test_new_container_beside_the_old_then_switch_then_retire(self, rig: Rig) -> None:
        """Create beside, answer, route to the new port, then remove the old and rename."""
        state = await rig.run()
        assert state is DeploymentState.SUCCEEDED
        assert rig.jobs.steps == ["pull", "create", "start", "health", "route", "retire", "tls"]
        [new_id] = rig.runtime.created
        spec = rig.runtime.specs[new_id]
        assert spec.name.startswith("web-")
        assert len(spec.name) == len("web-") + 8
        assert (spec.host_ip, spec.host_port) == ("127.0.0.1", None)
        new_port = rig.runtime.containers[new_id].host_port
        assert new_port is not None
        assert new_port != OLD_PORT
        # The route switched before the old container went away.
        ops = rig.runtime.ops()
        assert "remove" in ops
        assert "rename" in ops
        assert rig.proxy.applied == [[ProxyRoute(domain=DOMAIN, upstream_port=new_port)]]
        assert rig.runtime.removed() == [rig.old.id]
        assert ops.index("remove") < ops.index("rename")
        [(left, container)] = rig.runtime.containers.items()
        assert (left, container.name) == (new_id, "web")
        assert rig.jobs.host_ports == [new_port]
        assert f"{DOMAIN} is routed to it" in rig.jobs.finished[0][2]

    async def test_unhealthy_new_version_leaves_the_old_one_serving(self, rig: Rig) -> None:
        """A new container that never answers is removed; route and old container untouched."""
        rig.runtime.health.answer_after = None
        state = await rig.run()
        assert state is DeploymentState.FAILED
        assert rig.outcome[1] is not None
        assert rig.outcome[1].startswith("health: ")
        assert "route" not in rig.jobs.steps
        assert list(rig.runtime.containers) == [rig.old.id]
        assert rig.runtime.containers[rig.old.id].name == "web"
        assert rig.proxy.applied == []
        assert rig.proxy.routes == [ProxyRoute(domain=DOMAIN, upstream_port=OLD_PORT)]
        assert rig.jobs.host_ports == []

    async def test_proxy_refusing_the_switch_keeps_the_old_one(self, rig: Rig) -> None:
        """Caddy refuses: failed at route quoting it; new removed; old port recorded again."""
        rig.proxy.failure = "loading config: bad things"
        state = await rig.run()
        assert state is DeploymentState.FAILED
        assert rig.outcome[1] == "route: loading config: bad things"
        assert list(rig.runtime.containers) == [rig.old.id]
        new_port = rig.jobs.host_ports[0]
        assert rig.jobs.host_ports == [new_port, OLD_PORT]
        assert rig.fleet.installations[rig.installation_id][2] == OLD_PORT
        assert rig.proxy.routes == [ProxyRoute(domain=DOMAIN, upstream_port=OLD_PORT)]

    async def test_lease_lost_mid_switch_puts_the_old_route_back(self, rig: Rig) -> None:
        """A run stopped while Caddy loads the switch (its lease lost): the old port is
        recorded and routed again, the new container left to the taker, nothing finished."""

        class StuckOnce(FakeProxy):
            async def apply(self, routes: Sequence[ProxyRoute]) -> None:
                if not self.applied and self.failure is None:
                    self.failure = "stuck"  # only the first load hangs
                    await asyncio.Event().wait()
                self.failure = None
                await super().apply(routes)

        rig.gateway.proxies[rig.server.id] = StuckOnce()
        rig.proxy.routes = [ProxyRoute(domain=DOMAIN, upstream_port=OLD_PORT)]
        run = RunDeployment(
            rig.jobs,
            rig.gateway,
            FakeClock(),
            worker_id="w",
            timeouts=StepTimeouts(route=30.0),
            lease=timedelta(milliseconds=30),
            routes=RouteTable(rig.fleet),
            drain_seconds=0.0,
        )

        async def lose_lease_at_route() -> None:
            for _ in range(5000):  # bounded: the run reaches route within milliseconds
                if "route" in rig.jobs.steps:
                    break
                await asyncio.sleep(0.001)
            rig.jobs.held = False

        loser = asyncio.create_task(lose_lease_at_route())
        await asyncio.wait_for(run(rig.job()), timeout=5)
        await loser
        assert rig.jobs.finished == []
        # The new container stays for the worker that took the deployment over.
        assert rig.old.id in rig.runtime.containers
        assert len(rig.runtime.containers) == 2
        assert rig.jobs.host_ports[-1] == OLD_PORT
        assert rig.fleet.installations[rig.installation_id][2] == OLD_PORT
        assert rig.proxy.routes == [ProxyRoute(domain=DOMAIN, upstream_port=OLD_PORT)]

    async def test_caddy_not_running_fails_the_route_and_keeps_the_connection(self) -> None:
        """Caddy's socket missing: failed at route, new container removed, SSH kept."""

        class Stopped(FakeProxy):
            async def apply(self, routes: Sequence[ProxyRoute]) -> None:
                raise ServerUnreachable("Caddy's admin API cannot be reached: No such file.")

        rig = Rig()
        rig.gateway.proxies[rig.server.id] = Stopped()
        assert await rig.run() is DeploymentState.FAILED
        assert rig.outcome[1] == "route: Caddy's admin API cannot be reached: No such file."
        assert list(rig.runtime.containers) == [rig.old.id]
        assert rig.gateway.disconnected == []

    async def test_without_a_route_table_the_domain_cannot_be_routed(self, rig: Rig) -> None:
        """A worker built without a route table fails domain apps at route, harmlessly."""
        state = await rig.run(routes=False)
        assert state is DeploymentState.FAILED
        assert rig.outcome[1] is not None
        assert "no route table" in rig.outcome[1]
        assert list(rig.runtime.containers) == [rig.old.id]
        assert rig.fleet.installations[rig.installation_id][2] == OLD_PORT

    async def test_retire_failure_is_an_event_not_a_failure(self, rig: Rig) -> None:
        """The new version serves; an old container Docker will not remove is left, noted."""
        rig.runtime.failures["remove"] = "device or resource busy"
        state = await rig.run()
        assert state is DeploymentState.SUCCEEDED
        assert "Not finished: device or resource busy" in rig.jobs.events
        assert rig.old.id in rig.runtime.containers

    async def test_a_proxy_that_lost_its_config_while_draining_is_loaded_again(self) -> None:
        """Caddy restarted during the drain: retire loads the routes again first."""
        rig = Rig()
        rig.gateway.proxies[rig.server.id] = ForgetfulProxy()
        rig.proxy.routes = [ProxyRoute(domain=DOMAIN, upstream_port=OLD_PORT)]
        assert await rig.run() is DeploymentState.SUCCEEDED
        assert len(rig.proxy.applied) == 2
        assert rig.proxy.routes == rig.proxy.applied[0]
        assert "The proxy's configuration had changed; loaded it again." in rig.jobs.events


class TestRouteTable:
    async def test_apply_loads_the_fleets_routes(self) -> None:
        """The proxy gets every route of the server, sorted by domain, and nothing else."""
        fleet, proxy, server = FakeFleet(), FakeProxy(), uuid4()
        fleet.installations[uuid4()] = (server, "b.example.com", 2)
        fleet.installations[uuid4()] = (server, "a.example.com", 1)
        fleet.installations[uuid4()] = (server, "pending.example.com", None)
        fleet.installations[uuid4()] = (uuid4(), "other.example.com", 3)
        routes = await RouteTable(fleet).apply(server, proxy)
        assert [r.domain for r in routes] == ["a.example.com", "b.example.com"]
        assert proxy.routes == routes

    async def test_an_unrecorded_expected_route_loads_nothing(self) -> None:
        """If the new port did not make it to the store, the proxy is not touched."""
        fleet, proxy, server = FakeFleet(), FakeProxy(), uuid4()
        with pytest.raises(RuntimeFailure, match="could not be recorded"):
            await RouteTable(fleet).apply(
                server, proxy, expect=ProxyRoute(domain=DOMAIN, upstream_port=1)
            )
        assert proxy.applied == []

    async def test_converge_is_quiet_without_routes_or_proxy(self) -> None:
        """No routes and no reachable proxy: nothing to do. Routes and no proxy: raised."""

        class Absent(FakeProxy):
            async def matches(self, routes: Sequence[ProxyRoute]) -> bool:
                raise ServerUnreachable("no socket")

        fleet, server = FakeFleet(), uuid4()
        table = RouteTable(fleet)
        assert await table.converge(server, Absent()) is False
        fleet.installations[uuid4()] = (server, DOMAIN, 1)
        with pytest.raises(ServerUnreachable):
            await table.converge(server, Absent())


class TestMonitor:
    async def test_monitor_reloads_a_drifted_proxy_and_leaves_a_matching_one(self) -> None:
        """A proxy that lost its config is loaded again on the next pass; then left alone."""
        rig = Rig()
        rig.proxy.routes = None  # Caddy restarted with its initial configuration
        monitor = MonitorServers(rig.fleet, rig.gateway, FakeClock(), routes=RouteTable(rig.fleet))
        await monitor()
        assert rig.proxy.routes == [ProxyRoute(domain=DOMAIN, upstream_port=OLD_PORT)]
        await monitor()
        assert len(rig.proxy.applied) == 1

    async def test_monitor_survives_a_refusing_proxy(self) -> None:
        """A proxy that refuses is logged, not raised; the server stays online."""
        rig = Rig()
        rig.proxy.routes = None
        rig.proxy.failure = "nope"
        monitor = MonitorServers(rig.fleet, rig.gateway, FakeClock(), routes=RouteTable(rig.fleet))
        await monitor()
        await monitor()
        assert rig.fleet.by_id[rig.server.id].status is ServerStatus.ONLINE
