"""A scripted container runtime (``ContainerRuntime``) that records every call."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID, uuid4

import msgspec
from berth.core.errors import RuntimeFailure, ServerUnreachable
from berth.core.models import (
    BuiltImage,
    Container,
    ContainerPort,
    ContainerSpec,
    ContainerState,
    ContainerStats,
    DiskUsage,
    HolderSpec,
    PullProgress,
    RegistryAuth,
    ServerFacts,
)
from berth.core.ports import BuildOutput, PullProgressSink
from berth.core.watch import ContainerEvent

__all__ = ["FakeRuntime", "Health"]


@dataclass(slots=True)
class Health:
    """How a container this runtime started behaves while berth waits for it to answer."""

    answer_after: int | None = 0  # probes left unanswered before the port answers; None: never
    exit_code: int | None = None  # the container exits with this code ...
    exit_after: int = 0  # ... once it has been inspected this many times while running
    restarting: bool = False  # it exits into "restarting" (restart policy), not "exited"
    status: int = 200  # the HTTP status it answers with once it answers
    #: What each probe gets, in order, the last one again after (``None``: nothing
    #: answered); when given, instead of ``answer_after`` and ``status``.
    answers: tuple[str | None, ...] = ()


class FakeRuntime:
    """A ContainerRuntime over a dict of containers, scripted by the test.

    ``failures`` maps an operation (``"pull"``, ``"create"``, ``"start"``, …) to the
    message of the ``RuntimeFailure`` it raises; ``unreachable`` names operations
    that find the server gone; ``hangs`` names operations that never return.
    Every call is recorded in ``calls`` as ``(operation, argument…)``.
    """

    def __init__(
        self,
        *,
        images: Iterable[str] = (),
        health: Health | None = None,
        log_lines: Iterable[str] = (),
        facts: ServerFacts | None = None,
        listed: Iterable[Container] = (),
    ) -> None:
        self.images = set(images)
        # The id each image name resolves to; an image without an entry has an id made
        # from its name. Ids resolve to themselves.
        self.image_ids: dict[str, str] = {}
        self.health = health or Health()
        self.log_lines = list(log_lines)
        # ``follow_logs``: after the tail, these lines as if written later, then the end.
        self.later_lines: list[str] = []
        self.server_facts = facts or ServerFacts(
            os="Debian GNU/Linux 12", arch="x86_64", docker_version="27.3.1", cpus=2
        )
        self.listed = list(listed)  # containers shown by list_containers beyond the managed ones
        # What ``stats`` says of a running container, and ``disk_usage`` of the server.
        self.container_stats = ContainerStats(
            running=True, cpu_percent=12.5, memory_bytes=48 << 20, memory_limit_bytes=2 << 30
        )
        self.disk = DiskUsage(
            images=3,
            images_bytes=300 << 20,
            containers=2,
            containers_bytes=4 << 20,
            volumes=1,
            volumes_bytes=10 << 20,
            build_cache_bytes=0,
        )
        self.failures: dict[str, str] = {}
        # A failure's ``kind`` per operation (``"pull"``: ``"image-not-found"`` …).
        self.failure_kinds: dict[str, str] = {}
        # ``pull``: the progress it reports, one step each ``pull_step_seconds``, and the
        # credentials each pull was given.
        self.pull_progress: list[PullProgress] = []
        self.pull_step_seconds = 0.0
        self.pull_auths: list[RegistryAuth | None] = []
        self.unreachable: set[str] = set()
        self.hangs: set[str] = set()
        self.containers: dict[str, ContainerState] = {}
        self.specs: dict[str, ContainerSpec] = {}  # what each container was created with
        self.created: list[str] = []  # ids of containers created through ``create``
        self.holders: dict[str, HolderSpec] = {}  # port holders made by ``create_holder``
        self.calls: list[tuple[str, ...]] = []
        self.health_of: dict[str, Health] = {}  # per container id, beyond ``health``
        # Ports something else holds: starting a container this runtime created on one fails.
        self.refused_ports: set[int] = set()
        # ``container_events``: what the stream yields, in order; ``None`` ends it.
        self.events: asyncio.Queue[ContainerEvent | None] = asyncio.Queue()
        self.unstartable: set[str] = set()  # container ids whose start Docker refuses
        self._inspections: dict[str, int] = {}
        self._probes: dict[str, int] = {}
        self._ports = itertools.count(49153)
        # ``build``: the lines of output it writes; the built images (newest first, as
        # ``built_images`` lists them) and the tags ``untag`` removed.
        self.build_output: list[str] = []
        self.built: list[BuiltImage] = []
        self.untagged: list[str] = []
        self._builds = itertools.count(1)

    # Test helpers

    def add(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        *,
        running: bool = True,
        host_port: int | None = None,
    ) -> ContainerState:
        """Put a container on the server that this runtime did not create (yet)."""
        state = ContainerState(
            id=uuid4().hex,
            name=name,
            status="running" if running else "exited",
            running=running,
            exit_code=None if running else 0,
            host_port=host_port,
            labels=dict(labels or {}),
        )
        self.containers[state.id] = state
        return state

    def apps(self) -> list[ContainerState]:
        """The containers on the server but port holders."""
        return [s for s in self.containers.values() if s.id not in self.holders]

    def ops(self) -> list[str]:
        """The operations called, in order."""
        return [call[0] for call in self.calls]

    def removed(self) -> list[str]:
        return [call[1] for call in self.calls if call[0] == "remove"]

    # ContainerRuntime

    async def facts(self) -> ServerFacts:
        await self._gate("facts")
        return self.server_facts

    async def image_exists(self, image: str) -> bool:
        await self._gate("image_exists", image)
        return image in self.images

    async def image_id(self, image: str) -> str | None:
        await self._gate("image_id", image)
        if image.startswith("sha256:"):
            present = {self._id_of(name) for name in self.images}
            return image if image in present else None
        return self._id_of(image) if image in self.images else None

    def _id_of(self, image: str) -> str:
        return self.image_ids.get(image) or "sha256:" + (image.encode().hex() + "0" * 64)[:64]

    async def pull(
        self,
        image: str,
        *,
        auth: RegistryAuth | None = None,
        progress: PullProgressSink | None = None,
    ) -> None:
        self.pull_auths.append(auth)
        for step in self.pull_progress:
            if progress is not None:
                progress(step)
            await asyncio.sleep(self.pull_step_seconds)
        await self._gate("pull", image)
        self.images.add(image)

    async def list_containers(self) -> list[Container]:
        """Port holders are not listed; a running one's port is the joined containers'."""
        await self._gate("list_containers")
        return self.listed + [
            _as_container(s, self.specs.get(s.id), self._holder_of(s))
            for s in self.containers.values()
            if s.id not in self.holders
        ]

    def _holder_of(self, state: ContainerState) -> ContainerState | None:
        """The running holder ``state`` joins, if any."""
        if state.joins is None:
            return None
        holder = self.containers.get(state.joins) or self._by_name(state.joins)
        return holder if holder is not None and holder.running else None

    async def find(self, labels: dict[str, str]) -> list[ContainerState]:
        await self._gate("find", *sorted(f"{k}={v}" for k, v in labels.items()))
        return [s for s in self.containers.values() if labels.items() <= s.labels.items()]

    async def create(self, spec: ContainerSpec) -> str:
        await self._gate("create", spec.name)
        holder = self._by_name(spec.name)
        if holder is not None:
            raise RuntimeFailure(
                f'Conflict. The container name "/{spec.name}" is already in use '
                f'by container "{holder.id}".'
            )
        joins = spec.joins
        if joins is not None:  # as Docker: the id of the container joined by name is kept
            joined = self.containers.get(joins) or self._by_name(joins)
            if joined is None:
                raise RuntimeFailure(f"No such container: {joins}")
            joins = joined.id
        state = self._created(spec.name, spec.labels, joins=joins)
        self.specs[state.id] = spec
        self.created.append(state.id)
        return state.id

    async def create_holder(self, spec: HolderSpec) -> str:
        """A port holder: a container that publishes ``spec``'s port once started and
        answers nothing itself (``answer`` asks the containers that join it)."""
        await self._gate("create_holder", spec.name)
        if self._by_name(spec.name) is not None:
            raise RuntimeFailure(f'Conflict. The container name "/{spec.name}" is already in use.')
        state = self._created(spec.name, spec.labels)
        self.holders[state.id] = spec
        return state.id

    def _created(
        self, name: str, labels: Mapping[str, str], *, joins: str | None = None
    ) -> ContainerState:
        """A container just created (not started) on the server."""
        state = ContainerState(
            id=uuid4().hex,
            name=name,
            status="created",
            running=False,
            exit_code=None,
            host_port=None,
            labels=dict(labels),
            joins=joins,
        )
        self.containers[state.id] = state
        return state

    async def start(self, container_id: str) -> None:
        await self._gate("start", container_id)
        state = self.containers.get(container_id) or self._by_name(container_id)  # as Docker
        if state is None:
            raise RuntimeFailure(f"No such container: {container_id}")
        container_id = state.id
        spec: ContainerSpec | HolderSpec | None = self.specs.get(container_id)
        spec = spec or self.holders.get(container_id)
        port = spec.host_port if spec is not None else state.host_port
        if container_id in self.unstartable:
            raise RuntimeFailure(f"Cannot start container {container_id}: no such image")
        if state.joins is not None:  # no port of its own: its holder's, which must run
            port = None
            if state.joins not in self.containers and self._by_name(state.joins) is None:
                raise RuntimeFailure(f"No such container: {state.joins}")
            if self._holder_of(state) is None:
                raise RuntimeFailure("cannot join network of a non running container")
        if spec is not None and port is not None and port in self.refused_ports:
            raise RuntimeFailure(
                f"driver failed programming external connectivity: Bind for 0.0.0.0:{port} "
                "failed: port is already allocated"
            )
        self._probes.pop(container_id, None)
        self._inspections.pop(container_id, None)
        self.containers[container_id] = msgspec.structs.replace(
            state,
            status="running",
            running=True,
            exit_code=None,
            host_port=None if state.joins else port if port is not None else next(self._ports),
        )

    async def stop(self, container_id: str, grace: float = 10.0) -> None:
        await self._gate("stop", container_id)
        state = self.containers.get(container_id)
        if state is None:
            raise RuntimeFailure(f"No such container: {container_id}")
        self.containers[container_id] = msgspec.structs.replace(
            state, status="exited", running=False, exit_code=0
        )

    async def inspect(self, container_id: str) -> ContainerState | None:
        await self._gate("inspect", container_id)
        state = self.containers.get(container_id) or self._by_name(container_id)
        if state is None or state.id not in self.created or not state.running:
            return state
        health = self.health_of.get(state.id, self.health)
        seen = self._inspections.get(state.id, 0)
        self._inspections[state.id] = seen + 1
        if health.exit_code is not None and seen >= health.exit_after:
            state = msgspec.structs.replace(
                state,
                status="restarting" if health.restarting else "exited",
                running=False,
                exit_code=health.exit_code,
            )
            self.containers[state.id] = state
        return state

    async def logs(self, container_id: str, tail: int, *, timestamps: bool = False) -> list[str]:
        await self._gate("logs", container_id, str(tail))
        return self.log_lines[-tail:] if tail > 0 else []

    async def follow_logs(
        self, container_id: str, tail: int, *, timestamps: bool = False
    ) -> AsyncIterator[str]:
        await self._gate("follow_logs", container_id, str(tail))
        if container_id not in self.containers:
            raise RuntimeFailure(f"No such container: {container_id}")
        for line in [*(self.log_lines[-tail:] if tail > 0 else []), *self.later_lines]:
            await asyncio.sleep(0)
            yield line

    async def remove(self, container_id: str) -> None:
        await self._gate("remove", container_id)
        self.containers.pop(container_id, None)

    async def rename(self, container_id: str, name: str) -> None:
        await self._gate("rename", container_id, name)
        state = self.containers.get(container_id)
        if state is None:
            raise RuntimeFailure(f"No such container: {container_id}")
        holder = self._by_name(name)
        if holder is not None and holder.id != container_id:
            raise RuntimeFailure(f'Conflict. The name "/{name}" is already in use.')
        self.containers[container_id] = msgspec.structs.replace(state, name=name)

    async def stats(self, container_id: str) -> ContainerStats | None:
        await self._gate("stats", container_id)
        state = self.containers.get(container_id)
        if state is None:
            return None
        if not state.running:
            return ContainerStats(running=False)
        return self.container_stats

    async def disk_usage(self) -> DiskUsage:
        await self._gate("disk_usage")
        return self.disk

    async def container_events(
        self, server_id: UUID, since: str | None = None
    ) -> AsyncIterator[ContainerEvent]:
        """The events the test puts on ``events`` (a ``None`` ends the stream)."""
        await self._gate("container_events", str(server_id), since or "")
        while (event := await self.events.get()) is not None:
            yield event

    async def build(
        self,
        context: Path,
        *,
        tag: str,
        dockerfile: str,
        args: Mapping[str, str],
        target: str | None,
        output: BuildOutput,
    ) -> str:
        """Writes ``build_output``, then makes an image tagged ``tag`` (newer than any)."""
        await self._gate("build", tag)
        for line in self.build_output:
            output(line)
        n = next(self._builds)
        image_id = f"sha256:{n:064x}"
        self.built.insert(0, BuiltImage(id=image_id, tags=(tag,), created=n))
        self.images.add(tag)
        self.image_ids[tag] = image_id
        return image_id

    async def built_images(self, repository: str) -> list[BuiltImage]:
        await self._gate("built_images", repository)
        return [i for i in self.built if any(t.startswith(f"{repository}:") for t in i.tags)]

    async def untag(self, reference: str) -> bool:
        await self._gate("untag", reference)
        self.untagged.append(reference)
        kept = []
        for image in self.built:  # an image goes with its last tag
            tags = tuple(t for t in image.tags if t != reference)
            if tags:
                kept.append(msgspec.structs.replace(image, tags=tags))
        self.built = kept
        return True

    # The connection's probe lands here: only a running container publishing the port answers.

    async def answer(self, port: int, path: str | None = None) -> str | None:
        await self._gate("probe", str(port))
        state = next(
            (
                s
                for s in self.containers.values()
                if s.running
                and s.id not in self.holders
                and (s.host_port == port or self._joined_port(s) == port)
            ),
            None,
        )
        if state is None:
            return None
        scripted = self.health_of.get(state.id)
        if state.id not in self.created and (scripted is None or not scripted.answers):
            return "HTTP 200"  # a container the test put there answers at once
        health = scripted or self.health
        seen = self._probes.get(state.id, 0)
        self._probes[state.id] = seen + 1
        if health.answers:
            return health.answers[min(seen, len(health.answers) - 1)]
        after = health.answer_after
        return f"HTTP {health.status}" if after is not None and seen >= after else None

    def _joined_port(self, state: ContainerState) -> int | None:
        """The host port a running holder publishes for the container that joins it."""
        holder = self._holder_of(state)
        return holder.host_port if holder is not None else None

    def _by_name(self, name: str) -> ContainerState | None:
        return next((s for s in self.containers.values() if s.name == name), None)

    async def _gate(self, op: str, *args: str) -> None:
        self.calls.append((op, *args))
        if op in self.hangs:
            await asyncio.Event().wait()
        if op in self.unreachable:
            raise ServerUnreachable("Connection lost: the SSH tunnel closed.")
        if op in self.failures:
            raise RuntimeFailure(self.failures[op], kind=self.failure_kinds.get(op))


def _as_container(
    state: ContainerState, spec: ContainerSpec | None, holder: ContainerState | None = None
) -> Container:
    installation = state.labels.get("berth.installation")
    ports: tuple[ContainerPort, ...] = ()
    published = holder.host_port if holder is not None else state.host_port
    if published is not None:  # one the test put there publishes its port as is
        ports = (
            ContainerPort(
                container_port=spec.container_port if spec else published,
                host_ip="0.0.0.0" if spec is None or holder is not None else spec.host_ip,
                host_port=published,
                protocol="tcp",
            ),
        )
    return Container(
        id=state.id,
        name=state.name,
        image=spec.image if spec is not None else "unknown",
        state=state.status,
        status=state.status,
        created_at=None,
        ports=ports,
        installation_id=UUID(installation) if installation else None,
    )
