"""Every row of SPEC.md's error table, over real HTTP against a real ``berth serve``.

All requests go through :class:`harness.Api`, which checks each response against
the served OpenAPI document: a ``500`` is documented nowhere, so any ``500`` fails
the test that caused it. Hostile requests that may break the connection use a
plain httpx client and assert ``< 500`` themselves.

Three users share the module (the CLI is slow to start); every test uses its own
servers and app names, so no test sees another's data.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from berth.core import tokens
from harness import Api, BerthProcess, dumps, new_server, problem, without_request_id

DEPLOY = "/api/agent/docker/deploy"
MIB = 1024 * 1024
JSON = {"Content-Type": "application/json"}
NOT_MINE = "5b0b7d1e-4a0c-4c8e-9d3e-2f1a6c7b8d90"  # a UUID no server has
DIGEST = "sha256:" + "0123456789abcdef" * 4
D253 = ".".join(["a" * 63] * 3 + ["b" * 61])
REGISTRY_IMAGE = "registry.example.com:5000/team/app:1.2.3"
D254 = ".".join(["a" * 63] * 3 + ["b" * 62])
DROP = object()  # marks a field to leave out of the body
DEPLOY_FIELDS = {"serverId", "name", "image", "port", "domain", "env", "volumes"}
LOGS = f"/api/agent/installations/{NOT_MINE}/logs"


def body(**fields: Any) -> dict[str, Any]:
    """A valid deploy body (for a server nobody owns) with ``fields`` changed or dropped."""
    base: dict[str, Any] = {"serverId": NOT_MINE, "name": "app", "image": "nginx:1.27"}
    base.update(fields)
    return {k: v for k, v in base.items() if v is not DROP}


# The kind of each status's problems when no finer one applies (docs/decisions/).
STATUS_KINDS = {
    400: {"bad-json", "bad-request"},
    401: {"unauthorized"},
    404: {"not-found"},
    405: {"method-not-allowed"},
    409: {"conflict", "port-in-use", "domain-in-use", "deployment-running",
          "idempotency-key-reused"},
    413: {"body-too-large"},
    415: {"unsupported-media-type"},
    422: {"invalid-input"},
    429: {"rate-limited"},
}  # fmt: skip


def assert_problem(
    response: httpx.Response, status: int, kind: str | None = None
) -> dict[str, Any]:
    """``problem()`` plus the docs/decisions/ promises: a ``type`` per kind, ``errors`` and the
    request id. Only a 422 lists several errors; another problem caused by one input
    (a taken port, an unknown ``serverId``) names that one."""
    found = problem(response, status)
    assert found["requestId"], found
    assert found["requestId"] == response.headers["x-request-id"]
    prefix, _, found_kind = found["type"].rpartition(":")
    assert prefix == "urn:berth:problem", found["type"]
    assert found_kind == kind if kind else found_kind in STATUS_KINDS[status], found["type"]
    if status != 422:  # at most the one input that caused it (``body.port``), no value echoed
        assert len(found["errors"]) <= 1, found
        for error in found["errors"]:
            assert error["location"].startswith(("body.", "header.")), found
            assert (error["message"], error["value"]) == (found["detail"], None), found
    return found


def locations(response: httpx.Response) -> list[str]:
    """The sorted error locations of a 422, each entry checked for shape."""
    found = assert_problem(response, 422)
    for error in found["errors"]:
        assert isinstance(error["message"], str)
        assert error["message"]
        assert set(error) == {"location", "message", "value"}
        assert not isinstance(error["value"], dict | list)
        assert len(json.dumps(error["value"])) <= 210  # echoes are short
    return sorted(e["location"] for e in found["errors"])


@pytest.fixture(scope="module")
def tokens_(berth: BerthProcess) -> list[str]:
    """Three users' API tokens: validation, accepted deploys, conflicts."""
    return [token for _, token in berth.new_users(3, prefix="errors")]


@pytest.fixture(scope="module")
def api(berth: BerthProcess, tokens_: list[str]) -> Iterator[Api]:
    """A client for requests that are refused (they consume no deploy budget)."""
    with berth.api(tokens_[0]) as client:
        yield client


@pytest.fixture(scope="module")
def deployer(berth: BerthProcess, tokens_: list[str]) -> Iterator[Api]:
    """A client for accepted deploys (fewer than 30 a minute)."""
    with berth.api(tokens_[1]) as client:
        yield client


@pytest.fixture(scope="module")
def rival(berth: BerthProcess, tokens_: list[str]) -> Iterator[Api]:
    """A client for the conflict tests (fewer than 30 deploys a minute)."""
    with berth.api(tokens_[2]) as client:
        yield client


@pytest.fixture(scope="module")
def anonymous(berth: BerthProcess) -> Iterator[Api]:
    """A client without a token."""
    with berth.api() as client:
        yield client


def installations(client: Api, server_id: str) -> list[dict[str, Any]]:
    response = client.get("/api/agent/install", params={"serverId": server_id})
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["installations"]
    return found


STORED = ("id", "name", "containerName", "image", "port", "domain", "envKeys", "volumes")


def stored(client: Api, server_id: str) -> list[dict[str, Any]]:
    """What a deploy writes, without what a worker may change meanwhile (status, last run)."""
    return [{k: i[k] for k in (*STORED, "createdAt")} for i in installations(client, server_id)]


def deploy(client: Api, payload: Any, **kwargs: Any) -> httpx.Response:
    headers = {**JSON, **kwargs.pop("headers", {})}
    return client.post(DEPLOY, content=dumps(payload), headers=headers, **kwargs)


def unique(prefix: str = "app") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# --- 422: the table ---------------------------------------------------------

