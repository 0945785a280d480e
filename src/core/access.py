"""Who may do what: rights, roles, token scopes, the actor and the scope of the store.

A request's **actor** is a user acting in one team: their **role** there, the
**scopes** of the token they hold (the main token, the dashboard's session and the
library's ``User`` hold every scope) and, for a server-limited token, its **server
set**. Its effective rights are ``role ∩ scopes`` (:func:`rights_of`): a scope never
widens a role, and a server-limited token administers nothing team-wide.

Each command declares the one right it needs (``Command.right``); the bus checks it
against the actor before the handler runs (:meth:`berth.core.bus.MessageBus._admit`).
What the actor may *see* is the store's: every repository method takes the actor's
:class:`Scope` (its team, and its server set), so another team's ids, and a
server-limited token's other servers, are "not found" in the queries themselves.
"""

from __future__ import annotations

import enum
from datetime import datetime
from uuid import UUID

import msgspec

from .models import User

__all__ = [
    "ALL_SCOPES",
    "Actor",
    "Owner",
    "Right",
    "Role",
    "Scope",
    "TokenScope",
    "needed_words",
    "rights_of",
    "scope_closure",
    "servers_of",
    "team_of",
]


class Right(enum.StrEnum):
    """What a command needs. ``public``: no actor at all; ``signed-in``: any actor (what
    it asks is the actor's own: who it is, its teams, its tokens); ``account``: the
    user's own tokens and teams, changed (a token that is not ``admin``-scoped, or that
    is limited to servers, changes none: it could mint a wider one). The others are a
    team's: ``read`` ⊂ ``deploy`` ⊂ ``admin`` (servers, registries, webhooks, the audit
    log), ``members`` (invite, change a role, remove) and ``owner`` (owners' membership)."""

    PUBLIC = "public"
    SIGNED_IN = "signed-in"
    ACCOUNT = "account"
    READ = "read"
    DEPLOY = "deploy"
    ADMIN = "admin"
    MEMBERS = "members"
    OWNER = "owner"


class Role(enum.StrEnum):
    """A member's role in a team (SPEC.md, "Teams, roles and scoped tokens")."""

    OWNER = "owner"
    ADMIN = "admin"
    DEPLOYER = "deployer"
    VIEWER = "viewer"


class TokenScope(enum.StrEnum):
    """What a token narrows its user's role to: ``read`` ⊂ ``deploy`` ⊂ ``admin``."""

    READ = "read"
    DEPLOY = "deploy"
    ADMIN = "admin"


ALL_SCOPES = frozenset(TokenScope)

_LEVEL = {TokenScope.READ: 0, TokenScope.DEPLOY: 1, TokenScope.ADMIN: 2}

_ROLE_RIGHTS = {
    Role.OWNER: frozenset({Right.READ, Right.DEPLOY, Right.ADMIN, Right.MEMBERS, Right.OWNER}),
    Role.ADMIN: frozenset({Right.READ, Right.DEPLOY, Right.ADMIN, Right.MEMBERS}),
    Role.DEPLOYER: frozenset({Right.READ, Right.DEPLOY}),
    Role.VIEWER: frozenset({Right.READ}),
}
_SCOPE_RIGHTS = {
    TokenScope.READ: frozenset({Right.READ}),
    TokenScope.DEPLOY: frozenset({Right.READ, Right.DEPLOY}),
    TokenScope.ADMIN: frozenset(Right) - {Right.PUBLIC, Right.SIGNED_IN},
}
#: What a token limited to servers never has: rights over the whole team or the account.
_TEAM_WIDE = frozenset({Right.ADMIN, Right.MEMBERS, Right.OWNER, Right.ACCOUNT})
_ALWAYS = frozenset({Right.PUBLIC, Right.SIGNED_IN})


def scope_closure(scopes: frozenset[TokenScope] | set[TokenScope]) -> frozenset[TokenScope]:
    """The scopes with every scope below the highest given (``{deploy}`` → ``{read,
    deploy}``): what a token's ``scopes`` mean; empty stays empty."""
    if not scopes:
        return frozenset()
    top = max(_LEVEL[s] for s in scopes)
    return frozenset(s for s, level in _LEVEL.items() if level <= top)


