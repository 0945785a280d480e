"""Build sources on the control plane's disk: uploaded contexts (``DiskSourceStore``) and
the contexts a build is made from (``LocalBuildSources``: an upload, or a Git repository
fetched by ``GitFetcher``).

An upload is written to ``<data dir>/sources/<team id>/<id>.tar`` as it arrives, its
SHA-256 computed on the way, never held whole in memory; past the size cap the partial
file is deleted. A source lives 24 hours after its upload or its last use by a build;
after that it is gone (swept at the next upload, and never handed out).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import shutil
import tarfile
import tempfile
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Protocol
from uuid import UUID, uuid4

import msgspec
import structlog
from berth.core.errors import FieldError, InvalidInput, NotFound, RuntimeFailure, TooLarge
from berth.core.models import BuildContext, BuildSpec, GitSource, Source

__all__ = [
    "SOURCE_LIFETIME",
    "SOURCE_MAX_BYTES",
    "DiskSourceStore",
    "GitFetch",
    "LocalBuildSources",
]

log = structlog.get_logger()

#: How long a source is kept after its upload or its last use.
SOURCE_LIFETIME = timedelta(hours=24)
#: The default size cap of one upload (``BERTH_SOURCE_MAX_BYTES``).
SOURCE_MAX_BYTES = 200 * 1024 * 1024
#: Bytes gathered before one write to disk (off the event loop).
_WRITE_BYTES = 1024 * 1024


class DiskSourceStore:
    """``SourceStore`` in ``root`` (``<data dir>/sources``), one directory per team."""

    def __init__(self, root: Path, *, max_bytes: int = SOURCE_MAX_BYTES) -> None:
        self.root = root
        self.max_bytes = max_bytes

    def _dir(self, owner_id: UUID) -> Path:
        return self.root / str(owner_id)

    def path(self, owner_id: UUID, source_id: UUID) -> Path:
        """Where the source's bytes are."""
        return self._dir(owner_id) / f"{source_id}.tar"

    async def save(self, owner_id: UUID, chunks: AsyncIterator[bytes], now: datetime) -> Source:
        await asyncio.to_thread(self._sweep, now)
        folder = self._dir(owner_id)
        await asyncio.to_thread(folder.mkdir, mode=0o700, parents=True, exist_ok=True)
        source_id = uuid4()
        partial = folder / f".{source_id}.partial"
        digest = hashlib.sha256()
        size = 0
        buffer: list[bytes] = []
        buffered = 0
        try:
            with partial.open("wb") as out:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > self.max_bytes:
                        raise TooLarge(
                            f"The source is larger than {self.max_bytes} bytes "
                            "(BERTH_SOURCE_MAX_BYTES): leave out what the build does not "
                            "need (.dockerignore)."
                        )
                    digest.update(chunk)
                    buffer.append(chunk)
                    buffered += len(chunk)
                    if buffered >= _WRITE_BYTES:
                        data, buffer, buffered = b"".join(buffer), [], 0
                        await asyncio.to_thread(out.write, data)
                if buffer:
                    await asyncio.to_thread(out.write, b"".join(buffer))
            if size == 0:
                raise InvalidInput([FieldError("body", "The body is empty: send a tar archive.")])
            if not await asyncio.to_thread(_is_tar, partial):
                raise InvalidInput([FieldError("body", "Not a tar archive (tar or tar.gz).", None)])
            source = Source(
                id=source_id,
                owner_id=owner_id,
                sha256=digest.hexdigest(),
                size=size,
                created_at=now,
                expires_at=now + SOURCE_LIFETIME,
            )
            partial.rename(self.path(owner_id, source_id))
            self._write_meta(source)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        log.info("source_saved", source_id=str(source_id), owner_id=str(owner_id), size=size)
        return source

    def _meta(self, owner_id: UUID, source_id: UUID) -> Path:
        return self._dir(owner_id) / f"{source_id}.json"

    def _write_meta(self, source: Source) -> None:
        meta = {
            "sha256": source.sha256,
            "size": source.size,
            "createdAt": source.created_at.isoformat(),
            "expiresAt": source.expires_at.isoformat(),
        }
        target = self._meta(source.owner_id, source.id)
        temporary = target.with_suffix(".json.tmp")
        temporary.write_text(json.dumps(meta))
        temporary.rename(target)

    def _read(self, owner_id: UUID, source_id: UUID) -> Source | None:
        try:
            meta = json.loads(self._meta(owner_id, source_id).read_text())
        except (OSError, ValueError):
            return None
        if not self.path(owner_id, source_id).is_file():
            return None
        return Source(
            id=source_id,
            owner_id=owner_id,
            sha256=meta["sha256"],
            size=int(meta["size"]),
            created_at=datetime.fromisoformat(meta["createdAt"]),
            expires_at=datetime.fromisoformat(meta["expiresAt"]),
        )

    async def get(self, owner_id: UUID, source_id: UUID) -> Source | None:
        return await asyncio.to_thread(self._read, owner_id, source_id)

    def current(self, owner_id: UUID, source_id: UUID, now: datetime) -> Source | None:
        """The source if it has not expired (blocking: call it off the event loop)."""
        source = self._read(owner_id, source_id)
        if source is None or source.expires_at <= now:
            return None
        return source

    def touch(self, source: Source, now: datetime) -> None:
        """A build used the source: it lives ``SOURCE_LIFETIME`` from ``now``."""
        self._write_meta(msgspec.structs.replace(source, expires_at=now + SOURCE_LIFETIME))

    async def sweep(self, now: datetime) -> int:
        return await asyncio.to_thread(self._sweep, now)

    def _sweep(self, now: datetime) -> int:
        removed = 0
        if not self.root.is_dir():
            return 0
        for meta in self.root.glob("*/*.json"):
            try:
                expires = datetime.fromisoformat(json.loads(meta.read_text())["expiresAt"])
            except (OSError, ValueError, KeyError):
                continue
            if expires <= now:
                meta.with_suffix(".tar").unlink(missing_ok=True)
                meta.unlink(missing_ok=True)
                removed += 1
        for partial in self.root.glob("*/.*.partial"):  # left by a process that died
            with contextlib.suppress(OSError):
                if now.timestamp() - partial.stat().st_mtime > SOURCE_LIFETIME.total_seconds():
                    partial.unlink()
        return removed