INVALID: list[tuple[str, Any, set[str]]] = [
    # missing and mistyped fields
    ("missing-serverId", body(serverId=DROP), {"body.serverId"}),
    ("missing-name", body(name=DROP), {"body.name"}),
    ("missing-image", body(image=DROP), {"body.image"}),
    ("empty-object", {}, {"body.serverId", "body.name", "body.image"}),
    ("serverId-not-uuid", body(serverId="abc"), {"body.serverId"}),
    ("serverId-number", body(serverId=5), {"body.serverId"}),
    ("serverId-null", body(serverId=None), {"body.serverId"}),
    ("port-string", body(port="80"), {"body.port"}),
    ("port-float", body(port=80.5), {"body.port"}),
    ("port-true", body(port=True), {"body.port"}),
    ("port-null", body(port=None), {"body.port"}),
    ("port-huge-int", body(port=10**30), {"body.port"}),
    ("name-number", body(name=5), {"body.name"}),
    ("name-null", body(name=None), {"body.name"}),
    ("image-list", body(image=["x"]), {"body.image"}),
    ("domain-number", body(domain=5), {"body.domain"}),
    ("env-list", body(env=["A=1"]), {"body.env"}),
    ("env-string", body(env="A=1"), {"body.env"}),
    ("env-value-number", body(env={"A": 1}), {"body.env.A"}),
    ("env-value-null", body(env={"A": None}), {"body.env.A"}),
    ("volumes-string", body(volumes="/srv/a:/data"), {"body.volumes"}),
    ("volumes-object", body(volumes={"/srv/a": "/data"}), {"body.volumes"}),
    ("volume-number", body(volumes=[5]), {"body.volumes[0]"}),
    # name
    ("name-empty", body(name=""), {"body.name"}),
    ("name-101-chars", body(name="n" * 101), {"body.name"}),
    ("name-nul", body(name="ab\x00cd"), {"body.name"}),
    ("name-only-symbols", body(name="!!!"), {"body.name"}),
    ("name-only-spaces", body(name="   "), {"body.name"}),
    ("name-one-char", body(name="a"), {"body.name"}),
    ("name-one-char-after-sanitizing", body(name="A!"), {"body.name"}),
    ("name-dashes", body(name="---"), {"body.name"}),
    ("name-dots-underscores", body(name="._-_."), {"body.name"}),
    # image
    ("image-empty", body(image=""), {"body.image"}),
    ("image-no-tag", body(image="nginx"), {"body.image"}),
    (
        "image-registry-port-no-tag",
        body(image="registry.example.com:5000/team/app"),
        {"body.image"},
    ),
    ("image-uppercase-repo", body(image="Nginx:1.27"), {"body.image"}),
    ("image-digest-without-tag", body(image=f"nginx@{DIGEST}"), {"body.image"}),
    ("image-bad-digest", body(image="nginx:1.27@sha256:abc"), {"body.image"}),
    ("image-space", body(image="nginx :1.27"), {"body.image"}),
    ("image-shell", body(image="nginx:1;rm -rf /"), {"body.image"}),
    ("image-newline", body(image="nginx:1.27\n"), {"body.image"}),
    ("image-cmd-subst", body(image="nginx:$(id)"), {"body.image"}),
    ("image-513-chars", body(image="a" * 509 + ":1.2"), {"body.image"}),
    # domain
    ("domain-single-label", body(domain="localhost"), {"body.domain"}),
    ("domain-leading-dash", body(domain="-app.example.com"), {"body.domain"}),
    ("domain-trailing-dash", body(domain="app-.example.com"), {"body.domain"}),
    ("domain-label-64", body(domain="a" * 64 + ".example.com"), {"body.domain"}),
    ("domain-254-chars", body(domain=D254), {"body.domain"}),
    ("domain-underscore", body(domain="my_app.example.com"), {"body.domain"}),
    ("domain-empty", body(domain=""), {"body.domain"}),
    ("domain-trailing-dot", body(domain="example.com."), {"body.domain"}),
    ("domain-empty-label", body(domain="app..example.com"), {"body.domain"}),
    ("domain-space", body(domain="my app.example.com"), {"body.domain"}),
    ("domain-cmd-subst", body(domain="$(id).example.com"), {"body.domain"}),
    ("domain-with-scheme", body(domain="https://example.com"), {"body.domain"}),
    # env
    ("env-key-leading-digit", body(env={"1A": "x"}), {"body.env.1A"}),
    ("env-key-dash", body(env={"A-B": "x"}), {"body.env.A-B"}),
    ("env-key-empty", body(env={"": "x"}), {"body.env."}),
    ("env-key-newline", body(env={"A\n": "x"}), {"body.env.A\n"}),
    ("env-key-257-chars", body(env={"K" * 257: "x"}), {"body.env." + "K" * 257}),
    ("env-201-keys", body(env={f"K{i}": "v" for i in range(201)}), {"body.env"}),
    ("env-value-nul", body(env={"A": "a\x00b"}), {"body.env.A"}),
    ("env-value-32769-bytes", body(env={"BIG": "x" * 32769}), {"body.env.BIG"}),
    ("env-value-32770-utf8-bytes", body(env={"BIG": "é" * 16385}), {"body.env.BIG"}),
    (
        "env-every-bad-entry-named",
        body(env={"OK": "1", "1X": "a", "NUL": "\x00", "N": 2}),
        {"body.env.1X", "body.env.NUL", "body.env.N"},
    ),
    # volumes
    ("volume-relative-container", body(volumes=["data:data"]), {"body.volumes[0]"}),
    ("volume-container-root", body(volumes=["/srv/a:/"]), {"body.volumes[0]"}),
    ("volume-dotdot", body(volumes=["/srv/../etc:/data"]), {"body.volumes[0]"}),
    ("volume-relative-dotdot", body(volumes=["../etc:/data"]), {"body.volumes[0]"}),
    ("volume-host-root", body(volumes=["/:/data"]), {"body.volumes[0]"}),
    (
        "volume-docker-socket",
        body(volumes=["/var/run/docker.sock:/var/run/docker.sock"]),
        {"body.volumes[0]"},
    ),
    ("volume-run-docker-socket", body(volumes=["/run/docker.sock:/sock"]), {"body.volumes[0]"}),
    ("volume-socket-double-slash", body(volumes=["/run//docker.sock:/sock"]), {"body.volumes[0]"}),
    ("volume-socket-dot-segment", body(volumes=["/./var/run/docker.sock:/s"]), {"body.volumes[0]"}),
    ("volume-var-run", body(volumes=["/var/run:/host-run"]), {"body.volumes[0]"}),
    ("volume-var-run-trailing-slash", body(volumes=["/var/run/:/host-run"]), {"body.volumes[0]"}),
    ("volume-var", body(volumes=["/var:/host-var"]), {"body.volumes[0]"}),
    ("volume-leading-double-slash-run", body(volumes=["//run:/r"]), {"body.volumes[0]"}),
    ("volume-etc", body(volumes=["/etc:/host-etc:ro"]), {"body.volumes[0]"}),
    ("volume-under-etc", body(volumes=["//etc/./ssh/:/ssh"]), {"body.volumes[0]"}),
    ("volume-proc", body(volumes=["/proc/1/root:/p"]), {"body.volumes[0]"}),
    ("volume-sys", body(volumes=["/sys:/s"]), {"body.volumes[0]"}),
    ("volume-dev", body(volumes=["/dev/sda:/d"]), {"body.volumes[0]"}),
    ("volume-boot", body(volumes=["/boot:/b"]), {"body.volumes[0]"}),
    ("volume-docker-state", body(volumes=["/var/lib/docker/volumes:/v"]), {"body.volumes[0]"}),
    ("volume-containerd-state", body(volumes=["/var/lib/containerd:/c"]), {"body.volumes[0]"}),
    (
        "volume-containerd-socket",
        body(volumes=["/run/containerd/containerd.sock:/c"]),
        {"body.volumes[0]"},
    ),
    (
        "volume-rootless-socket",
        body(volumes=["/home/u/.docker/run/docker.sock:/s"]),
        {"body.volumes[0]"},
    ),
    ("volume-bad-mode", body(volumes=["/srv/a:/data:rx"]), {"body.volumes[0]"}),
    ("volume-four-parts", body(volumes=["/srv/a:/data:ro:rw"]), {"body.volumes[0]"}),
    ("volume-no-container-path", body(volumes=["/srv/a"]), {"body.volumes[0]"}),
    ("volume-empty-string", body(volumes=[""]), {"body.volumes[0]"}),
    ("volume-dollar", body(volumes=["/srv/$HOME:/data"]), {"body.volumes[0]"}),
    ("volume-space", body(volumes=["/srv/my data:/data"]), {"body.volumes[0]"}),
    ("volume-newline", body(volumes=["/srv/a\n:/data"]), {"body.volumes[0]"}),
    ("volume-backtick", body(volumes=["/srv/`id`:/data"]), {"body.volumes[0]"}),
    (
        "volume-duplicate-container-path",
        body(volumes=["/srv/a:/data", "/srv/b:/data"]),
        {"body.volumes[1]"},
    ),
    (
        "volume-duplicate-respelled",
        body(volumes=["/srv/a:/data", "/srv/b:/data/:ro"]),
        {"body.volumes[1]"},
    ),
    ("volume-path-4097-chars", body(volumes=["/" + "p" * 4096 + ":/data"]), {"body.volumes[0]"}),
    ("volumes-101", body(volumes=[f"/srv/v{i}:/data/v{i}" for i in range(101)]), {"body.volumes"}),
    (
        "volume-bad-entries-each-named",
        body(volumes=["/srv/ok:/ok", "/:/x", "rel", "/a:/b"]),
        {"body.volumes[1]", "body.volumes[2]"},
    ),
    # port range
    ("port-0", body(port=0), {"body.port"}),
    ("port-65536", body(port=65536), {"body.port"}),
    ("port-negative", body(port=-1), {"body.port"}),
    # unknown fields
    ("unknown-field", body(extra=1), {"body.extra"}),
    (
        "snake-case-field",
        body(serverId=DROP, server_id=NOT_MINE),
        {"body.server_id", "body.serverId"},
    ),
    ("response-field-in-request", body(envKeys=["A"]), {"body.envKeys"}),
    # not an object
    ("body-list", [], {"body"}),
    ("body-list-of-object", [body()], {"body"}),
    ("body-string", "deploy", {"body"}),
    ("body-number", 5, {"body"}),
    ("body-null", None, {"body"}),
    ("body-true", True, {"body"}),
    # several at once: all listed
    (
        "several-bad-fields",
        {
            "serverId": "x",
            "name": "",
            "image": "nginx",
            "port": 0,
            "domain": "bad",
            "env": {"1": "x"},
            "volumes": ["rel:rel"],
            "zzz": 1,
        },
        {
            "body.serverId",
            "body.name",
            "body.image",
            "body.port",
            "body.domain",
            "body.env.1",
            "body.volumes[0]",
            "body.zzz",
        },
    ),
]


