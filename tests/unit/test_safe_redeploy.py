"""Revisions on the run side, against fakes of the server: a failed or canceled redeploy
puts the previous revision back, the image a deployment ran, health paths, store
outages and runs taken over from a worker that stopped."""

from __future__ import annotations

import asyncio
import time
from typing import Any
from uuid import uuid4

import msgspec
import pytest
from berth.core.models import ContainerSpec, DeploymentState, Job
from berth.core.use_cases import StepTimeouts
from berth.core.use_cases.container_spec import container_spec, labels_for
from berth.core.use_cases.holders import look_for_holders, prepare_holder
from berth.core.use_cases.strategies import temporary_name
from fakes import FakeJobQueue, Health
from test_run_deployment import Rig


@pytest.fixture
def rig() -> Rig:
    return Rig()


def revised(job: Job, **spec: Any) -> Job:
    """``job`` with spec fields (and ``image_id``/``rollback_of``/``current``) changed."""
    deployment = job.deployment
    fields = {k: spec.pop(k) for k in ("image_id", "rollback_of") if k in spec}
    current = spec.pop("current", job.current_deployment_id)
    deployment = msgspec.structs.replace(
        deployment, spec=msgspec.structs.replace(deployment.spec, **spec), **fields
    )
    return msgspec.structs.replace(job, deployment=deployment, current_deployment_id=current)


def serving_revision(rig: Rig, job: Job, port: int = 8080) -> tuple[Job, str]:
    """Put the installation's current revision on the server (running on ``port``)."""
    current = uuid4()
    old = rig.runtime.add(
        job.container_name,
        {
            "berth.managed": "true",
            "berth.installation": str(job.installation_id),
            "berth.deployment": str(current),
        },
        host_port=port,
    )
    return revised(job, current=current), old.id


async def wait_for_step(rig: Rig, step: str) -> None:
    for _ in range(5000):  # bounded: the run gets there within milliseconds
        if step in rig.jobs.steps:
            return
        await asyncio.sleep(0.001)


class TestFailedRedeployRestores:
    async def test_unhealthy_new_revision_puts_the_old_one_back(self, rig: Rig) -> None:
        """A new container that never answers is removed; the old one is started again,
        checked, and the deployment fails saying the previous revision serves."""
        job, old = serving_revision(rig, rig.job())
        rig.runtime.health = Health(answer_after=None)
        await rig.run(job)
        state, error = rig.outcome
        assert state is DeploymentState.FAILED
        assert error == "health: Port 8080 did not answer within 0.3 s."
        assert list(rig.runtime.containers) == [old]
        assert rig.runtime.containers[old].running
        assert rig.runtime.calls.index(("stop", old)) < rig.runtime.calls.index(("start", old))
        assert rig.jobs.serving == [True]
        assert rig.jobs.host_ports[-1] == 8080
        revision = job.current_deployment_id
        assert (
            f"rolled back to revision {revision}: the app is serving the previous version."
            in rig.jobs.events
        )

    @pytest.mark.parametrize(
        ("answers", "serving"),
        [((None, "TCP", None, "TCP", None), False), ((None, "TCP", "TCP"), True)],
        ids=["silent once at a time", "silent twice in a row"],
    )
    async def test_the_old_one_put_back_answers_by_the_health_rule(
        self, rig: Rig, answers: tuple[str | None, ...], serving: bool
    ) -> None:
        """The old container started again serves only if it answers as a new one must: an
        answer that is no HTTP on two probes in a row, not once among refusals (a late
        userland proxy)."""
        job, old = serving_revision(rig, rig.job())
        rig.runtime.health = Health(answer_after=None)
        rig.runtime.health_of[old] = Health(answers=answers)
        await rig.run(job)
        assert rig.outcome[0] is DeploymentState.FAILED
        assert rig.jobs.serving == [serving]

    async def test_port_taken_at_start_puts_the_old_one_back(self, rig: Rig) -> None:
        """Docker refusing to start the new one (its port held elsewhere) restores the old."""
        job, old = serving_revision(rig, rig.job())
        rig.runtime.refused_ports.add(8080)
        await rig.run(job)
        state, error = rig.outcome
        assert state is DeploymentState.FAILED
        assert error is not None
        assert "port is already allocated" in error
        assert list(rig.runtime.containers) == [old]
        assert rig.runtime.containers[old].running
        assert rig.jobs.serving == [True]

    async def test_nothing_to_restore_forgets_the_current_revision(self, rig: Rig) -> None:
        """A first deployment that fails has no previous revision: ``serving`` is false."""
        rig.runtime.health = Health(answer_after=None)
        await rig.run(rig.job())
        assert rig.outcome[0] is DeploymentState.FAILED
        assert rig.jobs.serving == [False]
        assert rig.runtime.containers == {}

    async def test_old_revision_that_does_not_come_back_is_reported(self, rig: Rig) -> None:
        """If the old container cannot be started again, the event says nothing serves and
        ``serving`` is false."""
        job, old = serving_revision(rig, rig.job())
        rig.runtime.health = Health(answer_after=None)
        rig.runtime.unstartable.add(old)
        await rig.run(job)
        assert rig.outcome[0] is DeploymentState.FAILED
        assert rig.jobs.serving == [False]
        assert any(e.startswith("Could not put back revision") for e in rig.jobs.events)

    async def test_failure_before_the_server_is_touched_leaves_serving_unknown(
        self, rig: Rig
    ) -> None:
        """A failed pull never looked at the containers: ``serving`` is None (as it was)."""
        job, old = serving_revision(rig, rig.job())
        rig.runtime.failures["pull"] = "manifest unknown"
        await rig.run(job)
        assert rig.jobs.serving == [None]
        assert rig.runtime.containers[old].running
        assert "stop" not in rig.runtime.ops()

    async def test_success_reports_no_serving_flag(self, rig: Rig) -> None:
        """A succeeded deployment is the serving revision itself: no flag is passed."""
        job, _ = serving_revision(rig, rig.job())
        await rig.run(job)
        assert rig.outcome == (DeploymentState.SUCCEEDED, None)
        assert rig.jobs.serving == [None]


