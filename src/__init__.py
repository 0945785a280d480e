"""berth as a library: the same use cases and rules as the HTTP API, without HTTP.

    import asyncio, berth

    async def main() -> None:
        async with berth.open("./data", worker=True, local=True) as app:
            user = await app.create_user("ada@example.com", "correct horse battery")
            (here,) = await app.servers(user)  # local=True: this machine, for the first user
            result = await app.deploy(
                user, server_id=here.id, name="shop", image="shop:1.0", port=8080, wait=60
            )
            print(result.deployment.state)  # succeeded (or failed, saying why)
            added = await app.create_server(user, name="web-1", address="203.0.113.10")
            print(added.install_command)  # run it on that server: it enrolls, then takes deploys

    asyncio.run(main())

With ``worker=True`` deployments run in this process; without, another process's worker
(``berth serve`` or ``berth worker`` on the same store) runs them, and ``await
app.wait(user, deployment_id)`` returns once one is final. ``rollback``, ``cancel``,
``stop``/``start``/``restart`` and ``revisions`` act on what was deployed; ``stats`` and
``disk_usage`` read what it uses; ``add_registry``/``registries``/``remove_registry`` keep
the credentials a deploy of an image from a private registry pulls with;
``create_webhook``, ``webhooks``, ``delete_webhook`` and ``webhook_deliveries`` manage
signed webhooks (delivered by the worker); ``add_git_credential``/``git_credentials``/
``remove_git_credential`` keep the credentials a build from a private Git repository
fetches with, and ``create_deploy_hook``/``deploy_hook``/``remove_deploy_hook`` (with
``receive_push``) deploy an app built from Git on each push to its branch.

Servers, registries and webhooks belong to a team. A ``User`` acts with every right in
their personal team; ``authenticate(token)`` and ``act_as(user, team_id)`` give an
``Actor`` (a user in one team, with their role and a token's scopes and servers), which
every method takes in place of the user — a call it may not make raises
``InsufficientScope`` and changes nothing. ``teams``, ``create_team``, ``members``,
``invite``, ``accept_invitation``, ``change_role``, ``remove_member``, ``tokens``,
``create_token``, ``revoke_token``, ``whoami`` and ``audit`` manage them.

Every input goes through ``berth.core.commands.parse_*``: a library user cannot
bypass a rule of the API contract.
"""

from __future__ import annotations

from typing import Any

# The library's public names (``berth.facade`` re-exports exactly these), listed here so
# that importing ``berth`` imports nothing more.
__all__ = [
    "AccessToken",
    "Actor",
    "AuditEntry",
    "AuditPage",
    "BadSignature",
    "Berth",
    "Conflict",
    "ContainerList",
    "CoreError",
    "CreatedDeployHook",
    "CreatedInvitation",
    "CreatedToken",
    "CreatedWebhook",
    "DeployHook",
    "DeployResult",
    "Deployment",
    "DeploymentPage",
    "DeploymentState",
    "FieldError",
    "Forbidden",
    "GitCredential",
    "Installation",
    "InstallationList",
    "InstallationStatus",
    "InstallationUsage",
    "InsufficientScope",
    "InvalidInput",
    "Logs",
    "Member",
    "NewServer",
    "NotFound",
    "PushOutcome",
    "RateLimited",
    "Registry",
    "Role",
    "RuntimeFailure",
    "Server",
    "ServerDisk",
    "ServerStatus",
    "ServerUnreachable",
    "Settings",
    "Source",
    "Team",
    "TokenScope",
    "Unauthorized",
    "User",
    "Webhook",
    "WebhookDelivery",
    "WebhookEvent",
    "WebhookTestResult",
    "open",
]


def __getattr__(name: str) -> Any:
    """Import the facade on first use, so ``import berth.core`` stays free of I/O libraries."""
    if name in __all__:
        from . import facade

        return getattr(facade, name)
    raise AttributeError(f"module 'berth' has no attribute {name!r}")
