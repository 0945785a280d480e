"""The OpenAPI document may only gain: everything the 1.0.0 document said is still said.

``tests/fixtures/openapi-1.0.0.json`` is the document as it was before the HTTP layer
was rebuilt on Litestar's own machinery (issue 22); the served document must keep every
path, operation, parameter, response, header, link, schema, property, enum value,
description and example of it. New ones may appear; none may go or change.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from berth.entrypoints.http import create_app
from berth.entrypoints.settings import Settings
from litestar.testing import TestClient
from wiring import build_app

BASELINE = Path(__file__).resolve().parents[1] / "fixtures" / "openapi-1.0.0.json"

#: Lists whose items are a set: the new list must hold every old item.
_SETS = {"enum", "tags", "x-enum-varnames"}
#: Lists that must stay exactly as they were (a field newly required breaks clients).
_EXACT = {"required", "security"}


def lost(old: Any, new: Any, at: str = "") -> Iterator[str]:
    """Every place (a JSON pointer) where ``new`` lacks or changed what ``old`` says."""
    if isinstance(old, dict):
        if not isinstance(new, dict):
            yield f"{at} (was an object)"
            return
        for key, value in old.items():
            if key not in new:
                yield f"{at}/{key} (gone)"
            else:
                yield from lost(value, new[key], f"{at}/{key}")
    elif isinstance(old, list):
        name = at.rsplit("/", 1)[-1]
        if not isinstance(new, list):
            yield f"{at} (was a list)"
        elif name == "parameters":
            by_key = {(p.get("in"), p.get("name")): p for p in new}
            for item in old:
                found = by_key.get((item.get("in"), item.get("name")))
                where = f"{at}[{item.get('in')}:{item.get('name')}]"
                if found is None:
                    yield f"{where} (gone)"
                else:
                    yield from lost(item, found, where)
        elif name in _SETS:
            for item in old:
                if item not in new:
                    yield f"{at}: {item!r} (gone)"
        elif name in _EXACT:
            if sorted(map(json.dumps, old)) != sorted(map(json.dumps, new)):
                yield f"{at}: {old!r} became {new!r}"
        elif len(old) != len(new):
            yield f"{at}: {len(old)} items became {len(new)}"
        else:
            for i, (item, found) in enumerate(zip(old, new, strict=True)):
                yield from lost(item, found, f"{at}[{i}]")
    elif old != new or type(old) is not type(new):
        yield f"{at}: {old!r} became {new!r}"


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    with TestClient(create_app(build_app().bus, Settings())) as client:
        response = client.get("/api/agent/openapi.json")
    assert response.status_code == 200
    found: dict[str, Any] = response.json()
    return found


def test_the_document_keeps_everything_it_said(document: dict[str, Any]) -> None:
    """Nothing of the 1.0.0 document is gone or changed in the served one."""
    baseline = json.loads(BASELINE.read_text(encoding="utf-8"))
    assert list(lost(baseline, document)) == []


def test_the_comparison_sees_a_loss() -> None:
    """The comparison itself reports a removed property, a changed description, a lost
    enum value and a lost parameter, and accepts additions."""
    old = {
        "a": {"description": "x", "enum": [1, 2]},
        "parameters": [{"in": "query", "name": "wait", "example": 5}],
    }
    gained = {
        "a": {"description": "x", "enum": [2, 1, 3], "new": True},
        "parameters": [{"in": "header", "name": "k"}, {"in": "query", "name": "wait", "example": 5}],
    }
    assert list(lost(old, gained)) == []
    assert list(lost(old, {"a": {"description": "y", "enum": [1]}, "parameters": []})) == [
        "/a/description: 'x' became 'y'",
        "/a/enum: 2 (gone)",
        "/parameters[query:wait] (gone)",
    ]
