"""The API's OpenAPI document: Litestar's, with what it cannot say added in one place.

Litestar documents every operation from its handler: the signature's parameters and body
(``parameters.py``, ``schemas.BODIES``), the return type, the Structs' field prose and
examples, and the docstring's prose (``documented``). ``complete`` adds what no handler
can declare:

* the request bodies' schemas as msgspec writes them (Litestar's own generator drops
  ``propertyNames`` and the constraints inside a nullable field);
* ``X-Request-Id`` on every response; ``WWW-Authenticate`` on every 401, ``Retry-After``
  on every 429 and 503; ``RateLimit-Policy``/``RateLimit`` on a token's answers, and
  ``ETag`` (and a 304) on its reads; ``Location`` (and ``Idempotent-Replayed``) on the answers that
  send it; a 500 problem on every operation, a 503 on every one that reads the store;
  no body on HEAD operations; the streams' content, and the upload's body (a tar or a
  gzipped one, read as a stream);
* ``Problem.type`` as an enum of every kind's URI, each kind explained (``KIND_DOCS``);
* an example on every body, response (a problem's per kind) and parameter: a body's is
  assembled from its schema's field examples;
* ``links`` from the answers that create or name a thing to the operations that read it.

Two tidy-ups keep the document as it was: a described reference is ``$ref`` beside its
description (OpenAPI 3.1), not ``allOf`` around it; a parameter's description is on the
parameter, not repeated in its schema. The integration tests check every response the
server sends against the result, so nothing here may promise more than the server does.
"""

from __future__ import annotations

import copy
import enum
import inspect
import re
from collections.abc import Callable, Iterator, Mapping
from http import HTTPStatus
from typing import Any

import msgspec
from berth.core import models
from litestar import HttpMethod
from litestar.handlers import HTTPRouteHandler
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import Reference, SecurityScheme

from .errors import KIND_DOCS, PROBLEM_JSON, PROBLEM_TYPE, problem_response
from .schemas import BODIES, EXAMPLE_IDS, Problem, ProblemField

__all__ = [
    "API_SCHEME",
    "ENROLLMENT_SCHEME",
    "HEADERS",
    "SERVER_SCHEME",
    "complete",
    "documented",
    "handler_docs",
    "operation",
    "security_schemes",
]

_PROBLEM_REF = "#/components/schemas/Problem"
_UUID = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
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


# --- operations: ids and prose from the handlers --------------------------------------


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
    responses: Mapping[int, ResponseSpec] | None = None,
    **kwargs: Any,
) -> Callable[[Callable[..., Any]], HTTPRouteHandler]:
    """A route (``method`` is Litestar's ``get``, ``post``, ``delete`` or ``route``) with
    its operation id ``name``, ``responses`` and the handler docstring's prose and errors
    (``handler_docs``); ``kwargs`` go to ``method`` and win over the docstring."""

    def declare(handler: Callable[..., Any]) -> HTTPRouteHandler:
        prose, raised = handler_docs(handler)
        own = {status: problem_response(why) for status, why in raised.items()}
        answers = {**(responses or {}), **own} or None
        docs = {**prose, **kwargs}
        return method(path, operation_id=operation(name), responses=answers, **docs)(handler)

    return declare


# --- headers and responses every operation shares -------------------------------------

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
    "RateLimitPolicy": {
        "description": 'The token\'s request limit (IETF draft): `"requests";q=<requests>;'
        "w=<seconds>`. Sent on every answer counted against it.",
        "required": False,
        "schema": {"type": "string", "pattern": '^"requests";q=[0-9]+;w=[0-9]+$'},
    },
    "RateLimit": {
        "description": 'What is left of it (IETF draft): `"requests";r=<remaining>;'
        "t=<seconds until the whole budget is back, or until a refused request may be "
        "retried>`.",
        "required": False,
        "schema": {"type": "string", "pattern": '^"requests";r=[0-9]+;t=[0-9]+$'},
    },
    "ETag": {
        "description": "The answer's tag: send it as `If-None-Match` to be answered 304 "
        "while it is unchanged.",
        "required": False,
        "schema": {"type": "string", "pattern": '^"[A-Za-z0-9_-]+"$'},
    },
    "IdempotentReplayed": {
        "description": "Sent (as `true`) when the answer replays an earlier request with "
        "the same Idempotency-Key: nothing new was deployed.",
        "required": False,
        "schema": {"type": "string", "const": "true"},
    },
}

