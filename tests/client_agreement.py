"""Does ``berth.client`` agree with an OpenAPI document? The check both test suites run:
on the app factory's document (unit) and on a real ``berth serve``'s (integration).

``disagreements(document)`` lists, in words, each way the client differs:

* an operation of the document (method + path) without a client method, or a client
  method the document does not have — a ``HEAD`` operation is its ``GET``'s (the same
  answer without a body, RFC 9110), so it needs none of its own;
* a request or answer body whose Struct differs from the document's schema: property
  names (camelCase), required-ness, types (nullable, arrays, maps, enums, formats,
  nested objects, followed through ``$ref``), and a request's defaults;
* a query or header parameter the client sends that the document lacks, or a required
  one it does not send; a stream whose media type or event names differ.

Two differences are allowed, by design: an answer's string may be typed ``str`` where
the document lists an enum (``Problem.type``: its kinds grow), and the document's
constraints (patterns, ranges) are berth's to check, not the client's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import msgspec
from berth.client import Api, Operation, StreamOperation
from berth.client.models import Problem

__all__ = ["client_operations", "disagreements", "schema_difference"]

Schema = Mapping[str, Any]
_METHODS = ("get", "post", "put", "patch", "delete")
_JSON = "application/json"


def client_operations() -> dict[tuple[str, str], Operation[Any, Any] | StreamOperation[Any, Any]]:
    """Every client method, by (METHOD, path)."""
    found: dict[tuple[str, str], Any] = {}
    for value in vars(Api).values():
        if isinstance(value, Operation | StreamOperation):
            found[(value.method, value.path)] = value
    return found


def _client_ops(method: str, path: str) -> list[Any]:
    return [
        v
        for v in vars(Api).values()
        if isinstance(v, Operation | StreamOperation) and (v.method, v.path) == (method, path)
    ]


def disagreements(document: Schema) -> list[str]:
    """Each way the client and ``document`` disagree (empty: they agree)."""
    found: list[str] = []
    ours = client_operations()
    theirs: set[tuple[str, str]] = set()
    for path, item in document["paths"].items():
        for method, op in item.items():
            if method == "head":
                if "get" not in item:
                    found.append(f"HEAD {path}: no GET beside it to answer it")
                continue
            if method not in _METHODS:
                continue
            key = (method.upper(), path)
            theirs.add(key)
            if key not in ours:
                found.append(f"{key[0]} {path} ({op.get('operationId')}): no client method")
                continue
            for client_op in _client_ops(*key):
                found += _operation_differences(document, op, client_op)
    for key in sorted(set(ours) - theirs):
        found.append(f"{key[0]} {key[1]}: a client method the document does not have")
    return found


def _operation_differences(document: Schema, op: Schema, client_op: Any) -> list[str]:
    where = f"{client_op.method} {client_op.path} ({client_op.__name__})"
    found = _parameter_differences(op, client_op, where)
    body = op.get("requestBody", {}).get("content", {}).get(_JSON, {}).get("schema")
    if (body is None) != (client_op.body is None):
        found.append(f"{where}: request body {body!r}, client sends {client_op.body!r}")
    elif body is not None:
        found += schema_difference(document, body, client_op.body, f"{where} body", request=True)
    successes = {k: v for k, v in op["responses"].items() if k.startswith("2")}
    if isinstance(client_op, StreamOperation):
        media = {ct for r in successes.values() for ct in r.get("content", {})}
        if client_op.accept not in media:
            found.append(f"{where}: streams {client_op.accept}, the document has {media}")
        if client_op.accept == "text/event-stream":
            schema = successes["200"]["content"]["text/event-stream"]["schema"]
            # one event's schema, or (read whole) the text or one event: the event's arm
            (event,) = [s for s in schema.get("anyOf", [schema]) if "properties" in s]
            events = set(event["properties"]["event"]["enum"])
            if events != {"step", "end"}:
                found.append(f"{where}: the document's events are {events}")
        return found
    for status, response in successes.items():
        content = response.get("content", {})
        if not content:
            if client_op.result is not type(None):
                found.append(f"{where}: {status} has no body, client reads {client_op.result}")
            continue
        if client_op.accept not in content:
            found.append(f"{where}: {status} is {set(content)}, client asks {client_op.accept}")
            continue
        schema = content[client_op.accept]["schema"]
        if client_op.accept == _JSON:
            label = f"{where} {status} answer"
            found += schema_difference(document, schema, client_op.result, label, request=False)
        elif schema.get("type") != _json_type(client_op.result):
            found.append(f"{where}: {status} is {schema}, client reads {client_op.result}")
    for status, response in op["responses"].items():
        problem = response.get("content", {}).get("application/problem+json", {}).get("schema")
        if problem is not None:
            found += schema_difference(document, problem, Problem, f"{where} {status}", False)
    return found


def _json_type(result: Any) -> str:
    return "string" if result is str else "object"


def _parameter_differences(op: Schema, client_op: Any, where: str) -> list[str]:
    found = []
    params = op.get("parameters", [])
    for place, sent in (("query", client_op.query), ("header", client_op.headers)):
        documented = {p["name"].lower(): p for p in params if p["in"] == place}
        for name in sent:
            if name.lower() not in documented:
                found.append(f"{where}: sends {place} {name!r}, not in the document")
        named = {n.lower() for n in sent}
        for name, p in documented.items():
            if p.get("required") and name not in named:
                found.append(f"{where}: never sends the required {place} {p['name']!r}")
    return found


# --- schemas ----------------------------------------------------------------------------


def schema_difference(
    document: Schema, schema: Schema, struct: Any, where: str, request: bool
) -> list[str]:
    """How the client type ``struct`` differs from ``schema`` (a schema of ``document``)."""
    (ours,), components = msgspec.json.schema_components(
        [struct], ref_template="#/components/schemas/{name}"
    )
    doc = _Side(document["components"]["schemas"])
    client = _Side(components)
    return list(_differences(doc.shape(schema), client.shape(ours), where, request))


class _Side:
    """One side's schemas reduced to what the client must agree on."""

    def __init__(self, components: Schema) -> None:
        self._components = components

    def shape(self, schema: Schema) -> Any:
        """``("any",)``, ``("scalar", type, format)``, ``("enum", values)``,
        ``("array", item)``, ``("map", value)``, ``("union", [alternatives])`` or
        ``("object", {name: (required, has_default, default, shape)})``."""
        if "$ref" in schema:
            return self.shape(self._components[schema["$ref"].rsplit("/", 1)[-1]])
        if "allOf" in schema and len(schema["allOf"]) == 1 and "type" not in schema:
            return self.shape(schema["allOf"][0])  # a described reference
        # Beside properties, oneOf (or a typed schema's allOf) is a rule over its fields or
        # its value (one of image and build; a second pattern), not another shape.
        alternatives = (
            None if "properties" in schema else schema.get("anyOf") or schema.get("oneOf")
        )
        if isinstance(schema.get("type"), list):
            alternatives = [{**schema, "type": t} for t in schema["type"]]
        if alternatives:
            return ("union", [self.shape(a) for a in alternatives])
        if "enum" in schema:
            return ("enum", frozenset(schema["enum"]))
        kind = schema.get("type")
        if kind == "array":
            return ("array", self.shape(schema.get("items", {})))
        if kind == "object" and "properties" in schema:
            required = set(schema.get("required", []))
            return (
                "object",
                {
                    name: (name in required, "default" in p, p.get("default"), self.shape(p))
                    for name, p in schema["properties"].items()
                },
            )
        if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
            return ("map", self.shape(schema["additionalProperties"]))
        if kind is None:
            return ("any",)
        return ("scalar", kind, schema.get("format"))