def _is_tar(path: Path) -> bool:
    """Whether ``path`` reads as a tar archive (plain or compressed), every header of it."""
    try:
        with tarfile.open(path, "r|*") as archive:
            for _ in archive:
                pass
    except (tarfile.TarError, OSError, EOFError):
        return False
    return True


class GitFetch(Protocol):
    """Fetches one commit of a Git repository as a build context (``adapters.sources.git``)."""

    async def __call__(
        self,
        owner_id: UUID,
        source: GitSource,
        context: str,
        target: Path,
        secrets: Callable[[str], None],
    ) -> str:
        """Write the tree of ``context`` (a subdirectory of the source; ``.``: its root) in
        ``source.ref`` (default: the default branch) of ``source.url`` as the tar archive
        ``target``, whose directory is the fetch's to use and the caller's to remove; the
        commit id. ``RuntimeFailure`` (``source-unavailable``) saying why."""
        ...


class LocalBuildSources:
    """``BuildSources`` on this machine: uploads from ``store``, Git through ``git``
    (``None``: Git builds fail saying so); temporary files under ``scratch``."""

    def __init__(
        self,
        store: DiskSourceStore,
        git: GitFetch | None = None,
        *,
        scratch: Path | None = None,
        clock: Callable[[], datetime],
    ) -> None:
        self._store = store
        self._git = git
        self._scratch = scratch
        self._clock = clock

    @contextlib.asynccontextmanager
    async def prepare(
        self, owner_id: UUID, build: BuildSpec, secrets: Callable[[str], None]
    ) -> AsyncIterator[BuildContext]:
        if self._scratch is not None:
            await asyncio.to_thread(self._scratch.mkdir, mode=0o700, parents=True, exist_ok=True)
        work = Path(
            await asyncio.to_thread(tempfile.mkdtemp, prefix="berth-build-", dir=self._scratch)
        )
        try:
            if build.source_id is not None:
                yield await self._upload(owner_id, build, build.source_id, work)
            elif build.git is not None:
                yield await self._fetch(owner_id, build, build.git, work, secrets)
            else:
                raise RuntimeFailure("The build names no source.", kind="source-unavailable")
        finally:
            await asyncio.to_thread(shutil.rmtree, work, True)

    async def _upload(
        self, owner_id: UUID, build: BuildSpec, source_id: UUID, work: Path
    ) -> BuildContext:
        now = self._clock()
        source = await asyncio.to_thread(self._store.current, owner_id, source_id, now)
        if source is None:
            raise NotFound(
                f"The uploaded source {source_id} is not there: sources are kept 24 hours "
                "after their upload or last use. Upload it again."
            )
        await asyncio.to_thread(self._store.touch, source, now)
        path = self._store.path(owner_id, source_id)
        if build.context == ".":
            return BuildContext(path=str(path))
        packed = work / "context.tar"
        await asyncio.to_thread(_repack, path, build.context, packed)
        return BuildContext(path=str(packed))

    async def _fetch(
        self,
        owner_id: UUID,
        build: BuildSpec,
        git: GitSource,
        work: Path,
        secrets: Callable[[str], None],
    ) -> BuildContext:
        if self._git is None:
            raise RuntimeFailure(
                "This berth cannot fetch Git repositories.", kind="source-unavailable"
            )
        packed = work / "context.tar"
        commit = await self._git(owner_id, git, build.context, packed, secrets)
        return BuildContext(path=str(packed), commit=commit)


def _repack(source: Path, context: str, target: Path) -> None:
    """The members of ``source`` under ``context/``, moved to the root, into ``target``
    (read and written as streams: members are copied, never extracted)."""
    prefix = context.rstrip("/") + "/"
    found = False
    with tarfile.open(source, "r|*") as archive, tarfile.open(target, "w") as out:
        for member in archive:
            name = member.name.removeprefix("./")
            if not name.startswith(prefix) or name == prefix:
                continue
            member.name = name[len(prefix) :]
            if member.islnk():
                link = member.linkname.removeprefix("./")
                if not link.startswith(prefix):
                    continue  # a hard link out of the context: left out
                member.linkname = link[len(prefix) :]
            found = True
            out.addfile(member, archive.extractfile(member) if member.isreg() else None)
    if not found:
        raise RuntimeFailure(
            f"The context directory {context!r} is not in the uploaded source.",
            kind="source-unavailable",
        )
