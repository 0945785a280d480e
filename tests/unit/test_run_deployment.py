"""Deploying for real, against fakes of the server: the worker's run, the monitor,
the local server, and an installation's logs and removal."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from uuid import uuid4

import builders
import msgspec
import pytest
from berth.core import commands as c
from berth.core.builds import BUILT_IMAGES_KEPT
from berth.core.commands import parse_deploy
from berth.core.errors import (
    Conflict,
    HostKeyMismatch,
    NotFound,
    RuntimeFailure,
    ServerUnreachable,
)
from berth.core.models import (
    BuildSpec,
    BuiltImage,
    DeploymentSpec,
    DeploymentState,
    GitSource,
    Installation,
    InstallationStatus,
    Job,
    ProxyRoute,
    RunState,
    Server,
    ServerFacts,
    ServerStatus,
    SshCredentials,
    Transport,
    User,
)
from berth.core.outages import ThrottledWarning
from berth.core.ports import CALL_LANE
from berth.core.types import host_key_fingerprint
from berth.core.use_cases import (
    EnsureLocalServer,
    MonitorServers,
    RunDeployment,
    StepTimeouts,
    installations,
)
from berth.core.use_cases import servers as servers_use_cases
from berth.core.use_cases.routes import RouteTable
from berth.core.use_cases.watch import WatchContainers
from berth.core.watch import AppWatch, Seen, WatchTarget
from fakes import (
    EPOCH,
    FakeBuildSources,
    FakeClock,
    FakeFleet,
    FakeGateway,
    FakeJobQueue,
    FakeRuntime,
    Health,
)
from hypothesis import event, given, settings
from hypothesis import strategies as st
from wiring import App, assert_hidden, build_app, finish, unique_email

_KEY_A = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
_KEY_B = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKnyPSfYoTxNnR+yO+MMH6s8XGxKu4BCThQ5SOuwmplU"

MakeUser = Callable[[], Awaitable[User]]
MakeServer = Callable[[User], Awaitable[Server]]

TIMEOUTS = StepTimeouts(pull=0.2, create=0.2, start=0.2, health=0.3)
#: Deadlines no step meets only because the machine is busy: for tests of how soon a
#: step ends on its own (a deadline in the way would decide for them).
ROOMY = StepTimeouts(pull=30, create=30, start=30, health=30)
STEPS = ("connect", "pull", "create", "start", "health", "route", "retire")
PORT_TAKEN = (
    "driver failed programming external connectivity on endpoint web: "
    "Bind for 0.0.0.0:8080 failed: port is already allocated"
)


def a_server(status: ServerStatus = ServerStatus.ONLINE, name: str = "box") -> Server:
    return builders.a_server(status=status, name=name, created_at=EPOCH)


def a_job(
    server: Server,
    *,
    image: str = "nginx:1.27",
    port: int = 8080,
    domain: str | None = None,
    volumes: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    name: str = "web",
    build: BuildSpec | None = None,
) -> Job:
    env = env or {}
    installation_id = uuid4()
    deployment = builders.a_deployment(
        installation_id=installation_id,
        server_id=server.id,
        spec=DeploymentSpec(
            image=image,
            port=port,
            domain=domain,
            env_keys=tuple(sorted(env)),
            volumes=volumes,
            build=build,
        ),
        state=DeploymentState.RUNNING,
        created_at=EPOCH,
        started_at=EPOCH,
    )
    return Job(
        deployment=deployment,
        owner_id=server.owner_id,
        installation_id=installation_id,
        container_name=name,
        server=server,
        env=env,
    )


@dataclass
class Rig:
    """One worker's RunDeployment wired to fakes of a single server."""

    server: Server = field(default_factory=a_server)
    fleet: FakeFleet = field(default_factory=FakeFleet)
    jobs: FakeJobQueue = field(default_factory=FakeJobQueue)
    gateway: FakeGateway = field(default_factory=FakeGateway)
    clock: FakeClock = field(default_factory=FakeClock)
    done: list[tuple[Job, DeploymentState]] = field(default_factory=list)  # runs that returned
    timeouts: StepTimeouts = TIMEOUTS
    lease: timedelta = timedelta(seconds=15)
    progress_seconds: float = 1.0  # a pull's progress events: at most one per this
    berth_paths: tuple[str, ...] = ()  # berth's data dir on this machine, as bootstrap gives
    watched: bool = False  # apps under watch: the run records what its container does
    sources: FakeBuildSources = field(default_factory=FakeBuildSources)  # builds' contexts

    def __post_init__(self) -> None:
        self.gateway.runtime(self.server.id)  # reachable unless a test says otherwise
        self.jobs.fleet = self.fleet

    @property
    def runtime(self) -> FakeRuntime:
        return self.gateway.runtimes[self.server.id]

    def job(self, **kwargs: Any) -> Job:
        return a_job(self.server, **kwargs)

    async def run(self, job: Job) -> DeploymentState:
        run = RunDeployment(
            self.jobs,
            self.gateway,
            self.clock,
            worker_id="worker-test",
            timeouts=self.timeouts,
            lease=self.lease,
            routes=RouteTable(self.fleet),
            drain_seconds=0.0,
            berth_paths=self.berth_paths,
            watch=WatchContainers(self.fleet, self.clock) if self.watched else None,
            sources=self.sources,
        )
        run.progress_seconds = self.progress_seconds
        self.jobs.track(job)
        state = await run(job)
        self.done.append((job, state))
        return state

    @property
    def outcome(self) -> tuple[DeploymentState, str | None]:
        [(state, error, _)] = self.jobs.finished
        return state, error

    async def cancel(self, run: asyncio.Task[Any]) -> None:
        """Cancel the ``run`` task: it must end recorded as failed, ``interrupted: …``."""
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        state, error = self.outcome
        assert state is DeploymentState.FAILED
        assert error is not None
        assert error.startswith("interrupted: ")


@pytest.fixture
def rig() -> Rig:
    return Rig()


# --- runtime behaviours, for the property of RunDeployment ----------------------------

QUICK = StepTimeouts(pull=0.05, create=0.05, start=0.05, health=0.2)

answering = st.builds(Health, answer_after=st.integers(0, 3))  # 3 probes miss the deadline
healths = st.one_of(
    answering,
    answering,
    st.builds(
        Health,
        answer_after=st.none(),
        exit_code=st.integers(0, 255),
        exit_after=st.integers(0, 2),
        restarting=st.booleans(),
    ),
    st.just(Health(answer_after=None)),
)


@dataclass(frozen=True)
class Behaviour:
    image_present: bool
    pull_error: str | None
    create_error: str | None
    start_error: str | None
    health: Health
    previous: bool
    foreign: bool
    unreachable: str | None
    domain: bool


def sometimes(value: Any) -> st.SearchStrategy[Any]:
    """``value`` one time in five, else ``None``: many runs should get as far as health."""
    return st.sampled_from([None, None, None, None, value])


behaviours = st.builds(
    Behaviour,
    image_present=st.booleans(),
    pull_error=sometimes("pull access denied for nope, repository does not exist"),
    create_error=sometimes("invalid reference format"),
    start_error=sometimes(PORT_TAKEN),
    health=healths,
    previous=st.booleans(),
    foreign=st.sampled_from([False, False, False, False, True]),
    unreachable=st.sampled_from([None] * 8 + ["connect", "image_id", "find", "stop", "start"]),
    domain=st.booleans(),
)


