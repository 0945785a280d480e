"""OAuth for remote MCP clients: the store's side of the SDK's authorization server.

The SDK checks the protocol (client authentication, redirect URIs, PKCE, expiry as the
client sees it); these check what is berth's: a code is exchanged once, by the client
it was made for, before it expires, for a user still in the team they chose; a
refresh token is used once; what is minted is a named token (``CreateToken``'s kind),
so revoking it — here, on the dashboard or with ``DELETE /tokens/{id}`` — ends access.
"""

from __future__ import annotations

import unicodedata
from datetime import datetime
from uuid import UUID, uuid4

import msgspec
import structlog

from .. import commands as c
from .. import tokens
from ..access import Actor, scope_closure
from ..errors import FieldError, InvalidInput, NotFound, Unauthorized
from ..events import Audited
from ..oauth import (
    ACCESS_LIFETIME,
    CODE_PREFIX,
    CONSENT_LIFETIME,
    GRANT_LIFETIME,
    REFRESH_PREFIX,
    IssuedTokens,
    OAuthAuthorization,
    OAuthClient,
    OAuthGrant,
    token_name,
)
from ..ports import UnitOfWork
from ..teams import AccessToken, AuditTarget
from .owned import UsesStoreAndClock
from .teams import check_team_servers, scope_words, token_created, token_scopes

__all__ = [
    "ApproveOAuth",
    "BeginOAuth",
    "DenyOAuth",
    "FindOAuthCode",
    "FindOAuthGrant",
    "GetOAuthClient",
    "GetOAuthRequest",
    "RedeemOAuthCode",
    "RefreshOAuth",
    "RegisterOAuthClient",
    "RevokeOAuth",
]

log = structlog.get_logger()


def _printable(text: str, limit: int) -> str:
    """A client's self-chosen name, without control characters, at most ``limit`` long."""
    kept = "".join(ch for ch in text if unicodedata.category(ch)[0] != "C").strip()
    return kept[:limit] or "MCP client"


class RegisterOAuthClient(UsesStoreAndClock):
    async def __call__(self, actor: Actor | None, cmd: c.RegisterOAuthClient) -> None:
        client = OAuthClient(
            client_id=cmd.client_id,
            name=_printable(cmd.name, 200),
            redirect_uris=cmd.redirect_uris,
            metadata=cmd.metadata,
            created_at=self._clock.now(),
        )
        async with self._uow() as uow:
            await uow.oauth.add_client(client)
            await uow.commit()
        log.info("oauth_client_registered", client_id=client.client_id)


class GetOAuthClient(UsesStoreAndClock):
    async def __call__(self, actor: Actor | None, cmd: c.GetOAuthClient) -> OAuthClient | None:
        async with self._uow() as uow:
            return await uow.oauth.client(cmd.client_id)


class BeginOAuth(UsesStoreAndClock):
    async def __call__(self, actor: Actor | None, cmd: c.BeginOAuth) -> UUID:
        now = self._clock.now()
        authorization = OAuthAuthorization(
            id=uuid4(),
            client_id=cmd.client_id,
            redirect_uri=cmd.redirect_uri,
            redirect_uri_explicit=cmd.redirect_uri_explicit,
            code_challenge=cmd.code_challenge,
            state=cmd.state,
            resource=cmd.resource,
            requested_scopes=cmd.requested_scopes,
            created_at=now,
            expires_at=now + CONSENT_LIFETIME,
        )
        async with self._uow() as uow:
            await uow.oauth.prune(now)  # what nobody answered or exchanged in time
            await uow.oauth.add_authorization(authorization)
            await uow.commit()
        return authorization.id


async def _pending(
    uow: UnitOfWork, authorization_id: UUID, now: datetime
) -> tuple[OAuthAuthorization, OAuthClient]:
    found = await uow.oauth.authorization(authorization_id)
    client = await uow.oauth.client(found.client_id) if found is not None else None
    if found is None or client is None or found.approved or found.expires_at <= now:
        raise NotFound(
            "This authorization request expired or was answered already: "
            "start again from your MCP client."
        )
    return found, client


