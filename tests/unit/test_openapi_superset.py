"""The OpenAPI document may only gain: everything the 1.0.0 document said is still said.

``tests/fixtures/openapi-1.0.0.json`` is the document as it was before the HTTP layer
was rebuilt on Litestar's own machinery (issue 22), as main served it when the rebuild
was merged (1.0.0 and issue 21's additions); the served document must keep every
path, operation, parameter, response, header, link, schema, property, enum value,
description and example of it. New ones may appear; none may go or change, but for what
docs/decisions/2026-11-26-openapi-from-the-handlers.md records: ``CORRECTED`` (Litestar
had copied one field's words onto a shared enum) and the JSON bodies' examples, now made
of their fields' own examples (each still there, still valid: test_openapi.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from berth.entrypoints.http import create_app, schemas
from berth.entrypoints.settings import Settings
from litestar.testing import TestClient
from wiring import build_app

BASELINE = Path(__file__).resolve().parents[1] / "fixtures" / "openapi-1.0.0.json"

#: Lists whose items are a set: the new list must hold every old item.
_SETS = {"enum", "tags", "x-enum-varnames"}
#: Lists that must stay exactly as they were (a field newly required breaks clients).
_EXACT = {"required", "security"}
#: Bounds that may grow (all that was valid stays valid): a list of event names gains
#: as the webhook events do.
_GROWS = {"maxItems"}
#: What 1.0.0 said wrongly, corrected (the decision record says why).
CORRECTED = {
    "/components/schemas/TlsState/description",  # TlsOut.state's words: now TlsState's own
    "/components/schemas/TlsState/examples",  # TlsOut.state's example, still there
    "/components/schemas/DeliveryState/description",  # WebhookDeliveryOut.state's, still there
    # hostPort (issue 24): `port` is published on `hostPort`, by default the same port;
    # port-in-use names `body.hostPort` when one was given (2026-11-27-host-port-and-stops.md).
    "/components/schemas/DeployRequest/properties/port/description",
    "/components/schemas/DeploymentOut/properties/port/description",
    "/components/schemas/InstallationOut/properties/port/description",
    "/paths//api/agent/docker/deploy/post/responses/409/description",
    # A deploy gives exactly one of image and build (SPEC.md, "Building from source"):
    # image is no longer required (docs/decisions/2026-11-27-builds-on-the-server.md).
    "/components/schemas/DeployRequest/required",
    # The status follows the container (issue 24): the words name the new statuses too.
    "/components/schemas/InstallationOut/properties/status/description",
    # Readiness now also commits a small write (a full disk: reads answer, writes fail).
    *(
        f"/paths//readyz/{m}/{p}"
        for m in ("get", "head")
        for p in ("description", "responses/503/description")
    ),
}
#: ``?wait=0`` is taken (no wait, as MCP's ``wait=0``): its minimum, its words and its
#: generated example (the middle of the range) changed with it.
CORRECTED |= {
    f"/paths//api/agent/{path}/post/parameters[query:wait]/{what}"
    for path in (
        "docker/deploy",
        "installations/{installationId}/rollback",
        "deployments/{deploymentId}/cancel",
    )
    for what in ("description", "example", "schema/minimum")
}
#: The event stream's words gained a sentence (its 204 after the end), the rest as it was.
CORRECTED.add("/paths//api/agent/deployments/{deploymentId}/events/get/description")
#: Descriptions that list the problem kinds (``KIND_DOCS``): a new kind may join the list.
_KIND_LISTS = {"/components/schemas/Problem/properties/type/description"}
_KIND_ITEM = re.compile(r"(?:^|; )(`[a-z-]+`: .*?)(?=; `[a-z-]+`: |$)")
#: Kinds whose words 1.0.0 said were made wrong by a later change, and corrected (still
#: listed): ``not-found`` said "another user's ids"; with teams it is another team's;
#: ``port-in-use`` said its error is at ``body.port``; with ``hostPort`` it may be there.
_CORRECTED_KINDS = {"not-found", "port-in-use"}
#: A JSON body's example: present wherever it was, made of its fields' examples.
_BODY_EXAMPLE = re.compile(r"/content/application/json/example(/|$)")


def lost(old: Any, new: Any, at: str = "") -> Iterator[str]:
    """Every place (a JSON pointer) where ``new`` lacks or changed what ``old`` says.

    ``{"allOf": [{"$ref": X}]}`` and ``{"$ref": X}`` say the same; so do an empty list
    and none; numbers compare by value (``300`` is ``300.0``).
    """
    if at in CORRECTED or (_BODY_EXAMPLE.search(at) and not at.endswith("/example")):
        return
    if isinstance(old, dict):
        if not isinstance(new, dict):
            yield f"{at} (was an object)"
            return
        for key, value in old.items():
            if key == "allOf" and value == [{"$ref": new.get("$ref")}]:
                continue
            if key not in new:
                if value not in ([], {}) and f"{at}/{key}" not in CORRECTED:
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
    elif _BODY_EXAMPLE.search(at):
        return  # an example body's value (see above)
    elif at.rsplit("/", 1)[-1] in _GROWS and isinstance(new, int) and new >= old:
        return
    elif at in _KIND_LISTS and isinstance(old, str) and isinstance(new, str):
        intro, _, kinds = old.partition("The kinds: ")
        said = set(_KIND_ITEM.findall(new.partition("The kinds: ")[2]))
        if not new.startswith(intro):
            yield f"{at}: its introduction {intro!r} changed"
        names = {kind.partition(":")[0] for kind in said}
        for kind in _KIND_ITEM.findall(kinds):
            name = kind.partition(":")[0]
            if kind not in said and not (name in names and name.strip("`") in _CORRECTED_KINDS):
                yield f"{at}: {kind!r} (gone)"
    elif old != new or isinstance(old, bool) is not isinstance(new, bool):
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
        "parameters": [
            {"in": "header", "name": "k"},
            {"in": "query", "name": "wait", "example": 5},
        ],
    }
    assert list(lost(old, gained)) == []
    assert list(lost(old, {"a": {"description": "y", "enum": [1]}, "parameters": []})) == [
        "/a/description: 'x' became 'y'",
        "/a/enum: 2 (gone)",
        "/parameters[query:wait] (gone)",
    ]


def test_a_list_of_kinds_may_gain_a_kind_but_not_lose_or_change_one() -> None:
    """Problem.type's description lists the kinds: a new kind in the middle is a gain; a
    kind gone, or its words changed, is a loss."""
    at = next(iter(_KIND_LISTS))
    old = "Intro. The kinds: `b`: 400: bee.; `d`: 409: dee; see detail."
    gained = "Intro. The kinds: `a`: 409: ay.; `b`: 400: bee.; `d`: 409: dee; see detail."
    assert list(lost(old, gained, at)) == []
    assert list(lost(old, "Intro. The kinds: `b`: 400: bee.", at)) == [
        f"{at}: '`d`: 409: dee; see detail.' (gone)"
    ]
    assert list(lost(old, old.replace("bee", "be"), at)) == [f"{at}: '`b`: 400: bee.' (gone)"]


def test_the_comparison_reads_the_same_meaning_as_the_same() -> None:
    """A ``$ref`` beside its siblings is the ``allOf`` of it; an empty list is none; 300
    is 300.0; a JSON body's example may hold other values, but not go."""
    media = "/content/application/json/example"
    old = {
        "p": {"allOf": [{"$ref": "#/S"}], "description": "d"},
        "parameters": [],
        "schema": {"maximum": 300},
        "content": {"application/json": {"example": {"state": "queued"}}},
    }
    new = {
        "p": {"$ref": "#/S", "description": "d"},
        "schema": {"maximum": 300.0},
        "content": {"application/json": {"example": {"state": "succeeded"}}},
    }
    assert list(lost(old, new)) == []
    assert list(lost(old, {**new, "p": {"$ref": "#/T"}, "content": {"application/json": {}}})) == [
        "/p/allOf (gone)",
        "/p/description (gone)",
        f"{media} (gone)",
    ]
    assert list(lost({"required": True}, {"required": 1})) == ["/required: True became 1"]


def _wire_structs() -> list[type[msgspec.Struct]]:
    return [
        kind
        for kind in vars(schemas).values()
        if isinstance(kind, type)
        and issubclass(kind, msgspec.Struct)
        and kind.__module__ == schemas.__name__
    ]


def test_every_field_says_what_it_means_on_its_struct() -> None:
    """Each field of each wire Struct carries its own description (``msgspec.Meta``), so
    no prose lives apart from the field it describes (``Problem.type``'s is every kind's,
    from ``errors.KIND_DOCS``)."""
    found = _wire_structs()
    assert {schemas.DeployRequest, schemas.ServerOut, schemas.WebhookDeliveryOut} <= set(found)
    missing = [
        f"{struct.__name__}.{field.name}"
        for struct in found
        for field in msgspec.inspect.type_info(struct).fields  # type: ignore[attr-defined]
        if not _description(field.type) and (struct, field.name) != (schemas.Problem, "type")
    ]
    assert missing == []


def _description(kind: Any) -> str | None:
    """The description a field's type carries, looking through ``Annotated`` layers."""
    while isinstance(kind, msgspec.inspect.Metadata):
        if (kind.extra_json_schema or {}).get("description"):
            return str(kind.extra_json_schema["description"])
        kind = kind.type
    return None