def watched_as(rig: Rig, job: Job, exited: str) -> None:
    """The watch knows ``job``'s installation (a deployment is active: quiet) and last saw
    its container ``exited`` (that id) -- as a pass during the run may have."""
    rig.fleet.targets[rig.server.id] = [
        WatchTarget(
            installation_id=job.installation_id,
            owner_id=job.owner_id,
            container_name=job.container_name,
            current_deployment_id=job.current_deployment_id,
            quiet=True,
        )
    ]
    seen = Seen(state=RunState.EXITED, container_id=exited, exit_code=0)
    rig.fleet.watches[job.installation_id] = AppWatch(
        installation_id=job.installation_id, seen=seen, observed_at=rig.clock.now()
    )


class TestRunDeployment:
    async def test_success_walks_the_steps_in_order(self, rig: Rig) -> None:
        """A good image goes pull → create → start → health and succeeds on its answering port."""
        job = rig.job()
        state = await rig.run(job)
        assert state is DeploymentState.SUCCEEDED
        assert rig.jobs.steps == ["pull", "create", "start", "health", "retire"]
        [(final, error, message)] = rig.jobs.finished
        assert (final, error) == (DeploymentState.SUCCEEDED, None)
        assert "answering on port 8080" in message
        assert rig.jobs.host_ports == [8080]
        assert "Port 8080 answered: HTTP 200." in rig.jobs.events
        assert rig.done == [(job, DeploymentState.SUCCEEDED)]
        [container] = rig.runtime.apps()
        assert container.running
        assert container.name == "web"

    async def test_a_succeeded_run_records_its_container_running(self) -> None:
        """What the watch last recorded -- the new container seen created but not yet
        started (``exited``) by a pass during the run -- is replaced, before the run ends,
        by what the container does once it answered: the deploy's answer says
        ``running`` (seen in CI: ``exited``)."""
        rig = Rig(watched=True)
        job = rig.job()
        watched_as(rig, job, "created-not-started")
        assert await rig.run(job) is DeploymentState.SUCCEEDED
        [container] = rig.runtime.apps()
        seen = rig.fleet.watches[job.installation_id].seen
        assert (seen.state, seen.container_id) == (RunState.RUNNING, container.id)
        assert all(change.report is None for change in rig.fleet.watch_changes)

    async def test_a_failed_run_that_restored_the_old_revision_records_it_running(
        self,
    ) -> None:
        """A redeploy that fails after the old container stopped starts it again; what the
        watch recorded meanwhile (the old container ``exited``) is replaced, before the run
        ends, by what it does now: the failed deploy's answer says ``running`` (seen in CI:
        ``exited`` after a redeploy onto a taken port)."""
        rig = Rig(watched=True)
        job = rig.job()
        current = uuid4()
        old = rig.runtime.add(
            job.container_name,
            {"berth.installation": str(job.installation_id), "berth.deployment": str(current)},
            running=True,
        )
        job = msgspec.structs.replace(job, current_deployment_id=current)
        watched_as(rig, job, old.id)
        rig.runtime.health_of[old.id] = Health()  # it answers; the new one never does
        rig.runtime.health = Health(answer_after=None)
        assert await rig.run(job) is DeploymentState.FAILED
        assert rig.runtime.containers[old.id].running
        seen = rig.fleet.watches[job.installation_id].seen
        assert (seen.state, seen.container_id) == (RunState.RUNNING, old.id)

    async def test_a_volume_refused_since_it_was_queued_fails_before_the_server_is_touched(
        self, rig: Rig
    ) -> None:
        """A deployment queued before a host path was refused (``/etc``) fails at create,
        saying why, with nothing done on the server."""
        state = await rig.run(rig.job(volumes=("/srv/app:/app", "/etc:/host-etc")))
        assert state is DeploymentState.FAILED
        _, error = rig.outcome
        assert error is not None
        assert error.startswith("create: The host path `/etc` is refused")
        assert rig.runtime.ops() == []

    @pytest.mark.parametrize("transport", [Transport.LOCAL, Transport.SSH])
    async def test_berths_data_dir_is_refused_on_this_machines_server_only(
        self, transport: Transport
    ) -> None:
        """On the server that is this machine a volume holding berth's data dir fails the
        run before anything is made; on another server the same path is the user's own."""
        server = msgspec.structs.replace(a_server(), transport=transport)
        rig = Rig(server=server, berth_paths=("/srv/berth/data",))
        state = await rig.run(rig.job(volumes=("/srv/berth:/b",)))
        if transport is Transport.LOCAL:
            assert state is DeploymentState.FAILED
            _, error = rig.outcome
            assert error is not None
            assert "holds `/srv/berth/data`, which holds berth's own data" in error
            assert rig.runtime.ops() == []
        else:
            assert state is DeploymentState.SUCCEEDED

    async def test_present_image_is_not_pulled(self, rig: Rig) -> None:
        """An image already on the server is used as is."""
        rig.runtime.images.add("nginx:1.27")
        await rig.run(rig.job())
        assert "pull" not in rig.runtime.ops()
        assert "Image is present; no pull needed." in rig.jobs.events
        assert rig.outcome == (DeploymentState.SUCCEEDED, None)

    async def test_absent_image_is_pulled(self, rig: Rig) -> None:
        """An image missing from the server is pulled before the container is created."""
        await rig.run(rig.job(image="ghcr.io/acme/api:2"))
        ops = rig.runtime.ops()
        assert ("pull", "ghcr.io/acme/api:2") in rig.runtime.calls
        assert ops.index("pull") < ops.index("create")
        assert rig.outcome == (DeploymentState.SUCCEEDED, None)

    async def test_pull_failure_fails_at_pull_and_creates_nothing(self, rig: Rig) -> None:
        """A refused pull fails the deployment at pull, quoting Docker; nothing is created."""
        message = "manifest for nginx:9.99 not found: manifest unknown"
        rig.runtime.failures["pull"] = message
        await rig.run(rig.job(image="nginx:9.99"))
        assert rig.outcome == (DeploymentState.FAILED, f"pull: {message}")
        assert rig.jobs.finished[0][2] == f"Failed at pull: {message}"
        assert "create" not in rig.runtime.ops()
        assert rig.runtime.containers == {}
        assert rig.jobs.steps == ["pull"]

    async def test_slow_step_fails_at_its_deadline(self, rig: Rig) -> None:
        """A step that does not return within its deadline fails, naming the deadline."""
        rig.runtime.hangs.add("pull")
        await rig.run(rig.job())
        assert rig.outcome == (DeploymentState.FAILED, "pull: Did not finish within 0.2 s.")

    async def test_previous_container_is_stopped_then_removed_once_healthy(self, rig: Rig) -> None:
        """A redeploy creates the new container beside the old one, stops (not removes) the
        old one before starting the new one, and removes it only once the new one answers."""
        job = rig.job()
        old = rig.runtime.add(
            "web", {"berth.managed": "true", "berth.installation": str(job.installation_id)}
        )
        await rig.run(job)
        calls = rig.runtime.calls
        [new] = rig.runtime.created
        assert rig.runtime.specs[new].name == f"web-{job.deployment.id.hex[:8]}"
        assert calls.index(("stop", old.id)) < calls.index(("start", new))
        assert calls.index(("start", new)) < calls.index(("remove", old.id))
        assert ("rename", new, "web") in calls
        assert f"Removed previous container {old.id[:12]}." in rig.jobs.events
        assert [c.id for c in rig.runtime.apps()] == [new]
        assert rig.runtime.containers[new].name == "web"
        assert rig.outcome == (DeploymentState.SUCCEEDED, None)

    async def test_failed_pull_leaves_the_previous_container_running(self, rig: Rig) -> None:
        """A redeploy whose image cannot be pulled leaves the running app alone."""
        job = rig.job(image="nginx:9.99")
        old = rig.runtime.add("web", {"berth.installation": str(job.installation_id)})
        rig.runtime.failures["pull"] = "manifest unknown"
        await rig.run(job)
        assert rig.outcome == (DeploymentState.FAILED, "pull: manifest unknown")
        assert rig.runtime.containers == {old.id: old}

    async def test_foreign_container_holding_the_name_fails_at_create(self, rig: Rig) -> None:
        """A container with the name that berth did not create for it fails at create, untouched."""
        foreign = rig.runtime.add("web", {"com.example.owner": "someone-else"})
        await rig.run(rig.job())
        state, error = rig.outcome
        assert state is DeploymentState.FAILED
        assert error is not None
        assert error.startswith("create: A container named web exists")
        assert rig.runtime.containers == {foreign.id: foreign}
        assert "remove" not in rig.runtime.ops()
        assert "create" not in rig.runtime.ops()

    async def test_other_installations_container_is_not_ours(self, rig: Rig) -> None:
        """A berth container of another installation holding the name is not removed either."""
        other = rig.runtime.add("web", {"berth.managed": "true", "berth.installation": "x"})
        await rig.run(rig.job())
        assert rig.outcome[0] is DeploymentState.FAILED
        assert other.id in rig.runtime.containers

    async def test_start_failure_fails_at_start_and_removes_the_container(self, rig: Rig) -> None:
        """Docker refusing to start the app's container fails at start; it is removed
        (its port holder too)."""
        start = rig.runtime.start

        async def refusing(container_id: str) -> None:
            if container_id in rig.runtime.created:  # the app's, not its holder's
                raise RuntimeFailure(PORT_TAKEN)
            await start(container_id)

        rig.runtime.start = refusing  # type: ignore[method-assign]
        await rig.run(rig.job())
        assert rig.outcome == (DeploymentState.FAILED, f"start: {PORT_TAKEN}")
        [created] = rig.runtime.created
        assert created in rig.runtime.removed()
        assert rig.runtime.containers == {}
        assert "Removed the container that failed." in rig.jobs.events
        assert rig.jobs.host_ports == []

    async def test_a_taken_port_fails_a_first_deploy_at_start_leaving_nothing(
        self, rig: Rig
    ) -> None:
        """Docker refusing the port holder's start (port taken) fails the first deploy at
        start; its holder goes, and whatever app container was made goes too."""
        rig.runtime.failures["start"] = PORT_TAKEN
        await rig.run(rig.job())
        assert rig.outcome == (DeploymentState.FAILED, f"start: {PORT_TAKEN}")
        assert rig.runtime.containers == {}
        assert rig.jobs.host_ports == []

    async def test_create_failure_fails_at_create(self, rig: Rig) -> None:
        """Docker refusing to create fails at create, quoting it."""
        rig.runtime.failures["create"] = "invalid reference format"
        await rig.run(rig.job())
        assert rig.outcome == (DeploymentState.FAILED, "create: invalid reference format")
        assert rig.runtime.containers == {}

    @pytest.mark.parametrize("restarting", [False, True])
    async def test_exit_fails_at_health_with_code_and_logs(
        self, rig: Rig, restarting: bool
    ) -> None:
        """A container that exits (or restarts) fails at health with its code and last log lines."""
        rig.runtime.health = Health(answer_after=None, exit_code=3, restarting=restarting)
        rig.runtime.log_lines = [f"line {i}" for i in range(30)] + ["fatal: DATABASE_URL unset"]
        await rig.run(rig.job())
        assert rig.outcome == (
            DeploymentState.FAILED,
            "health: The container exited with code 3 before answering.",
        )
        logs = [m for m in rig.jobs.events if m.startswith("log: ")]
        assert len(logs) == 20
        assert logs[-1] == "log: fatal: DATABASE_URL unset"
        assert rig.runtime.containers == {}

    async def test_one_silent_probe_is_not_an_answer(self, rig: Rig) -> None:
        """A port that once looks held without a word, then closes each probe at once, is
        not healthy: Docker's userland proxy, late on a busy machine, holds a connection
        open for a moment though nothing listens behind it (seen in CI: a container that
        never listened passed its health check through the SSH transport)."""
        rig.runtime.health = Health(answers=(None, "TCP", None, "TCP", None))
        await rig.run(rig.job())
        assert rig.outcome == (
            DeploymentState.FAILED,
            "health: Port 8080 did not answer within 0.3 s.",
        )
        assert rig.runtime.containers == {}

    async def test_a_port_that_answers_no_http_twice_in_a_row_is_healthy(self, rig: Rig) -> None:
        """An app that speaks no HTTP (a database, a silent listener) answers by holding
        its port: seen on two probes in a row, it is healthy; an HTTP answer needs one."""
        rig.runtime.health = Health(answers=(None, "TCP", None, "TCP", "TCP"))
        assert await rig.run(rig.job()) is DeploymentState.SUCCEEDED
        assert "Port 8080 answered: TCP." in rig.jobs.events

    async def test_exit_after_running_a_while_fails_at_health(self) -> None:
        """A container that runs, never answers, then exits fails as soon as it exits,
        long before the health deadline."""
        rig = Rig(timeouts=ROOMY)
        rig.runtime.health = Health(answer_after=None, exit_code=137, exit_after=2)
        started = time.monotonic()
        await rig.run(rig.job())
        assert rig.outcome[1] == "health: The container exited with code 137 before answering."
        assert time.monotonic() - started < rig.timeouts.health

    async def test_env_values_are_redacted_in_log_events(self, rig: Rig) -> None:
        """Env values of 6 characters or more become [redacted] in log events; shorter ones stay."""
        env = {"DB_PASSWORD": "hunter22secret", "MODE": "prod", "TOKEN": "abcdef"}
        rig.runtime.health = Health(answer_after=None, exit_code=1)
        rig.runtime.log_lines = ["connecting with hunter22secret in prod mode, token=abcdef"]
        await rig.run(rig.job(env=env))
        logs = [m for m in rig.jobs.events if m.startswith("log: ")]
        assert logs == ["log: connecting with [redacted] in prod mode, token=[redacted]"]
        assert all("hunter22secret" not in m for m in rig.jobs.events)
        assert rig.runtime.specs[rig.runtime.created[0]].env == env

    async def test_answers_after_a_few_probes(self, rig: Rig) -> None:
        """A port that answers on the third probe succeeds."""
        rig.runtime.health = Health(answer_after=2)
        await rig.run(rig.job())
        assert rig.outcome == (DeploymentState.SUCCEEDED, None)
        assert [c for c in rig.runtime.calls if c[0] == "probe"] == [("probe", "8080")] * 3

    async def test_never_answering_fails_at_health_after_the_deadline(self, rig: Rig) -> None:
        """A port that never answers fails at health at the deadline; the container is removed."""
        rig.runtime.health = Health(answer_after=None)
        rig.runtime.log_lines = ["listening on 127.0.0.1:9999"]
        started = time.monotonic()
        await rig.run(rig.job())
        elapsed = time.monotonic() - started
        assert rig.outcome == (
            DeploymentState.FAILED,
            "health: Port 8080 did not answer within 0.3 s. Note: the app logged "
            "'listening on 127.0.0.1:9999'; it was deployed with port 8080.",
        )
        assert 0.2 <= elapsed < 1.5
        assert "log: listening on 127.0.0.1:9999" in rig.jobs.events
        assert rig.runtime.containers == {}

    async def test_the_logged_port_hint_redacts_env_values(self, rig: Rig) -> None:
        """The port the app logged is pointed out with env values redacted, as in its
        log events."""
        rig.runtime.health = Health(answer_after=None)
        rig.runtime.log_lines = ["listening on hunter22secret:3000"]
        await rig.run(rig.job(env={"BIND": "hunter22secret"}))
        error = rig.outcome[1]
        assert error is not None
        assert error.endswith(
            "Note: the app logged 'listening on [redacted]:3000'; it was deployed with port 8080."
        )
        assert all("hunter22secret" not in m for m in rig.jobs.events)

    async def test_unreachable_at_connect_fails_at_connect(self, rig: Rig) -> None:
        """An unreachable server fails at connect with the reason; its connection is dropped."""
        rig.gateway.failures[rig.server.id] = ServerUnreachable("ssh: Connection refused")
        job = rig.job()
        state = await rig.run(job)
        assert state is DeploymentState.FAILED
        assert rig.outcome == (
            DeploymentState.FAILED,
            "connect: The server is unreachable: ssh: Connection refused",
        )
        assert rig.gateway.disconnected == [rig.server.id]
        assert rig.jobs.steps == []
        assert rig.done == [(job, DeploymentState.FAILED)]

    async def test_unreachable_mid_run_fails_at_that_step(self, rig: Rig) -> None:
        """Losing the server during a step fails that step and drops the connection."""
        rig.runtime.unreachable.add("create")
        await rig.run(rig.job())
        state, error = rig.outcome
        assert state is DeploymentState.FAILED
        assert error is not None
        assert error.startswith("create: The server is unreachable")
        assert rig.gateway.disconnected == [rig.server.id]

    async def test_lost_lease_at_finish_raises_nothing(self, rig: Rig) -> None:
        """When finish finds the lease lost, the run ends quietly: it returns, raising nothing."""
        rig.jobs.held = False
        job = rig.job()
        state = await rig.run(job)
        assert rig.jobs.finished == []
        assert rig.jobs.writes == []
        assert [kind for kind, _, _ in rig.jobs.dropped][-1] == "finish"
        assert rig.done == [(job, state)]

    async def test_shutdown_mid_run_fails_it_now_and_removes_its_container(self) -> None:
        """Cancelled from outside (berth stopping): the run's container goes, the deployment
        ends ``failed`` as interrupted at once, and the cancellation propagates."""
        rig = Rig(timeouts=StepTimeouts(pull=5, create=5, start=5, health=30))
        rig.runtime.health = Health(answer_after=None)
        task = asyncio.create_task(rig.run(rig.job()))
        for _ in range(5000):  # bounded: the run reaches health within milliseconds
            if "health" in rig.jobs.steps:
                break
            await asyncio.sleep(0.001)
        await rig.cancel(task)
        assert rig.runtime.created
        assert rig.runtime.containers == {}
        assert rig.done == []  # it never returned: the worker is going away

    async def test_lease_is_renewed_while_running(self) -> None:
        """The lease is renewed in the background while the run waits on the container."""
        rig = Rig(lease=timedelta(milliseconds=30))
        rig.runtime.health = Health(answer_after=2)
        await rig.run(rig.job())
        assert rig.jobs.renewals >= 1
        assert rig.outcome == (DeploymentState.SUCCEEDED, None)

    async def test_lost_lease_mid_run_stops_the_run(self) -> None:
        """A lease lost while a step waits cancels the run there: no finish, no later step,
        and its container is left to the worker that takes the deployment over."""
        slow = StepTimeouts(pull=5, create=5, start=5, health=30)
        rig = Rig(lease=timedelta(milliseconds=30), timeouts=slow)
        rig.runtime.health = Health(answer_after=None)  # would wait the whole 30 s

        async def lose_lease() -> None:
            for _ in range(5000):  # bounded: the run reaches health within milliseconds
                if "health" in rig.jobs.steps:
                    break
                await asyncio.sleep(0.001)
            rig.jobs.held = False

        loser = asyncio.create_task(lose_lease())
        job = rig.job()
        state = await asyncio.wait_for(rig.run(job), timeout=5)
        await loser
        assert rig.jobs.finished == []
        assert not any(kind == "finish" for kind, _, _ in rig.jobs.dropped)
        assert rig.jobs.steps[-1] == "health"
        assert rig.done == [(job, state)]
        [created] = rig.runtime.created  # the run had made its container ...
        assert [c.id for c in rig.runtime.apps()] == [created]  # ... and left it to the taker

    async def test_volumes_resolve_relative_paths_under_the_apps_dir(self, rig: Rig) -> None:
        """Relative host paths live under /var/lib/berth/apps/<container>/; :ro is kept."""
        volumes = ("data:/var/lib/data", "./conf:/etc/app:ro", "/srv/shared:/shared:rw", ".:/app")
        await rig.run(rig.job(name="my-api", volumes=volumes))
        spec = rig.runtime.specs[rig.runtime.created[0]]
        assert spec.binds == (
            "/var/lib/berth/apps/my-api/data:/var/lib/data",
            "/var/lib/berth/apps/my-api/conf:/etc/app:ro",
            "/srv/shared:/shared",
            "/var/lib/berth/apps/my-api:/app",
        )

    async def test_without_domain_the_port_is_published_on_all_interfaces(self, rig: Rig) -> None:
        """An app without a domain is published on 0.0.0.0 at its own port."""
        await rig.run(rig.job(port=3000))
        spec = rig.runtime.specs[rig.runtime.created[0]]
        assert (spec.host_ip, spec.host_port, spec.container_port) == ("0.0.0.0", 3000, 3000)
        assert rig.jobs.host_ports == [3000]

    async def test_domain_app_binds_loopback_on_an_ephemeral_port(self, rig: Rig) -> None:
        """An app with a domain binds 127.0.0.1 on a port Docker picks; that port is routed."""
        await rig.run(rig.job(port=3000, domain="app.example.com"))
        spec = rig.runtime.specs[rig.runtime.created[0]]
        assert (spec.host_ip, spec.host_port, spec.container_port) == ("127.0.0.1", None, 3000)
        [published] = rig.jobs.host_ports
        assert published is not None
        assert published != 3000
        assert rig.outcome == (DeploymentState.SUCCEEDED, None)
        assert f"answering on port {published}" in rig.jobs.finished[0][2]
        proxy = rig.gateway.proxies[rig.server.id]
        assert proxy.routes == [ProxyRoute(domain="app.example.com", upstream_port=published)]

    async def test_containers_carry_berth_labels(self, rig: Rig) -> None:
        """The container is labelled as berth's, with its server (what the install script's
        --purge removes by), installation and deployment, and (it joins the app's port
        holder) the mapping it was deployed with."""
        job = rig.job()
        await rig.run(job)
        spec = rig.runtime.specs[rig.runtime.created[0]]
        assert spec.labels == {
            "berth.managed": "true",
            "berth.server": str(job.server.id),
            "berth.installation": str(job.installation_id),
            "berth.deployment": str(job.deployment.id),
            "berth.ports": "8080:8080",
        }

    @settings(max_examples=100, deadline=None)
    @given(behaviour=behaviours)
    async def test_every_run_ends_once_and_cleans_up(self, behaviour: Behaviour) -> None:
        """Any runtime behaviour ends in one final state; failures name a step and leave nothing."""
        rig = Rig(timeouts=QUICK)
        runtime = rig.runtime
        job = rig.job(domain="app.example.com" if behaviour.domain else None)
        if behaviour.image_present:
            runtime.images.add(job.deployment.spec.image)
        for op, error in (
            ("pull", behaviour.pull_error),
            ("create", behaviour.create_error),
            ("start", behaviour.start_error if behaviour.domain else None),
        ):
            if error is not None:
                runtime.failures[op] = error
        if behaviour.start_error is not None and not behaviour.domain:
            runtime.refused_ports.add(8080)  # held by something else: the new one cannot start
        runtime.health = behaviour.health
        if behaviour.unreachable == "connect":
            rig.gateway.failures[rig.server.id] = ServerUnreachable("timed out")
        elif behaviour.unreachable is not None:
            runtime.unreachable.add(behaviour.unreachable)
        previous = (
            runtime.add("web-old", {"berth.installation": str(job.installation_id)})
            if behaviour.previous
            else None
        )
        foreign = runtime.add("web") if behaviour.foreign else None

        state = await rig.run(job)

        [(final, error, message)] = rig.jobs.finished
        event(f"ended {final.value}" + (f" at {error.split(':', 1)[0]}" if error else ""))
        assert final is state
        assert final in (DeploymentState.SUCCEEDED, DeploymentState.FAILED)
        assert rig.done == [(job, state)]
        assert rig.jobs.dropped == []
        if final is DeploymentState.SUCCEEDED:
            assert error is None
            [kept] = runtime.created
            assert runtime.containers[kept].running
        else:
            assert error is not None
            failed_step = error.split(":", 1)[0]
            assert failed_step in STEPS
            assert message.startswith(f"Failed at {failed_step}: ")
            if failed_step != "connect":
                assert rig.jobs.steps[-1] == failed_step
            assert not set(runtime.created) & set(runtime.containers)
            if previous is not None and behaviour.unreachable is None:
                assert runtime.containers[previous.id].running  # the old one serves again
                # None: the run failed before it looked at the server's containers.
                assert rig.jobs.serving in ([True], [None])
        if foreign is not None:
            assert runtime.containers.get(foreign.id) == foreign