class TestDeployRefusesInvalidInput:
    """POST /api/agent/docker/deploy: 422 with one entry per broken rule."""

    @pytest.mark.parametrize(
        ("payload", "expected"), [pytest.param(b, e, id=i) for i, b, e in INVALID]
    )
    def test_invalid_body(self, api: Api, payload: Any, expected: set[str]) -> None:
        """An invalid body is a 422 listing exactly the broken fields' locations; nothing
        at ``body.env`` or under it, nor any unknown field, echoes its value."""
        response = deploy(api, payload)
        assert locations(response) == sorted(expected)
        for error in response.json()["errors"]:
            field = re.split(r"[.\[]", error["location"].removeprefix("body."))[0]
            if field == "env" or (error["location"] != "body" and field not in DEPLOY_FIELDS):
                assert error["value"] is None, error

    @pytest.mark.parametrize(
        ("params", "headers", "expected"),
        [
            pytest.param({"wait": "301"}, {}, {"query.wait"}, id="wait-301"),
            pytest.param({"wait": "abc"}, {}, {"query.wait"}, id="wait-abc"),
            pytest.param({"wait": "1.5"}, {}, {"query.wait"}, id="wait-fraction"),
            pytest.param({"wait": "-1"}, {}, {"query.wait"}, id="wait-negative"),
            pytest.param({"wait": ""}, {}, {"query.wait"}, id="wait-empty"),
            pytest.param({"wait": "\uff11"}, {}, {"query.wait"}, id="wait-fullwidth-digit"),
            pytest.param({"wait": "01"}, {}, {"query.wait"}, id="wait-leading-zero"),
            pytest.param({"wait": "010"}, {}, {"query.wait"}, id="wait-010"),
            pytest.param({"wait": "0300"}, {}, {"query.wait"}, id="wait-0300"),
            pytest.param({"wait": "+1"}, {}, {"query.wait"}, id="wait-plus"),
            pytest.param({"wait": "1e2"}, {}, {"query.wait"}, id="wait-exponent"),
            pytest.param({"wait": " 1"}, {}, {"query.wait"}, id="wait-space"),
            pytest.param({"wait": "9" * 30}, {}, {"query.wait"}, id="wait-huge"),
            pytest.param(
                {}, {"Idempotency-Key": "a b"}, {"header.Idempotency-Key"}, id="key-space"
            ),
            pytest.param({}, {"Idempotency-Key": ""}, {"header.Idempotency-Key"}, id="key-empty"),
            pytest.param(
                {}, {"Idempotency-Key": "k" * 256}, {"header.Idempotency-Key"}, id="key-256-chars"
            ),
            pytest.param(
                {},
                {"Idempotency-Key": "clé".encode()},
                {"header.Idempotency-Key"},
                id="key-non-ascii",
            ),
        ],
    )
    def test_invalid_query_or_header(
        self, api: Api, params: dict[str, str], headers: dict[str, Any], expected: set[str]
    ) -> None:
        """A bad ``?wait`` or ``Idempotency-Key`` is a 422 at ``query.wait`` or the header."""
        response = deploy(api, body(name=unique()), params=params, headers=headers)
        assert locations(response) == sorted(expected)

    def test_query_header_and_body_errors_together(self, api: Api) -> None:
        """Query, header and body errors come in one 422, all listed."""
        response = deploy(
            api,
            body(port="80", image="nginx"),
            params={"wait": "301"},
            headers={"Idempotency-Key": "with space"},
        )
        assert locations(response) == sorted(
            ["body.port", "body.image", "query.wait", "header.Idempotency-Key"]
        )

    @pytest.mark.parametrize("raw", ["01", "010", "0300", "abc", "00", "301", "", "1.0"])
    def test_bad_wait_is_reported_in_the_apis_form(self, api: Api, raw: str) -> None:
        """A refused ``?wait`` is at ``query.wait`` with a sentence and the raw value:
        never Litestar's ``ParamType.QUERY.wait`` and type names."""
        response = deploy(api, body(name=unique()), params={"wait": raw})
        assert locations(response) == ["query.wait"]
        (error,) = response.json()["errors"]
        assert error["value"] == raw
        assert error["message"] == (
            "Expected whole seconds from 0 to 300, in plain digits without a leading zero."
        )

    def test_wait_0_answers_at_once(self, api: Api) -> None:
        """``?wait=0`` is taken (no wait, as MCP's ``wait=0``), not a 422: the deploy to a
        server that is not the caller's goes on to its 404."""
        response = deploy(api, body(name=unique()), params={"wait": "0"})
        assert response.status_code == 404, response.text

    def test_bad_wait_and_bad_body_together(self, api: Api) -> None:
        """``?wait=01`` with an invalid body: both listed in one 422."""
        response = deploy(api, body(port=0), params={"wait": "01"})
        assert locations(response) == ["body.port", "query.wait"]

    @pytest.mark.parametrize(
        "values",
        [["1", "999"], ["999", "1"], ["5", "5"], ["5", "6", "7"]],
        ids=["valid-first", "valid-last", "same-twice", "three"],
    )
    def test_repeated_wait_is_refused(self, api: Api, values: list[str]) -> None:
        """``?wait`` given more than once is a 422, whatever the order of the values."""
        params = [("wait", v) for v in values]
        response = deploy(api, body(name=unique()), params=params)
        assert locations(response) == ["query.wait"]
        (error,) = response.json()["errors"]
        assert error["message"] == f"Given {len(values)} times; give it at most once."
        assert error["value"] is None

    def test_repeated_idempotency_key_is_refused(self, api: Api) -> None:
        """Two ``Idempotency-Key`` headers are a 422 at the header, not a silent pick."""
        response = deploy(
            api,
            body(name=unique()),
            headers=httpx.Headers([("Idempotency-Key", "a"), ("Idempotency-Key", "b")]),
        )
        assert locations(response) == ["header.Idempotency-Key"]

    @pytest.mark.parametrize(
        "params",
        [
            pytest.param({"tail": "0"}, id="0"),
            pytest.param({"tail": "5001"}, id="5001"),
            pytest.param({"tail": "abc"}, id="abc"),
            pytest.param({"tail": "01"}, id="leading-zero"),
            pytest.param({"tail": ""}, id="empty"),
            pytest.param({"tail": "-1"}, id="negative"),
            pytest.param([("tail", "5"), ("tail", "6")], id="repeated"),
        ],
    )
    def test_bad_tail(self, api: Api, params: Any) -> None:
        """A bad ``?tail`` is a 422 at ``query.tail`` (before the 404 of an unknown id),
        with the raw value and a sentence, like ``?wait``."""
        response = api.get(LOGS, params=params)
        assert locations(response) == ["query.tail"]
        (error,) = response.json()["errors"]
        if isinstance(params, dict):
            assert error["value"] == params["tail"]
            assert error["message"] == (
                "Expected a number of lines from 1 to 5000, in plain digits without a leading zero."
            )

    @pytest.mark.parametrize("tail", [None, "1", "100", "5000"])
    def test_good_tail_gets_past_the_check(self, api: Api, tail: str | None) -> None:
        """A valid ``?tail`` (or none) reaches the ownership check: 404 for an unknown id."""
        params = {} if tail is None else {"tail": tail}
        assert_problem(api.get(LOGS, params=params), 404)

    def test_repeated_server_id_is_refused(self, api: Api) -> None:
        """``GET /install`` with ``serverId`` twice is a 422 at ``query.serverId``."""
        response = api.get(
            "/api/agent/install", params=[("serverId", NOT_MINE), ("serverId", NOT_MINE)]
        )
        assert locations(response) == ["query.serverId"]

    def test_env_given_as_a_string_is_not_echoed(self, api: Api) -> None:
        """``env`` as ``"KEY=secret"`` is a 422 at ``body.env`` that does not echo it."""
        secret = f"s3cr3t-{uuid.uuid4().hex}"
        response = deploy(api, body(env=f"SECRET={secret}"))
        assert locations(response) == ["body.env"]
        assert response.json()["errors"][0]["value"] is None
        assert secret not in response.text

    @pytest.mark.parametrize(
        "fields",
        [
            pytest.param({"env": ["SECRET=%s"]}, id="env-list"),
            pytest.param({"env": {"BAD-KEY=%s": "x"}}, id="env-bad-key"),
            pytest.param({"Env": {"SECRET": "%s"}}, id="misspelt-env-object"),
            pytest.param({"environment": "SECRET=%s"}, id="unknown-field-string"),
        ],
    )
    def test_env_and_unknown_fields_are_never_echoed(
        self, api: Api, fields: dict[str, Any]
    ) -> None:
        """No error under ``body.env``, nor at an unknown field, carries a value; a secret
        appears in the answer at most as part of a location (a key the client sent)."""
        secret = f"s3cr3t-{uuid.uuid4().hex}"
        payload = body(**json.loads(json.dumps(fields).replace("%s", secret)))
        response = deploy(api, payload)
        assert response.status_code == 422
        for error in response.json()["errors"]:
            assert error["value"] is None, error
            assert secret not in error["message"]

    def test_refused_env_values_are_not_echoed(self, api: Api) -> None:
        """An env value refused for its content is named by key, never echoed."""
        secret = f"s3cret{uuid.uuid4().hex}"
        response = deploy(api, body(env={"TOKEN": secret + "\x00", "BIG": secret * 1000}))
        assert locations(response) == ["body.env.BIG", "body.env.TOKEN"]
        assert secret not in response.text

    def test_echoed_values_are_truncated(self, api: Api) -> None:
        """A long refused value is echoed shortened, so errors stay small."""
        response = deploy(api, body(name="x" * 50_000, domain="d" * 50_000))
        assert locations(response) == ["body.domain", "body.name"]
        assert len(response.content) < 4096

    def test_malformed_server_id_in_query_is_422(self, api: Api) -> None:
        """``GET /install?serverId=`` with a non-UUID is a 422 at ``query.serverId``."""
        response = api.get("/api/agent/install", params={"serverId": "not-a-uuid"})
        assert locations(response) == ["query.serverId"]

    def test_missing_server_id_in_query_is_422(self, api: Api) -> None:
        """``GET /install`` without ``serverId`` is a 422 at ``query.serverId``."""
        assert locations(api.get("/api/agent/install")) == ["query.serverId"]

    def test_server_id_and_include_both_wrong_are_both_named(self, api: Api) -> None:
        """``GET /install`` with a non-UUID ``serverId`` and an unknown ``include`` is one
        422 naming both."""
        response = api.get("/api/agent/install", params={"serverId": "x", "include": "all"})
        assert locations(response) == ["query.include", "query.serverId"]

    def test_invalid_create_server_body(self, api: Api) -> None:
        """``POST /servers`` lists every broken field too."""
        response = api.post(
            "/api/agent/servers",
            json={"name": "", "address": "not an address", "sshPort": 0, "x": 1},
        )
        assert locations(response) == [
            "body.address",
            "body.name",
            "body.sshPort",
            "body.x",
        ]