_QUEUED = {"Location": "DeploymentLocation", "Idempotent-Replayed": "IdempotentReplayed"}
# Headers of an operation's 2xx responses, by (method, path).
_SUCCESS_HEADERS: dict[tuple[str, str], dict[str, str]] = {
    ("post", "/api/agent/docker/deploy"): _QUEUED,
    ("post", "/api/agent/installations/{installationId}/rollback"): _QUEUED,
    ("post", "/api/agent/deployments/{deploymentId}/cancel"): {"Location": "DeploymentLocation"},
    ("post", "/api/agent/servers"): {"Location": "ServerLocation"},
    ("post", "/api/agent/webhooks"): {"Location": "WebhookLocation"},
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
_NOT_MODIFIED = {
    "description": "Not Modified: the answer's `ETag` is the one sent as `If-None-Match`; no body.",
}
_STORE_UNAVAILABLE = {
    "description": "The store (berth's database) is unreachable or cannot take writes "
    "right now (problem type urn:berth:problem:store-unavailable); retry after Retry-After.",
    "content": {PROBLEM_JSON: {"schema": {"$ref": _PROBLEM_REF}}},
}
# The operations that never read the store, so never answer store-unavailable.
_STORELESS = frozenset({"/healthz", "/api/deploy", "/api/agent/openapi.json"})

#: One event of a deployment's stream (as OpenAPI 3.2's ``itemSchema`` reads a stream; the
#: stream itself is text/event-stream, and tools of 3.1 apply ``schema`` to each event).
_EVENT: dict[str, Any] = {
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
            "description": 'JSON: `{"at","step","message"}` for `step`, `{"state"}` for `end`.',
        },
        "retry": {
            "type": "integer",
            "minimum": 0,
            "description": "How long to wait before reconnecting, in ms.",
        },
    },
}

#: A log followed with ``?follow=1`` (``text/plain``).
_FOLLOWED: dict[str, Any] = {
    "schema": {
        "type": "string",
        "description": "With `follow=1`: the output, a line each, as it is written.",
    }
}

# The 200 content of the routes that stream (their handlers return a JSON body or a
# stream, which Litestar cannot describe), by (method, path).
_STREAMED_CONTENT: dict[tuple[str, str], dict[str, Any]] = {
    ("get", "/api/agent/installations/{installationId}/logs"): {
        "application/json": {"schema": {"$ref": "#/components/schemas/LogsOut"}},
        "text/plain": _FOLLOWED,
    },
    ("get", "/api/agent/installations/{installationId}/logs/follow"): {
        "text/plain": {
            "schema": {
                "type": "string",
                "description": "The output, a line each, as it is written.",
            }
        }
    },
    ("get", "/api/agent/deployments/{deploymentId}/events"): {
        "text/event-stream": {"schema": _EVENT}
    },
    # The same stream for a client that reads an answer whole (a generated one): the
    # whole text, each event in it as above (a stream's event is still one of its items).
    ("get", "/api/agent/deployments/{deploymentId}/events/text"): {
        "text/event-stream": {
            "schema": {
                "anyOf": [
                    {
                        "type": "string",
                        "description": "The whole stream read as one text: its events, "
                        "each `id`/`event`/`data` lines and a blank line, the last one `end`.",
                    },
                    _EVENT,
                ]
            }
        }
    },
}

