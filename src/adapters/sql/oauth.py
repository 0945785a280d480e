"""OAuth clients, authorizations and grants (``berth.core.oauth``) in SQL."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar, cast
from uuid import UUID

import msgspec
from berth.core.access import TokenScope
from berth.core.oauth import OAuthAuthorization, OAuthClient, OAuthGrant
from sqlalchemy import Table, delete, insert, select, update

from .rows import AnyRow, _Repository, from_row
from .tables import OAuthAuthorizationRow, OAuthClientRow, OAuthGrantRow

__all__ = ["SqlOAuthRepository"]

clients_t = cast(Table, OAuthClientRow.__table__)
authorizations_t = cast(Table, OAuthAuthorizationRow.__table__)
grants_t = cast(Table, OAuthGrantRow.__table__)

_T = TypeVar("_T")


def _scopes(values: list[Any] | None) -> frozenset[TokenScope] | None:
    return frozenset(TokenScope(v) for v in values) if values is not None else None


def _servers(values: list[Any] | None) -> frozenset[UUID] | None:
    return frozenset(UUID(v) for v in values) if values is not None else None


def _listed(values: frozenset[Any] | None) -> list[str] | None:
    return sorted(str(getattr(v, "value", v)) for v in values) if values is not None else None


def _authorization(row: AnyRow) -> OAuthAuthorization:
    given = {
        "redirect_uri_explicit": bool(row.redirect_uri_explicit),
        "requested_scopes": (
            tuple(row.requested_scopes) if row.requested_scopes is not None else None
        ),
        "scopes": _scopes(row.scopes),
        "server_ids": _servers(row.server_ids),
    }
    return from_row(OAuthAuthorization, row, given)


def _grant(row: AnyRow) -> OAuthGrant:
    given = {"scopes": _scopes(row.scopes) or frozenset(), "server_ids": _servers(row.server_ids)}
    return from_row(OAuthGrant, row, given)


class SqlOAuthRepository(_Repository):
    """``OAuthRepository``: a client's registration sealed with the store's box."""

    async def add_client(self, client: OAuthClient) -> None:
        await self._tx.write(
            insert(clients_t).values(
                id=client.client_id,
                name=client.name,
                redirect_uris=list(client.redirect_uris),
                metadata_sealed=self._box.seal(client.metadata.encode()),
                created_at=client.created_at,
            )
        )

    async def _first(self, table: Table, to_core: Callable[[AnyRow], _T], *where: Any) -> _T | None:
        """The one row of ``table`` matching ``where`` as a core value; ``None`` if none."""
        row = (await self._tx.read(select(table).where(*where))).first()
        return to_core(row) if row is not None else None

    def _client(self, row: AnyRow) -> OAuthClient:
        return OAuthClient(
            client_id=row.id,
            name=row.name,
            redirect_uris=tuple(row.redirect_uris),
            metadata=self._box.open(row.metadata_sealed).decode(),
            created_at=row.created_at,
        )

    async def client(self, client_id: str) -> OAuthClient | None:
        return await self._first(clients_t, self._client, clients_t.c.id == client_id)

    async def add_authorization(self, authorization: OAuthAuthorization) -> None:
        a = authorization
        await self._tx.write(
            insert(authorizations_t).values(
                id=a.id,
                client_id=a.client_id,
                redirect_uri=a.redirect_uri,
                redirect_uri_explicit=a.redirect_uri_explicit,
                code_challenge=a.code_challenge,
                state=a.state,
                resource=a.resource,
                requested_scopes=list(a.requested_scopes)
                if a.requested_scopes is not None
                else None,
                created_at=a.created_at,
                expires_at=a.expires_at,
            )
        )

    async def authorization(self, authorization_id: UUID) -> OAuthAuthorization | None:
        return await self._first(
            authorizations_t, _authorization, authorizations_t.c.id == authorization_id
        )

    async def by_code(self, code_hash: str) -> OAuthAuthorization | None:
        return await self._first(
            authorizations_t, _authorization, authorizations_t.c.code_hash == code_hash
        )

    async def approve(self, approved: OAuthAuthorization) -> bool:
        a = authorizations_t.c
        return await self._changed(
            update(authorizations_t)
            .where(a.id == approved.id, a.code_hash.is_(None))
            .values(
                code_hash=approved.code_hash,
                user_id=approved.user_id,
                team_id=approved.team_id,
                scopes=_listed(approved.scopes),
                server_ids=_listed(approved.server_ids),
                expires_at=approved.expires_at,
            )
        )

    async def delete_authorization(self, authorization_id: UUID) -> bool:
        stmt = delete(authorizations_t).where(authorizations_t.c.id == authorization_id)
        return await self._changed(stmt)

    async def add_grant(self, grant: OAuthGrant) -> None:
        listed = {"scopes": _listed(grant.scopes), "server_ids": _listed(grant.server_ids)}
        await self._tx.write(insert(grants_t).values(msgspec.structs.asdict(grant) | listed))

    async def grant(self, refresh_hash: str) -> OAuthGrant | None:
        return await self._first(grants_t, _grant, grants_t.c.refresh_hash == refresh_hash)

    async def grant_of_token(self, token_id: UUID) -> OAuthGrant | None:
        return await self._first(grants_t, _grant, grants_t.c.token_id == token_id)

    async def grant_by_id(self, grant_id: UUID) -> OAuthGrant | None:
        return await self._first(grants_t, _grant, grants_t.c.id == grant_id)

    async def delete_grant(self, grant_id: UUID) -> bool:
        return await self._changed(delete(grants_t).where(grants_t.c.id == grant_id))

    async def prune(self, now: datetime) -> int:
        gone = (
            await self._tx.write(
                delete(authorizations_t).where(authorizations_t.c.expires_at <= now)
            )
        ).rowcount
        gone += (
            await self._tx.write(delete(grants_t).where(grants_t.c.expires_at <= now))
        ).rowcount
        return int(gone)
