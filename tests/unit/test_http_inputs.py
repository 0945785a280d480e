"""The HTTP layer's strict reading of requests (``inputs.py``), its completion of the
OpenAPI document (``openapi.py``), and its translation of Litestar's parameter errors."""

from __future__ import annotations

import json
import math
from typing import Annotated, Any
from uuid import UUID

import pytest
from berth.entrypoints.http.errors import EXCEPTION_HANDLERS, problem_response
from berth.entrypoints.http.inputs import NotJson, Rule, decode_json, echo, read_inputs
from berth.entrypoints.http.openapi import HEADERS, complete, documented, handler_docs
from berth.entrypoints.http.parameters import ServerId, ServerQuery, Wait
from hypothesis import given
from hypothesis import strategies as st
from litestar import Litestar, get
from litestar.params import QueryParameter
from litestar.static_files import create_static_files_router
from litestar.testing import TestClient


class TestDecodeJson:
    @pytest.mark.parametrize(
        ("raw", "expected"),
        [
            (b'{"port": 1e400}', {"port": math.inf}),
            (b'{"port": -1e400}', {"port": -math.inf}),
            (b'{"port": 1.5E+99999}', {"port": math.inf}),
            (b'{"port": 1e-400}', {"port": 0.0}),
            (b'{"a": [1e400, "x", {"b": null}]}', {"a": [math.inf, "x", {"b": None}]}),
            (b'{"port": ' + b"1" * 5000 + b"}", {"port": math.inf}),
            (b'{"port": -' + b"1" * 5000 + b"}", {"port": -math.inf}),
            (b'{"port": ' + b"1" * 4300 + b"}", {"port": int("1" * 4300)}),
            (
                b'{"port": 1e400, "big": ' + b"2" * 50 + b"}",
                {"port": math.inf, "big": 2 * int("1" * 50)},
            ),
        ],
    )
    def test_out_of_range_numbers_are_json(self, raw: bytes, expected: object) -> None:
        """Numbers no float or int holds are valid JSON: ``±inf``, for the parsers to refuse."""
        assert decode_json(raw) == expected

    @pytest.mark.parametrize(
        "raw",
        [
            b'{"port": NaN}',
            b'{"port": 1e400, "x": NaN}',
            b'{"port": 1e400, "x": Infinity}',
            b'{"port": 1e400, "x": -Infinity}',
            b'{"port": 1e400, "x": "\\ud800"}',
            b'{"port": 1e400, "\\udfff": 1}',
            b'{"port": 1e400, "x": "\xff"}',
            b'{"port": 1e400, "x": 01}',
            b'{"port": 1e400,}',
            b'{"port": 1e400} {}',
            b'{"port": 1e400, "x": "a\x01b"}',
            "\ufeff".encode() + b'{"port": 1e400}',
            '{"port": 1e400}'.encode("utf-16"),
            b"",
            b"{",
        ],
    )
    def test_the_grammar_holds_past_a_huge_number(self, raw: bytes) -> None:
        """What msgspec refuses anywhere stays refused after an out-of-range number."""
        with pytest.raises(NotJson):
            decode_json(raw)

    def test_deep_nesting_is_a_recursion_error(self) -> None:
        """Too deep to decode (with or without a huge number first): the caller's 422."""
        with pytest.raises(RecursionError):
            decode_json(b"[" * 100_000 + b"]" * 100_000)
        with pytest.raises(RecursionError):
            decode_json(b"[1e400," + b"[" * 100_000 + b"]" * 100_001)

    @given(
        st.recursive(
            st.none()
            | st.booleans()
            | st.integers()
            | st.floats(allow_nan=False, allow_infinity=False)
            | st.text(),
            lambda inner: (
                st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4)
            ),
            max_leaves=20,
        )
    )
    def test_agrees_with_the_standard_library(self, value: Any) -> None:
        """Any JSON document decodes to what ``json`` makes of it."""
        raw = json.dumps(value).encode()
        assert decode_json(raw) == json.loads(raw)


@get("/params", sync_to_thread=False)
def _params(
    wait: Wait = None,
    server_id: Annotated[UUID | None, QueryParameter(name="serverId")] = None,
) -> dict[str, Any]:
    return {"wait": wait, "serverId": None if server_id is None else str(server_id)}


@get("/required", sync_to_thread=False)
def _required(server_id: ServerQuery) -> str:
    return str(server_id)


