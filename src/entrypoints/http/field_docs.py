"""What each field of the API's bodies means and which rules it follows, for the document.

``openapi.complete`` puts these on the schemas' properties: ``FIELDS`` by wire name
(a field means the same wherever it appears: ``createdAt``), ``SCHEMA_FIELDS`` where a
schema's field says more (``DeployRequest.port``: also the published host port). A
description declared on the Struct itself (``msgspec.Meta``) is kept unless
``SCHEMA_FIELDS`` names the field. ``test_openapi.py`` fails on a field without a
description, and on an entry here that names no field.
"""

from __future__ import annotations

__all__ = ["FIELDS", "SCHEMA_FIELDS"]

_SERVER_ID = "The server's id (UUID)."
_NAME_RULES = (
    "The app's name, 1-100 characters without NUL. Its container name is derived from it "
    "(`containerName`): lowercased, every character outside `[a-z0-9_.-]` becomes `-`, runs "
    "of `-` collapse, leading and trailing `-._` are trimmed; the result must keep at least "
    "2 characters (else 422). Deploying a name whose container name exists on the server "
    "redeploys that installation."
)
_PORT_RULES = (
    "The port the app listens on inside the container, 1-65535 (default 3000). Without a "
    "`domain` it is also the published host port (`http://<server address>:<port>`), so two "
    "domain-less apps on one server cannot share it (409 port-in-use at `body.port`); with a "
    "domain it is published on 127.0.0.1 only and reached through the proxy."
)
_DOMAIN_RULES = (
    "A DNS name (at least two labels of 1-63 `[A-Za-z0-9-]`, none starting or ending with "
    "`-`, at most 253 characters; stored lowercased): no scheme, path, port or trailing dot; "
    "Unicode names in punycode (`xn--bcher-kva.example` for `bücher.example`). When given, "
    "the server's Caddy routes it to the app with automatic HTTPS. One installation per "
    "domain per server (409 domain-in-use at `body.domain`). Null: none."
)
_ENV_RULES = (
    "Environment variables, at most 200: keys match `^[A-Za-z_][A-Za-z0-9_]*$` (at most 256 "
    "characters), values are any string without NUL up to 32 KiB of UTF-8, delivered byte "
    "for byte (quotes, `$`, backticks, newlines included). Sealed at rest, never returned "
    "(reads show `envKeys` only), redacted from logs. Null or absent: none."
)
_VOLUME_RULES = (
    "Bind mounts, at most 100, each `<host_path>:<container_path>` with an optional `:ro` or "
    "`:rw` (default). The container path is absolute. The host path is absolute, or relative: "
    "then it lives under the app's data directory on the server, "
    "`/var/lib/berth/apps/<containerName>/`. Characters `[A-Za-z0-9._@/+-]`, no `..` "
    "segment. Refused as host paths, with what lies under them and the directories that "
    "hold them: `/`, `/proc`, `/sys`, `/dev`, `/boot`, `/etc`, `/run`, `/var/run`, "
    "`/var/lib/docker`, `/var/lib/containerd`, any Docker or containerd socket, and on the "
    "server that is berth's own machine (`serve --local`) berth's data dir. A container "
    "with a host path is root-equivalent on its server. Docker creates a missing host "
    "directory."
)
_IMAGE_RULES = (
    "`<repository>:<tag>`, optionally followed by `@sha256:<64 hex digits>`; the tag is "
    "required (there is no implicit `latest`, and never a fallback image). Repositories are "
    "lowercase; a registry host may lead (`ghcr.io/org/app:2.1`)."
)
_MEMORY_RULES = (
    "Memory limit of the container: bytes (at least 6 MiB), or a string of digits and a unit "
    "`b`, `k`, `m` or `g` (`512m`). Null: no limit."
)
_CPUS_RULES = "CPUs the container may use, 0.01-1024 (`0.5`: half a CPU). Null: no limit."
_RESTART_RULES = (
    "Docker's restart policy: `unless-stopped` (default), `always`, `on-failure` or `no`."
)
_HEALTH_PATH_RULES = (
    "An HTTP path on the app's port (starting with `/`, at most 1024 characters) that must "
    "answer 2xx or 3xx for the deployment to succeed; null: the app is healthy once its "
    "port accepts connections."
)
_COMMAND_RULES = (
    "argv replacing the image's CMD, 1-100 arguments of at most 4096 characters without NUL; "
    "never a shell string (no shell runs it). Null: the image's own."
)