_RIGHTS_CACHE: dict[tuple[Role, frozenset[TokenScope], bool], frozenset[Right]] = {}


def rights_of(
    role: Role, scopes: frozenset[TokenScope], *, limited: bool = False
) -> frozenset[Right]:
    """The effective rights of a member with ``role`` holding a token with ``scopes``
    (``limited``: to a server set): the role's rights and ``account`` that the scopes
    allow too, never more than either (team-wide ones not at all when ``limited``)."""
    key = (role, scopes, limited)
    found = _RIGHTS_CACHE.get(key)
    if found is None:
        allowed: frozenset[Right] = frozenset()
        for scope in scopes:
            allowed |= _SCOPE_RIGHTS[scope]
        found = ((_ROLE_RIGHTS[role] | {Right.ACCOUNT}) & allowed) | _ALWAYS
        if limited:
            found -= _TEAM_WIDE
        _RIGHTS_CACHE[key] = found
    return found


def needed_words(right: Right) -> str:
    """What a refusal says is needed for ``right`` (the 403's ``detail``)."""
    return {
        Right.ACCOUNT: (
            "This needs a token with the `admin` scope that is not limited to servers "
            "(or the main token, or the dashboard): it changes your account's tokens or teams."
        ),
        Right.READ: "This needs the `read` scope and a role in the team (any role reads).",
        Right.DEPLOY: (
            "This needs the `deploy` scope and the role `deployer`, `admin` or `owner` in the team."
        ),
        Right.ADMIN: (
            "This needs the `admin` scope, a token not limited to servers, and the role "
            "`admin` or `owner` in the team."
        ),
        Right.MEMBERS: (
            "This needs the `admin` scope, a token not limited to servers, and the role "
            "`admin` or `owner` in the team: it changes the team's members."
        ),
        Right.OWNER: (
            "This needs the `admin` scope, a token not limited to servers, and the role "
            "`owner` in the team."
        ),
    }.get(right, f"This needs the right `{right}`.")


class Scope(msgspec.Struct, frozen=True, kw_only=True):
    """What of the store an actor sees: its team's things, and of those only the servers
    ``server_ids`` (and what is on them) when it is limited to servers (``None``: all)."""

    team_id: UUID
    server_ids: frozenset[UUID] | None = None


#: What a repository method takes to know whose things to look in: a team's id (all of
#: its servers) or a :class:`Scope` (perhaps limited to servers).
Owner = UUID | Scope


def team_of(owner: Owner) -> UUID:
    """The team an ``Owner`` names."""
    return owner.team_id if isinstance(owner, Scope) else owner


def servers_of(owner: Owner) -> frozenset[UUID] | None:
    """The servers an ``Owner`` is limited to (``None``: every server of its team)."""
    return owner.server_ids if isinstance(owner, Scope) else None


class Actor(msgspec.Struct, frozen=True, kw_only=True):
    """Who sends a command: a user acting in one team, through one credential.

    ``token_id``/``token_name`` name the named token used (``None`` and the credential's
    kind, e.g. ``"main token"``, for the main token, the dashboard and the library);
    ``client_address`` is where the request came from, as the entrypoint saw it.
    """

    user: User
    team_id: UUID
    role: Role
    scopes: frozenset[TokenScope] = ALL_SCOPES
    server_ids: frozenset[UUID] | None = None
    token_id: UUID | None = None
    token_name: str | None = None
    expires_at: datetime | None = None
    client_address: str | None = None

    @classmethod
    def personal(
        cls, user: User, *, token_name: str | None = None, client_address: str | None = None
    ) -> Actor:
        """``user`` with every right in their personal team (whose id is the user's):
        what the main token, the library's ``User`` and a fresh dashboard session act as."""
        return cls(
            user=user,
            team_id=user.id,
            role=Role.OWNER,
            token_name=token_name,
            client_address=client_address,
        )

    @property
    def scope(self) -> Scope:
        """What of the store this actor sees (its team, its server set)."""
        return Scope(team_id=self.team_id, server_ids=self.server_ids)

    @property
    def rights(self) -> frozenset[Right]:
        return rights_of(self.role, self.scopes, limited=self.server_ids is not None)

    def may(self, right: Right) -> bool:
        """Whether this actor's effective rights include ``right``."""
        return right in self.rights
