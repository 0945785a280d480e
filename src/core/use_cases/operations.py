"""Operating berth itself: counts for metrics, and the store backed up and restored.

These are an operator's flows, not a user's: nothing here takes an owner, and the
backup and restore act on a data dir's files (``berth backup``/``restore``), so they
run before any API exists (a restore needs a data dir with no store yet).
"""

from __future__ import annotations

from pathlib import Path

from .. import commands as c
from ..access import Actor
from ..errors import Conflict, InvalidInput
from ..errors import FieldError as _Field
from ..models import StoreArchiveInfo, StoreCounts
from ..ports import SecretBox, StoreArchive, StoreStats

__all__ = ["BackUpStore", "CountStore", "RestoreStore"]


class CountStore:
    """What the store holds now (``/metrics``): the same answer on every replica."""

    def __init__(self, stats: StoreStats) -> None:
        self._stats = stats

    async def __call__(self, actor: Actor | None, cmd: c.ReadStoreCounts) -> StoreCounts:
        return await self._stats.counts()


class BackUpStore:
    """Copy the store to a new file, consistent while berth runs and writes."""

    def __init__(self, archive: StoreArchive) -> None:
        self._archive = archive

    async def __call__(self, destination: Path) -> StoreArchiveInfo:
        await self._archive.back_up(destination)
        return await self._archive.inspect(destination)


class RestoreStore:
    """Make a backup the store of a data dir that has none (or, forced, replace it).

    Refused, with nothing written: a file that is not a berth database, one of a
    schema this berth does not know (a newer berth wrote it), one whose sealed values
    the given key does not open (env values and SSH keys would be lost), and a data
    dir that already holds a store unless ``force``. Without a ``box`` (no key given),
    only a backup with nothing sealed in it can be restored.
    """

    def __init__(self, archive: StoreArchive, box: SecretBox | None) -> None:
        self._archive = archive
        self._box = box

    async def __call__(self, source: Path, *, force: bool = False) -> StoreArchiveInfo:
        info = await self._archive.inspect(source)
        known = list(self._archive.schema_versions())
        if info.schema_version is None:
            raise InvalidInput([_Field("file", "This file is not a berth database.", str(source))])
        if info.schema_version not in known:
            raise InvalidInput(
                [
                    _Field(
                        "file",
                        f"This backup has schema version {info.schema_version}, which this "
                        f"berth does not know (it knows {', '.join(known)}): restore it with "
                        "the berth that wrote it, or a newer one.",
                        str(source),
                    )
                ]
            )
        if info.sealed_sample is not None and self._box is None:
            raise InvalidInput(
                [
                    _Field(
                        "secret_key",
                        "This backup holds sealed secrets (env values, SSH keys, registry "
                        "passwords, webhooks): give the "
                        "key they were sealed with (BERTH_SECRET_KEY, or --secret-key-file "
                        "with the old data dir's secret.key).",
                    )
                ]
            )
        if info.sealed_sample is not None and self._box is not None:
            try:
                self._box.open(info.sealed_sample)
            except ValueError:
                raise InvalidInput(
                    [
                        _Field(
                            "secret_key",
                            "This key did not seal this backup's secrets: give the key of "
                            "the data dir it was taken from (its secret.key, or the "
                            "BERTH_SECRET_KEY it ran with).",
                        )
                    ]
                ) from None
        if not force and await self._archive.holds_store():
            raise Conflict(
                "This data dir already holds a store; restore into a new data dir, or "
                "stop berth and pass --force to replace it."
            )
        await self._archive.restore(source)
        return info