#: By wire name: what the field means wherever it appears.
FIELDS: dict[str, str] = {
    # ids and times
    "id": "Its id (UUID).",
    "serverId": _SERVER_ID,
    "installationId": "The installation's id (UUID).",
    "deploymentId": "The deployment's id (UUID).",
    "createdAt": "When it was created (RFC 3339, UTC).",
    "updatedAt": "When it last changed (RFC 3339, UTC).",
    "finishedAt": "When it reached its final state (RFC 3339, UTC); null until then.",
    "startedAt": "When a worker started it (RFC 3339, UTC); null while queued.",
    # servers
    "name": "Its name.",
    "transport": "How berth reaches the server: `ssh` (a pinned host key, forwards only) or "
    "`local` (this machine, under `berth serve --local`).",
    "address": "The server's hostname or IP address (IPv6 without brackets); null for a "
    "pending server that has not said it yet.",
    "sshPort": "The SSH port berth connects to, 1-65535.",
    "sshUser": "The user berth connects as (`berth`, created by the install script).",
    "status": "Its status.",
    "statusDetail": "Why the status is what it is (e.g. the last connection error); null when "
    "there is nothing to say.",
    "lastSeenAt": "When berth last reached the server (RFC 3339, UTC); null: never.",
    "facts": "What the server said about itself at enrollment.",
    "hostKeys": "The server's SSH host public keys, pinned: berth never connects to a server "
    "that presents another key.",
    "publicKey": "The public half of the key pair berth holds for this server (OpenSSH "
    "format); null until it has one.",
    "authorizedKeysLine": "The line to put in the `berth` user's `authorized_keys`: the public "
    'key restricted to forwarding (`restrict,port-forwarding,command="/bin/false"`).',
    "enrollmentToken": "The one-time enrollment token (valid once, for one hour): the install "
    "script sends it. Shown only here.",
    "enrollmentExpiresAt": "When the enrollment token expires (RFC 3339, UTC).",
    "installCommand": "The command to run as root on the server: it downloads the install "
    "script and enrolls the server with the token. When this berth's address is plain "
    "`http://` (not loopback) it carries `--insecure`: the token and berth's key then cross "
    "the network unencrypted, and the script refuses to go on without it.",
    "servers": "Your servers, oldest first.",
    # facts
    "os": "The operating system (from /etc/os-release); null: unknown.",
    "arch": "The CPU architecture (`x86_64`, `aarch64`, …); null: unknown.",
    "dockerVersion": "The Docker Engine version; null: unknown.",
    "cpus": "CPUs.",
    "memoryBytes": "Memory in bytes; null: unknown.",
    # apps (an installation, and the spec a deployment deployed)
    "image": "The image reference deployed (`<repository>:<tag>[@sha256:<digest>]`).",
    "port": "The container port; without a domain also the published host port.",
    "domain": "The domain Caddy routes to the app over HTTPS; null: none (the app is at "
    "`http://<server>:<port>`).",
    "envKeys": "The names of its environment variables; values are never returned.",
    "volumes": "Its bind mounts, `<host_path>:<container_path>[:ro|:rw]`; relative host "
    "paths live under `/var/lib/berth/apps/<containerName>/` on the server.",
    "memory": "Memory limit in bytes; null: none.",
    "restart": "Docker's restart policy.",
    "healthPath": "The HTTP path that must answer 2xx/3xx for the app to be healthy; null: "
    "the port accepting connections is enough.",
    "command": "argv replacing the image's CMD; null: the image's own.",
    "containerName": "The Docker container name derived from `name`: lowercased, characters "
    "outside `[a-z0-9_.-]` replaced by `-`, runs collapsed, ends trimmed (2+ characters).",
    "url": "Where people reach the app: `https://<domain>`, else `http://<address>:<port>`; "
    "null when the server has no address or the installation was removed.",
    "lastDeployment": "Its latest deployment (whatever its state); null: none yet.",
    "currentDeploymentId": "The deployment now serving (its last succeeded one, the current "
    "revision); null: none succeeded.",
    "removedAt": "When it was removed (RFC 3339, UTC); null: it is not.",
    "stoppedAt": "When it was stopped (RFC 3339, UTC); null: it is not.",
    "installations": "The installations, oldest first.",
    # deployments
    "state": "Its state.",
    "step": "The step it is at or ended at (`pull`, `create`, `start`, `health`, `route`, "
    "`retire`, …); null while queued.",
    "error": "Why it failed, timed out or was canceled (naming the step); null otherwise.",
    "imageId": "The image id it ran (`sha256:…`): a rollback runs this very image again; "
    "null until pulled.",
    "rollbackOf": "The revision (deployment id) this deployment rolls back to; null for a deploy.",
    "attempts": "How many times a worker took it up (at most 3: a worker that died is taken over).",
    "events": "Its log, oldest first.",
    "deployments": "Deployments, newest first.",
    "nextBefore": "Pass it as `before` for the next page; null on the last page.",
    "deployment": "The deployment.",
    "installation": "The installation it deploys.",
    # events
    "at": "When it happened (RFC 3339, UTC).",
    "message": "What happened, in words.",
    # containers
    "observedAt": "When the list was read from the server (RFC 3339, UTC); null: never.",
    "serverStatus": "`online`: read just now; `offline`: the server did not answer and this is "
    "the last list seen.",
    "containers": "Every container on the server, managed by berth or not.",
    "ports": "Its published ports.",
    "containerPort": "The port inside the container.",
    "hostIp": "The host address it is published on (`0.0.0.0`, `127.0.0.1`); null: not published.",
    "hostPort": "The host port; null: not published.",
    "protocol": "`tcp`, `udp` or `sctp`.",
    # logs
    "containerId": "The container the lines come from; null: the installation has none.",
    "lines": "The last lines of its output, oldest first, env values redacted.",
    # problems
    "type": "A URI naming the kind of problem, to branch on.",
    "title": "The HTTP status's phrase.",
    "detail": "What went wrong and what to change, in words.",
    "errors": "One entry per invalid field, all at once (422), or the one input that caused "
    "the problem (`body.port` for a port in use); empty otherwise.",
    "requestId": "This request's id, as in `X-Request-Id`: quote it when reporting a bug.",
    "location": "Where the field is: `body.<field>` (`body.env.KEY`, `body.volumes[2]`), "
    "`query.<name>`, `header.<name>`, or `body` for the whole body.",
    "value": "The value received (shortened), or null; never a secret.",
}

