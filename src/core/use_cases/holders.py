"""A port app's holder: the container that keeps its host port open across redeploys.

An app without a domain publishes a host port. Were its own container to publish it,
each redeploy would take the port down with the old container and Docker would open it
again with the new one -- before the new container's network is wired, so a connection
made in that window waits for the kernel's one-second SYN retransmit
(docs/decisions/2026-11-27-port-holders.md). So the port belongs to a **holder**: a
small long-lived container of berth's own image (it waits for ever) that owns the
app's network namespace and publishes the host port; each container of the app joins
that namespace and publishes nothing. The holder, its network and Docker's proxy stay
up across redeploys, rollbacks, stops and starts: between the old app exiting and the
new one listening, a connection is refused at once (nothing listens), never held.

One holder per mapping (host port -> container port): its name says the mapping, so a
``hostPort`` change makes a new holder beside the old one, which goes once the new
revision serves (or stays, and serves again, if it fails). A holder carries no
``berth.installation`` label: it is never listed, watched or counted as the user's
container; ``berth.holder`` names its installation.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from ..errors import RuntimeFailure, ServerUnreachable
from ..models import ContainerState, HolderSpec, Job
from ..ports import ContainerRuntime
from .container_spec import PORTS_LABEL

__all__ = [
    "HOLDER_LABEL",
    "PORTS_LABEL",
    "HolderLook",
    "Holders",
    "holder_name",
    "host_port_of",
    "look_for_holders",
    "prepare_holder",
    "remove_holders",
]

#: A holder's label: the installation whose port it holds.
HOLDER_LABEL = "berth.holder"


def _mapping(job: Job) -> tuple[int, int]:
    spec = job.deployment.spec
    return spec.published_port or spec.port, spec.port


def holder_name(job: Job) -> str:
    """The holder's container name: the installation's, with the mapping it publishes."""
    host, inside = _mapping(job)
    return f"{job.container_name}.port-{host}-{inside}"


def host_port_of(state: ContainerState) -> int | None:
    """The host port a container answers on: the one it publishes, or for one that joins
    a holder, the one its holder publishes (its ``PORTS_LABEL``)."""
    if state.host_port is not None or state.joins is None:
        return state.host_port
    host, _, _ = state.labels.get(PORTS_LABEL, "").partition(":")
    return int(host) if host.isdigit() else None


@dataclass
class Holders:
    """The installation's holders as a port deployment found and made them: ``mine``
    (the one of the new revision's mapping), whether this run ``made`` it, and the
    ``others`` (other mappings: a ``hostPort`` change)."""

    mine: ContainerState
    made: bool = False
    others: list[ContainerState] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.mine.name


@dataclass(frozen=True)
class HolderLook:
    """What the server has of the installation's holders: those ``found`` by label, and
    the container (if any) with the new revision's holder's name (``clash``)."""

    found: list[ContainerState]
    clash: ContainerState | None


async def look_for_holders(job: Job, docker: ContainerRuntime) -> HolderLook:
    """Ask the server for the installation's holders; both questions at once (on a first
    deployment they are on its critical path). Nothing is changed."""
    found, clash = await asyncio.gather(
        docker.find({HOLDER_LABEL: str(job.installation_id)}), docker.inspect(holder_name(job))
    )
    return HolderLook(found=found, clash=clash)


async def prepare_holder(
    job: Job, docker: ContainerRuntime, labels: dict[str, str], looked: HolderLook
) -> Holders:
    """The installation's holders from what was ``looked`` up, the new revision's created
    (not started) if it is not there; ``RuntimeFailure`` (kind ``holder-unsupported``)
    when the server can have no holder, or when a container that is not this
    installation's holder has its name. ``labels`` are the deployment's
    (``container_spec.labels_for``): the holder takes its berth's and server's, never the
    installation's or the deployment's."""
    name = holder_name(job)
    mine = next((h for h in looked.found if h.name == name), None)
    others = [h for h in looked.found if h.name != name]
    if mine is not None:
        return Holders(mine=mine, others=others)
    if looked.clash is not None:
        raise RuntimeFailure(
            f"A container named {name} exists and is not this installation's port holder; "
            "remove or rename it."
        )
    host, inside = _mapping(job)
    spec = HolderSpec(
        name=name,
        host_ip="0.0.0.0",  # noqa: S104 - an app without a domain answers on every interface
        host_port=host,
        container_port=inside,
        labels={
            "berth.managed": labels["berth.managed"],
            "berth.server": labels["berth.server"],
            HOLDER_LABEL: str(job.installation_id),
            PORTS_LABEL: f"{host}:{inside}",
        },
    )
    holder_id = await docker.create_holder(spec)
    made = ContainerState(
        id=holder_id,
        name=name,
        status="created",
        running=False,
        exit_code=None,
        host_port=None,
        labels=dict(spec.labels),
    )
    return Holders(mine=made, made=True, others=others)


async def remove_holders(
    docker: ContainerRuntime, holders: Iterable[ContainerState], *, keep: Collection[str] = ()
) -> list[ContainerState]:
    """Remove ``holders`` but those ``keep`` names (by name or id; best effort: a failure leaves one
    for the next deployment or the app's removal); the ones removed."""
    gone = []
    for holder in holders:
        if holder.name in keep or holder.id in keep:  # a container joins a holder by either
            continue
        with contextlib.suppress(RuntimeFailure, ServerUnreachable):
            await docker.remove(holder.id)
            gone.append(holder)
    return gone
