"""``GET /api/agent/openapi.json``: a valid OpenAPI 3.1 document that matches the server.

The document's own structure is checked here; a bounded schemathesis run then
checks that the live server answers only what the document promises.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from pathlib import Path
from typing import Any

import httpx
import hypothesis
import hypothesis.strategies as st
import pytest
import schemathesis
from berth.entrypoints.http.errors import KINDS
from deploy_support import (
    ECHO_V1,
    FAST_ENV,
    RUN,
    get_app,
    host_port,
    remove_containers,
    wait_until,
)
from harness import Api, BerthProcess, new_server
from hypothesis import HealthCheck, Phase
from hypothesis.errors import Unsatisfiable
from jsonschema import Draft202012Validator
from openapi_spec_validator import OpenAPIV31SpecValidator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from schemathesis import Case, CheckContext, GenerationMode, Response
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import positive_data_acceptance

DOCUMENT = "/api/agent/openapi.json"
PROBLEM = "application/problem+json"

# SPEC.md's table, the endpoints it adds, and what docs/decisions/ adds. Path
# parameters are compared by position: ``{}`` stands for any name.
REQUIRED = {
    ("get", "/api/deploy"),
    ("get", "/api/agent/openapi.json"),
    ("get", "/api/agent/install"),
    ("get", "/api/agent/servers/{}/containers"),
    ("post", "/api/agent/docker/deploy"),
    ("get", "/api/agent/servers"),
    ("post", "/api/agent/servers"),
    ("get", "/api/agent/servers/{}"),
    ("get", "/api/agent/deployments/{}"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("post", "/api/agent/servers/enroll"),
    ("get", "/api/agent/servers/enroll"),
    ("post", "/api/agent/registries"),
    ("get", "/api/agent/registries"),
    ("delete", "/api/agent/registries/{}"),
    ("post", "/api/agent/webhooks"),
    ("get", "/api/agent/webhooks"),
    ("delete", "/api/agent/webhooks/{}"),
    ("get", "/api/agent/webhooks/{}/deliveries"),
    ("get", "/api/agent/servers/self"),
    ("post", "/api/agent/servers/self/uninstall"),
}
PUBLIC = {"/api/deploy", "/api/agent/openapi.json", "/healthz", "/readyz"}
# Short camelCase operationIds; a HEAD twin is its GET's id + "Head".
PUBLIC_GET_IDS = {
    "/api/deploy": "getInstallScript",
    "/api/agent/openapi.json": "getOpenApiDocument",
    "/healthz": "getLiveness",
    "/readyz": "getReadiness",
}
HEAD_IDS = {f"{get_id}Head" for get_id in PUBLIC_GET_IDS.values()}
OPERATION_ID = re.compile(r"^[a-z][A-Za-z]{2,40}$")
# The install script's routes take a server's enrollment token, not an API token.
ENROLLMENT = "/api/agent/servers/enroll"
SERVER_SELF = {"/api/agent/servers/self", "/api/agent/servers/self/uninstall"}


def _shape(path: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", path)


def operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Every ``(method, path, operation)`` of the document."""
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method in {"get", "put", "post", "delete", "patch", "head", "options", "trace"}:
                yield method, path, operation


@pytest.fixture(scope="module")
def document(berth: BerthProcess) -> dict[str, Any]:
    """The served document, fetched without a token (the response itself is schema-checked)."""
    with berth.api() as client:
        response = client.get(DOCUMENT)
    assert response.status_code == 200
    assert response.headers["content-type"].split(";")[0] in {
        "application/json",
        "application/vnd.oai.openapi+json",
    }
    found: dict[str, Any] = response.json()
    return found