# An answer that creates a thing has the fields of the thing's own schema.
_SERVER_OUT = {"id": "The server's id (UUID).", "name": "Its display name."}
_WEBHOOK_OUT = {
    "id": "The webhook's id (UUID).",
    "url": "Where berth POSTs the events. Whole in the answer that creates the webhook; "
    "in lists only `scheme://host[:port]/…` (a path or query may be a token).",
    "events": "What it is told of.",
    "createdAt": "When it was created.",
}

#: By schema, then wire name: where a field says more than ``FIELDS`` (these win).
SCHEMA_FIELDS: dict[str, dict[str, str]] = {
    "TlsOut": {"checkedAt": "When berth last checked HTTPS through the proxy."},
    "WebhookRequest": {
        "url": "Where berth POSTs the events: an `http` or `https` URL (at most 2048 "
        "characters, no user or password, no fragment); redirects are not followed. Its "
        "host must resolve (from berth) to public IP addresses only: loopback, private, "
        "link-local and other inside addresses are refused unless the operator allows "
        "private targets.",
        "events": "What to be told of, at least one, no repeats: `deployment.succeeded`, "
        "`deployment.failed` (failed or timed out), `deployment.canceled`, "
        "`server.offline`, `server.online`.",
    },
    "WebhookOut": _WEBHOOK_OUT,
    "WebhookCreatedOut": _WEBHOOK_OUT,
    "WebhookListOut": {"webhooks": "Your webhooks, oldest first; never a secret."},
    "DeliveryAttemptOut": {"at": "When the attempt was made."},
    "WebhookDeliveryOut": {
        "id": "The delivery's id (UUID): the event's idempotency id.",
        "webhookId": "The webhook it is for (UUID).",
        "event": "The event it tells of.",
        "createdAt": "When the change it tells of happened (the outbox row was written).",
        "attempts": "Each POST so far, oldest first.",
        "nextAttemptAt": "When the next attempt is due; null once delivered or given up.",
        "deliveredAt": "When an attempt got a 2xx answer; null until then.",
    },
    "WebhookDeliveryListOut": {
        "webhookId": "The webhook (UUID).",
        "deliveries": "Its newest deliveries, newest first, with their attempts.",
    },
    "RegistryRequest": {
        "host": "The registry, as an image reference names it: `hostname[:port]` (no scheme, "
        "path or whitespace; stored lowercased; `index.docker.io` is `docker.io`).",
        "username": "The user to pull as, 1-255 printable characters.",
        "password": "Its password or access token: sealed at rest, never returned or logged.",
    },
    "RegistryOut": {
        "id": "The saved registry's id (UUID).",
        "host": "The registry host its credentials are for (`hostname[:port]`).",
        "username": "The user deploys pull as (the password is never returned).",
        "createdAt": "When the credentials were saved.",
    },
    "RegistryListOut": {"registries": "Your saved registries, by host; never a password."},
    "Readiness": {
        "status": "`ready`: one read of berth's database answered within 2 s.",
        "database": "The kind of database berth stores its data in: `sqlite` (one process, "
        "the embedded default) or `postgresql` (shared by API replicas and workers).",
    },
    "ServerDiskOut": {
        "usage": "What Docker keeps on the server's disk, asked now (`docker system df`).",
    },
    "DeployRequest": {
        "serverId": "One of your servers (UUID); another user's is a 404 (`body.serverId`). "
        "A pending server (not enrolled yet) or one whose host key changed is a 409; an "
        "offline one accepts the deploy and it waits.",
        "name": _NAME_RULES,
        "image": _IMAGE_RULES,
        "port": _PORT_RULES,
        "domain": _DOMAIN_RULES,
        "env": _ENV_RULES,
        "volumes": _VOLUME_RULES,
        "memory": _MEMORY_RULES,
        "cpus": _CPUS_RULES,
        "restart": _RESTART_RULES,
        "healthPath": _HEALTH_PATH_RULES,
        "command": _COMMAND_RULES,
    },
    "CreateServerRequest": {
        "name": "A display name, 1-100 printable characters, not blank.",
        "address": "The server's hostname or IP address (IPv6 without brackets), 1-253 "
        "characters; null: the install script reports it.",
        "sshPort": "The SSH port berth connects to, 1-65535 (default 22).",
        "sshUser": "The user berth connects as: `^[a-z_][a-z0-9_-]{0,31}$` (default `berth`, "
        "created by the install script).",
        "hostKeys": "The server's SSH host public keys (as in `/etc/ssh/ssh_host_*_key.pub`), "
        "at most 10: with an `address`, berth pins them and reaches the server at once, "
        "without the install script. Null: the install script sends them.",
    },
    "RollbackRequest": {
        "deploymentId": "The revision to go back to: a succeeded deployment of this "
        "installation (else 409 revision-unavailable at `body.deploymentId`). Null or "
        "absent: the revision before the current one.",
    },
    "EnrollRequest": {
        "hostKeys": "The server's SSH host public keys (`ssh_host_*_key.pub` lines), 1-10; "
        "pinned before berth first connects.",
        "sshPort": "The SSH port berth should connect to, 1-65535; null: the server's.",
        "facts": "What the server says about itself; null: nothing.",
    },
    "EnrollFactsIn": {
        "os": "The operating system, 1-200 characters; null: unknown.",
        "arch": "The CPU architecture, 1-200 characters; null: unknown.",
        "dockerVersion": "The Docker Engine version, 1-200 characters; null: unknown.",
        "cpus": "CPUs, at least 1; null: unknown.",
        "memoryBytes": "Memory in bytes, at least 1; null: unknown.",
    },
    "DeployOut": {"installation": "The installation it deploys (after this request)."},
    "FactsOut": {"cpus": "CPUs; null: unknown."},
    "InstallationOut": {
        "id": "The installation's id (UUID).",
        "name": "The app's name, as given.",
        "status": "`pending` (never deployed), `deploying`, `running`, `stopped`, `failed` "
        "or `removed`.",
        "cpus": "CPU limit; null: none.",
    },
    "DeploymentOut": {
        "id": "The deployment's id (UUID).",
        "state": "`queued`, `running`, then one of `succeeded` (the app answered on its "
        "port), `failed`, `timed_out`, `canceled`.",
        "cpus": "CPU limit; null: none.",
    },
    "DeploymentRefOut": {"id": "The deployment's id (UUID).", "state": "Its state."},
    "ServerOut": {
        **_SERVER_OUT,
        "status": "`pending` until its install script enrolls it, then `online` or `offline`.",
    },
    "CreatedServerOut": {
        **_SERVER_OUT,
        "status": "`pending` until its install script enrolls it (or `online`/`offline` "
        "when created with host keys).",
    },
    "EnrolledOut": {"status": "Its status now."},
    "EnrollmentStatusOut": {"status": "`pending`, then `online` once berth reached it."},
    "EventOut": {"step": "The step it belongs to."},
    "Problem": {"status": "The HTTP status code, as in the response."},
    "Health": {"status": "`ok` (liveness) or `ready` (readiness)."},
}