def _differences(doc: Any, ours: Any, where: str, request: bool) -> Iterator[str]:
    if doc == ours:
        return
    if not request and ours == ("scalar", "string", None) and doc[0] == "enum":
        return  # an answer's open set of strings (Problem.type)
    if doc[0] != ours[0]:
        yield f"{where}: the document has {_words(doc)}, the client {_words(ours)}"
    elif doc[0] == "union":
        if len(doc[1]) != len(ours[1]):
            yield f"{where}: the document has {_words(doc)}, the client {_words(ours)}"
            return
        for alternative in doc[1]:
            if all(list(_differences(alternative, o, where, request)) for o in ours[1]):
                yield f"{where}: the client has no {_words(alternative)}"
    elif doc[0] in ("array", "map"):
        yield from _differences(doc[1], ours[1], f"{where}[]", request)
    elif doc[0] == "object":
        theirs, mine = doc[1], ours[1]
        for name in sorted(set(theirs) ^ set(mine)):
            side = "the client" if name in theirs else "the document"
            yield f"{where}.{name}: missing in {side}"
        for name in sorted(set(theirs) & set(mine)):
            (t_required, t_has, t_default, t_shape) = theirs[name]
            (o_required, o_has, o_default, o_shape) = mine[name]
            if t_required != o_required:
                yield f"{where}.{name}: required {t_required} in the document, {o_required} here"
            if request and t_has and (not o_has or t_default != o_default):
                yield f"{where}.{name}: default {t_default!r} in the document, {o_default!r} here"
            yield from _differences(t_shape, o_shape, f"{where}.{name}", request)
    else:
        yield f"{where}: the document has {_words(doc)}, the client {_words(ours)}"


def _words(shape: Any) -> str:
    if shape[0] == "object":
        return "an object"
    if shape[0] == "union":
        return " | ".join(_words(s) for s in shape[1])
    if shape[0] == "enum":
        return f"one of {sorted(map(str, shape[1]))}"
    if shape[0] in ("array", "map"):
        return f"{shape[0]} of {_words(shape[1])}"
    if shape[0] == "scalar":
        return shape[1] + (f" ({shape[2]})" if shape[2] else "")
    return "anything"
