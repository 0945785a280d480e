"""``BuildSources``: every build's context is ready at once, from a commit the test names."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from uuid import UUID

from berth.core.models import BuildContext, BuildSpec

__all__ = ["FakeBuildSources"]


class FakeBuildSources:
    """Hands out a context (no file: the fake runtime never reads it) holding ``commit``
    for a Git build; records each build it made ready."""

    def __init__(self, commit: str = "c0ffee" * 6 + "c0ff") -> None:
        self.commit = commit
        self.prepared: list[BuildSpec] = []

    @contextlib.asynccontextmanager
    async def prepare(
        self, owner_id: UUID, build: BuildSpec, secrets: Callable[[str], None]
    ) -> AsyncIterator[BuildContext]:
        self.prepared.append(build)
        commit = self.commit if build.git is not None else None
        yield BuildContext(path="/nonexistent/context.tar", commit=commit)
