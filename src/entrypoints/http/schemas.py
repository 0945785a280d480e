"""The wire format of the public API: msgspec Structs, camelCase on the wire.

Request Structs document the body in OpenAPI; the body itself is checked by
``berth.core.commands.parse_*`` so every broken rule is reported at once.
Responses are built from core models by the ``*_out`` functions — env values
have no field here, so no endpoint can return them.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar
from uuid import UUID

import msgspec
from berth.core import models
from berth.core.results import InstallationUsage, ServerDisk
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
    RegistryHost,
    ServerName,
    Volume,
    authorized_keys_line,
    fingerprints,
)
from berth.core.webhooks import message_id
from litestar import Response
from litestar.serialization import default_serializer
from litestar.types import Serializer

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
    "InstallationStatsOut",
    "ListingResponse",
    "LogsOut",
    "Problem",
    "RegistryListOut",
    "RegistryOut",
    "RegistryRequest",
    "RepinRequest",
    "RollbackRequest",
    "ServerDiskOut",
    "ServerListOut",
    "ServerOut",
    "WebhookCreatedOut",
    "WebhookDeliveryListOut",
    "WebhookDeliveryOut",
    "WebhookListOut",
    "WebhookOut",
    "WebhookRequest",
    "installation_list_out",
    "installation_stats_out",
    "server_disk_out",
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


class RegistryRequest(_Wire, forbid_unknown_fields=True):
    """Credentials for a private registry: a deploy of an image from ``host`` pulls with
    them. The password (or access token) is sealed at rest and never returned."""

    host: RegistryHost
    username: Annotated[
        str,
        msgspec.Meta(
            min_length=1,
            max_length=255,
            pattern=r"^[^:\s\x00-\x1f\x7f-\x9f](?:[^:\x00-\x1f\x7f-\x9f]*[^:\s\x00-\x1f\x7f-\x9f])?$",
            description="The registry user name: no ':', no control characters, no "
            "whitespace around it.",
            examples=["deploy-bot"],
        ),
    ]
    password: Annotated[
        str,
        msgspec.Meta(
            min_length=1,
            max_length=8192,
            pattern=r"^[^\x00]*$",
            description="The password or access token; write-only: never returned or logged.",
            examples=["glpat-xxxxxxxxxxxxxxxxxxxx"],
        ),
    ]


class RegistryOut(_Wire):
    """A saved registry: never its password."""

    id: Annotated[UUID, msgspec.Meta(examples=["8f14e45f-ceea-467f-a0e6-6b2a1f0e3c9d"])]
    host: Annotated[str, msgspec.Meta(examples=["registry.example.com:5000"])]
    username: Annotated[str, msgspec.Meta(examples=["deploy-bot"])]
    created_at: Annotated[datetime, msgspec.Meta(examples=["2026-11-25T03:00:00Z"])]


class RegistryListOut(_Wire):
    """Your registries, by host."""

    registries: list[RegistryOut]


class CreateServerRequest(_Wire, forbid_unknown_fields=True):
    """Register a server. With ``hostKeys`` (and an address) berth reaches it over SSH at
    once; without, it stays pending until its install script enrolls it."""

    name: ServerName
    address: Address | None = None
    ssh_port: Port = 22
    ssh_user: Annotated[str, msgspec.Meta(pattern="^[a-z_][a-z0-9_-]{0,31}$")] = "berth"
    host_keys: Annotated[list[str], msgspec.Meta(min_length=1, max_length=10)] | None = None


_EXAMPLE_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
_EXAMPLE_FINGERPRINT = "SHA256:+DiY3wvvV6TuJJhbpZisF/zLDA0zPMSvHdkr4UvCOqU"


class RepinRequest(_Wire, forbid_unknown_fields=True):
    """Accept the new SSH host key a server offered: its new host public keys (as in
    ``/etc/ssh/ssh_host_*_key.pub``, which must include the offered key) and the
    offered key's fingerprint as you checked it on the server (``ssh-keygen -lf``)."""

    host_keys: Annotated[
        list[str],
        msgspec.Meta(
            min_length=1,
            max_length=10,
            description="OpenSSH public key lines; they replace every pinned key.",
            examples=[[_EXAMPLE_KEY]],
        ),
    ]
    fingerprint: Annotated[
        str,
        msgspec.Meta(
            pattern="^SHA256:[A-Za-z0-9+/]{43}$",
            description="The SHA-256 fingerprint of the key the server offered "
            "(`offeredHostKeyFingerprint`), as OpenSSH prints it.",
            examples=[_EXAMPLE_FINGERPRINT],
        ),
    ]


