"""What Litestar's generated OpenAPI document leaves out, added in one place.

Litestar documents paths, parameters, bodies and responses from the handlers and
msgspec types; it has no way to declare the headers of an error response, nor a
response every operation shares. ``complete`` adds, to the document as generated:

* ``X-Request-Id`` on every response (the middleware sends it on every one);
* ``WWW-Authenticate: Bearer`` on every 401, ``Retry-After`` on every 429;
* a 500 problem response on every operation (a bug: the body carries the request id);
* a 503 problem response on every operation that reads the store (the database is
  unreachable or cannot take writes: ``store-unavailable``, with ``Retry-After``);
* ``Location`` (and ``Idempotent-Replayed`` on a replay) on the responses that send it;
* no body on HEAD operations (the GET's headers, without its content);
* ``format: uuid`` on every path id (``{serverId}``, ``{installationId}``,
  ``{deploymentId}``: berth reads them as text and answers 404 for a non-UUID);
* the request inputs the API reads itself (``deps.py``): each route declares them with
  ``opt=Inputs(...).opt()`` — its body Struct (described by msgspec, constraints and all,
  ``additionalProperties: false``), its query parameters and headers.

Operation ids are short camelCase names given per route (``operation("deploy")``).

The integration tests check every response the server sends against the result,
headers included, so nothing here may promise more than the server does.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
from litestar import HttpMethod, Litestar
from litestar.routes import HTTPRoute

__all__ = ["HEADERS", "Inputs", "Parameter", "complete", "declared_inputs", "operation"]

PROBLEM_JSON = "application/problem+json"
_PROBLEM_REF = "#/components/schemas/Problem"
_UUID = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"

#: ``components.headers``: every header the document names.
HEADERS: dict[str, dict[str, Any]] = {
    "RequestId": {
        "description": "This request's id: the client's `X-Request-Id` when it is 8-64 "
        "characters of `[A-Za-z0-9._-]`, else a new one. Problem bodies carry it too.",
        "required": True,
        "schema": {"type": "string", "pattern": "^[A-Za-z0-9._-]{8,64}$"},
    },
    "WwwAuthenticate": {
        "description": "The scheme to authenticate with.",
        "required": True,
        "schema": {"type": "string", "const": "Bearer"},
    },
    "RetryAfter": {
        "description": "Whole seconds to wait before retrying.",
        "required": True,
        "schema": {"type": "integer", "minimum": 1},
    },
    "StoreRetryAfter": {
        "description": "Whole seconds to wait before retrying; sent when the store (berth's "
        "database) is unavailable (problem type urn:berth:problem:store-unavailable).",
        "required": False,
        "schema": {"type": "integer", "minimum": 1},
    },
    "DeploymentLocation": {
        "description": "The deployment's URL (GET it to follow its state).",
        "required": True,
        "schema": {"type": "string", "pattern": f"^/api/agent/deployments/{_UUID}$"},
    },
    "ServerLocation": {
        "description": "The new server's URL.",
        "required": True,
        "schema": {"type": "string", "pattern": f"^/api/agent/servers/{_UUID}$"},
    },
    "WebhookLocation": {
        "description": "The new webhook's deliveries (GET it to read the delivery log).",
        "required": True,
        "schema": {"type": "string", "pattern": f"^/api/agent/webhooks/{_UUID}/deliveries$"},
    },
    "IdempotentReplayed": {
        "description": "Sent (as `true`) when the answer replays an earlier request with "
        "the same Idempotency-Key: nothing new was deployed.",
        "required": False,
        "schema": {"type": "string", "const": "true"},
    },
}

# Headers of an operation's 2xx responses, by (method, path).
_SUCCESS_HEADERS: dict[tuple[str, str], dict[str, str]] = {
    ("post", "/api/agent/docker/deploy"): {
        "Location": "DeploymentLocation",
        "Idempotent-Replayed": "IdempotentReplayed",
    },
    ("post", "/api/agent/installations/{installationId}/rollback"): {
        "Location": "DeploymentLocation",
        "Idempotent-Replayed": "IdempotentReplayed",
    },
    ("post", "/api/agent/deployments/{deploymentId}/cancel"): {
        "Location": "DeploymentLocation",
    },
    ("post", "/api/agent/servers"): {"Location": "ServerLocation"},
    ("post", "/api/agent/webhooks"): {"Location": "WebhookLocation"},
}

# The 200 content of the routes that stream (their handlers return a JSON body or a
# stream, which Litestar cannot describe), by (method, path).
_STREAMED_CONTENT: dict[tuple[str, str], dict[str, Any]] = {
    ("get", "/api/agent/installations/{installationId}/logs"): {
        "application/json": {"schema": {"$ref": "#/components/schemas/LogsOut"}},
        "text/plain": {
            "schema": {
                "type": "string",
                "description": "With `follow=1`: the output, a line each, as it is written.",
            }
        },
    },
    ("get", "/api/agent/deployments/{deploymentId}/events"): {
        "text/event-stream": {
            "schema": {
                "type": "string",
                "description": "Server-Sent Events: `step` messages (`id`, JSON `data` "
                '`{"at","step","message"}`), then one `end` message (`data` `{"state"}`).',
            }
        },
    },
}

# Headers of a response, by status.
_STATUS_HEADERS: dict[str, dict[str, str]] = {
    "401": {"WWW-Authenticate": "WwwAuthenticate"},
    "429": {"Retry-After": "RetryAfter"},
    "503": {"Retry-After": "StoreRetryAfter"},
}

_INTERNAL_ERROR = {
    "description": "A bug. The body carries the request id to quote, never a stack trace "
    "or a secret.",
    "content": {PROBLEM_JSON: {"schema": {"$ref": _PROBLEM_REF}}},
}

_STORE_UNAVAILABLE = {
    "description": "The store (berth's database) is unreachable or cannot take writes "
    "right now (problem type urn:berth:problem:store-unavailable); retry after Retry-After.",
    "content": {PROBLEM_JSON: {"schema": {"$ref": _PROBLEM_REF}}},
}

# The operations that never read the store, so never answer store-unavailable.
_STORELESS = frozenset({"/healthz", "/api/deploy", "/api/agent/openapi.json"})

_METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")


@dataclass(frozen=True, slots=True)
class Parameter:
    """A query parameter or header the API reads itself, as the document describes it."""

    name: str
    where: str  # "query" | "header"
    description: str
    schema: Mapping[str, Any]
    required: bool = False

    def document(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "in": self.where,
            "description": self.description,
            "required": self.required,
            "schema": dict(self.schema),
        }


@dataclass(frozen=True, slots=True)
class Inputs:
    """What a route reads besides its path: a JSON body, query parameters, headers."""

    body: type[msgspec.Struct] | None = None
    query: tuple[Parameter, ...] = ()
    headers: tuple[Parameter, ...] = field(default=())

    def opt(self) -> dict[str, Any]:
        """The route's ``opt``, where ``declared_inputs`` finds this."""
        return {"inputs": self}