@pytest.fixture(scope="module")
def params() -> Any:
    """A client of an app with the API's reading of parameters and its problems."""
    app = Litestar(
        [_params, _required], before_request=read_inputs, exception_handlers=EXCEPTION_HANDLERS
    )
    with TestClient(app) as client:
        yield client


@get("/servers/{serverId:str}", sync_to_thread=False)
def _server(server_id: ServerId) -> str:
    return str(server_id)


class TestPathIds:
    def test_an_id_that_is_not_a_uuid_names_nothing(self, tmp_path: Any) -> None:
        """A UUID path id that is not one is a 404 (``Server not found.``), as an unknown
        id; a path parameter of another type (the dashboard's static files' ``file_path``)
        is no id: the file is served."""
        (tmp_path / "berth.css").write_text("body {}")
        static = create_static_files_router("/static", directories=[tmp_path])
        app = Litestar(
            [_server, static], before_request=read_inputs, exception_handlers=EXCEPTION_HANDLERS
        )
        sid = "123e4567-e89b-12d3-a456-426614174000"
        with TestClient(app) as client:
            assert client.get(f"/servers/{sid}").text == sid
            response = client.get("/servers/web-1")
            assert (response.status_code, response.json()["detail"]) == (404, "Server not found.")
            response = client.get("/static/berth.css?v=1")
            assert (response.status_code, response.text) == (200, "body {}")


class TestQueryParameters:
    @pytest.mark.parametrize(("raw", "value"), [("0", 0), ("1", 1), ("300", 300), ("42", 42)])
    def test_plain_digits_in_range(self, params: Any, raw: str, value: int) -> None:
        response = params.get("/params", params={"wait": raw})
        assert response.status_code == 200, response.text
        assert response.json()["wait"] == value

    @pytest.mark.parametrize(
        "raw",
        ["301", "01", "010", "0300", "00", "+1", "-1", "1.0", "1e2", " 1", "1 ", "1\n",
         "", "abc", "\uff11", "\u0661", "9" * 2000],
    )  # fmt: skip
    def test_anything_else_is_one_error_with_the_raw_value(self, params: Any, raw: str) -> None:
        """Out of range, signed, padded, fractional, non-ASCII digits: ``query.<name>``."""
        response = params.get("/params", params={"wait": raw})
        assert response.status_code == 422, response.text
        assert response.json()["errors"] == [
            {
                "location": "query.wait",
                "message": "Expected whole seconds from 0 to 300, in plain digits without a "
                "leading zero.",
                "value": echo(raw),
            }
        ]

    @pytest.mark.parametrize("values", [["1", "999"], ["999", "1"], ["5", "5"], ["", ""]])
    def test_given_more_than_once_is_an_error_in_any_order(
        self, params: Any, values: list[str]
    ) -> None:
        """Neither the first nor the last value wins: a parameter given twice is refused."""
        response = params.get("/params", params=[("wait", v) for v in values])
        assert response.status_code == 422, response.text
        assert response.json()["errors"] == [
            {
                "location": "query.wait",
                "message": "Given 2 times; give it at most once.",
                "value": None,
            }
        ]

    def test_absent_is_none_without_error(self, params: Any) -> None:
        response = params.get("/params")
        assert (response.status_code, response.json()) == (200, {"wait": None, "serverId": None})

    def test_uuid(self, params: Any) -> None:
        """``?serverId``: required, once, canonical; every broken rule in one answer."""
        sid = "123e4567-e89b-12d3-a456-426614174000"
        assert params.get("/required", params={"serverId": sid}).text == sid
        twice = "Given 2 times; give it at most once."
        cases = [
            ("/required", {}, None, "Field required."),
            ("/params", {"serverId": "nope", "wait": "0"}, "nope", None),
            ("/params", [("serverId", sid), ("serverId", sid)], None, twice),
            ("/params", {"serverId": sid.replace("-", "")}, sid.replace("-", ""), None),
        ]
        for path, query, value, message in cases:
            response = params.get(path, params=query)
            assert response.status_code == 422, (query, response.text)
            errors = {e["location"]: e for e in response.json()["errors"]}
            error = errors.pop("query.serverId")
            assert error["value"] == value, query
            assert message is None or error["message"] == message
            assert set(errors) <= {"query.wait"}

    def test_echo_is_short(self) -> None:
        assert echo("x" * 5000) == "x" * 200 + "…"
        assert echo("short") == "short"


