"""Git credentials: a team's user name and password (or access token) for the private
repositories of one Git host.

The password is sealed by the store and never read back here: only the worker's fetch
of a Git build source unseals it (``GitCredentialRepository.auth``), for that host.
"""

from __future__ import annotations

from uuid import uuid4

import structlog

from .. import commands as c
from ..access import Actor
from ..errors import Conflict, NotFound, WriteConflict
from ..models import GitCredential
from .owned import ListOwned, UsesStore, UsesStoreAndClock, audit

__all__ = ["GIT_CREDENTIALS_MAX", "AddGitCredential", "ListGitCredentials", "RemoveGitCredential"]

log = structlog.get_logger()

#: How many Git hosts one team may save credentials for.
GIT_CREDENTIALS_MAX = 100


class AddGitCredential(UsesStoreAndClock):
    """Save the team's credentials for a Git host.

    Raises ``Conflict`` (``git-credential-exists``, at ``host``) if the team has some for
    that host already (remove them first to change them), or (``git-credential-limit``)
    past ``GIT_CREDENTIALS_MAX``.
    """

    async def __call__(self, owner: Actor, cmd: c.AddGitCredential) -> GitCredential:
        credential = GitCredential(
            id=uuid4(),
            owner_id=owner.team_id,
            host=cmd.host,
            username=cmd.username,
            created_at=self._clock.now(),
        )
        saved_already = Conflict(
            f"Your team has credentials for {cmd.host} already; remove them first to replace them.",
            kind="git-credential-exists",
            field="host",
        )
        async with self._uow() as uow:
            saved = uow.git_credentials
            if await saved.by_host(owner.scope, cmd.host) is not None:
                raise saved_already
            if len(await saved.list(owner.scope)) >= GIT_CREDENTIALS_MAX:
                raise Conflict(
                    f"Your team has credentials for {GIT_CREDENTIALS_MAX} Git hosts, the most "
                    "it may save.",
                    kind="git-credential-limit",
                )
            try:
                await saved.add(credential, cmd.password)
            except WriteConflict:  # a concurrent request saved this host first
                raise saved_already from None
            audit(uow, owner, "git-credential.add", "git-credential", credential.id, cmd.host)
            await uow.commit()
        log.info("git_credential_added", git_credential_id=str(credential.id), host=cmd.host)
        return credential


class ListGitCredentials(ListOwned[GitCredential], repository="git_credentials"):
    """The team's Git credentials, by host: host and user name, never a password."""


class RemoveGitCredential(UsesStore):
    """Forget one of the team's Git credentials; ``NotFound`` if it is not theirs."""

    async def __call__(self, owner: Actor, cmd: c.RemoveGitCredential) -> None:
        async with self._uow() as uow:
            if not await uow.git_credentials.delete(owner.scope, cmd.git_credential_id):
                raise NotFound("Git credentials not found.")
            audit(uow, owner, "git-credential.remove", "git-credential", cmd.git_credential_id)
            await uow.commit()
        log.info("git_credential_removed", git_credential_id=str(cmd.git_credential_id))
