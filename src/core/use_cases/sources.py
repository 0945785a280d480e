"""Uploaded build contexts: kept for a deploy's ``build.sourceId`` (SPEC.md, "Building
from source"). The bytes go to the ``SourceStore`` as they arrive; the upload is an
entry of the team's audit log."""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from .. import commands as c
from ..access import Actor
from ..models import Source
from ..ports import SourceStore
from .owned import UsesStoreAndClock, audit

__all__ = ["UploadSource"]

log = structlog.get_logger()


@dataclass(eq=False)
class UploadSource(UsesStoreAndClock):
    """Keep the caller's uploaded context (``SourceStore.save``: its size cap is a
    ``TooLarge``, a body that is no tar archive an ``InvalidInput``)."""

    _sources: SourceStore

    async def __call__(self, owner: Actor, cmd: c.UploadSource) -> Source:
        source = await self._sources.save(owner.team_id, cmd.chunks, self._clock.now())
        async with self._uow() as uow:
            detail = f"{source.size} bytes, sha256 {source.sha256}"
            audit(uow, owner, "source.upload", "source", source.id, None, detail=detail)
            await uow.commit()
        return source
