"""Apps under watch: what each installation's container does, recorded and told
(``berth.core.watch`` holds the rule).

Two sources, one path (``WatchContainers.refresh``): each server's Docker event stream
(``ContainerEvents``: one per online server, held by the worker whose monitor watches that
server, resumed with ``since`` after it broke) refreshes the installation an event names
within a second; the monitor's inventory (its container list every pass) refreshes the
installations whose containers changed since its last pass -- the fallback where a stream
cannot be held, and the reconciliation of what a stream missed. Either way the
installation's containers are inspected (``find`` by its label) and ``decide`` says what to
record and tell.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from uuid import UUID

import structlog

from ..errors import RuntimeFailure, ServerUnreachable, StoreUnavailable
from ..models import RunState
from ..ports import Clock, ContainerRuntime, Fleet
from ..watch import AppWatch, Seen, WatchChange, WatchTarget, decide, seen_of

__all__ = ["ContainerEvents", "Refreshed", "WatchContainers", "awaits_recovery", "listed_state"]

log = structlog.get_logger()

#: The installation label berth puts on each container it creates.
INSTALLATION_LABEL = "berth.installation"


def awaits_recovery(watch: AppWatch | None) -> bool:
    """Told down and running again: looked at once more each pass until it is told up
    (a container restarted by its policy is up only once it kept running ``STABLE``)."""
    return (
        watch is not None and watch.down_since is not None and watch.seen.state is RunState.RUNNING
    )


def listed_state(docker_state: str) -> RunState:
    """A container list's state (Docker's ``State``) as ``seen_of`` would say it."""
    if docker_state == "running":
        return RunState.RUNNING
    if docker_state == "restarting":
        return RunState.RESTARTING
    return RunState.EXITED


def _agrees(
    watch: AppWatch | None,
    listed: Mapping[UUID, Collection[tuple[str, str]]],
    installation_id: UUID,
) -> bool:
    """Whether what is recorded of an installation is what a container list says."""
    if watch is None or awaits_recovery(watch):
        return False
    containers = listed.get(installation_id) or ()
    if watch.seen.state is RunState.MISSING:
        return not containers
    return (watch.seen.container_id or "", watch.seen.state.value) in containers


@dataclass(frozen=True)
class Refreshed:
    """What a refresh saw of each installation it looked at, and whether any of the
    server's installations ``awaits_recovery``."""

    seen: dict[UUID, Seen]
    waiting: bool


@dataclass(eq=False)
class WatchContainers:
    """Look at the containers of a server's installations and record what changed: one
    refresh of a server at a time (a stream's event and a monitor pass do not tell one
    change twice)."""

    _fleet: Fleet
    _clock: Clock
    _locks: dict[UUID, asyncio.Lock] = field(default_factory=dict)

    async def refresh(
        self,
        server_id: UUID,
        docker: ContainerRuntime,
        only: Collection[UUID] | None = None,
        listed: Mapping[UUID, Collection[tuple[str, str]]] | None = None,
        known: list[WatchTarget] | None = None,
    ) -> Refreshed:
        """Inspect the containers of the server's installations (``only`` these, when
        given), write what changed, tell what is to be told; what was seen, and whether
        any of them ``awaits_recovery`` (the monitor looks at those again next pass).

        With ``listed`` (a container list: each installation's ``(container id, state)``
        pairs), an installation whose record agrees with it is not inspected. ``known``:
        the server's targets as read a moment ago (a monitor's pass reads every server's
        at once, ``Fleet.pass_view``), used to choose what to inspect; what is written is
        decided on the targets read again after inspecting, as always."""
        lock = self._locks.setdefault(server_id, asyncio.Lock())
        async with lock:
            seen_now: dict[UUID, Seen] = {}
            waiting = False
            targets = await self._fleet.watch_targets(server_id) if known is None else known
            for target in targets:
                if (only is not None and target.installation_id not in only) or (
                    listed is not None and _agrees(target.watch, listed, target.installation_id)
                ):
                    waiting = waiting or awaits_recovery(target.watch)
                    continue
                label = {INSTALLATION_LABEL: str(target.installation_id)}
                seen_now[target.installation_id] = seen_of(
                    await docker.find(label), target.container_name
                )
            # Read again after inspecting: a stop or restart on request marks its app
            # ``stopping`` before it stops the container, so what was seen stopped by
            # berth is always read as berth's own change (quiet), never told down.
            changes: list[WatchChange] = []
            after = await self._fleet.watch_targets(server_id) if seen_now else []
            for target in after:
                seen = seen_now.get(target.installation_id)
                if seen is None:
                    continue
                watch, report = decide(
                    target.watch,
                    seen,
                    installation_id=target.installation_id,
                    at=self._clock.now(),
                    quiet=target.quiet,
                )
                previous = target.watch
                if (
                    report is not None
                    or previous is None
                    or previous.seen != watch.seen
                    or previous.down_since != watch.down_since
                ):
                    changes.append(
                        WatchChange(target=target, server_id=server_id, watch=watch, report=report)
                    )
                    if report is not None:
                        log.info(
                            "installation_" + report.event.value.split(".")[1],
                            installation_id=str(target.installation_id),
                            state=seen.state.value,
                            exit_code=seen.exit_code,
                            restart_count=seen.restart_count,
                        )
                waiting = waiting or awaits_recovery(watch)
            await self._fleet.save_watches(changes)
            return Refreshed(seen=seen_now, waiting=waiting)

    def forget(self, server_id: UUID) -> None:
        """The server is no longer watched here."""
        lock = self._locks.get(server_id)
        if lock is not None and not lock.locked():
            del self._locks[server_id]