class GetOAuthRequest(UsesStoreAndClock):
    async def __call__(
        self, actor: Actor, cmd: c.GetOAuthRequest
    ) -> tuple[OAuthAuthorization, OAuthClient]:
        async with self._uow() as uow:
            return await _pending(uow, cmd.authorization_id, self._clock.now())


class ApproveOAuth(UsesStoreAndClock):
    """The bus made the actor act in ``team_id`` (it names a team), so only a member
    approves for a team, and only servers of that team can be chosen."""

    async def __call__(self, actor: Actor, cmd: c.ApproveOAuth) -> tuple[OAuthAuthorization, str]:
        now = self._clock.now()
        scopes = token_scopes(cmd.scopes)
        if cmd.server_ids is not None and not cmd.server_ids:
            raise InvalidInput([FieldError("server_ids", "Choose at least one server.", None)])
        code = tokens.generate(CODE_PREFIX)
        async with self._uow() as uow:
            pending, client = await _pending(uow, cmd.authorization_id, now)
            await check_team_servers(uow, actor.team_id, cmd.server_ids)
            approved = msgspec.structs.replace(
                pending,
                code_hash=tokens.hash_token(code),
                user_id=actor.user.id,
                team_id=actor.team_id,
                scopes=scopes,
                server_ids=cmd.server_ids,
                expires_at=now + CONSENT_LIFETIME,
            )
            if not await uow.oauth.approve(approved):
                raise NotFound("This authorization request was answered already.")
            target = AuditTarget(type="oauth-client", id=client.client_id, name=client.name)
            uow.record(Audited.of(actor, "oauth.approve", target, detail=scope_words(scopes)))
            await uow.commit()
        log.info("oauth_approved", client_id=client.client_id, user_id=str(actor.user.id))
        return approved, code


class DenyOAuth(UsesStoreAndClock):
    async def __call__(self, actor: Actor, cmd: c.DenyOAuth) -> OAuthAuthorization:
        async with self._uow() as uow:
            pending, _ = await _pending(uow, cmd.authorization_id, self._clock.now())
            await uow.oauth.delete_authorization(pending.id)
            await uow.commit()
        return pending


class FindOAuthCode(UsesStoreAndClock):
    async def __call__(
        self, actor: Actor | None, cmd: c.FindOAuthCode
    ) -> OAuthAuthorization | None:
        if not tokens.is_well_formed(cmd.code, CODE_PREFIX):
            return None
        async with self._uow() as uow:
            return await uow.oauth.by_code(tokens.hash_token(cmd.code))


class _Mints(UsesStoreAndClock):
    """Mints a grant's named token and refresh token, in the caller's unit of work."""

    def _usable(self, found: OAuthAuthorization | OAuthGrant, client_id: str) -> bool:
        """A code's or refresh token's record that is ``client_id``'s and not expired."""
        return found.client_id == client_id and found.expires_at > self._clock.now()

    async def _mint(
        self, uow: UnitOfWork, client_id: str, grant: OAuthGrant | OAuthAuthorization
    ) -> IssuedTokens:
        assert grant.user_id is not None
        assert grant.team_id is not None
        assert grant.scopes
        now = self._clock.now()
        user = await uow.users.get(grant.user_id)
        role = await uow.teams.role(grant.team_id, grant.user_id)
        client = await uow.oauth.client(client_id)
        if user is None or role is None or client is None:
            raise Unauthorized("The user who approved this is no longer in the team.")
        secret = tokens.generate()
        token = AccessToken(
            id=uuid4(),
            user_id=user.id,
            team_id=grant.team_id,
            name=token_name(client.name),
            scopes=grant.scopes,
            token_hash=tokens.hash_token(secret),
            prefix=tokens.display_prefix(secret),
            created_at=now,
            server_ids=grant.server_ids,
            expires_at=now + ACCESS_LIFETIME,
        )
        await uow.access_tokens.add(token)
        refresh = tokens.generate(REFRESH_PREFIX)
        issued = OAuthGrant(
            id=uuid4(),
            refresh_hash=tokens.hash_token(refresh),
            client_id=client_id,
            user_id=user.id,
            team_id=grant.team_id,
            scopes=grant.scopes,
            server_ids=grant.server_ids,
            resource=grant.resource,
            token_id=token.id,
            created_at=now,
            expires_at=now + GRANT_LIFETIME,
        )
        await uow.oauth.add_grant(issued)
        actor = Actor(user=user, team_id=grant.team_id, role=role, token_name=token.name)
        uow.record(token_created(actor, token, " (OAuth)"))
        return IssuedTokens(
            access_token=secret,
            expires_in=int(ACCESS_LIFETIME.total_seconds()),
            refresh_token=refresh,
            scopes=grant.scopes,
            grant=issued,
        )