class TestEventWrites:
    """A run's events and steps go to the store in order, written by a task of their own."""

    @staticmethod
    async def until(done: Callable[[], bool]) -> None:
        """Wait (bounded: 30 s) until ``done``; fail if it never is. A shorter bound (5 s)
        went on silently on a busy machine and opened the store's gate too early."""
        for _ in range(3000):  # the fakes answer at once: ends long before the bound
            if done():
                return
            await asyncio.sleep(0.01)
        pytest.fail("not reached within 30 s")

    async def test_a_slow_store_holds_up_no_server_work(self, rig: Rig) -> None:
        """While the store has not yet taken the run's first event, the run goes on with
        the server (created, started, answered); the events follow, in order."""
        rig.jobs.write_gate = gate = asyncio.Event()
        task = asyncio.create_task(rig.run(rig.job()))
        await self.until(lambda: "probe" in rig.runtime.ops() or task.done())
        assert {"create", "start", "probe"} <= set(rig.runtime.ops())
        assert rig.jobs.writes == []
        gate.set()
        assert await task is DeploymentState.SUCCEEDED
        written = [step for _, step, _ in rig.jobs.writes]
        assert list(dict.fromkeys(written)) == ["pull", "create", "start", "health", "retire"]
        assert sorted(written, key=written.index) == written  # each step's events together

    async def test_the_events_are_written_in_the_journal_lane(self, rig: Rig) -> None:
        """The run's own writes are the ``deploy`` lane's; its events' background writes
        the ``journal`` lane's, behind those at SQLite's write lock."""
        assert await rig.run(rig.job()) is DeploymentState.SUCCEEDED
        assert rig.jobs.progress_writes >= 1
        assert set(rig.jobs.progress_lanes) == {"journal"}
        assert CALL_LANE.get() == "deploy"  # the run's own (here the test's context)

    async def test_the_events_left_at_the_end_go_with_it(self, rig: Rig) -> None:
        """Events logged while a write is under way are written together; those left when
        the run ends are written by the end itself: a run of a dozen events writes once
        here (the first event) and then ends."""
        rig.jobs.write_gate = gate = asyncio.Event()
        task = asyncio.create_task(rig.run(rig.job()))
        await self.until(lambda: bool(rig.jobs.host_ports) or task.done())  # just before its end
        gate.set()
        await task
        assert rig.jobs.progress_writes == 1
        assert rig.outcome == (DeploymentState.SUCCEEDED, None)
        assert "Port 8080 answered: HTTP 200." in rig.jobs.events