def _document() -> dict[str, Any]:
    problem = {
        "content": {
            "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}
        }
    }
    return {
        "openapi": "3.1.0",
        "paths": {
            "/api/agent/docker/deploy": {
                "post": {
                    "responses": {
                        "202": {"description": "ok", "headers": {}},
                        "200": {"description": "done"},
                        "401": {"description": "no", **problem},
                        "429": {"description": "slow", **problem},
                    }
                }
            },
            "/healthz": {
                "get": {
                    "responses": {"200": {"description": "ok", "content": {"application/json": {}}}}
                },
                "head": {
                    "responses": {"200": {"description": "ok", "content": {"application/json": {}}}}
                },
            },
        },
        "components": {"schemas": {"Problem": {"type": "object"}}},
    }


class TestOpenApiCompletion:
    def test_headers_and_500s(self) -> None:
        """401 → WWW-Authenticate, 429 → Retry-After, every response → X-Request-Id,
        deploy's 2xx → Location and Idempotent-Replayed, every operation → 500, every
        operation that reads the store → 503 with an optional Retry-After."""
        original = _document()
        done = complete(original)
        assert original == _document()  # a copy: Litestar's document is left alone
        assert done["components"]["headers"] == HEADERS
        deploy = done["paths"]["/api/agent/docker/deploy"]["post"]["responses"]
        assert set(deploy) == {"200", "202", "401", "429", "500", "503"}
        assert "503" not in done["paths"]["/healthz"]["get"]["responses"]

        def names(response: dict[str, Any]) -> set[str]:
            return set(response["headers"])

        assert names(deploy["202"]) == names(deploy["200"]) == {
            "X-Request-Id", "Location", "Idempotent-Replayed"
        }  # fmt: skip
        assert names(deploy["401"]) == {"X-Request-Id", "WWW-Authenticate"}
        assert names(deploy["429"]) == {"X-Request-Id", "Retry-After"}
        assert deploy["401"]["headers"]["WWW-Authenticate"] == {
            "$ref": "#/components/headers/WwwAuthenticate"
        }
        for status in ("401", "500", "503"):  # a problem each, with an example of its status
            media = deploy[status]["content"]["application/problem+json"]
            assert media["schema"] == {"$ref": "#/components/schemas/Problem"}
            examples = (
                [media["example"]]
                if "example" in media
                else [e["value"] for e in media["examples"].values()]
            )
            assert {e["status"] for e in examples} == {int(status)}
        assert deploy["503"]["headers"]["Retry-After"] == {
            "$ref": "#/components/headers/StoreRetryAfter"
        }
        assert HEADERS["StoreRetryAfter"]["required"] is False  # not on server-unreachable

    def test_head_operations_have_no_body(self) -> None:
        """A HEAD operation keeps the GET's statuses and headers, not its content."""
        done = complete(_document())["paths"]["/healthz"]
        assert "content" in done["get"]["responses"]["200"]
        for response in done["head"]["responses"].values():
            assert "content" not in response
            assert "X-Request-Id" in response["headers"]

    def test_needs_the_problem_schema(self) -> None:
        document = _document()
        del document["components"]["schemas"]["Problem"]
        with pytest.raises(ValueError, match="Problem"):
            complete(document)

    def test_header_values_the_server_sends_are_valid(self) -> None:
        """Each declared header schema takes what the server sends (jsonschema)."""
        from jsonschema import Draft202012Validator

        sent = {
            "RequestId": "0123456789abcdef0123456789abcdef",
            "WwwAuthenticate": "Bearer",
            "RetryAfter": 1,
            "DeploymentLocation": "/api/agent/deployments/123e4567-e89b-12d3-a456-426614174000",
            "ServerLocation": "/api/agent/servers/123e4567-e89b-12d3-a456-426614174000",
            "WebhookLocation": "/api/agent/webhooks/123e4567-e89b-12d3-a456-426614174000"
            "/deliveries",
            "IdempotentReplayed": "true",
            "StoreRetryAfter": 5,
            "RateLimitPolicy": '"requests";q=600;w=60',
            "RateLimit": '"requests";r=599;t=1',
            "ETag": '"Yq3k1s-_0aZ9"',
        }
        assert set(sent) == set(HEADERS)
        for name, value in sent.items():
            assert Draft202012Validator(HEADERS[name]["schema"]).is_valid(value), name


