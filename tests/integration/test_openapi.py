"""``GET /api/agent/openapi.json``: a valid OpenAPI 3.1 document that matches the server.

The document's own structure is checked here; a bounded schemathesis run then
checks that the live server answers only what the document promises.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import hypothesis
import hypothesis.strategies as st
import pytest
import schemathesis
from harness import Api, BerthProcess, new_server
from hypothesis import HealthCheck, Phase
from hypothesis.errors import Unsatisfiable
from openapi_spec_validator import OpenAPIV31SpecValidator
from schemathesis import Case, CheckContext, GenerationMode, Response
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

DOCUMENT = "/api/agent/openapi.json"
PROBLEM = "application/problem+json"

# SPEC.md's table, the endpoints it adds, and what decisions.md adds. Path
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
}
PUBLIC = {"/api/deploy", "/api/agent/openapi.json", "/healthz", "/readyz"}
# The install script's routes take a server's enrollment token, not an API token.
ENROLLMENT = "/api/agent/servers/enroll"


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
        """Every endpoint of SPEC.md's table, its additions and decisions.md's is documented."""
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
        assert all(op.get("summary") for _, _, op in operations(document))

    def test_documents_deploy_parameters(self, document: dict[str, Any]) -> None:
        """Deploy documents its body, ``?wait`` (1-300) and the ``Idempotency-Key`` header."""
        operation = document["paths"]["/api/agent/docker/deploy"]["post"]
        params = {(p["in"], p["name"]): p for p in operation["parameters"]}
        wait = params[("query", "wait")]
        assert (wait["schema"]["minimum"], wait["schema"]["maximum"]) == (1, 300)
        assert ("header", "Idempotency-Key") in params
        assert operation["requestBody"]["required"] is True
        assert list(operation["requestBody"]["content"]) == ["application/json"]
        ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        schema = document["components"]["schemas"][ref.rsplit("/", 1)[1]]
        assert set(schema["required"]) == {"serverId", "name", "image"}
        assert set(schema["properties"]) == {
            "serverId", "name", "image", "port", "domain", "env", "volumes",
        }  # fmt: skip
        assert schema["additionalProperties"] is False

    def test_documents_install_server_id(self, document: dict[str, Any]) -> None:
        """``GET /install`` documents its required ``serverId`` query parameter."""
        operation = document["paths"]["/api/agent/install"]["get"]
        (param,) = [p for p in operation["parameters"] if p["name"] == "serverId"]
        assert (param["in"], param["required"]) == ("query", True)


class TestSecurity:
    """The bearer scheme guards every /api/agent route but the document."""

    def test_bearer_schemes_are_declared(self, document: dict[str, Any]) -> None:
        """``components.securitySchemes``: HTTP bearer for API and enrollment tokens."""
        schemes = document["components"]["securitySchemes"]
        assert set(schemes) == {"BearerToken", "EnrollmentToken"}
        assert all((s["type"], s["scheme"].lower()) == ("http", "bearer") for s in schemes.values())

    def test_every_agent_route_requires_it(self, document: dict[str, Any]) -> None:
        """Each /api/agent operation lists the API token's scheme; the enrollment routes
        the enrollment token's; the document none."""
        for method, path, operation in operations(document):
            if path == ENROLLMENT:
                assert operation.get("security") == [{"EnrollmentToken": []}], (method, path)
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
            takes_input = "{" in path or operation.get("parameters") or method == "post"
            if takes_input:
                assert {"404", "422"} <= statuses, (method, path)
            if method == "post":
                assert {"400", "409", "413", "415"} <= statuses, (method, path)


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


CHECKS = [
    no_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
SETTINGS = hypothesis.settings(
    max_examples=25,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: keep the run bounded
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


def _real_ids(case: Case, ids: dict[str, str]) -> Case:
    """Point a case at the caller's own resources, so it gets past the 404."""
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
        if case.query is not None:
            # The test server is unreachable and when a deployment to it ends is the
            # worker's business: a valid ?wait could last its full length (up to 300 s).
            case.query.pop("wait", None)
    return case


@pytest.fixture
def live(fresh_berth: BerthProcess) -> tuple[BerthProcess, str, dict[str, str]]:
    """A berth of its own without practical rate limits; a token, a server, an installation."""
    fresh_berth.env.update({"BERTH_RATE_LIMIT": "1000000", "BERTH_DEPLOY_RATE_LIMIT": "1000000"})
    fresh_berth.start()
    _, token = fresh_berth.new_user("schemathesis")
    with fresh_berth.api(token) as client:
        server = new_server(client, address="198.51.100.20")
        response = _deploy_one(client, server["id"])
    ids = {
        "server_id": server["id"],
        "deployment_id": response["deployment"]["id"],
        "installation_id": response["installation"]["id"],
    }
    return fresh_berth, token, ids


def _deploy_one(client: Api, server_id: str) -> dict[str, Any]:
    response = client.post(
        "/api/agent/docker/deploy",
        json={"serverId": server_id, "name": f"st-{uuid.uuid4().hex[:8]}", "image": "nginx:1.27"},
    )
    assert response.status_code == 202, response.text
    found: dict[str, Any] = response.json()
    return found


def test_live_server_matches_its_document(
    live: tuple[BerthProcess, str, dict[str, str]],
) -> None:
    """Generated requests (valid and invalid) never get a 5xx or an undocumented answer."""
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
                case.call_and_validate(
                    base_url=process.url, headers=headers, checks=CHECKS, timeout=20
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
