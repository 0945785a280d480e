"""The wire format of the public API: msgspec Structs, camelCase on the wire.

Request Structs document the body in OpenAPI; the body itself is checked by
``berth.core.commands.parse_*`` so every broken rule is reported at once.
Responses are built from core models by the ``*_out`` functions — env values
have no field here, so no endpoint can return them.
"""

from __future__ import annotations

import operator
from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

import msgspec
from berth.core import models
from berth.core.types import (
    Address,
    AppName,
    CommandArg,
    Cpus,
    Domain,
    EnvKey,
    EnvValue,
    HealthPath,
    ImageRef,
    MemoryLimit,
    Port,
    ServerName,
    Volume,
    authorized_keys_line,
)

__all__ = [
    "ContainerListOut",
    "CreateServerRequest",
    "CreatedServerOut",
    "DeployOut",
    "DeployRequest",
    "DeploymentListOut",
    "DeploymentOut",
    "EnrollFactsIn",
    "EnrollRequest",
    "EnrolledOut",
    "EnrollmentStatusOut",
    "InstallationListOut",
    "InstallationOut",
    "LogsOut",
    "Problem",
    "RollbackRequest",
    "ServerListOut",
    "ServerOut",
]


class _Wire(msgspec.Struct, rename="camel", kw_only=True):
    pass


class DeployRequest(_Wire, forbid_unknown_fields=True):
    """Deploy or redeploy an app (by name) on one of your servers."""

    server_id: UUID
    name: AppName
    image: ImageRef
    port: Port = 3000
    domain: Domain | None = None
    # ``null`` means "none", as for domain: the core parser accepts it, so must this.
    env: (
        Annotated[
            dict[EnvKey, EnvValue], msgspec.Meta(max_length=200, description="Env variables.")
        ]
        | None
    ) = None
    volumes: Annotated[list[Volume], msgspec.Meta(max_length=100)] | None = None
    memory: MemoryLimit | None = None
    cpus: Cpus | None = None
    restart: models.RestartPolicy = models.RestartPolicy.UNLESS_STOPPED
    health_path: HealthPath | None = None
    command: (
        Annotated[
            list[CommandArg],
            msgspec.Meta(
                min_length=1,
                max_length=100,
                description="argv replacing the image's CMD; never a shell string.",
                examples=[["node", "server.js", "--port", "3000"]],
            ),
        ]
        | None
    ) = None


class RollbackRequest(_Wire, forbid_unknown_fields=True):
    """Which revision to go back to."""

    deployment_id: (
        Annotated[
            UUID,
            msgspec.Meta(
                description=(
                    "A succeeded deployment of this installation. Default: the revision "
                    "before the current one."
                )
            ),
        ]
        | None
    ) = None


class CreateServerRequest(_Wire, forbid_unknown_fields=True):
    """Register a server. With ``hostKeys`` (and an address) berth reaches it over SSH at
    once; without, it stays pending until its install script enrolls it."""

    name: ServerName
    address: Address | None = None
    ssh_port: Port = 22
    ssh_user: Annotated[str, msgspec.Meta(pattern="^[a-z_][a-z0-9_-]{0,31}$")] = "berth"
    host_keys: Annotated[list[str], msgspec.Meta(max_length=10)] | None = None


_Text = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class EnrollFactsIn(_Wire, forbid_unknown_fields=True):
    """What the server says about itself; every fact is optional (null: unknown)."""

    os: _Text | None = None
    arch: _Text | None = None
    docker_version: _Text | None = None
    cpus: Annotated[int, msgspec.Meta(ge=1)] | None = None
    memory_bytes: Annotated[int, msgspec.Meta(ge=1)] | None = None


class EnrollRequest(_Wire, forbid_unknown_fields=True):
    """The server's SSH host public keys (as in ``/etc/ssh/ssh_host_*_key.pub``; pinned
    before berth first connects), the SSH port berth should connect to (default: the
    server's), and its facts."""

    host_keys: Annotated[list[str], msgspec.Meta(min_length=1, max_length=10)]
    ssh_port: Port | None = None
    facts: EnrollFactsIn | None = None


class EnrolledOut(_Wire):
    """The enrolled server: authorize ``authorizedKeysLine`` for ``sshUser``."""

    server_id: UUID
    ssh_user: str
    public_key: str | None
    authorized_keys_line: str | None
    status: models.ServerStatus


class EnrollmentStatusOut(_Wire):
    """Only what the waiting install script needs; nothing else about the server."""

    server_id: UUID
    status: models.ServerStatus
    status_detail: str | None
    ssh_port: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            le=65535,
            description="The port berth connects to; the script refuses to register another "
            "when it is not 22 (the port given when the server was added).",
            examples=[22],
        ),
    ]


