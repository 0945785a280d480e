"""Push to deploy: an installation built from Git gets a hook URL and a secret; a push
event for its branch POSTed there, signed with the secret, deploys the pushed commit.

The hook acts for its team with the one right it needs: an actor of role ``deployer``,
scope ``deploy``, limited to the installation's server, recorded as its maker through
"deploy hook" — so the bus admits its ``DeployPush`` as any deploy, and the audit log
tells who made the hook that deployed.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from uuid import uuid4

import msgspec
import structlog

from .. import commands as c
from ..access import Actor, Role, Scope, TokenScope
from ..errors import BadSignature, Conflict, NotFound
from ..models import DeployHook, GitSource, Installation
from ..pushes import HOOK_SECRET_PREFIX, branch_of, event_of, parse_push, signed
from ..results import CreatedDeployHook, PushOutcome
from .deploy import QueueDeployment
from .owned import UsesStore, UsesStoreAndClock, audit, owned_installation
from .revisions import not_removed, redeploy

__all__ = [
    "HOOK_ACTOR",
    "CreateDeployHook",
    "DeployPush",
    "GetDeployHook",
    "ReceivePush",
    "RemoveDeployHook",
    "git_source_of",
]

log = structlog.get_logger()

#: The name a hook's deploys go by in the audit log (its maker is the user).
HOOK_ACTOR = "deploy hook"


def git_source_of(installation: Installation) -> GitSource:
    """The Git repository the installation is built from; a 409 ``not-built-from-git``
    (or ``installation-removed``) when a push has nothing to deploy it as."""
    not_removed(installation)
    build = installation.spec.build
    if build is None or build.git is None:
        raise Conflict(
            f"The app {installation.name!r} is not built from a Git repository: push to "
            "deploy needs a deploy with build.git first.",
            kind="not-built-from-git",
        )
    return build.git


class CreateDeployHook(UsesStoreAndClock):
    """Make the caller's installation's hook (or rotate its secret: the URL stays); the
    secret is in the answer and nowhere else readable."""

    async def __call__(self, owner: Actor, cmd: c.CreateDeployHook) -> CreatedDeployHook:
        secret = HOOK_SECRET_PREFIX + secrets.token_urlsafe(32)
        async with self._uow() as uow:
            _, installation = await owned_installation(uow, owner, cmd.installation_id)
            git_source_of(installation)
            rotated = await uow.deploy_hooks.get(owner.scope, installation.id) is not None
            made = DeployHook(
                id=uuid4(),
                owner_id=owner.team_id,
                installation_id=installation.id,
                created_by=owner.user.id,
                created_at=self._clock.now(),
            )
            hook = await uow.deploy_hooks.save(owner.scope, made, secret)
            action = "deploy-hook.rotate" if rotated else "deploy-hook.create"
            audit(uow, owner, action, "installation", installation.id, installation.name)
            await uow.commit()
        log.info("deploy_hook_saved", installation_id=str(installation.id), rotated=rotated)
        return CreatedDeployHook(hook=hook, secret=secret)


class GetDeployHook(UsesStore):
    """The caller's installation's hook (never its secret); ``NotFound`` if it has none."""

    async def __call__(self, owner: Actor, cmd: c.GetDeployHook) -> DeployHook:
        async with self._uow() as uow:
            await owned_installation(uow, owner, cmd.installation_id)
            hook = await uow.deploy_hooks.get(owner.scope, cmd.installation_id)
        if hook is None:
            raise NotFound("This installation has no deploy hook.")
        return hook


class RemoveDeployHook(UsesStore):
    """Remove the caller's installation's hook; ``NotFound`` if it has none."""

    async def __call__(self, owner: Actor, cmd: c.RemoveDeployHook) -> None:
        async with self._uow() as uow:
            _, installation = await owned_installation(uow, owner, cmd.installation_id)
            if not await uow.deploy_hooks.delete(owner.scope, installation.id):
                raise NotFound("This installation has no deploy hook.")
            name = installation.name
            audit(uow, owner, "deploy-hook.remove", "installation", installation.id, name)
            await uow.commit()
        log.info("deploy_hook_removed", installation_id=str(installation.id))


@dataclass(eq=False)
class ReceivePush(UsesStore):
    """A delivery to a hook's URL: the hook (``NotFound``), its signature
    (``BadSignature``), then a push event is handed to the bus as ``DeployPush`` from the
    hook's actor (``deploy``); another event (a ping) is ignored."""

    #: ``bus.handle``: the hook's deploy is admitted and run as every command is.
    _handle: Callable[[c.DeployPush, Actor], Awaitable[PushOutcome]]

    async def __call__(self, nobody: Actor | None, cmd: c.ReceivePush) -> PushOutcome:
        async with self._uow() as uow:
            found = await uow.deploy_hooks.find(cmd.hook_id)
            if found is None:
                raise NotFound("Deploy hook not found.")
            hook, secret = found
            if not signed(secret, cmd.body, cmd.headers):
                log.info("deploy_hook_refused", hook_id=str(hook.id))
                raise BadSignature()
            maker = await uow.users.get(hook.created_by)
            scope = Scope(team_id=hook.owner_id)
            installation = await uow.installations.get(scope, hook.installation_id)
        if maker is None or installation is None:
            raise NotFound("Deploy hook not found.")
        event = event_of(cmd.headers)
        if event not in (None, "push"):
            return PushOutcome(deployment=None, detail=f"Ignored: a {event} event, not a push.")
        push = parse_push(cmd.body)
        actor = Actor(
            user=maker,
            team_id=hook.owner_id,
            role=Role.DEPLOYER,
            scopes=frozenset({TokenScope.READ, TokenScope.DEPLOY}),
            server_ids=frozenset({installation.server_id}),
            token_name=HOOK_ACTOR,
        )
        deploy = c.DeployPush(
            installation_id=installation.id,
            ref=push.ref,
            commit=push.after,
            default_branch=push.default_branch,
        )
        return await self._handle(deploy, actor)


@dataclass(eq=False)
class DeployPush(UsesStore):
    """Deploy a pushed commit of the caller's installation's branch: as last deployed
    (spec and env), built from that commit; another branch, a tag or a deleted branch is
    ignored. No deploy limit: a burst of pushes leaves one deployment queued."""

    _queue: QueueDeployment

    async def __call__(self, owner: Actor, cmd: c.DeployPush) -> PushOutcome:
        async with self._uow() as uow:
            _, installation = await owned_installation(uow, owner, cmd.installation_id)
            git = git_source_of(installation)
            last = installation.last_deployment
            env = await uow.deployments.env(owner.scope, last.id) if last is not None else {}
        branch = git.ref or cmd.default_branch
        pushed = branch_of(cmd.ref)
        if pushed is None or pushed != branch:
            builds = branch or "its default branch"
            return PushOutcome(
                deployment=None, detail=f"Ignored: a push to {cmd.ref}; the app builds {builds}."
            )
        if cmd.commit is None:
            return PushOutcome(deployment=None, detail=f"Ignored: branch {pushed} was deleted.")
        # Built again: the new deployment's image is its own tag.
        deploy = msgspec.structs.replace(redeploy(installation, installation.spec, env), image=None)
        result = await self._queue(owner, deploy, pushed=cmd.commit)
        log.info(
            "push_deploy_queued",
            installation_id=str(installation.id),
            deployment_id=str(result.deployment.id),
            commit=cmd.commit,
        )
        return PushOutcome(
            deployment=result.deployment,
            detail=f"Deploying commit {cmd.commit} of {pushed}.",
        )