_Text = Annotated[
    str, msgspec.Meta(min_length=1, max_length=200, pattern="^[^\\x00-\\x1f\\x7f-\\x9f]*$")
]

_EXAMPLE_EVENTS = ["deployment.succeeded", "deployment.failed"]
_WebhookUrl = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=2048,
        pattern="^[Hh][Tt][Tt][Pp][Ss]?://[!-~]+$",
        description="Where events are POSTed: an absolute http or https URL, printable ASCII "
        "(punycode hosts), no user or password, no fragment, at most 2048 characters. "
        "Redirects are not followed.",
        examples=["https://hooks.example.com/berth"],
    ),
]
_WebhookEvents = Annotated[
    list[models.WebhookEvent],
    msgspec.Meta(
        min_length=1,
        max_length=len(models.WebhookEvent),
        extra_json_schema={"uniqueItems": True},
        description="What to be told of, each at most once: `deployment.succeeded`, "
        "`deployment.failed` (also a deployment that `timed_out`), `deployment.canceled`, "
        "`server.offline`, `server.online`.",
        examples=[_EXAMPLE_EVENTS],
    ),
]


class WebhookRequest(_Wire, forbid_unknown_fields=True):
    """A new webhook: berth POSTs each of ``events`` to ``url``, signed (Standard Webhooks)
    with a secret it generates and returns once."""

    url: _WebhookUrl
    events: _WebhookEvents


class EnrollFactsIn(_Wire, forbid_unknown_fields=True):
    """What the server says about itself; every fact is optional (null: unknown)."""

    os: _Text | None = None
    arch: _Text | None = None
    docker_version: _Text | None = None
    cpus: Annotated[int, msgspec.Meta(ge=1, le=1 << 20)] | None = None
    memory_bytes: Annotated[int, msgspec.Meta(ge=1, le=(1 << 63) - 1)] | None = None


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
            description="What went wrong, one URI per kind to branch on: "
            "`urn:berth:problem:<kind>` (the document's enum lists every kind; "
            "``errors.KIND_DOCS`` says what each means).",
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
    host_key_fingerprints: Annotated[
        list[str],
        msgspec.Meta(
            description="SHA-256 fingerprints (OpenSSH format) of the pinned host keys.",
            examples=[[_EXAMPLE_FINGERPRINT]],
        ),
    ]
    offered_host_key: Annotated[
        str | None,
        msgspec.Meta(
            description="With status `host_key_mismatch`: the host key the server offered "
            "instead of a pinned one (berth did not log in). Else null.",
            examples=[_EXAMPLE_KEY],
        ),
    ]
    offered_host_key_fingerprint: Annotated[
        str | None,
        msgspec.Meta(
            description="Its SHA-256 fingerprint: compare it with `ssh-keygen -lf` on the "
            "server, then confirm it with POST /api/agent/servers/{serverId}/host-keys.",
            examples=[_EXAMPLE_FINGERPRINT],
        ),
    ]
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


W = TypeVar("W", bound=msgspec.Struct)


def _copied(source: msgspec.Struct, out: type[W], **computed: Any) -> W:
    """An ``out`` of ``computed`` and, for each of its other fields, the attribute of the
    same name of ``source`` (a tuple as a list, the wire's array)."""
    for name in out.__struct_fields__:
        if name not in computed:
            value = getattr(source, name)
            computed[name] = list(value) if isinstance(value, tuple) else value
    return out(**computed)


def _spec_fields(spec: models.DeploymentSpec) -> dict[str, Any]:
    """``_SpecOut``'s fields of a spec (its tuples as lists)."""
    fields: dict[str, Any] = msgspec.structs.asdict(spec)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}