# --- 202: valid edge cases ---------------------------------------------------

ACCEPTED: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("name-100-chars", {"name": "n" * 100}, {"name": "n" * 100, "containerName": "n" * 100}),
    ("name-sanitized", {"name": "My App!"}, {"name": "My App!", "containerName": "my-app"}),
    (
        "name-symbols-collapse",
        {"name": "__Shop -- Front!!.v2__"},
        {"containerName": "shop-front-.v2"},
    ),
    ("name-unicode", {"name": "Café Ünïcode"}, {"containerName": "caf-n-code"}),
    (
        "domain-lowercased",
        {"domain": "App.EXAMPLE.com"},
        {"domain": "app.example.com", "url": "https://app.example.com"},
    ),
    ("domain-253-chars", {"domain": D253}, {"domain": D253}),
    (
        "domain-label-63",
        {"domain": "a" * 63 + ".example.com"},
        {"domain": "a" * 63 + ".example.com"},
    ),
    ("domain-null", {"domain": None}, {"domain": None, "url": "http://127.0.0.1:3000"}),
    ("env-value-32768-bytes", {"env": {"BIG": "x" * 32768}}, {"envKeys": ["BIG"]}),
    ("env-value-32768-utf8-bytes", {"env": {"BIG": "é" * 16384}}, {"envKeys": ["BIG"]}),
    (
        "env-200-keys",
        {"env": {f"K{i:03}": "v" for i in range(200)}},
        {"envKeys": [f"K{i:03}" for i in range(200)]},
    ),
    ("env-key-256-chars", {"env": {"_" + "K" * 255: ""}}, {"envKeys": ["_" + "K" * 255]}),
    ("env-null", {"env": None}, {"envKeys": []}),
    (
        "volumes-100",
        {"volumes": [f"/srv/v{i}:/data/v{i}" for i in range(100)]},
        {"volumes": [f"/srv/v{i}:/data/v{i}" for i in range(100)]},
    ),
    (
        "volume-relative-host",
        {"volumes": ["data:/var/lib/app"]},
        {"volumes": ["data:/var/lib/app"]},
    ),
    (
        "volume-ro-rw-and-allowed-chars",
        {"volumes": ["/srv/a:/config:ro", "/srv/b_c.d@e+f-g:/x:rw"]},
        {"volumes": ["/srv/a:/config:ro", "/srv/b_c.d@e+f-g:/x:rw"]},
    ),
    ("volumes-null", {"volumes": None}, {"volumes": []}),
    (
        "volume-returned-as-given",
        {"volumes": ["/srv//a/./b/:/data/"]},
        {"volumes": ["/srv//a/./b/:/data/"]},
    ),
    (
        "volume-path-4096-chars",
        {"volumes": ["/" + "p" * 4095 + ":/data"]},
        {"volumes": ["/" + "p" * 4095 + ":/data"]},
    ),
    (
        "image-registry-port-and-digest",
        {"image": f"{REGISTRY_IMAGE}@{DIGEST}"},
        {"image": f"{REGISTRY_IMAGE}@{DIGEST}"},
    ),
    (
        "image-tag-with-dots-dashes",
        {"image": "ghcr.io/org/app:v1.2.3-rc.1_build"},
        {"image": "ghcr.io/org/app:v1.2.3-rc.1_build"},
    ),
    ("port-1", {"port": 1}, {"port": 1, "url": "http://127.0.0.1:1"}),
    ("port-65535", {"port": 65535}, {"port": 65535}),
    ("port-default", {}, {"port": 3000}),
]


