"""What berth asks Docker for, for a deployment: the container's spec, labels and binds.

Pure functions of the job: the same job always gives the same container, which is
what lets a run that is taken over (or retried) find what an earlier one made.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..models import ContainerSpec, Job
from ..redaction import redact_env
from ..types import RuleError, VolumeSpec, check_volume, guarded_host_path

__all__ = [
    "APPS_DIR",
    "BERTH_DATA",
    "LOG_LINES",
    "PORTS_LABEL",
    "binds_for",
    "container_spec",
    "labels_for",
    "refused_volumes",
    "scrub",
]

APPS_DIR = "/var/lib/berth/apps"
LOG_LINES = 20
#: The mapping (``<host port>:<container port>``) a port holder publishes, and the one a
#: container that joins a holder was deployed with (``holders``).
PORTS_LABEL = "berth.ports"
#: What berth's own paths on this machine hold, as a refusal names it.
BERTH_DATA = "berth's own data (its database and the key that seals every secret)"


def host_path_of(volume: VolumeSpec, container_name: str) -> str:
    """Where the volume is on the server: relative host paths live under the
    installation's data dir."""
    if not volume.is_relative:
        return volume.host_path
    rel = volume.host_path
    return f"{APPS_DIR}/{container_name}" + ("" if rel == "." else f"/{rel}")


def refused_volumes(
    volumes: Sequence[str], container_name: str, berth_paths: Sequence[str] = ()
) -> list[tuple[int, str]]:
    """``(index, why)`` of each volume a server must not get: one today's rules refuse
    (a revision stored before a rule was made is checked again), or, on the server that
    is this machine, one that is, lies in or holds one of ``berth_paths`` (berth's data
    dir and database)."""
    guarded = [(path, BERTH_DATA) for path in berth_paths]
    refused = []
    for i, raw in enumerate(volumes):
        try:
            volume = check_volume(raw)
        except RuleError as exc:
            refused.append((i, str(exc)))
            continue
        why = guarded_host_path(host_path_of(volume, container_name), guarded)
        if why is not None:
            refused.append((i, f"{why} On this machine's server no app may mount it."))
    return refused


def labels_for(job: Job) -> dict[str, str]:
    """Every container berth creates says whose it is: berth's, which server's (so that the
    install script's ``--purge`` removes only that server's), which installation's and
    which deployment's."""
    return {
        "berth.managed": "true",
        "berth.server": str(job.server.id),
        "berth.installation": str(job.installation_id),
        "berth.deployment": str(job.deployment.id),
    }


def binds_for(job: Job) -> tuple[str, ...]:
    """Docker ``Binds``; relative host paths live under the installation's data dir."""
    binds = []
    for raw in job.deployment.spec.volumes:
        volume = check_volume(raw)
        host = host_path_of(volume, job.container_name)
        binds.append(f"{host}:{volume.container_path}" + (":ro" if volume.read_only else ""))
    return tuple(binds)


def container_spec(
    job: Job, name: str, image: str | None = None, *, joins: str | None = None
) -> ContainerSpec:
    """The container of ``job`` under ``name``: with a domain, published on 127.0.0.1 at a
    port Docker picks (the proxy routes to it); without, on its host port (``hostPort``,
    by default the app's port) on every interface (``http://server:port``) -- through the
    port holder it ``joins`` when given (``holders``): then it publishes nothing itself and
    its ``berth.ports`` label says the mapping. ``image`` (an image id, for a revision
    whose tag now names another image) replaces the spec's image reference."""
    spec = job.deployment.spec
    labels = labels_for(job)
    if joins is not None:
        labels[PORTS_LABEL] = f"{spec.published_port}:{spec.port}"
    return ContainerSpec(
        name=name,
        image=image or spec.image,
        env=job.env,
        container_port=spec.port,
        host_ip="127.0.0.1" if spec.domain else "0.0.0.0",  # noqa: S104
        host_port=spec.published_port,
        binds=binds_for(job),
        labels=labels,
        memory=spec.memory,
        cpus=spec.cpus,
        restart=spec.restart,
        command=spec.command,
        joins=joins,
    )


def scrub(lines: list[str], env: dict[str, str]) -> list[str]:
    """Container output may echo env values; they never reach a deployment's events."""
    return [line[:500] for line in redact_env(lines[-LOG_LINES:], env)]
