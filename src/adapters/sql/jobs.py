"""The durable job queue the worker runs deployments from (``berth.core.ports.JobQueue``).

Every deployment is a job. ``claim`` moves the oldest runnable queued one to
``running`` under a lease held by one worker, in one atomic statement (see
``dialect.claimable``); every later write about it (``renew``, ``step``,
``event``, ``finish``) happens only while that worker still holds the lease, so
a worker that lost it writes nothing more. A running deployment whose lease ran out
(its worker died, or lost the store for longer than the lease) is **taken over** by
the next ``claim``: same state, a new lease, one more attempt, an event naming the
worker that stopped; after ``lifecycle.MAX_ATTEMPTS`` ``expire`` ends it ``failed``
with that reason. ``expire`` also ends in ``timed_out`` queued deployments past their
deadline. Every end is recorded as a ``DeploymentFinished`` of the transaction that
writes it, whose handlers (``events``) write the webhook outbox in it.

A queued deployment's deadline is its ``deadline_at`` when one is stored, else
``created_at + queue_timeout``: the queue's own setting is the one source of
truth, so the processes that queue deployments need not know it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import Any
from uuid import UUID

import msgspec
import structlog
from berth.core.events import DeploymentFinished
from berth.core.lifecycle import MAX_ATTEMPTS, can_move
from berth.core.models import (
    DeploymentEvent,
    DeploymentState,
    Ending,
    Job,
    RegistryAuth,
    ServerStatus,
    TlsStatus,
)
from berth.core.ports import SecretBox
from berth.core.types import registry_of
from berth.core.unit_of_work import EventHandlers
from sqlalchemy import (
    ColumnElement,
    ColumnExpressionArgument,
    Update,
    and_,
    bindparam,
    exists,
    or_,
    select,
    update,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql.base import ReadOnlyColumnCollection

from . import dialect
from .registries import registry_auth
from .rows import (
    _DEPLOYMENT_COLUMNS,
    _SERVER_COLUMNS,
    _deployment_to_core,
    _ending,
    _env_decoder,
    _event_to_core,
    _server_to_core,
    deployments_t,
    events_t,
    installations_t,
    marks_t,
    servers_t,
    workers_t,
)
from .tables import SPEC_COLUMNS
from .together import AskedTogether
from .transaction import Transaction, transaction
from .uow import SqlUnitOfWork, unit_of_work

__all__ = ["SqlJobQueue"]

log = structlog.get_logger()

Columns = ReadOnlyColumnCollection[str, Any]  # the columns of the deployment table or an alias

# The moves this queue makes, each one the core's table allows (``lifecycle``).
assert can_move(DeploymentState.QUEUED, DeploymentState.RUNNING)  # claim
assert can_move(DeploymentState.QUEUED, DeploymentState.TIMED_OUT)  # expire: waited too long
assert can_move(DeploymentState.RUNNING, DeploymentState.FAILED)  # expire: no attempt left
assert can_move(DeploymentState.RUNNING, DeploymentState.RUNNING)  # take over
_QUEUED = DeploymentState.QUEUED.value
_RUNNING = DeploymentState.RUNNING.value

# What the worker needs of claimed deployments, with their sealed env and container name.
_JOB_ROWS = (
    select(
        *_DEPLOYMENT_COLUMNS,
        deployments_t.c.owner_id,
        deployments_t.c.env_sealed,
        installations_t.c.container_name,
        installations_t.c.current_deployment_id,
    )
    .join_from(
        deployments_t, installations_t, installations_t.c.id == deployments_t.c.installation_id
    )
    .where(deployments_t.c.id.in_(bindparam("deployment_ids", expanding=True)))
)
_SERVER_ROWS = select(*_SERVER_COLUMNS).where(
    servers_t.c.id.in_(bindparam("server_ids", expanding=True))
)
_EVENTS = (
    select(events_t.c.deployment_id, events_t.c.at, events_t.c.step, events_t.c.message)
    .where(events_t.c.deployment_id.in_(bindparam("deployment_ids", expanding=True)))
    .order_by(events_t.c.at, events_t.c.id)
)

_TAKEOVER_TRIES = 5

_UNREADABLE_ENV = (
    "The deployment's env values cannot be unsealed (sealed with another secret key?); "
    "it was not run."
)


class SqlJobQueue:
    """``JobQueue`` over the deployment table, shared by any number of workers and processes.

    Each method is its own transaction, committed before it returns.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        box: SecretBox,
        *,
        queue_timeout: float,
        events: EventHandlers | None = None,
    ) -> None:
        """``queue_timeout``: seconds a deployment may stay queued (its server offline);
        ``events``: where the ends it records go (``berth.core.unit_of_work``)."""
        if queue_timeout <= 0:
            raise ValueError("queue_timeout must be positive.")
        self._engine = engine
        self._box = box
        self._unit = partial(unit_of_work, engine, box, events)
        self._queue_timeout = timedelta(seconds=queue_timeout)
        self._cancels = AskedTogether(self._canceled)
        self._claims: dict[str, Update] = {}  # the claim's statement, by dialect

    async def claim(
        self,
        worker_id: str,
        now: datetime,
        lease_until: datetime,
        *,
        running: Collection[UUID] = (),
    ) -> Job | None:
        """Atomically take the oldest queued deployment that can run now, for ``worker_id``.

        It can run when its server is online, no deployment of its installation
        is running, and its deadline has not passed. It becomes ``running`` with
        ``started_at = now``, the lease (``worker_id`` until ``lease_until``) and
        one more attempt; its step is left to the worker. Two claimers, in any
        processes, never get the same deployment. ``None`` when nothing can run.
        A deployment whose env cannot be unsealed is failed, not handed out.
        """
        jobs = await self.claim_many(worker_id, now, lease_until, limit=1, running=running)
        return jobs[0] if jobs else None

    async def claim_many(
        self,
        worker_id: str,
        now: datetime,
        lease_until: datetime,
        *,
        limit: int,
        running: Collection[UUID] = (),
    ) -> list[Job]:
        """Up to ``limit`` deployments, as ``claim`` takes one (a run taken over first, then
        the oldest queued ones, one per installation), in one transaction: a worker with
        free slots starts them all at once instead of queueing one claim per slot at the
        store's write lock behind every other writer (20 deployments queued together had
        waited 0.1-2 s per claim, the last ones seconds in all)."""
        jobs: list[Job] = []
        while len(jobs) < limit:
            claimed, unreadable = await self._claim_batch(
                worker_id, now, lease_until, limit - len(jobs), running
            )
            jobs.extend(claimed)
            if not unreadable:  # else claim again for them: the next ones may be readable
                break
        return jobs

    async def _claim_batch(
        self,
        worker_id: str,
        now: datetime,
        lease_until: datetime,
        limit: int,
        running: Collection[UUID],
    ) -> tuple[list[Job], list[UUID]]:
        """One transaction of ``claim_many``: the jobs, and the deployments it failed for an
        env it cannot unseal."""
        taken_over: dict[str, Any] | None = None
        async with self._unit() as uow:
            tx = uow.tx
            taken_over = await self._take_over(tx, worker_id, now, lease_until, running)
            ids: list[UUID] = [] if taken_over is None else [taken_over["deployment_id"]]
            while len(ids) < limit:
                # One statement per deployment: each sees the ones this transaction took
                # (never two of one installation).
                claimed = await tx.write(
                    self._claim(tx.dialect), self._claim_params(worker_id, now, lease_until)
                )
                deployment_id: UUID | None = claimed.scalar_one_or_none()
                if deployment_id is None:
                    break
                ids.append(deployment_id)
            found = await self._jobs(tx, ids)
            jobs = [job for job in found if not isinstance(job, UUID)]
            unreadable = [job for job in found if isinstance(job, UUID)]
            for deployment_id in unreadable:
                await self._end(
                    uow,
                    deployment_id,
                    DeploymentState.FAILED,
                    now,
                    _UNREADABLE_ENV,
                    _UNREADABLE_ENV,
                )
        # Committed: only now is a take-over done (one whose commit failed -- a full
        # disk -- raised above and is not logged as one).
        if taken_over is not None:
            log.warning(
                "deployment_taken_over",
                **taken_over | {"deployment_id": str(taken_over["deployment_id"])},
            )
        for deployment_id in unreadable:
            log.error("deployment_env_unreadable", deployment_id=str(deployment_id))
        return jobs, unreadable

    async def cancel_requested(self, deployment_id: UUID) -> bool:
        """Asked by each running deployment twice a second: the questions asked at once are
        answered by one read (``AskedTogether``)."""
        return await self._cancels(deployment_id)

    async def _canceled(self, deployment_ids: list[UUID]) -> set[UUID]:
        d = deployments_t.c
        async with transaction(self._engine) as tx:
            found = await tx.read(
                select(d.id).where(d.id.in_(deployment_ids), d.cancel_requested_at.is_not(None))
            )
            return {row[0] for row in found}

    async def set_image_id(
        self, deployment_id: UUID, worker_id: str, image_id: str, commit: str | None = None
    ) -> None:
        values: dict[str, str] = {"image_id": image_id}
        if commit is not None:
            values["commit"] = commit
        async with transaction(self._engine) as tx:
            await tx.write(
                update(deployments_t).where(*_held(deployment_id, worker_id)).values(**values)
            )

    async def renew(self, deployment_id: UUID, worker_id: str, lease_until: datetime) -> bool:
        async with transaction(self._engine) as tx:
            renewed = await tx.write(
                update(deployments_t)
                .where(*_held(deployment_id, worker_id))
                .values(lease_expires_at=lease_until)
            )
            return bool(renewed.rowcount)

    async def progress(
        self,
        deployment_id: UUID,
        worker_id: str,
        events: Sequence[DeploymentEvent],
        *,
        step: str | None = None,
    ) -> None:
        """The deployment's row is updated first (its step, or its lease owner to itself):
        that tells whether the lease is held and, on PostgreSQL, locks the row until the
        events are in."""
        if not events:
            return
        entered: dict[str, Any] = {"step": step} if step is not None else {"lease_owner": worker_id}
        async with transaction(self._engine) as tx:
            held = await tx.write(
                update(deployments_t).where(*_held(deployment_id, worker_id)).values(**entered)
            )
            if held.rowcount:
                await _add_events(tx, deployment_id, events)

    async def finish(
        self, deployment_id: UUID, worker_id: str, ending: Ending, *, serving: bool | None = None
    ) -> bool:
        """Stores ``error`` and ``finished_at = at`` and releases the lease; the closing
        event's step is the state's value, the deployment's step stays where it was, and
        ``_restore`` deals with the installation. ``ValueError`` for a state not final."""
        state, at, error, message = ending.state, ending.at, ending.error, ending.message
        if not (state.is_final and can_move(DeploymentState.RUNNING, state)):
            raise ValueError(f"{state} is not a final state.")
        async with self._unit() as uow:
            ended = await self._end(
                uow,
                deployment_id,
                state,
                at,
                error,
                message,
                *_held(deployment_id, worker_id),
                earlier=ending.events,
                step=ending.step,
            )
            if ended and state is not DeploymentState.SUCCEEDED:
                await _restore(uow.tx, deployment_id, serving)
            return ended

    async def set_host_port(self, deployment_id: UUID, host_port: int | None) -> None:
        """Record on the deployment's installation the host port its container is published on.

        A port another installation on the same server already holds is not
        recorded (the store keeps host ports unique per server); that is logged.
        """
        stmt, params = _SET_HOST_PORT, {"deployment_id": deployment_id, "host_port": host_port}
        if host_port is None:
            stmt, params = _CLEAR_HOST_PORT, {"deployment_id": deployment_id}
        try:
            async with transaction(self._engine) as tx:
                recorded = bool((await tx.write(stmt, params)).rowcount)
        except IntegrityError:  # another installation took the port meanwhile
            recorded = False
        if not recorded:
            log.warning(
                "installation_host_port_not_recorded",
                deployment_id=str(deployment_id),
                host_port=host_port,
                reason="the installation is gone or another one holds the port",
            )

    async def record_tls(self, deployment_id: UUID, tls: TlsStatus) -> None:
        stmt = (
            update(installations_t)
            .where(installations_t.c.id == _installation_of(deployment_id))
            .values(
                tls_state=tls.state.value,
                tls_reason=tls.reason,
                tls_issuer=tls.issuer,
                tls_checked_at=tls.checked_at,
            )
        )
        async with transaction(self._engine) as tx:
            await tx.write(stmt)

    async def expire(self, now: datetime) -> list[tuple[UUID, DeploymentState]]:
        """End what no worker will carry on; returns their ids and end states, oldest first.

        Queued deployments whose deadline passed end ``timed_out``; running ones whose
        lease ran out (or that have none) on their last attempt end ``failed``, naming
        the worker that stopped renewing. Running ones with attempts left are not
        touched: ``claim`` takes them over. Each gets its error and a closing event.
        Safe to run from several workers at once: each deployment is ended (and
        returned) once.
        """
        d = deployments_t.c
        lease_ran_out = and_(
            d.state == _RUNNING,
            or_(d.lease_expires_at < now, d.lease_expires_at.is_(None)),
            d.attempts >= MAX_ATTEMPTS,
        )
        # A server whose host key changed is not reached until the user re-pins it: its
        # queued deployments end now instead of waiting out their deadline.
        key_changed = (
            select(servers_t.c.id)
            .where(
                servers_t.c.id == d.server_id,
                servers_t.c.status == ServerStatus.HOST_KEY_MISMATCH.value,
            )
            .exists()
        )
        waited_too_long = and_(d.state == _QUEUED, or_(self._deadline_passed(d, now), key_changed))
        expired: list[tuple[UUID, DeploymentState]] = []
        async with self._unit() as uow:
            tx = uow.tx
            found = await tx.read(
                select(
                    d.id,
                    d.state,
                    d.step,
                    d.created_at,
                    d.deadline_at,
                    d.lease_owner,
                    d.attempts,
                    select(servers_t.c.status)
                    .where(servers_t.c.id == d.server_id)
                    .scalar_subquery()
                    .label("server_status"),
                )
                .where(or_(lease_ran_out, waited_too_long))
                .order_by(d.created_at, d.id)
            )
            for row in found.all():
                if row.state == _RUNNING:
                    where = lease_ran_out
                    state = DeploymentState.FAILED
                    error = (
                        f"attempt {row.attempts} of {MAX_ATTEMPTS}: "
                        f"{_stopped(row.lease_owner, row.step)}; not tried again"
                    )
                else:
                    where = waited_too_long
                    state = DeploymentState.TIMED_OUT
                    waited = (row.deadline_at or row.created_at + self._queue_timeout) - (
                        row.created_at
                    )
                    error = (
                        "The server offered an SSH host key other than the pinned one; "
                        "berth does not connect to it until the new key is confirmed "
                        "(re-pin its host keys), so this deployment did not wait."
                        if row.server_status == ServerStatus.HOST_KEY_MISMATCH.value
                        else f"The server was not reachable within {waited.total_seconds():g} s "
                        "of queueing."
                        if row.server_status != ServerStatus.ONLINE.value
                        else f"No worker started it within {waited.total_seconds():g} s of "
                        "queueing (is a worker running: `berth serve`, or `berth worker`?)."
                    )
                if await self._end(uow, row.id, state, now, error, error, d.id == row.id, where):
                    if state is DeploymentState.FAILED:
                        await _restore(tx, row.id, None)
                    expired.append((row.id, state))
        return expired

    async def pause_leases(self, since: datetime, now: datetime) -> bool:
        """One transaction: the ``resumed`` mark moved to ``now`` if it is older than
        ``since`` (no other worker paused the leases over this outage yet), then each
        running deployment's lease and each worker's heartbeat that ran at ``since`` moved
        ``now - since`` later (each row read, then written if unchanged)."""
        gap = now - since
        if gap <= timedelta(0):
            return False
        m, d, w = marks_t.c, deployments_t.c, workers_t.c
        async with transaction(self._engine) as tx:
            first = await tx.write(
                update(marks_t)
                .where(m.name == "resumed", or_(m.at.is_(None), m.at < since))
                .values(at=now)
            )
            if not first.rowcount:
                return False
            leases = await tx.read(
                select(d.id, d.lease_expires_at).where(
                    d.state == _RUNNING, d.lease_expires_at >= since
                )
            )
            for row in leases.all():
                await tx.write(
                    update(deployments_t)
                    .where(d.id == row.id, d.lease_expires_at == row.lease_expires_at)
                    .values(lease_expires_at=row.lease_expires_at + gap)
                )
            beats = await tx.read(select(w.id, w.expires_at).where(w.expires_at >= since))
            for row in beats.all():
                await tx.write(
                    update(workers_t)
                    .where(w.id == row.id, w.expires_at == row.expires_at)
                    .values(expires_at=row.expires_at + gap)
                )
        log.info("leases_paused", seconds=round(gap.total_seconds(), 1))
        return True

    async def _take_over(
        self,
        tx: Transaction,
        worker_id: str,
        now: datetime,
        lease_until: datetime,
        running: Collection[UUID],
    ) -> dict[str, Any] | None:
        """Take a running deployment whose lease ran out and that has attempts left, and
        that is not one of ``running`` (the worker's own runs, still going): ``worker_id``'s
        lease, one more attempt, an event naming the worker that stopped.
        The lease in the ``WHERE`` makes it atomic (two takers: one wins); on PostgreSQL
        the candidate row is read ``FOR UPDATE SKIP LOCKED`` as claims are. What the
        take-over is logged with once committed (its ``deployment_id``), or ``None``."""
        d = deployments_t.c
        expired = or_(d.lease_expires_at < now, d.lease_expires_at.is_(None))
        mine = [d.id.not_in(list(running))] if running else []
        candidate = dialect.claimable(
            tx.dialect,
            select(d.id, d.lease_owner, d.attempts, d.step)
            .where(d.state == _RUNNING, expired, d.attempts < MAX_ATTEMPTS, *mine)
            .order_by(d.lease_expires_at, d.id)
            .limit(1),
            deployments_t,
        )
        for _ in range(_TAKEOVER_TRIES):
            row = (await tx.read(candidate)).one_or_none()
            if row is None:
                return None
            same_owner = (
                d.lease_owner.is_(None)
                if row.lease_owner is None
                else d.lease_owner == row.lease_owner
            )
            taken = await tx.write(
                update(deployments_t)
                .where(d.id == row.id, d.state == _RUNNING, same_owner, expired)
                .values(
                    lease_owner=worker_id, lease_expires_at=lease_until, attempts=d.attempts + 1
                )
            )
            if taken.rowcount:
                break
            # Another worker took it between the read and the write (SQLite: the read is
            # not locked); the next read, after this write began, sees what it did.
        else:
            return None
        attempt = row.attempts + 1
        message = f"attempt {attempt} of {MAX_ATTEMPTS}: {_stopped(row.lease_owner, row.step)}"
        await _add_event(tx, row.id, now, row.step or "queued", message)
        return {
            "deployment_id": UUID(str(row.id)),
            "attempt": attempt,
            "previous_worker": row.lease_owner,
        }

    # --- helpers -----------------------------------------------------------------------------

    def _deadline_passed(self, d: Columns, now: datetime) -> ColumnElement[bool]:
        """Whether a deployment's queueing deadline is before ``now``."""
        return or_(
            d.deadline_at < now,
            and_(d.deadline_at.is_(None), d.created_at < now - self._queue_timeout),
        )

    def _claim(self, sql: Dialect) -> Update:
        """``UPDATE deployment … WHERE id = (the oldest runnable queued one) RETURNING id``,
        with the parameters of ``_claim_params``. Built once per dialect: a worker claims
        after each deployment queued and every second, and building the statement (two
        aliases of the table, their columns) was most of a claim's time."""
        built = self._claims.get(sql.name)
        if built is not None:
            return built
        candidate = deployments_t.alias("candidate")
        running = deployments_t.alias("running")
        c = candidate.c
        now = bindparam("now", type_=c.created_at.type)
        deadline_not_passed = or_(
            c.deadline_at >= now,
            and_(
                c.deadline_at.is_(None),
                c.created_at >= bindparam("queued_since", type_=c.created_at.type),
            ),
        )
        oldest_runnable = (
            select(c.id)
            .join_from(candidate, installations_t, installations_t.c.id == c.installation_id)
            .join(servers_t, servers_t.c.id == c.server_id)
            .where(
                c.state == _QUEUED,
                servers_t.c.status == ServerStatus.ONLINE.value,
                deadline_not_passed,
                ~exists().where(
                    running.c.installation_id == c.installation_id,
                    running.c.state == _RUNNING,
                ),
            )
            .order_by(c.created_at, c.id)
            .limit(1)
        )
        # Locking the installation too keeps two claimers from starting two of its deployments.
        oldest_runnable = dialect.claimable(sql, oldest_runnable, candidate, installations_t)
        d = deployments_t.c
        built = self._claims[sql.name] = (
            update(deployments_t)
            .where(d.id == oldest_runnable.scalar_subquery(), d.state == _QUEUED)
            .values(
                state=_RUNNING,
                started_at=now,
                lease_owner=bindparam("worker_id", type_=d.lease_owner.type),
                lease_expires_at=bindparam("lease_until", type_=d.lease_expires_at.type),
                attempts=d.attempts + 1,
            )
            .returning(d.id)
        )
        return built

    def _claim_params(self, worker_id: str, now: datetime, lease_until: datetime) -> dict[str, Any]:
        """``_claim``'s: a deployment can run while its queueing deadline (or, without one,
        its creation plus the queue's timeout) is ``now`` or later."""
        return {
            "now": now,
            "queued_since": now - self._queue_timeout,
            "worker_id": worker_id,
            "lease_until": lease_until,
        }

    async def _jobs(self, tx: Transaction, deployment_ids: list[UUID]) -> list[Job | UUID]:
        """The claimed deployments as ``Job``s, in the order given, each read with the others
        (a few statements for the batch, not four per deployment); the id instead of a job
        for one whose env cannot be unsealed."""
        if not deployment_ids:
            return []
        rows = {
            UUID(str(row.id)): row
            for row in await tx.read(_JOB_ROWS, {"deployment_ids": deployment_ids})
        }
        server_ids = sorted({row.server_id for row in rows.values()}, key=str)
        servers = {
            UUID(str(row.id)): _server_to_core(row)
            for row in await tx.read(_SERVER_ROWS, {"server_ids": server_ids})
        }
        events: dict[UUID, list[DeploymentEvent]] = {}
        for event in await tx.read(_EVENTS, {"deployment_ids": deployment_ids}):
            events.setdefault(UUID(str(event.deployment_id)), []).append(_event_to_core(event))
        auths: dict[tuple[UUID, str], RegistryAuth | None] = {}
        jobs: list[Job | UUID] = []
        for deployment_id in deployment_ids:
            row = rows[deployment_id]
            try:
                env = _env_decoder.decode(self._box.open(row.env_sealed))
            except (ValueError, msgspec.DecodeError):
                jobs.append(deployment_id)
                continue
            deployment = _deployment_to_core(row, events.get(deployment_id, []))
            registry = (row.owner_id, registry_of(deployment.spec.image))
            if registry not in auths:
                auths[registry] = await registry_auth(tx, self._box, *registry)
            jobs.append(
                Job(
                    deployment=deployment,
                    owner_id=row.owner_id,
                    installation_id=row.installation_id,
                    container_name=row.container_name,
                    server=servers[UUID(str(row.server_id))],
                    env=env,
                    current_deployment_id=row.current_deployment_id,
                    registry_auth=auths[registry],
                )
            )
        return jobs

    async def _end(
        self,
        uow: SqlUnitOfWork,
        deployment_id: UUID,
        state: DeploymentState,
        at: datetime,
        error: str | None,
        message: str,
        *where: ColumnElement[bool],
        earlier: Sequence[DeploymentEvent] = (),
        step: str | None = None,
    ) -> bool:
        """Move the deployment (if ``where`` holds) to ``state`` with the ``earlier``
        events (the last of them entering ``step``, if given) and a closing event, and
        record that it finished."""
        tx = uow.tx
        values = _ending(state, at, error) | ({"step": step} if step is not None else {})
        ended = await tx.write(
            update(deployments_t).where(deployments_t.c.id == deployment_id, *where).values(values)
        )
        if not ended.rowcount:
            return False
        if earlier:
            await _add_events(tx, deployment_id, earlier)
        if state is DeploymentState.SUCCEEDED:  # it is the installation's revision now
            await tx.write(
                update(installations_t)
                .where(installations_t.c.id == _installation_of(deployment_id))
                .values(current_deployment_id=deployment_id, stopped_at=None)
            )
        await _add_event(tx, deployment_id, at, state.value, message)
        d = deployments_t.c
        ids = (
            await tx.read(
                select(d.owner_id, d.installation_id, d.server_id).where(d.id == deployment_id)
            )
        ).one()
        uow.record(
            DeploymentFinished(
                deployment_id=deployment_id, state=state, at=at, error=error, **ids._mapping
            )
        )
        return True


