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
* the request inputs the API reads itself (``deps.py``): each route declares them
  (``documented(..., body=..., query=..., headers=...)``: an ``Inputs`` in its ``opt``) —
  its body Struct (described by msgspec, constraints and all,
  ``additionalProperties: false``), its query parameters and headers;
* a description on every field of every schema (``field_docs.py``) and every parameter;
* an example on every request body, response and parameter (``examples.py``): a problem
  response's per kind (``examples``), its status's kinds named in its description;
* ``Problem.type`` as an ``enum`` of every kind's URI, each kind explained (``KIND_DOCS``);
* ``links`` from the answers that create or name a thing to the operations that read it,
  so a client (and schemathesis's stateful phase) can follow them.

Operation ids are short camelCase names given per route (``operation("deploy")``). A
route declared with ``documented`` takes its summary, description and response
description from its handler's docstring, so each is written once, beside the code.

The integration tests check every response the server sends against the result,
headers included, so nothing here may promise more than the server does.
"""

from __future__ import annotations

import copy
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
from litestar import HttpMethod, Litestar
from litestar.handlers import HTTPRouteHandler
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import Reference, SecurityScheme
from litestar.routes import HTTPRoute

from .errors import KIND_DOCS, PROBLEM_TYPE, problem_response
from .examples import BODIES, CONFLICTS, PROBLEMS, TEXT
from .field_docs import FIELDS, SCHEMA_FIELDS

__all__ = [
    "API_SCHEME",
    "ENROLLMENT_SCHEME",
    "HEADERS",
    "SERVER_SCHEME",
    "Inputs",
    "Parameter",
    "complete",
    "declared_inputs",
    "documented",
    "operation",
    "security_schemes",
]

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
            # The schema of each event (as OpenAPI 3.2's `itemSchema` reads a stream; the
            # stream itself is text/event-stream).
            "schema": {
                "type": "object",
                "description": "One Server-Sent Event: `step` events (`id`, JSON `data` "
                '`{"at","step","message"}`), then one `end` event (`data` `{"state"}`); a '
                "first message sets `retry`, comments keep the connection alive.",
                "properties": {
                    "event": {
                        "type": "string",
                        "enum": ["step", "end"],
                        "description": "`step`: a step of the deployment; `end`: its final "
                        "state, the last event.",
                    },
                    "id": {
                        "type": "string",
                        "pattern": "^[0-9]+$",
                        "description": "A `step` event's number: send the last one seen as "
                        "`Last-Event-ID` to resume after it.",
                    },
                    "data": {
                        "type": "string",
                        "contentMediaType": "application/json",
                        "description": 'JSON: `{"at","step","message"}` for `step`, '
                        '`{"state"}` for `end`.',
                    },
                    "retry": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "How long to wait before reconnecting, in ms.",
                    },
                },
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


#: The security schemes: each controller's ``security`` names the one its routes take.
API_SCHEME = "BearerToken"
ENROLLMENT_SCHEME = "EnrollmentToken"
SERVER_SCHEME = "ServerSignature"


def security_schemes() -> dict[str, SecurityScheme | Reference]:
    """``components.securitySchemes``: every one a bearer token, each of its own kind."""
    return {
        API_SCHEME: _bearer(
            "berth_<49 base62 characters>", "Your API token from Settings → API Token."
        ),
        ENROLLMENT_SCHEME: _bearer(
            "berth_enroll_<49 base62 characters>",
            "The one-time enrollment token of a server (returned by POST /api/agent/servers, "
            "valid for one hour). Only the install script's two enrollment routes accept it.",
        ),
        SERVER_SCHEME: _bearer(
            "berth_sig.<server id>.<unix time>.<base64 SSHSIG>",
            "A request signed by the server itself with one of its SSH host keys that berth "
            "pinned at enrollment: `ssh-keygen -Y sign -n berth-server@berth` over "
            "`berth-server-request\\n<METHOD>\\n<path>\\n<server id>\\n<unix time>\\n`, "
            "within five minutes of berth's clock. Only the install script's "
            "`/api/agent/servers/self` routes accept it.",
        ),
    }


def _bearer(bearer_format: str, description: str) -> SecurityScheme:
    return SecurityScheme(
        type="http", scheme="bearer", bearer_format=bearer_format, description=description
    )


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


def handler_docs(handler: Callable[..., Any]) -> tuple[dict[str, str], dict[int, str]]:
    """A handler's OpenAPI prose from its docstring, Google style: the first paragraph is
    the summary, the next ones the description, a ``Returns:`` section the response
    description, and a ``Raises:`` section its own error responses (``409: why``), beside
    the ones its route shares. Line breaks and indents fold into single spaces (the
    document's strings are one line)."""
    head, *sections = _SECTION.split(inspect.cleandoc(handler.__doc__ or ""))
    named = dict(zip(sections[::2], sections[1::2], strict=True))
    summary, _, description = head.partition("\n\n")
    prose = {
        "summary": summary,
        "description": description,
        "response_description": named.get("Returns", ""),
    }
    raised: dict[int, str] = {}
    status = 0  # the entry a continuation line belongs to
    for line in named.get("Raises", "").splitlines():
        if entry := _RAISED.match(line):
            status = int(entry[1])
            raised[status] = entry[2]
        elif line.strip() and status:
            raised[status] += " " + line
        elif line.strip():
            raise ValueError(f"{handler.__qualname__}: Raises: wants `<status>: why`: {line!r}")
    return (
        {key: _fold(value) for key, value in prose.items() if value.strip()},
        {status: _fold(why) for status, why in raised.items()},
    )


_SECTION = re.compile(r"^(Returns|Raises):$", re.MULTILINE)
_RAISED = re.compile(r"^\s+(\d{3}): (.*)$")


def _fold(text: str) -> str:
    return " ".join(text.split())


def documented(
    method: Callable[..., HTTPRouteHandler],
    path: str,
    name: str,
    *,
    body: type[msgspec.Struct] | None = None,
    query: tuple[Parameter, ...] = (),
    headers: tuple[Parameter, ...] = (),
    responses: Mapping[int, ResponseSpec] | None = None,
    **kwargs: Any,
) -> Callable[[Callable[..., Any]], HTTPRouteHandler]:
    """A route (``method`` is Litestar's ``get``, ``post``, ``delete`` or ``route``) with
    its operation id ``name``, the inputs it reads itself (``Inputs``), ``responses`` and
    the handler docstring's prose and errors (``handler_docs``); ``kwargs`` go to
    ``method`` and win over the docstring."""
    inputs = Inputs(body=body, query=query, headers=headers)
    opt = inputs.opt() if body or query or headers else {}

    def declare(handler: Callable[..., Any]) -> HTTPRouteHandler:
        prose, raised = handler_docs(handler)
        own = {status: problem_response(why) for status, why in raised.items()}
        answers = {**(responses or {}), **own} or None
        docs = {**prose, **kwargs}
        return method(path, operation_id=operation(name), opt=opt, responses=answers, **docs)(
            handler
        )

    return declare


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
                    doc = _PATH_IDS.get(parameter["name"])
                    parameter["description"] = doc[0] if doc else "An id (UUID)."
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


_PATH_IDS = {
    "serverId": (
        "One of your servers (UUID); another user's is a 404, like a missing one.",
        "5b0c3a4e-8f1d-4c2a-9e57-0d6b1f2a3c4d",
    ),
    "installationId": (
        "One of your installations (UUID); another user's is a 404, like a missing one.",
        "9a7e6b5c-4d3e-4f2a-8b1c-0e9d8c7b6a5f",
    ),
    "deploymentId": (
        "One of your deployments (UUID); another user's is a 404, like a missing one.",
        "1f2e3d4c-5b6a-4789-8a0b-c1d2e3f4a5b6",
    ),
}

#: ``links`` of a response, by (method, path, status): name → (operationId, parameters).
#: None to the streams (events, logs with ``follow``): they stay open while a deployment
#: runs, which is no step for a client following links to take blindly.
_LINKS: dict[tuple[str, str, str], dict[str, tuple[str, dict[str, str]]]] = {
    ("post", "/api/agent/servers", "201"): {
        "GetServer": ("getServer", {"serverId": "$response.body#/id"}),
        "ListContainers": ("listContainers", {"serverId": "$response.body#/id"}),
        "ListInstallations": ("listInstallations", {"serverId": "$response.body#/id"}),
        "DeleteServer": ("deleteServer", {"serverId": "$response.body#/id"}),
    },
    ("get", "/api/agent/servers/{serverId}", "200"): {
        "ListContainers": ("listContainers", {"serverId": "$response.body#/id"}),
        "ListInstallations": ("listInstallations", {"serverId": "$response.body#/id"}),
    },
}
for _status in ("200", "202"):
    for _path in ("/api/agent/docker/deploy", "/api/agent/installations/{installationId}/rollback"):
        _LINKS[("post", _path, _status)] = {
            "GetDeployment": ("getDeployment", {"deploymentId": "$response.body#/deployment/id"}),
            "CancelDeployment": (
                "cancelDeployment",
                {"deploymentId": "$response.body#/deployment/id"},
            ),
            "GetInstallation": (
                "getInstallation",
                {"installationId": "$response.body#/installation/id"},
            ),
            "ListInstallationDeployments": (
                "listInstallationDeployments",
                {"installationId": "$response.body#/installation/id"},
            ),
            "Rollback": ("rollback", {"installationId": "$response.body#/installation/id"}),
        }
_LINKS[("get", "/api/agent/deployments/{deploymentId}", "200")] = {
    "GetInstallation": ("getInstallation", {"installationId": "$response.body#/installationId"}),
    "GetServer": ("getServer", {"serverId": "$response.body#/serverId"}),
}
_LINKS[("get", "/api/agent/installations/{installationId}", "200")] = {
    "ListInstallationDeployments": (
        "listInstallationDeployments",
        {"installationId": "$response.body#/id"},
    ),
    "GetServer": ("getServer", {"serverId": "$response.body#/serverId"}),
}

_OPENAPI_EXAMPLE = {"openapi": "3.1.0", "info": {"title": "berth", "version": "1.0.0"}, "paths": {}}


def _describe_fields(schemas: dict[str, Any]) -> None:
    """Every property of every schema gets its description (``field_docs.py``)."""
    for name, schema in schemas.items():
        specific = SCHEMA_FIELDS.get(name, {})
        for field_name, prop in schema.get("properties", {}).items():
            doc = specific.get(field_name)
            if doc is None and prop.get("description"):
                continue
            doc = doc or FIELDS.get(field_name)
            if doc is not None:
                prop["description"] = doc


def _problem_types(schemas: dict[str, Any], kinds: Mapping[str, str]) -> None:
    """``Problem.type``: an ``enum`` of every kind's URI, and what each means."""
    listed = "; ".join(f"`{kind}`: {doc}" for kind, doc in sorted(kinds.items()))
    schemas["Problem"].setdefault("properties", {})["type"] = {
        "type": "string",
        "enum": [PROBLEM_TYPE.format(kind=kind) for kind in sorted(kinds)],
        # Names for generated clients' enum members (``ProblemType.PORT_IN_USE``).
        "x-enum-varnames": [kind.upper().replace("-", "_") for kind in sorted(kinds)],
        "description": "What went wrong, one URI per kind for a client to branch on: "
        f"`urn:berth:problem:<kind>`. The kinds: {listed}",
    }


def _example_of(media_type: str, media: dict[str, Any]) -> Any:
    ref = (media.get("schema") or {}).get("$ref", "")
    name = ref.rsplit("/", 1)[-1] if ref else ""
    if name in BODIES:
        return BODIES[name]
    if media_type in TEXT:
        return TEXT[media_type]
    if media_type in ("application/vnd.oai.openapi+json", "application/json") and not name:
        return _OPENAPI_EXAMPLE
    return None


def _add_examples(operation: dict[str, Any]) -> None:
    body = operation.get("requestBody")
    for media_type, media in ((body or {}).get("content") or {}).items():
        example = _example_of(media_type, media)
        if example is not None:
            media.setdefault("example", example)
    for status, response in operation.get("responses", {}).items():
        for media_type, media in (response.get("content") or {}).items():
            if media_type == PROBLEM_JSON:
                kinds = PROBLEMS.get(status, {})
                if status == "409":
                    every = {**kinds, **PROBLEMS["409+"]}
                    wanted = CONFLICTS.get(operation.get("operationId", ""), tuple(every))
                    kinds = {kind: every[kind] for kind in wanted}
                if len(kinds) == 1:
                    media.setdefault("example", next(iter(kinds.values())))
                elif kinds:
                    media.setdefault(
                        "examples",
                        {kind: {"summary": kind, "value": value} for kind, value in kinds.items()},
                    )
                continue
            example = _example_of(media_type, media)
            if example is not None:
                media.setdefault("example", example)
    for parameter in operation.get("parameters", []):
        if "example" in parameter or "examples" in parameter:
            continue
        schema = parameter.get("schema", {})
        if parameter.get("name") in _PATH_IDS:
            parameter["example"] = _PATH_IDS[parameter["name"]][1]
        elif "enum" in schema:
            parameter["example"] = schema["enum"][-1]
        elif schema.get("format") == "uuid":
            parameter["example"] = _PATH_IDS["deploymentId"][1]
        elif schema.get("type") == "integer":
            parameter["example"] = schema.get("default", schema.get("minimum", 1) + 29)
        elif schema.get("type") == "string":
            parameter["example"] = "b7d3f0e2-retry-1"


def _add_links(operation: dict[str, Any], method: str, path: str) -> None:
    for status, response in operation.get("responses", {}).items():
        links = _LINKS.get((method, path, status))
        if links:
            response["links"] = {
                name: {"operationId": operation_id, "parameters": dict(parameters)}
                for name, (operation_id, parameters) in links.items()
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
    _describe_fields(components["schemas"])
    _problem_types(components["schemas"], KIND_DOCS)
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
            _add_examples(operation)
            _add_links(operation, method, path)
    return document
