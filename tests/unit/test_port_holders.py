"""A port app's holder (issue 24, shorter gaps): its program's bytes, the Docker
adapter's listing and disk usage without it, and the port strategy through it against
fakes of the server: redeploys keep it, a failure leaves the old revision serving
through it, a ``hostPort`` change makes a new one, removal and start take it along."""

from __future__ import annotations

import asyncio
import io
import struct
import tarfile
from typing import Any
from uuid import uuid4

import msgspec
import pytest
from berth.adapters.docker.holder import (
    EM_AARCH64,
    EM_X86_64,
    HOLDER_IMAGE_LABEL,
    LOAD_ADDRESS,
    holder_elf,
    holder_tar,
    machine_of,
)
from berth.adapters.docker.runtime import _disk_usage, _listed, _state
from berth.core.errors import RuntimeFailure
from berth.core.models import ContainerSpec, ContainerState, DeploymentState, Job
from berth.core.use_cases.holders import HOLDER_LABEL, holder_name, host_port_of
from fakes import FakeJobQueue, Health
from test_run_deployment import Rig

# -- the program ------------------------------------------------------------------------


def _header(elf: bytes) -> tuple[Any, ...]:
    return struct.unpack("<HHIQQQIHHHHHH", elf[16:64])


def _segment(elf: bytes) -> tuple[Any, ...]:
    return struct.unpack("<IIQQQQQQ", elf[64:120])


@pytest.mark.parametrize("machine", [EM_X86_64, EM_AARCH64])
def test_the_program_is_one_loadable_segment_that_starts_at_its_code(machine: int) -> None:
    """An ELF64 little-endian executable for the machine, one PT_LOAD (R+X) mapping the
    whole file at the load address, its entry right after the two headers."""
    elf = holder_elf(machine)
    assert elf[:4] == b"\x7fELF"
    assert elf[4:8] == bytes([2, 1, 1, 0])  # 64-bit, little-endian, version 1, System V
    e_type, e_machine, version, entry, phoff, shoff, _, ehsize, phentsize, phnum, *_ = _header(elf)
    assert (e_type, e_machine, version) == (2, machine, 1)
    assert (phoff, shoff, ehsize, phentsize, phnum) == (64, 0, 64, 56, 1)
    p_type, flags, offset, vaddr, paddr, filesz, memsz, align = _segment(elf)
    assert (p_type, flags, offset, align) == (1, 5, 0, 0x1000)
    assert vaddr == paddr == LOAD_ADDRESS
    assert filesz == memsz == len(elf)
    assert entry == LOAD_ADDRESS + 120
    assert LOAD_ADDRESS <= entry < LOAD_ADDRESS + filesz


def test_the_x86_64_program_pauses_in_a_loop() -> None:
    """x86_64: ``mov eax, 34`` (pause), ``syscall``, ``jmp`` back to the ``mov``."""
    code = holder_elf(EM_X86_64)[120:]
    assert code[:5] == b"\xb8" + struct.pack("<I", 34)
    assert code[5:7] == b"\x0f\x05"
    assert code[7] == 0xEB
    assert 9 + struct.unpack("<b", code[8:9])[0] == 0  # the jump lands on the first byte


def test_the_aarch64_program_ppolls_in_a_loop() -> None:
    """aarch64: x0-x3 zeroed, x8 = 73 (ppoll), ``svc #0``, ``b`` back to the first word."""
    code = holder_elf(EM_AARCH64)[120:]
    words = struct.unpack(f"<{len(code) // 4}I", code)
    assert len(code) % 4 == 0
    movz = [(w >> 23, w & 0x1F, (w >> 5) & 0xFFFF) for w in words[:5]]
    assert all(opcode == 0x1A5 for opcode, _, _ in movz)  # movz, 64-bit, no shift
    assert [(reg, value) for _, reg, value in movz] == [(0, 0), (1, 0), (2, 0), (3, 0), (8, 73)]
    assert words[5] == 0xD4000001  # svc #0
    branch = words[6]
    assert branch >> 26 == 0b000101  # b imm26
    offset = branch & 0x3FFFFFF
    offset -= 1 << 26 if offset & (1 << 25) else 0
    assert 6 + offset == 0  # back to the first instruction


def test_the_image_layer_holds_the_program_executable() -> None:
    """The imported tar holds ``holder`` (0755), the program's bytes."""
    with tarfile.open(fileobj=io.BytesIO(holder_tar(EM_X86_64))) as tar:
        [entry] = tar.getmembers()
        assert entry.name == "holder"
        assert entry.mode == 0o755
        file = tar.extractfile(entry)
        assert file is not None
        assert file.read() == holder_elf(EM_X86_64)


