"""Waiting for a deployment to end (``WaitForDeployment``, ``Waiters``): a deployment a
worker of this process runs is not read from the store again and again while it runs --
its end is told here -- while one queued, or run by a worker elsewhere, is."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

import msgspec
from berth.core import commands as c
from berth.core.models import Deployment, DeploymentState
from berth.core.use_cases import Waiters, WaitForDeployment
from fakes import FakeJobQueue
from test_run_deployment import a_job, a_server
from test_worker_loop import _announce_queued, _running, _until

JOB = a_job(a_server())


class Store:
    """The deployment as the store has it, and how often it was read."""

    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment
        self.reads = 0

    async def get(self, owner: Any, cmd: c.GetDeployment) -> Deployment:
        self.reads += 1
        return self.deployment

    def end(self) -> None:
        self.deployment = msgspec.structs.replace(self.deployment, state=DeploymentState.SUCCEEDED)


def waiting(store: Store, waiters: Waiters, seconds: float) -> asyncio.Task[Deployment]:
    wait = WaitForDeployment(store.get, waiters, poll=0.01, here_poll=30)  # type: ignore[arg-type]
    cmd = c.WaitForDeployment(deployment_id=store.deployment.id, seconds=seconds)
    return asyncio.create_task(wait(None, cmd))  # type: ignore[arg-type]  # the store ignores it


async def test_a_deployment_run_here_is_read_when_its_run_ends_not_meanwhile() -> None:
    """While a worker of this process runs it, the waiter reads the store once before and
    once when the run ends (a poll of 0.01 s would have read it about 20 times)."""
    store, waiters = Store(JOB.deployment), Waiters()
    with waiters.running(store.deployment.id):
        task = waiting(store, waiters, seconds=30)
        await asyncio.sleep(0.2)
        assert not task.done()
        assert store.reads == 1
        store.end()  # committed by the run, which then leaves
    done = await asyncio.wait_for(task, 5)
    assert done.state is DeploymentState.SUCCEEDED
    assert store.reads == 2


async def test_a_deployment_not_run_here_is_read_every_poll() -> None:
    """Queued, or run by a worker in another process: the store is read every ``poll``."""
    store, waiters = Store(JOB.deployment), Waiters()
    task = waiting(store, waiters, seconds=30)
    await _until(lambda: store.reads >= 5, "five reads")
    store.end()
    assert (await asyncio.wait_for(task, 5)).state is DeploymentState.SUCCEEDED


async def test_the_worker_tells_its_waiters_which_deployments_it_runs() -> None:
    """``Background`` runs each deployment inside ``Waiters.running``: a waiter on it reads
    the store no more while it runs, and at once when the run ends."""
    store, waiters = Store(JOB.deployment), Waiters()
    release = asyncio.Event()
    runs: list[UUID] = []

    async def run(job: Any) -> None:
        runs.append(job.deployment.id)
        await release.wait()
        store.end()

    queue = FakeJobQueue([JOB])
    async with _running(queue, run, waiters=waiters) as background:
        _announce_queued(background._bus, JOB)
        await _until(lambda: runs, "the run began")
        task = waiting(store, waiters, seconds=30)
        await asyncio.sleep(0.2)
        assert store.reads == 1
        release.set()
        assert (await asyncio.wait_for(task, 5)).state is DeploymentState.SUCCEEDED
        assert store.reads == 2
