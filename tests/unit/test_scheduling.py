"""How the integration suite's units are handed out to xdist's workers
(``tests/integration/scheduling.py``): the longest left first."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import scheduling
from scheduling import LongestFirst, unit_of

MANY = [f"tests/integration/test_many.py::test_{n}" for n in range(20)]  # 60 s estimated
SLOW = ["tests/integration/test_slow.py::test_it"]  # measured: 300 s
MID = [f"tests/integration/test_mid.py::TestIt::test_{n}" for n in range(3)]  # 9 s estimated


class Node:
    """A worker as the scheduler sees one: what it was sent, whether it was told to stop."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent += indices

    def shutdown(self) -> None:
        self.shutting_down = True


def handed_out(collection: list[str], workers: int) -> list[list[str]]:
    """What each of ``workers`` workers is sent when the run starts."""
    config: Any = SimpleNamespace(
        getvalue=lambda name: [f"{workers}*popen"],
        option=SimpleNamespace(loadscopereorder=True),
    )
    scheduler = LongestFirst(config)
    nodes = [Node(f"gw{n}") for n in range(workers)]
    for node in nodes:
        scheduler.add_node(node)  # type: ignore[arg-type]
        scheduler.add_node_collection(node, collection)  # type: ignore[arg-type]
    scheduler.schedule()
    return [[collection[i] for i in node.sent] for node in nodes]


def test_the_longest_unit_goes_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """A unit measured long goes to the first worker before units with more tests; the
    next worker gets the longest left, and a worker about to run out gets the next."""
    monkeypatch.setattr(scheduling, "SECONDS", {"test_slow.py": 300.0})
    first, second = handed_out(MANY + MID + SLOW, workers=2)
    assert first == SLOW + MID  # one test left: it gets more
    assert second == MANY


def test_a_module_in_by_class_is_split_by_its_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A module named in BY_CLASS is one unit per class (its functions one more); any
    other module is one unit."""
    monkeypatch.setattr(scheduling, "BY_CLASS", frozenset({"test_mid.py"}))
    assert unit_of(MID[0]) == "tests/integration/test_mid.py::TestIt"
    assert unit_of("tests/integration/test_mid.py::test_alone") == "tests/integration/test_mid.py"
    assert unit_of(MANY[0]) == "tests/integration/test_many.py"
    assert unit_of("tests/integration/test_many.py::TestX::test_y[ssh]") == (
        "tests/integration/test_many.py"
    )
