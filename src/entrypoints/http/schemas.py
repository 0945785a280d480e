"""The wire format of the public API: msgspec Structs, camelCase on the wire.

Each field says what it means and shows an example (``doc``: ``msgspec.Meta``), so the
OpenAPI document describes every body from the Structs themselves. Request bodies are
read by ``inputs.JsonBody``: the core's ``parse_*`` checks them (every broken rule at
once) into the command ``BODIES`` names. Responses are built from core models by the
``*_out`` functions — env values have no field here, so no endpoint can return them.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal, TypeVar
from uuid import UUID

import msgspec
from berth.core import access, models, teams
from berth.core import commands as c
from berth.core.builds import (
    BUILD_PATH_MAX,
    BUILD_PATH_PATTERN,
    GIT_REF_MAX,
    GIT_REF_PATTERN,
    TARGET_MAX,
    TARGET_PATTERN,
)
from berth.core.results import (
    ContainerList,
    DeploymentPage,
    DeployResult,
    InstallationUsage,
    Logs,
    PushOutcome,
    ServerDisk,
)
from berth.core.types import (
    COMMAND_ARG_MAX,
    ENV_VALUE_PATTERN,
    REGISTRY_PASSWORD_MAX,
    REGISTRY_USERNAME_MAX,
    Address,
    AppName,
    CommandArg,
    Cpus,
    Domain,
    EnvKey,
    EnvValue,
    GitHost,
    HealthPath,
    ImageRef,
    MemoryLimit,
    Port,
    RegistryHost,
    ServerName,
    Volume,
    also_matching,
    authorized_keys_line,
    fingerprints,
)
from berth.core.webhooks import HTTP_URL_PATTERN, URL_MAX, message_id
from litestar import Response
from litestar.serialization import default_serializer
from litestar.types import Serializer

__all__ = [
    "BODIES",
    "EXAMPLE_IDS",
    "Body",
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
    "ServerListResponse",
    "ServerOut",
    "SourceOut",
    "WebhookCreatedOut",
    "WebhookDeliveryListOut",
    "WebhookDeliveryOut",
    "WebhookListOut",
    "WebhookOut",
    "WebhookRequest",
    "WebhookTestOut",
    "installation_list_out",
    "installation_stats_out",
    "server_disk_out",
    "server_list_out",
    "servers_out",
    "source_out",
]


def doc(description: str, *examples: object) -> msgspec.Meta:
    """A field's meaning and an example of it, for the document."""
    return msgspec.Meta(description=description, examples=list(examples) or None)


class _Wire(msgspec.Struct, rename="camel", kw_only=True):
    pass


class _Request(_Wire, forbid_unknown_fields=True):
    pass


_SERVER = "5b0c3a4e-8f1d-4c2a-9e57-0d6b1f2a3c4d"
_INSTALLATION = "9a7e6b5c-4d3e-4f2a-8b1c-0e9d8c7b6a5f"
_DEPLOYMENT = "1f2e3d4c-5b6a-4789-8a0b-c1d2e3f4a5b6"
#: The example of each path id, by its name: one id per kind of thing in the document.
EXAMPLE_IDS = {"serverId": _SERVER, "installationId": _INSTALLATION, "deploymentId": _DEPLOYMENT}
_WEBHOOK = "3c2b1a09-8f7e-4d6c-9b5a-a4b3c2d1e0f9"
#: A user name for HTTP basic auth (a registry's, a Git host's): printable, no ':'.
_USERNAME_PATTERN = (
    r"^[^:\s\x00-\x1f\x7f-\x9f](?:[^:\x00-\x1f\x7f-\x9f]*[^:\s\x00-\x1f\x7f-\x9f])?$"
)
_HOOK = "7b6a5c4d-3e2f-4a1b-9c8d-e7f6a5b4c3d2"
_AT = "2026-01-15T09:30:00Z"
_DONE = "2026-01-15T09:30:04Z"
_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
_HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHc5xY0mS3V5aZ4dTq3nWb6kP0s1Lr8cF2eJ9uXyQ7Gv"
_FINGERPRINT = "SHA256:+DiY3wvvV6TuJJhbpZisF/zLDA0zPMSvHdkr4UvCOqU"
_PUBLIC_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK2n8xQmVb7cW1dR5tY9uH3jL6pS0aE4fG8kM2zN7oPq berth"
)
_CONTAINER = "3f4e5d6c7b8a9f0e1d2c3b4a5f6e7d8c9b0a1f2e3d4c5b6a7f8e9d0c1b2a3f4e"
_EVENTS = ["deployment.succeeded", "deployment.failed"]

# Fields that mean the same wherever they appear.
_ServerId = Annotated[UUID, doc("The server's id (UUID).", _SERVER)]
_InstallationId = Annotated[UUID, doc("The installation's id (UUID).", _INSTALLATION)]
_DeploymentId = Annotated[UUID, doc("The deployment's id (UUID).", _DEPLOYMENT)]
_CreatedAt = Annotated[datetime, doc("When it was created (RFC 3339, UTC).", _AT)]
_FinishedAt = Annotated[
    datetime | None, doc("When it reached its final state (RFC 3339, UTC); null until then.", _DONE)
]
_SshUser = Annotated[
    str, doc("The user berth connects as (`berth`, created by the install script).", "berth")
]
_PublicKey = Annotated[
    str | None,
    doc(
        "The public half of the key pair berth holds for this server (OpenSSH format); null "
        "until it has one.",
        _PUBLIC_KEY,
    ),
]
_AuthorizedKeysLine = Annotated[
    str | None,
    doc(
        "The line to put in the `berth` user's `authorized_keys`: the public key restricted "
        'to forwarding (`restrict,port-forwarding,command="/bin/false"`).',
        f'restrict,port-forwarding,permitlisten="127.0.0.1:1",command="/bin/false" {_PUBLIC_KEY}',
    ),
]
_NextCursor = Annotated[  # a paged list's; no nextCursor: the last page
    UUID | None,
    doc("Pass it as `cursor` for the next page; absent on the last page (or unpaged).", None),
]
_StatusDetail = Annotated[
    str | None,
    doc(
        "Why the status is what it is (e.g. the last connection error); null when there is "
        "nothing to say."
    ),
]


# --- request bodies ---------------------------------------------------------------


#: A path inside a build's source (``check_build_path``).
_BuildPath = Annotated[
    str, msgspec.Meta(min_length=1, max_length=BUILD_PATH_MAX, pattern=BUILD_PATH_PATTERN)
]


class GitRequest(_Request):
    """A Git repository to build from."""

    url: Annotated[
        Annotated[str, msgspec.Meta(min_length=1, max_length=URL_MAX, pattern=HTTP_URL_PATTERN)],
        doc(
            "The repository, `https://` or `http://`, without a user or password (save "
            "those with POST /api/agent/git-credentials).",
            "https://git.example.com/acme/shop.git",
        ),
    ]
    ref: Annotated[
        Annotated[str, msgspec.Meta(min_length=1, max_length=GIT_REF_MAX, pattern=GIT_REF_PATTERN)]
        | None,
        doc(
            "A branch, tag or commit (Git's ref rules, at most 255 characters); null or "
            "absent: the repository's default branch.",
            "main",
        ),
    ] = None


class BuildRequest(_Request):
    """How to build the app's image on its server."""

    git: Annotated[
        GitRequest | None, doc("Build from this Git repository (or give `sourceId`).")
    ] = None
    source_id: Annotated[
        UUID | None,
        doc(
            "Build from this uploaded context (POST /api/agent/sources), instead of `git`; "
            "another team's is a 404.",
            "7c9e6679-7425-40de-944b-e07fc1f90ae7",
        ),
    ] = None
    context: Annotated[
        _BuildPath | None,
        doc(
            "The subdirectory of the source to build (relative, no `..`); default `.`.",
            "web",
        ),
    ] = None
    dockerfile: Annotated[
        _BuildPath | None,
        doc("The Dockerfile's path inside the context; default `Dockerfile`.", "Dockerfile"),
    ] = None
    args: Annotated[
        dict[EnvKey, EnvValue] | None,
        doc(
            "Build arguments (`ARG`), keys and values by the rules of `env`. Not secret: "
            "Docker keeps them in the image's history.",
            {"NODE_VERSION": "22"},
        ),
    ] = None
    target: Annotated[
        Annotated[str, msgspec.Meta(max_length=TARGET_MAX, pattern=TARGET_PATTERN)] | None,
        doc("The multi-stage target to build; default the last stage.", "runtime"),
    ] = None


