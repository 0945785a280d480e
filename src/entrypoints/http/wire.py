"""camelCase on the wire, snake_case in the core: the translation, in one place.

A request body is checked by the core's parsers (every broken rule at once),
which know only the core's field names. ``to_core`` renames a decoded body's
keys from the wire Struct's names (``serverId``) to the core's (``server_id``),
descending into nested Structs (an env object's keys are the user's and are
never renamed), and reports keys the wire Struct does not have as unknown
fields — ``server_id`` on the wire is as unknown as ``sever`` — and ``null`` where the
wire Struct's field does not take it (``"restart": null``). A whole-number float in
an integer field (``8080.0``) becomes its integer, as the schema's ``integer`` admits
it. ``to_wire`` turns a core field path (``ssh_port``, ``env.KEY``, ``facts.docker_version``,
``volumes[2]``) into the API's location (``body.sshPort`` …).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import TypeVar

import msgspec
from berth.core.errors import FieldError, InvalidInput

__all__ = ["parse_body", "to_core", "to_wire"]

T = TypeVar("T")

_SEGMENT = re.compile(r"^([^.\[]+)(.*)$", re.S)
_NOT_NULL = "Must not be null: leave the field out for its default."


@cache
def _fields(struct: type[msgspec.Struct]) -> dict[str, tuple[str, str, type | None]]:
    """wire name → (wire name, core name, nested Struct type or None), and core name →
    the same, for one wire Struct."""
    info = msgspec.inspect.type_info(struct)
    assert isinstance(info, msgspec.inspect.StructType)
    found: dict[str, tuple[str, str, type | None]] = {}
    for field in info.fields:
        nested = _struct_of(field.type)
        found[field.encode_name] = (field.encode_name, field.name, nested)
    return found


@cache
def _field_kinds(struct: type[msgspec.Struct]) -> tuple[frozenset[str], frozenset[str]]:
    """The wire names of ``struct``'s fields whose numbers are integers only (``integer``
    in the schema, no ``number`` beside it), and of the optional ones that never take
    ``null`` (a required one's null is the core's to refuse, as any wrong type)."""
    info = msgspec.inspect.type_info(struct)
    assert isinstance(info, msgspec.inspect.StructType)
    integral, never_null = set(), set()
    for field in info.fields:
        members = _members(field.type)
        if any(isinstance(m, msgspec.inspect.IntType) for m in members) and not any(
            isinstance(m, msgspec.inspect.FloatType) for m in members
        ):
            integral.add(field.encode_name)
        if not field.required and not any(isinstance(m, msgspec.inspect.NoneType) for m in members):
            never_null.add(field.encode_name)
    return frozenset(integral), frozenset(never_null)


def _members(kind: msgspec.inspect.Type) -> list[msgspec.inspect.Type]:
    """The types a field's value may have, through its prose and its unions."""
    if isinstance(kind, msgspec.inspect.Metadata):
        return _members(kind.type)
    if isinstance(kind, msgspec.inspect.UnionType):
        return [m for member in kind.types for m in _members(member)]
    return [kind]


def _whole(value: object) -> object:
    """A whole-number float (``8080.0``, which JSON Schema's ``integer`` admits and JSON
    encoders of floats write) as the integer it is; anything else as it is."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _struct_of(kind: msgspec.inspect.Type) -> type | None:
    if isinstance(kind, msgspec.inspect.Metadata):  # a field with its own prose
        return _struct_of(kind.type)
    if isinstance(kind, msgspec.inspect.StructType):
        return kind.cls
    if isinstance(kind, msgspec.inspect.UnionType):
        for member in kind.types:
            found = _struct_of(member)
            if found is not None:
                return found
    return None


def to_core(raw: object, struct: type[msgspec.Struct], loc: str) -> tuple[object, list[FieldError]]:
    """``raw`` with the core's keys, and an "Unknown field." error per key the wire lacks.

    A non-object is returned as it is: the core's parser says what is wrong with it.
    """
    if not isinstance(raw, Mapping):
        return raw, []
    fields, (integral, never_null) = _fields(struct), _field_kinds(struct)
    out: dict[str, object] = {}
    errors: list[FieldError] = []
    for key, value in raw.items():
        known = fields.get(key)
        if known is None:
            # Not echoed: nothing says a misspelt field (``Env``) holds no secret.
            errors.append(FieldError(f"{loc}.{key}", "Unknown field.", None))
            continue
        _, name, nested = known
        if value is None and key in never_null:
            # The schema does not admit null here: say so, rather than read it as absent.
            errors.append(FieldError(f"{loc}.{key}", _NOT_NULL, None))
            continue
        if key in integral:
            value = _whole(value)
        if nested is not None and value is not None:
            value, more = to_core(value, nested, f"{loc}.{key}")
            errors.extend(more)
        out[name] = value
    return out, errors


def to_wire(path: str, struct: type[msgspec.Struct], loc: str) -> str:
    """The API's location of the core's field ``path`` in a ``struct`` body at ``loc``."""
    if not path:
        return loc
    match = _SEGMENT.match(path)
    if match is None:
        return f"{loc}.{path}"
    name, rest = match[1], match[2]
    by_core = {core: (wire, nested) for wire, core, nested in _fields(struct).values()}
    wire, nested = by_core.get(name, (name, None))
    if nested is not None and rest.startswith("."):
        return to_wire(rest[1:], nested, f"{loc}.{wire}")
    return f"{loc}.{wire}{rest}"


def parse_body(
    raw: object,
    struct: type[msgspec.Struct],
    parse: Callable[[object], T],
    *,
    loc: str = "body",
    extra: Sequence[FieldError] = (),
) -> T:
    """The core's ``parse`` of a wire body, every error at its API location.

    ``extra`` are errors found elsewhere in the request (a header, the query), listed
    after the body's; nothing is parsed into a command unless all is well.
    """
    core_raw, errors = to_core(raw, struct, loc)
    try:
        parsed = parse(core_raw)
    except InvalidInput as exc:
        said = {e.location for e in errors}
        for e in exc.errors:
            where = to_wire(e.location, struct, loc)
            if where not in said:  # a null refused above: the core saw no value there
                errors.append(FieldError(where, e.message, e.value))
    if errors or extra:
        raise InvalidInput([*errors, *extra])
    return parsed
