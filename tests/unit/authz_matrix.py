"""The authorization matrix: every command by every role by every token scope, over one bus.

Shared by ``test_authorization.py`` (the in-memory fakes) and
``tests/integration/test_teams_sql.py`` (SQLite and PostgreSQL): the same world is
built through the bus on either store, and each cell checks that a command the role
and scopes allow is not refused, and that one they do not allow is a 403
``insufficient-scope`` that changes nothing but the audit log, which holds one
``denied`` entry for it.

The expectations are written out here (``ROLE_MAY``, ``SCOPE_MAY``, ``NEEDS``) from
SPEC.md's table, not computed by the code under test.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID, uuid4

from berth.core import commands as c
from berth.core.access import Actor, Role, TokenScope
from berth.core.bus import MessageBus
from berth.core.errors import CoreError, InsufficientScope
from berth.core.models import User, WebhookEvent
from berth.core.teams import AuditOutcome


async def _tar_chunks() -> AsyncIterator[bytes]:
    """A tiny build context (a Dockerfile), as an upload's chunks."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        data = b"FROM scratch\n"
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    yield buffer.getvalue()


__all__ = [
    "COMMANDS",
    "NEEDS",
    "ROLE_MAY",
    "SCOPE_MAY",
    "World",
    "allowed",
    "build_world",
    "run_cell",
]

HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHk2hJxkfVzN2w2Ccqq3U2ywCyjQDIRr0eSFoLHaBfkd"
PASSWORD = "correct horse battery staple"

#: What each command needs, by SPEC.md's table (a name: ``read``, ``deploy``, ``admin``
#: — servers, registries, webhooks, the audit log —, ``members``, ``owner``, ``account``
#: — the user's own tokens and teams —, ``signed-in``).
NEEDS: dict[type[c.Command[Any]], str] = {
    c.DeployCommand: "deploy",
    c.UploadSource: "deploy",
    c.Rollback: "deploy",
    c.CancelDeployment: "deploy",
    c.ChangeInstallation: "deploy",
    c.RemoveInstallation: "deploy",
    c.GetDeployment: "read",
    c.WaitForDeployment: "read",
    c.FollowDeployment: "read",
    c.ListDeployments: "read",
    c.ListRevisions: "read",
    c.ListInstallations: "read",
    c.GetInstallation: "read",
    c.InstallationLogs: "read",
    c.FollowInstallationLogs: "read",
    c.GetInstallationStats: "read",
    c.GetServerDiskUsage: "read",
    c.ListServers: "read",
    c.GetServer: "read",
    c.ListContainers: "read",
    c.ListMembers: "read",
    c.CreateServerCommand: "admin",
    c.NewEnrollmentToken: "admin",
    c.DeleteServer: "admin",
    c.ChangeServer: "admin",
    c.RepinHostKeys: "admin",
    c.AddRegistry: "admin",
    c.ListRegistries: "admin",
    c.RemoveRegistry: "admin",
    c.AddGitCredential: "admin",
    c.ListGitCredentials: "admin",
    c.RemoveGitCredential: "admin",
    c.CreateDeployHook: "deploy",
    c.GetDeployHook: "read",
    c.RemoveDeployHook: "deploy",
    c.DeployPush: "deploy",
    c.CreateWebhook: "admin",
    c.ListWebhooks: "admin",
    c.DeleteWebhook: "admin",
    c.ListWebhookDeliveries: "admin",
    c.SendTestWebhook: "admin",
    c.ListAudit: "admin",
    c.InviteMember: "members",
    c.ChangeMemberRole: "members",
    c.RemoveMember: "members",
    c.CreateTeam: "account",
    c.AcceptInvitation: "account",
    c.CreateToken: "account",
    c.RevokeToken: "account",
    c.RegenerateToken: "account",
    c.ListTeams: "signed-in",
    c.ListTokens: "signed-in",
    c.CurrentToken: "signed-in",
    c.TokenInfo: "signed-in",
    c.ActAs: "signed-in",
    c.GetOAuthRequest: "signed-in",
    c.DenyOAuth: "signed-in",
    c.ApproveOAuth: "account",
}