#: The request bodies of the routes that read theirs as a stream (an upload, which no
#: ``data`` parameter describes), by (method, path).
_STREAMED_BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("post", "/api/agent/sources"): {
        "required": True,
        "description": "The directory to build, as a tar archive (`application/x-tar`) or a "
        "gzipped one (`application/gzip`), streamed: at most BERTH_SOURCE_MAX_BYTES "
        "(200 MiB; more is a 413). A body that is not a tar archive is a 422 at `body`.",
        "content": {
            media: {
                "schema": {
                    "type": "string",
                    "format": "binary",
                    "contentMediaType": media,
                    "description": f"The archive's bytes ({what}).",
                },
                "example": f"<the bytes of {what} of the directory to build>",
            }
            for media, what in (
                ("application/x-tar", "a tar archive"),
                ("application/gzip", "a gzipped tar archive"),
            )
        },
    },
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
    ("get", "/api/agent/deployments/{deploymentId}", "200"): {
        "GetInstallation": (
            "getInstallation",
            {"installationId": "$response.body#/installationId"},
        ),
        "GetServer": ("getServer", {"serverId": "$response.body#/serverId"}),
    },
    ("get", "/api/agent/installations/{installationId}", "200"): {
        "ListInstallationDeployments": (
            "listInstallationDeployments",
            {"installationId": "$response.body#/id"},
        ),
        "GetServer": ("getServer", {"serverId": "$response.body#/serverId"}),
    },
}
_DEPLOYMENT_OF = {"deploymentId": "$response.body#/deployment/id"}
_INSTALLATION_OF = {"installationId": "$response.body#/installation/id"}
for _status in ("200", "202"):
    for _path in ("/api/agent/docker/deploy", "/api/agent/installations/{installationId}/rollback"):
        _LINKS[("post", _path, _status)] = {
            "GetDeployment": ("getDeployment", _DEPLOYMENT_OF),
            "CancelDeployment": ("cancelDeployment", _DEPLOYMENT_OF),
            "GetInstallation": ("getInstallation", _INSTALLATION_OF),
            "ListInstallationDeployments": ("listInstallationDeployments", _INSTALLATION_OF),
            "Rollback": ("rollback", _INSTALLATION_OF),
        }


# --- examples ------------------------------------------------------------------------

_REQUEST_ID = "6d74cd0ef6c740f6b6b77fc3325d1d9f"
_DEPLOYMENT = EXAMPLE_IDS["deploymentId"]
_EARLIER = "0e1d2c3b-4a59-4687-9a0b-b1c2d3e4f5a6"
_PENDING = "Server 'web-1' has not enrolled yet: run its install command on the server (or "
_MISMATCH = "Server 'web-1' presented an SSH host key other than the pinned one; berth will "
_REUSED = "This Idempotency-Key was already used with a different request: send a new key "
_PORT = "Host port 3000 is already used by installation 'blog' on this server: choose "
_DOMAIN = "Domain shop.example.com is already used by installation 'old-shop' on this server: "
_FAILED = f"Deployment {_EARLIER} ended failed; only a succeeded deployment is a revision to "

