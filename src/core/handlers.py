"""Every command's one handler, registered on the bus in one place.

Most handlers are a use case called with the command's fields. The deploy
flow is the one with more to it — ownership (404) before the deploy rate
limit (429), queue, wake the worker, wait if asked, read the installation —
and it lives here once, for the API, the dashboard, MCP, the CLI and the
library alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from . import commands as c
from . import results as r
from . import use_cases as uc
from .bus import MessageBus
from .errors import Conflict, CoreError, NotFound, RateLimited
from .events import (
    DeploymentCancelRequested,
    DeploymentFinished,
    DeploymentQueued,
    ServerRegistered,
)
from .limits import Limit, RateLimiter
from .models import Deployment, DeploymentState, User

__all__ = ["UseCases", "register"]

log = structlog.get_logger()


@dataclass(frozen=True, slots=True)
class UseCases:
    """The use cases, built once by the composition root from the adapters."""

    create_user: uc.CreateUser
    regenerate_token: uc.RegenerateToken
    token_info: uc.TokenInfo
    authenticate: uc.Authenticate
    create_server: uc.CreateServer
    enroll_server: uc.EnrollServer
    enrollment_status: uc.EnrollmentStatus
    server_self_status: uc.ServerSelfStatus
    report_uninstalled: uc.ReportUninstalled
    list_servers: uc.ListServers
    get_server: uc.GetServer
    deploy: uc.Deploy
    get_deployment: uc.GetDeployment
    wait_for_deployment: uc.WaitForDeployment
    get_installation: uc.GetInstallation
    list_installations: uc.ListInstallations
    list_containers: uc.ListContainers
    installation_logs: uc.InstallationLogs
    remove_installation: uc.RemoveInstallation
    change_installation: uc.ChangeInstallation
    list_revisions: uc.ListRevisions
    rollback: uc.Rollback
    cancel_deployment: uc.CancelDeployment
    delete_server: uc.DeleteServer
    repin_host_keys: uc.RepinHostKeys
    new_enrollment_token: uc.NewEnrollmentToken
    list_deployments: uc.ListDeployments
    signup_policy: uc.SignUpPolicy
    sign_up: uc.SignUp
    sign_in: uc.SignIn
    resolve_session: uc.ResolveSession
    sign_out: uc.SignOut
    create_invite: uc.CreateInvite
    follow_deployment: uc.FollowDeployment
    follow_installation_logs: uc.FollowInstallationLogs
    installation_stats: uc.InstallationStats
    server_disk_usage: uc.ServerDiskUsage
    count_store: uc.CountStore
    add_registry: uc.AddRegistry
    list_registries: uc.ListRegistries
    remove_registry: uc.RemoveRegistry
    create_webhook: uc.CreateWebhook
    list_webhooks: uc.ListWebhooks
    delete_webhook: uc.DeleteWebhook
    list_webhook_deliveries: uc.ListWebhookDeliveries
    # Under ``serve --local``: this machine, registered for the first account at once.
    ensure_local: uc.EnsureLocalServer | None = None


def register(
    bus: MessageBus,
    u: UseCases,
    *,
    waiters: uc.Waiters,
    limiter: RateLimiter,
    deploy_limit: Limit,
) -> MessageBus:
    """Register every command's handler and the core's own subscribers on ``bus``."""

    async def within_deploy_limit(actor: User) -> None:
        retry_after = await limiter.take(f"deploy:{actor.id}", deploy_limit)
        if retry_after:
            raise RateLimited(retry_after, "Deploy rate limit reached for this token.")

    async def queued(actor: User, result: r.DeployResult, wait: float) -> r.DeployResult:
        """A deployment was queued (or replayed): wake the worker, wait if asked, and read
        its installation back — for deploys and rollbacks alike."""
        deployment = result.deployment
        if not result.replayed:
            bus.publish(
                DeploymentQueued(
                    deployment_id=deployment.id,
                    installation_id=deployment.installation_id,
                    server_id=deployment.server_id,
                )
            )
        if wait > 0 and not deployment.state.is_final:
            deployment = await u.wait_for_deployment(actor, deployment.id, wait)
        server, installation = await u.get_installation(actor, deployment.installation_id)
        return r.DeployResult(
            deployment=deployment,
            installation=installation,
            replayed=result.replayed,
            server=server,
        )

    async def deploy(actor: User, cmd: c.DeployCommand) -> r.DeployResult:
        try:
            await u.get_server(actor, cmd.server_id)  # 404 (not yours) before 429
        except NotFound as exc:  # the body's serverId named it
            raise NotFound(exc.detail, field="server_id") from None
        await within_deploy_limit(actor)
        return await queued(actor, await u.deploy(actor, cmd), cmd.wait)

    async def rollback(actor: User, cmd: c.Rollback) -> r.DeployResult:
        await u.get_installation(actor, cmd.installation_id)  # 404 (not yours) before 429
        await within_deploy_limit(actor)
        result = await u.rollback(
            actor, cmd.installation_id, cmd.deployment_id, idempotency_key=cmd.idempotency_key
        )
        return await queued(actor, result, cmd.wait)

    async def cancel(actor: User, cmd: c.CancelDeployment) -> Deployment:
        deployment = await u.cancel_deployment(actor, cmd.deployment_id)
        if deployment.state.is_final:  # a queued one ended at once
            bus.publish(DeploymentFinished(deployment_id=deployment.id, state=deployment.state))
        else:
            bus.publish(DeploymentCancelRequested(deployment_id=deployment.id))
        if cmd.wait > 0 and not deployment.state.is_final:
            deployment = await u.wait_for_deployment(actor, deployment.id, cmd.wait)
        return deployment

    async def remove(actor: User, cmd: c.RemoveInstallation) -> None:
        """Remove the installation; a deployment of it that runs is canceled first (its
        worker puts the previous revision back) and waited for, up to a minute."""
        try:
            return await u.remove_installation(actor, cmd.installation_id)
        except Conflict as exc:
            if exc.kind != "deployment-running":
                raise
        page = await u.list_revisions(actor, cmd.installation_id, 5, None)
        for running in page.deployments:
            if running.state is DeploymentState.RUNNING:
                await cancel(actor, c.CancelDeployment(deployment_id=running.id, wait=60.0))
        return await u.remove_installation(actor, cmd.installation_id)

    bus.register(c.DeployCommand, deploy)
    bus.register(c.RemoveInstallation, remove)
    bus.register(c.Rollback, rollback)
    bus.register(c.CancelDeployment, cancel)
    bus.register(
        c.ListRevisions,
        lambda a, m: u.list_revisions(a, m.installation_id, m.limit, m.before),
    )
    bus.register(
        c.ChangeInstallation,
        lambda a, m: u.change_installation(a, m.installation_id, m.action),
    )
    bus.register(c.GetDeployment, lambda a, m: u.get_deployment(a, m.deployment_id))
    bus.register(
        c.WaitForDeployment,
        lambda a, m: u.wait_for_deployment(a, m.deployment_id, m.seconds),
    )
    bus.register(c.FollowDeployment, lambda a, m: u.follow_deployment(a, m.deployment_id, m.after))
    bus.register(c.ListDeployments, lambda a, m: u.list_deployments(a, m.server_id, m.limit))
    bus.register(
        c.ListInstallations,
        lambda a, m: u.list_installations(a, m.server_id, include_removed=m.include_removed),
    )
    bus.register(c.GetInstallation, lambda a, m: u.get_installation(a, m.installation_id))
    bus.register(
        c.InstallationLogs,
        lambda a, m: u.installation_logs(a, m.installation_id, m.tail, timestamps=m.timestamps),
    )
    bus.register(
        c.FollowInstallationLogs,
        lambda a, m: u.follow_installation_logs(
            a, m.installation_id, m.tail, timestamps=m.timestamps
        ),
    )
    bus.register(c.GetInstallationStats, lambda a, m: u.installation_stats(a, m.installation_id))
    bus.register(c.GetServerDiskUsage, lambda a, m: u.server_disk_usage(a, m.server_id))
    bus.register(c.ListServers, lambda a, m: u.list_servers(a))
    bus.register(c.GetServer, lambda a, m: u.get_server(a, m.server_id))
    bus.register(c.DeleteServer, lambda a, m: u.delete_server(a, m.server_id))
    bus.register(c.RepinHostKeys, lambda a, m: u.repin_host_keys(a, m))
    bus.register(c.NewEnrollmentToken, lambda a, m: u.new_enrollment_token(a, m))
    bus.register(c.ListContainers, lambda a, m: u.list_containers(a, m.server_id))
    bus.register(c.CreateWebhook, lambda a, m: u.create_webhook(a, m))
    bus.register(c.ListWebhooks, lambda a, m: u.list_webhooks(a))
    bus.register(c.DeleteWebhook, lambda a, m: u.delete_webhook(a, m.webhook_id))
    bus.register(
        c.ListWebhookDeliveries,
        lambda a, m: u.list_webhook_deliveries(a, m.webhook_id, m.limit),
    )
    bus.register(c.TokenInfo, lambda a, m: u.token_info(a))
    bus.register(c.AddRegistry, lambda a, m: u.add_registry(a, m))
    bus.register(c.ListRegistries, lambda a, m: u.list_registries(a))
    bus.register(c.RemoveRegistry, lambda a, m: u.remove_registry(a, m.registry_id))
    # Public: nobody is signed in yet (or the admin CLI acts on the store directly).
    bus.register(c.Authenticate, lambda a, m: u.authenticate(m.token), public=True)

    async def local_for_the_first_account(user: User) -> None:
        """Register this machine (``serve --local``) as soon as its owner, the first
        account, exists, so the first page they see lists it; the monitor checks it now."""
        if u.ensure_local is None:
            return
        try:
            server = await u.ensure_local()
        except CoreError as exc:  # the account exists: the monitor's next pass registers it
            log.warning("local_server_not_registered_yet", reason=exc.detail)
            return
        if server is not None and server.owner_id == user.id:
            bus.publish(ServerRegistered(server_id=server.id))

    async def create_user(m: c.CreateUser) -> User:
        user = await u.create_user(m.email, m.password)
        await local_for_the_first_account(user)
        return user

    async def sign_up(m: c.SignUp) -> r.NewSession:
        started = await u.sign_up(m.email, m.password, m.invite)
        await local_for_the_first_account(started.user)
        return started

    async def create_server(actor: User, m: c.CreateServerCommand) -> r.CreatedServer:
        created = await u.create_server(actor, m)
        if created.server.host_keys:  # reachable at once: no enrollment to wait for
            bus.publish(ServerRegistered(server_id=created.server.id))
        return created

    bus.register(c.CreateServerCommand, create_server)
    bus.register(c.CreateUser, lambda a, m: create_user(m), public=True)
    bus.register(
        c.RegenerateToken,
        lambda a, m: u.regenerate_token(email=m.email, user=a),
        public=True,  # the actor's own token, or (the admin CLI) the user ``email``'s
    )
    bus.register(c.SignUpPolicy, lambda a, m: u.signup_policy(), public=True)
    bus.register(c.ReadStoreCounts, lambda a, m: u.count_store(), public=True)
    bus.register(c.SignUp, lambda a, m: sign_up(m), public=True)
    bus.register(c.SignIn, lambda a, m: u.sign_in(m.email, m.password, m.address), public=True)
    bus.register(c.ResolveSession, lambda a, m: u.resolve_session(m.session_id), public=True)
    bus.register(c.SignOut, lambda a, m: u.sign_out(m.session_id), public=True)
    bus.register(c.CreateInvite, lambda a, m: u.create_invite(m.email), public=True)
    bus.register(
        c.EnrollServer,
        lambda a, m: u.enroll_server(m.token, m.enrollment, m.client_address),
        public=True,
    )
    bus.register(c.EnrollmentStatus, lambda a, m: u.enrollment_status(m.token), public=True)
    bus.register(c.ServerSelfStatus, lambda a, m: u.server_self_status(m.signature), public=True)
    bus.register(c.ReportUninstalled, lambda a, m: u.report_uninstalled(m.signature), public=True)
    bus.subscribe(DeploymentFinished, lambda e: waiters.finished(e.deployment_id))
    return bus