class TestCancel:
    async def test_cancel_stops_the_run_and_restores_the_old_revision(self) -> None:
        """A cancel requested while the new container is checked ends the run within about
        a second: ``canceled``, "canceled on request", the old revision serving again."""
        rig = Rig(timeouts=StepTimeouts(pull=5, create=5, start=5, health=30))
        job, old = serving_revision(rig, rig.job())
        rig.runtime.health = Health(answer_after=None)
        task = asyncio.create_task(rig.run(job))
        await wait_for_step(rig, "health")
        asked = time.monotonic()
        rig.jobs.cancel = True
        state = await asyncio.wait_for(task, timeout=5)
        assert time.monotonic() - asked < 2.0
        assert state is DeploymentState.CANCELED
        assert rig.outcome == (DeploymentState.CANCELED, "canceled on request")
        assert list(rig.runtime.containers) == [old]
        assert rig.runtime.containers[old].running
        assert rig.jobs.serving == [True]
        assert any(e.startswith("rolled back to revision") for e in rig.jobs.events)
        assert rig.done == [(job, DeploymentState.CANCELED)]

    async def test_no_cancel_is_checked_often(self) -> None:
        """The run asks whether it was canceled while it waits, not only at lease renewals."""
        rig = Rig(timeouts=StepTimeouts(health=1.2))
        rig.runtime.health = Health(answer_after=None)
        await rig.run(rig.job())
        assert rig.jobs.cancel_checks >= 2
        assert rig.outcome[0] is DeploymentState.FAILED


