"""Git credentials (a team's per Git host, the password sealed) and deploy hooks (one per
installation, the secret sealed).

Listings never select a sealed column: ``sealed_for`` (the worker's fetch) and
``SqlDeployHookRepository.find`` (a delivery to the hook's URL) are the only reads that
unseal one.
"""

from __future__ import annotations

from typing import cast
from uuid import UUID

from berth.core.access import Owner, team_of
from berth.core.models import DeployHook, GitCredential
from berth.core.ports import SecretBox
from sqlalchemy import Table, delete, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from .host_credentials import HostCredentialsRepository, sealed_for
from .rows import _Repository, from_row
from .tables import DeployHookRow, GitCredentialRow
from .transaction import transaction

__all__ = ["SqlDeployHookRepository", "SqlGitCredentialRepository", "SqlGitCredentials"]

credentials_t = cast(Table, GitCredentialRow.__table__)
hooks_t = cast(Table, DeployHookRow.__table__)

_HOOK_COLUMNS = [c for c in hooks_t.c if c.name != "secret_sealed"]


class SqlGitCredentials:
    """The worker's read of a team's Git credentials for a host (``GitCredentials`` of the
    Git fetcher): one short transaction of its own per fetch."""

    def __init__(self, engine: AsyncEngine, box: SecretBox) -> None:
        self._engine = engine
        self._box = box

    async def __call__(self, owner_id: UUID, host: str) -> tuple[str, str] | None:
        async with transaction(self._engine) as tx:
            return await sealed_for(tx, self._box, credentials_t, owner_id, host)


class SqlGitCredentialRepository(
    HostCredentialsRepository[GitCredential],
    table=credentials_t,
    saved=GitCredential,
    taken={"uq_git_credential_owner_id_host": "Credentials for this host exist."},
):
    """``GitCredentialRepository`` over ``git_credential``."""

    async def auth(self, owner_id: Owner, host: str) -> tuple[str, str] | None:
        return await sealed_for(self._tx, self._box, credentials_t, owner_id, host)


class SqlDeployHookRepository(_Repository):
    """``DeployHookRepository`` over ``deploy_hook``: one row per installation."""

    async def save(self, owner_id: Owner, hook: DeployHook, secret: str) -> DeployHook:
        sealed = self._box.seal(secret.encode("utf-8"))
        existing = await self.get(owner_id, hook.installation_id)
        if existing is not None:
            await self._changed(
                update(hooks_t).where(hooks_t.c.id == existing.id).values(secret_sealed=sealed)
            )
            return existing
        values = {
            "id": hook.id,
            "owner_id": hook.owner_id,
            "installation_id": hook.installation_id,
            "created_by": hook.created_by,
            "secret_sealed": sealed,
            "created_at": hook.created_at,
        }
        conflicts = {"uq_deploy_hook_installation_id": "The installation got a hook meanwhile."}
        await self._insert(hooks_t, values, conflicts)
        return hook

    async def get(self, owner_id: Owner, installation_id: UUID) -> DeployHook | None:
        stmt = select(*_HOOK_COLUMNS).where(
            hooks_t.c.owner_id == team_of(owner_id), hooks_t.c.installation_id == installation_id
        )
        row = (await self._tx.read(stmt)).first()
        return from_row(DeployHook, row) if row else None

    async def delete(self, owner_id: Owner, installation_id: UUID) -> bool:
        return await self._changed(
            delete(hooks_t).where(
                hooks_t.c.owner_id == team_of(owner_id),
                hooks_t.c.installation_id == installation_id,
            )
        )

    async def find(self, hook_id: UUID) -> tuple[DeployHook, str] | None:
        stmt = select(*_HOOK_COLUMNS, hooks_t.c.secret_sealed).where(hooks_t.c.id == hook_id)
        row = (await self._tx.read(stmt)).first()
        if row is None:
            return None
        try:
            secret = self._box.open(row.secret_sealed).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return None
        return from_row(DeployHook, row), secret