class TlsOut(_Wire):
    """HTTPS for the app's domain, checked from the server through Caddy after the route
    step: plain HTTP must redirect to HTTPS, then a TLS handshake with the domain as SNI
    must complete (verified against Caddy's own CA for internal names)."""

    state: Annotated[
        models.TlsState,
        msgspec.Meta(
            description="`ready`: HTTPS answers; `pending`: waiting for the ACME "
            "certificate; `error`: the proxy does not serve the domain as it should.",
            examples=["ready"],
        ),
    ]
    reason: Annotated[
        str | None,
        msgspec.Meta(
            description="Why it is pending or an error; null when ready.",
            examples=[None],
        ),
    ]
    issuer: Annotated[
        Literal["acme", "internal"],
        msgspec.Meta(
            description="Who issues the certificate: `acme` (Let's Encrypt) for public "
            "names, `internal` (Caddy's own CA) for localhost, *.localhost, *.local, "
            "*.internal, *.home.arpa and IP addresses (unless BERTH_TLS_ISSUER forces one).",
            examples=["internal"],
        ),
    ]
    checked_at: datetime


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
    tls: Annotated[
        TlsOut | None,
        msgspec.Meta(
            description="With a domain: HTTPS through the proxy as the last deployment's "
            "check found it (null before the first check, and without a domain)."
        ),
    ]


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
    id: Annotated[str, msgspec.Meta(description="The Docker container id.")]
    name: Annotated[str, msgspec.Meta(description="The Docker container name.")]
    image: Annotated[str, msgspec.Meta(description="The image it runs, as Docker names it.")]
    state: Annotated[
        str, msgspec.Meta(description="Docker's state (`running`, `exited`, `created`, …).")
    ]
    status: Annotated[str, msgspec.Meta(description="Docker's status text (`Up 3 minutes`).")]
    created_at: Annotated[
        datetime | None,
        msgspec.Meta(description="When Docker created it (RFC 3339, UTC); null: unknown."),
    ]
    ports: list[PortOut]
    installation_id: Annotated[
        UUID | None,
        msgspec.Meta(
            description="The berth installation it belongs to; null: not managed by berth."
        ),
    ]


class ContainerListOut(_Wire):
    server_id: UUID
    observed_at: datetime | None
    server_status: models.ServerStatus
    containers: list[ContainerOut]


class LogsOut(_Wire):
    installation_id: UUID
    container_id: str | None
    lines: list[str]


class WebhookOut(_Wire):
    """A webhook of yours (its secret is never shown again)."""

    id: UUID
    url: Annotated[str, msgspec.Meta(examples=["https://hooks.example.com/berth"])]
    events: Annotated[list[models.WebhookEvent], msgspec.Meta(examples=[_EXAMPLE_EVENTS])]
    created_at: datetime