#: An example of each kind the document shows: its status, detail and the inputs it
#: names (a location alone: the detail is the message; or (location, message, value)).
_PROBLEMS: dict[str, tuple[int, str, tuple[Any, ...]]] = {
    "bad-json": (400, "The body is not valid JSON: expected ',' or '}' at line 1 column 18.", ()),
    "unauthorized": (401, "A valid API token is required: Authorization: Bearer <token>.", ()),
    "insufficient-scope": (
        403,
        "This needs the `deploy` scope and the role `deployer`, `admin` or `owner` in the team.",
        (),
    ),
    "last-owner": (409, "A team keeps at least one owner: make another member owner first.", ()),
    "invitation-for-another-user": (
        409,
        "This invitation is for another email address: sign in as that user.",
        (),
    ),
    "already-member": (409, "You are a member of this team already.", ()),
    "not-found": (404, "Server not found.", ("body.serverId",)),
    "port-in-use": (409, _PORT + "another port, or give a domain.", ("body.port",)),
    "domain-in-use": (
        409,
        _DOMAIN + "choose another domain, or remove that installation.",
        ("body.domain",),
    ),
    "deployment-running": (
        409,
        f"Deployment {_DEPLOYMENT} of this installation is running; wait for it to finish.",
        (),
    ),
    "server-pending": (
        409,
        _PENDING + "create it with its host keys), then deploy.",
        ("body.serverId",),
    ),
    "host-key-mismatch": (
        409,
        _MISMATCH + "not connect to it until the new key is confirmed.",
        ("body.serverId",),
    ),
    "idempotency-key-reused": (
        409,
        _REUSED + "for a new request, or the same request to replay the first.",
        ("header.Idempotency-Key",),
    ),
    "fingerprint-mismatch": (
        409,
        "The fingerprint you confirmed is not the one of the key server 'web-1' offered.",
        (
            (
                "body.fingerprint",
                "Not the offered key's fingerprint "
                "(SHA256:9Yf0v1n0uA8c7b6a5d4e3f2g1h0i9j8k7l6m5n4o3p2).",
                None,
            ),
        ),
    ),
    "no-host-key-change": (
        409,
        "Server 'web-1' offers no new host key: there is nothing to confirm.",
        (),
    ),
    "server-not-pending": (
        409,
        "Server 'web-1' is online, not pending: it has enrolled already, so it needs no "
        "install command.",
        (),
    ),
    "server-removed": (
        409,
        "Server 'web-1' was uninstalled: its install script removed berth's key and told "
        "berth so. Run its install command again with a new server (add it again), or "
        "delete it.",
        (("body.serverId", "Server 'web-1' was uninstalled.", None),),
    ),
    "registry-exists": (
        409,
        "You already have credentials for registry.example.com:5000: remove them first "
        "to replace them.",
        (("body.host", "You already have credentials for this host.", None),),
    ),
    "registry-limit": (409, "You have 100 registries saved: remove one first.", ()),
    "git-credential-exists": (
        409,
        "Your team has credentials for git.example.com already; remove them first to replace them.",
        (("body.host", "Credentials for this host exist.", None),),
    ),
    "git-credential-limit": (
        409,
        "Your team has credentials for 100 Git hosts, the most it may save.",
        (),
    ),
    "not-built-from-git": (
        409,
        "The app 'shop' is not built from a Git repository: push to deploy needs a deploy "
        "with build.git first.",
        (),
    ),
    "server-limit": (
        409,
        "You have 1000 servers, the most one user may add (BERTH_SERVERS_PER_USER); "
        "delete one first.",
        (),
    ),
    "webhook-limit": (409, "You have 20 webhooks already: delete one first.", ()),
    "revision-unavailable": (409, _FAILED + "roll back to.", ("body.deploymentId",)),
    "installation-removed": (409, "This installation was removed.", ()),
    "deployment-finished": (
        409,
        f"Deployment {_DEPLOYMENT} already ended (succeeded); there is nothing to cancel.",
        (),
    ),
    "conflict": (
        409,
        f"Deployment {_DEPLOYMENT} on this server is running; wait for it to finish.",
        (),
    ),
    "body-too-large": (413, "The body is larger than 1 MiB.", ()),
    "unsupported-media-type": (415, "Send the body as application/json.", ()),
    "invalid-input": (
        422,
        "2 invalid field(s).",
        (
            (
                "body.domain",
                "Use `shop.example.com`: drop the scheme `https://`.",
                "https://shop.example.com",
            ),
            ("body.port", "Expected an integer from 1 to 65535.", 70000),
        ),
    ),
    "rate-limited": (429, "Request rate limit reached for this token.", ()),
    "internal-error": (
        500,
        f"Internal error; quote request id {_REQUEST_ID} when reporting it.",
        (),
    ),
    "runtime-failure": (502, "Docker refused: No such container: shop.", ()),
    "server-unreachable": (
        503,
        "The server is unreachable: berth could not reach 203.0.113.10 on port 22 over SSH "
        "(unreachable: check the address, the SSH port and any firewall between).",
        (),
    ),
    "store-unavailable": (503, "The database did not answer within 2 s; try again shortly.", ()),
}