def _stopped(worker: str | None, step: str | None) -> str:
    during = f"during step {step}" if step else "before its first step"
    return f"worker {worker or 'unknown'} stopped renewing its lease {during}"


async def _restore(tx: Transaction, deployment_id: UUID, serving: bool | None) -> None:
    """After a deployment that did not succeed: with ``serving`` ``False`` nothing serves,
    so the installation has no current revision any more; otherwise its spec columns
    (and, for an app without a domain, its host port) are put back from its current
    revision, so its URL and port describe what runs. Skipped (logged) if another
    installation took that domain or port meanwhile, or if it was removed."""
    i = installations_t.c
    d = deployments_t.c
    installation_id = _installation_of(deployment_id)
    if serving is False:
        await tx.write(
            update(installations_t)
            .where(i.id == installation_id)
            .values(current_deployment_id=None)
        )
        return
    current = (
        await tx.read(
            select(*(d[name] for name in SPEC_COLUMNS))
            .join_from(installations_t, deployments_t, d.id == i.current_deployment_id)
            .where(i.id == installation_id, i.removed_at.is_(None))
        )
    ).one_or_none()
    if current is None:
        return
    values: dict[str, Any] = {name: getattr(current, name) for name in SPEC_COLUMNS}
    other = installations_t.alias("other")
    clashes: list[ColumnElement[bool]] = []
    if current.domain is not None:
        clashes.append(other.c.domain == current.domain)
    if current.domain is None:
        published = current.spec_host_port or current.port
        values["host_port"] = published
        clashes.append(other.c.host_port == published)
    where: list[ColumnExpressionArgument[bool]] = [i.id == installation_id]
    if clashes:
        where.append(
            ~exists().where(
                other.c.server_id == i.server_id,
                other.c.id != i.id,
                other.c.removed_at.is_(None),
                or_(*clashes),
            )
        )
    restored = await tx.write(update(installations_t).where(*where).values(values))
    if not restored.rowcount:
        log.warning(
            "installation_spec_not_restored",
            deployment_id=str(deployment_id),
            reason="another installation holds its domain or port",
        )


