"""A tool call's arguments checked by berth's rules, before the SDK or a backend sees them.

The SDK would check them against the tool's signature with pydantic: unknown arguments
silently dropped (``idempotencyKey`` for ``idempotency_key``: a retry deploys twice),
``"8080"`` coerced to a port, and a type error worded by pydantic. So the tools'
parameters are ``Any`` to the SDK, and ``checked`` reads the arguments against the
tool's advertised input schema first: every unknown argument (naming the known ones),
every missing one, every value of the wrong JSON type (``null`` included: omit an
argument for its default) or outside its integer range, in the core's words
(``Expected an integer from 1 to 65535, got a string.``), all in one ``InvalidInput``.
A whole-number float where an integer is expected (``8080.0``, an integer to JSON
Schema) is taken as that integer. The values' own rules are the core's: ``deploy``'s
body is put through ``parse_deploy`` here too, so a call with a wrong type and a bad
image hears of both at once; the other tools' values are checked by their backend.

The same server code runs over stdio and over HTTP, so a call reads the same on both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from berth.core.commands import parse_deploy
from berth.core.errors import FieldError, InvalidInput
from berth.core.types import RuleError, check_idempotency_key, json_type

__all__ = ["checked"]

_KINDS = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "array": "an array",
    "object": "an object",
}


def _fits(kind: str, value: object) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "array":
        return isinstance(value, list)
    return kind != "object" or isinstance(value, dict)


def _whole(value: object) -> object:
    """``8080.0`` as ``8080``; anything else as it is."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _check(schema: Mapping[str, Any], value: object) -> tuple[object, str | None]:
    """The value (a whole float made an integer) and what is wrong with it, if anything."""
    types = [s.get("type") for s in schema.get("anyOf", [schema])]
    if "integer" in types:
        value = _whole(value)
    low, high = schema.get("minimum"), schema.get("maximum")
    expected = " or ".join(_KINDS.get(str(t), str(t)) for t in types)
    if types == ["integer"] and low is not None and high is not None:
        expected = f"an integer from {low} to {high}"
    if not any(_fits(str(t), value) for t in types):
        return value, f"Expected {expected}, got {json_type(value)}."
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if number and ((low is not None and value < low) or (high is not None and value > high)):
        return value, f"Expected {expected}."
    items = schema.get("items")
    if isinstance(value, list) and isinstance(items, Mapping):
        for item in value:
            if not _fits(str(items.get("type")), item):
                return value, f"Expected an array of strings, got {json_type(item)} in it."
    return value, None


def _deploy_body(arguments: Mapping[str, Any]) -> list[FieldError]:
    """The core's findings on a deploy's body (every argument but ``wait`` and the key)."""
    body = {k: v for k, v in arguments.items() if k not in ("wait", "idempotency_key")}
    try:
        parse_deploy(body)
    except InvalidInput as exc:
        return list(exc.errors)
    return []


def _key(value: object) -> str | None:
    try:
        check_idempotency_key(value)
    except RuleError as exc:
        return str(exc)
    return None


#: The core's rules a tool's arguments are put through here, after their types.
_BODIES: dict[str, Callable[[Mapping[str, Any]], list[FieldError]]] = {"deploy": _deploy_body}
#: Arguments whose value rules are the core's, checked here for every tool that has them.
_VALUES: dict[str, Callable[[object], str | None]] = {"idempotency_key": _key}


def checked(tool: str, schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``arguments`` as the tool gets them; ``InvalidInput`` naming every problem."""
    properties: Mapping[str, Any] = schema.get("properties", {})
    known = ", ".join(properties) or "none"
    errors: list[FieldError] = []
    values: dict[str, Any] = {}
    for name, value in arguments.items():
        if name not in properties:
            errors.append(FieldError(name, f"Unknown argument; {tool} takes: {known}.", None))
            continue
        values[name], problem = _check(properties[name], value)
        if problem is None and name in _VALUES:
            problem = _VALUES[name](value)
        if problem is not None:
            errors.append(FieldError(name, problem, None))
    for name in schema.get("required", ()):
        if name not in arguments:
            errors.append(FieldError(name, "Field required.", None))
    body = _BODIES.get(tool)
    if body is not None:
        seen = {e.location for e in errors}
        errors += [e for e in body(values) if e.location not in seen]
    if errors:
        raise InvalidInput(errors)
    return values