#: The 409 kinds each operation may answer (others: every 409 example), by operationId.
_UNDEPLOYABLE = ("server-removed", "deployment-running", "server-pending", "host-key-mismatch")
_CONFLICTS: dict[str, tuple[str, ...]] = {
    "deploy": ("port-in-use", "domain-in-use", *_UNDEPLOYABLE, "idempotency-key-reused"),
    "rollback": (
        "revision-unavailable",
        "installation-removed",
        *_UNDEPLOYABLE,
        "idempotency-key-reused",
    ),
    "cancelDeployment": ("deployment-finished",),
    **{
        f"{action}Installation": (
            "deployment-running",
            "installation-removed",
            "revision-unavailable",
        )
        for action in ("stop", "start", "restart")
    },
    "removeInstallation": ("deployment-running",),
    **{
        read: ("server-pending",)
        for read in (
            "listContainers",
            "getServerDiskUsage",
            "getInstallationLogs",
            "getInstallationStats",
        )
    },
    "deleteServer": ("conflict",),
    "createServer": ("conflict", "server-limit"),
    "addRegistry": ("registry-exists", "registry-limit"),
    "addGitCredential": ("git-credential-exists", "git-credential-limit"),
    "createDeployHook": ("not-built-from-git", "installation-removed"),
    "receivePush": (
        "not-built-from-git",
        "installation-removed",
        "port-in-use",
        *_UNDEPLOYABLE,
    ),
    "createWebhook": ("webhook-limit",),
    "repinHostKeys": ("no-host-key-change", "fingerprint-mismatch"),
    "newEnrollmentToken": ("server-not-pending",),
    "createTeam": ("conflict",),
    "inviteMember": ("conflict",),
    "createToken": ("conflict",),
    "changeMemberRole": ("last-owner",),
    "removeMember": ("last-owner",),
    "acceptInvitation": ("invitation-for-another-user", "already-member"),
}

#: Examples of the bodies that are not JSON, by media type (an event stream's: one event).
_TEXT: dict[str, Any] = {
    "text/plain": "listening on :3000\nGET /healthz 200 1ms\n",
    "text/event-stream": {
        "id": "1",
        "event": "step",
        "data": '{"at":"2026-01-15T09:30:00Z","step":"queued","message":"Deployment queued."}',
    },
    "text/x-shellscript": "#!/bin/sh\n# berth install script\nset -eu\n",
}
_OPENAPI_EXAMPLE = {"openapi": "3.1.0", "info": {"title": "berth", "version": "1.0.0"}, "paths": {}}


def _problem_example(kind: str) -> dict[str, Any]:
    status, detail, named = _PROBLEMS[kind]
    errors = [
        ProblemField(location=n, message=detail) if isinstance(n, str) else ProblemField(*n)
        for n in named
    ]
    example: dict[str, Any] = msgspec.to_builtins(
        Problem(
            type=PROBLEM_TYPE.format(kind=kind),
            title=HTTPStatus(status).phrase,
            status=status,
            detail=detail,
            errors=errors,
            request_id=_REQUEST_ID,
        )
    )
    return example


def _example(schema: Mapping[str, Any], schemas: Mapping[str, Any], depth: int = 0) -> Any:
    """An example of ``schema``: its own, else one made of its fields' examples (a
    reference's, a nullable one's non-null arm, the first of an enum, each property's, an
    array of one item); ``None`` when it has none."""
    if "examples" in schema:
        return schema["examples"][0]
    if depth > 12:
        return None
    if "$ref" in schema:
        return _example(schemas[schema["$ref"].rsplit("/", 1)[-1]], schemas, depth + 1)
    for arms in (schema.get("anyOf"), schema.get("oneOf"), schema.get("allOf")):
        if "properties" in schema:
            break  # an object's rules over its fields: its example is its fields'
        for arm in arms or ():
            if (
                arm.get("type") != "null"
                and (found := _example(arm, schemas, depth + 1)) is not None
            ):
                return found
    if "enum" in schema:
        return schema["enum"][0]
    if "properties" in schema:
        return {k: _example(v, schemas, depth + 1) for k, v in schema["properties"].items()}
    if schema.get("type") == "array":
        item = _example(schema.get("items", {}), schemas, depth + 1)
        return [] if item is None else [item]
    return schema.get("default")


