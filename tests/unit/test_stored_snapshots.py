"""Container snapshots as the SQL store keeps them (``msgspec.to_builtins`` in a JSON
column, ``rows._snapshot_to_core`` to read them back): a field added to ``Container``
reads from what an older berth wrote, so no migration rewrites the snapshots."""

from __future__ import annotations

from types import SimpleNamespace
from uuid import uuid4

import builders
import msgspec
from berth.adapters.sql.rows import _snapshot_to_core
from berth.core.models import ContainerSnapshot

IMAGE_ID = "sha256:" + "3f4e5d6c7b8a" * 5 + "9f0e"


def _row(containers: object) -> SimpleNamespace:
    return SimpleNamespace(server_id=uuid4(), observed_at=builders.T0, containers=containers)


def test_a_snapshot_reads_back_as_it_was_written() -> None:
    """A snapshot's containers, image ids included, read back equal."""
    containers = (builders.a_container(image_id=IMAGE_ID), builders.a_container(id="c2"))
    row = _row(msgspec.to_builtins(containers))
    assert _snapshot_to_core(row) == ContainerSnapshot(
        server_id=row.server_id, observed_at=row.observed_at, containers=containers
    )


def test_a_snapshot_written_before_image_ids_reads_without_one() -> None:
    """A container stored before ``image_id`` existed (no such key) reads with ``None``."""
    stored = msgspec.to_builtins(builders.a_container())
    del stored["image_id"]
    (container,) = _snapshot_to_core(_row([stored])).containers
    assert container == builders.a_container()
    assert container.image_id is None
