"""The MCP SDK's OAuth authorization server over berth's store (imported on the first
OAuth request, like the MCP server itself: ``entrypoints.mcp.oauth`` mounts it).

``BerthOAuthProvider`` is the SDK's ``OAuthAuthorizationServerProvider``: each method is
one command on the bus (``berth.core.use_cases.oauth``). The SDK does the protocol —
metadata (RFC 8414, RFC 9728), registration (RFC 7591), authorization code with PKCE,
refresh, revocation (RFC 7009) —; the consent page is the dashboard's
(``http.dashboard.consent``), where ``authorize`` sends the user.
"""

from __future__ import annotations

from uuid import UUID

from berth.core import commands as c
from berth.core.access import TokenScope
from berth.core.bus import MessageBus
from berth.core.errors import Unauthorized
from berth.core.oauth import IssuedTokens, OAuthGrant
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    IdentityAssertionParams,
    RefreshToken,
    TokenError,
)
from mcp.server.auth.routes import create_auth_routes, create_protected_resource_routes
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyHttpUrl, AnyUrl
from starlette.routing import Router

__all__ = ["CONSENT_PATH", "BerthOAuthProvider", "oauth_router"]

#: The dashboard's consent page, where ``authorize`` sends the user.
CONSENT_PATH = "/oauth/consent"
SCOPES = [s.value for s in TokenScope]


class GrantRefreshToken(RefreshToken):
    grant_id: str


class GrantAccessToken(AccessToken):
    grant_id: str


def _scopes(scopes: frozenset[TokenScope]) -> list[str]:
    return [s.value for s in TokenScope if s in scopes]  # read, deploy, admin: in order


def _answer(issued: IssuedTokens) -> OAuthToken:
    return OAuthToken(
        access_token=issued.access_token,
        token_type="Bearer",  # noqa: S106 (a type, not a secret)
        expires_in=issued.expires_in,
        refresh_token=issued.refresh_token,
        scope=" ".join(_scopes(issued.scopes)),
    )


def _refused(exc: Unauthorized) -> TokenError:
    return TokenError(error="invalid_grant", error_description=exc.detail)


class BerthOAuthProvider:
    """``OAuthAuthorizationServerProvider`` on the bus."""

    def __init__(self, bus: MessageBus) -> None:
        self._bus = bus

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        found = await self._bus.handle(c.GetOAuthClient(client_id=client_id))
        if found is None:
            return None
        return OAuthClientInformationFull.model_validate_json(found.metadata)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        await self._bus.handle(
            c.RegisterOAuthClient(
                client_id=client_info.client_id,
                name=client_info.client_name or "MCP client",
                redirect_uris=tuple(str(u) for u in client_info.redirect_uris or ()),
                metadata=client_info.model_dump_json(exclude_none=True),
            )
        )

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        request_id = await self._bus.handle(
            c.BeginOAuth(
                client_id=client.client_id,
                redirect_uri=str(params.redirect_uri),
                redirect_uri_explicit=params.redirect_uri_provided_explicitly,
                code_challenge=params.code_challenge,
                state=params.state,
                resource=params.resource,
                requested_scopes=tuple(params.scopes) if params.scopes is not None else None,
            )
        )
        return f"{CONSENT_PATH}?request={request_id}"

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        found = await self._bus.handle(c.FindOAuthCode(code=authorization_code))
        if found is None or found.client_id != client.client_id or found.scopes is None:
            return None
        return AuthorizationCode(
            code=authorization_code,
            scopes=_scopes(found.scopes),
            expires_at=found.expires_at.timestamp(),
            client_id=found.client_id,
            code_challenge=found.code_challenge,
            redirect_uri=AnyUrl(found.redirect_uri),
            redirect_uri_provided_explicitly=found.redirect_uri_explicit,
            resource=found.resource,
            subject=str(found.user_id),
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        command = c.RedeemOAuthCode(code=authorization_code.code, client_id=client.client_id)
        try:
            return _answer(await self._bus.handle(command))
        except Unauthorized as exc:
            raise _refused(exc) from None

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> GrantRefreshToken | None:
        grant = await self._bus.handle(c.FindOAuthGrant(token=refresh_token, refresh=True))
        if grant is None or grant.client_id != client.client_id:
            return None
        return GrantRefreshToken(
            token=refresh_token,
            client_id=grant.client_id,
            scopes=_scopes(grant.scopes),
            expires_at=int(grant.expires_at.timestamp()),
            resource=grant.resource,
            subject=str(grant.user_id),
            grant_id=str(grant.id),
        )

    async def exchange_refresh_token(
        self,
        client: OAuthClientInformationFull,
        refresh_token: GrantRefreshToken,
        scopes: list[str],
    ) -> OAuthToken:
        command = c.RefreshOAuth(
            refresh_token=refresh_token.token,
            client_id=client.client_id,
            scopes=frozenset(TokenScope(s) for s in scopes),  # the SDK checked: the grant's
        )
        try:
            return _answer(await self._bus.handle(command))
        except Unauthorized as exc:
            raise _refused(exc) from None

    async def load_access_token(self, token: str) -> GrantAccessToken | None:
        grant: OAuthGrant | None = await self._bus.handle(
            c.FindOAuthGrant(token=token, refresh=False)
        )
        if grant is None:
            return None
        return GrantAccessToken(
            token=token,
            client_id=grant.client_id,
            scopes=_scopes(grant.scopes),
            resource=grant.resource,
            subject=str(grant.user_id),
            grant_id=str(grant.id),
        )

    async def revoke_token(self, token: GrantAccessToken | GrantRefreshToken) -> None:
        await self._bus.handle(c.RevokeOAuth(grant_id=UUID(token.grant_id)))

    async def exchange_identity_assertion(
        self, client: OAuthClientInformationFull, params: IdentityAssertionParams
    ) -> OAuthToken:
        """Not offered (the metadata does not advertise it): no enterprise identity provider."""
        raise TokenError(error="unsupported_grant_type", error_description="Not supported here.")


def oauth_router(bus: MessageBus, base_url: str, mcp_path: str) -> Router:
    """The SDK's OAuth routes for berth served at ``base_url`` (the issuer), protecting
    ``mcp_path``; ``ValueError`` when the SDK refuses that issuer (plain HTTP but on
    this machine)."""
    issuer = AnyHttpUrl(base_url)
    routes = create_auth_routes(
        BerthOAuthProvider(bus),
        issuer_url=issuer,
        client_registration_options=ClientRegistrationOptions(
            enabled=True, valid_scopes=SCOPES, default_scopes=SCOPES
        ),
        revocation_options=RevocationOptions(enabled=True),
    )
    routes += create_protected_resource_routes(
        resource_url=AnyHttpUrl(base_url + mcp_path),
        authorization_servers=[issuer],
        scopes_supported=SCOPES,
        resource_name="berth",
    )
    return Router(routes=routes)