class TestImageId:
    async def test_image_id_is_recorded(self, rig: Rig) -> None:
        """The id of the image the container is created from is recorded on the deployment."""
        rig.runtime.images.add("nginx:1.27")
        rig.runtime.image_ids["nginx:1.27"] = "sha256:" + "a" * 64
        await rig.run(rig.job())
        assert rig.jobs.image_ids == ["sha256:" + "a" * 64]

    async def test_rollback_runs_the_tag_while_it_names_the_same_image(self, rig: Rig) -> None:
        """A revision whose tag still names its image id is created from the tag."""
        rig.runtime.images.add("nginx:1.27")
        rig.runtime.image_ids["nginx:1.27"] = "sha256:" + "b" * 64
        job = revised(rig.job(), image_id="sha256:" + "b" * 64, rollback_of=uuid4())
        await rig.run(job)
        assert rig.outcome == (DeploymentState.SUCCEEDED, None)
        assert rig.runtime.specs[rig.runtime.created[0]].image == "nginx:1.27"
        assert "pull" not in rig.runtime.ops()

    async def test_rollback_runs_the_image_id_when_the_tag_moved(self, rig: Rig) -> None:
        """A tag that now names another image: the revision's image id is run instead."""
        rig.runtime.images.update({"nginx:1.27", "nginx:old-build"})
        old_id = "sha256:" + "c" * 64
        rig.runtime.image_ids["nginx:old-build"] = old_id  # still on the server
        rig.runtime.image_ids["nginx:1.27"] = "sha256:" + "d" * 64
        job = revised(rig.job(), image_id=old_id, rollback_of=uuid4())
        await rig.run(job)
        assert rig.outcome == (DeploymentState.SUCCEEDED, None)
        assert rig.runtime.specs[rig.runtime.created[0]].image == old_id

    async def test_rollback_whose_image_is_gone_fails_at_pull(self, rig: Rig) -> None:
        """Neither the id nor the tag (even pulled) is that image: failed at pull, saying so."""
        rig.runtime.image_ids["nginx:1.27"] = "sha256:" + "e" * 64
        earlier = uuid4()
        job = revised(rig.job(), image_id="sha256:" + "f" * 64, rollback_of=earlier)
        await rig.run(job)
        assert rig.outcome == (
            DeploymentState.FAILED,
            f"pull: the image of revision {earlier} (sha256:ffffffffffff) is no longer on the "
            "server and nginx:1.27 now names another image",
        )
        assert "create" not in rig.runtime.ops()


class TestHealthPath:
    async def test_health_path_must_answer_2xx_or_3xx(self, rig: Rig) -> None:
        """With a health path, an HTTP 500 is not healthy: failed at health, naming it."""
        rig.runtime.health = Health(status=500)
        await rig.run(revised(rig.job(), health_path="/healthz"))
        assert rig.outcome == (
            DeploymentState.FAILED,
            "health: GET /healthz on port 8080 did not answer 2xx or 3xx within 0.3 s "
            "(last answer: HTTP 500).",
        )

    async def test_health_path_answering_succeeds_and_is_the_probed_path(self, rig: Rig) -> None:
        """A health path answering 302 is healthy; the probe asked for that path."""
        rig.runtime.health = Health(status=302)
        await rig.run(revised(rig.job(), health_path="/ready?full=1"))
        assert rig.outcome == (DeploymentState.SUCCEEDED, None)
        assert "GET /ready?full=1 on port 8080 answered: HTTP 302." in rig.jobs.events

    async def test_without_health_path_any_answer_will_do(self, rig: Rig) -> None:
        """Without a health path, even an HTTP 500 means the port answers."""
        rig.runtime.health = Health(status=500)
        await rig.run(rig.job())
        assert rig.outcome == (DeploymentState.SUCCEEDED, None)


class TestStoreOutage:
    async def test_store_writes_are_retried(self, rig: Rig) -> None:
        """Store writes that fail for a moment are tried again; the deployment succeeds."""
        rig.jobs.failing_writes = 3
        await rig.run(rig.job())
        assert rig.outcome == (DeploymentState.SUCCEEDED, None)
        assert rig.jobs.steps[0] == "pull"