def test_the_machine_follows_dockers_architecture() -> None:
    """``x86_64``/``amd64`` and ``aarch64``/``arm64`` have a program; another
    architecture is a ``holder-unsupported`` failure."""
    assert machine_of("x86_64") == machine_of("amd64") == EM_X86_64
    assert machine_of("aarch64") == machine_of("arm64") == EM_AARCH64
    with pytest.raises(RuntimeFailure) as refused:
        machine_of("s390x")
    assert refused.value.kind == "holder-unsupported"


# -- the adapter: listing, disk usage, joins --------------------------------------------


def _row(name: str, labels: dict[str, str], mode: str = "default", **more: Any) -> dict[str, Any]:
    return {
        "Id": f"{name}-id",
        "Names": [f"/{name}"],
        "Image": "x",
        "State": "running",
        "Labels": labels,
        "HostConfig": {"NetworkMode": mode},
        **more,
    }


def test_a_holder_is_not_listed_and_its_port_is_the_apps() -> None:
    """A holder's row is left out; the container that joins it (by name or id) lists the
    holder's port as its own."""
    port = {"PrivatePort": 3000, "PublicPort": 8080, "Type": "tcp", "IP": "0.0.0.0"}
    app = str(uuid4())
    rows = [
        _row("web.port-8080-3000", {HOLDER_LABEL: app}, Ports=[port]),
        _row("web", {"berth.installation": app}, "container:web.port-8080-3000"),
        _row("other", {}, "container:web.port-8080-3000-id"),
    ]
    listed = _listed(rows)
    assert [c.name for c in listed] == ["web", "other"]
    assert [p.host_port for p in listed[0].ports] == [8080]
    assert [p.host_port for p in listed[1].ports] == [8080]


def test_a_joined_containers_state_names_its_holder() -> None:
    """``joins`` is the holder ``container:<x>`` names; its host port is its label's."""
    data = {
        "Id": "abc",
        "Name": "/web",
        "State": {"Status": "running", "Running": True},
        "Config": {"Labels": {"berth.ports": "8081:3000"}},
        "HostConfig": {"NetworkMode": "container:web.port-8081-3000"},
        "NetworkSettings": {"Ports": {}},
    }
    state = _state(data)
    assert state.joins == "web.port-8081-3000"
    assert state.host_port is None
    assert host_port_of(state) == 8081


def test_disk_usage_leaves_the_holders_out() -> None:
    """The holders and their image are not counted as the user's."""
    data = {
        "LayersSize": 1000,
        "Images": [
            {"Size": 900, "Labels": None},
            {"Size": 129, "Labels": {HOLDER_IMAGE_LABEL: "true"}},
        ],
        "Containers": [
            {"SizeRw": 10, "Labels": {"berth.installation": "x"}},
            {"SizeRw": 0, "Labels": {HOLDER_LABEL: "x"}},
        ],
    }
    usage = _disk_usage(data)
    assert (usage.images, usage.images_bytes, usage.containers) == (1, 871, 1)


# -- the strategy through the holder ------------------------------------------------------


@pytest.fixture
def rig() -> Rig:
    return Rig()


def next_deployment(job: Job, **spec: Any) -> Job:
    """The installation's next deployment after ``job`` (which is then its current one)."""
    deployment = msgspec.structs.replace(
        job.deployment,
        id=uuid4(),
        spec=msgspec.structs.replace(job.deployment.spec, **spec),
    )
    return msgspec.structs.replace(
        job, deployment=deployment, current_deployment_id=job.deployment.id
    )


async def deploy_again(rig: Rig, job: Job) -> None:
    """Run ``job`` on a fresh queue (the fake queue holds one deployment's lease)."""
    rig.jobs = FakeJobQueue(fleet=rig.fleet)
    await rig.run(job)


def holders(rig: Rig) -> list[ContainerState]:
    return [s for s in rig.runtime.containers.values() if s.id in rig.runtime.holders]


def apps(rig: Rig) -> list[ContainerState]:
    return rig.runtime.apps()


