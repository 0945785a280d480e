"""Events: facts the application layer announces after they happened.

A use case records each on the unit of work it changed the store in; when that
commits, the event goes to its handlers (:mod:`berth.core.unit_of_work`): those
that write with the change, in its transaction, then the subscribers in this
process — the worker's wake-up, ``?wait`` waiters. Nothing that must not be lost
rides on the subscribers alone — the store is the truth, and every subscriber also
reads it (a worker polls, a waiter re-reads the deployment): they make things
happen *sooner*.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

import msgspec

from .access import Actor
from .models import Deployment, DeploymentState, RunState, ServerStatus, WebhookEvent
from .teams import AuditActor, AuditOutcome, AuditTarget

__all__ = [
    "Audited",
    "DeploymentFinished",
    "DeploymentQueued",
    "Event",
    "InstallationStatusChanged",
    "ServerRegistered",
    "ServerStatusChanged",
]


class Event(msgspec.Struct, frozen=True, kw_only=True):
    """Something that happened."""


class DeploymentQueued(Event, frozen=True, kw_only=True):
    """A deployment was durably queued: a worker may claim it now."""

    deployment_id: UUID
    installation_id: UUID
    server_id: UUID


class DeploymentFinished(Event, frozen=True, kw_only=True):
    """A deployment reached a final state ``at``, with ``error`` unless it succeeded: its
    run ended it, a user canceled it while queued, a redeploy superseded it, its
    installation was removed, or it waited too long (recorded by whichever of these
    wrote the end, in that transaction)."""

    deployment_id: UUID
    owner_id: UUID
    installation_id: UUID
    server_id: UUID
    state: DeploymentState
    at: datetime
    error: str | None = None

    @classmethod
    def of(
        cls,
        deployment: Deployment,
        owner_id: UUID,
        state: DeploymentState,
        at: datetime,
        error: str | None = None,
    ) -> DeploymentFinished:
        """``deployment`` (of ``owner_id``) ended ``state`` at ``at``."""
        return cls(
            deployment_id=deployment.id,
            owner_id=owner_id,
            installation_id=deployment.installation_id,
            server_id=deployment.server_id,
            state=state,
            at=at,
            error=error,
        )


class ServerStatusChanged(Event, frozen=True, kw_only=True):
    """A server's status changed ``at`` (the monitor saw it come online, go offline, or
    offer another host key), with the status' ``detail``."""

    server_id: UUID
    owner_id: UUID
    status: ServerStatus
    detail: str | None
    at: datetime


class InstallationStatusChanged(Event, frozen=True, kw_only=True):
    """An installation's container went down or came up ``at`` (``event``: told once per
    change, a crash loop once; ``berth.core.watch``), as ``message`` says; ``state``,
    ``exit_code`` and ``restart_count`` are what its container was seen doing."""

    installation_id: UUID
    owner_id: UUID
    server_id: UUID
    event: WebhookEvent
    state: RunState
    exit_code: int | None
    restart_count: int
    message: str
    at: datetime


class ServerRegistered(Event, frozen=True, kw_only=True):
    """A server berth can reach was added (this machine for the first account, or one
    created with its host keys): the monitor checks it now rather than at its next pass."""

    server_id: UUID


class Audited(Event, frozen=True, kw_only=True):
    """Something to write in a team's audit log: a change made (recorded by its handler on
    the unit of work of the change, so the entry is written in that transaction) or a
    call refused (in a transaction of its own: nothing else is written)."""

    team_id: UUID
    actor: AuditActor
    action: str
    target: AuditTarget
    outcome: AuditOutcome = AuditOutcome.OK
    client_address: str | None = None
    detail: str | None = None

    @classmethod
    def of(
        cls,
        actor: Actor,
        action: str,
        target: AuditTarget,
        *,
        team_id: UUID | None = None,
        outcome: AuditOutcome = AuditOutcome.OK,
        detail: str | None = None,
    ) -> Audited:
        """``actor`` did ``action`` to ``target`` in its team (or ``team_id``)."""
        return cls(
            team_id=actor.team_id if team_id is None else team_id,
            actor=AuditActor(
                user_id=actor.user.id,
                email=actor.user.email,
                token_id=actor.token_id,
                token_name=actor.token_name,
            ),
            action=action,
            target=target,
            outcome=outcome,
            client_address=actor.client_address,
            detail=detail,
        )
