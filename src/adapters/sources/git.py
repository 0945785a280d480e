"""``GitFetcher``: one commit of a Git repository, fetched over HTTP(S) by the ``git``
binary on the control plane, connected only to addresses the outbound guard checked,
and written out as the tar archive of the build context.

Three programs per build of a branch: ``git init`` of a bare repository, one ``git
fetch`` of the ref (shallow where the server allows it; a branch's commit read from
``FETCH_HEAD``, a tag's or a commit id's asked of ``git rev-parse``) and ``git archive``
of the context's tree, which writes the tar the Engine is sent -- no checkout on disk,
no walk over its files. The archive holds the tree as a checkout would: every
file (``export-ignore`` and ``export-subst`` are turned off), modes 644 and 755.

The repository's host is resolved and checked first (``OutboundGuard.addresses``), then
git is pinned to the checked address with ``http.curloptResolve`` (curl's ``--resolve``),
so a name that resolves elsewhere meanwhile (DNS rebinding) gains nothing; redirects are
not followed (they could lead anywhere), only the http and https transports are allowed
(no ``ext::``, no ``file://``, no submodules), and no configuration, hook, credential
helper or terminal prompt of this machine takes part. git runs as a program with its
arguments as a list, never through a shell; a password, when one is saved for the
host, travels in an ``Authorization`` header set through the environment (never in the
arguments, which other users of the machine can read).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import re
import subprocess
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from urllib.parse import urlsplit
from uuid import UUID

import structlog
from berth.core.errors import RuntimeFailure
from berth.core.models import GitSource
from berth.core.outbound import OutboundGuard, TargetRefused

__all__ = ["GitCredentials", "GitFetcher"]

#: The (user, password) a team saved for a host (``hostname[:port]``), if any.
GitCredentials = Callable[[UUID, str], Awaitable[tuple[str, str] | None]]

log = structlog.get_logger()

_HEX = re.compile(r"^[0-9a-fA-F]{7,64}$")
#: Characters of git's error output quoted in a failure.
_QUOTED = 400


class GitFetcher:
    """``GitFetch`` with the ``git`` program (``git``: its path) and the outbound guard;
    ``credentials(owner_id, host)`` gives the (user, password) saved for a host, if any."""

    def __init__(
        self,
        guard: OutboundGuard,
        *,
        git: str = "git",
        credentials: GitCredentials | None = None,
    ) -> None:
        self._guard = guard
        self._git = git
        self._credentials = credentials

    async def __call__(
        self,
        owner_id: UUID,
        source: GitSource,
        context: str,
        target: Path,
        secrets: Callable[[str], None],
    ) -> str:
        parts = urlsplit(source.url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
        try:
            addresses = await self._guard.addresses(host, port)
        except TargetRefused as exc:
            raise RuntimeFailure(f"{exc}", kind="source-unavailable") from None
        address = str(addresses[0])
        pinned = f"[{address}]" if ":" in address else address
        config = {
            "http.curloptResolve": f"{host}:{port}:{pinned}",
            "http.followRedirects": "false",
            "protocol.allow": "never",
            "protocol.http.allow": "always",
            "protocol.https.allow": "always",
            "core.hooksPath": os.devnull,
            "credential.helper": "",
            "init.defaultBranch": "main",
            "maintenance.auto": "false",  # no ``git maintenance`` after the fetch
            "gc.auto": "0",
            "tar.umask": "0022",  # modes 644 and 755, as a checkout gives them
        }
        found = None
        if self._credentials is not None:
            # Saved per ``hostname[:port]``, the port only where the URL gives one.
            named = f"{host}:{parts.port}" if parts.port is not None else host
            found = await self._credentials(owner_id, named.lower())
        if found is not None:
            user, password = found
            secrets(password)
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            secrets(token)
            config["http.extraHeader"] = f"Authorization: Basic {token}"
        repo = target.parent / "repo.git"
        env = _environment(repo, config)
        await self._run(["init", "-q", "--bare", "--template=", str(repo)], env, repo.parent)
        # Over the tree's own .gitattributes: every file goes in the archive, as it is.
        (repo / "info").mkdir(exist_ok=True)
        (repo / "info" / "attributes").write_text("* -export-ignore -export-subst\n")
        ref = source.ref or "HEAD"
        fetched = await self._fetch(source.url, ref, env, repo)
        commit = _branch_head(repo, ref) if fetched else None
        if commit is None:  # a tag (maybe annotated), a commit id: its commit, asked for
            named = "FETCH_HEAD" if fetched else ref
            verify = ["rev-parse", "--verify", "-q", f"{named}^{{commit}}"]
            commit = (await self._run(verify, env, repo)).strip()
        tree = commit if context == "." else f"{commit}:{context}"
        try:
            await self._run(["archive", "--format=tar", "-o", str(target), tree], env, repo)
        except RuntimeFailure:
            if context == ".":
                raise
            raise RuntimeFailure(
                f"The context directory {context!r} is not in commit {commit}.",
                kind="source-unavailable",
            ) from None
        log.info("git_fetched", host=host, commit=commit)
        return commit

    async def _fetch(self, url: str, ref: str, env: Mapping[str, str], repo: Path) -> bool:
        """Fetch ``ref`` from ``url`` into ``repo`` (shallow where the server allows it):
        ``True`` when ``FETCH_HEAD`` names its commit, ``False`` when ``ref`` is a commit id
        found only in a fetch of every branch and tag."""
        shallow = ["fetch", "-q", "--no-tags", "--depth", "1", url, ref]
        try:
            await self._run(shallow, env, repo)
            return True
        except RuntimeFailure as first:
            try:  # a dumb HTTP server has no shallow fetch
                await self._run(["fetch", "-q", "--no-tags", url, ref], env, repo)
                return True
            except RuntimeFailure:
                if not _HEX.fullmatch(ref):
                    raise first from None
        every = ["+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*"]
        await self._run(["fetch", "-q", url, *every], env, repo)
        return False

    async def _run(self, args: list[str], env: Mapping[str, str], cwd: Path) -> str:
        # Started and waited for in a thread: the standard library starts a program with
        # vfork, while the event loop's own subprocesses (uvloop's) fork the whole process,
        # ~25 ms each for a serve process of 200 MB.
        process = await asyncio.to_thread(
            subprocess.Popen,
            [self._git, *args],
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            out, err = await asyncio.to_thread(process.communicate)
        except BaseException:  # cancelled: the program goes too
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            with contextlib.suppress(Exception):
                await asyncio.to_thread(process.wait)
            raise
        if process.returncode != 0:
            said = err.decode("utf-8", "replace").strip().splitlines()
            last = said[-1] if said else f"git {args[0]} exited {process.returncode}"
            raise RuntimeFailure(
                f"git {args[0]} failed: {last[:_QUOTED]}", kind="source-unavailable"
            )
        return out.decode("utf-8", "replace")


def _branch_head(repo: Path, ref: str) -> str | None:
    """The commit a fetch of ``ref`` got when it was a branch or ``HEAD`` (always a
    commit), as ``FETCH_HEAD`` names it (``<id> TAB TAB branch 'main' of <url>``);
    ``None`` for another ref (a tag's id may be the tag's own object, not its commit)."""
    fields = (repo / "FETCH_HEAD").read_text().split("\n", 1)[0].split("\t")
    commit = fields[0].strip()
    branch = ref == "HEAD" or (len(fields) > 2 and fields[2].startswith("branch '"))
    return commit if branch and _HEX.fullmatch(commit) else None


def _environment(home: Path, config: Mapping[str, str]) -> dict[str, str]:
    """git's whole environment: nothing of this machine's git set-up or of berth's own
    environment (no proxy, no credentials), the settings as ``GIT_CONFIG_*``."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home.parent),
        "LANG": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "/bin/false",
        "SSH_ASKPASS": "/bin/false",
        "GIT_CONFIG_COUNT": str(len(config)),
    }
    for i, (key, value) in enumerate(config.items()):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    return env
