"""An app under watch: what its container is doing, and which changes are told.

Docker tells berth what a container does (its event stream, or the monitor's inventory
and an inspect): ``seen_of`` turns the containers of an installation into what is
``Seen``. ``decide`` compares that with what was last recorded (``AppWatch``) and says
what to record now and whether to tell of it -- a ``Report``, which becomes an event in
the installation's history and the webhook event ``installation.down`` or
``installation.up``.

The rule (docs/decisions/2026-11-27-apps-under-watch.md):

* while berth itself changes the app (deploying, stopped on request, removed, no revision
  serving) it is ``quiet``: what is seen is recorded, nothing is told, and nothing is
  left reported down;
* an app is *in trouble* when its container is not running (exited, restarting,
  missing), or when it runs but Docker's restart policy restarted it since last seen
  (it crashed in between);
* trouble is told once (``installation.down``) and stays told while it lasts: a crash
  loop is one report, however many restarts;
* it is told up (``installation.up``) when its container runs and either someone started
  it (it was last seen exited and its restart count did not grow: Docker's restart policy
  counts each restart it makes; or it is another container), or it has kept running
  ``STABLE`` since its last start -- a restart by the policy is not yet a recovery.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from uuid import UUID

import msgspec

from .models import ContainerState, ProxyRoute, RunState, WebhookEvent

__all__ = [
    "STABLE",
    "AppWatch",
    "ContainerEvent",
    "PassView",
    "Report",
    "Seen",
    "WatchChange",
    "WatchTarget",
    "decide",
    "seen_of",
    "trouble_of",
]

#: How long a container restarted by its restart policy must keep running to be up again.
#: Longer than the 10 s after which Docker resets its restart backoff: a loop that runs
#: a few seconds between crashes is never taken for a recovery.
STABLE = timedelta(seconds=30)


class Seen(msgspec.Struct, frozen=True, kw_only=True):
    """What an installation's container was seen doing."""

    state: RunState
    container_id: str | None = None
    exit_code: int | None = None  # of its last exit, while not running
    exited_at: datetime | None = None
    restart_count: int = 0
    started_at: datetime | None = None


class AppWatch(msgspec.Struct, frozen=True, kw_only=True):
    """What berth last recorded of an installation's container, and what it told."""

    installation_id: UUID
    seen: Seen
    observed_at: datetime
    down_since: datetime | None = None  # told down then, and not told up since


class Report(msgspec.Struct, frozen=True, kw_only=True):
    """A change to tell: its webhook event and the words of its history entry."""

    event: WebhookEvent
    message: str


class ContainerEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One event of a server's Docker event stream about a container of berth's: what
    happened (``die``, ``start``, ``destroy``, …), to which installation's container,
    and ``since``: where a stream resumed after it continues (Docker's ``since``)."""

    action: str
    container_id: str
    installation_id: UUID | None
    since: str


class WatchTarget(msgspec.Struct, frozen=True, kw_only=True):
    """An installation on a server, as the watch needs it: whose, its container's name,
    whether berth itself is changing it (``quiet``: deploying, stopped on request, or no
    revision serving) and what was last recorded of it."""

    installation_id: UUID
    owner_id: UUID
    container_name: str
    current_deployment_id: UUID | None
    quiet: bool
    watch: AppWatch | None = None


class PassView(msgspec.Struct, frozen=True, kw_only=True):
    """What a monitor's pass compares its servers with, read once for the pass
    (``Fleet.pass_view``): each server's proxy routes and its apps' watch targets, by
    server id (a server with no app is in neither). Read at the pass's start: a check
    that finds it disagrees reads the store again before it changes anything."""

    routes: dict[UUID, list[ProxyRoute]] = msgspec.field(default_factory=dict)
    targets: dict[UUID, list[WatchTarget]] = msgspec.field(default_factory=dict)


class WatchChange(msgspec.Struct, frozen=True, kw_only=True):
    """What to write of one installation: its ``watch``, and the ``report`` to tell."""

    target: WatchTarget
    server_id: UUID
    watch: AppWatch
    report: Report | None = None


def seen_of(containers: Sequence[ContainerState], container_name: str) -> Seen:
    """What an installation's containers (``find`` by its label, newest first) say: the
    one named as the installation's container (else the newest) -- or ``missing``."""
    container = next(
        (c for c in containers if c.name.lstrip("/") == container_name),
        next(iter(containers), None),
    )
    if container is None:
        return Seen(state=RunState.MISSING)
    if container.running:
        state = RunState.RUNNING
    elif container.status == "restarting":
        state = RunState.RESTARTING
    else:  # exited, dead, created (never started), paused, removing: not serving
        state = RunState.EXITED
    running = state is RunState.RUNNING
    return Seen(
        state=state,
        container_id=container.id,
        exit_code=None if running else container.exit_code,
        exited_at=None if running else container.finished_at,
        restart_count=container.restart_count,
        started_at=container.started_at,
    )


def trouble_of(previous: Seen | None, seen: Seen) -> bool:
    """Whether ``seen`` is an app in trouble: not running, or restarted by its restart
    policy since ``previous`` (the same container, a higher restart count)."""
    if seen.state is not RunState.RUNNING:
        return True
    return (
        previous is not None
        and previous.container_id == seen.container_id
        and seen.restart_count > previous.restart_count
    )


def decide(
    previous: AppWatch | None,
    seen: Seen,
    *,
    installation_id: UUID,
    at: datetime,
    quiet: bool,
) -> tuple[AppWatch, Report | None]:
    """What to record of ``seen`` at ``at``, and what to tell (module docstring)."""
    before = previous.seen if previous is not None else None
    told_down = previous.down_since if previous is not None else None
    report: Report | None = None
    if quiet:
        told_down = None
    elif told_down is None:
        if trouble_of(before, seen):
            told_down = at
            report = Report(event=WebhookEvent.INSTALLATION_DOWN, message=_down(seen))
    elif seen.state is RunState.RUNNING and _recovered(previous, seen, at):
        told_down = None
        report = Report(event=WebhookEvent.INSTALLATION_UP, message=_up(seen))
    watch = AppWatch(
        installation_id=installation_id, seen=seen, observed_at=at, down_since=told_down
    )
    return watch, report


def _recovered(previous: AppWatch | None, seen: Seen, at: datetime) -> bool:
    if previous is None or previous.seen.container_id != seen.container_id:
        return True  # another container: someone made it anew
    before = previous.seen
    if before.state is RunState.EXITED and seen.restart_count == before.restart_count:
        return True  # exited, then started without its policy counting a restart: by someone
    return seen.started_at is not None and at - seen.started_at >= STABLE


def _code(seen: Seen) -> str:
    return f" with code {seen.exit_code}" if seen.exit_code is not None else ""


def _down(seen: Seen) -> str:
    if seen.state is RunState.MISSING:
        return "Its container is gone from the server (removed outside berth)."
    if seen.state is RunState.EXITED:
        return f"Its container exited{_code(seen)}."
    if seen.state is RunState.RESTARTING:
        return f"Its container exited{_code(seen)}; Docker's restart policy restarts it."
    return f"Its container crashed and was restarted by Docker (restart {seen.restart_count})."


def _up(seen: Seen) -> str:
    restarts = f" after {seen.restart_count} restarts" if seen.restart_count else ""
    return f"Its container runs again{restarts}."