class WebhookCreatedOut(WebhookOut):
    """The new webhook with its signing secret: shown this once, keep it."""

    secret: Annotated[
        str,
        msgspec.Meta(
            pattern="^whsec_[A-Za-z0-9+/]+={0,2}$",
            description="The signing secret (Standard Webhooks: `whsec_` + base64 of the key "
            "bytes). Shown only in this answer.",
            examples=["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
        ),
    ]


class WebhookListOut(_Wire):
    webhooks: list[WebhookOut]


class DeliveryAttemptOut(_Wire):
    at: datetime
    status_code: Annotated[
        int | None, msgspec.Meta(description="The endpoint's answer; null: none (see error).")
    ]
    error: Annotated[
        str | None,
        msgspec.Meta(
            description="Why it did not count as delivered (null when it did).",
            examples=["HTTP 500"],
        ),
    ]


class WebhookDeliveryOut(_Wire):
    """One event for the webhook: its `id` is the `webhook-id` header's value after `msg_`
    (the same on every attempt)."""

    id: UUID
    message_id: Annotated[
        str,
        msgspec.Meta(
            description="The `webhook-id` header sent with it.",
            examples=["msg_4f1c6f1e9a0b4d5c8e2f7a6b3c1d0e9f"],
        ),
    ]
    webhook_id: UUID
    event: models.WebhookEvent
    created_at: datetime
    state: Annotated[
        models.DeliveryState,
        msgspec.Meta(
            description="`pending` (an attempt is due at `nextAttemptAt`), `delivered` (a 2xx "
            "answer) or `failed` (every attempt failed)."
        ),
    ]
    attempts: list[DeliveryAttemptOut]
    next_attempt_at: datetime | None
    delivered_at: datetime | None


class WebhookDeliveryListOut(_Wire):
    webhook_id: UUID
    deliveries: list[WebhookDeliveryOut]


def webhook_out(w: models.Webhook) -> WebhookOut:
    return WebhookOut(id=w.id, url=w.url, events=list(w.events), created_at=w.created_at)


def delivery_out(d: models.WebhookDelivery) -> WebhookDeliveryOut:
    return WebhookDeliveryOut(
        id=d.id,
        message_id=message_id(d.id),
        webhook_id=d.webhook_id,
        event=d.event,
        created_at=d.created_at,
        state=d.state,
        attempts=[
            DeliveryAttemptOut(at=a.at, status_code=a.status_code, error=a.error)
            for a in d.attempts
        ],
        next_attempt_at=d.next_attempt_at,
        delivered_at=d.delivered_at,
    )


def _field(description: str, example: object) -> msgspec.Meta:
    return msgspec.Meta(description=description, examples=[example])


class ContainerStatsOut(_Wire):
    """One sample of what a container uses, as `docker stats` shows it."""

    running: Annotated[bool, _field("Whether the container runs (else no figures).", True)]
    cpu_percent: Annotated[
        float | None,
        _field(
            "CPU over about a second, in percent of one CPU (200 is two CPUs busy); null "
            "when not running.",
            12.5,
        ),
    ] = None
    memory_bytes: Annotated[
        int | None,
        _field("Memory in use, without the page cache; null when not running.", 50331648),
    ] = None
    memory_limit_bytes: Annotated[
        int | None,
        _field(
            "Its memory limit (the server's memory when it has none); null when not running.",
            536870912,
        ),
    ] = None


class InstallationStatsOut(_Wire):
    """An installation's container (its running one, else its newest) and what it uses."""

    installation_id: Annotated[
        UUID, _field("The installation.", "0f8b6a52-3c1e-4b8e-9a51-6d2c7e1f4a90")
    ]
    container_id: Annotated[
        str | None,
        _field(
            "Its container; null when it has none (never deployed, or removed).", "4f1c2a9e7b3d"
        ),
    ]
    stats: Annotated[
        ContainerStatsOut | None, msgspec.Meta(description="Null when it has no container.")
    ]


class DiskUsageOut(_Wire):
    """What Docker keeps on the server's disk (`docker system df`), in bytes."""

    images: Annotated[int, _field("Images on the server.", 12)]
    images_bytes: Annotated[int, _field("Their layers, each shared layer counted once.", 734003200)]
    containers: Annotated[int, _field("Containers, running or not.", 5)]
    containers_bytes: Annotated[int, _field("Their writable layers.", 1048576)]
    volumes: Annotated[int, _field("Volumes.", 2)]
    volumes_bytes: Annotated[int, _field("Their contents (unmeasured ones count 0).", 20971520)]
    build_cache_bytes: Annotated[int, _field("Docker's build cache.", 0)]
    total_bytes: Annotated[int, _field("All of the above.", 756023296)]


class ServerDiskOut(_Wire):
    """A server's Docker disk usage, asked now."""

    server_id: Annotated[UUID, _field("The server.", "8d3e5f7a-1b2c-4d6e-9f08-a1b2c3d4e5f6")]
    usage: DiskUsageOut


def installation_stats_out(result: InstallationUsage) -> InstallationStatsOut:
    stats = result.stats
    return InstallationStatsOut(
        installation_id=result.installation_id,
        container_id=result.container_id,
        stats=None if stats is None else _copied(stats, ContainerStatsOut),
    )


def server_disk_out(result: ServerDisk) -> ServerDiskOut:
    return ServerDiskOut(server_id=result.server_id, usage=_copied(result.usage, DiskUsageOut))


class Health(_Wire):
    status: str


class Readiness(_Wire):
    """Ready: the store answered; ``database`` says which kind berth stores its data in."""

    status: str
    database: Literal["sqlite", "postgresql"]


def registry_out(r: models.Registry) -> RegistryOut:
    return RegistryOut(id=r.id, host=r.host, username=r.username, created_at=r.created_at)


def server_out(s: models.Server) -> ServerOut:
    offered = (s.offered_host_key,) if s.offered_host_key else ()
    return _copied(
        s,
        ServerOut,
        host_key_fingerprints=fingerprints(s.host_keys),
        offered_host_key_fingerprint=next(iter(fingerprints(offered)), None),
        authorized_keys_line=authorized_keys_line(s.public_key) if s.public_key else None,
        facts=_copied(s.facts, FactsOut),
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
    return list(_listings.get(server, installations).installations)


def installation_list_out(
    server: models.Server, installations: list[models.Installation]
) -> InstallationListOut:
    """The listing's wire form: the very same object while the store hands out the same
    server and installation objects (see ``_ListingMemo``), so ``ListingResponse``
    encodes it once. Not to be changed: it is shared."""
    return _listings.get(server, installations)


class ListingResponse(Response[InstallationListOut]):
    """A listing's response whose body is rendered once per memo entry: the bytes
    ``Response`` renders, kept beside the entry (encoding 100 installations was a
    seventh of the time of ``GET /install``)."""

    def render(
        self, content: Any, media_type: str, enc_hook: Serializer = default_serializer
    ) -> bytes:
        render = super().render
        return _listings.body(content, lambda out: render(out, media_type, enc_hook))


class _ListingMemo:
    """The wire form of recent listings, by the identity of the objects it was built from.

    Core models are frozen, so a listing's ``InstallationListOut`` is a pure
    function of its server object and installation objects. The SQL store's read
    cache hands out the very same objects until anything is committed, so the
    wire form is built once rather than on every request (it was most of the
    cost of serving one), and its JSON encoded once (``body``). A hit needs the
    same server object and the same installation objects in the same order; an
    entry holds them all, so no other object can take their ids while it is here.
    Bounded (listings and their installations), oldest out; a store without the
    read cache (PostgreSQL) simply always misses. Single event loop, like the app.
    """

    def __init__(self, max_listings: int, max_installations: int) -> None:
        self._max_listings = max_listings
        self._max_installations = max_installations
        self._held = 0
        self._entries: dict[
            int, tuple[models.Server, tuple[models.Installation, ...], InstallationListOut]
        ] = {}
        #: The entries' listings and the encoded bodies of some, by the listing's id
        #: (the entry holds the listing, so the id stays its own); dropped with it.
        self._listings: dict[int, InstallationListOut] = {}
        self._bodies: dict[int, bytes] = {}

    def get(
        self, server: models.Server, installations: list[models.Installation]
    ) -> InstallationListOut:
        entry = self._entries.get(id(server))
        if (
            entry is not None
            and entry[0] is server
            and len(entry[1]) == len(installations)
            and all(map(operator.is_, entry[1], installations))
        ):
            return entry[2]
        prefix = _port_url_prefix(server)
        out = InstallationListOut(
            server_id=server.id,
            installations=[_installation_out(prefix, i) for i in installations],
        )
        held = len(installations)
        if held <= self._max_installations:
            self._drop(id(server))
            while self._entries and (
                len(self._entries) >= self._max_listings
                or self._held + held > self._max_installations
            ):
                self._drop(next(iter(self._entries)))
            self._entries[id(server)] = (server, tuple(installations), out)
            self._listings[id(out)] = out
            self._held += held
        return out

    def body(
        self, out: InstallationListOut, encode: Callable[[InstallationListOut], bytes]
    ) -> bytes:
        """``encode(out)``, kept while ``out`` is an entry's listing."""
        found = self._bodies.get(id(out))
        if found is not None:
            return found
        encoded = encode(out)
        if self._listings.get(id(out)) is out:
            self._bodies[id(out)] = encoded
        return encoded

    def _drop(self, key: int) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._held -= len(entry[1])
            del self._listings[id(entry[2])]
            self._bodies.pop(id(entry[2]), None)


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
        tls=(
            TlsOut(
                state=i.tls.state,
                reason=i.tls.reason,
                issuer="internal" if i.tls.issuer == "internal" else "acme",
                checked_at=i.tls.checked_at,
            )
            if i.tls is not None and spec.domain is not None
            else None
        ),
    )


def deployment_out(d: models.Deployment) -> DeploymentOut:
    return _copied(
        d,
        DeploymentOut,
        **_spec_fields(d.spec),
        events=[EventOut(at=e.at, step=e.step, message=e.message) for e in d.events],
    )


def container_out(c: models.Container) -> ContainerOut:
    """The wire form of a container: the same fields (``ContainerOut`` mirrors the model)."""
    return msgspec.convert(c, ContainerOut, from_attributes=True)