@get("/litestar-params", sync_to_thread=False)
def _litestar_params(
    tail: Annotated[int, QueryParameter(ge=1, le=5000)] = 100,
    lines: Annotated[int | None, QueryParameter(name="maxLines"), Rule("lines")] = None,
    ratio: Annotated[float | None, QueryParameter()] = None,
) -> dict[str, Any]:
    return {"tail": tail, "maxLines": lines, "ratio": ratio}


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # Parameter(query=…), as routes.py
class TestHandlerDocs:
    def test_sections(self) -> None:
        """Summary, description, ``Returns:`` and ``Raises:`` each fold to one line."""

        def handler() -> None:
            """Do the thing

            It does the thing, over
            two lines.

            Second paragraph.

            Returns:
                The thing,
                done.

            Raises:
                409: Already
                    done (conflict).
                503: Unreachable.
            """

        prose, raised = handler_docs(handler)
        assert prose == {
            "summary": "Do the thing",
            "description": "It does the thing, over two lines. Second paragraph.",
            "response_description": "The thing, done.",
        }
        assert raised == {409: "Already done (conflict).", 503: "Unreachable."}

    def test_no_docstring_is_no_prose(self) -> None:
        """A handler without a docstring documents nothing (its keyword arguments do)."""
        assert handler_docs(lambda: None) == ({}, {})

    def test_a_raises_line_without_a_status_is_refused(self) -> None:
        """A ``Raises:`` entry must start with its status: no error response goes missing."""

        def handler() -> None:
            """Summary

            Raises:
                Conflict: no status.
            """

        with pytest.raises(ValueError, match="Raises"):
            handler_docs(handler)

    def test_the_route_gets_them_and_keywords_win(self) -> None:
        """``documented`` puts the docstring on the operation; its own errors join the
        shared responses; a keyword argument overrides the docstring."""

        @documented(get, "/thing", "getThing", responses={401: problem_response("Refused.")})
        async def thing() -> str:
            """A thing

            Described.

            Returns:
                It.

            Raises:
                404: None here.
            """
            return "x"

        @documented(get, "/other", "getOther", description="By keyword.")
        async def other() -> str:
            """Other

            By docstring.
            """
            return "y"

        app = Litestar([thing, other])
        paths = app.openapi_schema.to_schema()["paths"]
        operation = paths["/thing"]["get"]
        assert operation["operationId"] == "getThing"
        assert (operation["summary"], operation["description"]) == ("A thing", "Described.")
        assert operation["responses"]["200"]["description"] == "It."
        assert operation["responses"]["404"]["description"] == "None here."
        assert operation["responses"]["401"]["description"] == "Refused."
        assert paths["/other"]["get"]["description"] == "By keyword."


class TestParameterErrors:
    """Any handler's parameters are read as the API's are; what Litestar itself still
    refuses (a type without a rule of berth's) is reported at its source, never a 500."""

    @pytest.fixture
    def client(self) -> Any:
        app = Litestar(
            [_litestar_params], before_request=read_inputs, exception_handlers=EXCEPTION_HANDLERS
        )
        with TestClient(app) as client:
            yield client

    @pytest.mark.parametrize(
        ("query", "location", "value", "message"),
        [
            ("tail=0", "query.tail", "0", "Expected an integer from 1 to 5000"),
            ("tail=5001", "query.tail", "5001", "Expected an integer from 1 to 5000"),
            ("tail=abc", "query.tail", "abc", "Expected an integer from 1 to 5000"),
            ("maxLines=x", "query.maxLines", "x", "Expected lines from 1 to"),
        ],
    )
    def test_location_message_and_value(
        self, client: Any, query: str, location: str, value: str, message: str
    ) -> None:
        """``query.<wire name>`` (never ``ParamType.QUERY.x``), a sentence, the raw value."""
        response = client.get(f"/litestar-params?{query}")
        assert response.status_code == 422, response.text
        (error,) = response.json()["errors"]
        assert (error["location"], error["value"]) == (location, value)
        assert error["message"].startswith(message)
        assert error["message"].endswith("in plain digits without a leading zero.")

    def test_what_litestar_refuses_is_a_422_at_its_source(self, client: Any) -> None:
        """A float parameter (no rule of berth's): Litestar's refusal, at ``query.ratio``."""
        response = client.get("/litestar-params?ratio=x")
        assert response.status_code == 422, response.text
        (error,) = response.json()["errors"]
        assert (error["location"], error["value"]) == ("query.ratio", None)
        assert error["message"]