class RedeemOAuthCode(_Mints):
    async def __call__(self, actor: Actor | None, cmd: c.RedeemOAuthCode) -> IssuedTokens:
        if not tokens.is_well_formed(cmd.code, CODE_PREFIX):
            raise Unauthorized()
        async with self._uow() as uow:
            found = await uow.oauth.by_code(tokens.hash_token(cmd.code))
            if (
                found is None
                or not self._usable(found, cmd.client_id)
                or not await uow.oauth.delete_authorization(found.id)  # once only
            ):
                raise Unauthorized("The authorization code is unknown, used or expired.")
            issued = await self._mint(uow, cmd.client_id, found)
            await uow.commit()
        log.info(
            "oauth_code_redeemed", client_id=cmd.client_id, token_id=str(issued.grant.token_id)
        )
        return issued


class FindOAuthGrant(UsesStoreAndClock):
    async def __call__(self, actor: Actor | None, cmd: c.FindOAuthGrant) -> OAuthGrant | None:
        prefix = REFRESH_PREFIX if cmd.refresh else tokens.API_PREFIX
        if not tokens.is_well_formed(cmd.token, prefix):
            return None
        digest = tokens.hash_token(cmd.token)
        async with self._uow() as uow:
            if cmd.refresh:
                return await uow.oauth.grant(digest)
            named = await uow.access_tokens.find(digest)
            return await uow.oauth.grant_of_token(named[1].id) if named is not None else None


class RefreshOAuth(_Mints):
    async def __call__(self, actor: Actor | None, cmd: c.RefreshOAuth) -> IssuedTokens:
        if not tokens.is_well_formed(cmd.refresh_token, REFRESH_PREFIX):
            raise Unauthorized()
        async with self._uow() as uow:
            found = await uow.oauth.grant(tokens.hash_token(cmd.refresh_token))
            if found is None or not self._usable(found, cmd.client_id):
                raise Unauthorized("The refresh token is unknown, used or expired.")
            # A grant whose token was revoked (on the dashboard, say) is over.
            alive = any(
                t.id == found.token_id for t in await uow.access_tokens.of_user(found.user_id)
            )
            if not alive or not await uow.oauth.delete_grant(found.id):
                raise Unauthorized("The refresh token is unknown, used or expired.")
            await uow.access_tokens.revoke(found.user_id, found.token_id)
            narrowed = scope_closure(cmd.scopes & found.scopes) or found.scopes
            rotated = msgspec.structs.replace(found, scopes=narrowed)
            issued = await self._mint(uow, cmd.client_id, rotated)
            await uow.commit()
        log.info("oauth_refreshed", client_id=cmd.client_id, token_id=str(issued.grant.token_id))
        return issued


class RevokeOAuth(UsesStoreAndClock):
    async def __call__(self, actor: Actor | None, cmd: c.RevokeOAuth) -> None:
        async with self._uow() as uow:
            found = await uow.oauth.grant_by_id(cmd.grant_id)
            if found is None:
                return  # RFC 7009: an unknown token is no error
            await uow.oauth.delete_grant(found.id)
            revoked = await uow.access_tokens.revoke(found.user_id, found.token_id)
            if revoked is not None:
                user = await uow.users.get(found.user_id)
                role = await uow.teams.role(found.team_id, found.user_id)
                if user is not None and role is not None:
                    who = Actor(
                        user=user, team_id=found.team_id, role=role, token_name=revoked.name
                    )
                    target = AuditTarget(type="token", id=str(revoked.id), name=revoked.name)
                    uow.record(Audited.of(who, "token.revoke", target, detail="OAuth revocation"))
            await uow.commit()
        log.info("oauth_revoked", grant_id=str(cmd.grant_id))
