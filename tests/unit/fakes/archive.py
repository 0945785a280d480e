"""A ``StoreArchive`` over files held in memory: backups are copies of ``store``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from berth.core.errors import Conflict, NotFound
from berth.core.models import StoreArchiveInfo


class FakeArchive:
    """The data dir's store is ``store`` (``None``: none); ``files`` are backups."""

    def __init__(
        self, versions: Sequence[str] = ("0001", "0002"), store: StoreArchiveInfo | None = None
    ) -> None:
        self.versions = list(versions)
        self.store = store
        self.files: dict[Path, StoreArchiveInfo] = {}

    def schema_versions(self) -> Sequence[str]:
        return self.versions

    async def back_up(self, destination: Path) -> None:
        if destination in self.files:
            raise Conflict(f"{destination} exists; give a new file name.")
        if self.store is None:
            raise NotFound("There is no store.")
        self.files[destination] = self.store

    async def inspect(self, source: Path) -> StoreArchiveInfo:
        if source not in self.files:
            raise NotFound(f"There is no file {source}.")
        return self.files[source]

    async def holds_store(self) -> bool:
        return self.store is not None

    async def restore(self, source: Path) -> None:
        self.store = self.files[source]