class DeployRequest(_Request):
    """Deploy or redeploy an app (by name) on one of your servers."""

    server_id: Annotated[
        UUID,
        doc(
            "One of your servers (UUID); another user's is a 404 (`body.serverId`). A pending "
            "server (not enrolled yet) or one whose host key changed is a 409; an offline one "
            "accepts the deploy and it waits.",
            _SERVER,
        ),
    ]
    name: Annotated[
        AppName,
        doc(
            "The app's name, 1-100 characters without NUL. Its container name is derived from "
            "it (`containerName`): lowercased, every character outside `[a-z0-9_.-]` becomes "
            "`-`, runs of `-` collapse, leading and trailing `-._` are trimmed; the result must "
            "keep at least 2 characters (else 422). Deploying a name whose container name "
            "exists on the server redeploys that installation.",
            "Shop",
        ),
    ]
    # Not required since builds came (exactly one of image and build), and not nullable:
    # absent when a build makes the image.
    image: (
        Annotated[
            ImageRef,
            doc(
                "`<repository>:<tag>`, optionally followed by `@sha256:<64 hex digits>`; the tag "
                "is required (there is no implicit `latest`, and never a fallback image). "
                "Repositories are lowercase; a registry host may lead (`ghcr.io/org/app:2.1`).",
                "ghcr.io/acme/shop:2.1",
            ),
        ]
        | msgspec.UnsetType
    ) = msgspec.UNSET
    port: Annotated[
        Port,
        doc(
            "The port the app listens on inside the container, 1-65535 (default 3000). "
            "Without a `domain` it is published on the host port `hostPort` (by default "
            "this same port: `http://<server address>:<port>`); with a domain it is "
            "published on 127.0.0.1 only and reached through the proxy.",
            3000,
        ),
    ] = 3000
    domain: Annotated[
        Domain | None,
        doc(
            "A DNS name (at least two labels of 1-63 `[A-Za-z0-9-]`, none starting or ending "
            "with `-`, at most 253 characters; stored lowercased): no scheme, path, port or "
            "trailing dot; Unicode names in punycode (`xn--bcher-kva.example` for "
            "`bücher.example`). When given, the server's Caddy routes it to the app with "
            "automatic HTTPS. One installation per domain per server (409 domain-in-use at "
            "`body.domain`). Null: none.",
            "shop.example.com",
        ),
    ] = None
    # ``null`` means "none", as for domain: the core parser accepts it, so must this.
    env: Annotated[
        Annotated[
            dict[EnvKey, EnvValue], msgspec.Meta(max_length=200, description="Env variables.")
        ]
        | None,
        doc(
            "Environment variables, at most 200: keys match `^[A-Za-z_][A-Za-z0-9_]*$` (at "
            "most 256 characters), values are any string without NUL up to 32 KiB of UTF-8, "
            "delivered byte for byte (quotes, `$`, backticks, newlines included). Sealed at "
            "rest, never returned (reads show `envKeys` only), redacted from logs. Null or "
            "absent: none.",
            {"NODE_ENV": "production", "DATABASE_URL": "postgres://shop@db:5432/shop"},
        ),
    ] = None
    volumes: Annotated[
        Annotated[list[Volume], msgspec.Meta(max_length=100)] | None,
        doc(
            "Bind mounts, at most 100, each `<host_path>:<container_path>` with an optional "
            "`:ro` or `:rw` (default). The container path is absolute. The host path is "
            "absolute, or relative: then it lives under the app's data directory on the "
            "server, `/var/lib/berth/apps/<containerName>/`. Characters `[A-Za-z0-9._@/+-]`, "
            "no `..` segment. Refused as host paths, with what lies under them and the "
            "directories that hold them: `/`, `/proc`, `/sys`, `/dev`, `/boot`, `/etc`, "
            "`/run`, `/var/run`, `/var/lib/docker`, `/var/lib/containerd`, any Docker or "
            "containerd socket, and on the server that is berth's own machine (`serve "
            "--local`) berth's data dir. A container with a host path is root-equivalent on "
            "its server. Docker creates a missing host directory.",
            ["data:/var/lib/shop", "/srv/shop/uploads:/app/uploads:rw"],
        ),
    ] = None
    memory: Annotated[
        MemoryLimit | None,
        doc(
            "Memory limit of the container: bytes (at least 6 MiB), or a string of digits and "
            "a unit `b`, `k`, `m` or `g` (`512m`). Null: no limit.",
            536870912,
        ),
    ] = None
    cpus: Annotated[
        Cpus | None,
        doc("CPUs the container may use, 0.01-1024 (`0.5`: half a CPU). Null: no limit.", 0.5),
    ] = None
    restart: Annotated[
        models.RestartPolicy,
        doc(
            "Docker's restart policy: `unless-stopped` (default), `always`, `on-failure` or `no`.",
            "unless-stopped",
        ),
    ] = models.RestartPolicy.UNLESS_STOPPED
    health_path: Annotated[
        HealthPath | None,
        doc(
            "An HTTP path on the app's port (starting with `/`, at most 1024 characters) that "
            "must answer 2xx or 3xx for the deployment to succeed; null: the app is healthy "
            "once its port accepts connections.",
            "/healthz",
        ),
    ] = None
    command: Annotated[
        Annotated[
            list[CommandArg],
            msgspec.Meta(
                min_length=1,
                max_length=100,
                description="argv replacing the image's CMD; never a shell string.",
                examples=[["node", "server.js", "--port", "3000"]],
                # the first argument, the program, is not empty (prefixItems takes the
                # first item from items: it says all an argument is, and more)
                extra_json_schema={
                    "prefixItems": [
                        {
                            "type": "string",
                            "minLength": 1,
                            "maxLength": COMMAND_ARG_MAX,
                            "pattern": ENV_VALUE_PATTERN,
                        }
                    ]
                },
            ),
        ]
        | None,
        doc(
            "argv replacing the image's CMD, 1-100 arguments of at most 4096 characters "
            "without NUL; never a shell string (no shell runs it). Null: the image's own.",
            None,
        ),
    ] = None
    host_port: Annotated[
        Port | None,
        doc(
            "Apps without a domain: the host port, 1-65535, that publishes `port` on every "
            "interface of the server (`http://<server address>:<hostPort>`). Null or "
            "absent: `port` itself. Two domain-less apps on one server cannot share a host "
            "port, nor can anything else on the server hold it (409 port-in-use at "
            "`body.hostPort`, or `body.port` when it is the default). With a `domain` it "
            "is refused (422): the proxy reaches the app on a loopback port Docker picks.",
            8080,
        ),
    ] = None
    stop_grace_seconds: Annotated[
        Annotated[int, msgspec.Meta(ge=0, le=600)],
        doc(
            "How long a stop, restart or redeploy waits for the app to exit after SIGTERM "
            "before Docker kills it, 0-600 seconds (default 10, Docker's own).",
            10,
        ),
    ] = 10

    build: Annotated[
        BuildRequest | None,
        doc(
            "Build the image on the server instead of pulling one (exactly one of `image` "
            "and `build`): from a Git repository (`git`) or an uploaded context "
            "(`sourceId`, from POST /api/agent/sources). The server's Docker Engine builds "
            "it (no registry is asked: the images it starts `FROM` must be on the server) "
            "and tags it `berth/<containerName>:<deployment id prefix>`."
        ),
    ] = None


class RollbackRequest(_Request):
    """Which revision to go back to."""

    deployment_id: Annotated[
        Annotated[
            UUID,
            doc(
                "A succeeded deployment of this installation. Default: the revision "
                "before the current one."
            ),
        ]
        | None,
        doc(
            "The revision to go back to: a succeeded deployment of this installation (else "
            "409 revision-unavailable at `body.deploymentId`). Null or absent: the revision "
            "before the current one.",
            "0e1d2c3b-4a59-4687-9a0b-b1c2d3e4f5a6",
        ),
    ] = None


#: A saved credential's user name and password (a registry's, a Git host's), as
#: ``check_registry_username`` and ``check_registry_password`` take them.
_Username = Annotated[
    str, msgspec.Meta(min_length=1, max_length=REGISTRY_USERNAME_MAX, pattern=_USERNAME_PATTERN)
]
_Password = Annotated[
    str, msgspec.Meta(min_length=1, max_length=REGISTRY_PASSWORD_MAX, pattern=r"^[^\x00]*$")
]


class RegistryRequest(_Request):
    """Credentials for a private registry: a deploy of an image from ``host`` pulls with
    them. The password (or access token) is sealed at rest and never returned."""

    host: Annotated[
        RegistryHost,
        doc(
            "The registry, as an image reference names it: `hostname[:port]` (no scheme, path "
            "or whitespace; stored lowercased; `index.docker.io` is `docker.io`)."
        ),
    ]
    username: Annotated[
        _Username, doc("The user to pull as, 1-255 printable characters.", "deploy-bot")
    ]
    password: Annotated[
        _Password,
        doc(
            "Its password or access token: sealed at rest, never returned or logged.",
            "glpat-xxxxxxxxxxxxxxxxxxxx",
        ),
    ]


class CreateServerRequest(_Request):
    """Register a server. With ``hostKeys`` (and an address) berth reaches it over SSH at
    once; without, it stays pending until its install script enrolls it."""

    name: Annotated[
        ServerName, doc("A display name, 1-100 printable characters, not blank.", "web-1")
    ]
    address: Annotated[
        Address | None,
        doc(
            "The server's hostname or IP address (IPv6 without brackets), 1-253 characters; "
            "null: the install script reports it.",
            "203.0.113.10",
        ),
    ] = None
    ssh_port: Annotated[Port, doc("The SSH port berth connects to, 1-65535 (default 22).", 22)] = 22
    ssh_user: Annotated[
        str,
        msgspec.Meta(pattern="^[a-z_][a-z0-9_-]{0,31}$"),
        doc(
            "The user berth connects as: `^[a-z_][a-z0-9_-]{0,31}$` (default `berth`, created "
            "by the install script).",
            "berth",
        ),
    ] = "berth"
    host_keys: Annotated[
        Annotated[list[str], msgspec.Meta(min_length=1, max_length=10)] | None,
        doc(
            "The server's SSH host public keys (as in `/etc/ssh/ssh_host_*_key.pub`), at most "
            "10: with an `address`, berth pins them and reaches the server at once, without "
            "the install script. Null: the install script sends them.",
            None,
        ),
    ] = None
    team_id: Annotated[
        UUID | None,
        doc(
            "The team it belongs to (one where you may add servers); null: the token's team.",
            "0c1d2e3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f",
        ),
    ] = None


class ChangeServerRequest(_Request):
    """Change a server in place (its id, apps and history stay): each field given replaces
    the stored one, a field left out is kept; none may be null. A new `address` or
    `sshPort` is checked at once: the server goes `offline` until berth reaches it there
    with the pinned host keys (a pending server stays `pending`)."""

    name: Annotated[
        ServerName | msgspec.UnsetType,
        doc("A display name, 1-100 printable characters, not blank.", "web-1"),
    ] = msgspec.UNSET
    address: Annotated[
        Address | msgspec.UnsetType,
        doc(
            "The server's hostname or IP address (IPv6 without brackets), 1-253 characters.",
            "203.0.113.10",
        ),
    ] = msgspec.UNSET
    ssh_port: Annotated[
        Port | msgspec.UnsetType, doc("The SSH port berth connects to, 1-65535.", 22)
    ] = msgspec.UNSET