class TestDocument:
    """The document itself: version, validity, completeness."""

    def test_version_is_3_1_0(self, document: dict[str, Any]) -> None:
        """The document declares OpenAPI 3.1.0."""
        assert document["openapi"] == "3.1.0"

    def test_is_a_valid_openapi_3_1_document(self, document: dict[str, Any]) -> None:
        """The document passes the OpenAPI 3.1 specification validator."""
        errors = [e.message for e in OpenAPIV31SpecValidator(document).iter_errors()]
        assert errors == []

    def test_is_public(self, berth: BerthProcess) -> None:
        """The document needs no token, and a bad token does not stop it either."""
        with berth.api("berth_not-a-token") as client:
            assert client.get(DOCUMENT).status_code == 200

    def test_is_stable(self, berth: BerthProcess, document: dict[str, Any]) -> None:
        """Fetching the document twice gives the same document (no random examples)."""
        with berth.api() as client:
            assert client.get(DOCUMENT).json() == document

    def test_lists_every_endpoint(self, document: dict[str, Any]) -> None:
        """Every endpoint of SPEC.md's table, its additions and docs/decisions/ is documented."""
        listed = {(method, _shape(path)) for method, path, _ in operations(document)}
        assert listed >= REQUIRED, sorted(REQUIRED - listed)

    def test_lists_logs_and_removal_of_an_installation(self, document: dict[str, Any]) -> None:
        """SPEC.md's "container logs of an installation" and "removing an installation" exist."""
        listed = {(method, path) for method, path, _ in operations(document)}
        assert any(m == "get" and p.endswith("/logs") for m, p in listed), sorted(listed)
        assert any(m == "delete" and p.startswith("/api/agent/") for m, p in listed)

    def test_operations_have_ids_and_summaries(self, document: dict[str, Any]) -> None:
        """Each operation has a unique operationId and a summary."""
        ids = [op["operationId"] for _, _, op in operations(document)]
        assert len(ids) == len(set(ids))
        assert all(OPERATION_ID.match(i) for i in ids), ids
        assert all(op.get("summary") for _, _, op in operations(document))

    def test_documents_deploy_parameters(self, document: dict[str, Any]) -> None:
        """Deploy documents its body, ``?wait`` (0-300) and the ``Idempotency-Key`` header."""
        operation = document["paths"]["/api/agent/docker/deploy"]["post"]
        params = {(p["in"], p["name"]): p for p in operation["parameters"]}
        wait = params[("query", "wait")]
        assert wait["schema"] == {"type": "integer", "minimum": 0, "maximum": 300}  # not null
        key = params[("header", "Idempotency-Key")]
        assert key["schema"] == {
            "type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]+$"
        }  # fmt: skip
        assert operation["requestBody"]["required"] is True
        assert list(operation["requestBody"]["content"]) == ["application/json"]
        ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        schema = document["components"]["schemas"][ref.rsplit("/", 1)[1]]
        # exactly one of image and build (SPEC.md, "Building from source"): neither required
        assert set(schema["required"]) == {"serverId", "name"}
        assert set(schema["properties"]) == {
            "serverId", "name", "image", "port", "domain", "env", "volumes",
            "memory", "cpus", "restart", "healthPath", "command", "hostPort",
            "stopGraceSeconds", "build",
        }  # fmt: skip
        restart = schema["properties"]["restart"]
        restart_enum = restart.get("enum") or document["components"]["schemas"][
            restart["$ref"].rsplit("/", 1)[1]
        ].get("enum")
        assert set(restart_enum) == {"unless-stopped", "always", "on-failure", "no"}
        assert schema["additionalProperties"] is False

    def test_path_ids_are_camel_case_uuids(self, document: dict[str, Any]) -> None:
        """Path parameters are named as in SPEC.md (``{serverId}``), each ``format: uuid``."""
        names = set()
        for path, item in document["paths"].items():
            for name in re.findall(r"\{([^}]*)\}", path):
                names.add(name)
                for method, operation in item.items():
                    if method not in {"get", "post", "patch", "delete", "head"}:
                        continue
                    (param,) = [p for p in operation["parameters"] if p["name"] == name]
                    assert param["in"] == "path"
                    if name == "invitationToken":  # a one-time token, not an id
                        assert param["schema"]["type"] == "string"
                        continue
                    assert param["schema"] == {"type": "string", "format": "uuid"}
        assert names == {
            "serverId",
            "installationId",
            "deploymentId",
            "registryId",
            "gitCredentialId",
            "hookId",
            "webhookId",
            "teamId",
            "userId",
            "tokenId",
            "invitationToken",
        }

    def test_closed_sets_are_enums(self, document: dict[str, Any]) -> None:
        """States, statuses and transports are enums, with exactly the values berth sends."""
        schemas = document["components"]["schemas"]
        assert schemas["DeploymentState"]["enum"] == [
            "queued", "running", "succeeded", "failed", "timed_out", "canceled",
        ]  # fmt: skip
        assert set(schemas["InstallationStatus"]["enum"]) == {
            "pending", "deploying", "running", "stopped", "failed", "removed",
            "stopping", "restarting", "exited", "missing",
        }  # fmt: skip
        assert set(schemas["ServerStatus"]["enum"]) == {
            "pending", "online", "offline", "host_key_mismatch", "removed", "checking",
        }  # fmt: skip
        assert set(schemas["TlsState"]["enum"]) == {"pending", "ready", "error"}
        assert set(schemas["TlsOut"]["properties"]["issuer"]["enum"]) == {"acme", "internal"}
        assert set(schemas["Transport"]["enum"]) == {"ssh", "local"}
        ref = schemas["DeploymentOut"]["properties"]["state"]
        assert ref["$ref"] == "#/components/schemas/DeploymentState"

    def test_documents_the_upload_body(self, document: dict[str, Any]) -> None:
        """``POST /api/agent/sources`` documents its body: required, the bytes of a tar
        archive (``application/x-tar``) or of a gzipped one (``application/gzip``)."""
        body = document["paths"]["/api/agent/sources"]["post"]["requestBody"]
        assert body["required"] is True
        assert list(body["content"]) == ["application/x-tar", "application/gzip"]
        for media_type, media in body["content"].items():
            schema = media["schema"]
            assert (schema["type"], schema["format"]) == ("string", "binary"), media_type
            assert schema["contentMediaType"] == media_type

    def test_documents_install_server_id(self, document: dict[str, Any]) -> None:
        """``GET /install`` documents its required ``serverId`` query parameter."""
        operation = document["paths"]["/api/agent/install"]["get"]
        (param,) = [p for p in operation["parameters"] if p["name"] == "serverId"]
        assert (param["in"], param["required"]) == ("query", True)
        assert param["schema"] == {"type": "string", "format": "uuid"}


class TestSecurity:
    """The bearer scheme guards every /api/agent route but the document."""

    def test_bearer_schemes_are_declared(self, document: dict[str, Any]) -> None:
        """``components.securitySchemes``: HTTP bearer for API and enrollment tokens, and
        for a server's signed requests."""
        schemes = document["components"]["securitySchemes"]
        assert set(schemes) == {"BearerToken", "EnrollmentToken", "ServerSignature"}
        assert all((s["type"], s["scheme"].lower()) == ("http", "bearer") for s in schemes.values())

    def test_every_agent_route_requires_it(self, document: dict[str, Any]) -> None:
        """Each /api/agent operation lists the API token's scheme; the enrollment routes
        the enrollment token's; the document none."""
        for method, path, operation in operations(document):
            if path == ENROLLMENT:
                assert operation.get("security") == [{"EnrollmentToken": []}], (method, path)
            elif path in SERVER_SELF:
                assert operation.get("security") == [{"ServerSignature": []}], (method, path)
            elif path.startswith("/api/agent/") and path != DOCUMENT:
                assert operation.get("security") == [{"BearerToken": []}], (method, path)

    def test_public_routes_require_nothing(self, document: dict[str, Any]) -> None:
        """The install script, the document and the health probes need no token."""
        assert "security" not in document or not document["security"]
        for method, path, operation in operations(document):
            if path in PUBLIC:
                assert not operation.get("security"), (method, path)


class TestErrorResponses:
    """Errors are documented as application/problem+json."""

    def _problem_statuses(self, document: dict[str, Any], operation: dict[str, Any]) -> set[str]:
        found = set()
        for status, response in operation["responses"].items():
            if status.startswith(("4", "5")):
                if operation["operationId"] in HEAD_IDS:  # a HEAD answer has no body
                    assert "content" not in response, status
                    found.add(status)
                    continue
                content = response["content"]
                assert list(content) == [PROBLEM], status
                ref = content[PROBLEM]["schema"]["$ref"]
                assert ref == "#/components/schemas/Problem", status
                found.add(status)
        return found

    def test_problem_schema(self, document: dict[str, Any]) -> None:
        """The Problem schema has RFC 9457's members plus errors and requestId, all required."""
        schema = document["components"]["schemas"]["Problem"]
        required = {"type", "title", "status", "detail", "errors", "requestId"}
        assert set(schema["required"]) == required
        item = schema["properties"]["errors"]["items"]["$ref"].rsplit("/", 1)[1]
        assert set(document["components"]["schemas"][item]["properties"]) == {
            "location",
            "message",
            "value",
        }

    def test_every_error_response_is_a_problem(self, document: dict[str, Any]) -> None:
        """Every documented 4xx/5xx response is application/problem+json with the Problem schema."""
        for _, _, operation in operations(document):
            self._problem_statuses(document, operation)

    def test_agent_routes_document_their_errors(self, document: dict[str, Any]) -> None:
        """/api/agent routes document 401 and 429; with an id or input 404 and 422 too."""
        for method, path, operation in operations(document):
            if not path.startswith("/api/agent/") or path == DOCUMENT:
                continue
            statuses = self._problem_statuses(document, operation)
            assert {"401", "429"} <= statuses, (method, path)
            if path == ENROLLMENT:  # a token names the server: no id, nothing to conflict with
                if method == "post":
                    assert {"400", "413", "415", "422"} <= statuses, (method, path)
                continue
            if path in SERVER_SELF:  # the signature names the server; no body, no input
                assert "requestBody" not in operation, (method, path)
                continue
            takes_input = "{" in path or operation.get("parameters") or method == "post"
            if takes_input:
                assert {"404", "422"} <= statuses, (method, path)
            # A state change can conflict with the state; an upload (a new source of its
            # own) has nothing to conflict with.
            if method == "post" and path != "/api/agent/sources":
                assert "409" in statuses, (method, path)
            if "requestBody" in operation:
                assert {"400", "413", "415"} <= statuses, (method, path)


