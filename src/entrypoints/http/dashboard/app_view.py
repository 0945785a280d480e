"""What an app's page shows, worked out from core types: each revision with what changed
since the one before it (for a build, its source and commit too), how long it took, the
output its deployment captured, its build's log, and a hint when that output names
another port than the one deployed with.

Pure functions: the handlers read through the bus, these only shape what was read. Env
values never reach here (a spec holds env names only), so none can be shown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from uuid import UUID

from berth.core.models import (
    BuildSpec,
    Deployment,
    DeploymentEvent,
    DeploymentSpec,
    DeploymentState,
)

__all__ = [
    "LogLine",
    "Revision",
    "build_log",
    "changes",
    "duration",
    "log_line",
    "port_hint",
    "revisions",
    "source_of",
]

#: The prefix of a deployment event that carries a line of the app's output.
OUTPUT_PREFIX = "log: "
#: The step whose events are a build's log: berth's words and the builder's output.
BUILD_STEP = "build"
#: Hex digits of a commit id shown.
COMMIT_SHOWN = 12

#: Words near a number that make it a port the app says it listens on.
_PORT = re.compile(
    r"\b(?:listen\w*|bound|serving|started|running)\s+(?:on|at|to)\s+(?:port\s+)?"
    r"(?:[\w.\-\[\]:]*?:)?(\d{2,5})\b"
    r"|\bport\s*[:=]?\s*(\d{2,5})\b"
    r"|(?:localhost|0\.0\.0\.0|127\.0\.0\.1|\[::\]|\*):(\d{2,5})\b",
    re.IGNORECASE,
)
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.\d+)?(Z|[+-]\d\d:\d\d) (.*)$", re.S)


@dataclass(frozen=True, slots=True)
class Revision:
    """One deployment of the app as its page lists it."""

    deployment: Deployment
    changes: list[str]
    duration: str | None
    output: list[str]  # the app's output its deployment captured (a failed one's)
    steps: list[DeploymentEvent]  # its events but lines of output (a build: its first event)
    build_log: list[str]  # its build's events, a line each (none without a build)
    source: str | None  # a build's: where from (``source_of``); None for an image
    hint: str | None  # "the app logged … ; it was deployed with port …"
    current: bool
    can_roll_back: bool


@dataclass(frozen=True, slots=True)
class LogLine:
    """A line of the container's output; ``at`` is Docker's time of it, if asked for."""

    text: str
    at: str | None = None  # ISO 8601, seconds, UTC
    matches: bool = field(default=True)


def _limit(value: int | None) -> str:
    if value is None:
        return "no limit"
    mib = value / (1024 * 1024)
    return f"{mib:g} MiB" if mib < 1024 else f"{mib / 1024:g} GiB"


def _names(title: str, new: tuple[str, ...], old: tuple[str, ...]) -> list[str]:
    added = [n for n in new if n not in old]
    removed = [n for n in old if n not in new]
    said = []
    if added:
        said.append(f"{title} added: {', '.join(added)}")
    if removed:
        said.append(f"{title} removed: {', '.join(removed)}")
    return said


def changes(new: DeploymentSpec, old: DeploymentSpec | None) -> list[str]:
    """What ``new`` changed from ``old``, one sentence each; env by name only (values are
    never compared nor shown)."""
    if old is None:
        return ["First deployment."]

    def shown(value: object) -> str:
        if value is None:
            return "none"
        if isinstance(value, tuple):
            return " ".join(value) or "none"
        return str(value)

    said: list[str] = []
    for title, before, after in (
        ("Image", old.image, new.image),
        ("Port", old.port, new.port),
        ("Host port", _own_host_port(old), _own_host_port(new)),
        ("Domain", old.domain, new.domain),
    ):
        if before != after:
            said.append(f"{title}: {shown(before)} → {shown(after)}")
    said += _names("Env", new.env_keys, old.env_keys)
    said += _names("Volumes", new.volumes, old.volumes)
    options = (
        ("Memory", _limit(old.memory), _limit(new.memory)),
        ("CPUs", shown(old.cpus or "no limit"), shown(new.cpus or "no limit")),
        ("Restart", old.restart.value, new.restart.value),
        ("Health path", shown(old.health_path), shown(new.health_path)),
        ("Command", shown(old.command), shown(new.command)),
        ("Stop grace", f"{old.stop_grace_seconds} s", f"{new.stop_grace_seconds} s"),
    )
    said += [f"{title}: {before} → {after}" for title, before, after in options if before != after]
    return said or ["No setting changed (env values are not compared)."]


def source_of(build: BuildSpec | None) -> str:
    """Where a revision's image came from, in words: ``image``, ``<url> at <ref>``, or an
    uploaded directory."""
    if build is None:
        return "image"
    if build.git is None:
        return "an uploaded directory"
    return build.git.url + (f" at {build.git.ref}" if build.git.ref else "")


def _build_changes(new: Deployment, old: Deployment) -> list[str]:
    """What a build changed beyond its spec's settings: its source, its commit."""
    said = []
    before, after = source_of(old.spec.build), source_of(new.spec.build)
    if before != after:
        said.append(f"Source: {before} → {after}")
    if new.commit is not None and new.commit != old.commit:
        was = old.commit[:COMMIT_SHOWN] if old.commit else "none"
        said.append(f"Commit: {was} → {new.commit[:COMMIT_SHOWN]}")
    return said


