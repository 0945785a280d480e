"""One example of each body the API reads or sends, for the document.

Built from the wire Structs themselves and encoded as the server encodes them, so an
example cannot name a field the schema does not have; ``test_openapi.py`` validates each
against its schema. ``openapi.complete`` puts them on every request body and response
(``example``), and a problem example per status (per kind for a 409).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import msgspec
from berth.core import models

from . import schemas as w

__all__ = ["BODIES", "CONFLICTS", "PROBLEMS", "TEXT"]

_SERVER = UUID("5b0c3a4e-8f1d-4c2a-9e57-0d6b1f2a3c4d")
_INSTALLATION = UUID("9a7e6b5c-4d3e-4f2a-8b1c-0e9d8c7b6a5f")
_DEPLOYMENT = UUID("1f2e3d4c-5b6a-4789-8a0b-c1d2e3f4a5b6")
_EARLIER = UUID("0e1d2c3b-4a59-4687-9a0b-b1c2d3e4f5a6")
_WEBHOOK = UUID("3c2b1a09-8f7e-4d6c-9b5a-a4b3c2d1e0f9")
_DELIVERY = UUID("7e6d5c4b-3a29-4187-96f5-e4d3c2b1a0f9")
_AT = datetime(2026, 1, 15, 9, 30, tzinfo=UTC)
_DONE = datetime(2026, 1, 15, 9, 30, 4, tzinfo=UTC)
_HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHc5xY0mS3V5aZ4dTq3nWb6kP0s1Lr8cF2eJ9uXyQ7Gv"
_PUBLIC_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK2n8xQmVb7cW1dR5tY9uH3jL6pS0aE4fG8kM2zN7oPq berth"
)

_SPEC: dict[str, Any] = {
    "image": "ghcr.io/acme/shop:2.1",
    "port": 3000,
    "domain": "shop.example.com",
    "env_keys": ["DATABASE_URL", "NODE_ENV"],
    "volumes": ["data:/var/lib/shop", "/srv/shop/uploads:/app/uploads:rw"],
    "memory": 536870912,
    "cpus": 0.5,
    "restart": models.RestartPolicy.UNLESS_STOPPED,
    "health_path": "/healthz",
    "command": None,
}

_FACTS = w.FactsOut(
    os="Debian GNU/Linux 12 (bookworm)",
    arch="x86_64",
    docker_version="24.0.7",
    cpus=4,
    memory_bytes=8_589_934_592,
)
_SERVER_OUT = w.ServerOut(
    id=_SERVER,
    name="web-1",
    transport=models.Transport.SSH,
    address="203.0.113.10",
    ssh_port=22,
    ssh_user="berth",
    status=models.ServerStatus.ONLINE,
    status_detail=None,
    created_at=_AT,
    last_seen_at=_DONE,
    facts=_FACTS,
    host_keys=[_HOST_KEY],
    host_key_fingerprints=["SHA256:+DiY3wvvV6TuJJhbpZisF/zLDA0zPMSvHdkr4UvCOqU"],
    offered_host_key=None,
    offered_host_key_fingerprint=None,
    public_key=_PUBLIC_KEY,
    authorized_keys_line=(
        f'restrict,port-forwarding,permitlisten="127.0.0.1:1",command="/bin/false" {_PUBLIC_KEY}'
    ),
)
_TOKEN = "berth_enroll_3kTq9ZbV1xWc7YhN2mLp5RsD8fGj4HaQ0uEoI6tKzBy"  # noqa: S105 (an example)
_CREATED = w.CreatedServerOut(
    **{
        **msgspec.structs.asdict(_SERVER_OUT),
        "status": models.ServerStatus.PENDING,
        "address": None,
        "last_seen_at": None,
        "host_keys": [],
        "facts": w.FactsOut(os=None, arch=None, docker_version=None, cpus=None, memory_bytes=None),
    },
    enrollment_token=_TOKEN,
    enrollment_expires_at=datetime(2026, 1, 15, 10, 30, tzinfo=UTC),
    install_command=(
        "curl -fsSL https://berth.example.com/api/deploy | sudo sh -s -- --token " + _TOKEN
    ),
)
_EVENTS = [
    w.EventOut(at=_AT, step="queued", message="Deployment queued."),
    w.EventOut(at=_AT, step="pull", message="Pulled ghcr.io/acme/shop:2.1."),
    w.EventOut(at=_DONE, step="health", message="The app answered on port 3000."),
    w.EventOut(at=_DONE, step="route", message="shop.example.com routed to the new container."),
]
_DEPLOYMENT_OUT = w.DeploymentOut(
    **_SPEC,
    id=_DEPLOYMENT,
    installation_id=_INSTALLATION,
    server_id=_SERVER,
    state=models.DeploymentState.SUCCEEDED,
    step="retire",
    error=None,
    image_id="sha256:4f1c9a0e7b3d2c5a6e8f0b1d3c5e7a9b2d4f6a8c0e1b3d5f7a9c2e4b6d8f0a1c",
    rollback_of=None,
    attempts=1,
    created_at=_AT,
    started_at=_AT,
    finished_at=_DONE,
    events=_EVENTS,
)
_QUEUED = w.DeploymentOut(
    **{
        **msgspec.structs.asdict(_DEPLOYMENT_OUT),
        "state": models.DeploymentState.QUEUED,
        "step": None,
        "image_id": None,
        "attempts": 0,
        "started_at": None,
        "finished_at": None,
        "events": _EVENTS[:1],
    }
)
_INSTALLATION_OUT = w.InstallationOut(
    **_SPEC,
    id=_INSTALLATION,
    server_id=_SERVER,
    name="Shop",
    container_name="shop",
    url="https://shop.example.com",
    status=models.InstallationStatus.RUNNING,
    created_at=_AT,
    updated_at=_DONE,
    last_deployment=w.DeploymentRefOut(
        id=_DEPLOYMENT, state=models.DeploymentState.SUCCEEDED, finished_at=_DONE
    ),
    current_deployment_id=_DEPLOYMENT,
    removed_at=None,
    stopped_at=None,
    tls=w.TlsOut(state=models.TlsState.READY, reason=None, issuer="acme", checked_at=_DONE),
)
_DEPLOYING = w.InstallationOut(
    **{
        **msgspec.structs.asdict(_INSTALLATION_OUT),
        "status": models.InstallationStatus.DEPLOYING,
        "last_deployment": w.DeploymentRefOut(
            id=_DEPLOYMENT, state=models.DeploymentState.QUEUED, finished_at=None
        ),
        "current_deployment_id": _EARLIER,
    }
)

_STRUCTS: list[msgspec.Struct] = [
    w.DeployRequest(
        server_id=_SERVER,
        name="Shop",
        image="ghcr.io/acme/shop:2.1",
        port=3000,
        domain="shop.example.com",
        env={"NODE_ENV": "production", "DATABASE_URL": "postgres://shop@db:5432/shop"},
        volumes=["data:/var/lib/shop", "/srv/shop/uploads:/app/uploads:rw"],
        memory=536870912,
        cpus=0.5,
        health_path="/healthz",
    ),
    w.RollbackRequest(deployment_id=_EARLIER),
    w.CreateServerRequest(name="web-1", address="203.0.113.10", ssh_port=22),
    w.EnrollRequest(
        host_keys=[_HOST_KEY],
        ssh_port=22,
        facts=w.EnrollFactsIn(**msgspec.structs.asdict(_FACTS)),  # what the server shows
    ),
    w.EnrolledOut(
        server_id=_SERVER,
        ssh_user="berth",
        public_key=_PUBLIC_KEY,
        authorized_keys_line=_SERVER_OUT.authorized_keys_line,
        status=models.ServerStatus.ONLINE,
    ),
    w.EnrollmentStatusOut(
        server_id=_SERVER, status=models.ServerStatus.ONLINE, status_detail=None, ssh_port=22
    ),
    _SERVER_OUT,
    w.ServerListOut(servers=[_SERVER_OUT]),
    _CREATED,
    _DEPLOYMENT_OUT,
    _INSTALLATION_OUT,
    w.DeployOut(deployment=_QUEUED, installation=_DEPLOYING),
    w.DeploymentListOut(
        installation_id=_INSTALLATION, deployments=[_DEPLOYMENT_OUT], next_before=None
    ),
    w.InstallationListOut(server_id=_SERVER, installations=[_INSTALLATION_OUT]),
    w.ContainerListOut(
        server_id=_SERVER,
        observed_at=_DONE,
        server_status=models.ServerStatus.ONLINE,
        containers=[
            w.ContainerOut(
                id="3f4e5d6c7b8a9f0e1d2c3b4a5f6e7d8c9b0a1f2e3d4c5b6a7f8e9d0c1b2a3f4e",
                name="shop",
                image="ghcr.io/acme/shop:2.1",
                state="running",
                status="Up 3 minutes",
                created_at=_AT,
                ports=[
                    w.PortOut(
                        container_port=3000, host_ip="127.0.0.1", host_port=3000, protocol="tcp"
                    )
                ],
                installation_id=_INSTALLATION,
            )
        ],
    ),
    w.LogsOut(
        installation_id=_INSTALLATION,
        container_id="3f4e5d6c7b8a9f0e1d2c3b4a5f6e7d8c9b0a1f2e3d4c5b6a7f8e9d0c1b2a3f4e",
        lines=["listening on :3000", "GET /healthz 200 1ms"],
    ),
    w.Health(status="ok"),
    w.Readiness(status="ready", database="sqlite"),
    w.RepinRequest(
        host_keys=[_HOST_KEY],
        fingerprint="SHA256:+DiY3wvvV6TuJJhbpZisF/zLDA0zPMSvHdkr4UvCOqU",
    ),
    w.RegistryRequest(
        host="registry.example.com:5000",
        username="deploy-bot",
        password="s3cret-token",  # noqa: S106 (an example)
    ),
    w.WebhookRequest(
        url="https://hooks.example.com/berth",
        events=[models.WebhookEvent.DEPLOYMENT_FAILED, models.WebhookEvent.SERVER_OFFLINE],
    ),
    w.WebhookCreatedOut(
        id=_WEBHOOK,
        url="https://hooks.example.com/berth",
        events=[models.WebhookEvent.DEPLOYMENT_FAILED, models.WebhookEvent.SERVER_OFFLINE],
        created_at=_AT,
        secret="whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",  # noqa: S106 (an example)
    ),
    w.WebhookListOut(
        webhooks=[
            w.WebhookOut(
                id=_WEBHOOK,
                url="https://hooks.example.com/berth",
                events=[models.WebhookEvent.DEPLOYMENT_FAILED],
                created_at=_AT,
            )
        ]
    ),
    w.WebhookDeliveryListOut(
        webhook_id=_WEBHOOK,
        deliveries=[
            w.WebhookDeliveryOut(
                id=_DELIVERY,
                message_id=f"msg_{_DELIVERY.hex}",
                webhook_id=_WEBHOOK,
                event=models.WebhookEvent.DEPLOYMENT_FAILED,
                created_at=_AT,
                state=models.DeliveryState.DELIVERED,
                attempts=[
                    w.DeliveryAttemptOut(at=_AT, status_code=500, error="HTTP 500"),
                    w.DeliveryAttemptOut(at=_DONE, status_code=204, error=None),
                ],
                next_attempt_at=None,
                delivered_at=_DONE,
            )
        ],
    ),
    w.RegistryListOut(
        registries=[
            w.RegistryOut(
                id=UUID("8f14e45f-ceea-467f-a0e6-6b2a1f0e3c9d"),
                host="registry.example.com:5000",
                username="deploy-bot",
                created_at=_AT,
            )
        ]
    ),
    w.InstallationStatsOut(
        installation_id=_INSTALLATION,
        container_id="3f4e5d6c7b8a9f0e1d2c3b4a5f6e7d8c9b0a1f2e3d4c5b6a7f8e9d0c1b2a3f4e",
        stats=w.ContainerStatsOut(
            running=True,
            cpu_percent=12.5,
            memory_bytes=50_331_648,
            memory_limit_bytes=536_870_912,
        ),
    ),
    w.ServerDiskOut(
        server_id=_SERVER,
        usage=w.DiskUsageOut(
            images=12,
            images_bytes=734_003_200,
            containers=5,
            containers_bytes=1_048_576,
            volumes=2,
            volumes_bytes=20_971_520,
            build_cache_bytes=0,
            total_bytes=756_023_296,
        ),
    ),
]

#: Each body's example, by schema (Struct) name, as the server encodes it.
BODIES: dict[str, Any] = {
    type(s).__name__: msgspec.to_builtins(s) for s in [*_STRUCTS, _EVENTS[0], _FACTS]
}
BODIES["DeploymentRefOut"] = BODIES["InstallationOut"]["lastDeployment"]
BODIES["EnrollFactsIn"] = BODIES["EnrollRequest"]["facts"]
BODIES["PortOut"] = BODIES["ContainerListOut"]["containers"][0]["ports"][0]
BODIES["ContainerOut"] = BODIES["ContainerListOut"]["containers"][0]
BODIES["ContainerStatsOut"] = BODIES["InstallationStatsOut"]["stats"]
BODIES["DiskUsageOut"] = BODIES["ServerDiskOut"]["usage"]
BODIES["RegistryOut"] = BODIES["RegistryListOut"]["registries"][0]
BODIES["WebhookOut"] = BODIES["WebhookListOut"]["webhooks"][0]
BODIES["WebhookDeliveryOut"] = BODIES["WebhookDeliveryListOut"]["deliveries"][0]
BODIES["DeliveryAttemptOut"] = BODIES["WebhookDeliveryOut"]["attempts"][0]


def _problem(kind: str, status: int, title: str, detail: str, *errors: Any) -> dict[str, Any]:
    body: dict[str, Any] = msgspec.to_builtins(
        w.Problem(
            type=f"urn:berth:problem:{kind}",
            title=title,
            status=status,
            detail=detail,
            errors=[
                w.ProblemField(location=loc, message=msg, value=val) for loc, msg, val in errors
            ],
            request_id="6d74cd0ef6c740f6b6b77fc3325d1d9f",
        )
    )
    return body


#: A problem example per status (a 409's per kind, by kind), for the document. "409+"
#: holds the 409 kinds that only some operations answer (``CONFLICTS`` picks them).
PROBLEMS: dict[str, dict[str, Any]] = {
    "400": {
        "bad-json": _problem(
            "bad-json",
            400,
            "Bad Request",
            "The body is not valid JSON: expected ',' or '}' at line 1 column 18.",
        )
    },
    "401": {
        "unauthorized": _problem(
            "unauthorized",
            401,
            "Unauthorized",
            "A valid API token is required: Authorization: Bearer <token>.",
        )
    },
    "404": {
        "not-found": _problem(
            "not-found",
            404,
            "Not Found",
            "Server not found.",
            ("body.serverId", "Server not found.", None),
        )
    },
    "409": {
        "port-in-use": _problem(
            "port-in-use",
            409,
            "Conflict",
            "Host port 3000 is already used by installation 'blog' on this server: choose "
            "another port, or give a domain.",
            (
                "body.port",
                "Host port 3000 is already used by installation 'blog' on this server: "
                "choose another port, or give a domain.",
                None,
            ),
        ),
        "domain-in-use": _problem(
            "domain-in-use",
            409,
            "Conflict",
            "Domain shop.example.com is already used by installation 'old-shop' on this "
            "server: choose another domain, or remove that installation.",
            (
                "body.domain",
                "Domain shop.example.com is already used by installation 'old-shop' on this "
                "server: choose another domain, or remove that installation.",
                None,
            ),
        ),
        "deployment-running": _problem(
            "deployment-running",
            409,
            "Conflict",
            f"Deployment {_DEPLOYMENT} of this installation is running; wait for it to finish.",
        ),
        "server-pending": _problem(
            "server-pending",
            409,
            "Conflict",
            "Server 'web-1' has not enrolled yet: run its install command on the server (or "
            "create it with its host keys), then deploy.",
            (
                "body.serverId",
                "Server 'web-1' has not enrolled yet: run its install command on the server "
                "(or create it with its host keys), then deploy.",
                None,
            ),
        ),
    },
    "409+": {
        "host-key-mismatch": _problem(
            "host-key-mismatch",
            409,
            "Conflict",
            "Server 'web-1' presented an SSH host key other than the pinned one; berth will "
            "not connect to it until the new key is confirmed.",
            (
                "body.serverId",
                "Server 'web-1' presented an SSH host key other than the "
                "pinned one; berth will not connect to it until the new key is confirmed.",
                None,
            ),
        ),
        "idempotency-key-reused": _problem(
            "idempotency-key-reused",
            409,
            "Conflict",
            "This Idempotency-Key was already used with a different request: send a new key "
            "for a new request, or the same request to replay the first.",
            (
                "header.Idempotency-Key",
                "This Idempotency-Key was already used with a "
                "different request: send a new key for a new request, or the same request to "
                "replay the first.",
                None,
            ),
        ),
        "fingerprint-mismatch": _problem(
            "fingerprint-mismatch",
            409,
            "Conflict",
            "The fingerprint you confirmed is not the one of the key server 'web-1' offered.",
            (
                "body.fingerprint",
                "Not the offered key's fingerprint "
                "(SHA256:9Yf0v1n0uA8c7b6a5d4e3f2g1h0i9j8k7l6m5n4o3p2).",
                None,
            ),
        ),
        "no-host-key-change": _problem(
            "no-host-key-change",
            409,
            "Conflict",
            "Server 'web-1' offers no new host key: there is nothing to confirm.",
        ),
        "server-not-pending": _problem(
            "server-not-pending",
            409,
            "Conflict",
            "Server 'web-1' is online, not pending: it has enrolled already, so it needs no "
            "install command.",
        ),
        "server-removed": _problem(
            "server-removed",
            409,
            "Conflict",
            "Server 'web-1' was uninstalled: its install script removed berth's key and told "
            "berth so. Run its install command again with a new server (add it again), or "
            "delete it.",
            ("body.serverId", "Server 'web-1' was uninstalled.", None),
        ),
        "registry-exists": _problem(
            "registry-exists",
            409,
            "Conflict",
            "You already have credentials for registry.example.com:5000: remove them first "
            "to replace them.",
            ("body.host", "You already have credentials for this host.", None),
        ),
        "registry-limit": _problem(
            "registry-limit",
            409,
            "Conflict",
            "You have 100 registries saved: remove one first.",
        ),
        "server-limit": _problem(
            "server-limit",
            409,
            "Conflict",
            "You have 1000 servers, the most one user may add (BERTH_SERVERS_PER_USER); "
            "delete one first.",
        ),
        "webhook-limit": _problem(
            "webhook-limit",
            409,
            "Conflict",
            "You have 20 webhooks already: delete one first.",
        ),
        "revision-unavailable": _problem(
            "revision-unavailable",
            409,
            "Conflict",
            f"Deployment {_EARLIER} ended failed; only a succeeded deployment is a revision "
            "to roll back to.",
            (
                "body.deploymentId",
                f"Deployment {_EARLIER} ended failed; only a succeeded "
                "deployment is a revision to roll back to.",
                None,
            ),
        ),
        "installation-removed": _problem(
            "installation-removed", 409, "Conflict", "This installation was removed."
        ),
        "deployment-finished": _problem(
            "deployment-finished",
            409,
            "Conflict",
            f"Deployment {_DEPLOYMENT} already ended (succeeded); there is nothing to cancel.",
        ),
        "conflict": _problem(
            "conflict",
            409,
            "Conflict",
            f"Deployment {_DEPLOYMENT} on this server is running; wait for it to finish.",
        ),
    },
    "413": {
        "body-too-large": _problem(
            "body-too-large", 413, "Request Entity Too Large", "The body is larger than 1 MiB."
        )
    },
    "415": {
        "unsupported-media-type": _problem(
            "unsupported-media-type",
            415,
            "Unsupported Media Type",
            "Send the body as application/json.",
        )
    },
    "422": {
        "invalid-input": _problem(
            "invalid-input",
            422,
            "Unprocessable Entity",
            "2 invalid field(s).",
            (
                "body.domain",
                "Use `shop.example.com`: drop the scheme `https://`.",
                "https://shop.example.com",
            ),
            ("body.port", "Expected an integer from 1 to 65535.", 70000),
        )
    },
    "429": {
        "rate-limited": _problem(
            "rate-limited",
            429,
            "Too Many Requests",
            "Request rate limit reached for this token.",
        )
    },
    "500": {
        "internal-error": _problem(
            "internal-error",
            500,
            "Internal Server Error",
            "Internal error; quote request id 6d74cd0ef6c740f6b6b77fc3325d1d9f when reporting it.",
        )
    },
    "502": {
        "runtime-failure": _problem(
            "runtime-failure",
            502,
            "Bad Gateway",
            "Docker refused: No such container: shop.",
        )
    },
    "503": {
        "server-unreachable": _problem(
            "server-unreachable",
            503,
            "Service Unavailable",
            "The server is unreachable: berth could not reach 203.0.113.10 on port 22 over "
            "SSH (unreachable: check the address, the SSH port and any firewall between).",
        ),
        "store-unavailable": _problem(
            "store-unavailable",
            503,
            "Service Unavailable",
            "The database did not answer within 2 s; try again shortly.",
        ),
    },
}

#: The 409 kinds each operation may answer (others: every 409 example), by operationId.
CONFLICTS: dict[str, tuple[str, ...]] = {
    "deploy": (
        "server-removed",
        "port-in-use",
        "domain-in-use",
        "deployment-running",
        "server-pending",
        "host-key-mismatch",
        "idempotency-key-reused",
    ),
    "rollback": (
        "server-removed",
        "revision-unavailable",
        "deployment-running",
        "installation-removed",
        "server-pending",
        "host-key-mismatch",
        "idempotency-key-reused",
    ),
    "cancelDeployment": ("deployment-finished",),
    "stopInstallation": ("deployment-running", "installation-removed", "revision-unavailable"),
    "startInstallation": ("deployment-running", "installation-removed", "revision-unavailable"),
    "restartInstallation": ("deployment-running", "installation-removed", "revision-unavailable"),
    "removeInstallation": ("deployment-running",),
    "deleteServer": ("conflict",),
    "createServer": ("conflict", "server-limit"),
    "addRegistry": ("registry-exists", "registry-limit"),
    "createWebhook": ("webhook-limit",),
    "repinHostKeys": ("no-host-key-change", "fingerprint-mismatch"),
    "newEnrollmentToken": ("server-not-pending",),
}

#: Examples of the bodies that are not JSON, by media type (an event stream's: one event).
TEXT: dict[str, Any] = {
    "text/plain": "listening on :3000\nGET /healthz 200 1ms\n",
    "text/event-stream": {
        "id": "1",
        "event": "step",
        "data": '{"at":"2026-01-15T09:30:00Z","step":"queued","message":"Deployment queued."}',
    },
    "text/x-shellscript": "#!/bin/sh\n# berth install script\nset -eu\n",
}