#: SPEC.md's roles: what each may.
ROLE_MAY = {
    Role.OWNER: {"read", "deploy", "admin", "members", "owner"},
    Role.ADMIN: {"read", "deploy", "admin", "members"},
    Role.DEPLOYER: {"read", "deploy"},
    Role.VIEWER: {"read"},
}
#: What each scope lets through: ``read`` ⊂ ``deploy`` ⊂ ``admin`` (everything).
SCOPE_MAY = {
    TokenScope.READ: {"read"},
    TokenScope.DEPLOY: {"read", "deploy"},
    TokenScope.ADMIN: {"read", "deploy", "admin", "members", "owner", "account"},
}
#: What a token limited to servers never may: the team's or the account's at large.
TEAM_WIDE = {"admin", "members", "owner", "account"}


def allowed(needed: str, role: Role, scope: TokenScope, *, limited: bool = False) -> bool:
    """Whether SPEC.md lets a ``role`` holding a token of ``scope`` do what needs ``needed``."""
    if needed == "signed-in":
        return True
    by_role = ROLE_MAY[role] | {"account"}  # the account is the user's, whatever the role
    if needed not in by_role or needed not in SCOPE_MAY[scope]:
        return False
    return not (limited and needed in TEAM_WIDE)


@dataclass(slots=True)
class World:
    """A team (its owner, a member acting through a token, a viewer to act on), what it
    owns, and another team's server."""

    bus: MessageBus
    owner: User
    member: User
    actor: Actor  # the member, through their token
    team_id: UUID
    server_id: UUID
    other_server_id: UUID  # of the same team, outside a limited token's servers
    installation_id: UUID
    deployment_id: UUID
    webhook_id: UUID
    registry_id: UUID
    viewer_id: UUID
    spare_token_id: UUID
    invitation: str  # for the member, to another team
    strangers_server_id: UUID  # another team's


def _email(tag: str) -> str:
    return f"{tag}-{uuid4().hex[:10]}@example.com"


async def _user(bus: MessageBus, tag: str) -> User:
    return await bus.handle(c.CreateUser(email=_email(tag), password=PASSWORD))


async def _join(bus: MessageBus, owner: User, team_id: UUID, user: User, role: Role) -> None:
    invited = await bus.handle(c.InviteMember(team_id=team_id, email=user.email, role=role), owner)
    await bus.handle(c.AcceptInvitation(token=invited.token), user)


async def _server(bus: MessageBus, who: User | Actor, name: str) -> UUID:
    raw = {"name": name, "address": "203.0.113.7", "host_keys": [HOST_KEY]}
    return (await bus.handle(c.parse_create_server(raw), who)).server.id


async def build_world(
    bus: MessageBus, role: Role, scope: TokenScope, *, limited: bool = False
) -> World:
    """A team made through ``bus``: its owner, a member of ``role`` holding a token of
    ``scope`` (limited to the first server when ``limited``), a viewer, two servers, an
    app on the first one with a queued deployment, a webhook, a registry."""
    owner, member, viewer = [await _user(bus, t) for t in ("owner", "member", "viewer")]
    team = await bus.handle(c.CreateTeam(name="platform"), owner)
    lead = await bus.handle(c.ActAs(team_id=team.id), owner)
    await _join(bus, owner, team.id, member, role)
    await _join(bus, owner, team.id, viewer, Role.VIEWER)
    server_id = await _server(bus, lead, "web-1")
    other_server_id = await _server(bus, lead, "web-2")
    deployed = await bus.handle(
        c.parse_deploy({"server_id": str(server_id), "name": "shop", "image": "shop:1.0"}), lead
    )
    hook = await bus.handle(
        c.CreateWebhook(url="https://hooks.example.com/x", events=(WebhookEvent.SERVER_ONLINE,)),
        lead,
    )
    registry = await bus.handle(
        c.AddRegistry(host="registry.example.com", username="ci", password="s3cret"), lead
    )
    elsewhere = await bus.handle(c.CreateTeam(name="elsewhere"), owner)
    invited = await bus.handle(
        c.InviteMember(team_id=elsewhere.id, email=member.email, role=Role.VIEWER), owner
    )
    servers = frozenset({server_id}) if limited else None
    made = await bus.handle(
        c.CreateToken(name="agent", scopes=frozenset({scope}), team_id=team.id, server_ids=servers),
        member,
    )
    spare = await bus.handle(
        c.CreateToken(name="spare", scopes=frozenset({TokenScope.READ}), team_id=team.id), member
    )
    stranger = await _user(bus, "stranger")
    strangers_server_id = await _server(bus, stranger, "theirs")
    actor = await bus.handle(c.Authenticate(token=made.secret, client_address="198.51.100.7"))
    return World(
        bus=bus,
        owner=owner,
        member=member,
        actor=actor,
        team_id=team.id,
        server_id=server_id,
        other_server_id=other_server_id,
        installation_id=deployed.installation.id,
        deployment_id=deployed.deployment.id,
        webhook_id=hook.webhook.id,
        registry_id=registry.id,
        viewer_id=viewer.id,
        spare_token_id=spare.token.id,
        invitation=invited.token,
        strangers_server_id=strangers_server_id,
    )