class ProblemField(_Wire):
    location: str
    message: str
    value: Any = None


class Problem(_Wire):
    """RFC 9457 problem details, with one ``errors`` entry per invalid field (and, for a
    conflict caused by one input, that input: ``body.port`` when the host port is taken)."""

    type: Annotated[
        str,
        msgspec.Meta(
            pattern="^urn:berth:problem:[a-z-]+$",
            description="What went wrong, one URI per kind to branch on: urn:berth:problem: "
            "followed by one of bad-json, bad-request, body-too-large, conflict, "
            "deployment-finished, deployment-running, domain-in-use, forbidden, "
            "host-key-mismatch, idempotency-key-reused, installation-removed, internal-error, "
            "invalid-input, method-not-allowed, not-found, port-in-use, rate-limited, "
            "revision-unavailable, runtime-failure, server-pending, server-removed, "
            "server-unreachable, store-unavailable, unauthorized, unsupported-media-type.",
        ),
    ]
    title: str
    status: int
    detail: str
    errors: list[ProblemField]  # required: empty unless 422
    request_id: str | None  # required: also sent as X-Request-Id


class FactsOut(_Wire):
    os: str | None
    arch: str | None
    docker_version: str | None
    cpus: int | None
    memory_bytes: int | None


class ServerOut(_Wire):
    id: UUID
    name: str
    transport: models.Transport
    address: str | None
    ssh_port: int
    ssh_user: str
    status: models.ServerStatus
    status_detail: str | None
    created_at: datetime
    last_seen_at: datetime | None
    facts: FactsOut
    host_keys: list[str]
    public_key: str | None
    authorized_keys_line: str | None


class ServerListOut(_Wire):
    servers: list[ServerOut]


class CreatedServerOut(ServerOut):
    enrollment_token: str
    enrollment_expires_at: datetime
    install_command: str


class DeploymentRefOut(_Wire):
    id: UUID
    state: models.DeploymentState
    finished_at: datetime | None


class _SpecOut(_Wire):
    """What an app runs (its ``DeploymentSpec``); env values have no field."""

    image: str
    port: int
    domain: str | None
    env_keys: list[str]
    volumes: list[str]
    memory: int | None
    cpus: float | None
    restart: models.RestartPolicy
    health_path: str | None
    command: list[str] | None


def _spec_fields(spec: models.DeploymentSpec) -> dict[str, Any]:
    """``_SpecOut``'s fields of a spec (its tuples as lists)."""
    fields: dict[str, Any] = msgspec.structs.asdict(spec)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}


class InstallationOut(_SpecOut):
    id: UUID
    server_id: UUID
    name: str
    container_name: str
    url: str | None
    status: models.InstallationStatus
    created_at: datetime
    updated_at: datetime
    last_deployment: DeploymentRefOut | None
    current_deployment_id: UUID | None
    removed_at: datetime | None
    stopped_at: datetime | None


class InstallationListOut(_Wire):
    server_id: UUID
    installations: list[InstallationOut]


class EventOut(_Wire):
    at: datetime
    step: str
    message: str


class DeploymentOut(_SpecOut):
    id: UUID
    installation_id: UUID
    server_id: UUID
    state: models.DeploymentState
    step: str | None
    error: str | None
    image_id: str | None
    rollback_of: UUID | None
    attempts: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    events: list[EventOut]


class DeploymentListOut(_Wire):
    installation_id: UUID
    deployments: list[DeploymentOut]
    next_before: UUID | None


class DeployOut(_Wire):
    deployment: DeploymentOut
    installation: InstallationOut


class PortOut(_Wire):
    container_port: int
    host_ip: str | None
    host_port: int | None
    protocol: str


class ContainerOut(_Wire):
    id: str
    name: str
    image: str
    state: str
    status: str
    created_at: datetime | None
    ports: list[PortOut]
    installation_id: UUID | None


class ContainerListOut(_Wire):
    server_id: UUID
    observed_at: datetime | None
    server_status: models.ServerStatus
    containers: list[ContainerOut]


class LogsOut(_Wire):
    installation_id: UUID
    container_id: str | None
    lines: list[str]


class Health(_Wire):
    status: str


def server_out(s: models.Server) -> ServerOut:
    return ServerOut(
        id=s.id,
        name=s.name,
        transport=s.transport,
        address=s.address,
        ssh_port=s.ssh_port,
        ssh_user=s.ssh_user,
        status=s.status,
        status_detail=s.status_detail,
        created_at=s.created_at,
        last_seen_at=s.last_seen_at,
        host_keys=list(s.host_keys),
        public_key=s.public_key,
        authorized_keys_line=authorized_keys_line(s.public_key) if s.public_key else None,
        facts=FactsOut(
            os=s.facts.os,
            arch=s.facts.arch,
            docker_version=s.facts.docker_version,
            cpus=s.facts.cpus,
            memory_bytes=s.facts.memory_bytes,
        ),
    )