class TestTakeover:
    async def test_container_of_this_deployment_is_reused(self, rig: Rig) -> None:
        """A run taken over finds the container an earlier attempt created and carries on
        with it: nothing is created again."""
        job, old = serving_revision(rig, rig.job())
        job = msgspec.structs.replace(
            job, deployment=msgspec.structs.replace(job.deployment, attempts=2)
        )
        # What the earlier attempt made before it died: the port holder, and its container
        # joining it.
        docker = rig.runtime
        holders = await prepare_holder(
            job, docker, labels_for(job), await look_for_holders(job, docker)
        )
        image = job.deployment.spec.image
        earlier = await docker.create(
            container_spec(job, temporary_name(job), image, joins=holders.name)
        )
        await rig.run(job)
        assert rig.outcome == (DeploymentState.SUCCEEDED, None)
        assert [op for op in docker.ops() if op == "create"] == ["create"]  # the earlier one
        assert [c.id for c in docker.apps()] == [earlier]
        assert docker.containers[earlier].name == "web"
        assert docker.containers[earlier].joins == holders.mine.id
        assert old in docker.removed()

    async def test_a_container_joining_a_holder_since_removed_is_made_again(self, rig: Rig) -> None:
        """An attempt cut off while Docker made its container (the create answered, the
        run was cancelled: its lease ran out) drops the holder it made, which that container
        joins. The attempt taking over makes a new holder and must not start the container
        left joining the old one (Docker: ``No such container``): it removes it and makes
        the container again."""
        job = rig.job()
        docker = rig.runtime
        create = docker.create

        async def made_then_cut_off(spec: ContainerSpec) -> str:
            await create(spec)
            raise asyncio.CancelledError

        docker.create = made_then_cut_off  # type: ignore[method-assign]
        with pytest.raises(asyncio.CancelledError):
            await rig.run(job)
        docker.create = create  # type: ignore[method-assign]
        [stale] = docker.apps()
        assert stale.joins is not None
        assert stale.joins not in docker.containers  # the holder it joins was dropped
        job = msgspec.structs.replace(
            job, deployment=msgspec.structs.replace(job.deployment, attempts=2)
        )
        rig.jobs = FakeJobQueue(fleet=rig.fleet)  # a fresh queue: it holds one lease
        await rig.run(job)
        assert rig.outcome == (DeploymentState.SUCCEEDED, None)
        [holder] = [c for c in docker.containers.values() if c.id in docker.holders]
        [app] = docker.apps()
        assert app.id != stale.id
        assert stale.id in docker.removed()
        assert app.joins == holder.id
        assert app.running
        assert any("joins a port holder that is gone" in e for e in rig.jobs.events)

    async def test_leftover_of_another_deployment_is_removed(self, rig: Rig) -> None:
        """A container of another deployment that never became the current revision (a run
        that died) is removed; the current revision's is the one stopped and replaced."""
        job, old = serving_revision(rig, rig.job())
        leftover = rig.runtime.add(
            f"web-{uuid4().hex[:8]}",
            {"berth.installation": str(job.installation_id), "berth.deployment": str(uuid4())},
            host_port=8080,
        )
        await rig.run(job)
        assert rig.outcome == (DeploymentState.SUCCEEDED, None)
        removed = rig.runtime.removed()
        assert removed.index(leftover.id) < rig.runtime.ops().index("create")
        assert ("stop", old) in rig.runtime.calls
        assert ("stop", leftover.id) not in rig.runtime.calls


class TestShortGap:
    async def test_the_new_container_starts_the_moment_the_old_one_stopped(self, rig: Rig) -> None:
        """A port app's redeploy asks Docker to start the new container right after the
        old one stopped: no other call to the server and no store write in between (the
        app is down meanwhile); the stop is still an event, written after the start."""
        job, old = serving_revision(rig, rig.job())
        writes_at: dict[str, int] = {}
        real_stop, real_start = rig.runtime.stop, rig.runtime.start

        async def stop(container_id: str, grace: float = 10.0) -> None:
            await real_stop(container_id, grace)
            writes_at["stop"] = len(rig.jobs.writes)

        async def start(container_id: str) -> None:
            writes_at.setdefault("start", len(rig.jobs.writes))
            await real_start(container_id)

        rig.runtime.stop = stop  # type: ignore[method-assign]
        rig.runtime.start = start  # type: ignore[method-assign]
        await rig.run(job)
        assert rig.outcome == (DeploymentState.SUCCEEDED, None)
        ops = rig.runtime.ops()
        assert ops[ops.index("stop") + 1] == "start"
        assert writes_at["start"] == writes_at["stop"]
        stopped = f"Stopped previous container {old[:12]} (kept until the new one answers)."
        assert stopped in rig.jobs.events

    async def test_a_first_deploy_starts_what_it_created_without_asking_first(
        self, rig: Rig
    ) -> None:
        """A container this attempt created is started without an inspect first (one
        round trip less on every deploy); only a container of an earlier attempt is
        looked at before it is started."""
        await rig.run(rig.job())
        assert rig.outcome == (DeploymentState.SUCCEEDED, None)
        ops = rig.runtime.ops()
        assert ops[ops.index("create") + 1] == "start"