async def test_a_first_deploy_starts_its_holder_while_the_app_container_is_made(
    rig: Rig,
) -> None:
    """Nothing of the app runs yet: the holder's start is asked while the app's container
    is being created (not after it), so the two Docker calls overlap."""
    create = rig.runtime.create
    started_meanwhile: list[bool] = []

    async def slow_create(spec: ContainerSpec) -> str:
        for _ in range(20):  # the other task's turn, a few times over (bounded)
            await asyncio.sleep(0)
        started_meanwhile.append(any(op == "start" for op, *_ in rig.runtime.calls))
        return await create(spec)

    rig.runtime.create = slow_create  # type: ignore[method-assign]
    await rig.run(rig.job())
    assert rig.outcome == (DeploymentState.SUCCEEDED, None)
    assert started_meanwhile == [True]
    [holder] = holders(rig)
    [app] = apps(rig)
    starts = [c for c in rig.runtime.calls if c[0] == "start"]
    assert starts == [("start", holder.id), ("start", app.id)]


async def test_a_first_deploy_starts_its_holder_while_the_image_is_pulled(rig: Rig) -> None:
    """The holder needs no image: a first deploy makes and starts it beside the pull (or
    the build), and tells of it once the step create begins."""
    pull = rig.runtime.pull
    started_meanwhile: list[bool] = []

    async def slow_pull(image: str, **kwargs: Any) -> None:
        for _ in range(20):  # the other task's turn, a few times over (bounded)
            await asyncio.sleep(0)
        started_meanwhile.append(any(op == "start" for op, *_ in rig.runtime.calls))
        await pull(image, **kwargs)

    rig.runtime.pull = slow_pull  # type: ignore[method-assign]
    await rig.run(rig.job())
    assert rig.outcome == (DeploymentState.SUCCEEDED, None)
    assert started_meanwhile == [True]
    writes = rig.jobs.writes
    told = [i for i, (_, step, m) in enumerate(writes) if m.startswith("Created port holder")]
    entered = [i for i, (kind, step, _) in enumerate(writes) if (kind, step) == ("step", "create")]
    assert len(told) == 1
    assert writes[told[0]][1] == "create"
    assert entered == [told[0] - 1]  # right after the step create began


async def test_a_failed_pull_leaves_no_holder_behind(rig: Rig) -> None:
    """A first deploy whose pull fails removes the holder made (and started) beside it."""

    async def failing_pull(image: str, **kwargs: Any) -> None:
        for _ in range(20):  # the holder's turn first (bounded)
            await asyncio.sleep(0)
        raise RuntimeFailure("manifest unknown")

    rig.runtime.pull = failing_pull  # type: ignore[method-assign]
    await rig.run(rig.job())
    assert rig.outcome[0] is DeploymentState.FAILED
    assert rig.outcome[1] is not None
    assert rig.outcome[1].startswith("pull:")
    [made] = rig.runtime.holders  # one was made, and started
    assert ("start", made) in rig.runtime.calls
    assert rig.runtime.containers == {}


async def test_a_pull_that_fails_before_the_holder_is_made_leaves_none_behind(
    rig: Rig,
) -> None:
    """A pull that fails at once (a missing image) while Docker is still making the holder:
    Docker makes it all the same, and the run removes it once its create answers."""
    create_holder = rig.runtime.create_holder

    async def slow_answer(spec: Any) -> str:
        made = await create_holder(spec)  # made on the server ...
        for _ in range(20):  # ... its answer on the way (bounded)
            await asyncio.sleep(0)
        return made

    async def failing_pull(image: str, **kwargs: Any) -> None:
        raise RuntimeFailure("manifest unknown")

    rig.runtime.create_holder = slow_answer  # type: ignore[method-assign]
    rig.runtime.pull = failing_pull  # type: ignore[method-assign]
    await rig.run(rig.job())
    assert rig.outcome[0] is DeploymentState.FAILED
    assert rig.runtime.holders  # one was made
    assert rig.runtime.containers == {}


async def test_a_running_app_keeps_the_new_holder_stopped_until_it_stops(rig: Rig) -> None:
    """A container-port change on the same host port: the new holder (same host port)
    starts only once the running old app and its holder have stopped."""
    first = rig.job()
    await rig.run(first)
    [old_holder] = holders(rig)
    [old] = apps(rig)
    rig.runtime.calls.clear()
    await deploy_again(rig, next_deployment(first, port=9000, host_port=8080))
    assert rig.outcome == (DeploymentState.SUCCEEDED, None)
    [new_holder] = holders(rig)  # the old one went once the new revision answered
    calls = rig.runtime.calls
    assert new_holder.name == "web.port-8080-9000"
    assert calls.index(("stop", old.id)) < calls.index(("start", new_holder.id))
    assert calls.index(("stop", old_holder.id)) < calls.index(("start", new_holder.id))


