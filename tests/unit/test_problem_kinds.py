"""Problem ``type``s an agent can branch on: one per kind, all documented."""

from __future__ import annotations

import re

import msgspec
from berth.core import errors
from berth.entrypoints.http.errors import KIND_DOCS, KINDS, PROBLEM_TYPE, _camel, _location
from berth.entrypoints.http.openapi import complete
from berth.entrypoints.http.schemas import Problem


def _core_error_kinds() -> set[str]:
    found = set()
    stack = [errors.CoreError]
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if cls is not errors.CoreError:
            found.add(cls.kind)
    return found


def test_every_core_error_has_a_documented_kind() -> None:
    """Each core error class names a kind that the API documents."""
    assert _core_error_kinds() <= set(KINDS)


def test_every_kind_is_explained() -> None:
    """``KIND_DOCS`` says what each kind means, and names no kind that is not one."""
    assert set(KIND_DOCS) == set(KINDS)
    assert all(len(doc) > 20 for doc in KIND_DOCS.values())


def test_the_document_lists_every_kind() -> None:
    """The completed document's ``Problem.type`` is an enum of every kind's URI, each kind
    named in its description; the Struct's pattern admits each type."""
    _, components = msgspec.json.schema_components([Problem])
    pattern = components["Problem"]["properties"]["type"]["pattern"]
    assert pattern == "^urn:berth:problem:[a-z-]+$"
    document = complete({"openapi": "3.1.0", "paths": {}, "components": {"schemas": components}})
    schema = document["components"]["schemas"]["Problem"]["properties"]["type"]
    assert schema["enum"] == [PROBLEM_TYPE.format(kind=kind) for kind in sorted(KINDS)]
    for kind in KINDS:
        assert f"`{kind}`: {KIND_DOCS[kind]}" in schema["description"], kind
        assert re.fullmatch(pattern.strip("^$"), PROBLEM_TYPE.format(kind=kind))


def test_a_conflicts_field_is_named_as_on_the_wire() -> None:
    """A conflict's core field path is the body's camelCase location; the Idempotency-Key
    is a header."""
    assert _location("idempotency_key") == "header.Idempotency-Key"
    assert _location("server_id") == "body.serverId"
    assert _camel("port") == "port"
    assert _camel("ssh_port") == "sshPort"
    assert _camel("env.MY_KEY") == "env.MY_KEY"


def test_a_specific_kind_overrides_the_class_kind() -> None:
    """``Conflict(kind=…, field=…)`` keeps both; the class default stays for others."""
    taken = errors.Conflict("Host port 80 is taken.", kind="port-in-use", field="port")
    assert (taken.kind, taken.field) == ("port-in-use", "port")
    plain = errors.Conflict("Something clashes.")
    assert (plain.kind, plain.field) == ("conflict", None)


def test_every_kind_the_core_names_is_documented() -> None:
    """Each ``kind="…"`` a core error is raised with is one of the documented kinds."""
    from pathlib import Path

    import berth.core

    root = Path(berth.core.__file__).parent
    named = {
        match
        for path in root.rglob("*.py")
        for match in re.findall(r'kind="([a-z-]+)"', path.read_text(encoding="utf-8"))
    }
    assert {"server-pending", "revision-unavailable", "deployment-finished"} <= named
    assert named <= set(KINDS), named - set(KINDS)
