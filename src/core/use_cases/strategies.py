"""How a deployment replaces what runs: the two strategies.

* An app without a domain has one host port: its container is created under the
  installation's name (clearing a leftover of that name) and started in place.
* An app with a domain is replaced without downtime: the new container starts beside
  the old one (under a temporary name, on an ephemeral ``127.0.0.1`` port), the proxy
  is switched to it only once it answers, and the old one is drained, then removed.
  Until the switch, a failure removes the new container alone: the old one keeps
  serving.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from ..models import ContainerState, Job, ProxyRoute
from ..ports import ContainerRuntime, ServerConnection
from .container_spec import container_spec
from .steps import StepFailed, Steps

__all__ = ["deploy_domain_app", "deploy_port_app"]

log = structlog.get_logger()


async def deploy_port_app(s: Steps, job: Job, conn: ServerConnection) -> tuple[str, int]:
    """Create the container under the installation's name, start it, wait until it answers."""
    docker = conn.docker
    await s.enter(job, "create", f"Creating container {job.container_name}.")
    await s.step(job, "create", s.timeouts.create, s.clear_name(job, docker))
    container_id = await s.step(
        job,
        "create",
        s.timeouts.create,
        docker.create(container_spec(job, job.container_name)),
    )
    port = await s.checked(job, docker, container_id, s.start_healthy(job, conn, container_id))
    await s.jobs.set_host_port(job.deployment.id, port)
    return container_id, port


async def deploy_domain_app(
    s: Steps, job: Job, conn: ServerConnection, domain: str
) -> tuple[str, int]:
    """The zero-downtime path of an app with a domain: create and check the new
    container beside the old one, switch the route, then retire the old one."""
    docker = conn.docker
    temporary = f"{job.container_name}-{job.deployment.id.hex[:8]}"
    await s.enter(job, "create", f"Creating container {temporary} beside the current one.")
    previous = await s.step(job, "create", s.timeouts.create, _previous(s, job, docker))
    container_id = await s.step(
        job,
        "create",
        s.timeouts.create,
        docker.create(container_spec(job, temporary)),
    )

    async def start_and_switch() -> int:
        port = await s.start_healthy(job, conn, container_id)
        await _switch(s, job, conn, domain, port, previous)
        return port

    port = await s.checked(job, docker, container_id, start_and_switch())
    await _retire(s, job, conn, container_id, previous)
    return container_id, port


async def _previous(s: Steps, job: Job, docker: ContainerRuntime) -> list[ContainerState]:
    """The installation's current containers (left running); refuse if a container
    that is not the installation's holds its name."""
    previous = await docker.find({"berth.installation": str(job.installation_id)})
    clash = await docker.inspect(job.container_name)
    if clash is not None and clash.labels.get("berth.installation") != str(job.installation_id):
        raise StepFailed(
            "create",
            f"A container named {job.container_name} exists and is not this "
            "installation's; remove or rename it.",
        )
    return previous


async def _switch(
    s: Steps,
    job: Job,
    conn: ServerConnection,
    domain: str,
    port: int,
    previous: list[ContainerState],
) -> None:
    """Step ``route``: record the new port, then load the server's routes with it.

    On failure the old port is recorded again and the proxy is put back (best
    effort: the monitor converges it otherwise)."""
    await s.enter(job, "route", f"Routing {domain} to port {port}.")
    if s.routes is None:
        raise StepFailed("route", "This worker has no route table; it cannot route domains.")
    routes = s.routes
    old_port = next((c.host_port for c in previous if c.running), None)
    await s.jobs.set_host_port(job.deployment.id, port)
    try:
        await s.proxy_step(
            job,
            "route",
            s.timeouts.route,
            routes.apply(
                job.server.id,
                conn.proxy,
                expect=ProxyRoute(domain=domain, upstream_port=port),
            ),
        )
    except (StepFailed, asyncio.CancelledError):  # stopped mid-switch too: put it back
        with contextlib.suppress(Exception):
            async with asyncio.timeout(s.timeouts.route):
                await s.jobs.set_host_port(job.deployment.id, old_port)
                await routes.apply(job.server.id, conn.proxy)
        raise
    await s.event(job, "route", f"The proxy sends {domain} to port {port}.")


async def _retire(
    s: Steps,
    job: Job,
    conn: ServerConnection,
    container_id: str,
    previous: list[ContainerState],
) -> None:
    """Step ``retire``: drain and remove the old containers, then give the new one the
    installation's name. The new container already serves, so a failure here is
    an event, not a failed deployment (the next deployment removes what is left)."""
    docker = conn.docker
    old = [c for c in previous if c.id != container_id]
    await s.enter(
        job,
        "retire",
        f"Draining {len(old)} previous container(s) for {s.drain:g} s."
        if old
        else "No previous container to retire.",
    )
    try:
        if old:
            await asyncio.sleep(s.drain)
            if s.routes is not None and await s.proxy_step(
                job,
                "retire",
                s.timeouts.retire,
                s.routes.converge(job.server.id, conn.proxy),
            ):
                await s.event(
                    job, "retire", "The proxy's configuration had changed; loaded it again."
                )
            for container in old:
                await s.step(job, "retire", s.timeouts.retire, docker.remove(container.id))
                await s.event(job, "retire", f"Removed previous container {container.id[:12]}.")
        await s.step(
            job,
            "retire",
            s.timeouts.retire,
            docker.rename(container_id, job.container_name),
        )
    except StepFailed as failed:
        await s.event(job, "retire", f"Not finished: {failed.reason}")