class RepinRequest(_Request):
    """Accept the new SSH host key a server offered: its new host public keys (as in
    ``/etc/ssh/ssh_host_*_key.pub``, which must include the offered key) and the
    offered key's fingerprint as you checked it on the server (``ssh-keygen -lf``)."""

    host_keys: Annotated[
        list[str],
        msgspec.Meta(
            min_length=1,
            max_length=10,
            description="OpenSSH public key lines; they replace every pinned key.",
            examples=[[_KEY]],
        ),
    ]
    fingerprint: Annotated[
        str,
        msgspec.Meta(
            pattern="^SHA256:[A-Za-z0-9+/]{43}$",
            description="The SHA-256 fingerprint of the key the server offered "
            "(`offeredHostKeyFingerprint`), as OpenSSH prints it.",
            examples=[_FINGERPRINT],
        ),
    ]


class WebhookRequest(_Request):
    """A new webhook: berth POSTs each of ``events`` to ``url``, signed (Standard Webhooks)
    with a secret it generates and returns once."""

    url: Annotated[
        str,
        msgspec.Meta(
            min_length=1,
            max_length=2048,
            pattern="^[Hh][Tt][Tt][Pp][Ss]?://[!-~]+$",
            extra_json_schema=also_matching(HTTP_URL_PATTERN),
            description="Where berth POSTs the events: an `http` or `https` URL (at most 2048 "
            "characters, no user or password, no fragment); redirects are not followed. Its "
            "host must resolve (from berth) to public IP addresses only: loopback, private, "
            "link-local and other inside addresses are refused unless the operator allows "
            "private targets.",
            examples=["https://hooks.example.com/berth"],
        ),
    ]
    events: Annotated[
        list[models.WebhookEvent],
        msgspec.Meta(
            min_length=1,
            max_length=len(models.WebhookEvent),
            extra_json_schema={"uniqueItems": True},
            description="What to be told of, at least one, no repeats: `deployment.succeeded`, "
            "`deployment.failed` (failed or timed out), `deployment.canceled`, "
            "`server.offline`, `server.online`.",
            examples=[_EVENTS],
        ),
    ]
    format: Annotated[
        models.WebhookFormat,
        doc(
            "How each delivery reads: `standard` (default: Standard Webhooks JSON "
            '`{"type", "timestamp", "data"}`), `slack` (a Slack incoming webhook\'s '
            '`{"text"}`) or `discord` (a Discord webhook\'s `{"content"}`, mentions off): '
            "the same events in words, naming the app and the server, with a link to the "
            "app's page when `BERTH_BASE_URL` is set. Every format is signed alike.",
            "slack",
        ),
    ] = models.WebhookFormat.STANDARD


_Text = Annotated[
    str, msgspec.Meta(min_length=1, max_length=200, pattern="^[^\\x00-\\x1f\\x7f-\\x9f]*$")
]


class EnrollFactsIn(_Request):
    """What the server says about itself; every fact is optional (null: unknown)."""

    os: Annotated[
        _Text | None,
        doc(
            "The operating system, 1-200 characters; null: unknown.",
            "Debian GNU/Linux 12 (bookworm)",
        ),
    ] = None
    arch: Annotated[
        _Text | None, doc("The CPU architecture, 1-200 characters; null: unknown.", "x86_64")
    ] = None
    docker_version: Annotated[
        _Text | None, doc("The Docker Engine version, 1-200 characters; null: unknown.", "24.0.7")
    ] = None
    cpus: Annotated[
        Annotated[int, msgspec.Meta(ge=1, le=1 << 20)] | None,
        doc("CPUs, at least 1; null: unknown.", 4),
    ] = None
    memory_bytes: Annotated[
        Annotated[int, msgspec.Meta(ge=1, le=(1 << 63) - 1)] | None,
        doc("Memory in bytes, at least 1; null: unknown.", 8589934592),
    ] = None


class EnrollRequest(_Request):
    """The server's SSH host public keys (as in ``/etc/ssh/ssh_host_*_key.pub``; pinned
    before berth first connects), the SSH port berth should connect to (default: the
    server's), and its facts."""

    host_keys: Annotated[
        list[str],
        msgspec.Meta(min_length=1, max_length=10),
        doc(
            "The server's SSH host public keys (`ssh_host_*_key.pub` lines), 1-10; pinned "
            "before berth first connects.",
            [_HOST_KEY],
        ),
    ]
    ssh_port: Annotated[
        Port | None, doc("The SSH port berth should connect to, 1-65535; null: the server's.", 22)
    ] = None
    facts: Annotated[
        EnrollFactsIn | None, doc("What the server says about itself; null: nothing.")
    ] = None


# --- teams, members, invitations, named tokens ---------------------------------------

_TEAM = "0c1d2e3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f"
_USER = "6e5d4c3b-2a19-4f08-9e7d-6c5b4a392817"
_TOKEN_ID = "2d3c4b5a-6978-4a5b-8c7d-e6f5a4b3c2d1"  # noqa: S105 (an id, not a secret)
_RoleField = Annotated[access.Role, doc("`owner`, `admin`, `deployer` or `viewer`.", "deployer")]
_Scopes = Annotated[
    list[access.TokenScope],
    msgspec.Meta(min_length=1, max_length=3),
    doc(
        "What the token may do, within its user's role: `read` ⊂ `deploy` ⊂ `admin` "
        "(the highest given implies those below).",
        ["deploy"],
    ),
]
_Name = Annotated[ServerName, doc("A name, 1-100 printable characters, not blank.", "ci-deploy")]


class TeamRequest(_Request):
    """A new team; you are its owner."""

    name: Annotated[
        ServerName, doc("The team's name, 1-100 printable characters, not blank.", "ops")
    ]


class InvitationRequest(_Request):
    """Invite someone by email to join the team with a role."""

    email: Annotated[
        str,
        msgspec.Meta(
            pattern=r"^[!-?A-~]{1,64}@[!-?A-~]{1,180}\.[!-?A-~]{1,8}$",
            description="The invited user's email address.",
            examples=["bob@example.com"],
        ),
    ]
    role: _RoleField


class RoleRequest(_Request):
    """A member's new role."""

    role: _RoleField


class TokenRequest(_Request):
    """A named token: for one team, narrowed to scopes, perhaps to servers, until a time."""

    name: _Name
    scopes: _Scopes
    team_id: Annotated[
        UUID | None,
        doc("The team it acts in (one of yours); null: the calling token's team.", _TEAM),
    ] = None
    server_ids: Annotated[
        Annotated[list[UUID], msgspec.Meta(min_length=1, max_length=100)] | None,
        doc(
            "Only these servers of the team (1-100); any other is a 404 to it. Null: all.",
            [_SERVER],
        ),
    ] = None
    expires_at: Annotated[
        datetime | None,
        msgspec.Meta(
            description="When it stops working (RFC 3339, in the future); null: never.",
            examples=["2027-01-31T12:00:00Z"],
            extra_json_schema={"format": "date-time"},
        ),
    ] = None


class GitCredentialRequest(_Request):
    """Credentials for the private Git repositories of a host: a build from a repository
    on ``host`` fetches with them (HTTP basic auth). The password (or access token) is
    sealed at rest and never returned."""

    host: GitHost
    username: Annotated[
        _Username,
        doc(
            "The user to fetch as (with a forge's access token, often any name, or the one "
            "the forge says), 1-255 printable characters.",
            "deployer",
        ),
    ]
    password: Annotated[
        _Password,
        doc(
            "The password or access token: sealed at rest, never returned, never logged.",
            "ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
        ),
    ]


@dataclass(frozen=True, slots=True)
class Body:
    """A request body: its wire Struct (the schema the document shows) and the core's
    parser of it (every broken rule at once), which takes the path id ``path`` too."""

    wire: type[msgspec.Struct]
    parse: Callable[..., Any]
    path: str | tuple[str, ...] | None = None


#: Each command a handler takes as its ``data``, by the body it is parsed from.
BODIES: dict[type, Body] = {
    c.DeployCommand: Body(DeployRequest, c.parse_deploy),
    c.Rollback: Body(RollbackRequest, c.parse_rollback, path="installationId"),
    c.CreateServerCommand: Body(CreateServerRequest, c.parse_create_server),
    c.RepinHostKeys: Body(RepinRequest, c.parse_repin, path="serverId"),
    c.ChangeServer: Body(ChangeServerRequest, c.parse_change_server, path="serverId"),
    c.AddRegistry: Body(RegistryRequest, c.parse_add_registry),
    c.AddGitCredential: Body(GitCredentialRequest, c.parse_add_git_credential),
    c.CreateWebhook: Body(WebhookRequest, c.parse_create_webhook),
    c.EnrollCommand: Body(EnrollRequest, c.parse_enroll),
    c.CreateTeam: Body(TeamRequest, c.parse_create_team),
    c.InviteMember: Body(InvitationRequest, c.parse_invite_member, path="teamId"),
    c.ChangeMemberRole: Body(RoleRequest, c.parse_change_role, path=("teamId", "userId")),
    c.CreateToken: Body(TokenRequest, lambda raw: c.parse_create_token(raw, now=datetime.now(UTC))),
}


# --- responses ----------------------------------------------------------------


class EnrolledOut(_Wire):
    """The enrolled server: authorize ``authorizedKeysLine`` for ``sshUser``."""

    server_id: _ServerId
    ssh_user: _SshUser
    public_key: _PublicKey
    authorized_keys_line: _AuthorizedKeysLine
    status: Annotated[models.ServerStatus, doc("Its status now.", "online")]


