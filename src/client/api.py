"""Every operation of berth's API, once: ``Client`` and ``AsyncClient`` both inherit them.

A method is named as the library facade's (``berth.Berth``) method that does the same,
without its ``user`` (the token says who): ``servers()``, ``deploy(server_id=…)``,
``logs(installation_id, tail=…)``. Arguments are sent as given; berth checks them and
names every broken one (``ApiError.errors``, each with the ``argument`` it came from).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, cast
from uuid import UUID

import msgspec

from . import models as m
from ._operation import Request, operation, stream
from .streams import DeploymentEvents, LogLines

__all__ = ["Api", "Id"]

Id = UUID | str  # an id, or its text: berth checks it (another user's is a 404 too)

_IDEMPOTENCY = {"Idempotency-Key": "idempotency_key"}


def _id(value: Id) -> UUID:
    """An id for a body's UUID field, sent as given: berth checks it, with every other
    field, and names it if it is not one."""
    return cast(UUID, value)


def _list(values: Sequence[str] | None) -> list[str] | None:
    return None if values is None else list(values)


class Api:
    """The API's operations, as methods (see ``berth.client``)."""

    # -- servers -------------------------------------------------------------------------

    @operation(
        "GET",
        "/api/agent/servers",
        m.ServerList,
        query={"status": "status", "name": "name", "limit": "limit", "cursor": "cursor"},
    )
    def servers(
        *,
        status: m.ServerStatus | None = None,
        name: str | None = None,
        limit: int | None = None,
        cursor: Id | None = None,
    ) -> Request:
        """Your servers, oldest first: only those in ``status`` and whose name holds
        ``name``, when given; ``limit`` per page (all without it), ``cursor`` the previous
        page's ``next_cursor``."""
        return Request(query={"status": status, "name": name, "limit": limit, "cursor": cursor})

    @operation("POST", "/api/agent/servers", m.CreatedServer, body=m.CreateServerRequest)
    def create_server(
        *,
        name: str,
        address: str | None = None,
        ssh_port: int = 22,
        ssh_user: str | None = None,
        host_keys: Sequence[str] | None = None,
        team_id: Id | None = None,
    ) -> Request:
        """Register a server (in ``team_id``, default the token's team): reachable at once
        with ``host_keys``, else ``pending`` until its install command (in the answer, with
        a one-time token) enrolls it."""
        body = m.CreateServerRequest(
            name=name,
            address=address,
            ssh_port=ssh_port,
            ssh_user="berth" if ssh_user is None else ssh_user,
            host_keys=_list(host_keys),
            team_id=None if team_id is None else _id(team_id),
        )
        return Request(body=body)

    @operation("GET", "/api/agent/servers/{serverId}", m.Server)
    def server(server_id: Id) -> Request:
        """One of your servers, with its status."""
        return Request(path={"serverId": server_id})

    @operation("PATCH", "/api/agent/servers/{serverId}", m.Server, body=m.ChangeServerRequest)
    def change_server(
        server_id: Id,
        *,
        name: str | None = None,
        address: str | None = None,
        ssh_port: int | None = None,
    ) -> Request:
        """Change a server's name, address or SSH port in place (its history stays); what is
        left ``None`` is kept. A new address or port is checked at once."""
        unset = msgspec.UNSET
        body = m.ChangeServerRequest(
            name=unset if name is None else name,
            address=unset if address is None else address,
            ssh_port=unset if ssh_port is None else ssh_port,
        )
        return Request(path={"serverId": server_id}, body=body)

    @operation("DELETE", "/api/agent/servers/{serverId}", type(None))
    def delete_server(server_id: Id) -> Request:
        """Forget a server, its installations and deployments; its containers run on."""
        return Request(path={"serverId": server_id})

    @operation("POST", "/api/agent/servers/{serverId}/enrollment-token", m.CreatedServer)
    def new_enrollment_token(server_id: Id) -> Request:
        """A new one-time enrollment token and install command for a pending server (the
        previous token stops working); a 409 ``server-not-pending`` once it enrolled."""
        return Request(path={"serverId": server_id})

    @operation("POST", "/api/agent/servers/{serverId}/host-keys", m.Server, body=m.RepinRequest)
    def repin_host_keys(server_id: Id, *, host_keys: Sequence[str], fingerprint: str) -> Request:
        """Accept the new SSH host key a server offered (status ``host_key_mismatch``):
        ``host_keys`` replace the pinned ones; ``fingerprint`` is the offered key's."""
        body = m.RepinRequest(host_keys=list(host_keys), fingerprint=fingerprint)
        return Request(path={"serverId": server_id}, body=body)

    @operation("GET", "/api/agent/servers/{serverId}/containers", m.ContainerList)
    def containers(server_id: Id) -> Request:
        """Every container on a server, live or the last snapshot while it is unreachable."""
        return Request(path={"serverId": server_id})

    @operation("GET", "/api/agent/servers/{serverId}/disk", m.ServerDisk)
    def disk_usage(server_id: Id) -> Request:
        """What Docker keeps on a server's disk: images, containers, volumes, cache."""
        return Request(path={"serverId": server_id})

    # -- installations -------------------------------------------------------------------

    @operation(
        "GET",
        "/api/agent/install",
        m.InstallationList,
        query={
            "serverId": "server_id",
            "include": "include_removed",
            "status": "status",
            "name": "name",
            "limit": "limit",
            "cursor": "cursor",
        },
    )
    def installations(
        server_id: Id,
        *,
        include_removed: bool = False,
        status: m.InstallationStatus | None = None,
        name: str | None = None,
        limit: int | None = None,
        cursor: Id | None = None,
    ) -> Request:
        """The installations (apps) on a server; removed ones too with ``include_removed``;
        filtered and paged as ``servers``."""
        query = {
            "serverId": server_id,
            "include": "removed" if include_removed else None,
            "status": status,
            "name": name,
            "limit": limit,
            "cursor": cursor,
        }
        return Request(query=query)

    @operation("GET", "/api/agent/installations/{installationId}", m.Installation)
    def installation(installation_id: Id) -> Request:
        """One installation."""
        return Request(path={"installationId": installation_id})

    @operation("DELETE", "/api/agent/installations/{installationId}", type(None))
    def remove_installation(installation_id: Id) -> Request:
        """Remove an installation's containers and route; its deployments stay readable."""
        return Request(path={"installationId": installation_id})

    @operation("POST", "/api/agent/installations/{installationId}/stop", m.Installation)
    def stop(installation_id: Id) -> Request:
        """Stop its container (kept); its status becomes ``stopped``."""
        return Request(path={"installationId": installation_id})

    @operation("POST", "/api/agent/installations/{installationId}/start", m.Installation)
    def start(installation_id: Id) -> Request:
        """Start its container again."""
        return Request(path={"installationId": installation_id})

    @operation("POST", "/api/agent/installations/{installationId}/restart", m.Installation)
    def restart(installation_id: Id) -> Request:
        """Stop and start its container."""
        return Request(path={"installationId": installation_id})

    @operation(
        "GET",
        "/api/agent/installations/{installationId}/logs",
        m.Logs,
        query={"tail": "tail", "follow": "follow"},
    )
    def logs(installation_id: Id, *, tail: int = 100) -> Request:
        """The last ``tail`` lines (1-5000) of its container's output, env values
        redacted."""
        return Request(path={"installationId": installation_id}, query={"tail": tail})

    @stream(
        "/api/agent/installations/{installationId}/logs/follow",
        LogLines,
        query={"tail": "tail"},
        accept="text/plain",
    )
    def follow_logs(installation_id: Id, *, tail: int = 100) -> Request:
        """Its last ``tail`` lines, then each new one as the app writes it, until the
        container stops (an iterator of lines, without their newline)."""
        return Request(path={"installationId": installation_id}, query={"tail": tail})

    @operation("GET", "/api/agent/installations/{installationId}/stats", m.InstallationStats)
    def stats(installation_id: Id) -> Request:
        """CPU and memory of its container, sampled now (about a second)."""
        return Request(path={"installationId": installation_id})

    # -- deployments ---------------------------------------------------------------------

    @operation(
        "POST",
        "/api/agent/docker/deploy",
        m.Queued,
        query={"wait": "wait"},
        headers=_IDEMPOTENCY,
        body=m.DeployRequest,
    )
    def deploy(
        *,
        server_id: Id,
        name: str,
        image: str | None = None,
        build: m.BuildRequest | None = None,
        port: int | None = None,
        domain: str | None = None,
        env: Mapping[str, str] | None = None,
        volumes: Sequence[str] | None = None,
        memory: int | str | None = None,
        cpus: float | None = None,
        restart: m.RestartPolicy | None = None,
        health_path: str | None = None,
        command: Sequence[str] | None = None,
        host_port: int | None = None,
        stop_grace_seconds: int | None = None,
        idempotency_key: str | None = None,
        wait: int = 0,
    ) -> Request:
        """Queue a deployment of ``image``, or of the image the server builds from
        ``build`` (exactly one of them; ``wait`` 1-300: answer once it ended, or when the
        wait is over); the same ``idempotency_key`` returns the first call's deployment."""
        given: dict[str, Any] = {
            "image": image,
            "build": build,
            "port": port,
            "domain": domain,
            "env": None if env is None else dict(env),
            "volumes": _list(volumes),
            "memory": memory,
            "cpus": cpus,
            "restart": restart,
            "health_path": health_path,
            "command": _list(command),
            "host_port": host_port,
            "stop_grace_seconds": stop_grace_seconds,
        }
        body = m.DeployRequest(
            server_id=_id(server_id),
            name=name,
            **{k: v for k, v in given.items() if v is not None},
        )
        return _queued(body, idempotency_key, wait)

    @operation(
        "POST",
        "/api/agent/installations/{installationId}/rollback",
        m.Queued,
        query={"wait": "wait"},
        headers=_IDEMPOTENCY,
        body=m.RollbackRequest,
    )
    def rollback(
        installation_id: Id,
        *,
        deployment_id: Id | None = None,
        idempotency_key: str | None = None,
        wait: int = 0,
    ) -> Request:
        """Deploy an earlier succeeded revision again (default: the one before the
        current one): a new deployment, as ``deploy`` answers."""
        body = (
            None if deployment_id is None else m.RollbackRequest(deployment_id=_id(deployment_id))
        )
        return _queued(body, idempotency_key, wait, path={"installationId": installation_id})

    @operation("POST", "/api/agent/sources", m.Source)
    def upload_source(content: bytes | Iterable[bytes], *, gzip: bool = False) -> Request:
        """Upload a build context, a tar archive (``gzip``: gzipped), as bytes or chunks
        of them (sent as they come); deploy it with ``build=BuildRequest(source_id=…)``."""
        return Request(raw=content, raw_type="application/gzip" if gzip else "application/x-tar")

    @operation("GET", "/api/agent/deployments/{deploymentId}", m.Deployment)
    def deployment(deployment_id: Id) -> Request:
        """One deployment, with its step events."""
        return Request(path={"deploymentId": deployment_id})

    @operation(
        "POST", "/api/agent/deployments/{deploymentId}/cancel", m.Deployment, query={"wait": "wait"}
    )
    def cancel(deployment_id: Id, *, wait: int = 0) -> Request:
        """Cancel a queued or running deployment (a running one puts the previous revision
        back); a 409 ``deployment-finished`` once it ended."""
        return Request(
            path={"deploymentId": deployment_id}, query={"wait": wait or None}, wait=wait
        )

    @stream(
        "/api/agent/deployments/{deploymentId}/events",
        DeploymentEvents,
        query={"lastEventId": "last_event_id"},
        headers={"Last-Event-ID": "last_event_id"},
        accept="text/event-stream",
    )
    def events(deployment_id: Id, *, last_event_id: int | None = None) -> Request:
        """Its step events (``DeploymentStep``), past then live, then its end
        (``DeploymentEnd``); after ``last_event_id`` if given. A cut connection is resumed
        where it stopped."""
        return _resumed(deployment_id, last_event_id)

    @stream(
        "/api/agent/deployments/{deploymentId}/events/text",
        DeploymentEvents,
        query={"lastEventId": "last_event_id"},
        headers={"Last-Event-ID": "last_event_id"},
        accept="text/event-stream",
    )
    def events_text(deployment_id: Id, *, last_event_id: int | None = None) -> Request:
        """The same stream as ``events`` (its operation for clients that read an answer
        whole; this client reads it as it comes all the same)."""
        return _resumed(deployment_id, last_event_id)

    @operation(
        "GET",
        "/api/agent/installations/{installationId}/deployments",
        m.DeploymentList,
        query={"limit": "limit", "before": "before"},
    )
    def revisions(installation_id: Id, *, limit: int = 20, before: Id | None = None) -> Request:
        """Its deployments, newest first (``limit`` 1-100; ``before``: the previous page's
        ``next_before``); kept after the installation is removed."""
        query = {"limit": limit, "before": before}
        return Request(path={"installationId": installation_id}, query=query)

    # -- registries ----------------------------------------------------------------------

    @operation("GET", "/api/agent/registries", m.RegistryList)
    def registries() -> Request:
        """Your registries, by host (never a password)."""
        return Request()

    @operation("POST", "/api/agent/registries", m.Registry, body=m.RegistryRequest)
    def add_registry(*, host: str, username: str, password: str) -> Request:
        """Save credentials for a registry host (``hostname[:port]``): deploys of images
        from it pull with them. The password is never returned."""
        return Request(body=m.RegistryRequest(host=host, username=username, password=password))

    @operation("DELETE", "/api/agent/registries/{registryId}", type(None))
    def remove_registry(registry_id: Id) -> Request:
        """Forget a registry's credentials."""
        return Request(path={"registryId": registry_id})

    # -- Git credentials and deploy hooks ---------------------------------------------------

    @operation("GET", "/api/agent/git-credentials", m.GitCredentialList)
    def git_credentials() -> Request:
        """Your team's Git credentials, by host (never a password)."""
        return Request()

    @operation("POST", "/api/agent/git-credentials", m.GitCredential, body=m.GitCredentialRequest)
    def add_git_credential(*, host: str, username: str, password: str) -> Request:
        """Save credentials for the private repositories of a Git host (``hostname[:port]``,
        as the repository URL names it): builds from that host fetch with them."""
        body = m.GitCredentialRequest(host=host, username=username, password=password)
        return Request(body=body)

    @operation("DELETE", "/api/agent/git-credentials/{gitCredentialId}", type(None))
    def remove_git_credential(git_credential_id: Id) -> Request:
        """Forget Git credentials."""
        return Request(path={"gitCredentialId": git_credential_id})

    @operation("POST", "/api/agent/installations/{installationId}/deploy-hook", m.DeployHookCreated)
    def create_deploy_hook(installation_id: Id) -> Request:
        """Make the installation's push-to-deploy hook, or give it a new secret (the URL
        stays): ``url`` and ``secret`` (shown this once) for the forge's webhook."""
        return Request(path={"installationId": installation_id})

    @operation("GET", "/api/agent/installations/{installationId}/deploy-hook", m.DeployHook)
    def deploy_hook(installation_id: Id) -> Request:
        """The installation's deploy hook (never its secret)."""
        return Request(path={"installationId": installation_id})

    @operation("DELETE", "/api/agent/installations/{installationId}/deploy-hook", type(None))
    def remove_deploy_hook(installation_id: Id) -> Request:
        """Remove the installation's deploy hook: its URL deploys nothing from then on."""
        return Request(path={"installationId": installation_id})

    @operation("POST", "/api/hooks/deploy/{hookId}", m.PushReceived)
    def push(hook_id: Id, body: bytes, *, signature: str, event: str = "push") -> Request:
        """Deliver a push event to a deploy hook as GitHub does: ``body`` the event's JSON,
        ``signature`` its ``X-Hub-Signature-256`` (``sha256=<hex HMAC-SHA256 of body>``).
        No token is sent: the signature is the credential."""
        headers = {"X-GitHub-Event": event, "X-Hub-Signature-256": signature}
        return Request(
            path={"hookId": hook_id}, headers=headers, raw=body, raw_type="application/json"
        )

    # -- webhooks ------------------------------------------------------------------------

    @operation(
        "GET",
        "/api/agent/webhooks",
        m.WebhookList,
        query={"url": "url", "limit": "limit", "cursor": "cursor"},
    )
    def webhooks(
        *, url: str | None = None, limit: int | None = None, cursor: Id | None = None
    ) -> Request:
        """Your webhooks (never their secrets): only those whose URL holds ``url``, when
        given; paged as ``servers``."""
        return Request(query={"url": url, "limit": limit, "cursor": cursor})

    @operation("POST", "/api/agent/webhooks", m.WebhookCreated, body=m.WebhookRequest)
    def create_webhook(
        *, url: str, events: Sequence[m.WebhookEvent], format: m.WebhookFormat = "standard"
    ) -> Request:
        """A new webhook: ``url`` is POSTed each of ``events``, signed with the returned
        ``secret`` (shown this once); ``format`` ``slack`` or ``discord`` sends them as a
        chat message."""
        return Request(body=m.WebhookRequest(url=url, events=list(events), format=format))

    @operation("DELETE", "/api/agent/webhooks/{webhookId}", type(None))
    def delete_webhook(webhook_id: Id) -> Request:
        """Forget a webhook; its deliveries not yet made are dropped."""
        return Request(path={"webhookId": webhook_id})

    @operation(
        "GET",
        "/api/agent/webhooks/{webhookId}/deliveries",
        m.WebhookDeliveryList,
        query={"limit": "limit"},
    )
    def webhook_deliveries(webhook_id: Id, *, limit: int = 50) -> Request:
        """Its newest deliveries (1-100), newest first, each with its attempts."""
        return Request(path={"webhookId": webhook_id}, query={"limit": limit})

    @operation("POST", "/api/agent/webhooks/{webhookId}/test", m.WebhookTest)
    def test_webhook(webhook_id: Id) -> Request:
        """Send it a test event (``webhook.test``) now: how its endpoint answered."""
        return Request(path={"webhookId": webhook_id})

    # -- teams, members, invitations ----------------------------------------------------

    @operation("GET", "/api/agent/teams", m.TeamList)
    def teams() -> Request:
        """Your teams, with your role in each: your personal team first."""
        return Request()

    @operation("POST", "/api/agent/teams", m.Team, body=m.TeamRequest)
    def create_team(*, name: str) -> Request:
        """A new team, you its owner."""
        return Request(body=m.TeamRequest(name=name))

    @operation("GET", "/api/agent/teams/{teamId}/members", m.MemberList)
    def members(team_id: Id) -> Request:
        """A team's members, with their roles, oldest first."""
        return Request(path={"teamId": team_id})

    @operation(
        "POST", "/api/agent/teams/{teamId}/invitations", m.Invitation, body=m.InvitationRequest
    )
    def invite(team_id: Id, *, email: str, role: m.Role) -> Request:
        """A one-time invitation (7 days) for ``email`` to join with ``role``; its
        ``token`` and ``url`` are shown this once."""
        return Request(path={"teamId": team_id}, body=m.InvitationRequest(email=email, role=role))

    @operation("POST", "/api/agent/invitations/{invitationToken}/accept", m.Member)
    def accept_invitation(invitation_token: str) -> Request:
        """Join the team of an invitation made for your email."""
        return Request(path={"invitationToken": invitation_token})

    @operation("PATCH", "/api/agent/teams/{teamId}/members/{userId}", m.Member, body=m.RoleRequest)
    def change_role(team_id: Id, user_id: Id, *, role: m.Role) -> Request:
        """Give a member another role (a team keeps at least one owner)."""
        return Request(path={"teamId": team_id, "userId": user_id}, body=m.RoleRequest(role=role))

    @operation("DELETE", "/api/agent/teams/{teamId}/members/{userId}", type(None))
    def remove_member(team_id: Id, user_id: Id) -> Request:
        """Take a member out of the team; their tokens for it stop at once."""
        return Request(path={"teamId": team_id, "userId": user_id})

    # -- named tokens, the audit log ----------------------------------------------------

    @operation("GET", "/api/agent/tokens", m.TokenList)
    def tokens() -> Request:
        """Your named tokens, newest first (never a secret)."""
        return Request()

    @operation("POST", "/api/agent/tokens", m.TokenCreated, body=m.TokenRequest)
    def create_token(
        *,
        name: str,
        scopes: Sequence[m.TokenScope],
        team_id: Id | None = None,
        server_ids: Sequence[Id] | None = None,
        expires_at: datetime | None = None,
    ) -> Request:
        """A named token for one team, narrowed to ``scopes`` (never wider than your role),
        to ``server_ids`` if given, until ``expires_at``; its ``token`` is shown this once."""
        body = m.TokenRequest(
            name=name,
            scopes=list(scopes),
            team_id=None if team_id is None else _id(team_id),
            server_ids=None if server_ids is None else [_id(s) for s in server_ids],
            expires_at=None if expires_at is None else expires_at.isoformat(),
        )
        return Request(body=body)

    @operation("GET", "/api/agent/tokens/current", m.CurrentToken)
    def whoami() -> Request:
        """The calling token: its user, team, role, scopes and servers."""
        return Request()

    @operation("DELETE", "/api/agent/tokens/{tokenId}", type(None))
    def revoke_token(token_id: Id) -> Request:
        """Revoke a named token: requests with it fail at once."""
        return Request(path={"tokenId": token_id})

    @operation(
        "GET",
        "/api/agent/audit",
        m.AuditPage,
        query={"teamId": "team_id", "limit": "limit", "before": "before"},
    )
    def audit(*, team_id: Id | None = None, limit: int = 50, before: Id | None = None) -> Request:
        """A team's audit log (default: the token's team), newest first (``limit`` 1-200;
        ``before``: the previous page's ``next_before``)."""
        return Request(query={"teamId": team_id, "limit": limit, "before": before})

    # -- the install script's routes (other credentials than the API token) --------------

    @operation("GET", "/api/agent/servers/enroll", m.EnrollmentStatus)
    def enrollment_status(enrollment_token: str) -> Request:
        """The status of the server an enrollment token was made for."""
        return Request(token=enrollment_token)

    @operation("POST", "/api/agent/servers/enroll", m.Enrolled, body=m.EnrollRequest)
    def enroll(
        enrollment_token: str,
        *,
        host_keys: Sequence[str],
        ssh_port: int | None = None,
        facts: m.EnrollFacts | None = None,
    ) -> Request:
        """Enroll a server with its one-time token: its host keys (pinned), SSH port and
        facts; the answer says which key to authorize for berth's user."""
        body = m.EnrollRequest(host_keys=list(host_keys), ssh_port=ssh_port, facts=facts)
        return Request(token=enrollment_token, body=body)

    @operation("GET", "/api/agent/servers/self", m.EnrollmentStatus)
    def own_status(signature: str) -> Request:
        """A server's own status, asked with a request signature (``berth_sig.…``, made
        with one of its pinned host keys)."""
        return Request(token=signature)

    @operation("POST", "/api/agent/servers/self/uninstall", m.EnrollmentStatus)
    def report_uninstalled(signature: str) -> Request:
        """A server saying it was uninstalled, with a request signature."""
        return Request(token=signature)

    # -- public --------------------------------------------------------------------------

    @operation("GET", "/healthz", m.Health)
    def health() -> Request:
        """Whether berth answers (liveness)."""
        return Request()

    @operation("GET", "/readyz", m.Readiness)
    def readiness() -> Request:
        """Whether berth can serve: its store answers (a 503 ``ApiError`` otherwise)."""
        return Request()

    @operation("GET", "/api/deploy", str, accept="text/x-shellscript")
    def install_script() -> Request:
        """The server install script (POSIX sh), as ``curl …/api/deploy | sh`` runs it."""
        return Request()

    @operation(
        "GET",
        "/api/agent/openapi.json",
        dict[str, Any],
        accept="application/vnd.oai.openapi+json",
    )
    def openapi() -> Request:
        """The OpenAPI 3.1 document of the running berth."""
        return Request()


def _queued(
    body: Any, idempotency_key: str | None, wait: int, path: Mapping[str, object] | None = None
) -> Request:
    """A deploy's or a rollback's request: its body, ``?wait`` and ``Idempotency-Key``."""
    return Request(
        path=path or {},
        query={"wait": wait or None},
        headers={"Idempotency-Key": idempotency_key},
        body=body,
        wait=wait,
    )


def _resumed(deployment_id: Id, last_event_id: int | None) -> Request:
    """A deployment's stream, after ``last_event_id`` if given."""
    header = None if last_event_id is None else str(last_event_id)
    return Request(path={"deploymentId": deployment_id}, headers={"Last-Event-ID": header})
