"""Events: facts the application layer announces after they happened.

The message bus (:mod:`berth.core.bus`) hands each event to its subscribers
in this process: the worker's wake-up, ``?wait`` waiters, and later event
streams and webhooks. Nothing that must not be lost rides on them alone — the
store is the truth, and every subscriber also reads it (a worker polls, a
waiter re-reads the deployment): an event makes things happen *sooner*.
"""

from __future__ import annotations

from uuid import UUID

import msgspec

from .models import DeploymentState

__all__ = [
    "DeploymentCancelRequested",
    "DeploymentFinished",
    "DeploymentQueued",
    "Event",
    "ServerRegistered",
]


class Event(msgspec.Struct, frozen=True, kw_only=True):
    """Something that happened."""


class DeploymentQueued(Event, frozen=True, kw_only=True):
    """A deployment was durably queued: a worker may claim it now."""

    deployment_id: UUID
    installation_id: UUID
    server_id: UUID


class DeploymentFinished(Event, frozen=True, kw_only=True):
    """A deployment reached a final state (in this process's worker)."""

    deployment_id: UUID
    state: DeploymentState


class DeploymentCancelRequested(Event, frozen=True, kw_only=True):
    """A user asked a running deployment to stop (recorded in the store; its worker, in
    whatever process, sees it there — this only makes an in-process worker look sooner)."""

    deployment_id: UUID


class ServerRegistered(Event, frozen=True, kw_only=True):
    """A server berth can reach was added (this machine for the first account, or one
    created with its host keys): the monitor checks it now rather than at its next pass."""

    server_id: UUID