class EnrollmentStatusOut(_Wire):
    """Only what the waiting install script needs; nothing else about the server."""

    server_id: _ServerId
    status: Annotated[
        models.ServerStatus, doc("`pending`, then `online` once berth reached it.", "online")
    ]
    status_detail: _StatusDetail
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
    location: Annotated[
        str,
        doc(
            "Where the field is: `body.<field>` (`body.env.KEY`, `body.volumes[2]`), "
            "`query.<name>`, `header.<name>`, or `body` for the whole body."
        ),
    ]
    message: Annotated[str, doc("What happened, in words.")]
    value: Annotated[Any, doc("The value received (shortened), or null; never a secret.")] = None


class Problem(_Wire):
    """RFC 9457 problem details, with one ``errors`` entry per invalid field (and, for a
    conflict caused by one input, that input: ``body.port`` when the host port is taken)."""

    # Its description and enum of every kind are the document's (``openapi.py``).
    type: Annotated[str, msgspec.Meta(pattern="^urn:berth:problem:[a-z-]+$")]
    title: Annotated[str, doc("The HTTP status's phrase.")]
    status: Annotated[int, doc("The HTTP status code, as in the response.")]
    detail: Annotated[str, doc("What went wrong and what to change, in words.")]
    errors: Annotated[  # required: empty unless 422
        list[ProblemField],
        doc(
            "One entry per invalid field, all at once (422), or the one input that caused the "
            "problem (`body.port` for a port in use); empty otherwise."
        ),
    ]
    request_id: Annotated[  # required: also sent as X-Request-Id
        str | None, doc("This request's id, as in `X-Request-Id`: quote it when reporting a bug.")
    ]


class FactsOut(_Wire):
    os: Annotated[
        str | None,
        doc(
            "The operating system (from /etc/os-release); null: unknown.",
            "Debian GNU/Linux 12 (bookworm)",
        ),
    ]
    arch: Annotated[
        str | None, doc("The CPU architecture (`x86_64`, `aarch64`, …); null: unknown.", "x86_64")
    ]
    docker_version: Annotated[
        str | None, doc("The Docker Engine version; null: unknown.", "24.0.7")
    ]
    cpus: Annotated[int | None, doc("CPUs; null: unknown.", 4)]
    memory_bytes: Annotated[int | None, doc("Memory in bytes; null: unknown.", 8589934592)]


class ServerOut(_Wire):
    id: _ServerId
    name: Annotated[str, doc("Its display name.", "web-1")]
    transport: Annotated[
        models.Transport,
        doc(
            "How berth reaches the server: `ssh` (a pinned host key, forwards only) or `local` "
            "(this machine, under `berth serve --local`).",
            "ssh",
        ),
    ]
    address: Annotated[
        str | None,
        doc(
            "The server's hostname or IP address (IPv6 without brackets); null for a pending "
            "server that has not said it yet.",
            "203.0.113.10",
        ),
    ]
    ssh_port: Annotated[int, doc("The SSH port berth connects to, 1-65535.", 22)]
    ssh_user: _SshUser
    status: Annotated[
        models.ServerStatus,
        doc("`pending` until its install script enrolls it, then `online` or `offline`.", "online"),
    ]
    status_detail: _StatusDetail
    created_at: _CreatedAt
    last_seen_at: Annotated[
        datetime | None,
        doc("When berth last reached the server (RFC 3339, UTC); null: never.", _DONE),
    ]
    facts: Annotated[FactsOut, doc("What the server said about itself at enrollment.")]
    host_keys: Annotated[
        list[str],
        doc(
            "The server's SSH host public keys, pinned: berth never connects to a server "
            "that presents another key.",
            [_HOST_KEY],
        ),
    ]
    host_key_fingerprints: Annotated[
        list[str],
        doc("SHA-256 fingerprints (OpenSSH format) of the pinned host keys.", [_FINGERPRINT]),
    ]
    offered_host_key: Annotated[
        str | None,
        doc(
            "With status `host_key_mismatch`: the host key the server offered "
            "instead of a pinned one (berth did not log in). Else null.",
            _KEY,
        ),
    ]
    offered_host_key_fingerprint: Annotated[
        str | None,
        doc(
            "Its SHA-256 fingerprint: compare it with `ssh-keygen -lf` on the "
            "server, then confirm it with POST /api/agent/servers/{serverId}/host-keys.",
            _FINGERPRINT,
        ),
    ]
    public_key: _PublicKey
    authorized_keys_line: _AuthorizedKeysLine
    last_known_status: Annotated[
        models.ServerStatus | None,
        doc(
            "With status `checking` (no worker has verified the status for longer than a "
            "monitor pass: berth restarted, or its workers stopped): the status last "
            "stored, not verified since. Else null.",
            "online",
        ),
    ] = None


class ServerListOut(_Wire, omit_defaults=True):  # no nextCursor: the last page
    servers: Annotated[list[ServerOut], doc("Your servers, oldest first.")]
    next_cursor: _NextCursor = None


_TOKEN = "berth_enroll_3kTq9ZbV1xWc7YhN2mLp5RsD8fGj4HaQ0uEoI6tKzBy"  # noqa: S105 (an example)


class CreatedServerOut(ServerOut, kw_only=True):
    status: Annotated[
        models.ServerStatus,
        doc(
            "`pending` until its install script enrolls it (or `online`/`offline` when "
            "created with host keys).",
            "pending",
        ),
    ]
    enrollment_token: Annotated[
        str,
        doc(
            "The one-time enrollment token (valid once, for one hour): the install script "
            "sends it. Shown only here.",
            _TOKEN,
        ),
    ]
    enrollment_expires_at: Annotated[
        datetime, doc("When the enrollment token expires (RFC 3339, UTC).", "2026-01-15T10:30:00Z")
    ]
    install_command: Annotated[
        str,
        doc(
            "The command to run as root on the server: it downloads the install script and "
            "enrolls the server with the token. When this berth's address is plain `http://` "
            "(not loopback) it carries `--insecure`: the token and berth's key then cross the "
            "network unencrypted, and the script refuses to go on without it.",
            f"curl -fsSL https://berth.example.com/api/deploy | sudo sh -s -- --token {_TOKEN}",
        ),
    ]


_State = Annotated[models.DeploymentState, doc("Its state.", "succeeded")]


class DeploymentRefOut(_Wire):
    id: _DeploymentId
    state: _State
    finished_at: _FinishedAt


class GitOut(_Wire):
    url: Annotated[str, doc("The repository.", "https://git.example.com/acme/shop.git")]
    ref: Annotated[str | None, doc("The branch, tag or commit; null: the default branch.")]


class BuildOut(_Wire):
    """What an app's image is built from."""

    git: Annotated[GitOut | None, doc("The Git repository; null: an uploaded source.")]
    source_id: Annotated[UUID | None, doc("The uploaded source; null: a Git repository.")]
    context: Annotated[str, doc("The subdirectory of the source built.", ".")]
    dockerfile: Annotated[str, doc("The Dockerfile's path in the context.", "Dockerfile")]
    args: Annotated[dict[str, str], doc("Build arguments.", {})]
    target: Annotated[str | None, doc("The multi-stage target; null: the last stage.")]