def header(document: dict[str, Any], response: dict[str, Any], name: str) -> dict[str, Any]:
    """The declared header ``name`` of ``response``, its ``$ref`` resolved."""
    declared: dict[str, Any] = response.get("headers", {})[name]
    ref = declared.get("$ref")
    if ref is None:
        return declared
    assert ref.startswith("#/components/headers/"), ref
    found: dict[str, Any] = document["components"]["headers"][ref.rsplit("/", 1)[1]]
    return found


class TestHeaders:
    """The response headers the server sends are declared (the harness checks them too)."""

    @pytest.mark.parametrize(
        ("status", "name", "schema"),
        [
            ("401", "WWW-Authenticate", {"type": "string", "const": "Bearer"}),
            ("429", "Retry-After", {"type": "integer", "minimum": 1}),
        ],
        ids=["401-www-authenticate-bearer", "429-retry-after-whole-seconds"],
    )
    def test_every_status_declares_its_header(
        self, document: dict[str, Any], status: str, name: str, schema: dict[str, Any]
    ) -> None:
        """Every 401 declares ``WWW-Authenticate: Bearer`` and every 429 ``Retry-After``
        (whole seconds, at least 1), required; each status stands in ten operations or more."""
        seen = 0
        for method, path, operation in operations(document):
            if status in operation["responses"]:
                found = header(document, operation["responses"][status], name)
                assert found["required"] is True, (method, path)
                assert found["schema"] == schema, (method, path)
                seen += 1
        assert seen >= 10

    def test_every_operation_declares_a_500_problem(self, document: dict[str, Any]) -> None:
        """Every operation documents 500: a problem (no body for HEAD) with the request id."""
        for method, path, operation in operations(document):
            response = operation["responses"].get("500")
            assert response is not None, (method, path)
            if method != "head":
                assert list(response["content"]) == [PROBLEM], (method, path)

    def test_every_response_declares_the_request_id(self, document: dict[str, Any]) -> None:
        """``X-Request-Id`` is sent on every response, and declared on every one."""
        for method, path, operation in operations(document):
            for status, response in operation["responses"].items():
                assert header(document, response, "X-Request-Id")["required"] is True, (
                    method,
                    path,
                    status,
                )

    def test_deploy_declares_location_and_replay(self, document: dict[str, Any]) -> None:
        """Deploy's 202 and 200 declare ``Location`` (required) and ``Idempotent-Replayed``."""
        responses = document["paths"]["/api/agent/docker/deploy"]["post"]["responses"]
        for status in ("200", "202"):
            location = header(document, responses[status], "Location")
            assert location["required"] is True
            assert location["schema"]["pattern"].startswith("^/api/agent/deployments/")
            replayed = header(document, responses[status], "Idempotent-Replayed")
            assert replayed["required"] is False
            assert replayed["schema"] == {"type": "string", "const": "true"}

    def test_create_server_declares_location(self, document: dict[str, Any]) -> None:
        """``POST /servers``' 201 declares ``Location``."""
        responses = document["paths"]["/api/agent/servers"]["post"]["responses"]
        assert header(document, responses["201"], "Location")["required"] is True