def build_log(deployment: Deployment) -> list[str]:
    """Its build's log: the events of step ``build``, a line each."""
    return [
        line for e in deployment.events if e.step == BUILD_STEP for line in e.message.split("\n")
    ]


def _steps(deployment: Deployment) -> list[DeploymentEvent]:
    """Its events less the app's captured output and the build's output (the build is
    listed by its first event)."""
    steps: list[DeploymentEvent] = []
    built = False
    for e in deployment.events:
        if e.message.startswith(OUTPUT_PREFIX) or (e.step == BUILD_STEP and built):
            continue
        built = built or e.step == BUILD_STEP
        steps.append(e)
    return steps


def _own_host_port(spec: DeploymentSpec) -> int | None:
    """A host port other than the app's port (a change of ``port`` alone moves both)."""
    published = spec.published_port
    return published if published != spec.port else None


def duration(deployment: Deployment, now: datetime) -> str | None:
    """How long the deployment took (or has been running), e.g. ``1 min 5 s``."""
    start = deployment.started_at or deployment.created_at
    end = deployment.finished_at or (None if deployment.state.is_final else now)
    if end is None:
        return None
    seconds = max(0, round((end - start).total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    return f"{minutes} min {seconds} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def captured_output(deployment: Deployment) -> list[str]:
    """The app's output its deployment recorded (after a failed start or health check)."""
    return [
        e.message.removeprefix(OUTPUT_PREFIX)
        for e in deployment.events
        if e.message.startswith(OUTPUT_PREFIX)
    ]


def port_hint(lines: list[str], port: int) -> str | None:
    """When the app's output names a port it listens on other than ``port``: say so."""
    for line in lines:
        for found in _PORT.finditer(line):
            named = int(next(g for g in found.groups() if g))
            if 0 < named < 65536 and named != port:
                return (
                    f"The app logged “{line.strip()[:200]}”; it was deployed with port {port}: "
                    "the port to deploy with is the one the app listens on."
                )
    return None


def revisions(
    deployments: list[Deployment], older: Deployment | None, current: UUID | None, now: datetime
) -> list[Revision]:
    """The page's revision list, newest first; ``older`` is the one before the oldest
    listed (to say what the oldest changed), if there is one."""
    listed = [*deployments, older]
    found = []
    for index, deployment in enumerate(deployments):
        before = listed[index + 1]
        output = captured_output(deployment)
        said = changes(deployment.spec, before.spec if before else None)
        if before is not None and (more := _build_changes(deployment, before)):
            said = [s for s in said if not s.startswith("No setting changed")] + more
        found.append(
            Revision(
                deployment=deployment,
                changes=said,
                duration=duration(deployment, now),
                output=output,
                steps=_steps(deployment),
                build_log=build_log(deployment),
                source=source_of(deployment.spec.build) if deployment.spec.build else None,
                hint=port_hint(output, deployment.spec.port) if output else None,
                current=deployment.id == current,
                can_roll_back=deployment.state is DeploymentState.SUCCEEDED
                and deployment.id != current,
            )
        )
    return found


def log_line(raw: str, query: str = "") -> LogLine:
    """A line as Docker gave it with ``timestamps``: its time split off (to UTC seconds);
    ``matches`` whether it contains ``query`` (case-insensitive; all do for none)."""
    found = _STAMP.match(raw)
    text, at = raw, None
    if found:
        stamp = found[1] + ("+00:00" if found[2] == "Z" else found[2])
        try:
            at = datetime.fromisoformat(stamp).astimezone(UTC).isoformat(timespec="seconds")
            text = found[3]
        except ValueError:
            at = None
    return LogLine(text=text, at=at, matches=query.lower() in text.lower())