def operation(name: str) -> Callable[[Any, Any, Any], str]:
    """A route's operationId: ``name`` for its GET (or only method), ``nameHead`` for HEAD."""

    def operation_id(handler: Any, method: Any, path_components: Any) -> str:
        return f"{name}Head" if method == HttpMethod.HEAD else name

    return operation_id


def declared_inputs(app: Litestar) -> dict[tuple[str, str], Inputs]:
    """Every route's declared ``Inputs``, by (method, OpenAPI path)."""
    found: dict[tuple[str, str], Inputs] = {}
    for route in app.routes:
        if not isinstance(route, HTTPRoute):
            continue
        path = route.path_format or "/"
        for handler in route.route_handlers:
            inputs = handler.opt.get("inputs")
            if isinstance(inputs, Inputs):
                for method in handler.http_methods:
                    found[(method.lower(), path)] = inputs
    return found


def _add_inputs(document: dict[str, Any], inputs: Mapping[tuple[str, str], Inputs]) -> None:
    bodies = sorted({i.body for i in inputs.values() if i.body is not None}, key=str)
    if bodies:
        _, components = msgspec.json.schema_components(
            bodies, ref_template="#/components/schemas/{name}"
        )
        document["components"].setdefault("schemas", {}).update(components)
    for item in document.get("paths", {}).values():
        for operation in (item.get(m) for m in _METHODS):
            for parameter in (operation or {}).get("parameters", []):
                if parameter.get("in") == "path" and parameter.get("name", "").endswith("Id"):
                    parameter["schema"] = {"type": "string", "format": "uuid"}
    for (method, path), declared in inputs.items():
        operation = document.get("paths", {}).get(path, {}).get(method)
        if operation is None:
            continue
        parameters = operation.setdefault("parameters", [])
        parameters.extend(p.document() for p in (*declared.query, *declared.headers))
        if declared.body is not None:
            operation["requestBody"] = {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {"$ref": f"#/components/schemas/{declared.body.__name__}"}
                    }
                },
            }


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/headers/{name}"}


def complete(
    document: dict[str, Any], inputs: Mapping[tuple[str, str], Inputs] | None = None
) -> dict[str, Any]:
    """A copy of Litestar's ``document`` with the inputs, headers and responses above."""
    document = copy.deepcopy(document)
    components = document.setdefault("components", {})
    if "Problem" not in components.get("schemas", {}):
        raise ValueError("the document has no Problem schema to refer to")
    _add_inputs(document, inputs or {})
    components.setdefault("headers", {}).update(copy.deepcopy(HEADERS))
    for path, item in document.get("paths", {}).items():
        for method in _METHODS:
            operation = item.get(method)
            if operation is None:
                continue
            responses = operation.setdefault("responses", {})
            responses.setdefault("500", copy.deepcopy(_INTERNAL_ERROR))
            if path not in _STORELESS:
                responses.setdefault("503", copy.deepcopy(_STORE_UNAVAILABLE))
            for status, response in responses.items():
                headers = response.get("headers") or {}
                headers["X-Request-Id"] = _ref("RequestId")
                for name, component in _STATUS_HEADERS.get(status, {}).items():
                    headers[name] = _ref(component)
                if status.startswith("2"):
                    for name, component in _SUCCESS_HEADERS.get((method, path), {}).items():
                        headers[name] = _ref(component)
                if status == "200" and (method, path) in _STREAMED_CONTENT:
                    response["content"] = copy.deepcopy(_STREAMED_CONTENT[(method, path)])
                response["headers"] = headers
                if method == "head":
                    response.pop("content", None)
    return document
