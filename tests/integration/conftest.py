"""Fixtures that start the real thing: ``berth serve`` on temp data dirs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import BerthProcess


@pytest.fixture(scope="session")
def berth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BerthProcess]:
    """One shared ``berth serve`` for tests that only add their own users and data."""
    process = BerthProcess(tmp_path_factory.mktemp("berth-shared")).start()
    yield process
    process.stop()


@pytest.fixture
def fresh_berth(tmp_path: Path) -> Iterator[BerthProcess]:
    """A ``berth serve`` of this test's own (restart, rate limits, process signals)."""
    process = BerthProcess(tmp_path / "data")
    yield process
    process.stop()
