"""``/api/agent/git-credentials``: credentials for private Git repositories."""

from __future__ import annotations

from berth.core import commands as c
from litestar import Controller, delete, get, post
from litestar.di import NamedDependency
from litestar.params import JSONBody

from ..openapi import documented
from ..parameters import GitCredentialId
from ..schemas import GitCredentialListOut, GitCredentialOut, git_credential_out
from .common import AUTH, READ, WRITE, Caller

__all__ = ["GitCredentialController"]


class GitCredentialController(Controller):
    path = "/git-credentials"

    @documented(get, "/", "listGitCredentials", responses=AUTH)
    async def list_git_credentials(self, caller: NamedDependency[Caller]) -> GitCredentialListOut:
        """List your team's Git credentials

        The Git hosts your team saved credentials for: `host`, `username` and when they
        were saved. A password is never returned.

        Returns:
            Your team's Git credentials, by host.
        """
        found = await caller(c.ListGitCredentials())
        return GitCredentialListOut(git_credentials=[git_credential_out(g) for g in found])

    @documented(post, "/", "addGitCredential", responses=WRITE)
    async def add_git_credential(
        self, caller: NamedDependency[Caller], data: JSONBody[c.AddGitCredential]
    ) -> GitCredentialOut:
        """Save credentials for private Git repositories

        A build from a Git repository whose URL's host (and port, if the URL names one) is
        `host` fetches with these credentials (HTTP basic auth, sent only to that host's
        checked address), for every deploy of your team. `password` is a password or an
        access token (GitHub: a fine-grained token with Contents read; Gitea/Forgejo: an
        access token): sealed at rest, never returned, never logged, and redacted from the
        build's output. One entry per host per team.

        Returns:
            The saved credentials (never the password).

        Raises:
            409: Your team has credentials for this host already
                (`git-credential-exists`: remove them first to replace them), or for 100
                hosts (`git-credential-limit`).
        """
        return git_credential_out(await caller(data))

    @documented(delete, "/{gitCredentialId:str}", "removeGitCredential", responses=READ)
    async def remove_git_credential(
        self, caller: NamedDependency[Caller], git_credential_id: GitCredentialId
    ) -> None:
        """Forget Git credentials

        Builds from that host fetch without credentials from then on (a build already
        fetching keeps the ones it read). Another team's credentials are a 404, like
        missing ones.

        Returns:
            Forgotten.
        """
        await caller(c.RemoveGitCredential(git_credential_id=git_credential_id))