#: A valid instance of every command a signed-in actor may send, in a world.
COMMANDS: dict[type[c.Command[Any]], Callable[[World], c.Command[Any]]] = {
    c.DeployCommand: lambda w: c.parse_deploy(
        {"server_id": str(w.server_id), "name": "shop", "image": "shop:1.1"}
    ),
    c.UploadSource: lambda w: c.UploadSource(chunks=_tar_chunks()),
    c.Rollback: lambda w: c.Rollback(installation_id=w.installation_id),
    c.CancelDeployment: lambda w: c.CancelDeployment(deployment_id=w.deployment_id),
    c.ChangeInstallation: lambda w: c.ChangeInstallation(
        installation_id=w.installation_id, action=c.InstallationAction.STOP
    ),
    c.RemoveInstallation: lambda w: c.RemoveInstallation(installation_id=w.installation_id),
    c.GetDeployment: lambda w: c.GetDeployment(deployment_id=w.deployment_id),
    c.WaitForDeployment: lambda w: c.WaitForDeployment(deployment_id=w.deployment_id, seconds=0),
    c.FollowDeployment: lambda w: c.FollowDeployment(deployment_id=w.deployment_id),
    c.ListDeployments: lambda w: c.ListDeployments(server_id=w.server_id),
    c.ListRevisions: lambda w: c.ListRevisions(installation_id=w.installation_id),
    c.ListInstallations: lambda w: c.ListInstallations(server_id=w.server_id),
    c.GetInstallation: lambda w: c.GetInstallation(installation_id=w.installation_id),
    c.InstallationLogs: lambda w: c.InstallationLogs(installation_id=w.installation_id),
    c.FollowInstallationLogs: lambda w: c.FollowInstallationLogs(installation_id=w.installation_id),
    c.GetInstallationStats: lambda w: c.GetInstallationStats(installation_id=w.installation_id),
    c.GetServerDiskUsage: lambda w: c.GetServerDiskUsage(server_id=w.server_id),
    c.ListServers: lambda w: c.ListServers(),
    c.GetServer: lambda w: c.GetServer(server_id=w.server_id),
    c.ListContainers: lambda w: c.ListContainers(server_id=w.server_id),
    c.ListMembers: lambda w: c.ListMembers(team_id=w.team_id),
    c.CreateServerCommand: lambda w: c.parse_create_server({"name": "web-3"}),
    c.NewEnrollmentToken: lambda w: c.NewEnrollmentToken(server_id=w.server_id),
    c.DeleteServer: lambda w: c.DeleteServer(server_id=w.server_id),
    c.ChangeServer: lambda w: c.ChangeServer(server_id=w.server_id, name="renamed"),
    c.RepinHostKeys: lambda w: c.RepinHostKeys(
        server_id=w.server_id, host_keys=(HOST_KEY,), fingerprint="SHA256:x"
    ),
    c.AddRegistry: lambda w: c.AddRegistry(
        host="ghcr.example.com", username="ci", password="s3cret"
    ),
    c.ListRegistries: lambda w: c.ListRegistries(),
    c.RemoveRegistry: lambda w: c.RemoveRegistry(registry_id=w.registry_id),
    c.AddGitCredential: lambda w: c.AddGitCredential(
        host="git.example.com", username="ci", password="s3cret"
    ),
    c.ListGitCredentials: lambda w: c.ListGitCredentials(),
    c.RemoveGitCredential: lambda w: c.RemoveGitCredential(git_credential_id=uuid4()),
    # The app is deployed from an image: allowed, then a 409 (not-built-from-git), or a 404.
    c.CreateDeployHook: lambda w: c.CreateDeployHook(installation_id=w.installation_id),
    c.GetDeployHook: lambda w: c.GetDeployHook(installation_id=w.installation_id),
    c.RemoveDeployHook: lambda w: c.RemoveDeployHook(installation_id=w.installation_id),
    c.DeployPush: lambda w: c.DeployPush(
        installation_id=w.installation_id, ref="refs/heads/main", commit="a" * 40
    ),
    c.CreateWebhook: lambda w: c.CreateWebhook(
        url="https://hooks.example.com/y", events=(WebhookEvent.SERVER_OFFLINE,)
    ),
    c.ListWebhooks: lambda w: c.ListWebhooks(),
    c.DeleteWebhook: lambda w: c.DeleteWebhook(webhook_id=w.webhook_id),
    c.ListWebhookDeliveries: lambda w: c.ListWebhookDeliveries(webhook_id=w.webhook_id),
    c.SendTestWebhook: lambda w: c.SendTestWebhook(webhook_id=w.webhook_id),
    c.ListAudit: lambda w: c.ListAudit(team_id=w.team_id),
    c.InviteMember: lambda w: c.InviteMember(
        team_id=w.team_id, email=_email("new"), role=Role.DEPLOYER
    ),
    c.ChangeMemberRole: lambda w: c.ChangeMemberRole(
        team_id=w.team_id, user_id=w.viewer_id, role=Role.DEPLOYER
    ),
    c.RemoveMember: lambda w: c.RemoveMember(team_id=w.team_id, user_id=w.viewer_id),
    c.CreateTeam: lambda w: c.CreateTeam(name="side project"),
    c.AcceptInvitation: lambda w: c.AcceptInvitation(token=w.invitation),
    c.CreateToken: lambda w: c.CreateToken(name="more", scopes=frozenset({TokenScope.READ})),
    c.RevokeToken: lambda w: c.RevokeToken(token_id=w.spare_token_id),
    c.RegenerateToken: lambda w: c.RegenerateToken(),
    c.ListTeams: lambda w: c.ListTeams(),
    c.ListTokens: lambda w: c.ListTokens(),
    c.CurrentToken: lambda w: c.CurrentToken(),
    c.TokenInfo: lambda w: c.TokenInfo(),
    c.ActAs: lambda w: c.ActAs(team_id=w.team_id),
    # No such request (404 once allowed): approving mints nothing until a client redeems.
    c.GetOAuthRequest: lambda w: c.GetOAuthRequest(authorization_id=uuid4()),
    c.DenyOAuth: lambda w: c.DenyOAuth(authorization_id=uuid4()),
    c.ApproveOAuth: lambda w: c.ApproveOAuth(
        authorization_id=uuid4(), team_id=w.team_id, scopes=frozenset({TokenScope.READ})
    ),
}