class TestDeployAcceptsEdgeCases:
    """POST /api/agent/docker/deploy: the boundaries of each rule are inside."""

    @pytest.mark.parametrize(
        ("fields", "expected"), [pytest.param(f, e, id=i) for i, f, e in ACCEPTED]
    )
    def test_accepted(
        self, deployer: Api, fields: dict[str, Any], expected: dict[str, Any]
    ) -> None:
        """A body at a rule's edge is a 202; the installation says what was stored."""
        server = new_server(deployer)
        payload = {"serverId": server["id"], "name": unique(), "image": "nginx:1.27", **fields}
        response = deploy(deployer, payload)
        assert response.status_code == 202, response.text
        deployment, installation = response.json()["deployment"], response.json()["installation"]
        assert response.headers["location"] == f"/api/agent/deployments/{deployment['id']}"
        assert deployment["state"] == "queued"
        assert {k: installation[k] for k in expected} == expected
        for key in ("image", "port", "domain", "envKeys", "volumes"):
            assert deployment[key] == installation[key]
        (listed,) = installations(deployer, server["id"])
        assert {k: listed[k] for k in expected} == expected


class TestEnvValuesStaySecret:
    """Env values go in; only their keys ever come out."""

    def test_values_never_returned(self, deployer: Api) -> None:
        """Quotes, $, backticks, $(…), newlines and Unicode are accepted; no response shows them."""
        marker = uuid.uuid4().hex
        env = {
            "QUOTES": f"{marker}\"double\" 'single'",
            "DOLLAR": f"{marker}$HOME ${{PATH}}",
            "BACKTICKS": f"{marker}`id`",
            "SUBST": f"{marker}$(rm -rf /)",
            "NEWLINES": f"{marker}line1\nline2\r\nline3",
            "UNICODE": f"{marker}héllo 🚀 \u202e 中文",
            "EMPTY": "",
        }
        server = new_server(deployer)
        response = deploy(
            deployer, {"serverId": server["id"], "name": unique(), "image": "a:1", "env": env}
        )
        assert response.status_code == 202, response.text
        deployment = response.json()["deployment"]
        assert deployment["envKeys"] == sorted(env)
        assert response.json()["installation"]["envKeys"] == sorted(env)
        reads = [
            response,
            deployer.get("/api/agent/install", params={"serverId": server["id"]}),
            deployer.get(f"/api/agent/deployments/{deployment['id']}"),
            deployer.get(f"/api/agent/servers/{server['id']}/containers"),
        ]
        for read in reads:
            assert read.status_code in (200, 202)
            assert marker not in read.text


# --- 400 ---------------------------------------------------------------------


class TestBadJson:
    """400: the body is not JSON at all."""

    @pytest.mark.parametrize(
        "raw",
        [
            pytest.param(b'{"name": ', id="truncated"),
            pytest.param(b"{name: 'app'}", id="js-object"),
            pytest.param(b'{"name": "app",}', id="trailing-comma"),
            pytest.param(b'{"a": 1} {"b": 2}', id="two-documents"),
            pytest.param(b'{"name": "\xff\xfe"}', id="invalid-utf8"),
            pytest.param(b'{"name": "\\ud800"}', id="lone-surrogate"),
            pytest.param(b'{"port": NaN}', id="nan"),
            pytest.param(b"", id="empty"),
            pytest.param(b"   \n", id="whitespace-only"),
        ],
    )
    def test_not_json(self, api: Api, raw: bytes) -> None:
        """A body that is not valid JSON (or none) is a 400 problem with no field errors."""
        assert_problem(api.post(DEPLOY, content=raw, headers=JSON), 400)

    def test_not_json_on_create_server(self, api: Api) -> None:
        """``POST /servers`` answers malformed JSON with 400 too."""
        assert_problem(api.post("/api/agent/servers", content=b"{", headers=JSON), 400)


# --- 401 ---------------------------------------------------------------------


def _checksum_flipped(token: str) -> str:
    last = token[-1]
    return token[:-1] + ("A" if last != "A" else "B")