def _host_port_statements() -> tuple[Update, Update]:
    """``set_host_port``'s two statements, built once (an alias's columns cost ~1 ms to
    set up, at every call): record a port no other installation of the server holds;
    clear it."""
    i, d = installations_t.c, deployments_t.c
    other = installations_t.alias("other")
    installation = select(d.installation_id).where(d.id == bindparam("deployment_id"))
    mine = i.id == installation.scalar_subquery()
    free = ~exists().where(
        other.c.server_id == i.server_id,
        other.c.host_port == bindparam("host_port"),
        other.c.id != i.id,
    )
    port = bindparam("host_port", type_=i.host_port.type)
    record = update(installations_t).where(mine, free).values(host_port=port)
    clear = update(installations_t).where(mine).values(host_port=None)
    return record, clear


_SET_HOST_PORT, _CLEAR_HOST_PORT = _host_port_statements()


def _installation_of(deployment_id: UUID) -> Any:
    """The id of the deployment's installation, as a scalar subquery."""
    d = deployments_t.c
    return select(d.installation_id).where(d.id == deployment_id).scalar_subquery()


def _held(deployment_id: UUID, worker_id: str) -> tuple[ColumnElement[bool], ...]:
    """The deployment is running under ``worker_id``'s lease."""
    d = deployments_t.c
    return (d.id == deployment_id, d.state == _RUNNING, d.lease_owner == worker_id)


async def _add_event(
    tx: Transaction, deployment_id: UUID, at: datetime, step: str, message: str
) -> None:
    await _add_events(tx, deployment_id, [DeploymentEvent(at=at, step=step, message=message)])


async def _add_events(
    tx: Transaction, deployment_id: UUID, events: Sequence[DeploymentEvent]
) -> None:
    """``events`` appended in order, in one statement."""
    await tx.write(
        events_t.insert(),
        [
            {"deployment_id": deployment_id, "at": e.at, "step": e.step, "message": e.message}
            for e in events
        ],
    )