class TestBuildRun:
    """A deployment with ``build``: step ``build`` on the server's Engine, then the steps
    of any deployment; the app's old built images go once it is final."""

    @staticmethod
    def build_job(rig: Rig) -> Job:
        build = BuildSpec(git=GitSource(url="https://git.example.com/app.git", ref="main"))
        return rig.job(image="berth/web:0123456789ab", build=build)

    @staticmethod
    def old_builds(runtime: FakeRuntime, count: int) -> list[str]:
        """``count`` images built before, oldest first; their tags."""
        tags = [f"berth/web:{n:012x}" for n in range(count)]
        for n, tag in enumerate(tags):
            runtime.built.insert(0, BuiltImage(id=f"sha256:{n:064x}", tags=(tag,), created=-n))
        return tags

    async def test_old_built_images_go_after_the_deployment_is_final(self, rig: Rig) -> None:
        """Pruning the app's old built images is housekeeping: the deployment is final
        (succeeded) before it starts, and a prune that never ends holds nothing up."""
        rig.runtime.hangs.add("built_images")
        task = asyncio.create_task(rig.run(self.build_job(rig)))
        for _ in range(500):  # the fakes answer at once: ends long before the bound
            if rig.jobs.finished or task.done():
                break
            await asyncio.sleep(0.01)
        assert [state for state, _, _ in rig.jobs.finished] == [DeploymentState.SUCCEEDED]
        assert ("built_images", "berth/web") in rig.runtime.calls
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert [state for state, _, _ in rig.jobs.finished] == [DeploymentState.SUCCEEDED]

    async def test_images_beyond_the_newest_builds_are_untagged(self, rig: Rig) -> None:
        """After a build deploy, the app keeps the images of its ``BUILT_IMAGES_KEPT``
        newest builds (this one's among them); older tags are removed."""
        old = self.old_builds(rig.runtime, BUILT_IMAGES_KEPT + 1)
        assert await rig.run(self.build_job(rig)) is DeploymentState.SUCCEEDED
        assert sorted(rig.runtime.untagged) == old[:2]
        assert "berth/web:0123456789ab" in {t for i in rig.runtime.built for t in i.tags}