class TestUnauthorized:
    """401: missing, malformed, unknown — one answer, no hint which."""

    def test_every_failure_looks_the_same(
        self, berth: BerthProcess, anonymous: Api, tokens_: list[str]
    ) -> None:
        """Every kind of bad credential gets the same 401 body and ``WWW-Authenticate: Bearer``."""
        real = tokens_[0]
        variants = {
            "missing": None,
            "basic": "Basic dXNlcjpwYXNzd29yZA==",
            "token-scheme": f"Token {real}",
            "bearer-only": "Bearer",
            "garbage": "Bearer not-a-token",
            "well-formed-unknown": f"Bearer {tokens.generate()}",
            "truncated": f"Bearer {real[:-1]}",
            "extended": f"Bearer {real}x",
            "bad-checksum": f"Bearer {_checksum_flipped(real)}",
            "enroll-prefix": f"Bearer berth_enroll_{real[len('berth_') :]}",
            "two-tokens": f"Bearer {real} {real}",
        }
        bodies = {}
        for name, value in variants.items():
            headers = {} if value is None else {"Authorization": value}
            response = anonymous.get("/api/agent/servers", headers=headers)
            found = assert_problem(response, 401)
            assert response.headers["www-authenticate"] == "Bearer", name
            bodies[name] = without_request_id(found)
        assert len({json.dumps(b, sort_keys=True) for b in bodies.values()}) == 1, bodies

    def test_enrollment_token_is_not_an_api_token(self, api: Api, anonymous: Api) -> None:
        """A server's enrollment token does not authenticate the API."""
        enrollment = new_server(api, enrolled=False)["enrollmentToken"]
        response = anonymous.get(
            "/api/agent/servers", headers={"Authorization": f"Bearer {enrollment}"}
        )
        assert_problem(response, 401)

    @pytest.mark.parametrize(
        ("method", "path"),
        [
            ("GET", "/api/agent/servers"),
            ("POST", "/api/agent/servers"),
            ("GET", f"/api/agent/servers/{NOT_MINE}"),
            ("GET", f"/api/agent/servers/{NOT_MINE}/containers"),
            ("GET", f"/api/agent/install?serverId={NOT_MINE}"),
            ("POST", DEPLOY),
            ("GET", f"/api/agent/deployments/{NOT_MINE}"),
        ],
    )
    def test_every_agent_route_needs_a_token(self, anonymous: Api, method: str, path: str) -> None:
        """Each /api/agent route answers 401 without a token, before looking at the body."""
        response = anonymous.request(method, path, content=b"not json", headers=JSON)
        assert_problem(response, 401)
        assert response.headers["www-authenticate"] == "Bearer"

    def test_huge_token_is_a_plain_401(self, anonymous: Api) -> None:
        """An 8 KiB bearer value is refused like any other bad token (16 KiB+: see below)."""
        response = anonymous.get(
            "/api/agent/servers", headers={"Authorization": "Bearer berth_" + "a" * 8192}
        )
        assert_problem(response, 401)
        assert len(response.content) < 1024


# --- 404 ---------------------------------------------------------------------


class TestNotFound:
    """404: unknown routes and ids that are not the caller's."""

    @pytest.mark.parametrize(
        ("method", "path"),
        [
            ("GET", "/api/agent/nope"),
            ("GET", "/api/agent/servers/x/y/z"),
            ("GET", "/nope"),
            ("GET", "/api/agent"),
            ("GET", "/api/agent/"),
            ("GET", "/api/agent/swagger"),
            ("GET", "/api/agent/openapi.yaml"),
            ("POST", "/api/agent/nope"),
            ("DELETE", "/api/v2/deploy"),
        ],
    )
    def test_unknown_route(self, api: Api, method: str, path: str) -> None:
        """An unknown route is a 404 problem+json (never an HTML page)."""
        assert_problem(api.request(method, path), 404)

    @pytest.mark.parametrize(
        "path",
        [
            f"/api/agent/servers/{NOT_MINE}",
            f"/api/agent/servers/{NOT_MINE}/containers",
            f"/api/agent/install?serverId={NOT_MINE}",
            f"/api/agent/deployments/{NOT_MINE}",
            f"/api/agent/deployments/{NOT_MINE.upper()}",
        ],
    )
    def test_unknown_id(self, api: Api, path: str) -> None:
        """A UUID that names none of the caller's resources is a 404."""
        assert_problem(api.get(path), 404)

    @pytest.mark.parametrize(
        "path",
        [
            "/api/agent/servers/not-a-uuid",
            "/api/agent/servers/not-a-uuid/containers",
            "/api/agent/deployments/123",
            "/api/agent/deployments/" + "f" * 5000,
            "/api/agent/servers/%00",
            "/api/agent/servers/..%2F..%2Fetc%2Fpasswd",
        ],
    )
    def test_non_uuid_path_id(self, api: Api, path: str) -> None:
        """A path id that is not a UUID names nothing: 404, like an unknown id."""
        assert_problem(api.get(path), 404)

    def test_deploy_to_unknown_server(self, api: Api) -> None:
        """A valid deploy body for a server that is not the caller's is a 404."""
        assert_problem(deploy(api, body(name=unique())), 404)


# --- 405 ---------------------------------------------------------------------


class TestMethodNotAllowed:
    """405: a known route with the wrong method."""

    @pytest.mark.parametrize(
        ("method", "path"),
        [
            ("DELETE", "/api/agent/servers"),
            ("PUT", f"/api/agent/servers/{NOT_MINE}"),
            ("PUT", DEPLOY),
            ("GET", DEPLOY),
            ("POST", "/api/agent/openapi.json"),
            ("POST", "/healthz"),
            ("DELETE", "/api/deploy"),
        ],
    )
    def test_wrong_method(self, api: Api, method: str, path: str) -> None:
        """A wrong method is a 405 problem+json."""
        assert_problem(api.request(method, path), 405)

    @pytest.mark.parametrize(
        ("method", "path"),
        [("PUT", DEPLOY), ("DELETE", "/api/agent/servers"), ("HEAD", "/api/agent/servers")],
    )
    def test_wrong_method_comes_before_authentication(
        self, anonymous: Api, method: str, path: str
    ) -> None:
        """Without a token a wrong method is still a 405, not a 401 (docs/decisions/:
        which methods a path takes is in the public document and says nothing of anyone's
        data)."""
        response = anonymous.request(method, path)
        assert response.status_code == 405
        if method != "HEAD":
            assert_problem(response, 405)


# --- HEAD ----------------------------------------------------------------------


class TestHead:
    """The public GET routes answer HEAD: the GET's status and headers, no body."""

    @pytest.mark.parametrize(
        "path", ["/api/deploy", "/api/agent/openapi.json", "/healthz", "/readyz"]
    )
    def test_head_is_get_without_the_body(self, anonymous: Api, path: str) -> None:
        """HEAD answers 200 with the GET's Content-Type and Content-Length and no body."""
        got = anonymous.get(path)
        head = anonymous.head(path)
        assert (head.status_code, got.status_code) == (200, 200)
        assert head.content == b""
        assert head.headers["content-type"] == got.headers["content-type"]
        assert head.headers["content-length"] == str(len(got.content))
        assert head.headers["x-request-id"]

    def test_head_of_an_unknown_path_is_a_bodiless_404(self, anonymous: Api) -> None:
        """HEAD elsewhere gets the status a GET would (here 404), without a body."""
        response = anonymous.head("/api/agent/nope")
        assert response.status_code == 404
        assert response.content == b""


# --- 409 ---------------------------------------------------------------------