class SourceOut(_Wire):
    """An uploaded build context."""

    id: Annotated[
        UUID,
        doc("Give it as `build.sourceId` of a deploy.", "0b5f9c2e-7d41-4a8e-9c3b-5e2f1a6d8c47"),
    ]
    sha256: Annotated[
        str,
        doc(
            "The SHA-256 of the bytes received, in hex.",
            "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        ),
    ]
    size: Annotated[int, doc("Bytes received.", 20480)]
    expires_at: Annotated[
        datetime,
        doc("When it is deleted unless a build uses it first (24 h after its last use).", _AT),
    ]


_HostPortOut = Annotated[
    int | None,
    doc(
        "Without a domain: the host port publishing `port` (`http://<server>:<hostPort>`); "
        "null with a domain.",
        3000,
    ),
]
_StopGraceOut = Annotated[
    int, doc("Seconds a stop waits after SIGTERM before Docker kills the app.", 10)
]


_Build = Annotated[
    BuildOut | None,
    doc("What the image is built from on the server; null: the image is pulled."),
]


class _SpecOut(_Wire):
    """What an app runs (its ``DeploymentSpec``); env values have no field."""

    image: Annotated[
        str,
        doc(
            "The image reference deployed (`<repository>:<tag>[@sha256:<digest>]`).",
            "ghcr.io/acme/shop:2.1",
        ),
    ]
    port: Annotated[
        int,
        doc(
            "The container port; without a domain published on `hostPort` (by default the "
            "same port).",
            3000,
        ),
    ]
    domain: Annotated[
        str | None,
        doc(
            "The domain Caddy routes to the app over HTTPS; null: none (the app is at "
            "`http://<server>:<port>`).",
            "shop.example.com",
        ),
    ]
    env_keys: Annotated[
        list[str],
        doc(
            "The names of its environment variables; values are never returned.",
            ["DATABASE_URL", "NODE_ENV"],
        ),
    ]
    volumes: Annotated[
        list[str],
        doc(
            "Its bind mounts, `<host_path>:<container_path>[:ro|:rw]`; relative host paths "
            "live under `/var/lib/berth/apps/<containerName>/` on the server.",
            ["data:/var/lib/shop", "/srv/shop/uploads:/app/uploads:rw"],
        ),
    ]
    memory: Annotated[int | None, doc("Memory limit in bytes; null: none.", 536870912)]
    cpus: Annotated[float | None, doc("CPU limit; null: none.", 0.5)]
    restart: Annotated[models.RestartPolicy, doc("Docker's restart policy.", "unless-stopped")]
    health_path: Annotated[
        str | None,
        doc(
            "The HTTP path that must answer 2xx/3xx for the app to be healthy; null: the port "
            "accepting connections is enough.",
            "/healthz",
        ),
    ]
    command: Annotated[
        list[str] | None, doc("argv replacing the image's CMD; null: the image's own.")
    ]


class TlsOut(_Wire):
    """HTTPS for the app's domain, checked from the server through Caddy after the route
    step: plain HTTP must redirect to HTTPS, then a TLS handshake with the domain as SNI
    must complete (verified against Caddy's own CA for internal names)."""

    state: Annotated[
        models.TlsState,
        doc(
            "`ready`: HTTPS answers; `pending`: waiting for the ACME "
            "certificate; `error`: the proxy does not serve the domain as it should.",
            "ready",
        ),
    ]
    reason: Annotated[str | None, doc("Why it is pending or an error; null when ready.", None)]
    issuer: Annotated[
        Literal["acme", "internal"],
        doc(
            "Who issues the certificate: `acme` (Let's Encrypt) for public "
            "names, `internal` (Caddy's own CA) for localhost, *.localhost, *.local, "
            "*.internal, *.home.arpa and IP addresses (unless BERTH_TLS_ISSUER forces one).",
            "internal",
        ),
    ]
    checked_at: Annotated[datetime, doc("When berth last checked HTTPS through the proxy.", _DONE)]


class InstallationOut(_SpecOut):
    id: _InstallationId
    server_id: _ServerId
    name: Annotated[str, doc("The app's name, as given.", "Shop")]
    container_name: Annotated[
        str,
        doc(
            "The Docker container name derived from `name`: lowercased, characters outside "
            "`[a-z0-9_.-]` replaced by `-`, runs collapsed, ends trimmed (2+ characters).",
            "shop",
        ),
    ]
    url: Annotated[
        str | None,
        doc(
            "Where people reach the app: `https://<domain>`, else `http://<address>:<port>`; "
            "null when the server has no address or the installation was removed.",
            "https://shop.example.com",
        ),
    ]
    status: Annotated[
        models.InstallationStatus,
        doc(
            "`pending` (never deployed), `deploying`, `running`, `restarting` (its container "
            "exited and Docker's restart policy restarts it), `exited` (its container exited: "
            "`exitCode`, `exitedAt`), `missing` (its container is gone from the server), "
            "`stopped` (on request), `failed` or `removed`. It follows the container, seen "
            "within seconds.",
            "running",
        ),
    ]
    created_at: _CreatedAt
    updated_at: Annotated[datetime, doc("When it last changed (RFC 3339, UTC).", _DONE)]
    last_deployment: Annotated[
        DeploymentRefOut | None, doc("Its latest deployment (whatever its state); null: none yet.")
    ]
    current_deployment_id: Annotated[
        UUID | None,
        doc(
            "The deployment now serving (its last succeeded one, the current revision); null: "
            "none succeeded.",
            _DEPLOYMENT,
        ),
    ]
    removed_at: Annotated[
        datetime | None, doc("When it was removed (RFC 3339, UTC); null: it is not.")
    ]
    stopped_at: Annotated[
        datetime | None, doc("When it was stopped (RFC 3339, UTC); null: it is not.")
    ]
    tls: Annotated[
        TlsOut | None,
        doc(
            "With a domain: HTTPS through the proxy as the last deployment's "
            "check found it (null before the first check, and without a domain)."
        ),
    ]
    # Optional in the document (a response field it gains), always present in answers.
    host_port: _HostPortOut = None
    stop_grace_seconds: _StopGraceOut = 10
    build: _Build = None
    exit_code: Annotated[
        int | None,
        doc(
            "While `exited` or `restarting`: the exit code of its container's last exit "
            "(137: killed); null otherwise.",
            137,
        ),
    ] = None
    exited_at: Annotated[
        datetime | None,
        doc("While `exited` or `restarting`: when its container exited (RFC 3339, UTC).", _AT),
    ] = None
    restart_count: Annotated[
        int,
        doc(
            "How many times Docker's restart policy restarted its container (since it was "
            "created: a deployment makes a new one).",
            0,
        ),
    ] = 0


class InstallationListOut(_Wire, omit_defaults=True):  # no nextCursor: the last page
    server_id: _ServerId
    installations: Annotated[list[InstallationOut], doc("The installations, oldest first.")]
    next_cursor: _NextCursor = None


class EventOut(_Wire):
    at: Annotated[datetime, doc("When it happened (RFC 3339, UTC).", _AT)]
    step: Annotated[str, doc("The step it belongs to.", "queued")]
    message: Annotated[str, doc("What happened, in words.", "Deployment queued.")]


class DeploymentOut(_SpecOut):
    id: _DeploymentId
    installation_id: _InstallationId
    server_id: _ServerId
    state: Annotated[
        models.DeploymentState,
        doc(
            "`queued`, `running`, then one of `succeeded` (the app answered on its port), "
            "`failed`, `timed_out`, `canceled`.",
            "succeeded",
        ),
    ]
    step: Annotated[
        str | None,
        doc(
            "The step it is at or ended at (`pull`, `create`, `start`, `health`, `route`, "
            "`retire`, …); null while queued.",
            "retire",
        ),
    ]
    error: Annotated[
        str | None,
        doc("Why it failed, timed out or was canceled (naming the step); null otherwise."),
    ]
    image_id: Annotated[
        str | None,
        doc(
            "The image id it ran (`sha256:…`): a rollback runs this very image again; null "
            "until pulled.",
            "sha256:4f1c9a0e7b3d2c5a6e8f0b1d3c5e7a9b2d4f6a8c0e1b3d5f7a9c2e4b6d8f0a1c",
        ),
    ]
    rollback_of: Annotated[
        UUID | None,
        doc("The revision (deployment id) this deployment rolls back to; null for a deploy."),
    ]

    attempts: Annotated[
        int,
        doc("How many times a worker took it up (at most 3: a worker that died is taken over).", 1),
    ]
    created_at: _CreatedAt
    started_at: Annotated[
        datetime | None, doc("When a worker started it (RFC 3339, UTC); null while queued.", _AT)
    ]
    finished_at: _FinishedAt
    events: Annotated[list[EventOut], doc("Its log, oldest first.")]
    # Optional in the document (a response field it gains), always present in answers.
    host_port: _HostPortOut = None
    stop_grace_seconds: _StopGraceOut = 10
    build: _Build = None
    commit: Annotated[
        str | None,
        doc(
            "The Git commit its image was built from (a build from Git); null otherwise.",
            "9fceb02d0ae598e95dc970b74767f19372d61af8",
        ),
    ] = None


class DeploymentListOut(_Wire):
    installation_id: _InstallationId
    deployments: Annotated[list[DeploymentOut], doc("Deployments, newest first.")]
    next_before: Annotated[
        UUID | None, doc("Pass it as `before` for the next page; null on the last page.")
    ]


class DeployOut(_Wire):
    deployment: Annotated[DeploymentOut, doc("The deployment.")]
    installation: Annotated[
        InstallationOut, doc("The installation it deploys (after this request).")
    ]


class PortOut(_Wire):
    container_port: Annotated[int, doc("The port inside the container.", 3000)]
    host_ip: Annotated[
        str | None,
        doc(
            "The host address it is published on (`0.0.0.0`, `127.0.0.1`); null: not published.",
            "127.0.0.1",
        ),
    ]
    host_port: Annotated[int | None, doc("The host port; null: not published.", 3000)]
    protocol: Annotated[str, doc("`tcp`, `udp` or `sctp`.", "tcp")]


class ContainerOut(_Wire):
    id: Annotated[str, doc("The Docker container id.", _CONTAINER)]
    name: Annotated[str, doc("The Docker container name.", "shop")]
    image: Annotated[str, doc("The image it runs, as Docker names it.", "ghcr.io/acme/shop:2.1")]
    state: Annotated[str, doc("Docker's state (`running`, `exited`, `created`, …).", "running")]
    status: Annotated[str, doc("Docker's status text (`Up 3 minutes`).", "Up 3 minutes")]
    created_at: Annotated[
        datetime | None, doc("When Docker created it (RFC 3339, UTC); null: unknown.", _AT)
    ]
    ports: Annotated[list[PortOut], doc("Its published ports.")]
    installation_id: Annotated[
        UUID | None,
        doc("The berth installation it belongs to; null: not managed by berth.", _INSTALLATION),
    ]
    image_id: Annotated[
        str | None,
        doc(
            "The id of the image it runs (`sha256:…`), which `image` does not tell once its "
            "tag moves (a deployment's `imageId` is the one it ran); null: Docker did not say.",
            "sha256:4f1c9a0e7b3d2c5a6e8f0b1d3c5e7a9b2d4f6a8c0e1b3d5f7a9c2e4b6d8f0a1c",
        ),
    ] = None


class ContainerListOut(_Wire):
    server_id: _ServerId
    observed_at: Annotated[
        datetime | None,
        doc("When the list was read from the server (RFC 3339, UTC); null: never.", _DONE),
    ]
    server_status: Annotated[
        models.ServerStatus,
        doc(
            "`online`: read just now; `offline`: the server did not answer and this is the "
            "last list seen.",
            "online",
        ),
    ]
    containers: Annotated[
        list[ContainerOut], doc("Every container on the server, managed by berth or not.")
    ]


class LogsOut(_Wire):
    installation_id: _InstallationId
    container_id: Annotated[
        str | None,
        doc("The container the lines come from; null: the installation has none.", _CONTAINER),
    ]
    lines: Annotated[
        list[str],
        doc(
            "The last lines of its output, oldest first, env values redacted.",
            ["listening on :3000", "GET /healthz 200 1ms"],
        ),
    ]


class WebhookOut(_Wire):
    """A webhook of yours (its secret is never shown again)."""

    id: Annotated[UUID, doc("The webhook's id (UUID).", _WEBHOOK)]
    url: Annotated[
        str,
        doc(
            "Where berth POSTs the events. Whole in the answer that creates the webhook; in "
            "lists only `scheme://host[:port]/…` (a path or query may be a token).",
            "https://hooks.example.com/berth",
        ),
    ]
    events: Annotated[list[models.WebhookEvent], doc("What it is told of.", _EVENTS)]
    created_at: Annotated[datetime, doc("When it was created.", _AT)]
    # Optional in the document (a response field it gains), always present in answers.
    format: Annotated[
        models.WebhookFormat,
        doc("How its deliveries read: `standard`, `slack` or `discord`.", "standard"),
    ] = models.WebhookFormat.STANDARD


class WebhookCreatedOut(WebhookOut, kw_only=True):
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


class WebhookListOut(_Wire, omit_defaults=True):  # no nextCursor: the last page
    webhooks: Annotated[list[WebhookOut], doc("Your webhooks, oldest first; never a secret.")]
    next_cursor: _NextCursor = None


class DeliveryAttemptOut(_Wire):
    at: Annotated[datetime, doc("When the attempt was made.", _AT)]
    status_code: Annotated[int | None, doc("The endpoint's answer; null: none (see error).", 500)]
    error: Annotated[
        str | None, doc("Why it did not count as delivered (null when it did).", "HTTP 500")
    ]


class WebhookDeliveryOut(_Wire):
    """One event for the webhook: its `id` is the `webhook-id` header's value after `msg_`
    (the same on every attempt)."""

    id: Annotated[
        UUID,
        doc(
            "The delivery's id (UUID): the event's idempotency id.",
            "7e6d5c4b-3a29-4187-96f5-e4d3c2b1a0f9",
        ),
    ]
    message_id: Annotated[
        str, doc("The `webhook-id` header sent with it.", "msg_4f1c6f1e9a0b4d5c8e2f7a6b3c1d0e9f")
    ]
    webhook_id: Annotated[UUID, doc("The webhook it is for (UUID).", _WEBHOOK)]
    event: Annotated[models.WebhookEvent, doc("The event it tells of.", "deployment.failed")]
    created_at: Annotated[
        datetime, doc("When the change it tells of happened (the outbox row was written).", _AT)
    ]
    state: Annotated[
        models.DeliveryState,
        doc(
            "`pending` (an attempt is due at `nextAttemptAt`), `delivered` (a 2xx "
            "answer) or `failed` (every attempt failed)."
        ),
    ]
    attempts: Annotated[list[DeliveryAttemptOut], doc("Each POST so far, oldest first.")]
    next_attempt_at: Annotated[
        datetime | None, doc("When the next attempt is due; null once delivered or given up.")
    ]
    delivered_at: Annotated[
        datetime | None, doc("When an attempt got a 2xx answer; null until then.", _DONE)
    ]


class WebhookDeliveryListOut(_Wire):
    webhook_id: Annotated[UUID, doc("The webhook (UUID).", _WEBHOOK)]
    deliveries: Annotated[
        list[WebhookDeliveryOut], doc("Its newest deliveries, newest first, with their attempts.")
    ]


class WebhookTestOut(_Wire):
    """How the webhook's endpoint answered a test event sent just now (not retried, not
    in the delivery log)."""

    webhook_id: Annotated[UUID, doc("The webhook (UUID).", _WEBHOOK)]
    event: Annotated[str, doc("The event type sent: always `webhook.test`.", "webhook.test")]
    at: Annotated[datetime, doc("When it was sent.", _AT)]
    delivered: Annotated[bool, doc("Whether the endpoint answered 2xx.", True)]
    status_code: Annotated[int | None, doc("The endpoint's answer; null: none (see error).", 204)]
    error: Annotated[
        str | None,
        doc("Why it did not count as delivered (null when it did).", "HTTP 500"),
    ]


class RegistryOut(_Wire):
    """A saved registry: never its password."""

    id: Annotated[
        UUID, doc("The saved registry's id (UUID).", "8f14e45f-ceea-467f-a0e6-6b2a1f0e3c9d")
    ]
    host: Annotated[
        str,
        doc(
            "The registry host its credentials are for (`hostname[:port]`).",
            "registry.example.com:5000",
        ),
    ]
    username: Annotated[
        str, doc("The user deploys pull as (the password is never returned).", "deploy-bot")
    ]
    created_at: Annotated[datetime, doc("When the credentials were saved.", "2026-11-25T03:00:00Z")]


class RegistryListOut(_Wire):
    """Your registries, by host."""

    registries: Annotated[
        list[RegistryOut], doc("Your saved registries, by host; never a password.")
    ]


class GitCredentialOut(_Wire):
    """Saved Git credentials: never their password."""

    id: Annotated[
        UUID, doc("The saved credentials' id (UUID).", "6d0a4c1e-2b3f-4e5d-8a9b-0c1d2e3f4a5b")
    ]
    host: Annotated[str, doc("The Git host they are for (`hostname[:port]`).", "git.example.com")]
    username: Annotated[str, doc("The user berth fetches as.", "deployer")]
    created_at: Annotated[datetime, doc("When they were saved.", _AT)]


class GitCredentialListOut(_Wire):
    """Your team's Git credentials, by host."""

    git_credentials: Annotated[
        list[GitCredentialOut], doc("Your team's saved Git credentials, by host; never a password.")
    ]


class DeployHookOut(_Wire):
    """An installation's push-to-deploy hook (its secret is never shown again)."""

    id: Annotated[UUID, doc("The hook's id: the last part of its URL.", _HOOK)]
    installation_id: Annotated[UUID, doc("The installation it deploys.", _INSTALLATION)]
    url: Annotated[
        str,
        doc(
            "Where a Git forge POSTs its push events (no token needed: the id is "
            "unguessable and every delivery must be signed with the secret).",
            f"https://berth.example.com/api/hooks/deploy/{_HOOK}",
        ),
    ]
    created_at: Annotated[datetime, doc("When the hook was made.", _AT)]


class DeployHookCreatedOut(DeployHookOut, kw_only=True):
    """The hook with its signing secret: shown this once (a new POST rotates it)."""

    secret: Annotated[
        str,
        msgspec.Meta(
            pattern="^berth_hook_[A-Za-z0-9_-]+$",
            description="The secret to give the forge (GitHub: Secret; Gitea/Forgejo: "
            "Secret). Shown only in this answer.",
            examples=["berth_hook_Qm9vdHN0cmFwcGVkIGZyb20gYSBzZWNyZXQ"],
        ),
    ]


class PushOut(_Wire):
    """What a delivery to a deploy hook did."""

    status: Annotated[
        Literal["queued", "ignored"],
        doc(
            "`queued`: the pushed commit is being deployed (`deploymentId`); `ignored`: "
            "another branch, a tag, a deleted branch or an event that is no push.",
            "queued",
        ),
    ]
    detail: Annotated[str, doc("What was done, in words.", "Deploying commit 3f2a… of main.")]
    deployment_id: Annotated[
        UUID | None, doc("The deployment of the pushed commit (when queued).", _DEPLOYMENT)
    ] = None


class ContainerStatsOut(_Wire):
    """One sample of what a container uses, as `docker stats` shows it."""

    running: Annotated[bool, doc("Whether the container runs (else no figures).", True)]
    cpu_percent: Annotated[
        float | None,
        doc(
            "CPU over about a second, in percent of one CPU (200 is two CPUs busy); null "
            "when not running.",
            12.5,
        ),
    ] = None
    memory_bytes: Annotated[
        int | None, doc("Memory in use, without the page cache; null when not running.", 50331648)
    ] = None
    memory_limit_bytes: Annotated[
        int | None,
        doc(
            "Its memory limit (the server's memory when it has none); null when not running.",
            536870912,
        ),
    ] = None


class InstallationStatsOut(_Wire):
    """An installation's container (its running one, else its newest) and what it uses."""

    installation_id: Annotated[
        UUID, doc("The installation.", "0f8b6a52-3c1e-4b8e-9a51-6d2c7e1f4a90")
    ]
    container_id: Annotated[
        str | None,
        doc("Its container; null when it has none (never deployed, or removed).", "4f1c2a9e7b3d"),
    ]
    stats: Annotated[ContainerStatsOut | None, doc("Null when it has no container.")]


class DiskUsageOut(_Wire):
    """What Docker keeps on the server's disk (`docker system df`), in bytes."""

    images: Annotated[int, doc("Images on the server.", 12)]
    images_bytes: Annotated[int, doc("Their layers, each shared layer counted once.", 734003200)]
    containers: Annotated[int, doc("Containers, running or not.", 5)]
    containers_bytes: Annotated[int, doc("Their writable layers.", 1048576)]
    volumes: Annotated[int, doc("Volumes.", 2)]
    volumes_bytes: Annotated[int, doc("Their contents (unmeasured ones count 0).", 20971520)]
    build_cache_bytes: Annotated[int, doc("Docker's build cache.", 0)]
    total_bytes: Annotated[int, doc("All of the above.", 756023296)]


class ServerDiskOut(_Wire):
    """A server's Docker disk usage, asked now."""

    server_id: Annotated[UUID, doc("The server.", "8d3e5f7a-1b2c-4d6e-9f08-a1b2c3d4e5f6")]
    usage: Annotated[
        DiskUsageOut, doc("What Docker keeps on the server's disk, asked now (`docker system df`).")
    ]


class Health(_Wire):
    status: Annotated[str, doc("`ok` (liveness) or `ready` (readiness).", "ok")]


class Readiness(_Wire):
    """Ready: the store answered; ``database`` says which kind berth stores its data in."""

    status: Annotated[
        str, doc("`ready`: one read of berth's database answered within 2 s.", "ready")
    ]
    database: Annotated[
        Literal["sqlite", "postgresql"],
        doc(
            "The kind of database berth stores its data in: `sqlite` (one process, the "
            "embedded default) or `postgresql` (shared by API replicas and workers).",
            "sqlite",
        ),
    ]


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
    fields["build"] = build_out(spec.build) if spec.build is not None else None
    return {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}


def build_out(b: models.BuildSpec) -> BuildOut:
    return BuildOut(
        git=GitOut(url=b.git.url, ref=b.git.ref) if b.git is not None else None,
        source_id=b.source_id,
        context=b.context,
        dockerfile=b.dockerfile,
        args=dict(b.args),
        target=b.target,
    )


def source_out(s: models.Source) -> SourceOut:
    return SourceOut(id=s.id, sha256=s.sha256, size=s.size, expires_at=s.expires_at)


def webhook_out(w: models.Webhook) -> WebhookOut:
    return WebhookOut(
        id=w.id, url=w.url, events=list(w.events), created_at=w.created_at, format=w.format
    )


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


def installation_stats_out(result: InstallationUsage) -> InstallationStatsOut:
    stats = result.stats
    return InstallationStatsOut(
        installation_id=result.installation_id,
        container_id=result.container_id,
        stats=None if stats is None else _copied(stats, ContainerStatsOut),
    )


def server_disk_out(result: ServerDisk) -> ServerDiskOut:
    return ServerDiskOut(server_id=result.server_id, usage=_copied(result.usage, DiskUsageOut))


def git_credential_out(g: models.GitCredential) -> GitCredentialOut:
    return GitCredentialOut(id=g.id, host=g.host, username=g.username, created_at=g.created_at)


def deploy_hook_out(hook: models.DeployHook, url: str) -> DeployHookOut:
    return DeployHookOut(
        id=hook.id, installation_id=hook.installation_id, url=url, created_at=hook.created_at
    )


def push_out(outcome: PushOutcome) -> PushOut:
    deployment = outcome.deployment
    return PushOut(
        status="queued" if deployment is not None else "ignored",
        detail=outcome.detail,
        deployment_id=deployment.id if deployment is not None else None,
    )


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


def enrollment_status_out(server: models.Server) -> EnrollmentStatusOut:
    return EnrollmentStatusOut(
        server_id=server.id,
        status=server.status,
        status_detail=server.status_detail,
        ssh_port=server.ssh_port,
    )


def servers_out(servers: Sequence[models.Server]) -> list[ServerOut]:
    """``server_out`` of each, in order: a list's hot path (see ``_ServerMemo``)."""
    return [_servers.get(s) for s in servers]


class _ServerMemo:
    """Each server's wire form, by the server it was built from.

    A ``ServerOut`` is a pure function of its (frozen) ``Server`` but for ``checked_at``,
    which it does not show (the status shown, ``checking`` or not, is the server's own
    already: ``Server.shown``). The SQL store gives an unchanged server back as the very
    same object, or as a copy with a newer ``checked_at`` after a monitor's pass
    (``adapters/sql/server_rows.py``): either way its wire form is reused rather than
    built again -- with the host keys' fingerprints and the ``authorized_keys`` line,
    most of what a list of a thousand servers cost to answer. Bounded, oldest out; not
    to be changed (the objects are shared). Single event loop, like the app.
    """

    def __init__(self, max_servers: int) -> None:
        self._max = max_servers
        self._entries: dict[UUID, tuple[models.Server, ServerOut]] = {}

    def get(self, server: models.Server) -> ServerOut:
        entry = self._entries.get(server.id)
        if entry is not None:
            known = entry[0]
            if known is server or known == msgspec.structs.replace(
                server, checked_at=known.checked_at
            ):
                if known is not server:
                    self._entries[server.id] = (server, entry[1])
                return entry[1]
            del self._entries[server.id]
        out = server_out(server)
        while len(self._entries) >= self._max:
            del self._entries[next(iter(self._entries))]
        self._entries[server.id] = (server, out)
        return out


_servers = _ServerMemo(max_servers=5_000)


T_out = TypeVar("T_out")


class _Encoded:
    """The wire objects a memo holds, by identity, and the JSON of those encoded so far:
    held, an object keeps its id, so its body can be looked up by it. Dropped with the
    memo's entry."""

    def __init__(self) -> None:
        self._held: dict[int, object] = {}
        self._bodies: dict[int, bytes] = {}

    def hold(self, out: object) -> None:
        self._held[id(out)] = out

    def drop(self, out: object) -> None:
        del self._held[id(out)]
        self._bodies.pop(id(out), None)

    def body(self, out: T_out, encode: Callable[[T_out], bytes]) -> bytes:
        """``encode(out)``, kept while ``out`` is held."""
        found = self._bodies.get(id(out))
        if found is not None:
            return found
        encoded = encode(out)
        if self._held.get(id(out)) is out:
            self._bodies[id(out)] = encoded
        return encoded


class _RenderedOnce(Response[Any]):
    """A response whose body is rendered once per object its memo holds (``bodies``, the
    memo's ``encoded``): the bytes ``Response`` renders, kept beside the entry."""

    bodies: ClassVar[_Encoded]

    def render(
        self, content: Any, media_type: str, enc_hook: Serializer = default_serializer
    ) -> bytes:
        render = super().render
        return self.bodies.body(content, lambda out: render(out, media_type, enc_hook))


def server_list_out(servers: Sequence[models.Server], next_cursor: UUID | None) -> ServerListOut:
    """A page of the servers list in its wire form: the very same object while each
    server's wire form is (``_ServerMemo``), so ``ServerListResponse`` encodes it once.
    Not to be changed: it is shared."""
    return _server_lists.get(servers_out(servers), next_cursor)


class _ServerListMemo:
    """Recent pages of the servers list and their JSON, by the identity of the
    ``ServerOut`` objects listed and the page's cursor.

    ``_ServerMemo`` hands out the same ``ServerOut`` while a server is unchanged, so a
    fleet's list asked again and again while nothing changed is one page object,
    encoded once (``fleet_bench``: encoding a thousand servers and hashing them for the
    ETag were a tenth of the event loop's time during deploys). An entry holds its
    objects, so no other object takes their ids while it is here. Bounded (pages and
    servers held), oldest out. Single event loop, like the app.
    """

    def __init__(self, max_pages: int, max_servers: int) -> None:
        self._max_pages = max_pages
        self._max_servers = max_servers
        self._held = 0
        self._entries: dict[tuple[tuple[int, ...], UUID | None], ServerListOut] = {}
        self.encoded = _Encoded()  # the entries' pages, some with their JSON

    def get(self, servers: list[ServerOut], next_cursor: UUID | None) -> ServerListOut:
        key = (tuple(map(id, servers)), next_cursor)
        found = self._entries.get(key)
        if found is not None:
            return found
        out = ServerListOut(servers=servers, next_cursor=next_cursor)
        if len(servers) <= self._max_servers:
            while self._entries and (
                len(self._entries) >= self._max_pages
                or self._held + len(servers) > self._max_servers
            ):
                dropped = self._entries.pop(next(iter(self._entries)))
                self._held -= len(dropped.servers)
                self.encoded.drop(dropped)
            self._entries[key] = out
            self.encoded.hold(out)
            self._held += len(servers)
        return out


_server_lists = _ServerListMemo(max_pages=32, max_servers=20_000)


class ServerListResponse(_RenderedOnce):
    """The servers list's response, its body rendered once per page (``_ServerListMemo``)."""

    bodies = _server_lists.encoded


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
    return f"{port_url_prefix}{inst.spec.published_port}"


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


class _ListingMemo:
    """The wire form of recent listings, by the server and the identity of the
    installation objects it was built from.

    Core models are frozen, so a listing's ``InstallationListOut`` is a pure function
    of its server's id and address (``_port_url_prefix``: all it reads of the server)
    and its installation objects. The SQL store's read cache hands out the very same
    objects until anything is committed, so the wire form is built once rather than on
    every request (it was most of the cost of serving one), and its JSON encoded once
    (``body``). A hit needs the same server id and address -- not the same server
    object: a server shown ``checking`` (``Server.shown``) is a new one at each read --
    and the same installation objects in the same order; an entry holds them all, so no
    other object can take their ids while it is here. Bounded (listings and their
    installations), oldest out; a store without the read cache (PostgreSQL) simply
    always misses. Single event loop, like the app.
    """

    def __init__(self, max_listings: int, max_installations: int) -> None:
        self._max_listings = max_listings
        self._max_installations = max_installations
        self._held = 0
        self._entries: dict[
            UUID, tuple[str | None, tuple[models.Installation, ...], InstallationListOut]
        ] = {}
        self.encoded = _Encoded()  # the entries' listings, some with their JSON

    def get(
        self, server: models.Server, installations: list[models.Installation]
    ) -> InstallationListOut:
        prefix = _port_url_prefix(server)
        entry = self._entries.get(server.id)
        if (
            entry is not None
            and entry[0] == prefix
            and len(entry[1]) == len(installations)
            and all(map(operator.is_, entry[1], installations))
        ):
            return entry[2]
        out = InstallationListOut(
            server_id=server.id, installations=[_installation_out(prefix, i) for i in installations]
        )
        held = len(installations)
        if held <= self._max_installations:
            self._drop(server.id)
            while self._entries and (
                len(self._entries) >= self._max_listings
                or self._held + held > self._max_installations
            ):
                self._drop(next(iter(self._entries)))
            self._entries[server.id] = (prefix, tuple(installations), out)
            self.encoded.hold(out)
            self._held += held
        return out

    def _drop(self, key: UUID) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._held -= len(entry[1])
            self.encoded.drop(entry[2])


_listings = _ListingMemo(max_listings=64, max_installations=2_000)


class ListingResponse(_RenderedOnce):
    """A listing's response, its body rendered once per listing (``_ListingMemo``):
    encoding 100 installations was a seventh of the time of ``GET /install``."""

    bodies = _listings.encoded


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
        exit_code=i.exit_code if i.status.down else None,
        exited_at=i.exited_at if i.status.down else None,
        restart_count=i.restart_count,
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


def event_out(e: models.DeploymentEvent) -> EventOut:
    return EventOut(at=e.at, step=e.step, message=e.message)


def deployment_out(d: models.Deployment) -> DeploymentOut:
    return _copied(
        d, DeploymentOut, **_spec_fields(d.spec), events=[event_out(e) for e in d.events]
    )


def deployment_list_out(found: DeploymentPage) -> DeploymentListOut:
    return DeploymentListOut(
        installation_id=found.installation_id,
        deployments=[deployment_out(d) for d in found.deployments],
        next_before=found.next_before,
    )


def deploy_out(server: models.Server, result: DeployResult) -> DeployOut:
    """A deploy's or a rollback's answer: the deployment and its installation (whose URL
    needs its ``server``)."""
    return DeployOut(
        deployment=deployment_out(result.deployment),
        installation=installation_out(server, result.installation),
    )


def container_out(c: models.Container) -> ContainerOut:
    """The wire form of a container: the same fields (``ContainerOut`` mirrors the model)."""
    return msgspec.convert(c, ContainerOut, from_attributes=True)


def container_list_out(result: ContainerList) -> ContainerListOut:
    return ContainerListOut(
        server_id=result.server_id,
        observed_at=result.observed_at,
        server_status=result.server_status,
        containers=[container_out(x) for x in result.containers],
    )


def logs_out(logs: Logs) -> LogsOut:
    return LogsOut(
        installation_id=logs.installation_id, container_id=logs.container_id, lines=logs.lines
    )


# --- teams, members, invitations, named tokens, the audit log -------------------------


class TeamOut(_Wire):
    """A team you are a member of, with your role in it."""

    id: Annotated[UUID, doc("The team's id (UUID); your personal team's is your user id.", _TEAM)]
    name: Annotated[str, doc("The team's name.", "ops")]
    role: Annotated[access.Role | None, doc("Your role in it.", "owner")]
    personal: Annotated[
        bool, doc("Whether it is your personal team (made with your account).", False)
    ]
    created_at: _CreatedAt


class TeamListOut(_Wire):
    teams: Annotated[list[TeamOut], doc("Your teams: your personal team first, then oldest first.")]


class MemberOut(_Wire):
    """A member of a team."""

    user_id: Annotated[UUID, doc("The member's user id (UUID).", _USER)]
    email: Annotated[str, doc("The member's email address.", "bob@example.com")]
    role: _RoleField
    joined_at: Annotated[datetime, doc("When they joined.", _AT)]
    team_id: Annotated[UUID, doc("The team's id (UUID).", _TEAM)]


class MemberListOut(_Wire):
    members: Annotated[list[MemberOut], doc("The team's members, oldest first.")]


class InvitationOut(_Wire):
    """A one-time invitation: give `token` (or `url`) to the invited person; shown once."""

    id: Annotated[UUID, doc("The invitation's id (UUID).", _DEPLOYMENT)]
    email: Annotated[str, doc("Who may accept it (signed in with this email).", "bob@example.com")]
    role: _RoleField
    expires_at: Annotated[datetime, doc("When it stops working: 7 days after it was made.", _AT)]
    token: Annotated[
        str,
        doc(
            "The one-time invitation token (POST /api/agent/invitations/{token}/accept). "
            "Shown only in this answer.",
            "berth_join_3kTMd9xqP0aZr2Yv8LwQe5Nf1Hb7Uc4Jg6Ks0Rt2Mn",
        ),
    ]
    url: Annotated[
        str,
        doc(
            "Opens the invitation in the dashboard.",
            "https://berth.example.com/invitations/berth_join_3kTMd9xqP0aZr2Yv8LwQe5Nf1Hb7Uc4Jg6Ks0Rt2Mn",
        ),
    ]


class TokenOut(_Wire):
    """A named token: never its secret."""

    id: Annotated[UUID, doc("The token's id (UUID).", _TOKEN_ID)]
    name: _Name
    team_id: Annotated[UUID, doc("The team it acts in.", _TEAM)]
    scopes: _Scopes
    server_ids: Annotated[
        list[UUID] | None, doc("The only servers it reaches; null: all of the team's.", [_SERVER])
    ]
    expires_at: Annotated[datetime | None, doc("When it stops working; null: never.", None)]
    created_at: _CreatedAt
    last_used_at: Annotated[
        datetime | None, doc("When it was last used (to the minute); null: never.", _DONE)
    ]


class TokenListOut(_Wire):
    tokens: Annotated[list[TokenOut], doc("Your named tokens, newest first; never a secret.")]


class TokenCreatedOut(TokenOut):
    """The new token with its secret: shown this once, keep it."""

    token: Annotated[
        str,
        doc(
            "The token: `Authorization: Bearer <token>`. Shown only in this answer.",
            "berth_3kTMd9xqP0aZr2Yv8LwQe5Nf1Hb7Uc4Jg6Ks0Rt2Mn8Vb1Xc",
        ),
    ]


class UserOut(_Wire):
    id: Annotated[UUID, doc("The user's id (UUID).", _USER)]
    email: Annotated[str, doc("The user's email address.", "alice@example.com")]


class CurrentTokenOut(_Wire):
    """Who the calling token is: its user, team, role, scopes and servers."""

    id: Annotated[UUID | None, doc("The named token's id; null: the main token.", _TOKEN_ID)]
    name: Annotated[str, doc("The token's name (`main token` for the main one).", "ci-deploy")]
    team_id: Annotated[UUID, doc("The team it acts in.", _TEAM)]
    scopes: _Scopes
    server_ids: Annotated[
        list[UUID] | None, doc("The only servers it reaches; null: all of the team's.", None)
    ]
    expires_at: Annotated[datetime | None, doc("When it stops working; null: never.", None)]
    role: Annotated[access.Role, doc("Its user's role in the team.", "deployer")]
    user: Annotated[UserOut, doc("Its user.")]


class AuditActorOut(_Wire):
    user_id: Annotated[UUID, doc("Who acted.", _USER)]
    email: Annotated[str, doc("Their email address.", "alice@example.com")]
    token_id: Annotated[UUID | None, doc("The named token used; null: another credential.", None)]
    token_name: Annotated[
        str | None, doc("The token's name, or the credential (`main token`, `dashboard`).", None)
    ]


class AuditTargetOut(_Wire):
    type: Annotated[str, doc("What kind of thing (`server`, `installation`, `member`…).", "server")]
    id: Annotated[str | None, doc("Its id, where known.", _SERVER)]
    name: Annotated[str | None, doc("Its name, where known.", "web-1")]


class AuditEventOut(_Wire):
    """One line of the audit log."""

    id: Annotated[UUID, doc("The entry's id (UUID): a page's `before`.", _WEBHOOK)]
    at: Annotated[datetime, doc("When.", _AT)]
    actor: Annotated[AuditActorOut, doc("Who did it, with which token.")]
    action: Annotated[
        str, doc("What: `deploy`, `server.create`, `token.create`, `member.invite`…", "deploy")
    ]
    target: Annotated[AuditTargetOut, doc("What it was done to.")]
    client_address: Annotated[str | None, doc("Where the request came from.", "203.0.113.7")]
    outcome: Annotated[
        teams.AuditOutcome, doc("`ok`: done; `denied`: refused for want of a right.", "ok")
    ]
    detail: Annotated[str | None, doc("More words (a role change, what was needed).", None)]


class AuditPageOut(_Wire):
    events: Annotated[list[AuditEventOut], doc("The team's audit log, newest first.")]
    next_before: Annotated[
        UUID | None, doc("The next page's `before`; null: this is the last page.", None)
    ]


def team_out(t: teams.Team) -> TeamOut:
    return TeamOut(
        id=t.id,
        name=t.name,
        role=t.role,
        personal=t.personal_of is not None,
        created_at=t.created_at,
    )


def member_out(m: teams.Member) -> MemberOut:
    return _copied(m, MemberOut)


def invitation_out(made: teams.CreatedInvitation, base: str) -> InvitationOut:
    i = made.invitation
    return InvitationOut(
        id=i.id,
        email=i.email,
        role=i.role,
        expires_at=i.expires_at,
        token=made.token,
        url=f"{base}/invitations/{made.token}",
    )


def _sorted_scopes(scopes: frozenset[access.TokenScope]) -> list[access.TokenScope]:
    return sorted(scopes, key=list(access.TokenScope).index)


def _server_list(ids: frozenset[UUID] | None) -> list[UUID] | None:
    return None if ids is None else sorted(ids, key=str)


def token_out(t: teams.AccessToken) -> TokenOut:
    return _copied(
        t, TokenOut, scopes=_sorted_scopes(t.scopes), server_ids=_server_list(t.server_ids)
    )


def token_created_out(made: teams.CreatedToken) -> TokenCreatedOut:
    t = made.token
    return _copied(
        t,
        TokenCreatedOut,
        scopes=_sorted_scopes(t.scopes),
        server_ids=_server_list(t.server_ids),
        token=made.secret,
    )


def current_token_out(a: access.Actor) -> CurrentTokenOut:
    return CurrentTokenOut(
        id=a.token_id,
        name=a.token_name or "main token",
        team_id=a.team_id,
        scopes=_sorted_scopes(a.scopes),
        server_ids=_server_list(a.server_ids),
        expires_at=a.expires_at,
        role=a.role,
        user=UserOut(id=a.user.id, email=a.user.email),
    )


def audit_page_out(page: teams.AuditPage) -> AuditPageOut:
    return AuditPageOut(
        events=[
            _copied(
                e,
                AuditEventOut,
                actor=_copied(e.actor, AuditActorOut),
                target=_copied(e.target, AuditTargetOut),
            )
            for e in page.entries
        ],
        next_before=page.next_before,
    )