async def run_cell(
    world: World,
    kind: type[c.Command[Any]],
    snapshot: Callable[[], Awaitable[object]],
    *,
    limited: bool = False,
) -> str:
    """Send ``kind`` as the world's member through their token and check the outcome
    against SPEC.md: ``"allowed"`` or ``"refused"`` (and what changed, then, is only
    one ``denied`` audit entry naming the action). ``snapshot`` reads the store's state
    but the audit log."""
    role, (scope,) = world.actor.role, world.actor.scopes - _below(world.actor.scopes)
    expect = allowed(NEEDS[kind], role, scope, limited=limited)
    command = COMMANDS[kind](world)
    # What a refusal must leave as it was (an allowed command is not checked for changes).
    before = None if expect else await snapshot()
    audit_before = [] if expect else await _audit(world)
    try:
        await world.bus.handle(command, world.actor)
    except InsufficientScope as exc:
        assert not expect, f"{kind.__name__} refused to {role}/{scope}: {exc.detail}"  # noqa: PT017
        assert await snapshot() == before, f"{kind.__name__}: a refusal changed the store"
        new = [e for e in await _audit(world) if e.id not in {a.id for a in audit_before}]
        assert [(e.outcome, e.actor.token_name) for e in new] == [(AuditOutcome.DENIED, "agent")], (
            new
        )
        assert new[0].client_address == "198.51.100.7"
        return "refused"
    except CoreError:
        pass  # allowed, then refused for the data's sake (409, 404, 503): not this matrix's
    assert expect, f"{kind.__name__} allowed to {role}/{scope} (limited={limited})"
    return "allowed"


def _below(scopes: frozenset[TokenScope]) -> frozenset[TokenScope]:
    """The scopes implied by a higher one in ``scopes`` (what leaves the one given)."""
    order = [TokenScope.READ, TokenScope.DEPLOY, TokenScope.ADMIN]
    top = max(order.index(s) for s in scopes)
    return frozenset(order[:top])


async def _audit(world: World) -> list[Any]:
    owner_view = await world.bus.handle(c.ActAs(team_id=world.team_id), world.owner)
    page = await world.bus.handle(c.ListAudit(limit=200), owner_view)
    return list(page.entries)