class TestConflict:
    """409: a domain or host port already used by another installation on the server."""

    def _deploy(self, rival: Api, server: dict[str, Any], **fields: Any) -> httpx.Response:
        payload = {"serverId": server["id"], "name": unique(), "image": "nginx:1.27", **fields}
        return deploy(rival, payload)

    def test_domain_used_by_another_installation(self, rival: Api) -> None:
        """A domain held by another installation on the server is a 409; nothing is written."""
        server = new_server(rival)
        assert self._deploy(rival, server, domain="shop.example.com").status_code == 202
        before = stored(rival, server["id"])
        for again in (
            self._deploy(rival, server, domain="shop.example.com", port=4000),
            self._deploy(rival, server, domain="SHOP.Example.COM"),
        ):
            found = assert_problem(again, 409, "domain-in-use")
            assert [e["location"] for e in found["errors"]] == ["body.domain"]
        assert stored(rival, server["id"]) == before

    def test_host_port_used_by_another_installation(self, rival: Api) -> None:
        """A host port held by another domain-less installation is a 409; nothing is written."""
        server = new_server(rival)
        assert self._deploy(rival, server, port=8080).status_code == 202
        before = stored(rival, server["id"])
        response = self._deploy(rival, server, port=8080)
        found = assert_problem(response, 409, "port-in-use")
        assert "8080" in found["detail"]
        assert [e["location"] for e in found["errors"]] == ["body.port"]
        assert stored(rival, server["id"]) == before

    def test_a_pending_server_is_named(self, rival: Api) -> None:
        """Deploying to a server that has not enrolled: 409 server-pending at body.serverId."""
        server = new_server(rival, enrolled=False)
        found = assert_problem(self._deploy(rival, server), 409, "server-pending")
        assert [e["location"] for e in found["errors"]] == ["body.serverId"]

    def test_reads_on_a_pending_server_are_server_pending(self, rival: Api) -> None:
        """Reads that would ask a server that has not enrolled are 409 server-pending (not a
        503 nor an offline list), with an address or without."""
        for fields in ({"address": "127.0.0.1", "sshPort": 1}, {}):
            server = new_server(rival, enrolled=False, **fields)
            for path in ("containers", "disk"):
                response = rival.get(f"/api/agent/servers/{server['id']}/{path}")
                found = assert_problem(response, 409, "server-pending")
                assert found["errors"] == []

    def test_a_reused_idempotency_key_is_named(self, rival: Api) -> None:
        """The same Idempotency-Key with another body: 409 at header.Idempotency-Key."""
        server = new_server(rival)
        key = {"Idempotency-Key": unique()}
        assert deploy(rival, {"serverId": server["id"], "name": unique(), "image": "nginx:1.27"},
                      headers=key).status_code == 202  # fmt: skip
        response = deploy(
            rival, {"serverId": server["id"], "name": unique(), "image": "nginx:1.27"}, headers=key
        )
        found = assert_problem(response, 409, "idempotency-key-reused")
        assert [e["location"] for e in found["errors"]] == ["header.Idempotency-Key"]

    def test_an_unknown_server_is_named(self, rival: Api) -> None:
        """A deploy to a serverId that is not the caller's: 404 at body.serverId."""
        found = assert_problem(self._deploy(rival, {"id": str(uuid.uuid4())}), 404, "not-found")
        assert [e["location"] for e in found["errors"]] == ["body.serverId"]

    def test_same_port_with_a_domain_is_allowed(self, rival: Api) -> None:
        """Domain apps publish on their own ports, so they may share a container port."""
        server = new_server(rival)
        assert self._deploy(rival, server, port=8081).status_code == 202
        assert self._deploy(rival, server, port=8081, domain="a.example.com").status_code == 202
        assert self._deploy(rival, server, port=8081, domain="b.example.com").status_code == 202
        assert len(installations(rival, server["id"])) == 3

    def test_redeploy_of_the_same_name_is_not_a_conflict(self, rival: Api) -> None:
        """A redeploy (same container name, any spelling) keeps its port and domain: no 409."""
        server = new_server(rival)
        suffix = uuid.uuid4().hex[:8]
        payload = {
            "serverId": server["id"],
            "name": f"shop-{suffix}",
            "image": "nginx:1.27",
            "port": 8082,
            "domain": "same.example.com",
        }
        first = deploy(rival, payload)
        assert first.status_code == 202, first.text
        second = deploy(rival, {**payload, "name": f"Shop {suffix.upper()}!", "image": "a:2"})
        if second.status_code == 409:  # a worker already runs the first: that is the only 409
            assert "running" in assert_problem(second, 409, "deployment-running")["detail"]
            return
        assert second.status_code == 202, second.text
        installation = second.json()["installation"]
        assert installation["id"] == first.json()["installation"]["id"]
        assert (installation["name"], installation["containerName"]) == (
            f"Shop {suffix.upper()}!",
            f"shop-{suffix}",
        )
        assert len(installations(rival, server["id"])) == 1

    def test_other_servers_do_not_conflict(self, rival: Api) -> None:
        """The same domain and port on two different servers are both accepted."""
        for _ in range(2):
            server = new_server(rival)
            response = self._deploy(rival, server, port=8083, domain="twin.example.com")
            assert response.status_code == 202, response.text


# --- 413 ---------------------------------------------------------------------


def padded(payload: dict[str, Any], size: int) -> bytes:
    """``payload`` as JSON, padded with trailing whitespace to exactly ``size`` bytes."""
    raw = dumps(payload)
    assert len(raw) <= size
    return raw + b" " * (size - len(raw))


class TestBodyTooLarge:
    """413: bodies over 1 MiB, however they are sent."""

    def test_just_over_the_limit(self, api: Api) -> None:
        """A body of 1 MiB + 1 byte is a 413."""
        response = api.post(DEPLOY, content=padded(body(), MIB + 1), headers=JSON)
        assert_problem(response, 413)

    def test_exactly_at_the_limit_is_accepted(self, api: Api) -> None:
        """A valid body of exactly 1 MiB is deployed (202), not a 413."""
        server = new_server(api)
        payload = {"serverId": server["id"], "name": unique(), "image": "nginx:1.27"}
        response = api.post(DEPLOY, content=padded(payload, MIB), headers=JSON)
        assert response.status_code == 202, response.text

    def test_chunked_over_the_limit(self, api: Api) -> None:
        """A chunked body without Content-Length is cut off at 1 MiB too."""

        def chunks() -> Iterator[bytes]:
            yield b'{"name": "'
            for _ in range(20):
                yield b"a" * 65536
            yield b'"}'

        assert_problem(api.post(DEPLOY, content=chunks(), headers=JSON), 413)

    def test_over_the_limit_on_create_server(self, api: Api) -> None:
        """``POST /servers`` has the same limit."""
        response = api.post(
            "/api/agent/servers", content=padded({"name": "x"}, MIB + 1), headers=JSON
        )
        assert_problem(response, 413)


# --- 415 ---------------------------------------------------------------------


class TestUnsupportedMediaType:
    """415: a POST body that is not declared ``application/json``."""

    @pytest.mark.parametrize(
        "content_type",
        [
            pytest.param("text/plain", id="text-plain"),
            pytest.param(None, id="none"),
            pytest.param("application/x-www-form-urlencoded", id="form"),
            pytest.param("multipart/form-data; boundary=x", id="multipart"),
            pytest.param("application/xml", id="xml"),
            pytest.param("application/jsonx", id="json-lookalike"),
            pytest.param("application/problem+json", id="problem-json"),
        ],
    )
    def test_not_json(self, api: Api, content_type: str | None) -> None:
        """A POST body declared as anything but ``application/json`` (or not at all) is a 415."""
        headers = {} if content_type is None else {"Content-Type": content_type}
        response = api.post(DEPLOY, content=dumps(body()), headers=headers)
        assert_problem(response, 415)

    def test_form_fields(self, api: Api) -> None:
        """A form post is a 415."""
        assert_problem(api.post(DEPLOY, data={"name": "app"}), 415)

    @pytest.mark.parametrize(
        "content_type", ["application/json; charset=utf-8", "Application/JSON"]
    )
    def test_json_with_parameters_is_accepted(self, api: Api, content_type: str) -> None:
        """``application/json`` with parameters or in another case is read as JSON."""
        response = api.post(DEPLOY, content=b"{}", headers={"Content-Type": content_type})
        assert locations(response) == ["body.image", "body.name", "body.serverId"]


# --- check order ---------------------------------------------------------------