def app_url(server: models.Server, inst: models.Installation) -> str | None:
    """Where a person reaches the app: its domain over HTTPS, else the server's port."""
    return _app_url(_port_url_prefix(server), inst)


def _port_url_prefix(server: models.Server) -> str | None:
    """``http://<address>:`` (IPv6 in brackets), to which an app's port is appended."""
    if server.address is None:
        return None
    host = f"[{server.address}]" if ":" in server.address else server.address
    return f"http://{host}:"


def _app_url(port_url_prefix: str | None, inst: models.Installation) -> str | None:
    if inst.removed_at is not None:  # nothing serves it any more
        return None
    domain = inst.spec.domain
    if domain:
        return f"https://{domain}"
    if port_url_prefix is None:
        return None
    return f"{port_url_prefix}{inst.spec.port}"


def installation_out(server: models.Server, i: models.Installation) -> InstallationOut:
    return _installation_out(_port_url_prefix(server), i)


def installations_out(
    server: models.Server, installations: list[models.Installation]
) -> list[InstallationOut]:
    """``installation_out`` of each, in order: the listing's hot path (see ``_ListingMemo``)."""
    return _listings.get(server, installations)


class _ListingMemo:
    """The wire form of recent listings, by the identity of the objects it was built from.

    Core models are frozen, so a listing's ``InstallationOut`` list is a pure
    function of its server object and installation objects. The SQL store's read
    cache hands out the very same objects until anything is committed, so the
    wire form is built once rather than on every request (it was most of the
    cost of serving one). A hit needs the same server object and the same
    installation objects in the same order; an entry holds them all, so no other
    object can take their ids while it is here. Bounded (listings and their
    installations), oldest out; a store without the read cache (PostgreSQL)
    simply always misses. Single event loop, like the app.
    """

    def __init__(self, max_listings: int, max_installations: int) -> None:
        self._max_listings = max_listings
        self._max_installations = max_installations
        self._held = 0
        self._entries: dict[
            int, tuple[models.Server, tuple[models.Installation, ...], list[InstallationOut]]
        ] = {}

    def get(
        self, server: models.Server, installations: list[models.Installation]
    ) -> list[InstallationOut]:
        entry = self._entries.get(id(server))
        if (
            entry is not None
            and entry[0] is server
            and len(entry[1]) == len(installations)
            and all(map(operator.is_, entry[1], installations))
        ):
            return list(entry[2])
        prefix = _port_url_prefix(server)
        outs = [_installation_out(prefix, i) for i in installations]
        if len(outs) <= self._max_installations:
            self._drop(id(server))
            while self._entries and (
                len(self._entries) >= self._max_listings
                or self._held + len(outs) > self._max_installations
            ):
                self._drop(next(iter(self._entries)))
            self._entries[id(server)] = (server, tuple(installations), outs)
            self._held += len(outs)
        return list(outs)

    def _drop(self, key: int) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._held -= len(entry[2])


_listings = _ListingMemo(max_listings=64, max_installations=2_000)


def _installation_out(port_url_prefix: str | None, i: models.Installation) -> InstallationOut:
    spec = i.spec
    last = i.last_deployment
    return InstallationOut(
        id=i.id,
        server_id=i.server_id,
        name=i.name,
        container_name=i.container_name,
        url=_app_url(port_url_prefix, i),
        **_spec_fields(spec),
        status=i.status,
        created_at=i.created_at,
        updated_at=i.updated_at,
        last_deployment=(
            DeploymentRefOut(id=last.id, state=last.state, finished_at=last.finished_at)
            if last is not None
            else None
        ),
        current_deployment_id=i.current_deployment_id,
        removed_at=i.removed_at,
        stopped_at=i.stopped_at,
    )


def deployment_out(d: models.Deployment) -> DeploymentOut:
    return DeploymentOut(
        id=d.id,
        installation_id=d.installation_id,
        server_id=d.server_id,
        state=d.state,
        step=d.step,
        error=d.error,
        **_spec_fields(d.spec),
        image_id=d.image_id,
        rollback_of=d.rollback_of,
        attempts=d.attempts,
        created_at=d.created_at,
        started_at=d.started_at,
        finished_at=d.finished_at,
        events=[EventOut(at=e.at, step=e.step, message=e.message) for e in d.events],
    )


def container_out(c: models.Container) -> ContainerOut:
    """The wire form of a container: the same fields (``ContainerOut`` mirrors the model)."""
    return msgspec.convert(c, ContainerOut, from_attributes=True)
