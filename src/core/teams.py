"""Teams and what hangs off them: members, invitations, named tokens, the audit log.

Servers (and so installations and deployments), registries and webhooks belong to a
team: their ``owner_id`` is the team's id. Every user has a personal team, made with
the account, whose id is the user's own (so what a user owned before teams existed is
their personal team's without a row moving); its user is its owner for good.
"""

from __future__ import annotations

import enum
from datetime import datetime, timedelta
from uuid import UUID

import msgspec

from .access import Role, TokenScope

__all__ = [
    "AUDIT_DAYS",
    "INVITATION_DAYS",
    "AccessToken",
    "AuditActor",
    "AuditEntry",
    "AuditFilter",
    "AuditOutcome",
    "AuditPage",
    "AuditTarget",
    "CreatedInvitation",
    "CreatedToken",
    "InvitationPreview",
    "Member",
    "Team",
    "TeamInvitation",
]

#: How long an invitation to a team can be accepted.
INVITATION_DAYS = timedelta(days=7)
#: How long the audit log keeps an entry unless ``BERTH_AUDIT_DAYS`` says otherwise.
AUDIT_DAYS = 365


class Team(msgspec.Struct, frozen=True, kw_only=True):
    """A team; ``personal_of`` is the user whose personal team it is (``None``: a shared
    team someone created). ``role`` is the asking user's role in it, where known."""

    id: UUID
    name: str
    created_at: datetime
    personal_of: UUID | None = None
    role: Role | None = None


class Member(msgspec.Struct, frozen=True, kw_only=True):
    """A user's membership of a team."""

    team_id: UUID
    user_id: UUID
    email: str
    role: Role
    joined_at: datetime


class TeamInvitation(msgspec.Struct, frozen=True, kw_only=True):
    """A one-time invitation to join a team with a role; only its token's hash is kept."""

    id: UUID
    team_id: UUID
    email: str
    role: Role
    token_hash: str
    created_at: datetime
    expires_at: datetime
    invited_by: UUID
    accepted_at: datetime | None = None


class AccessToken(msgspec.Struct, frozen=True, kw_only=True):
    """A named token: one user acting in one team, narrowed to ``scopes`` (closed under
    "⊂": ``deploy`` holds ``read``) and, when ``server_ids`` is given, to those servers.
    Only its hash is kept; it is shown once, when it is made."""

    id: UUID
    user_id: UUID
    team_id: UUID
    name: str
    scopes: frozenset[TokenScope]
    token_hash: str
    prefix: str
    created_at: datetime
    server_ids: frozenset[UUID] | None = None
    expires_at: datetime | None = None
    last_used_at: datetime | None = None


class AuditOutcome(enum.StrEnum):
    OK = "ok"  # the change was made
    DENIED = "denied"  # refused for want of a right: nothing changed


class AuditActor(msgspec.Struct, frozen=True, kw_only=True):
    """Who did it: the user, and the named token used (``None``: the main token, the
    dashboard or the library, which ``token_name`` then says)."""

    user_id: UUID
    email: str
    token_id: UUID | None = None
    token_name: str | None = None


class AuditTarget(msgspec.Struct, frozen=True, kw_only=True):
    """What it was done to: its kind (``server``, ``installation``, ``member``…), id and
    name where known."""

    type: str
    id: str | None = None
    name: str | None = None


class AuditEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One line of a team's audit log: append-only, kept ``BERTH_AUDIT_DAYS``."""

    id: UUID
    team_id: UUID
    at: datetime
    actor: AuditActor
    action: str
    target: AuditTarget
    outcome: AuditOutcome
    client_address: str | None = None
    detail: str | None = None


class AuditFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Which entries of a team's audit log a page holds: those of ``action`` (exactly),
    with ``outcome``, by the user whose email is ``actor`` (any case); ``None``: any."""

    action: str | None = None
    outcome: AuditOutcome | None = None
    actor: str | None = None

    def admits(self, entry: AuditEntry) -> bool:
        """Whether ``entry`` is one this filter keeps (the fake store's rule; SQL's too)."""
        return (
            (self.action is None or entry.action == self.action)
            and (self.outcome is None or entry.outcome is self.outcome)
            and (self.actor is None or entry.actor.email.lower() == self.actor.lower())
        )


class InvitationPreview(msgspec.Struct, frozen=True, kw_only=True):
    """What an invitation's link shows before it is accepted: the team, the role, the
    email it was made for and until when it can be accepted."""

    team_id: UUID
    team_name: str
    email: str
    role: Role
    expires_at: datetime


class CreatedInvitation(msgspec.Struct, frozen=True, kw_only=True):
    """An invitation just made, with its one-time token (shown this once)."""

    invitation: TeamInvitation
    token: str


class CreatedToken(msgspec.Struct, frozen=True, kw_only=True):
    """A named token just made, with its secret (shown this once)."""

    token: AccessToken
    secret: str


class AuditPage(msgspec.Struct, frozen=True, kw_only=True):
    """A page of a team's audit log, newest first; ``next_before``: the next page's
    ``before`` (``None``: this is the last)."""

    entries: tuple[AuditEntry, ...]
    next_before: UUID | None = None