class TestDeployRequestSchema:
    """``DeployRequest`` says what JSON Schema can say of SPEC.md's rules, and never more."""

    @pytest.fixture
    def schema(self, document: dict[str, Any]) -> dict[str, Any]:
        found: dict[str, Any] = document["components"]["schemas"]["DeployRequest"]
        return found

    @staticmethod
    def _object_arm(field: dict[str, Any], kind: str) -> dict[str, Any]:
        (arm,) = [a for a in field["anyOf"] if a.get("type") == kind]
        assert {"type": "null"} in field["anyOf"]  # null means none
        found: dict[str, Any] = arm
        return found

    def test_env_keys_and_values(self, schema: dict[str, Any]) -> None:
        """env: key pattern and length, at most 200 keys, values without NUL up to 32 KiB."""
        env = self._object_arm(schema["properties"]["env"], "object")
        assert env["propertyNames"] == {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$", "maxLength": 256}
        assert env["maxProperties"] == 200
        values = env["additionalProperties"]
        assert values["type"] == "string"
        assert values["maxLength"] == 32768
        assert re.search(values["pattern"], "it's $HOME\n`id`") is not None
        assert re.search(values["pattern"], "a\x00b") is None

    def test_volumes_items(self, schema: dict[str, Any]) -> None:
        """volumes: at most 100 items, each with SPEC.md's characters and a bounded length."""
        volumes = self._object_arm(schema["properties"]["volumes"], "array")
        assert volumes["maxItems"] == 100
        assert volumes["items"]["maxLength"] == 2 * 4096 + 4
        assert re.search(volumes["items"]["pattern"], "/srv/a:/data:ro") is not None
        assert re.search(volumes["items"]["pattern"], "/srv/$HOME:/data") is None

    @pytest.mark.parametrize(
        "fields",
        [
            pytest.param({"env": {f"K{i:03}": "v" for i in range(200)}}, id="env-200-keys"),
            pytest.param({"env": {"_" + "K" * 255: ""}}, id="env-key-256-chars"),
            pytest.param({"env": {"BIG": "x" * 32768}}, id="env-value-32768-bytes"),
            pytest.param({"env": {"BIG": "é" * 16384}}, id="env-value-32768-utf8-bytes"),
            pytest.param({"env": {"Q": 'it\'s "$HOME" `id` $(x)\r\n🚀'}}, id="env-shell"),
            pytest.param({"env": None, "volumes": None, "domain": None}, id="nulls"),
            pytest.param({"volumes": ["/" + "p" * 4095 + ":/data"]}, id="volume-4096"),
            pytest.param({"volumes": ["data:/var/lib/app", "/srv/b_c.d@e+f-g:/x:rw"]}, id="vol"),
            pytest.param({"volumes": [f"/srv/v{i}:/data/v{i}" for i in range(100)]}, id="vol-100"),
            pytest.param({"volumes": [".:/data", "/srv:/...", "/a..b:/x"]}, id="vol-dots"),
            pytest.param({"memory": "6m", "cpus": 1.0}, id="memory-6m"),
            pytest.param({"memory": "0006M"}, id="memory-leading-zeros"),
            pytest.param({"memory": "6144k"}, id="memory-6144k"),
            pytest.param({"memory": "1048576g"}, id="memory-1pib"),
            pytest.param({"image": "a" * 255 + ":1"}, id="repository-255"),
            pytest.param({"port": 8080.0, "stopGraceSeconds": 5.0}, id="whole-floats"),
            pytest.param({"command": ["node", ""]}, id="command-later-empty"),
            pytest.param({"hostPort": 8080, "domain": None}, id="host-port-no-domain"),
            pytest.param({"hostPort": None, "domain": "a.example"}, id="domain-no-host-port"),
            pytest.param({"build": None}, id="image-and-null-build"),
        ],
    )
    def test_accepts_what_the_server_accepts(
        self, document: dict[str, Any], fields: dict[str, Any]
    ) -> None:
        """Bodies at the edges of the rules (test_errors.py deploys them: 202) are valid."""
        body = {"serverId": str(uuid.uuid4()), "name": "app", "image": "nginx:1.27", **fields}
        assert _schema_errors(document, "DeployRequest", body) == []

    @pytest.mark.parametrize(
        "fields",
        [
            pytest.param({"env": {"1A": "x"}}, id="env-key-leading-digit"),
            pytest.param({"env": {"K" * 257: "x"}}, id="env-key-257-chars"),
            pytest.param({"env": {f"K{i}": "v" for i in range(201)}}, id="env-201-keys"),
            pytest.param({"env": {"A": "a\x00b"}}, id="env-value-nul"),
            pytest.param({"env": {"A": "x" * 32769}}, id="env-value-32769-chars"),
            pytest.param({"env": {"A": 1}}, id="env-value-number"),
            pytest.param({"volumes": ["/srv/my data:/data"]}, id="volume-space"),
            pytest.param({"volumes": ["/srv/a:/data:rx"]}, id="volume-bad-mode"),
            # issue 27, item 8: refused by the server, now stated in the schema
            pytest.param({"volumes": ["/srv/a:/"]}, id="volume-container-root"),
            pytest.param({"volumes": ["/srv/a:/./"]}, id="volume-container-root-spelt"),
            pytest.param({"volumes": ["//:/data"]}, id="volume-host-root"),
            pytest.param({"command": ["", "x"]}, id="command-first-empty"),
            pytest.param({"memory": "5m"}, id="memory-5m"),
            pytest.param({"memory": "6143k"}, id="memory-under-6mib-in-k"),
            pytest.param({"memory": "1048577g"}, id="memory-over-1pib"),
            pytest.param({"memory": 6291455}, id="memory-bytes-under-6mib"),
            pytest.param({"image": "a" * 256 + ":1"}, id="repository-256"),
            pytest.param({"port": 8080.5}, id="port-fraction"),
            pytest.param({"restart": None}, id="restart-null"),
            pytest.param({"hostPort": 8080, "domain": "a.example"}, id="host-port-and-domain"),
            pytest.param({"build": {"sourceId": str(uuid.uuid4())}}, id="image-and-build"),
            pytest.param({"image": None}, id="image-null"),
        ],
    )
    def test_refuses_what_it_can_express(
        self, document: dict[str, Any], fields: dict[str, Any]
    ) -> None:
        """Rules JSON Schema can state are in the schema (the server refuses these: 422)."""
        body = {"serverId": str(uuid.uuid4()), "name": "app", "image": "nginx:1.27", **fields}
        assert _schema_errors(document, "DeployRequest", body) != []

    @pytest.mark.parametrize(
        ("name", "body", "valid"),
        [
            ("DeployRequest", {"build": {"git": {"url": "https://g.example/a.git"}}}, True),
            ("DeployRequest", {"build": {"sourceId": str(uuid.uuid4()), "git": None}}, True),
            ("DeployRequest", {}, False),  # neither image nor build
            ("DeployRequest", {"build": None}, False),
            ("DeployRequest", {"build": {"context": "web"}}, False),  # no source
            (
                "DeployRequest",
                {"build": {"sourceId": str(uuid.uuid4()), "git": {"url": "https://g.example"}}},
                False,
            ),
            ("RegistryRequest", {"host": "registry.example.com:5000"}, True),
            ("RegistryRequest", {"host": "localhost"}, True),
            ("RegistryRequest", {"host": "LocalHost:00080"}, True),
            ("RegistryRequest", {"host": "r.example.com:0"}, False),
            ("RegistryRequest", {"host": "r.example.com:65536"}, False),
            ("RegistryRequest", {"host": "registry"}, False),  # a Docker Hub user to Docker
            ("RegistryRequest", {"host": ".".join(["a" * 63] * 3 + ["a" * 62])}, False),  # 254
            ("WebhookRequest", {"url": "https://hooks.example.com/b?x=1"}, True),
            ("WebhookRequest", {"url": "http://[::1]:8080"}, True),
            ("WebhookRequest", {"url": "https://hooks.example.com/b#part"}, False),
            ("WebhookRequest", {"url": "https://user:pw@hooks.example.com/b"}, False),
            ("WebhookRequest", {"url": "https://user@hooks.example.com"}, False),
        ],
    )
    def test_states_what_the_server_refuses(
        self, document: dict[str, Any], name: str, body: dict[str, Any], valid: bool
    ) -> None:
        """Rules of a body's fields taken together (one of image and build, one source of a
        build) and within one string (a registry's port and name, a webhook URL without
        user or fragment) are in the schema as the server applies them."""
        base = {
            "DeployRequest": {"serverId": str(uuid.uuid4()), "name": "app"},
            "RegistryRequest": {"username": "u", "password": "p"},
            "WebhookRequest": {"events": ["deployment.succeeded"]},
        }[name]
        errors = _schema_errors(document, name, {**base, **body})
        assert (errors == []) is valid, errors


def _schema_errors(document: dict[str, Any], name: str, body: Any) -> list[str]:
    """What the document's schema ``name`` finds wrong with ``body``."""
    validator = Draft202012Validator(
        {"$ref": f"urn:doc#/components/schemas/{name}"},
        registry=Registry().with_resource(
            "urn:doc", Resource.from_contents(document, default_specification=DRAFT202012)
        ),
    )
    return [e.message[:200] for e in validator.iter_errors(body)]


class TestHead:
    """The public GET routes answer HEAD; the document says so."""

    def test_public_routes_document_head(self, document: dict[str, Any]) -> None:
        """Each public GET has a HEAD twin without a body; the GET keeps its operationId."""
        for path, get_id in PUBLIC_GET_IDS.items():
            item = document["paths"][path]
            assert item["get"]["operationId"] == get_id
            assert item["head"]["operationId"] in HEAD_IDS
            assert not item["head"].get("security")
            for response in item["head"]["responses"].values():
                assert "content" not in response


# --- what an agent reads: every operation, parameter, field and body -------------

#: Descriptions a framework writes when nobody did (``http.HTTPStatus``'s words).
BOILERPLATE = {status.description for status in HTTPStatus} | {
    status.phrase for status in HTTPStatus
}
BODY_METHODS = {"get", "post", "put", "patch", "delete"}


def _schema_validator(document: dict[str, Any], schema: dict[str, Any]) -> Draft202012Validator:
    if "$ref" in schema:
        schema = {"$ref": "urn:doc" + schema["$ref"]}
    return Draft202012Validator(
        schema,
        registry=Registry().with_resource(
            "urn:doc", Resource.from_contents(document, default_specification=DRAFT202012)
        ),
    )


def _examples(media: dict[str, Any]) -> list[Any]:
    if "example" in media:
        return [media["example"]]
    return [named["value"] for named in media.get("examples", {}).values()]


class TestWhatAnAgentReads:
    """Issue 12: nothing an agent needs is left to prose it cannot see. Checked for every
    operation, so that routes added later are held to it too."""

    def test_every_operation_has_a_description(self, document: dict[str, Any]) -> None:
        """Each operation has a description beyond its summary."""
        for method, path, operation in operations(document):
            description = operation.get("description", "")
            assert len(description) >= 30, (method, path)
            assert description != operation.get("summary"), (method, path)

    def test_every_response_has_a_real_description(self, document: dict[str, Any]) -> None:
        """No response is described by framework boilerplate ("Accepted", "Request
        fulfilled, document follows"): each says what it means here."""
        for method, path, operation in operations(document):
            for status, response in operation["responses"].items():
                description = response.get("description", "")
                assert description not in BOILERPLATE, (method, path, status, description)
                assert len(description) >= 10, (method, path, status, description)

    def test_accepted_and_conflict_are_explained(self, document: dict[str, Any]) -> None:
        """Every 202 says what is pending and how to follow it; every 409 names the problem
        kinds it answers, and its examples are of those kinds."""
        kinds = {
            uri.rsplit(":", 1)[1]
            for uri in document["components"]["schemas"]["Problem"]["properties"]["type"]["enum"]
        }
        seen = 0
        for method, path, operation in operations(document):
            responses = operation["responses"]
            if "202" in responses:
                assert re.search(r"Location|poll|Poll", responses["202"]["description"]), path
            if "409" in responses:
                seen += 1
                named = set(
                    re.findall(
                        r"`?\(?([a-z]+(?:-[a-z]+)+|conflict)\)?`?", responses["409"]["description"]
                    )
                )
                assert named & kinds, (method, path, responses["409"]["description"])
                media = responses["409"]["content"][PROBLEM]
                for example in _examples(media):
                    kind = example["type"].rsplit(":", 1)[1]
                    assert kind in kinds, (method, path, kind)
                    assert example["status"] == 409
        assert seen >= 8

    def test_every_parameter_has_a_description_and_an_example(
        self, document: dict[str, Any]
    ) -> None:
        """Path, query and header parameters each say their rules and show an example that
        their schema accepts."""
        for method, path, operation in operations(document):
            for parameter in operation.get("parameters", []):
                where = (method, path, parameter["name"])
                assert len(parameter.get("description", "")) >= 10, where
                assert "example" in parameter, where
                validator = _schema_validator(document, parameter["schema"])
                assert list(validator.iter_errors(parameter["example"])) == [], where

    def test_wait_and_idempotency_key_are_never_nullable(self, document: dict[str, Any]) -> None:
        """``wait`` and ``Idempotency-Key`` are a number and a string wherever they appear,
        never ``null``."""
        seen = 0
        for _, _, operation in operations(document):
            for parameter in operation.get("parameters", []):
                if parameter["name"] in {"wait", "Idempotency-Key"}:
                    seen += 1
                    text = json.dumps(parameter["schema"])
                    for nullable in ("null", "anyOf", "oneOf"):
                        assert nullable not in text, parameter
                    assert parameter["schema"]["type"] in {"integer", "string"}
        assert seen >= 5  # deploy and rollback (both), cancel (wait)

    def test_every_schema_field_has_a_description(self, document: dict[str, Any]) -> None:
        """Every property of every schema is described."""
        missing = [
            f"{name}.{field}"
            for name, schema in document["components"]["schemas"].items()
            for field, prop in schema.get("properties", {}).items()
            if len(prop.get("description", "")) < 5
        ]
        assert missing == [], missing

    def test_deploy_fields_state_their_rules(self, document: dict[str, Any]) -> None:
        """The rules only prose knew are in the schema: names are sanitized and need two
        characters, ``port`` is also the published host port without a domain, relative
        volume paths live under the app's data directory, the tag is required."""
        fields = document["components"]["schemas"]["DeployRequest"]["properties"]
        assert "at least 2 characters" in fields["name"]["description"]
        assert "`[a-z0-9_.-]`" in fields["name"]["description"]
        assert "published on the host port" in fields["port"]["description"]
        assert "data directory" in fields["volumes"]["description"]
        assert "/var/lib/berth/apps/" in fields["volumes"]["description"]
        assert "tag is required" in fields["image"]["description"]
        assert "punycode" in fields["domain"]["description"]
        assert "never returned" in fields["env"]["description"]

    def test_every_body_and_response_has_an_example(self, document: dict[str, Any]) -> None:
        """Every request body and every response with content carries an example (problems
        included), and the example is valid against its schema."""
        checked = 0
        for method, path, operation in operations(document):
            for media_type, media in operation.get("requestBody", {}).get("content", {}).items():
                (example,) = _examples(media) or [None]
                assert example is not None, (method, path, "body")
                validator = _schema_validator(document, media["schema"])
                assert list(validator.iter_errors(example)) == [], (method, path, media_type)
                checked += 1
            for status, response in operation["responses"].items():
                for media_type, media in response.get("content", {}).items():
                    found = _examples(media)
                    assert found, (method, path, status, media_type)
                    validator = _schema_validator(document, media["schema"])
                    for example in found:
                        errors = [e.message[:200] for e in validator.iter_errors(example)]
                        assert errors == [], (method, path, status, media_type, errors)
                        if media_type == PROBLEM:
                            assert example["status"] == int(status), (method, path, status)
                    checked += 1
        assert checked >= 100

    def test_problem_types_are_an_enum_of_documented_kinds(self, document: dict[str, Any]) -> None:
        """``Problem.type`` lists every kind's URI, each explained in its description; the
        kinds issue 12 names are among them."""
        schema = document["components"]["schemas"]["Problem"]["properties"]["type"]
        assert schema["enum"] == [f"urn:berth:problem:{kind}" for kind in sorted(KINDS)]
        for kind in KINDS:
            assert f"`{kind}`: " in schema["description"], kind
        assert {
            "port-in-use", "deployment-running", "server-unreachable", "rate-limited",
            "domain-in-use", "server-pending", "invalid-input",
        } <= set(KINDS)  # fmt: skip

    def test_links_lead_to_real_operations(self, document: dict[str, Any]) -> None:
        """Each response link names an operation of the document and parameters it takes;
        creating a server leads to reading it, deploying to the deployment."""
        by_id = {op["operationId"]: op for _, _, op in operations(document)}
        found = set()
        for _, _, operation in operations(document):
            for response in operation["responses"].values():
                for link in response.get("links", {}).values():
                    target = by_id[link["operationId"]]
                    names = {p["name"] for p in target.get("parameters", [])}
                    assert set(link["parameters"]) <= names, link
                    assert all(
                        v.startswith("$response.body#/") for v in link["parameters"].values()
                    )
                    found.add((operation["operationId"], link["operationId"]))
        assert {
            ("createServer", "getServer"), ("deploy", "getDeployment"),
            ("deploy", "getInstallation"), ("rollback", "getDeployment"),
            ("getDeployment", "getInstallation"),
        } <= found  # fmt: skip


def _concrete(path: str) -> str:
    return re.sub(r"\{[^}]*\}", str(uuid.uuid4()), path)


class TestOptions:
    """``OPTIONS`` on every path answers what the 405 of that path says."""

    @pytest.mark.parametrize("with_token", [False, True], ids=["anonymous", "token"])
    def test_allow_matches_the_405(
        self, berth: BerthProcess, document: dict[str, Any], with_token: bool
    ) -> None:
        """For every documented path: OPTIONS is a 204 whose ``Allow`` equals the 405's
        (byte for byte), and lists every documented method of the path."""
        token = berth.new_users(1, "options")[0][1] if with_token else None
        with berth.api(token) as client:
            for path, item in document["paths"].items():
                url = _concrete(path)
                options = client.request("OPTIONS", url)
                assert options.status_code == 204, (path, options.text)
                # A method the path lacks (and no path takes: /servers/self must not read
                # as a PATCH of /servers/{serverId} to the schema check).
                wrong = "PUT"
                refused = client.request(wrong, url)
                assert refused.status_code == 405, (path, refused.text)
                assert options.headers["allow"] == refused.headers["allow"], path
                allowed = {m.strip().lower() for m in options.headers["allow"].split(",")}
                documented = {m for m in item if m in BODY_METHODS | {"head"}}
                assert documented | {"options"} == allowed, path


# --- schemathesis against the live server -------------------------------------


def no_server_error(ctx: CheckContext, response: Response, case: Case) -> bool | None:
    """``not_a_server_error``, except a 502/503 the operation documents.

    The test servers are never reachable (no SSH, no Docker behind them), so an
    operation that must talk to one answers its documented 503 (or 502); a 500,
    or any undocumented 5xx, still fails.
    """
    documented = case.operation.schema.raw_schema["paths"][case.operation.path]
    responses = documented[case.operation.method.lower()]["responses"]
    if response.status_code in (502, 503) and str(response.status_code) in responses:
        return None
    return not_a_server_error(ctx, response, case)


#: Rules of SPEC.md that JSON Schema cannot state (each is in its field's description),
#: as (location, message) patterns, each with its reason. A schema-valid body refused with a
#: 422 naming only these is no finding; any other refusal of valid data is.
BEYOND_SCHEMA = [
    # A host key's bytes must decode as an SSH key of the type it names: a schema sees
    # characters, not a key.
    (r"body\.hostKeys(\[\d+\])?", r"host key"),
    # A moment in the future: a schema has no clock.
    (r"body\.expiresAt", r"in the future"),
    # A page's cursor must name an entry of that list: a state, as an id's 404 is, which
    # no schema can state (issue 27: a stale cursor is a 422, not an empty page).
    (r"query\.(cursor|before)", r"No \w+ of this list has this id"),
    # A volume's host path must not be, lie in or hold a guarded path (berth's own data
    # dir among them on its own server: the server's, not the schema's, to know), and two
    # volumes must not mount one container path however each spells it (`/data`,
    # `/data/`): JSON Schema's uniqueItems compares items whole.
    (r"body\.volumes\[\d+\]", r"is refused: it (holds|lies in|names)|already mounts"),
    # A server's address is a host name or an IP address, as Python's ipaddress reads one
    # (IPv6 zones, embedded IPv4): stated in its description.
    (r"body\.address", r"hostname or an IP address|IPv6 zone"),
    # A webhook's or a build's Git URL's host and port: a DNS name, an IPv4 address in four
    # decimal numbers or an IPv6 one in brackets, a port 1-65535, as Python's urlsplit
    # parts them; the pattern states the scheme, no user or password and no fragment.
    (r"body\.(url|build\.git\.url)", r"host ?name|IP address|[Pp]ort|Not a URL|decimal|legacy"),
]


@st.composite
def tar_archives(draw: st.DrawFn, *, gzip: bool = False) -> bytes:
    """A build context an upload may send: a tar archive (gzipped if asked) of 1-4 small
    files, as ``POST /api/agent/sources`` documents its body."""
    files = draw(
        st.dictionaries(
            st.from_regex(r"[A-Za-z0-9_-]{1,12}(\.[a-z]{1,4})?", fullmatch=True),
            st.binary(max_size=200),
            min_size=1,
            max_size=4,
        )
    )
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz" if gzip else "w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


# What schemathesis sends as an upload's body: real archives (random bytes are no tar, and
# a refusal of them would tell nothing of the route).
schemathesis.openapi.media_type("application/x-tar", tar_archives())
schemathesis.openapi.media_type("application/gzip", tar_archives(gzip=True))


def accepts_valid_data(ctx: CheckContext, response: Response, case: Case) -> bool | None:
    """``positive_data_acceptance``, except a 422 that names only ``BEYOND_SCHEMA`` rules."""
    if response.status_code == 422 and "json" in response.headers.get("content-type", [""])[0]:
        errors = json.loads(response.content).get("errors") or [{}]
        if all(
            any(
                re.fullmatch(where, str(e.get("location")))
                and re.search(what, str(e.get("message")))
                for where, what in BEYOND_SCHEMA
            )
            for e in errors
        ):
            return None
    return positive_data_acceptance(ctx, response, case)


# Every check schemathesis has, with two substitutes: ``no_server_error`` for
# ``not_a_server_error``, ``accepts_valid_data`` for ``positive_data_acceptance``.
EXCLUDED = [not_a_server_error, positive_data_acceptance]
ADDITIONAL = [no_server_error, accepts_valid_data]
SETTINGS = hypothesis.settings(
    # Per operation and mode: 64 operations x 2 modes, ~1,900 requests besides the
    # document's own examples. Drawing them is most of the cost (25 took ~110 s of a
    # 2-core CI run's CPU for ~3,200 requests; decision record 2026-11-28-c).
    max_examples=15,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: keep the run bounded
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


def _real_ids(case: Case, ids: dict[str, str]) -> Case:
    """Point a case at the caller's own resources, so it gets past the 404. A negative
    case is left as drawn: replacing its ids (or its name) could undo the very mutation
    that makes it invalid, and the request would rightly be accepted."""
    meta = case.meta
    if meta is not None and meta.generation.mode is GenerationMode.NEGATIVE:
        return case
    path = case.path_parameters or {}
    for name in ("server_id", "deployment_id", "installation_id"):
        if name in path:
            path[name] = ids[name]
    if case.query is not None and "serverId" in case.query:
        case.query["serverId"] = ids["server_id"]
    if isinstance(case.body, dict) and "serverId" in case.body:
        case.body["serverId"] = ids["server_id"]
        if "image" in case.body:  # a usable name too, so that some deploys get through
            case.body["name"] = f"st-{uuid.uuid4().hex[:8]}"
    return case


@pytest.fixture(scope="module")
def live(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[BerthProcess, str, dict[str, str]]]:
    """A berth of the module's own without practical rate limits (the generated requests
    and the stateful sequences share it); a token, a server, an installation."""
    process = BerthProcess(
        tmp_path_factory.mktemp("schemathesis"),
        env={
            "BERTH_RATE_LIMIT": "1000000",
            "BERTH_DEPLOY_RATE_LIMIT": "1000000",
            # schemathesis sends many wrong tokens on purpose: each must be a 401, not a 429.
            "BERTH_AUTH_FAILURE_LIMIT": "1000000",
        },
    ).start()
    try:
        _, token = process.new_users(1, "schemathesis")[0]
        with process.api(token) as client:
            server = new_server(client, address="198.51.100.20")
            response = _deploy_one(client, server["id"])
        ids = {
            "server_id": server["id"],
            "deployment_id": response["deployment"]["id"],
            "installation_id": response["installation"]["id"],
        }
        yield process, token, ids
    finally:
        process.stop()


def _deploy_one(client: Api, server_id: str) -> dict[str, Any]:
    response = client.post(
        "/api/agent/docker/deploy",
        json={"serverId": server_id, "name": f"st-{uuid.uuid4().hex[:8]}", "image": "nginx:1.27"},
    )
    assert response.status_code == 202, response.text
    found: dict[str, Any] = response.json()
    return found


def _no_waiting(case: Case) -> None:
    """No ``?wait``: the test server is unreachable, so a deployment to it never ends on
    its own and a valid wait would last its whole length (up to 300 s)."""
    if case.query is not None:
        case.query.pop("wait", None)
        case.query.pop("follow", None)  # a live log stream lasts as long as the container


#: A header name HTTP allows (RFC 9110's token) and a value without control characters.
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e\x80-\U0010ffff]*")


def _sendable(case: Case) -> bool:
    """Whether ``case``'s headers are HTTP at all: a negative case may draw a header name
    such as ``transfer-encoding;``, which the HTTP server (uvicorn) refuses with its own
    ``400 Invalid HTTP request received.`` before berth sees the request; that tells
    nothing of berth's document."""
    return all(
        _HEADER_NAME.fullmatch(str(name)) and _HEADER_VALUE.fullmatch(str(value))
        for name, value in (case.headers or {}).items()
    )


def _revalidated(case: Case) -> None:
    """Have schemathesis look at ``case`` again after the edits above: what they made
    valid (an invalid ``wait`` dropped, a missing token added) is no longer a negative
    component, else a valid request is judged as one that should have been refused."""
    _ = case.meta  # reading it revalidates what changed since generation


def test_live_server_matches_its_document(
    live: tuple[BerthProcess, str, dict[str, str]],
) -> None:
    """Generated requests (valid and invalid), checked by every schemathesis check, never
    get a 5xx or an undocumented answer."""
    process, token, ids = live
    schema = schemathesis.openapi.from_url(f"{process.url}{DOCUMENT}")
    headers = {"Authorization": f"Bearer {token}"}
    failures: list[str] = []
    tested = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            strategy = st.tuples(operation.as_strategy(generation_mode=mode), st.booleans())

            @SETTINGS
            @hypothesis.given(pair=strategy)
            def run(pair: tuple[Case, bool]) -> None:
                case, use_real_ids = pair
                if use_real_ids:
                    case = _real_ids(case, ids)
                _no_waiting(case)
                hypothesis.assume(_sendable(case))
                case.headers = {**(case.headers or {}), **headers}
                _revalidated(case)
                case.call_and_validate(
                    base_url=process.url,
                    headers=headers,  # explicit: the checks of auth know it is the caller's
                    excluded_checks=EXCLUDED,
                    additional_checks=ADDITIONAL,
                    timeout=20,
                )

            try:
                run()
            except Unsatisfiable:
                # No way to break an operation without inputs (e.g. GET /healthz).
                assert mode is GenerationMode.NEGATIVE, operation.label
            except (Exception, FailureGroup) as exc:  # collect every operation's, then report
                failures.append(f"{operation.label} [{mode.value}]: {exc}")
            tested += 1
    assert tested >= len(REQUIRED)
    assert not failures, "\n\n".join(failures)


def test_the_server_takes_what_the_schema_says(
    live: tuple[BerthProcess, str, dict[str, str]],
) -> None:
    """Whole-number floats in integer fields (valid JSON Schema ``integer``s) deploy as
    their integers; a ``null`` the schema does not admit (``restart``) is a 422 at it."""
    process, token, ids = live
    with process.api(token) as client:
        body = {"serverId": ids["server_id"], "name": f"st-{uuid.uuid4().hex[:8]}"}
        whole = {"port": 8080.0, "hostPort": 18080.0, "stopGraceSeconds": 5.0}
        response = client.post(
            "/api/agent/docker/deploy",
            json={**body, "image": "nginx:1.27", **whole, "memory": 6291456.0},
        )
        assert response.status_code == 202, response.text
        installation = response.json()["installation"]
        assert (installation["port"], installation["hostPort"]) == (8080, 18080)
        assert (installation["stopGraceSeconds"], installation["memory"]) == (5, 6291456)
        refused = client.post(
            "/api/agent/docker/deploy", json={**body, "image": "nginx:1.27", "restart": None}
        )
        assert refused.status_code == 422, refused.text
        assert [e["location"] for e in refused.json()["errors"]] == ["body.restart"]


def test_stateful_links_find_nothing(live: tuple[BerthProcess, str, dict[str, str]]) -> None:
    """schemathesis's stateful phase: sequences of calls that follow the document's links
    (createServer → getServer, deploy → getDeployment → getInstallation, …), every check
    on every answer, find nothing."""
    process, token, ids = live
    schema = schemathesis.openapi.from_url(f"{process.url}{DOCUMENT}")
    machine = schema.as_state_machine()
    transitions = 0
    failures: list[str] = []

    class Berth(machine):  # type: ignore[misc, valid-type]
        def before_call(self, case: Case) -> None:
            nonlocal transitions
            transitions += 1
            _no_waiting(case)
            if "/enroll" not in case.path:  # the token is ours, not a drawn one
                case.headers = {**(case.headers or {}), "Authorization": f"Bearer {token}"}
            if isinstance(case.body, dict) and "serverId" in case.body:
                _real_ids(case, ids)  # deploys that get through, so their links are followed

        def get_call_kwargs(self, case: Case) -> dict[str, Any]:
            return {
                "base_url": process.url,
                "headers": {"Authorization": f"Bearer {token}"},
                "timeout": 20,
            }

        def validate_response(
            self, response: Response, case: Case, additional_checks: Any = None, **kwargs: Any
        ) -> None:
            # Collected, not raised: a raised failure makes Hypothesis replay the sequence,
            # and a replay against a live server (whose answers depend on what earlier
            # calls created) draws differently and hides the failure behind "flaky".
            try:
                case.validate_response(
                    response,
                    excluded_checks=EXCLUDED,
                    additional_checks=ADDITIONAL,
                    transport_kwargs=kwargs,
                )
            except (Exception, FailureGroup) as exc:
                failures.append(f"{case.method} {case.path}: {exc}")

    settings = hypothesis.settings(
        max_examples=30,
        stateful_step_count=5,
        phases=[Phase.generate],
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    # The machine draws from what the live server answered (ids in links), so Hypothesis's
    # record of earlier draws can disagree with a later sequence and stop the run as
    # "flaky" although no check failed. Every call such a run made was still checked
    # (failures are collected above, never raised), so it counts; runs go on until 60
    # calls were checked, at most six runs.
    for _ in range(6):
        with contextlib.suppress(hypothesis.errors.FlakyStrategyDefinition):
            Berth.run(settings=settings)
        if transitions >= 60:
            break
    assert transitions >= 60
    assert not failures, "\n\n".join(failures[:3])


# --- a client generated from the document, used unmodified ------------------------


#: The generator's setting docs/api/index.md gives: the upload's archive types are binary
#: bodies (it knows only application/octet-stream as one).
GENERATOR_CONFIG = """\
content_type_overrides:
  application/x-tar: application/octet-stream
  application/gzip: application/octet-stream
"""


def _generate_client(document: bytes, where: Path) -> str:
    """Generate a Python client with openapi-python-client into ``where``; its package name.
    The generator must not warn: a warning means part of the document was not understood."""
    (where / "openapi.json").write_bytes(document)
    (where / "config.yaml").write_text(GENERATOR_CONFIG)
    venv_bin = Path(sys.executable).parent
    package = f"berth_client_{uuid.uuid4().hex[:8]}"
    generated = subprocess.run(
        [str(venv_bin / "openapi-python-client"), "generate", "--path", "openapi.json",
         "--meta", "none", "--output-path", package, "--config", "config.yaml"],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}"},
        check=False,
    )  # fmt: skip
    output = generated.stdout + generated.stderr
    assert generated.returncode == 0, output
    assert "Warning" not in output, output
    assert "Error" not in output, output
    return package


def _server_sent_events(text: str) -> list[dict[str, str]]:
    """The events of a whole ``text/event-stream`` text, each its fields but ``id`` and
    ``retry`` (comments and a ``retry``-only message left out)."""
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if line and ": " in line)
        fields = {k: v for k, v in fields.items() if k not in {"", "id", "retry"}}
        if fields:
            events.append(fields)
    return events