@pytest.mark.parametrize("domain", [None, "app.example.com"])
async def test_every_container_name_is_deterministic(rig: Rig, domain: str | None) -> None:
    """Both strategies create a redeploy's new container as <name>-<deployment id[:8]>
    (the old one holds the name until it goes), then rename it."""
    job, _ = serving_revision(rig, rig.job(domain=domain))
    await rig.run(job)
    assert rig.outcome == (DeploymentState.SUCCEEDED, None)
    assert rig.runtime.calls[rig.runtime.ops().index("create")][1] == temporary_name(job)
    assert ("rename", rig.runtime.created[0], job.container_name) in rig.runtime.calls


@pytest.mark.parametrize("domain", [None, "app.example.com"])
async def test_a_first_deployment_creates_its_container_under_its_name(
    rig: Rig, domain: str | None
) -> None:
    """With no container of the installation on the server, both strategies create the
    new one under the installation's name at once: no rename after it answers."""
    job = rig.job(domain=domain)
    await rig.run(job)
    assert rig.outcome == (DeploymentState.SUCCEEDED, None)
    assert rig.runtime.calls[rig.runtime.ops().index("create")][1] == job.container_name
    assert "rename" not in rig.runtime.ops()
    [container] = rig.runtime.apps()
    assert container.name == job.container_name


class TestCancelDuringRestore:
    async def test_a_cancel_does_not_cut_the_restore_short(self, rig: Rig) -> None:
        """A cancel requested while the old revision is being put back waits for it: the
        deployment ends failed with the old one serving, not canceled half-way."""
        job, old = serving_revision(rig, rig.job())
        rig.runtime.health = Health(answer_after=None)
        real_start = rig.runtime.start

        async def slow_start(container_id: str) -> None:
            if container_id == old:
                rig.jobs.cancel = True
                await asyncio.sleep(0.8)  # longer than a cancel check
            await real_start(container_id)

        rig.runtime.start = slow_start  # type: ignore[method-assign]
        await rig.run(job)
        assert rig.outcome[0] is DeploymentState.FAILED
        assert rig.runtime.containers[old].running
        assert rig.jobs.serving == [True]

    async def test_shutdown_after_the_old_one_stopped_reports_it_not_serving(
        self, rig: Rig
    ) -> None:
        """Stopped from outside while the old revision is down and cannot come back: the
        interrupted deployment says nothing serves."""
        rig.timeouts = StepTimeouts(pull=5, create=5, start=5, health=30)
        job, old = serving_revision(rig, rig.job())
        rig.runtime.health = Health(answer_after=None)
        rig.runtime.unstartable.add(old)
        task = asyncio.create_task(rig.run(job))
        await wait_for_step(rig, "health")
        await rig.cancel(task)
        assert rig.jobs.serving == [False]


class TestTakeoverRestore:
    async def test_old_container_stopped_by_the_dead_attempt_is_put_back(self, rig: Rig) -> None:
        """Taken over after the dead attempt had stopped the old revision: when the new one
        fails, the old one is started again all the same."""
        job, old = serving_revision(rig, rig.job())
        job = msgspec.structs.replace(
            job, deployment=msgspec.structs.replace(job.deployment, attempts=2)
        )
        await rig.runtime.stop(old)  # what the first attempt did before it died
        rig.runtime.health = Health(answer_after=None)
        await rig.run(job)
        assert rig.outcome[0] is DeploymentState.FAILED
        assert rig.runtime.containers[old].running
        assert rig.jobs.serving == [True]
