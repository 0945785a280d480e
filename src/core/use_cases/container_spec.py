"""What berth asks Docker for, for a deployment: the container's spec, labels and binds.

Pure functions of the job: the same job always gives the same container, which is
what lets a run that is taken over (or retried) find what an earlier one made.
"""

from __future__ import annotations

from ..models import ContainerSpec, Job
from ..redaction import redact_env
from ..types import check_volume

__all__ = ["APPS_DIR", "LOG_LINES", "binds_for", "container_spec", "labels_for", "scrub"]

APPS_DIR = "/var/lib/berth/apps"
LOG_LINES = 20


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
        host = volume.host_path
        if volume.is_relative:
            host = f"{APPS_DIR}/{job.container_name}" + ("" if host == "." else f"/{host}")
        binds.append(f"{host}:{volume.container_path}" + (":ro" if volume.read_only else ""))
    return tuple(binds)


def container_spec(job: Job, name: str, image: str | None = None) -> ContainerSpec:
    """The container of ``job`` under ``name``: with a domain, published on 127.0.0.1 at a
    port Docker picks (the proxy routes to it); without, on the app's port on every
    interface (``http://server:port``). ``image`` (an image id, for a revision whose tag
    now names another image) replaces the spec's image reference."""
    spec = job.deployment.spec
    return ContainerSpec(
        name=name,
        image=image or spec.image,
        env=job.env,
        container_port=spec.port,
        host_ip="127.0.0.1" if spec.domain else "0.0.0.0",  # noqa: S104
        host_port=None if spec.domain else spec.port,
        binds=binds_for(job),
        labels=labels_for(job),
        memory=spec.memory,
        cpus=spec.cpus,
        restart=spec.restart,
        command=spec.command,
    )


def scrub(lines: list[str], env: dict[str, str]) -> list[str]:
    """Container output may echo env values; they never reach a deployment's events."""
    return [line[:500] for line in redact_env(lines[-LOG_LINES:], env)]
