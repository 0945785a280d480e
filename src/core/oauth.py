"""OAuth for remote MCP clients: registered clients, authorizations a user approves on
the consent page, and the grants (refresh tokens) that keep minting their access tokens.

The protocol itself is the MCP SDK's (``entrypoints.mcp.oauth``); what is berth's is
here: what is stored, how long each thing lives, and what an access token *is* — a
named token of the approving user (``teams.AccessToken``), for the team, scopes and
servers they chose, so ``Authenticate`` and every right check treat it as any other.
Codes, refresh tokens and access tokens are kept as hashes only.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from uuid import UUID

import msgspec

from .access import TokenScope

__all__ = [
    "ACCESS_LIFETIME",
    "CODE_PREFIX",
    "CONSENT_LIFETIME",
    "GRANT_LIFETIME",
    "REFRESH_PREFIX",
    "IssuedTokens",
    "OAuthAuthorization",
    "OAuthClient",
    "OAuthGrant",
    "token_name",
]

#: How long the user has to approve (or deny) a request on the consent page, and then
#: the client to exchange the code: short, as RFC 6749 §4.1.2 advises.
CONSENT_LIFETIME = timedelta(minutes=10)
#: An access token's life: the client refreshes it after that.
ACCESS_LIFETIME = timedelta(hours=1)
#: A refresh token's life (each refresh gives a new one, for as long again).
GRANT_LIFETIME = timedelta(days=30)

CODE_PREFIX = "berth_code_"
REFRESH_PREFIX = "berth_refresh_"


class OAuthClient(msgspec.Struct, frozen=True, kw_only=True):
    """A client that registered itself (RFC 7591). ``metadata`` is its registration as
    the SDK reads it back (JSON, with its secret, if it has one: sealed at rest)."""

    client_id: str
    name: str
    redirect_uris: tuple[str, ...]
    metadata: str
    created_at: datetime


class OAuthAuthorization(msgspec.Struct, frozen=True, kw_only=True):
    """A client's authorization request, then the user's answer: pending until approved
    on the consent page, then a one-time code (``code_hash``) for the token endpoint."""

    id: UUID
    client_id: str
    redirect_uri: str
    redirect_uri_explicit: bool
    code_challenge: str
    state: str | None = None
    resource: str | None = None
    requested_scopes: tuple[str, ...] | None = None
    created_at: datetime
    expires_at: datetime
    # Set when the user approves:
    code_hash: str | None = None
    user_id: UUID | None = None
    team_id: UUID | None = None
    scopes: frozenset[TokenScope] | None = None
    server_ids: frozenset[UUID] | None = None

    @property
    def approved(self) -> bool:
        return self.code_hash is not None


class OAuthGrant(msgspec.Struct, frozen=True, kw_only=True):
    """What an approval lasts as: the refresh token (``refresh_hash``), and the named
    token (``token_id``) it minted last; revoking that token ends the grant too."""

    id: UUID
    refresh_hash: str
    client_id: str
    user_id: UUID
    team_id: UUID
    scopes: frozenset[TokenScope]
    server_ids: frozenset[UUID] | None = None
    resource: str | None = None
    token_id: UUID
    created_at: datetime
    expires_at: datetime


class IssuedTokens(msgspec.Struct, frozen=True, kw_only=True):
    """The token endpoint's answer: a named token's secret and a refresh token."""

    access_token: str
    expires_in: int
    refresh_token: str
    scopes: frozenset[TokenScope]
    grant: OAuthGrant


def token_name(client_name: str) -> str:
    """The name of the named tokens an OAuth client gets (the token list shows it)."""
    return f"OAuth: {client_name}"[:100]