class TestCheckOrder:
    """401 → 415 → 413 → 400 → 422 → 404, as docs/decisions/ orders them."""

    @pytest.mark.parametrize(
        ("authenticated", "content_type", "raw", "params", "status"),
        [
            pytest.param(False, "text/plain", b"x" * (MIB + 1), {}, 401, id="401-before-415"),
            pytest.param(True, "text/plain", b"x" * (MIB + 1), {}, 415, id="415-before-413"),
            pytest.param(True, "application/json", b"{" * (MIB + 1), {}, 413, id="413-before-400"),
            pytest.param(True, "application/json", b"{", {"wait": "301"}, 400, id="400-before-422"),
            pytest.param(
                True, "application/json", dumps(body(port=0)), {}, 422, id="422-before-404"
            ),
            pytest.param(True, "application/json", dumps(body()), {}, 404, id="404-last"),
        ],
    )
    def test_first_failed_check_answers(
        self,
        api: Api,
        anonymous: Api,
        authenticated: bool,
        content_type: str,
        raw: bytes,
        params: dict[str, str],
        status: int,
    ) -> None:
        """When several checks fail, the earliest one in the order answers."""
        client = api if authenticated else anonymous
        response = client.post(
            DEPLOY, content=raw, params=params, headers={"Content-Type": content_type}
        )
        assert_problem(response, status)


# --- hostile input -----------------------------------------------------------


class TestHostileInput:
    """Oversized or pathological requests are refused cleanly: never a 500, never a crash."""

    def _still_healthy(self, berth: BerthProcess) -> None:
        assert httpx.get(f"{berth.url}/healthz", timeout=10).status_code == 200

    @pytest.mark.parametrize("size", [1_000_000, 8_000_000])
    def test_huge_header(self, berth: BerthProcess, tokens_: list[str], size: int) -> None:
        """A megabytes-long header is refused (4xx or a closed connection) and the server lives."""
        headers = {"Authorization": f"Bearer {tokens_[0]}", "X-Padding": "a" * size}
        try:
            response = httpx.get(f"{berth.url}/api/agent/servers", headers=headers, timeout=30)
        except httpx.TransportError:
            pass  # the connection was closed on us: refused
        else:
            assert 400 <= response.status_code < 500, response.status_code
        self._still_healthy(berth)

    def test_many_headers(self, berth: BerthProcess, tokens_: list[str]) -> None:
        """Thousands of headers get an answer below 500 (or a closed connection)."""
        headers = {f"X-H{i}": "v" * 100 for i in range(5000)}
        headers["Authorization"] = f"Bearer {tokens_[0]}"
        try:
            response = httpx.get(f"{berth.url}/api/agent/servers", headers=headers, timeout=30)
        except httpx.TransportError:
            pass
        else:
            assert response.status_code < 500
        self._still_healthy(berth)

    def test_huge_idempotency_key_and_wait(self, api: Api) -> None:
        """An 8 KiB Idempotency-Key and a 2 KiB ``wait`` are 422s with short echoes."""
        response = deploy(
            api, body(), params={"wait": "9" * 2048}, headers={"Idempotency-Key": "k" * 8192}
        )
        assert locations(response) == ["header.Idempotency-Key", "query.wait"]
        assert len(response.content) < 4096

    @pytest.mark.parametrize(
        "raw",
        [
            pytest.param(b"[" * 100_000 + b"]" * 100_000, id="arrays-100k-deep"),
            pytest.param(b'{"a":' * 50_000 + b"1" + b"}" * 50_000, id="objects-50k-deep"),
            pytest.param(
                b'{"serverId": "x", "name": "app", "image": "a:1", "env": {"A": '
                + b"[" * 20_000
                + b"]" * 20_000
                + b"}}",
                id="deep-inside-env",
            ),
        ],
    )
    def test_deeply_nested_json(self, api: Api, raw: bytes) -> None:
        """Deeply nested JSON is refused with a 4xx problem, not a 500."""
        response = api.post(DEPLOY, content=raw, headers=JSON)
        assert response.status_code in (413, 422), response.text
        assert_problem(response, response.status_code)

    def test_nested_value_in_a_field(self, api: Api) -> None:
        """A moderately nested value where a string belongs is a 422 at that field."""
        nested: Any = "x"
        for _ in range(200):
            nested = [nested]
        assert locations(deploy(api, body(name=nested))) == ["body.name"]

    def test_one_mib_string_in_a_field(self, api: Api) -> None:
        """A 1 MiB string in one field makes the body too large: 413."""
        assert_problem(deploy(api, body(name="a" * MIB)), 413)

    def test_almost_one_mib_string_in_a_field(self, api: Api) -> None:
        """A string just under the body limit is a 422 whose echo stays short."""
        response = deploy(api, body(image="a" * (MIB - 200)))
        assert locations(response) == ["body.image"]
        assert len(response.content) < 4096

    def test_many_unknown_fields(self, api: Api) -> None:
        """Thousands of unknown fields are all reported, without a 500."""
        payload = body(**{f"f{i}": i for i in range(5000)})
        assert len(locations(deploy(api, payload))) == 5000

    def test_huge_numbers(self, api: Api) -> None:
        """Numbers beyond 64 bits or floats beyond double range do not break decoding."""
        assert locations(deploy(api, body(port=10**400))) == ["body.port"]
        response = api.post(DEPLOY, content=b'{"port": 1e999}', headers=JSON)
        assert locations(response) == ["body.image", "body.name", "body.port", "body.serverId"]

    @pytest.mark.parametrize(
        "number",
        [b"1e400", b"-1e400", b"1.5E+99999", b"1" * 5000, b"-" + b"9" * 4301, b"1e-400"],
        ids=["1e400", "-1e400", "huge-exponent", "5000-digits", "negative-4301-digits", "tiny"],
    )
    def test_out_of_range_numbers_are_valid_json(self, api: Api, number: bytes) -> None:
        """A number no float or int here can hold is still valid JSON: 422 at its field,
        with no value echoed (JSON cannot carry it), never a 400."""
        raw = dumps(body(name=unique())).replace(b'"name"', b'"port": ' + number + b', "name"')
        response = api.post(DEPLOY, content=raw, headers=JSON)
        assert locations(response) == ["body.port"]
        value = response.json()["errors"][0]["value"]
        assert value is None or value == 0  # 1e-400 is 0.0: an honest zero

    @pytest.mark.parametrize(
        "raw",
        [
            pytest.param(b'{"port": 1e400, "name": NaN}', id="nan-after"),
            pytest.param(b'{"port": 1e400, "name": Infinity}', id="infinity-after"),
            pytest.param(b'{"port": 1e400, "name": "\\ud800"}', id="lone-surrogate-after"),
            pytest.param(b'{"port": 1e400, "name": "\xff"}', id="bad-utf8-after"),
            pytest.param(b'{"port": 1e400,}', id="trailing-comma-after"),
            pytest.param(b'{"port": 1e400} {}', id="two-documents"),
            pytest.param(b'{"port": ' + b"1" * 5000 + b", 01}", id="leading-zero-after"),
        ],
    )
    def test_invalid_json_after_a_huge_number_is_still_400(self, api: Api, raw: bytes) -> None:
        """Past an out-of-range number the rest of the body is held to the same grammar."""
        assert_problem(api.post(DEPLOY, content=raw, headers=JSON), 400)
