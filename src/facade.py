"""The library facade: a Berth opened on a data dir, the use cases as methods.

Every argument goes through the core's parsers and commands, as the API's input
does: a library caller gets the same rules, limits and errors (``InvalidInput``
listing every broken field, ``NotFound`` for what is not the caller's).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TypeVar
from uuid import UUID

import msgspec
from berth import __all__ as _PUBLIC
from berth.core import commands as c
from berth.core.access import Actor as Actor
from berth.core.access import Role as Role
from berth.core.access import TokenScope as TokenScope
from berth.core.bus import MessageBus
from berth.core.commands import (
    TAIL_DEFAULT,
    WAIT_MAX,
    parse_add_registry,
    parse_change_role,
    parse_change_server,
    parse_create_server,
    parse_create_team,
    parse_create_token,
    parse_create_webhook,
    parse_deploy,
    parse_id,
    parse_idempotency_key,
    parse_invite_member,
    parse_repin,
    parse_rollback,
    parse_wait,
)

# Re-exported (``X as X``): the library's public names, listed once in ``berth/__init__``.
from berth.core.errors import BadSignature as BadSignature
from berth.core.errors import Conflict as Conflict
from berth.core.errors import CoreError as CoreError
from berth.core.errors import FieldError as FieldError
from berth.core.errors import Forbidden as Forbidden
from berth.core.errors import InsufficientScope as InsufficientScope
from berth.core.errors import InvalidInput as InvalidInput
from berth.core.errors import NotFound as NotFound
from berth.core.errors import RateLimited as RateLimited
from berth.core.errors import RuntimeFailure as RuntimeFailure
from berth.core.errors import ServerUnreachable as ServerUnreachable
from berth.core.errors import Unauthorized as Unauthorized
from berth.core.models import DeployHook as DeployHook
from berth.core.models import Deployment as Deployment
from berth.core.models import DeploymentState as DeploymentState
from berth.core.models import GitCredential as GitCredential
from berth.core.models import Installation as Installation
from berth.core.models import InstallationStatus as InstallationStatus
from berth.core.models import Registry as Registry
from berth.core.models import Server as Server
from berth.core.models import ServerStatus as ServerStatus
from berth.core.models import Source as Source
from berth.core.models import User as User
from berth.core.models import Webhook as Webhook
from berth.core.models import WebhookDelivery as WebhookDelivery
from berth.core.models import WebhookEvent as WebhookEvent
from berth.core.results import ContainerList as ContainerList
from berth.core.results import CreatedDeployHook as CreatedDeployHook
from berth.core.results import CreatedServer, DeploymentFeed
from berth.core.results import CreatedWebhook as CreatedWebhook
from berth.core.results import DeploymentPage as DeploymentPage
from berth.core.results import DeployResult as DeployResult
from berth.core.results import InstallationList as InstallationList
from berth.core.results import InstallationUsage as InstallationUsage
from berth.core.results import Logs as Logs
from berth.core.results import PushOutcome as PushOutcome
from berth.core.results import ServerDisk as ServerDisk
from berth.core.results import WebhookTestResult as WebhookTestResult
from berth.core.teams import AccessToken as AccessToken
from berth.core.teams import AuditEntry as AuditEntry
from berth.core.teams import AuditPage as AuditPage
from berth.core.teams import CreatedInvitation as CreatedInvitation
from berth.core.teams import CreatedToken as CreatedToken
from berth.core.teams import Member as Member
from berth.core.teams import Team as Team
from berth.entrypoints.bootstrap import bootstrap
from berth.entrypoints.install import install_command
from berth.entrypoints.logging import configure_library_logging
from berth.entrypoints.settings import Settings as Settings
from berth.entrypoints.settings import known_base_url
from berth.entrypoints.worker import Background

__all__ = list(_PUBLIC)  # every name is defined or imported (``X as X``) here

WAIT_DEFAULT = float(WAIT_MAX)  # the API's longest ?wait


class NewServer(msgspec.Struct, frozen=True, kw_only=True):
    """A server just added: its one-time enrollment token (one hour) and the command that
    enrolls it with the install script (``None`` when the berth's address is unknown)."""

    server: Server
    enrollment_token: str
    install_command: str | None


class Berth:
    """A berth opened on a data dir (or database URL): its commands as methods.

    Each method is *check the arguments → ``bus.handle(command, user)``*, the same
    path as the HTTP API's, so a library caller meets the same rules and errors.
    """

    def __init__(
        self,
        bus: MessageBus,
        *,
        background: Background | None = None,
        base_url: str | None = None,
    ) -> None:
        """``background``: the worker and monitor running in this process (if any);
        ``base_url``: where servers reach this berth (for install commands)."""
        self.bus = bus
        self._background = background
        self._base_url = base_url.rstrip("/") if base_url else None

    # -- users -------------------------------------------------------------------------

    async def create_user(self, email: str, password: str) -> User:
        """A new user; under ``local=True`` the first one gets this machine as a server."""
        user = await self.bus.handle(c.CreateUser(email=email, password=password))
        if self._background is not None:
            self._background.check_servers()  # registers this machine now, not in 5 s
        return user

    async def regenerate_token(self, user: User | Actor) -> str:
        """A new API token for ``user``; the previous one stops working at once."""
        return await self.bus.handle(c.RegenerateToken(), user)

    async def authenticate(self, token: str) -> Actor:
        """Who an API token acts as (``Unauthorized`` otherwise): its user (``.user``) in
        its team, with its role, scopes and servers. Pass it wherever a method takes a
        ``user``: the token's rights then apply, as over the API."""
        return await self.bus.handle(c.Authenticate(token=token))

    # -- servers -----------------------------------------------------------------------

    async def create_server(
        self,
        user: User | Actor,
        *,
        name: str,
        address: str | None = None,
        ssh_port: int = 22,
        ssh_user: str | None = None,
        host_keys: Sequence[str] | None = None,
        team_id: UUID | str | None = None,
    ) -> NewServer:
        """Register a server: reachable at once with ``host_keys``, else ``pending`` until
        its install script enrolls it with the returned token. It belongs to ``team_id``
        (default: the team ``user`` acts in)."""
        raw = _given(
            name=name,
            ssh_port=ssh_port,
            address=address,
            ssh_user=ssh_user,
            host_keys=host_keys,
            team_id=_id_text(team_id),
        )
        return self._new_server(await self.bus.handle(parse_create_server(raw), user))

    async def new_enrollment_token(self, user: User | Actor, server_id: UUID | str) -> NewServer:
        """A new one-time enrollment token (and install command) for a ``pending``
        server whose install command was lost or expired; the previous token stops
        working. ``Conflict`` (``server-not-pending``) once the server has enrolled."""
        key = parse_id(server_id, "Server")
        return self._new_server(await self.bus.handle(c.NewEnrollmentToken(server_id=key), user))

    def _new_server(self, created: CreatedServer) -> NewServer:
        command = None
        if self._base_url:
            command = install_command(
                self._base_url, created.enrollment_token, created.server.ssh_port
            )
        return NewServer(
            server=created.server,
            enrollment_token=created.enrollment_token,
            install_command=command,
        )

    async def servers(
        self,
        user: User | Actor,
        *,
        status: ServerStatus | str | None = None,
        name: str | None = None,
    ) -> list[Server]:
        """The user's servers, oldest first: only those in ``status`` and whose name holds
        ``name`` (any case), when given (``InvalidInput`` for an unknown status). Page them
        with ``berth.core.paging.page`` as the API does."""
        cmd = c.ListServers(status=_status(ServerStatus, status), name=name)
        return await self.bus.handle(cmd, user)

    async def server(self, user: User | Actor, server_id: UUID | str) -> Server:
        """One of the user's servers, with its status."""
        return await self.bus.handle(c.GetServer(server_id=parse_id(server_id, "Server")), user)

    async def change_server(
        self,
        user: User | Actor,
        server_id: UUID | str,
        *,
        name: str | None = None,
        address: str | None = None,
        ssh_port: int | None = None,
    ) -> Server:
        """Change a server's name, address or SSH port in place (its id and history stay);
        what is left ``None`` is kept. A new address or port is checked at once: the server
        goes ``offline`` until berth reaches it there. ``InvalidInput`` names every wrong
        field."""
        given = {"name": name, "address": address, "ssh_port": ssh_port}
        raw = {field: value for field, value in given.items() if value is not None}
        return await self.bus.handle(parse_change_server(raw, parse_id(server_id, "Server")), user)

    async def delete_server(self, user: User | Actor, server_id: UUID | str) -> None:
        """Forget a server, its installations and deployments; its containers run on."""
        await self.bus.handle(c.DeleteServer(server_id=parse_id(server_id, "Server")), user)

    async def repin_host_keys(
        self,
        user: User | Actor,
        server_id: UUID | str,
        *,
        host_keys: Sequence[str],
        fingerprint: str,
    ) -> Server:
        """Accept the new SSH host key a server offered (its status is
        ``host_key_mismatch``): ``host_keys`` replace the pinned keys and must include the
        offered key; ``fingerprint`` is that key's (``SHA256:…``, as checked on the
        server) and must equal ``host_key_fingerprint(server.offered_host_key)``.
        ``Conflict`` otherwise; the server then reconnects with the new keys."""
        key = parse_id(server_id, "Server")
        raw = {"host_keys": list(host_keys), "fingerprint": fingerprint}
        return await self.bus.handle(parse_repin(raw, key), user)

    async def containers(self, user: User | Actor, server_id: UUID | str) -> ContainerList:
        """Every container on a server: live, or the last snapshot while it is unreachable."""
        key = parse_id(server_id, "Server")
        return await self.bus.handle(c.ListContainers(server_id=key), user)

    # -- deployments -------------------------------------------------------------------

    async def deploy(
        self,
        user: User | Actor,
        *,
        server_id: UUID | str,
        name: str,
        image: str | None = None,
        build: Mapping[str, object] | None = None,
        port: int | None = None,
        domain: str | None = None,
        env: Mapping[str, str] | None = None,
        volumes: Sequence[str] | None = None,
        memory: int | str | None = None,
        cpus: float | None = None,
        restart: str | None = None,
        health_path: str | None = None,
        command: Sequence[str] | None = None,
        host_port: int | None = None,
        stop_grace_seconds: int | None = None,
        idempotency_key: str | None = None,
        wait: float = 0.0,
    ) -> DeployResult:
        """Queue a deployment of ``image``, or of the image the server builds from
        ``build`` (exactly one: ``{"git": {"url": …, "ref": …}}`` or ``{"source_id": …}``,
        with ``context``, ``dockerfile``, ``args``, ``target``), and with ``wait`` seconds
        (at most ``WAIT_MAX``) wait for its end; the rules are the API's (``InvalidInput``
        lists every error)."""
        raw = _given(
            server_id=str(server_id),
            name=name,
            image=image,
            build=build,
            port=port,
            domain=domain,
            env=env,
            volumes=volumes,
            memory=memory,
            cpus=cpus,
            restart=restart,
            health_path=health_path,
            command=command,
            host_port=host_port,
            stop_grace_seconds=stop_grace_seconds,
        )
        key = parse_idempotency_key(idempotency_key, loc="idempotency_key")
        return await self.bus.handle(parse_deploy(raw, idempotency_key=key, wait=wait), user)

    async def upload_source(
        self, user: User | Actor, content: bytes | AsyncIterator[bytes]
    ) -> Source:
        """Keep a build context (a tar or tar.gz archive, whole or as chunks) for a
        deploy's ``build={"source_id": source.id}``; kept 24 hours after its last use."""
        chunks = _once(content) if isinstance(content, bytes) else content
        return await self.bus.handle(c.UploadSource(chunks=chunks), user)

    async def rollback(
        self,
        user: User | Actor,
        installation_id: UUID | str,
        *,
        deployment_id: UUID | str | None = None,
        idempotency_key: str | None = None,
        wait: float = 0.0,
    ) -> DeployResult:
        """Deploy an earlier succeeded revision again (default: the one before the current
        one): its spec, env and image. ``Conflict`` when there is none to go back to."""
        key = parse_id(installation_id, "Installation")
        raw = _given(deployment_id=None if deployment_id is None else str(deployment_id))
        retry_key = parse_idempotency_key(idempotency_key, loc="idempotency_key")
        cmd = parse_rollback(raw, key, idempotency_key=retry_key, wait=wait)
        return await self.bus.handle(cmd, user)

    async def cancel(
        self, user: User | Actor, deployment_id: UUID | str, *, wait: float = 0.0
    ) -> Deployment:
        """Cancel a queued or running deployment (a running one puts the previous revision
        back, if there is one); ``Conflict`` when it already ended."""
        cmd = c.CancelDeployment(deployment_id=parse_id(deployment_id, "Deployment"), wait=wait)
        return await self.bus.handle(cmd, user)

    async def revisions(
        self,
        user: User | Actor,
        installation_id: UUID | str,
        *,
        limit: int = 20,
        before: UUID | str | None = None,
    ) -> DeploymentPage:
        """An installation's deployments, newest first (``limit`` 1-100; ``before`` the
        previous page's ``next_before``); kept after the installation is removed."""
        key = parse_id(installation_id, "Installation")
        after = None if before is None else parse_id(before, "Deployment")
        return await self.bus.handle(
            c.ListRevisions(installation_id=key, limit=limit, before=after), user
        )

    async def deployment(self, user: User | Actor, deployment_id: UUID | str) -> Deployment:
        """One deployment of the user's, with its step events."""
        key = parse_id(deployment_id, "Deployment")
        return await self.bus.handle(c.GetDeployment(deployment_id=key), user)

    async def deployments(
        self, user: User | Actor, server_id: UUID | str, *, limit: int = 20
    ) -> list[Deployment]:
        """The newest deployments on a server (``limit`` 1-100), newest first."""
        key = parse_id(server_id, "Server")
        return await self.bus.handle(c.ListDeployments(server_id=key, limit=limit), user)

    async def wait(
        self,
        user: User | Actor,
        deployment_id: UUID | str,
        # Not asyncio.timeout's job: at the timeout the deployment is returned, not an error.
        timeout: float = WAIT_DEFAULT,  # noqa: ASYNC109
    ) -> Deployment:
        """The deployment once final, or as it stands when ``timeout`` seconds (at most
        ``WAIT_MAX``) have passed."""
        seconds = parse_wait(timeout, loc="timeout")
        key = parse_id(deployment_id, "Deployment")
        return await self.bus.handle(c.WaitForDeployment(deployment_id=key, seconds=seconds), user)

    async def follow(
        self, user: User | Actor, deployment_id: UUID | str, *, after: int = 0
    ) -> DeploymentFeed:
        """A deployment's events as they are written (past ones first, after event id
        ``after``), heartbeats while nothing happens, then its end: iterate it once."""
        key = parse_id(deployment_id, "Deployment")
        return await self.bus.handle(c.FollowDeployment(deployment_id=key, after=after), user)

    # -- installations -----------------------------------------------------------------

    async def installations(
        self,
        user: User | Actor,
        server_id: UUID | str,
        *,
        include_removed: bool = False,
        status: InstallationStatus | str | None = None,
        name: str | None = None,
    ) -> InstallationList:
        """The installations (apps) on a server, with the server; removed ones too with
        ``include_removed``; only those in ``status`` and whose name holds ``name``, when
        given."""
        key = parse_id(server_id, "Server")
        cmd = c.ListInstallations(
            server_id=key,
            include_removed=include_removed is True,
            status=_status(InstallationStatus, status),
            name=name,
        )
        return await self.bus.handle(cmd, user)

    async def installation(self, user: User | Actor, installation_id: UUID | str) -> Installation:
        """One installation of the user's."""
        key = parse_id(installation_id, "Installation")
        return (await self.bus.handle(c.GetInstallation(installation_id=key), user))[1]

    async def logs(
        self, user: User | Actor, installation_id: UUID | str, *, tail: int = TAIL_DEFAULT
    ) -> Logs:
        """The last ``tail`` lines (1-5000) of the installation's container, env redacted."""
        key = parse_id(installation_id, "Installation")
        return await self.bus.handle(c.InstallationLogs(installation_id=key, tail=tail), user)

    async def stats(self, user: User | Actor, installation_id: UUID | str) -> InstallationUsage:
        """CPU and memory of the installation's container, sampled now (about a second)."""
        key = parse_id(installation_id, "Installation")
        return await self.bus.handle(c.GetInstallationStats(installation_id=key), user)

    async def disk_usage(self, user: User | Actor, server_id: UUID | str) -> ServerDisk:
        """What Docker keeps on the server's disk: images, containers, volumes, cache."""
        key = parse_id(server_id, "Server")
        return await self.bus.handle(c.GetServerDiskUsage(server_id=key), user)

    async def remove_installation(self, user: User | Actor, installation_id: UUID | str) -> None:
        """Remove the installation's containers and route and mark it removed; its
        deployments stay readable (``Conflict`` while one runs)."""
        key = parse_id(installation_id, "Installation")
        await self.bus.handle(c.RemoveInstallation(installation_id=key), user)

    async def stop(self, user: User | Actor, installation_id: UUID | str) -> Installation:
        """Stop the installation's container (kept); its status becomes ``stopped``."""
        return await self._change(user, installation_id, c.InstallationAction.STOP)

    async def start(self, user: User | Actor, installation_id: UUID | str) -> Installation:
        """Start the installation's container again."""
        return await self._change(user, installation_id, c.InstallationAction.START)

    async def restart(self, user: User | Actor, installation_id: UUID | str) -> Installation:
        """Stop and start the installation's container."""
        return await self._change(user, installation_id, c.InstallationAction.RESTART)

    # -- private registries --------------------------------------------------------------

    async def add_registry(
        self, user: User | Actor, *, host: str, username: str, password: str
    ) -> Registry:
        """Save ``user``'s credentials for a registry ``host`` (``hostname[:port]``): a
        deploy of an image from that host pulls with them. The password is sealed and
        never returned; ``Conflict`` (``registry-exists``) if the host has an entry."""
        raw = _given(host=host, username=username, password=password)
        return await self.bus.handle(parse_add_registry(raw), user)

    async def registries(self, user: User | Actor) -> list[Registry]:
        """``user``'s registries, by host (never a password)."""
        return await self.bus.handle(c.ListRegistries(), user)

    async def remove_registry(self, user: User | Actor, registry_id: UUID | str) -> None:
        """Forget one of ``user``'s registries (``NotFound`` if not theirs)."""
        await self.bus.handle(c.RemoveRegistry(registry_id=parse_id(registry_id, "Registry")), user)

    # -- Git credentials and push to deploy ------------------------------------------------

    async def add_git_credential(
        self, user: User | Actor, *, host: str, username: str, password: str
    ) -> GitCredential:
        """Save the team's credentials for a Git ``host`` (``hostname[:port]``, as the
        repository URL names it): a build from a repository there fetches with them. The
        password is sealed and never returned; ``Conflict`` (``git-credential-exists``) if
        the host has an entry."""
        raw = _given(host=host, username=username, password=password)
        return await self.bus.handle(c.parse_add_git_credential(raw), user)

    async def git_credentials(self, user: User | Actor) -> list[GitCredential]:
        """The team's Git credentials, by host (never a password)."""
        return await self.bus.handle(c.ListGitCredentials(), user)

    async def remove_git_credential(
        self, user: User | Actor, git_credential_id: UUID | str
    ) -> None:
        """Forget some of the team's Git credentials (``NotFound`` if not theirs)."""
        key = parse_id(git_credential_id, "Git credential")
        await self.bus.handle(c.RemoveGitCredential(git_credential_id=key), user)

    async def create_deploy_hook(
        self, user: User | Actor, installation_id: UUID | str
    ) -> CreatedDeployHook:
        """Make the installation's push-to-deploy hook, or give it a new secret (shown
        this once): a push event for its branch, POSTed to
        ``<base URL>/api/hooks/deploy/<hook.id>`` signed with the secret, deploys the
        pushed commit. ``Conflict`` (``not-built-from-git``) for an app not built from Git."""
        key = parse_id(installation_id, "Installation")
        return await self.bus.handle(c.CreateDeployHook(installation_id=key), user)

    async def deploy_hook(self, user: User | Actor, installation_id: UUID | str) -> DeployHook:
        """The installation's deploy hook (never its secret); ``NotFound`` if none."""
        key = parse_id(installation_id, "Installation")
        return await self.bus.handle(c.GetDeployHook(installation_id=key), user)

    async def remove_deploy_hook(self, user: User | Actor, installation_id: UUID | str) -> None:
        """Remove the installation's deploy hook; its URL deploys nothing from then on."""
        key = parse_id(installation_id, "Installation")
        await self.bus.handle(c.RemoveDeployHook(installation_id=key), user)

    async def receive_push(
        self, hook_id: UUID | str, body: bytes, headers: Mapping[str, str]
    ) -> PushOutcome:
        """What a Git forge's delivery to a deploy hook does (no user: the signature in
        ``headers`` is the credential; ``BadSignature`` without the right one), as the
        hook's URL answers it — for a hook served by your own HTTP server."""
        lowered = {name.lower(): value for name, value in headers.items()}
        key = parse_id(hook_id, "Deploy hook")
        return await self.bus.handle(c.ReceivePush(hook_id=key, body=body, headers=lowered))

    # -- webhooks ----------------------------------------------------------------------

    async def create_webhook(
        self,
        user: User | Actor,
        *,
        url: str,
        events: Sequence[WebhookEvent | str],
        format: str = "standard",
    ) -> CreatedWebhook:
        """A new webhook: ``url`` is POSTed each of ``events``, signed (Standard Webhooks)
        with the returned ``secret`` (``whsec_…``), which is never shown again; ``format``
        ``slack`` or ``discord`` sends them as a chat message."""
        listed = [str(e) for e in events] if not isinstance(events, str) else events
        raw = {"url": url, "events": listed, "format": format}
        return await self.bus.handle(parse_create_webhook(raw), user)

    async def webhooks(self, user: User | Actor) -> list[Webhook]:
        """The user's webhooks, oldest first (never their secrets)."""
        return await self.bus.handle(c.ListWebhooks(), user)

    async def delete_webhook(self, user: User | Actor, webhook_id: UUID | str) -> None:
        """Forget one of the user's webhooks; its deliveries not yet made are dropped."""
        await self.bus.handle(c.DeleteWebhook(webhook_id=parse_id(webhook_id, "Webhook")), user)

    async def test_webhook(self, user: User | Actor, webhook_id: UUID | str) -> WebhookTestResult:
        """Send one of the user's webhooks a test event (``webhook.test``) now, once, and
        how its endpoint answered (not retried, not in its delivery log)."""
        cmd = c.SendTestWebhook(webhook_id=parse_id(webhook_id, "Webhook"))
        return await self.bus.handle(cmd, user)

    async def webhook_deliveries(
        self, user: User | Actor, webhook_id: UUID | str, *, limit: int = 50
    ) -> list[WebhookDelivery]:
        """The webhook's newest deliveries (1-100), newest first, each with its attempts."""
        cmd = c.ListWebhookDeliveries(webhook_id=parse_id(webhook_id, "Webhook"), limit=limit)
        return await self.bus.handle(cmd, user)

    # -- teams, members, named tokens, the audit log ------------------------------------

    async def act_as(self, user: User | Actor, team_id: UUID | str) -> Actor:
        """``user`` acting in another of their teams with their role there (``NotFound``
        if they are not a member); pass it where a method takes a ``user``."""
        return await self.bus.handle(c.ActAs(team_id=parse_id(team_id, "Team")), user)

    async def whoami(self, user: User | Actor) -> Actor:
        """Who ``user`` acts as: the user, team, role, token, scopes and servers."""
        return await self.bus.handle(c.CurrentToken(), user)

    async def teams(self, user: User | Actor) -> list[Team]:
        """The user's teams (their personal one first), each with their role."""
        return await self.bus.handle(c.ListTeams(), user)

    async def create_team(self, user: User | Actor, *, name: str) -> Team:
        """A new team; the user is its owner."""
        return await self.bus.handle(parse_create_team({"name": name}), user)

    async def members(self, user: User | Actor, team_id: UUID | str) -> list[Member]:
        """The members of one of the user's teams, with their roles."""
        return await self.bus.handle(c.ListMembers(team_id=parse_id(team_id, "Team")), user)

    async def invite(
        self, user: User | Actor, team_id: UUID | str, *, email: str, role: Role | str
    ) -> CreatedInvitation:
        """A one-time invitation (7 days) for ``email`` to join as ``role``; its ``token``
        is shown this once. Needs the role admin or owner (owner to invite an owner)."""
        raw = {"email": email, "role": role}
        return await self.bus.handle(parse_invite_member(raw, parse_id(team_id, "Team")), user)

    async def accept_invitation(self, user: User | Actor, token: str) -> Member:
        """``user`` (whose email the invitation names) joins its team."""
        return await self.bus.handle(c.AcceptInvitation(token=token), user)

    async def change_role(
        self, user: User | Actor, team_id: UUID | str, member_id: UUID | str, role: Role | str
    ) -> Member:
        """Give a member another role; a team keeps at least one owner."""
        team, member = parse_id(team_id, "Team"), parse_id(member_id, "Member")
        return await self.bus.handle(parse_change_role({"role": role}, team, member), user)

    async def remove_member(
        self, user: User | Actor, team_id: UUID | str, member_id: UUID | str
    ) -> None:
        """Take a member out of a team; their tokens for it stop at once."""
        cmd = c.RemoveMember(
            team_id=parse_id(team_id, "Team"), user_id=parse_id(member_id, "Member")
        )
        await self.bus.handle(cmd, user)

    async def tokens(self, user: User | Actor) -> list[AccessToken]:
        """The user's named tokens, newest first (never a secret)."""
        return await self.bus.handle(c.ListTokens(), user)

    async def create_token(
        self,
        user: User | Actor,
        *,
        name: str,
        scopes: Sequence[TokenScope | str],
        team_id: UUID | str | None = None,
        server_ids: Sequence[UUID | str] | None = None,
        expires_at: datetime | str | None = None,
    ) -> CreatedToken:
        """A named token for one team (default: the one ``user`` acts in), narrowed to
        ``scopes`` (``read`` ⊂ ``deploy`` ⊂ ``admin``) and, if given, to ``server_ids``
        until ``expires_at``. Its ``secret`` is shown this once."""
        raw = _given(
            name=name,
            scopes=scopes,
            team_id=_id_text(team_id),
            server_ids=None if server_ids is None else [_id_text(s) for s in server_ids],
            expires_at=expires_at,
        )
        return await self.bus.handle(parse_create_token(raw), user)

    async def revoke_token(self, user: User | Actor, token_id: UUID | str) -> None:
        """Revoke one of the user's named tokens: it is refused from now on."""
        await self.bus.handle(c.RevokeToken(token_id=parse_id(token_id, "Token")), user)

    async def audit(
        self,
        user: User | Actor,
        *,
        team_id: UUID | str | None = None,
        limit: int = c.AUDIT_PAGE_DEFAULT,
        before: UUID | str | None = None,
    ) -> AuditPage:
        """A team's audit log (default: the one ``user`` acts in), newest first; ``before``
        the previous page's ``next_before``. Needs the role admin or owner."""
        cmd = c.ListAudit(
            team_id=None if team_id is None else parse_id(team_id, "Team"),
            limit=limit,
            before=None if before is None else parse_id(before, "Audit entry"),
        )
        return await self.bus.handle(cmd, user)

    async def _change(
        self, user: User | Actor, installation_id: UUID | str, action: c.InstallationAction
    ) -> Installation:
        key = parse_id(installation_id, "Installation")
        cmd = c.ChangeInstallation(installation_id=key, action=action)
        return (await self.bus.handle(cmd, user))[1]


def _id_text(value: object) -> object:
    """A ``UUID`` as the text an API request would carry it in; anything else as it is
    (for the core's parser to judge)."""
    return str(value) if isinstance(value, UUID) else value


async def _once(content: bytes) -> AsyncIterator[bytes]:
    yield content


def _given(**arguments: object) -> dict[str, object]:
    """The arguments given (not ``None``) as the core's parsers read a request: mappings
    as dicts, sequences (not strings) as lists."""
    raw: dict[str, object] = {}
    for name, value in arguments.items():
        if isinstance(value, Mapping):
            value = dict(value)
        elif isinstance(value, Sequence) and not isinstance(value, str | bytes):
            value = list(value)
        if value is not None:
            raw[name] = value
    return raw


@asynccontextmanager
async def open(
    data_dir: str | Path = "./data",
    *,
    database_url: str | None = None,
    worker: bool = False,
    local: bool = False,
    settings: Settings | None = None,
) -> AsyncIterator[Berth]:
    """Open (creating and migrating if needed) the berth stored in ``data_dir``."""
    # worker: deployments run and servers are watched in this process (serve's Background)
    # until the block exits. local: this machine is a server of the first user (serve
    # --local); without worker it is watched (as every server) by a worker elsewhere.
    # settings gives the rest (timeouts, Docker socket, Caddy); data_dir, worker and local
    # are the arguments', database_url the argument's if given.
    configure_library_logging()
    base = settings or Settings()
    chosen = replace(
        base,
        data_dir=Path(data_dir),
        database_url=database_url or base.database_url,
        local=local,
        worker=worker,
    )
    runtime = await bootstrap(chosen, background=worker)
    try:
        if runtime.background is not None:
            await runtime.background.start()
        yield Berth(runtime.bus, background=runtime.background, base_url=known_base_url(chosen))
    finally:
        await runtime.close()  # stops the worker and the monitor first


E = TypeVar("E", ServerStatus, InstallationStatus)


def _status(kind: type[E], value: E | str | None) -> E | None:
    """A status filter as given, or ``InvalidInput`` at ``status`` naming the known ones."""
    if value is None:
        return None
    try:
        return kind(value)
    except ValueError:
        known = ", ".join(s.value for s in kind)
        raise InvalidInput([FieldError("status", f"One of: {known}.", value)]) from None