def test_a_generated_client_deploys(tmp_path: Path, echo_image: str) -> None:
    """openapi-python-client's client of the live document, imported unmodified, lists the
    caller's servers, deploys the test image with ``?wait`` and reads the deployment back;
    a refused deploy comes back as the ``Problem`` model with its kind; the deployment's
    event stream reads back as text ending in ``end``, and a followed log as text that
    ends when the app is stopped."""
    process = BerthProcess(tmp_path / "data", env=dict(FAST_ENV), args=["--local"]).start()
    package = None
    try:
        _, token = process.new_users(1, "client")[0]
        with process.api() as anonymous:
            package = _generate_client(anonymous.get(DOCUMENT).content, tmp_path)
        sys.path.insert(0, str(tmp_path))
        client_module = importlib.import_module(package)
        api = importlib.import_module(f"{package}.api.agent")
        models = importlib.import_module(f"{package}.models")
        for name in (
            "list_servers",
            "deploy",
            "get_deployment",
            "get_installation",
            "stream_deployment_events_text",
            "follow_installation_logs",
            "stop_installation",
        ):
            importlib.import_module(f"{api.__name__}.{name}")
        client = client_module.AuthenticatedClient(
            base_url=process.url, token=token, timeout=httpx.Timeout(90.0)
        )
        with client:
            servers = wait_until(
                lambda: api.list_servers.sync(client=client).servers,
                lambda found: any(s.transport == models.Transport.LOCAL for s in found),
                15,
                "the local server",
            )
            (local,) = [s for s in servers if s.transport == models.Transport.LOCAL]
            port = host_port()
            env = models.DeployRequestEnvType0()
            env["PORT"] = str(port)
            name = f"client-{RUN}-{uuid.uuid4().hex[:6]}"
            response = api.deploy.sync_detailed(
                client=client,
                body=models.DeployRequest(
                    server_id=local.id, name=name, image=ECHO_V1, port=port, env=env
                ),
                wait=60,
            )
            assert response.status_code == 200, response.content
            result = response.parsed
            assert isinstance(result, models.DeployOut), response.content
            assert result.deployment.state == models.DeploymentState.SUCCEEDED
            assert result.installation.env_keys == ["PORT"]
            read = api.get_deployment.sync(client=client, deployment_id=result.deployment.id)
            assert isinstance(read, models.DeploymentOut)
            assert read.state == models.DeploymentState.SUCCEEDED
            assert read.installation_id == result.installation.id
            assert "health" in [e.step for e in read.events]
            installation = api.get_installation.sync(
                client=client, installation_id=read.installation_id
            )
            assert installation.status == models.InstallationStatus.RUNNING
            assert get_app(port).status_code == 200  # the app itself answers

            # The same host port for another app: a Problem the client parses, by kind.
            refused = api.deploy.sync(
                client=client,
                body=models.DeployRequest(
                    server_id=local.id, name=f"{name}-2", image=ECHO_V1, port=port
                ),
            )
            assert isinstance(refused, models.Problem), refused
            assert refused.type_ == models.ProblemType.PORT_IN_USE  # x-enum-varnames
            assert refused.type_.value == "urn:berth:problem:port-in-use"
            assert [e.location for e in refused.errors] == ["body.port"]

            # The streams, each an operation of its own with a text answer (issue 27,
            # item 7): the events read whole, then a followed log while the app runs.
            text = api.stream_deployment_events_text.sync(
                client=client, deployment_id=result.deployment.id
            )
            assert isinstance(text, str), text
            events = _server_sent_events(text)
            assert events[-1] == {"event": "end", "data": '{"state":"succeeded"}'}
            assert [json.loads(e["data"])["step"] for e in events[:-1]] == [
                e.step for e in read.events
            ]
            with ThreadPoolExecutor(1) as pool:
                followed = pool.submit(
                    api.follow_installation_logs.sync,
                    client=client,
                    installation_id=installation.id,
                    tail=5,
                )
                stopped = api.stop_installation.sync(client=client, installation_id=installation.id)
                assert isinstance(stopped, models.InstallationOut), stopped
                lines = followed.result(timeout=60)  # the stream ends: the container stopped
            assert isinstance(lines, str), lines
            assert f"echo v1: listening on {port}" in lines.splitlines()
    finally:
        process.stop()
        remove_containers(f"client-{RUN}-")
        if package is not None:
            sys.modules.pop(package, None)
            if str(tmp_path) in sys.path:
                sys.path.remove(str(tmp_path))