@dataclass(eq=False)
class ContainerEvents:
    """One Docker event stream per server this worker watches (``ensure`` after each
    successful check of the server, ``stop`` when it goes offline or to another worker).
    Each event refreshes the installation it names; a stream that ends or breaks is
    opened again by the next ``ensure``, from the last event seen (``since``)."""

    _watch: WatchContainers
    _streams: dict[UUID, tuple[ContainerRuntime, asyncio.Task[None]]] = field(default_factory=dict)
    _since: dict[UUID, str] = field(default_factory=dict)

    @property
    def held(self) -> int:
        """How many streams are open now."""
        return sum(1 for _, task in self._streams.values() if not task.done())

    def ensure(self, server_id: UUID, docker: ContainerRuntime) -> None:
        """Hold a stream of ``server_id`` over ``docker`` (the connection just checked)."""
        held = self._streams.get(server_id)
        if held is not None and held[0] is docker and not held[1].done():
            return
        if held is not None:
            held[1].cancel()
        task = asyncio.create_task(self._follow(server_id, docker), name=f"events-{server_id}")
        self._streams[server_id] = (docker, task)

    async def stop(self, server_id: UUID, *, forget: bool = False) -> None:
        """Close the server's stream; the next resumes where it ended (Docker's
        ``since``) unless ``forget`` (the server is watched elsewhere now)."""
        held = self._streams.pop(server_id, None)
        if forget:
            self._since.pop(server_id, None)
            self._watch.forget(server_id)
        if held is not None:
            held[1].cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await held[1]

    async def close(self) -> None:
        """Close every stream."""
        for server_id in list(self._streams):
            await self.stop(server_id, forget=True)

    async def _follow(self, server_id: UUID, docker: ContainerRuntime) -> None:
        events = docker.container_events(server_id, self._since.get(server_id))
        try:
            async for event in events:
                if event.installation_id is not None:
                    await self._watch.refresh(server_id, docker, {event.installation_id})
                self._since[server_id] = event.since  # once told: a resumed stream repeats it
        except (ServerUnreachable, RuntimeFailure) as exc:
            log.info("container_events_ended", server_id=str(server_id), reason=str(exc))
        except StoreUnavailable as exc:  # the store's outage, not a fault: resumed later
            log.warning("container_events_ended", server_id=str(server_id), reason=exc.detail)
        except Exception:
            log.exception("container_events_failed", server_id=str(server_id))
        finally:
            await events.aclose()  # type: ignore[attr-defined]
