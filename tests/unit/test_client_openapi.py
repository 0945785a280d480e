"""``berth.client`` cannot drift from the API: every operation of the app factory's
OpenAPI document has a client method (same method and path), and every body the client
sends or reads agrees with the document's schema (``tests/client_agreement.py``; the
integration suite runs the same check on a running berth's document)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from berth.client import Api, Operation
from berth.entrypoints.http import create_app
from berth.entrypoints.settings import Settings
from client_agreement import client_operations, disagreements
from litestar.testing import TestClient
from wiring import App

Document = dict[str, Any]


@pytest.fixture(scope="module")
def document() -> Iterator[Document]:
    from wiring import build_app

    app: App = build_app()
    with TestClient(create_app(app.bus, Settings())) as client:
        yield client.get("/api/agent/openapi.json").json()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the dashboard's
class TestAgreement:
    def test_the_client_agrees_with_the_document(self, document: Document) -> None:
        """No operation is missing, none is invented, no body differs."""
        assert disagreements(document) == []

    def test_every_operation_has_a_method(self, document: Document) -> None:
        """The client's operations are the document's, but for HEAD (its GET's)."""
        theirs = {
            (method.upper(), path)
            for path, item in document["paths"].items()
            for method in item
            if method in ("get", "post", "patch", "delete")
        }
        assert set(client_operations()) == theirs


def _schemas(document: Document) -> dict[str, Any]:
    schemas: dict[str, Any] = document["components"]["schemas"]
    return schemas


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
class TestTheCheckCanFail:
    def test_a_new_operation_without_a_method(self, document: Document) -> None:
        """An operation the client lacks is named."""
        changed = copy.deepcopy(document)
        changed["paths"]["/api/agent/things"] = {"get": {"operationId": "listThings"}}
        assert disagreements(changed) == ["GET /api/agent/things (listThings): no client method"]

    def test_a_method_the_document_lacks(self, document: Document) -> None:
        """A client method whose operation is gone is named."""
        changed = copy.deepcopy(document)
        del changed["paths"]["/api/agent/servers/{serverId}/disk"]
        assert disagreements(changed) == [
            "GET /api/agent/servers/{serverId}/disk: a client method the document does not have"
        ]

    def test_a_new_answer_field(self, document: Document) -> None:
        """A field the API added that the client's Struct lacks is named where it is."""
        changed = copy.deepcopy(document)
        facts = _schemas(changed)["FactsOut"]
        facts["properties"]["kernel"] = {"type": "string"}
        facts["required"].append("kernel")
        where = "GET /api/agent/servers (servers) 200 answer.servers[].facts.kernel"
        assert f"{where}: missing in the client" in disagreements(changed)

    def test_required_ness_types_and_defaults(self, document: Document) -> None:
        """A field no longer required, a type changed, a request default changed."""
        changed = copy.deepcopy(document)
        schemas = _schemas(changed)
        schemas["RegistryOut"]["required"].remove("username")
        schemas["RegistryOut"]["properties"]["createdAt"] = {"type": "integer"}
        schemas["DeployRequest"]["properties"]["port"]["default"] = 8080
        schemas["DeploymentState"]["enum"].append("paused")
        found = "\n".join(disagreements(changed))
        assert "registries[].username: required False in the document, True here" in found
        assert (
            "registries[].createdAt: the document has integer, the client string (date-time)"
            in found
        )
        assert "deploy) body.port: default 8080 in the document, 3000 here" in found
        assert "deployment.state: the document has one of" in found

    def test_a_query_parameter_the_document_lacks(self, document: Document) -> None:
        """A parameter the client sends that the API no longer documents is named."""
        changed = copy.deepcopy(document)
        get = changed["paths"]["/api/agent/installations/{installationId}/logs"]["get"]
        get["parameters"] = [p for p in get["parameters"] if p["name"] != "tail"]
        where = "GET /api/agent/installations/{installationId}/logs (logs)"
        assert f"{where}: sends query 'tail', not in the document" in disagreements(changed)

    def test_every_method_is_an_operation(self) -> None:
        """``Api``'s public attributes are all operations (none written by hand beside)."""
        public = {name: value for name, value in vars(Api).items() if not name.startswith("_")}
        assert all(
            isinstance(v, Operation) or v.__class__.__name__ == "StreamOperation"
            for v in public.values()
        )
