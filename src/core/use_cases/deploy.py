"""Deploy: record the desired installation and queue a durable deployment.

Executing it on the server is the worker's job; this use case promises only
that the deployment is durably queued, or that nothing was written at all. The
flow around it is written once here, for the API, the dashboard, MCP, the CLI and
the library alike: ownership (404) before the deploy rate limit (429), queue (the
worker wakes on ``DeploymentQueued``), wait if asked, read the installation back.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Collection
from dataclasses import KW_ONLY, dataclass
from datetime import datetime
from uuid import UUID, uuid4

import msgspec
import structlog

from .. import commands as c
from ..access import Actor
from ..builds import build_tag
from ..commands import DeployCommand
from ..errors import (
    Conflict,
    FieldError,
    InvalidInput,
    NotFound,
    RateLimited,
    RuntimeFailure,
    ServerUnreachable,
    WriteConflict,
)
from ..events import DeploymentQueued
from ..limits import Limit, RateLimiter
from ..models import (
    Deployment,
    DeploymentEvent,
    DeploymentRef,
    DeploymentSpec,
    DeploymentState,
    Installation,
    InstallationStatus,
    Server,
    ServerStatus,
    Transport,
)
from ..outbound import OutboundGuard, check_url_target
from ..ports import CALL_LANE, SecretBox, ServerGateway, SourceStore, UnitOfWork
from ..results import DeployResult
from .container_spec import refused_volumes
from .deployments import cancel_queued
from .host_ports import port_holder, refuse_held_port
from .monitor import HOST_KEY_MISMATCH
from .owned import UsesStore, UsesStoreAndClock, audit, owned_installation, refuse_pending
from .wait import WaitForDeployment

__all__ = [
    "Deploy",
    "DeployLimit",
    "QueueDeployment",
    "Queued",
    "refuse_unreachable",
    "spec_of",
]

log = structlog.get_logger()


def refuse_unreachable(server: Server, field: str | None = None) -> None:
    """A server berth cannot deploy to for a reason a wait will not cure is a 409 now,
    rather than a deployment that sits queued until it times out. ``field`` names the
    input that chose the server (a deploy's ``server_id``), if one did."""
    refuse_pending(server, field)
    if server.status is ServerStatus.REMOVED:
        raise Conflict(
            f"Server {server.name!r} was uninstalled: its install script removed berth's "
            "key and told berth so. Run its install command again with a new server "
            "(add it again), or delete it.",
            kind="server-removed",
            field=field,
        )
    if server.status is ServerStatus.HOST_KEY_MISMATCH or (
        server.status_detail is not None and server.status_detail.startswith(HOST_KEY_MISMATCH)
    ):
        raise Conflict(
            f"Server {server.name!r} presented an SSH host key other than the pinned one; "
            "berth will not connect to it until the new key is confirmed "
            f"(POST /api/agent/servers/{server.id}/host-keys). {server.status_detail}",
            kind="host-key-mismatch",
            field=field,
        )


def _queued(revision: Deployment | None) -> str:
    if revision is None:
        return "Deployment queued."
    return f"Rollback queued: deploying revision {revision.id} again."


def _waits(server: Server) -> str:
    since = (
        f"last seen {server.last_seen_at.isoformat(timespec='seconds')}"
        if server.last_seen_at is not None
        else "not reached yet"
    )
    why = f": {server.status_detail}" if server.status_detail else ""
    return (
        f"Server {server.name!r} is offline ({since}{why}); the deployment waits for it "
        "and starts once berth reaches the server."
    )


def spec_of(cmd: DeployCommand, deployment_id: UUID | None = None) -> DeploymentSpec:
    """What a deploy command asks to run (env values stay out: only their keys); a build's
    image is the tag the build of deployment ``deployment_id`` gives it (``build_tag``)."""
    image = cmd.image
    if image is None:
        if deployment_id is None:
            raise ValueError("a build's spec needs the id of the deployment that builds it")
        image = build_tag(cmd.container_name, deployment_id)
    return DeploymentSpec(
        image=image,
        build=cmd.build,
        port=cmd.port,
        domain=cmd.domain,
        env_keys=tuple(sorted(cmd.env)),
        volumes=cmd.volumes,
        memory=cmd.memory,
        cpus=cmd.cpus,
        restart=cmd.restart,
        health_path=cmd.health_path,
        command=cmd.command,
        host_port=cmd.published_port,
        stop_grace_seconds=cmd.stop_grace_seconds,
    )


#: How long the host-port check before a deploy may take; past it the deploy is queued
#: unchecked (the worker's start then reports a clash).
PORT_CHECK_SECONDS = 5.0


@dataclass(eq=False)
class DeployLimit:
    """Each user's deploy rate limit: a deploy or rollback past it is ``RateLimited``.

    Only deployments queued count (``queued``): one refused (a 409, a 422 the store
    found) or replayed (an idempotency key's retry) costs nothing. The budget is looked
    at before (``check``) and spent after, so deploys racing for its last slot may
    both pass: the limit is against floods, not exact.
    """

    _limiter: RateLimiter
    _limit: Limit

    def _key(self, actor: Actor) -> str:
        return f"deploy:{actor.user.id}"

    async def check(self, actor: Actor) -> None:
        if retry_after := await self._limiter.peek(self._key(actor), self._limit):
            raise RateLimited(retry_after, "Deploy rate limit reached for this token.")

    async def queued(self, actor: Actor, result: DeployResult) -> None:
        if not result.replayed:
            await self._limiter.take(self._key(actor), self._limit)


@dataclass(eq=False)
class Queued(UsesStore):
    """A deployment was queued (or replayed): wait for its end if asked, and read its
    installation back — for deploys and rollbacks alike."""

    _wait: WaitForDeployment

    async def __call__(self, actor: Actor, result: DeployResult, wait: float) -> DeployResult:
        deployment = result.deployment
        if wait > 0 and not deployment.state.is_final:
            until = c.WaitForDeployment(deployment_id=deployment.id, seconds=wait)
            deployment = await self._wait(actor, until)
        async with self._uow() as uow:
            server, installation = await owned_installation(uow, actor, deployment.installation_id)
        return DeployResult(
            deployment=deployment,
            installation=installation,
            replayed=result.replayed,
            server=server,
        )


@dataclass(eq=False)
class Deploy(UsesStore):
    """Deploy or redeploy ``cmd.name`` on one of the caller's servers: the caller's server
    (``NotFound`` at ``server_id`` otherwise) before the deploy limit, then queue it,
    then answer (``Queued``)."""

    _queue: QueueDeployment
    _limit: DeployLimit
    _answer: Queued
    _: KW_ONLY
    #: Uploaded sources: a build's ``source_id`` that is not the caller's is a 404 there.
    sources: SourceStore | None = None
    #: Where the control plane may connect: a Git host elsewhere is a 422 at its URL.
    outbound: OutboundGuard | None = None

    async def __call__(self, owner: Actor, cmd: DeployCommand) -> DeployResult:
        async with self._uow() as uow:
            if await uow.servers.get(owner.scope, cmd.server_id) is None:
                raise NotFound("Server not found.", field="server_id")
        source_id = cmd.build.source_id if cmd.build is not None else None
        sources = self.sources
        if source_id is not None and sources is not None:
            found = await sources.get(owner.team_id, source_id)
            if found is None:
                raise NotFound("Source not found.", field="build.source_id")
        git = cmd.build.git if cmd.build is not None else None
        if git is not None and self.outbound is not None:
            # SPEC.md, "Outbound requests": checked again on each fetch.
            await check_url_target(self.outbound, git.url, "build.git.url")
        await self._limit.check(owner)
        result = await self._queue(owner, cmd)
        await self._limit.queued(owner, result)
        return await self._answer(owner, result, cmd.wait)


@dataclass(eq=False)
class QueueDeployment(UsesStoreAndClock):
    """Queue a deployment of ``cmd.name`` on one of the caller's servers.

    Before anything is written, a domain-less deploy to an ``online`` server checks over
    the server's transport that its host port is free (``gateway``): a port held by
    another installation, a container or a process is a 409 ``port-in-use`` at ``port``
    naming it; the installation's own container on its port (a redeploy) is not. A
    server that cannot be asked in time is not checked.

    ``berth_paths`` are berth's own paths on this machine (its data dir, its database):
    no volume of a deploy to the server that is this machine (``serve --local``) may be,
    lie in or hold one of them (422 at the volume; a rollback to a revision that has one,
    or one today's rules refuse, is a 409 ``revision-unavailable``).
    """

    _box: SecretBox
    _gateway: ServerGateway | None = None
    _: KW_ONLY
    berth_paths: tuple[str, ...] = ()

    async def __call__(
        self,
        owner: Actor,
        cmd: DeployCommand,
        *,
        revision: Deployment | None = None,
        pushed: str | None = None,
    ) -> DeployResult:
        """Queue the deployment. ``cmd.keep_env`` names env keys (present in ``cmd.env``)
        whose value is the installation's current one rather than the one given: a redeploy
        from the dashboard, which never shows env values, keeps them without seeing them.
        ``revision``: the earlier deployment a rollback redeploys (its image id is reused).
        ``pushed``: the Git commit a push named (a deploy hook's), which the build fetches
        instead of the ref's newest; such a deployment queues behind one that is running
        rather than being refused, as pushes come when they come."""
        fingerprint = self._fingerprint(cmd, revision)
        keep_env = cmd.keep_env
        # Queuing a deployment has a lane of its own: its write goes before the monitor's
        # at the store, behind the writes of the deployments already running (twenty
        # deploys asked at once had the first runs wait seconds behind the others'
        # queuing), and its port check runs on threads of its own.
        lane = CALL_LANE.set("queue")
        try:
            await self._check_host_port(owner, cmd)
            run = functools.partial(
                self._deploy, owner, cmd, keep_env, fingerprint, revision, pushed
            )
            try:
                return await run()
            except WriteConflict as exc:
                # Something committed between this deploy's reads and its writes (a writer
                # that does not lock the server: the worker's claim, a removal). Decide once
                # more on what is committed now; a second clash is a real conflict.
                log.info("deploy_retried", server_id=str(cmd.server_id), reason=exc.detail)
                return await run()
        finally:
            CALL_LANE.reset(lane)

    async def _deploy(
        self,
        owner: Actor,
        cmd: DeployCommand,
        keep_env: Collection[str],
        fingerprint: str,
        revision: Deployment | None,
        pushed: str | None,
    ) -> DeployResult:
        """One attempt, in one transaction that holds the server's lock from its first read:
        concurrent deploys to a server (retries with one Idempotency-Key, the same name
        twice) take turns, each deciding on what the previous one committed."""
        async with self._uow() as uow:
            server = await uow.servers.lock(owner.scope, cmd.server_id)
            if server is None:
                raise NotFound("Server not found.", field="server_id")
            if cmd.idempotency_key is not None:
                earlier = await self._replay(uow, owner, cmd.idempotency_key, fingerprint)
                if earlier is not None:
                    return earlier
            refuse_unreachable(server, field=None if revision is not None else "server_id")
            self._refuse_volumes(server, cmd, revision)
            now = self._clock.now()
            deployment_id = uuid4()
            spec = spec_of(cmd, deployment_id)
            current = await uow.installations.get_by_container_name(
                owner.scope, server.id, cmd.container_name
            )
            if keep_env:
                cmd = await self._keep(uow, owner, cmd, current, keep_env)
            if current is not None:
                await self._supersede(
                    uow, owner, current, deployment_id, now, behind_running=pushed is not None
                )
            await self._check_conflicts(uow, owner, cmd, current)
            installation = Installation(
                id=current.id if current else uuid4(),
                server_id=server.id,
                name=cmd.name,
                container_name=cmd.container_name,
                spec=spec,
                # With a domain, the port of the container serving now stays recorded (so
                # its route stays) until the new one is healthy and the route switches.
                host_port=(current.host_port if current else None)
                if cmd.domain
                else cmd.published_port,
                status=InstallationStatus.DEPLOYING,
                created_at=current.created_at if current else now,
                updated_at=now,
            )
            await uow.installations.save(owner.scope, installation, cmd.env)
            events = [DeploymentEvent(at=now, step="queued", message=_queued(revision))]
            if server.status is ServerStatus.OFFLINE:
                events.append(DeploymentEvent(at=now, step="queued", message=_waits(server)))
            deployment = Deployment(
                id=deployment_id,
                installation_id=installation.id,
                server_id=server.id,
                spec=spec,
                state=DeploymentState.QUEUED,
                step=None,
                error=None,
                created_at=now,
                events=tuple(events),
                image_id=revision.image_id if revision is not None else None,
                rollback_of=revision.id if revision is not None else None,
                commit=revision.commit if revision is not None else pushed,
            )
            await uow.deployments.add(
                owner.scope, deployment, cmd.env, cmd.idempotency_key, fingerprint
            )
            uow.record(
                DeploymentQueued(
                    deployment_id=deployment.id,
                    installation_id=installation.id,
                    server_id=server.id,
                )
            )
            action = "rollback" if revision is not None else "deploy"
            detail = f"deployment {deployment.id}"
            if pushed is not None:
                detail += f" of pushed commit {pushed}"
            audit(uow, owner, action, "installation", installation.id, cmd.name, detail=detail)
            await uow.commit()
        log.info(
            "deploy_queued",
            deployment_id=str(deployment.id),
            installation_id=str(installation.id),
            server_id=str(server.id),
        )
        installation = msgspec.structs.replace(
            installation,
            last_deployment=DeploymentRef(
                id=deployment.id, state=deployment.state, finished_at=None
            ),
        )
        return DeployResult(deployment=deployment, installation=installation)

    def _refuse_volumes(
        self, server: Server, cmd: DeployCommand, revision: Deployment | None
    ) -> None:
        """See the class docstring: what ``refused_volumes`` finds is a 422 at each volume,
        or for a rollback (whose request names no volume) a 409 naming the revision."""
        local = server.transport is Transport.LOCAL
        refused = refused_volumes(
            cmd.volumes, cmd.container_name, self.berth_paths if local else ()
        )
        if not refused:
            return
        if revision is not None:
            index, why = refused[0]
            raise Conflict(
                f"Revision {revision.id} mounts {cmd.volumes[index]!r}, which berth refuses "
                f"now: {why} Deploy the app again without that volume instead.",
                kind="revision-unavailable",
            )
        raise InvalidInput([FieldError(f"volumes[{i}]", why, cmd.volumes[i]) for i, why in refused])

    async def _check_host_port(self, owner: Actor, cmd: DeployCommand) -> None:
        """``port-in-use`` when something other than this installation holds the host
        port on the (online) server; see the class docstring."""
        port = cmd.published_port
        if self._gateway is None or port is None:
            return
        async with self._uow() as uow:
            server = await uow.servers.get(owner.scope, cmd.server_id)
            if server is None or server.status is not ServerStatus.ONLINE:
                return  # not ours (the transaction says so), or not reachable now
            key = cmd.idempotency_key
            if key is not None and await uow.deployments.by_idempotency_key(owner.scope, key):
                return  # a retry: the transaction replays the first answer (or refuses the key)
            installations = await uow.installations.list(owner.scope, server.id)
        names = {i.id: i.name for i in installations}
        own = next((i.id for i in installations if i.container_name == cmd.container_name), None)
        try:
            async with asyncio.timeout(PORT_CHECK_SECONDS):
                conn = await self._gateway.connect(server)
                holder = await port_holder(conn, port, names, own)
        except (ServerUnreachable, RuntimeFailure, TimeoutError) as exc:
            log.info("port_check_skipped", server_id=str(server.id), reason=str(exc))
            return
        refuse_held_port(port, holder, cmd.port_field)

    async def _keep(
        self,
        uow: UnitOfWork,
        owner: Actor,
        cmd: DeployCommand,
        current: Installation | None,
        keep: Collection[str],
    ) -> DeployCommand:
        """``cmd`` with the kept keys' values taken from the revision serving now (after a
        failed redeploy, the one that still runs), else the installation's last deployment."""
        stored: dict[str, str] = {}
        source = current.current_deployment_id if current is not None else None
        if source is None and current is not None and current.last_deployment is not None:
            source = current.last_deployment.id
        if source is not None:
            stored = await uow.deployments.env(owner.scope, source)
        env = dict(cmd.env)
        errors = []
        for key in sorted(keep):
            if key in env and key in stored:
                env[key] = stored[key]
            elif key in env:
                errors.append(FieldError(f"env.{key}", "There is no current value to keep.", None))
        if errors:
            raise InvalidInput(errors)
        return msgspec.structs.replace(cmd, env=env)

    def _fingerprint(self, cmd: DeployCommand, revision: Deployment | None) -> str:
        """A keyed digest of the whole request, env values included, for Idempotency-Key
        (a rollback's names the revision it goes back to)."""
        body = msgspec.structs.replace(cmd, idempotency_key=None, keep_env=frozenset(), wait=0.0)
        encoded = msgspec.json.encode(body, order="sorted")
        if revision is not None:
            encoded += b"\x00rollback:" + revision.id.bytes
        return self._box.digest(encoded)

    async def _replay(
        self, uow: UnitOfWork, owner: Actor, key: str, fingerprint: str
    ) -> DeployResult | None:
        found = await uow.deployments.by_idempotency_key(owner.scope, key)
        if found is None:
            return None
        deployment, earlier_fingerprint = found
        if earlier_fingerprint != fingerprint:
            raise Conflict(
                "This Idempotency-Key was already used with a different request: send a "
                "new key for a new request, or the same request to replay the first.",
                kind="idempotency-key-reused",
                field="idempotency_key",
            )
        installation = await uow.installations.get(owner.scope, deployment.installation_id)
        if installation is None:  # removed since: the key no longer names anything
            raise Conflict("This Idempotency-Key names a deployment whose installation is gone.")
        return DeployResult(deployment=deployment, installation=installation, replayed=True)

    async def _supersede(
        self,
        uow: UnitOfWork,
        owner: Actor,
        current: Installation,
        new_id: UUID,
        now: datetime,
        *,
        behind_running: bool = False,
    ) -> None:
        """A running deployment blocks a redeploy (409), unless ``behind_running`` (the new
        one then waits for it: the worker runs one deployment of an installation at a
        time); a queued one is canceled."""
        for active in await uow.deployments.active(owner.scope, current.id):
            if active.state is DeploymentState.RUNNING:
                if behind_running:
                    continue
                raise Conflict(
                    f"Deployment {active.id} of this installation is running; "
                    "wait for it to finish.",
                    kind="deployment-running",
                )
            # Claimed meanwhile: WriteConflict, and the retry sees it.
            error = f"Superseded by deployment {new_id}."
            await cancel_queued(uow, owner, active, now, error, f"Superseded by {new_id}.")

    async def _check_conflicts(
        self, uow: UnitOfWork, owner: Actor, cmd: DeployCommand, current: Installation | None
    ) -> None:
        """Domain and host port are each held by one installation per server."""
        for other in await uow.installations.list(owner.scope, cmd.server_id):
            if current is not None and other.id == current.id:
                continue
            if cmd.domain is not None and other.spec.domain == cmd.domain:
                raise Conflict(
                    f"Domain {cmd.domain} is already used by the app {other.name!r} "
                    "on this server: choose another domain, or remove that app.",
                    kind="domain-in-use",
                    field="domain",
                )
            if cmd.domain is None and other.host_port == cmd.published_port:
                raise Conflict(
                    f"Host port {cmd.published_port} is already used by the app {other.name!r} "
                    "on this server: choose another port, or give a domain.",
                    kind="port-in-use",
                    field=cmd.port_field,
                )
