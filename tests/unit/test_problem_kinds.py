"""Problem ``type``s an agent can branch on: one per kind, all documented."""

from __future__ import annotations

import re

import msgspec
from berth.core import errors
from berth.entrypoints.http.errors import KINDS, PROBLEM_TYPE, _camel
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


def test_the_document_lists_every_kind() -> None:
    """``Problem.type``'s description names each kind; its pattern admits each type."""
    _, components = msgspec.json.schema_components([Problem])
    schema = components["Problem"]["properties"]["type"]
    for kind in KINDS:
        assert kind in schema["description"], kind
        assert re.fullmatch(schema["pattern"].strip("^$"), PROBLEM_TYPE.format(kind=kind))
    assert schema["pattern"] == "^urn:berth:problem:[a-z-]+$"


def test_a_conflicts_field_is_named_as_on_the_wire() -> None:
    """A conflict's core field path is the body's camelCase location."""
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