async def test_a_redeploy_keeps_the_holder_and_stops_only_the_app(rig: Rig) -> None:
    """A first deploy makes the holder (publishing the port) and the app joins it; a
    redeploy neither stops nor makes a holder: old app stopped, new one started."""
    first = rig.job()
    await rig.run(first)
    [holder] = holders(rig)
    assert holder.name == holder_name(first) == "web.port-8080-8080"
    assert holder.running
    assert holder.host_port == 8080
    [app] = apps(rig)
    assert app.joins == holder.id
    assert "berth.installation" not in holder.labels
    rig.runtime.calls.clear()
    await deploy_again(rig, next_deployment(first))
    assert [h.id for h in holders(rig)] == [holder.id]
    assert ("stop", holder.id) not in rig.runtime.calls
    assert "create_holder" not in rig.runtime.ops()
    ops = rig.runtime.ops()
    assert ops[ops.index("stop") + 1] == "start"  # nothing between the stop and the start
    assert rig.jobs.host_ports[-1] == 8080


async def test_a_failed_redeploy_leaves_the_old_revision_serving_through_the_holder(
    rig: Rig,
) -> None:
    """A new revision that never answers goes; the old one starts again in the holder."""
    first = rig.job()
    await rig.run(first)
    [old] = apps(rig)
    rig.runtime.health_of[old.id] = Health()  # it answers; the new one never does
    rig.runtime.health = Health(answer_after=None)
    await deploy_again(rig, next_deployment(first))
    assert rig.outcome[0] is DeploymentState.FAILED
    assert [a.id for a in apps(rig)] == [old.id]
    assert rig.runtime.containers[old.id].running
    [holder] = holders(rig)
    assert holder.running
    assert rig.jobs.serving[-1] is True


async def test_a_host_port_change_makes_a_new_holder_and_the_old_one_goes(rig: Rig) -> None:
    """A ``hostPort`` change: the new revision gets a holder of its own port; once it
    answers the old holder goes. If it fails, the old holder serves the old revision."""
    first = rig.job()
    await rig.run(first)
    [old_holder] = holders(rig)
    [old] = apps(rig)
    rig.runtime.health_of[old.id] = Health()  # it answers; the new one never does
    rig.runtime.health = Health(answer_after=None)
    await deploy_again(rig, next_deployment(first, host_port=9090))
    assert [h.id for h in holders(rig)] == [old_holder.id]
    assert rig.runtime.containers[old_holder.id].running
    assert rig.jobs.serving[-1] is True

    rig.runtime.health = Health()
    await deploy_again(rig, next_deployment(first, host_port=9090))
    [holder] = holders(rig)
    assert holder.name == "web.port-9090-8080"
    assert holder.running
    assert holder.host_port == 9090
    assert rig.jobs.host_ports[-1] == 9090


async def test_a_failed_first_deploy_leaves_no_holder(rig: Rig) -> None:
    """Nothing serves after a failed first deployment: its holder goes too."""
    rig.runtime.health = Health(answer_after=None)
    await rig.run(rig.job())
    assert rig.runtime.containers == {}


async def test_an_app_without_a_holder_gets_one_at_its_next_deploy(rig: Rig) -> None:
    """An old container publishing its port itself is stopped first, then the holder
    starts on the port and the new container joins it; the old one goes."""
    job = rig.job()
    current = uuid4()
    legacy = rig.runtime.add(
        job.container_name,
        {"berth.installation": str(job.installation_id), "berth.deployment": str(current)},
        host_port=8080,
    )
    job = msgspec.structs.replace(job, current_deployment_id=current)
    await rig.run(job)
    assert rig.outcome == (DeploymentState.SUCCEEDED, None)
    [holder] = holders(rig)
    calls = rig.runtime.calls
    assert calls.index(("stop", legacy.id)) < calls.index(("start", holder.id))
    assert legacy.id not in rig.runtime.containers
    [app] = apps(rig)
    assert app.joins == holder.id
    assert app.running


async def test_a_server_with_no_holder_program_publishes_the_port_itself(rig: Rig) -> None:
    """An architecture berth has no holder for: the container publishes its port, as
    before holders, and the events say why."""
    rig.runtime.failures["create_holder"] = "berth has no port holder for the server's (s390x)."
    rig.runtime.failure_kinds["create_holder"] = "holder-unsupported"
    await rig.run(rig.job())
    assert rig.outcome == (DeploymentState.SUCCEEDED, None)
    [app] = apps(rig)
    assert app.joins is None
    assert app.host_port == 8080
    assert any("no port holder for" in e for e in rig.jobs.events)