# --- the monitor -----------------------------------------------------------------------


@dataclass
class Watch:
    """MonitorServers over a fleet and a gateway of fakes."""

    fleet: FakeFleet = field(default_factory=FakeFleet)
    gateway: FakeGateway = field(default_factory=FakeGateway)
    clock: FakeClock = field(default_factory=FakeClock)

    def add(self, status: ServerStatus = ServerStatus.OFFLINE, **runtime: Any) -> Server:
        server = a_server(status, name=f"srv-{uuid4().hex[:6]}")
        self.fleet.by_id[server.id] = server
        self.gateway.runtime(server.id, **runtime)
        return server

    async def run(self, seconds: float = 1.0) -> None:
        await MonitorServers(self.fleet, self.gateway, self.clock, timeout=seconds)()

    def now(self, server: Server) -> Server:
        return self.fleet.by_id[server.id]

    async def failing(self, failure: Exception) -> Server:
        """An online server that ``failure`` keeps berth from reaching, after one pass."""
        server = self.add(ServerStatus.ONLINE)
        self.gateway.failures[server.id] = failure
        await self.run()
        return server


@pytest.fixture
def watch() -> Watch:
    return Watch()


class TestMonitorServers:
    async def test_reachable_server_is_online_with_facts_and_snapshot(self, watch: Watch) -> None:
        """A reachable server is recorded online with its facts and a snapshot of its containers."""
        facts = ServerFacts(os="Ubuntu 24.04", arch="aarch64", docker_version="27.3.1", cpus=4)
        server = watch.add(facts=facts)
        watch.gateway.runtimes[server.id].add("db", host_port=5432)
        at = watch.clock.advance(30)
        await watch.run()
        seen = watch.now(server)
        assert (seen.status, seen.status_detail, seen.facts) == (ServerStatus.ONLINE, None, facts)
        assert seen.last_seen_at == at
        snapshot = watch.fleet.snapshots[server.id]
        assert snapshot.observed_at == at
        assert [c.name for c in snapshot.containers] == ["db"]
        assert watch.gateway.disconnected == []

    async def test_unreachable_server_is_offline_with_the_reason(self, watch: Watch) -> None:
        """An unreachable server is recorded offline with why, and its connection dropped."""
        server = await watch.failing(ServerUnreachable("ssh: Connection timed out"))
        seen = watch.now(server)
        assert seen.status is ServerStatus.OFFLINE
        assert seen.status_detail == "Unreachable: ssh: Connection timed out"
        assert seen.last_seen_at is None
        assert watch.gateway.disconnected == [server.id]
        assert server.id not in watch.fleet.snapshots

    async def test_host_key_mismatch_has_its_own_status(self, watch: Watch) -> None:
        """A server presenting another host key is host_key_mismatch with a host-key detail."""
        server = await watch.failing(HostKeyMismatch("presented ssh-ed25519 AAAAother"))
        seen = watch.now(server)
        assert seen.status is ServerStatus.HOST_KEY_MISMATCH
        assert seen.status_detail is not None
        assert seen.status_detail.startswith("Host key mismatch: refusing to connect")
        assert watch.gateway.disconnected == [server.id]

    async def test_host_key_mismatch_records_the_offered_key_and_both_fingerprints(
        self, watch: Watch
    ) -> None:
        """The offered key is recorded; the detail names the pinned and offered fingerprints."""
        pinned, offered = _KEY_A, _KEY_B
        server = watch.add(ServerStatus.ONLINE)
        watch.fleet.by_id[server.id] = msgspec.structs.replace(server, host_keys=(pinned,))
        watch.gateway.failures[server.id] = HostKeyMismatch("changed", offered_key=offered)
        await watch.run()
        seen = watch.now(server)
        assert seen.status is ServerStatus.HOST_KEY_MISMATCH
        assert seen.offered_host_key == offered
        assert seen.status_detail is not None
        assert host_key_fingerprint(pinned) in seen.status_detail
        assert host_key_fingerprint(offered) in seen.status_detail

    async def test_a_re_pin_during_the_check_is_not_undone(self, watch: Watch) -> None:
        """A mismatch seen while the offered key was being pinned writes nothing."""
        server = watch.add(ServerStatus.OFFLINE)
        watch.fleet.credentials_by_id[server.id] = SshCredentials(
            private_key="k", host_keys=(_KEY_B,)
        )
        watch.gateway.failures[server.id] = HostKeyMismatch("changed", offered_key=_KEY_B)
        await watch.run()
        assert watch.now(server).status is ServerStatus.OFFLINE
        assert watch.fleet.statuses == []

    async def test_the_pinned_key_answering_again_clears_the_offered_key(
        self, watch: Watch
    ) -> None:
        """A mismatch server that answers with its pinned key again is online, with no
        offered key left."""
        server = await watch.failing(HostKeyMismatch("changed", offered_key=_KEY_B))
        del watch.gateway.failures[server.id]
        await watch.run()
        seen = watch.now(server)
        assert seen.status is ServerStatus.ONLINE
        assert seen.offered_host_key is None

    async def test_docker_refusing_is_offline(self, watch: Watch) -> None:
        """A server whose Docker refuses is offline, quoting Docker."""
        server = watch.add(ServerStatus.ONLINE)
        watch.gateway.runtimes[server.id].failures["facts"] = "Cannot connect to the Docker daemon"
        await watch.run()
        assert watch.now(server).status_detail == "Unreachable: Cannot connect to the Docker daemon"

    async def test_silent_server_is_offline_after_the_timeout(self, watch: Watch) -> None:
        """A server that never answers is offline after the monitor's timeout."""
        server = watch.add(ServerStatus.ONLINE)
        watch.gateway.runtimes[server.id].hangs.add("facts")
        await watch.run(seconds=0.05)
        assert watch.now(server).status_detail == "Unreachable: No answer in time."

    async def test_one_failing_server_does_not_stop_the_others(self, watch: Watch) -> None:
        """Each server is checked on its own: failures elsewhere do not hide a healthy one."""
        gone, refusing, good = watch.add(), watch.add(), watch.add()
        watch.gateway.failures[gone.id] = ServerUnreachable("No route to host")
        watch.gateway.runtimes[refusing.id].failures["list_containers"] = "daemon is restarting"
        await watch.run()
        assert watch.now(gone).status is ServerStatus.OFFLINE
        assert watch.now(refusing).status is ServerStatus.OFFLINE
        assert watch.now(good).status is ServerStatus.ONLINE
        assert set(watch.fleet.snapshots) == {good.id}