#: What a request body's fields say only together, by schema, as one ``not`` of the
#: combinations the server refuses (generators ignore ``not``, while a ``oneOf`` beside
#: properties makes them read the body as a union of types); with the fields its example
#: leaves out to keep to them.
_GIVEN: dict[str, dict[str, Any]] = {
    name: {"required": [name], "properties": {name: {"type": kind}}}
    for name, kind in (("build", "object"), ("git", "object"), ("sourceId", "string"))
}
_TOGETHER: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "DeployRequest": (
        {
            "not": {
                "anyOf": [
                    # Exactly one of image and build (SPEC.md, "Building from source");
                    # a null build is none.
                    {"allOf": [{"required": ["image"]}, _GIVEN["build"]]},
                    {"not": {"anyOf": [{"required": ["image"]}, _GIVEN["build"]]}},
                    # hostPort publishes a domain-less app only (SPEC.md, "Ports, and apps
                    # under watch"); either may be null.
                    {
                        "required": ["hostPort", "domain"],
                        "properties": {
                            "hostPort": {"type": "integer"},
                            "domain": {"type": "string"},
                        },
                    },
                ]
            }
        },
        ("build", "hostPort"),
    ),
    "BuildRequest": (
        {
            # One source: a Git repository or an uploaded context, not both, not neither.
            "not": {
                "anyOf": [
                    {"allOf": [_GIVEN["git"], _GIVEN["sourceId"]]},
                    {"not": {"anyOf": [_GIVEN["git"], _GIVEN["sourceId"]]}},
                ]
            }
        },
        ("sourceId",),
    ),
}


def _together(schemas: dict[str, Any]) -> None:
    """``_TOGETHER``'s rules on their schemas, each with an example that keeps to them."""
    for name, (rules, left_out) in _TOGETHER.items():
        schema = schemas[name]
        example = _example(schema, schemas)
        schema.update(copy.deepcopy(rules))
        schema["examples"] = [{k: v for k, v in example.items() if k not in left_out}]


def _media_example(media_type: str, media: dict[str, Any], schemas: Mapping[str, Any]) -> Any:
    if media_type in _TEXT:
        return _TEXT[media_type]
    schema = media.get("schema") or {}
    if "$ref" not in schema and media_type.endswith("json"):
        return _OPENAPI_EXAMPLE  # the document itself
    return _example(schema, schemas)


def _add_examples(operation: dict[str, Any], schemas: Mapping[str, Any]) -> None:
    for media_type, media in ((operation.get("requestBody") or {}).get("content") or {}).items():
        media.setdefault("example", _media_example(media_type, media, schemas))
    for status, response in operation.get("responses", {}).items():
        for media_type, media in (response.get("content") or {}).items():
            if media_type != PROBLEM_JSON:
                media.setdefault("example", _media_example(media_type, media, schemas))
                continue
            kinds = [k for k, (s, _, _) in _PROBLEMS.items() if str(s) == status]
            if status == "409":
                kinds = list(_CONFLICTS.get(operation.get("operationId", ""), kinds))
            if len(kinds) == 1:
                media.setdefault("example", _problem_example(kinds[0]))
            elif kinds:
                media.setdefault(
                    "examples", {k: {"summary": k, "value": _problem_example(k)} for k in kinds}
                )
    for parameter in operation.get("parameters", []):
        schema = parameter.get("schema", {})
        if parameter.get("name") in EXAMPLE_IDS:
            parameter.setdefault("example", EXAMPLE_IDS[parameter["name"]])
        elif "enum" in schema:
            parameter.setdefault("example", schema["enum"][-1])
        elif schema.get("format") == "uuid":
            parameter.setdefault("example", _DEPLOYMENT)
        elif schema.get("type") == "integer":
            parameter.setdefault("example", schema.get("default", schema.get("minimum", 1) + 29))
        elif schema.get("type") == "string":
            parameter.setdefault("example", "b7d3f0e2-retry-1")


# --- the completion ----------------------------------------------------------------


def _operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in document.get("paths", {}).items():
        for method in _METHODS:
            if (found := item.get(method)) is not None:
                yield method, path, found


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/headers/{name}"}


def _tidy(document: dict[str, Any]) -> None:
    """``$ref`` beside its description rather than ``allOf`` around it; an enum described
    by its own docstring, not by the first field that uses it (Litestar copies a field's
    words onto the shared enum); a parameter's description on the parameter only."""
    for name, schema in document["components"]["schemas"].items():
        kind = getattr(models, name, None)
        if "enum" in schema and isinstance(kind, type) and issubclass(kind, enum.Enum):
            schema.pop("examples", None)
            schema.pop("description", None)
            if kind.__doc__:
                schema["description"] = kind.__doc__
        for prop in (schema.get("properties") or {}).values():
            arms = prop.get("allOf")
            if arms and len(arms) == 1 and set(arms[0]) == {"$ref"}:
                prop["$ref"] = prop.pop("allOf")[0]["$ref"]
    for _, _, found in _operations(document):
        for parameter in found.get("parameters", []):
            parameter.get("schema", {}).pop("description", None)


def _problem_types(schemas: dict[str, Any]) -> None:
    """``Problem.type``: an ``enum`` of every kind's URI, and what each means."""
    kinds = sorted(KIND_DOCS)
    listed = "; ".join(f"`{kind}`: {KIND_DOCS[kind]}" for kind in kinds)
    schemas["Problem"].setdefault("properties", {})["type"] = {
        "type": "string",
        "enum": [PROBLEM_TYPE.format(kind=kind) for kind in kinds],
        # Names for generated clients' enum members (``ProblemType.PORT_IN_USE``).
        "x-enum-varnames": [kind.upper().replace("-", "_") for kind in kinds],
        "description": "What went wrong, one URI per kind for a client to branch on: "
        f"`urn:berth:problem:<kind>`. The kinds: {listed}",
    }


def complete(document: dict[str, Any]) -> dict[str, Any]:
    """A copy of Litestar's ``document`` with the additions above."""
    document = copy.deepcopy(document)
    components = document.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    if "Problem" not in schemas:
        raise ValueError("the document has no Problem schema to refer to")
    wires = sorted({body.wire for body in BODIES.values()}, key=lambda w: w.__name__)
    _, bodies = msgspec.json.schema_components(wires, ref_template="#/components/schemas/{name}")
    schemas.update(bodies)
    _together(schemas)
    _tidy(document)
    _problem_types(schemas)
    components.setdefault("headers", {}).update(copy.deepcopy(HEADERS))
    for method, path, found in _operations(document):
        if (method, path) in _STREAMED_BODIES:
            found["requestBody"] = copy.deepcopy(_STREAMED_BODIES[(method, path)])
        responses = found.setdefault("responses", {})
        responses.setdefault("500", copy.deepcopy(_INTERNAL_ERROR))
        if path not in _STORELESS:
            responses.setdefault("503", copy.deepcopy(_STORE_UNAVAILABLE))
        limited = any(API_SCHEME in scheme for scheme in found.get("security", []))
        if limited and method == "get" and "200" in responses:
            responses.setdefault("304", copy.deepcopy(_NOT_MODIFIED))
        for status, response in responses.items():
            headers = response.get("headers") or {}
            headers["X-Request-Id"] = _ref("RequestId")
            if limited and status != "401":
                headers["RateLimit-Policy"] = _ref("RateLimitPolicy")
                headers["RateLimit"] = _ref("RateLimit")
            if limited and method == "get" and status in ("200", "304"):
                headers["ETag"] = _ref("ETag")
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
            if links := _LINKS.get((method, path, status)):
                response["links"] = {
                    name: {"operationId": target, "parameters": dict(parameters)}
                    for name, (target, parameters) in links.items()
                }
        _add_examples(found, schemas)
    return document