# --- the local server --------------------------------------------------------------------


class TestEnsureLocalServer:
    async def test_nothing_without_users(self, app: App) -> None:
        """Before anyone signed up there is no one to give the machine to."""
        assert await EnsureLocalServer(app.uow, app.clock)() is None
        assert app.store.state.servers == {}

    async def test_first_user_gets_a_local_server(self, app: App, make_user: MakeUser) -> None:
        """The first user gets a server named local on the local transport."""
        first = await make_user()
        await make_user()
        server = await EnsureLocalServer(app.uow, app.clock)()
        assert server is not None
        assert (server.owner_id, server.name, server.transport) == (
            first.id,
            "local",
            Transport.LOCAL,
        )
        assert server.status is ServerStatus.OFFLINE
        assert [s.id for s in await app.bus.handle(c.ListServers(), first)] == [server.id]

    async def test_the_named_owner_gets_it_not_the_first_account(self) -> None:
        """With ``BERTH_LOCAL_OWNER`` the named account gets this machine as soon as it
        exists (its creation registers it); the first account never does."""
        app = build_app(local_managed=True, local_owner="Ops@Example.com ")
        password = "correct horse battery staple"
        first = await app.bus.handle(c.CreateUser(email=unique_email(), password=password))
        assert app.store.state.servers == {}
        owner = await app.bus.handle(c.CreateUser(email="ops@example.com", password=password))
        [server] = await app.bus.handle(c.ListServers(), owner)
        assert (server.name, server.transport) == ("local", Transport.LOCAL)
        assert await app.bus.handle(c.ListServers(), first) == []

    async def test_it_is_never_given_to_a_second_account(
        self,
        app: App,
        make_user: MakeUser,
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """Held by the first account already, this machine is not registered for the one
        ``BERTH_LOCAL_OWNER`` names later: a warning says so and how to hand it over."""
        warning = ThrottledWarning("local_server_held_by_another_account")  # not yet said
        monkeypatch.setattr(servers_use_cases, "_held_by_another", warning)
        first = await make_user()
        held = await EnsureLocalServer(app.uow, app.clock)()
        assert held is not None
        named = await make_user()
        ensure = EnsureLocalServer(app.uow, app.clock, owner_email=named.email)
        assert await ensure() is None
        assert await app.bus.handle(c.ListServers(), named) == []
        assert [s.id for s in await app.bus.handle(c.ListServers(), first)] == [held.id]
        assert "local_server_held_by_another_account" in capsys.readouterr().out
        assert warning.warn() is False  # it was said just now

    async def test_is_idempotent(self, app: App, make_user: MakeUser) -> None:
        """Calling it again returns the same server and writes nothing."""
        owner = await make_user()
        ensure = EnsureLocalServer(app.uow, app.clock)
        created = await ensure()
        commits = app.store.commits
        again = await ensure()
        assert again is not None
        assert created is not None
        assert again.id == created.id
        assert app.store.commits == commits
        assert len(await app.bus.handle(c.ListServers(), owner)) == 1


# --- an installation's logs and removal ---------------------------------------------------


async def installed(app: App, owner: User, server: Server, name: str = "web") -> Installation:
    cmd = parse_deploy({"server_id": str(server.id), "name": name, "image": "nginx:1.27"})
    return (await app.bus.handle(cmd, owner)).installation


def labelled(installation: Installation) -> dict[str, str]:
    return {"berth.managed": "true", "berth.installation": str(installation.id)}


class TestInstallationLogs:
    async def test_last_lines_of_the_running_container(
        self, app: App, owner: User, server: Server
    ) -> None:
        """The logs are the last `tail` lines of the installation's running container."""
        inst = await installed(app, owner, server)
        runtime = app.gateway.runtime(server.id, log_lines=[f"line {i}" for i in range(10)])
        runtime.add("web-old", labelled(inst), running=False)
        current = runtime.add("web", labelled(inst))
        logs = await app.bus.handle(c.InstallationLogs(installation_id=inst.id, tail=3), owner)
        assert (logs.installation_id, logs.container_id) == (inst.id, current.id)
        assert logs.lines == ["line 7", "line 8", "line 9"]

    async def test_env_values_in_the_output_are_redacted(
        self, app: App, owner: User, server: Server
    ) -> None:
        """An app printing its secrets shows ``[redacted]`` in its logs: the env of the
        deployment that made the container (its label), short values excepted."""
        env = {"TOKEN": "s3cr3t-value-42", "MODE": "prod"}
        cmd = parse_deploy(
            {"server_id": str(server.id), "name": "web", "image": "nginx:1.27", "env": env}
        )
        result = await app.bus.handle(cmd, owner)
        runtime = app.gateway.runtime(
            server.id, log_lines=["token is s3cr3t-value-42!", "mode prod", "plain line"]
        )
        labels = {**labelled(result.installation), "berth.deployment": str(result.deployment.id)}
        runtime.add("web", labels)
        logs = await app.bus.handle(
            c.InstallationLogs(installation_id=result.installation.id, tail=10), owner
        )
        assert logs.lines == ["token is [redacted]!", "mode prod", "plain line"]

    async def test_no_container_means_no_lines(self, app: App, owner: User, server: Server) -> None:
        """An installation without a container has no logs and no container id."""
        inst = await installed(app, owner, server)
        app.gateway.runtime(server.id).add("stranger", {"berth.installation": str(uuid4())})
        logs = await app.bus.handle(c.InstallationLogs(installation_id=inst.id, tail=100), owner)
        assert (logs.container_id, logs.lines) == (None, [])

    @pytest.mark.parametrize(("tail", "asked"), [(1, "1"), (100, "100"), (c.TAIL_MAX, "5000")])
    async def test_the_tail_reaches_docker_as_given(
        self, app: App, owner: User, server: Server, tail: int, asked: str
    ) -> None:
        """The tail asked of Docker is the command's, 1..5000 (a command outside that is
        never built: ``test_bus.TestLimits``)."""
        inst = await installed(app, owner, server)
        runtime = app.gateway.runtime(server.id)
        current = runtime.add("web", labelled(inst))
        await app.bus.handle(c.InstallationLogs(installation_id=inst.id, tail=tail), owner)
        assert ("logs", current.id, asked) in runtime.calls

    async def test_other_owners_installation_is_not_found(
        self, app: App, make_user: MakeUser, make_server: MakeServer
    ) -> None:
        """Another user's installation is NotFound, like a random id, and no server is contacted."""
        alice, bob = await make_user(), await make_user()
        inst = await installed(app, bob, await make_server(bob))
        await assert_hidden(
            app, alice, lambda i: c.InstallationLogs(installation_id=i, tail=10), inst.id
        )
        assert app.gateway.calls == []


class TestRemoveInstallation:
    async def test_an_app_that_never_ran_is_removed_while_its_server_is_unreachable(
        self, app: App, owner: User, server: Server
    ) -> None:
        """Deployed only while its server was unreachable (still queued), the app has
        nothing on the server: it is removed, its queued deployment canceled."""
        inst = await installed(app, owner, server)
        await app.bus.handle(c.RemoveInstallation(installation_id=inst.id), owner)
        _, removed = await app.bus.handle(c.GetInstallation(installation_id=inst.id), owner)
        assert removed.status is InstallationStatus.REMOVED
        assert removed.last_deployment is not None
        assert removed.last_deployment.state is DeploymentState.CANCELED

    async def test_an_app_that_ran_is_not_removed_while_its_server_is_unreachable(
        self, app: App, owner: User, server: Server
    ) -> None:
        """Once a deployment of it started, its containers may be on the server: an
        unreachable server removes nothing (ServerUnreachable)."""
        inst = await installed(app, owner, server)
        deployment = inst.last_deployment
        assert deployment is not None
        rows = app.store.state.deployments
        row = rows[deployment.id]
        started = msgspec.structs.replace(row.deployment, started_at=app.clock.now())
        rows[deployment.id] = dataclasses.replace(row, deployment=started)
        with pytest.raises(ServerUnreachable):
            await app.bus.handle(c.RemoveInstallation(installation_id=inst.id), owner)
        _, kept = await app.bus.handle(c.GetInstallation(installation_id=inst.id), owner)
        assert kept.status is not InstallationStatus.REMOVED

    async def test_containers_are_removed_and_the_history_kept(
        self, app: App, owner: User, server: Server
    ) -> None:
        """Its containers go from the server; the installation is marked removed, its
        deployments stay readable and it leaves the server's list."""
        inst = await installed(app, owner, server)
        runtime = app.gateway.runtime(server.id)
        ours = [runtime.add("web", labelled(inst)), runtime.add("web-old", labelled(inst))]
        other = runtime.add("db", {"berth.installation": str(uuid4())})
        await app.bus.handle(c.RemoveInstallation(installation_id=inst.id), owner)
        assert sorted(runtime.removed()) == sorted(c.id for c in ours)
        assert list(runtime.containers) == [other.id]
        _, removed = await app.bus.handle(c.GetInstallation(installation_id=inst.id), owner)
        assert removed.status is InstallationStatus.REMOVED
        assert removed.removed_at is not None
        assert removed.host_port is None
        assert inst.last_deployment is not None
        kept = await app.bus.handle(c.GetDeployment(deployment_id=inst.last_deployment.id), owner)
        assert kept.installation_id == inst.id
        listed = await app.bus.handle(c.ListInstallations(server_id=server.id), owner)
        assert inst.id not in [i.id for i in listed.installations]

    async def test_its_port_holders_go_with_it(self, app: App, owner: User, server: Server) -> None:
        """Its port holders (``berth.holder`` naming it) go after its containers; another
        app's stays."""
        inst = await installed(app, owner, server)
        runtime = app.gateway.runtime(server.id)
        app_container = runtime.add("web", labelled(inst))
        holder = runtime.add("web.port-8080-8080", {"berth.holder": str(inst.id)})
        other = runtime.add("db.port-5432-5432", {"berth.holder": str(uuid4())})
        await app.bus.handle(c.RemoveInstallation(installation_id=inst.id), owner)
        assert runtime.removed() == [app_container.id, holder.id]
        assert list(runtime.containers) == [other.id]

    async def test_docker_refusing_keeps_the_record(
        self, app: App, owner: User, server: Server
    ) -> None:
        """If Docker refuses to remove a container, the installation is kept."""
        inst = await installed(app, owner, server)
        runtime = app.gateway.runtime(server.id)
        runtime.add("web", labelled(inst))
        runtime.failures["remove"] = "removal of container web is already in progress"
        with pytest.raises(RuntimeFailure):
            await app.bus.handle(c.RemoveInstallation(installation_id=inst.id), owner)
        assert (await app.bus.handle(c.GetInstallation(installation_id=inst.id), owner))[
            1
        ].id == inst.id

    async def test_running_deployment_conflicts(
        self, app: App, owner: User, server: Server, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A running deployment that its worker does not end once asked to stop (within
        the wait) is a Conflict; nothing is touched."""
        monkeypatch.setattr(installations, "CANCEL_WAIT", 0.05)
        cmd = parse_deploy({"server_id": str(server.id), "name": "web", "image": "nginx:1.27"})
        result = await app.bus.handle(cmd, owner)
        app.store.mark_running(result.deployment.id, app.clock.advance(1))
        runtime = app.gateway.runtime(server.id)
        container = runtime.add("web", labelled(result.installation))
        with pytest.raises(Conflict, match="running"):
            await app.bus.handle(
                c.RemoveInstallation(installation_id=result.installation.id), owner
            )
        assert result.deployment.id in app.store.cancel_requests
        assert container.id in runtime.containers
        assert app.gateway.calls == []

    async def test_running_deployment_is_canceled_first(
        self, app: App, owner: User, server: Server
    ) -> None:
        """A running deployment is asked to stop first; once its worker ended it, the
        installation is removed."""
        cmd = parse_deploy({"server_id": str(server.id), "name": "web", "image": "nginx:1.27"})
        result = await app.bus.handle(cmd, owner)
        app.store.mark_running(result.deployment.id, app.clock.advance(1))
        runtime = app.gateway.runtime(server.id)
        container = runtime.add("web", labelled(result.installation))

        async def worker() -> None:  # ends the run canceled once asked, as a worker does
            for _ in range(500):
                if result.deployment.id in app.store.cancel_requests:
                    await finish(app, owner, result.deployment.id, DeploymentState.CANCELED)
                    return
                await asyncio.sleep(0.01)

        stopping = asyncio.create_task(worker())
        remove = c.RemoveInstallation(installation_id=result.installation.id)
        await asyncio.wait_for(app.bus.handle(remove, owner), 5)
        await stopping
        removed = app.store.state.installations[result.installation.id].installation
        assert removed.removed_at is not None
        assert container.id not in runtime.containers
        ended = app.store.state.deployments[result.deployment.id].deployment
        assert ended.state is DeploymentState.CANCELED

    async def test_queued_deployment_does_not_block(
        self, app: App, owner: User, server: Server
    ) -> None:
        """A deployment still queued does not prevent removal: it is canceled, and a
        second removal is NotFound."""
        inst = await installed(app, owner, server)
        app.gateway.runtime(server.id)
        await app.bus.handle(c.RemoveInstallation(installation_id=inst.id), owner)
        assert inst.last_deployment is not None
        queued = await app.bus.handle(c.GetDeployment(deployment_id=inst.last_deployment.id), owner)
        assert queued.state is DeploymentState.CANCELED
        assert "removed" in (queued.error or "")
        with pytest.raises(NotFound):
            await app.bus.handle(c.RemoveInstallation(installation_id=inst.id), owner)

    async def test_other_owners_installation_is_not_found(
        self, app: App, make_user: MakeUser, make_server: MakeServer
    ) -> None:
        """Removing another user's installation is NotFound and removes nothing."""
        alice, bob = await make_user(), await make_user()
        theirs = await make_server(bob)
        inst = await installed(app, bob, theirs)
        runtime = app.gateway.runtime(theirs.id)
        runtime.add("web", labelled(inst))
        with pytest.raises(NotFound):
            await app.bus.handle(c.RemoveInstallation(installation_id=inst.id), alice)
        assert runtime.removed() == []
        assert (await app.bus.handle(c.GetInstallation(installation_id=inst.id), bob))[
            1
        ].id == inst.id
