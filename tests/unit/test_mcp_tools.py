"""The MCP tools in process: their schemas (from the core's aliases), their errors, and
both backends — the library facade (over the fakes) and ``berth.client.AsyncClient``
(over the HTTP app on the same fakes), which answer the same calls with the same JSON."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from uuid import uuid4

import builders
import httpx
import msgspec
import pytest
from berth.client import ApiError, AsyncClient, Unreachable
from berth.core import commands as c
from berth.core.access import Actor, TokenScope
from berth.core.errors import Conflict, FieldError, InvalidInput, NotFound, RateLimited
from berth.core.models import Server, ServerStatus, User
from berth.core.types import ENV_KEY_PATTERN, IMAGE_PATTERN, Port
from berth.entrypoints.http import create_app
from berth.entrypoints.mcp import tools as tools_module
from berth.entrypoints.mcp.mounted import FacadeBackend
from berth.entrypoints.mcp.stdio import stdio_server
from berth.entrypoints.mcp.tools import (
    TOOL_NAMES,
    build_server,
    failure_text,
    rules_of,
)
from berth.entrypoints.settings import Settings
from berth.facade import Berth
from litestar.testing import TestClient
from mcp import Client as McpClient
from mcp import MCPError
from mcp.server.mcpserver.exceptions import ToolError
from mcp_catalogue import READ_TOOLS
from problems import problem_body
from wiring import App, unique_email

SECRET = "hunter2-$HOME"
ANY_ID = "0b5d4c36-1d6a-4d0e-9a53-6f1f6f0b8a11"


def _bus_server(app: App, user: User) -> Any:
    return build_server(lambda ctx: FacadeBackend(Berth(app.bus), user))


def _deploy_args(server: Server, **more: Any) -> dict[str, Any]:
    return {"server_id": str(server.id), "name": "web", "image": "nginx:1.27", **more}


class TestSchemas:
    def test_rules_come_from_the_core_aliases(self) -> None:
        """An alias's msgspec.Meta becomes JSON Schema keywords."""
        assert rules_of(Port) == {
            "minimum": 1,
            "maximum": 65535,
            "description": "TCP port, 1-65535.",
        }

    async def test_deploy_schema_shows_the_api_rules(self, app: App, owner: User) -> None:
        """deploy's schema carries the image pattern, the env key pattern and the enum."""
        tools = {t.name: t for t in await _bus_server(app, owner).list_tools()}
        props = tools["deploy"].input_schema["properties"]
        assert props["image"]["pattern"] == IMAGE_PATTERN
        assert props["env"]["propertyNames"]["pattern"] == ENV_KEY_PATTERN
        assert props["restart"]["enum"] == ["unless-stopped", "always", "on-failure", "no"]
        assert props["wait"]["maximum"] == 300

    async def test_every_tool_is_described_and_annotated(self, app: App, owner: User) -> None:
        """Each of the seventeen tools has a description and annotations."""
        tools = await _bus_server(app, owner).list_tools()
        # TOOL_NAMES are TOOL_RIGHTS' keys: a tool without a right (offered to none) fails
        assert [t.name for t in tools] == list(TOOL_NAMES)
        for tool in tools:
            assert tool.description, tool.name
            assert tool.annotations is not None, tool.name
            assert tool.annotations.read_only_hint is tool.name.startswith(
                ("list_", "get_", "logs", "whoami")
            )


class TestErrors:
    def test_invalid_input_lists_every_field(self) -> None:
        """Each broken field is one line: its location and the core's message."""
        text = failure_text(
            InvalidInput([FieldError("port", "Too big."), FieldError("env.A-B", "Bad key.")])
        )
        assert text.splitlines() == [
            "invalid-input: 2 invalid argument(s); fix each and call again:",
            "- port: Too big.",
            "- env.A-B: Bad key.",
        ]

    def test_other_errors_name_their_kind(self) -> None:
        """Not found, a conflict on a field and a rate limit say what and when."""
        assert failure_text(NotFound("Server not found.")) == "not-found: Server not found."
        assert failure_text(Conflict("Port taken.", field="port")).endswith("(argument `port`)")
        assert "Retry after 7 seconds." in failure_text(RateLimited(7))

    def test_api_problems_name_the_tools_arguments(self) -> None:
        """An API problem's locations become the tools' names; env keys stay as given."""
        body = problem_body(
            422,
            "invalid-input",
            "3 invalid field(s).",
            ("body.healthPath", "Must start with /."),
            ("body.env.My-Key", "Bad key."),
            ("query.include", "The only value is removed."),
        )
        arguments = AsyncClient.deploy.arguments | AsyncClient.installations.arguments
        error = ApiError.of(422, body, {}, arguments)
        text = failure_text(error)
        assert "- health_path: Must start with /." in text
        assert "- env.My-Key: Bad key." in text
        assert "- include_removed: The only value is removed." in text

    def test_a_401_says_to_check_the_token(self) -> None:
        """An unauthorized answer points at BERTH_TOKEN."""
        body = problem_body(401, "unauthorized", "A valid API token.")
        assert "BERTH_TOKEN" in failure_text(ApiError.of(401, body, {}))

    def test_an_api_conflict_on_a_field_and_a_429_read_as_the_cores(self) -> None:
        """A 409 naming one input and a 429 read as the facade's errors do."""
        conflict = problem_body(409, "port-in-use", "Port taken.", ("body.port", "Port taken."))
        error = ApiError.of(409, conflict, {}, AsyncClient.deploy.arguments)
        assert failure_text(error) == failure_text(
            Conflict("Port taken.", kind="port-in-use", field="port")
        )
        limited = problem_body(429, "rate-limited", "Slow down.")
        error = ApiError.of(429, limited, {"Retry-After": "7"})
        assert failure_text(error) == failure_text(RateLimited(7, "Slow down."))

    def test_unreachable_says_to_check_the_url(self) -> None:
        """No answer at all points at BERTH_URL."""
        text = failure_text(Unreachable("berth is not reachable at http://x: refused"))
        assert text.startswith("unreachable: berth is not reachable at http://x")
        assert "BERTH_URL" in text


class TestFacadeBackend:
    async def test_deploy_queues_and_says_how_to_follow(
        self, app: App, owner: User, server: Server
    ) -> None:
        """A deploy returns the queued deployment, its env keys only, and the next step."""
        result = await _bus_server(app, owner).call_tool(
            "deploy", _deploy_args(server, env={"TOKEN": SECRET})
        )
        body = result.structured_content
        assert body["deployment"]["state"] == "queued"
        assert body["deployment"]["envKeys"] == ["TOKEN"]
        assert f"deployment_id={body['deployment']['id']}" in body["next"]
        assert SECRET not in result.model_dump_json()

    async def test_list_servers_pages_and_filters(self, app: App, owner: User) -> None:
        """list_servers pages (limit, then nextCursor as cursor), filters by name and status,
        and refuses a cursor that names no server; list_revisions takes before."""
        tools = _bus_server(app, owner)
        for name in ("web-1", "web-2", "db-1"):
            await app.bus.handle(c.parse_create_server({"name": name}), owner)
        first = (await tools.call_tool("list_servers", {"limit": 2})).structured_content
        assert [s["name"] for s in first["servers"]] == ["web-1", "web-2"]
        assert first["nextCursor"] in first["next"]
        rest = await tools.call_tool("list_servers", {"limit": 2, "cursor": first["nextCursor"]})
        assert [s["name"] for s in rest.structured_content["servers"]] == ["db-1"]
        assert rest.structured_content.get("nextCursor") is None
        named = await tools.call_tool("list_servers", {"name": "WEB", "status": "pending"})
        assert [s["name"] for s in named.structured_content["servers"]] == ["web-1", "web-2"]
        with pytest.raises(ToolError, match="cursor"):
            await tools.call_tool("list_servers", {"cursor": str(uuid4())})
        tool = {t.name: t for t in await tools.list_tools()}["list_revisions"]
        assert "before" in tool.input_schema["properties"]

    async def test_an_idempotency_key_makes_a_retry_return_the_first_deployment(
        self, app: App, owner: User, server: Server
    ) -> None:
        """The same key and arguments return the first deployment; other arguments under
        that key are an error naming the reused key; no key queues a new one."""
        tools = _bus_server(app, owner)
        args = _deploy_args(server, idempotency_key="retry-1")
        first = (await tools.call_tool("deploy", args)).structured_content
        again = (await tools.call_tool("deploy", args)).structured_content
        assert again["deployment"]["id"] == first["deployment"]["id"]
        with pytest.raises(ToolError, match="idempotency-key-reused"):
            await tools.call_tool("deploy", {**args, "image": "nginx:1.28"})
        fresh = (await tools.call_tool("deploy", _deploy_args(server))).structured_content
        assert fresh["deployment"]["id"] != first["deployment"]["id"]

    @pytest.mark.parametrize("key", ["", "has space", "x" * 256, "tab\there", "é"])
    async def test_a_bad_idempotency_key_is_refused(
        self, app: App, owner: User, server: Server, key: str
    ) -> None:
        with pytest.raises(ToolError, match="idempotency_key"):
            await _bus_server(app, owner).call_tool(
                "deploy", _deploy_args(server, idempotency_key=key)
            )

    async def test_an_invalid_deploy_names_every_field(
        self, app: App, owner: User, server: Server
    ) -> None:
        """Port, image, env key and name are all reported, by the core's parser."""
        args = _deploy_args(server, name="x", image="nginx", port=0, env={"A-B": SECRET})
        with pytest.raises(ToolError) as caught:
            await _bus_server(app, owner).call_tool("deploy", args)
        text = str(caught.value)
        for field in ("name", "image", "port", "env.A-B"):
            assert f"- {field}: " in text
        assert SECRET not in text

    async def test_another_users_ids_are_not_found(
        self, app: App, owner: User, server: Server, make_user: Any
    ) -> None:
        """Another user's deployment and server are not found through the tools."""
        queued = await _bus_server(app, owner).call_tool("deploy", _deploy_args(server))
        deployment_id = queued.structured_content["deployment"]["id"]
        other = _bus_server(app, await make_user())
        with pytest.raises(ToolError, match="not-found: Deployment not found"):
            await other.call_tool("get_deployment", {"deployment_id": deployment_id})
        with pytest.raises(ToolError, match="not-found: Server not found"):
            await other.call_tool("list_installations", {"server_id": str(server.id)})

    @pytest.mark.parametrize("env", ["TOKEN=" + SECRET, {"TOKEN": 4242}, {"TOKEN": [SECRET]}])
    async def test_a_bad_env_is_reported_without_its_value(
        self, app: App, owner: User, server: Server, env: object
    ) -> None:
        """An env of the wrong shape is an error at env, never quoting a value."""
        with pytest.raises(ToolError, match=r"- env(\.TOKEN)?: ") as caught:
            await _bus_server(app, owner).call_tool("deploy", _deploy_args(server, env=env))
        assert SECRET not in str(caught.value)
        assert "4242" not in str(caught.value)


class Recorder(httpx.AsyncBaseTransport):
    """The HTTP app, in process; every request it was sent kept."""

    def __init__(self, app: App) -> None:
        self.app = httpx.ASGITransport(create_app(app.bus, Settings()))
        self.seen: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        return await self.app.handle_async_request(request)


async def _client(app: App, user: User, recorder: Recorder) -> AsyncClient:
    token = await app.bus.handle(c.RegenerateToken(), user)
    return AsyncClient("http://berth.test", token, transport=recorder)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the dashboard's, as elsewhere
class TestClientBackend:
    async def test_deploy_posts_the_api_body_then_follows_its_events(
        self, app: App, owner: User, server: Server
    ) -> None:
        """deploy sends camelCase fields and the token, as the CLI does; with wait it then
        follows the deployment's event stream (no ?wait: the tool waits, reporting progress)
        and reads the deployment and its installation back."""
        recorder = Recorder(app)
        args = {**_deploy_args(server), "health_path": "/h"}
        async with await _client(app, owner, recorder) as client:
            result = await stdio_server(client).call_tool("deploy", {**args, "wait": 1})
        assert result.structured_content["deployment"]["healthPath"] == "/h"
        request, events, deployment, installation = recorder.seen
        assert request.url.path == "/api/agent/docker/deploy"
        assert "wait" not in request.url.params
        ident = result.structured_content["deployment"]["id"]
        assert events.url.path == f"/api/agent/deployments/{ident}/events"
        assert deployment.url.path == f"/api/agent/deployments/{ident}"
        assert installation.url.path.startswith("/api/agent/installations/")
        assert request.headers["Authorization"].startswith("Bearer berth_")
        assert json.loads(request.content) == {
            "serverId": args["server_id"],
            "name": "web",
            "image": "nginx:1.27",
            "healthPath": "/h",
        }

    async def test_the_idempotency_key_goes_as_the_apis_header(
        self, app: App, owner: User, server: Server
    ) -> None:
        """deploy and rollback send ``idempotency_key`` as ``Idempotency-Key``, not in the
        body; without one, no header."""
        recorder = Recorder(app)
        async with await _client(app, owner, recorder) as client:
            tools = stdio_server(client)
            await tools.call_tool("deploy", {**_deploy_args(server), "idempotency_key": "k-1"})
            with pytest.raises(ToolError):  # nothing to go back to: a conflict
                await tools.call_tool(
                    "rollback", {"installation_id": str(uuid4()), "idempotency_key": "k-2"}
                )
            await tools.call_tool("deploy", _deploy_args(server, name="other", port=3001))
        assert [r.headers.get("Idempotency-Key") for r in recorder.seen] == ["k-1", "k-2", None]
        assert "idempotency" not in recorder.seen[0].content.decode().lower()

    async def test_an_api_error_is_the_facades_tool_error(
        self, app: App, owner: User, server: Server
    ) -> None:
        """Not found, and an invalid deploy, read the same through the API as in process."""
        missing = {"installation_id": str(uuid4())}
        invalid = _deploy_args(server, name="x", image="nginx", port=0, env={"A-B": SECRET})
        texts = []
        async with await _client(app, owner, Recorder(app)) as client:
            for tools in (stdio_server(client), _bus_server(app, owner)):
                for name, args in (("logs", missing), ("deploy", invalid)):
                    with pytest.raises(ToolError) as caught:
                        await tools.call_tool(name, args)
                    texts.append(str(caught.value))
        assert texts[:2] == texts[2:]
        assert texts[0].endswith(": not-found: Installation not found.")
        assert SECRET not in texts[1]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the dashboard's
class TestSameAnswers:
    async def test_both_backends_answer_byte_for_byte_the_same(
        self, app: App, make_user: Any, make_server: Any
    ) -> None:
        """Every tool's result (or error) is the same text from the facade as from the
        client, for the same calls by two users alike."""
        answers: list[list[str]] = []
        for mounted in (True, False):
            user = await make_user()
            server = await make_server(user)
            client = await _client(app, user, Recorder(app))
            tools = _bus_server(app, user) if mounted else stdio_server(client)
            texts: list[str] = []

            async def call(tool: str, texts: list[str] = texts, **args: Any) -> Any:
                try:
                    result = await tools.call_tool(tool, args)  # noqa: B023
                except ToolError as error:  # the same error from both, too
                    texts.append(str(error))
                    return None
                texts.append(result.content[0].text)
                return result.structured_content

            queued = await call("deploy", **_deploy_args(server, env={"K": "v"}))
            ids = {
                str(server.id): "S",
                server.name: "N",
                queued["installation"]["id"]: "I",
                queued["deployment"]["id"]: "D",
            }
            installation_id, deployment_id = (
                queued["installation"]["id"],
                queued["deployment"]["id"],
            )
            await call("list_servers")
            await call("list_installations", server_id=str(server.id), include_removed=True)
            await call("list_containers", server_id=str(server.id))
            await call("get_deployment", deployment_id=deployment_id)
            await call("list_revisions", installation_id=installation_id, limit=5)
            await call("cancel", deployment_id=deployment_id)
            await call("logs", installation_id=installation_id, tail=10)
            await call("get_stats", installation_id=installation_id)
            await call("get_disk_usage", server_id=str(server.id))
            await call("remove_installation", installation_id=installation_id)
            await client.aclose()
            answers.append([_timeless(t, ids) for t in texts])
        mounted_texts, stdio_texts = answers
        assert len(mounted_texts) == 11
        for a, b in zip(mounted_texts, stdio_texts, strict=True):
            assert a == b


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the dashboard's
async def test_the_same_things_read_the_same_to_the_byte(
    app: App, owner: User, server: Server
) -> None:
    """The same deployment, installation and server read through either backend are the
    same text, times included (RFC 3339 as the API writes them)."""
    mounted = _bus_server(app, owner)
    queued = (await mounted.call_tool("deploy", _deploy_args(server))).structured_content
    calls = [
        ("get_deployment", {"deployment_id": queued["deployment"]["id"]}),
        ("list_installations", {"server_id": str(server.id)}),
        ("list_servers", {}),
        ("list_revisions", {"installation_id": queued["installation"]["id"]}),
    ]
    async with await _client(app, owner, Recorder(app)) as client:
        for name, args in calls:
            ours = (await mounted.call_tool(name, args)).content[0].text
            theirs = (await stdio_server(client).call_tool(name, args)).content[0].text
            assert ours == theirs, name
            assert re.search(r'"createdAt": "\d{4}-', ours), name


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the dashboard's
async def test_a_containers_image_id_reads_the_same_through_either_backend(
    app: App, owner: User, server: Server
) -> None:
    """list_containers shows each container's ``imageId`` (null where Docker did not
    say), the same text from the facade as through the API."""
    image_id = "sha256:" + "3f4e5d6c7b8a" * 5 + "9f0e"
    app.store.state.servers[server.id] = msgspec.structs.replace(server, status=ServerStatus.ONLINE)
    app.gateway.containers[server.id] = [
        builders.a_container(id="c1", name="web", image_id=image_id),
        builders.a_container(id="c2", name="db"),
    ]
    args = {"server_id": str(server.id)}
    ours = await _bus_server(app, owner).call_tool("list_containers", args)
    async with await _client(app, owner, Recorder(app)) as client:
        theirs = await stdio_server(client).call_tool("list_containers", args)
    assert [c["imageId"] for c in ours.structured_content["containers"]] == [image_id, None]
    assert _timeless(ours.content[0].text, {}) == _timeless(theirs.content[0].text, {})


def _timeless(text: str, ids: dict[str, str]) -> str:
    """The text with times, each run's own ids and its fake key left out."""
    for ident, name in ids.items():
        text = text.replace(ident, name)
    text = re.sub(r"AAAAfake\d+", "AAAAfake", text)
    return re.sub(r'"\d{4}-\d\d-\d\dT[^"]+"', '"…"', text)


async def _read_token(app: App, user: User) -> tuple[str, Actor]:
    """A named token of ``user``'s with the ``read`` scope: its secret, and its actor."""
    made = await app.bus.handle(
        c.CreateToken(name="reader", scopes=frozenset({TokenScope.READ})), user
    )
    return made.secret, await app.bus.handle(c.Authenticate(token=made.secret))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the dashboard's, as elsewhere
class TestRights:
    async def test_a_read_token_is_offered_only_what_it_may_call(
        self, app: App, owner: User
    ) -> None:
        """tools/list offers a read-scoped token no deploy, stop or remove tool, through
        either backend; the main token every tool."""
        secret, actor = await _read_token(app, owner)
        client = AsyncClient("http://berth.test", secret, transport=Recorder(app))
        async with client:
            for tools in (_bus_server(app, actor), stdio_server(client)):
                async with McpClient(tools) as mcp:
                    names = [t.name for t in (await mcp.list_tools()).tools]
                assert names == READ_TOOLS
        async with McpClient(_bus_server(app, owner)) as mcp:
            assert [t.name for t in (await mcp.list_tools()).tools] == list(TOOL_NAMES)

    async def test_a_hidden_tool_called_anyway_is_refused_as_the_api_refuses_it(
        self, app: App, owner: User, server: Server
    ) -> None:
        """deploy with a read token is the API's insufficient-scope, the same text from
        both backends; nothing is deployed, and both refusals are in the audit log."""
        secret, actor = await _read_token(app, owner)
        texts = []
        async with AsyncClient("http://berth.test", secret, transport=Recorder(app)) as client:
            for tools in (_bus_server(app, actor), stdio_server(client)):
                with pytest.raises(ToolError) as caught:
                    await tools.call_tool("deploy", _deploy_args(server))
                texts.append(str(caught.value))
        assert texts[0] == texts[1]
        assert "insufficient-scope: This needs the `deploy` scope" in texts[0]
        listed = await Berth(app.bus).installations(owner, server.id)
        assert listed.installations == []
        log = (await Berth(app.bus).audit(owner)).entries
        refused = [(e.action, e.actor.token_name) for e in log if e.outcome == "denied"]
        assert refused == [("deploy", "reader"), ("deploy", "reader")]

    async def test_whoami_reads_the_same_from_both_backends(self, app: App, owner: User) -> None:
        """whoami is the token's user, team, role and scopes, the same JSON either way."""
        secret, actor = await _read_token(app, owner)
        async with AsyncClient("http://berth.test", secret, transport=Recorder(app)) as client:
            ours = (await _bus_server(app, actor).call_tool("whoami", {})).content[0].text
            theirs = (await stdio_server(client).call_tool("whoami", {})).content[0].text
        assert ours == theirs
        body = json.loads(ours)
        assert (body["name"], body["scopes"], body["role"]) == ("reader", ["read"], "owner")
        assert body["user"]["email"] == owner.email

    async def test_when_the_rights_are_unknown_every_tool_is_offered(self, app: App) -> None:
        """A token berth refuses (or berth unreachable): every tool is listed, and each
        call says why it fails."""
        client = AsyncClient("http://berth.test", "berth_wrong", transport=Recorder(app))
        async with client, McpClient(stdio_server(client)) as mcp:
            names = [t.name for t in (await mcp.list_tools()).tools]
            result = await mcp.call_tool("whoami", {})
        assert names == list(TOOL_NAMES)
        assert result.is_error
        assert "BERTH_TOKEN" in result.content[0].text


def _tools_list(client: TestClient[Any], token: str | None) -> Any:
    headers = {"Accept": "application/json, text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return client.post(
        "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers
    )


def _answer_of(response: Any) -> Any:
    """The JSON-RPC answer of an /mcp response: its body, or its Server-Sent Event's data."""
    if response.headers["content-type"].startswith("text/event-stream"):
        data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
        return json.loads(data[-1])
    return response.json()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the dashboard's, as elsewhere
class TestMounted:
    @staticmethod
    @contextmanager
    def _served(app: App, settings: Settings) -> Iterator[tuple[TestClient[Any], str]]:
        """The app over ``app``'s bus with ``settings``, and a new user's API token."""

        async def token() -> str:
            user = await app.bus.handle(
                c.CreateUser(email=unique_email(), password="correct horse battery staple")
            )
            return await app.bus.handle(c.RegenerateToken(), user)

        api_token = asyncio.run(token())
        with TestClient(create_app(app.bus, settings), base_url="http://berth.local") as client:
            yield client, api_token

    @pytest.fixture
    def served(self, app: App) -> Iterator[tuple[TestClient[Any], str]]:
        with self._served(app, Settings(rate_limit_per_minute=3)) as served:
            yield served

    def test_the_token_lists_the_tools(self, served: tuple[TestClient[Any], str]) -> None:
        """/mcp answers a tools/list with the API token (the session manager runs)."""
        client, token = served
        response = _tools_list(client, token)
        assert response.status_code == 200, response.text
        names = [t["name"] for t in _answer_of(response)["result"]["tools"]]
        assert names == list(TOOL_NAMES)

    def test_a_read_token_is_listed_the_read_tools(
        self, served: tuple[TestClient[Any], str], app: App
    ) -> None:
        """/mcp's tools/list for a read-scoped token has no deploy, stop or remove tool."""
        client, token = served

        async def read_token() -> str:
            user = (await app.bus.handle(c.Authenticate(token=token))).user
            return (await _read_token(app, user))[0]

        response = _tools_list(client, asyncio.run(read_token()))
        assert response.status_code == 200, response.text
        assert [t["name"] for t in _answer_of(response)["result"]["tools"]] == READ_TOOLS

    def test_no_token_is_the_apis_401(self, served: tuple[TestClient[Any], str]) -> None:
        """Without a valid token /mcp is 401 problem+json whose WWW-Authenticate names the
        protected resource metadata (RFC 9728), where OAuth clients start."""
        client, _ = served
        metadata = f"{client.base_url}/.well-known/oauth-protected-resource/mcp"
        for token in (None, "berth_wrong"):
            response = _tools_list(client, token)
            assert response.status_code == 401
            assert response.headers["WWW-Authenticate"] == f'Bearer resource_metadata="{metadata}"'
            assert response.headers["content-type"].startswith("application/problem+json")

    def test_requests_count_against_the_tokens_rate_limit(
        self, served: tuple[TestClient[Any], str]
    ) -> None:
        """/mcp and the API share the token's request limit: past it, a tool call is a tool
        error saying when to retry and any other request a JSON-RPC error saying so (not
        an HTTP 429, which MCP clients show as an opaque failure)."""
        client, token = served
        headers = {"Authorization": f"Bearer {token}"}
        assert client.get("/api/agent/servers", headers=headers).status_code == 200
        assert [_tools_list(client, token).status_code for _ in range(2)] == [200, 200]
        listed = _tools_list(client, token)
        assert listed.status_code == 200
        error = _answer_of(listed)["error"]
        assert error["message"].startswith("rate-limited: Request rate limit reached")
        assert "Retry after" in error["message"]
        assert error["data"]["retryAfter"] > 0
        called = client.post(
            "/mcp",
            json={
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "list_servers", "arguments": {}},
            },
            headers={**headers, "Accept": "application/json, text/event-stream"},
        )
        result = _answer_of(called)["result"]
        assert result["isError"] is True
        assert re.fullmatch(
            r"rate-limited: Request rate limit reached for this token\. Retry after \d+ seconds\.",
            result["content"][0]["text"],
        )

    def test_rest_answers_carry_the_rate_limit_headers(
        self, served: tuple[TestClient[Any], str]
    ) -> None:
        """Each answer of a token's request says its policy and what is left (IETF draft
        RateLimit-Policy / RateLimit), the 429 included."""
        client, token = served
        headers = {"Authorization": f"Bearer {token}"}
        answers = [client.get("/api/agent/servers", headers=headers) for _ in range(4)]
        assert [a.status_code for a in answers] == [200, 200, 200, 429]
        for answer in answers:
            assert answer.headers["RateLimit-Policy"] == '"requests";q=3;w=60'
        left = [answer.headers["RateLimit"] for answer in answers]
        assert [re.match(r'"requests";r=(\d+);t=\d+$', x)[1] for x in left] == ["2", "1", "0", "0"]  # type: ignore[index]
        wait = int(answers[3].headers["Retry-After"])
        assert left[3] == f'"requests";r=0;t={wait}'
        assert client.get("/api/agent/servers").headers.get("RateLimit") is None  # no token

    def test_a_body_past_the_apis_limit_is_refused(self, app: App) -> None:
        """/mcp refuses a body larger than the API's limit with 413."""
        with self._served(app, Settings(max_body_bytes=1000)) as (client, api_token):
            response = client.post(
                "/mcp",
                content=b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "x": "'
                + b"a" * 2000
                + b'"}',
                headers={
                    "Authorization": f"Bearer {api_token}",
                    "Accept": "application/json, text/event-stream",
                    "Content-Type": "application/json",
                },
            )
        assert response.status_code == 413


def _texts(caught: pytest.ExceptionInfo[ToolError]) -> list[str]:
    return str(caught.value).splitlines()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the dashboard's
class TestStrictArguments:
    @pytest.mark.parametrize("unknown", ["idempotencyKey", "healthPath", "Env"])
    async def test_an_unknown_argument_is_refused_naming_the_known_ones(
        self, app: App, owner: User, server: Server, unknown: str
    ) -> None:
        """A camelCase or misspelt argument is an error naming the tool's arguments, the
        same text from both backends, and nothing is deployed."""
        texts = []
        async with await _client(app, owner, Recorder(app)) as client:
            for tools in (_bus_server(app, owner), stdio_server(client)):
                with pytest.raises(ToolError) as caught:
                    await tools.call_tool("deploy", _deploy_args(server, **{unknown: "x"}))
                texts.append(str(caught.value))
        assert texts[0] == texts[1]
        assert f"- {unknown}: Unknown argument; deploy takes: server_id, name, image," in texts[0]
        assert "idempotency_key" in texts[0]
        assert (await Berth(app.bus).installations(owner, server.id)).installations == []

    async def test_wrong_types_are_not_coerced_and_all_reported_in_berths_words(
        self, app: App, owner: User, server: Server
    ) -> None:
        """A string port, a number name, a boolean wait, an unknown argument and a bad
        image come back in one error, in berth's words (no pydantic text), the same from
        both backends; nothing is deployed."""
        args = {
            "server_id": str(server.id),
            "name": 5,
            "image": "nginx",
            "port": "8080",
            "wait": True,
            "restart": None,
            "extra": 1,
        }
        texts = []
        async with await _client(app, owner, Recorder(app)) as client:
            for tools in (_bus_server(app, owner), stdio_server(client)):
                with pytest.raises(ToolError) as caught:
                    await tools.call_tool("deploy", args)
                texts.append(str(caught.value))
        assert texts[0] == texts[1]
        lines = texts[0].splitlines()
        assert "invalid-input: 6 invalid argument(s); fix each and call again:" in lines[0]
        assert "- port: Expected an integer from 1 to 65535, got a string." in lines
        assert "- name: Expected a string, got a number." in lines
        assert "- wait: Expected an integer from 0 to 300, got a boolean." in lines
        assert "- restart: Expected a string, got null." in lines
        assert any(line.startswith("- image: ") for line in lines)
        assert any(line.startswith("- extra: Unknown argument") for line in lines)
        assert "pydantic" not in texts[0]
        assert (await Berth(app.bus).installations(owner, server.id)).installations == []

    @pytest.mark.parametrize(
        ("tool", "args", "line"),
        [
            (
                "list_revisions",
                {"installation_id": ANY_ID, "limit": "5"},
                "- limit: Expected an integer from 1 to 100, got a string.",
            ),
            (
                "list_revisions",
                {"installation_id": ANY_ID, "limit": 1000},
                "- limit: Expected an integer from 1 to 100.",
            ),
            (
                "logs",
                {"installation_id": ANY_ID, "tail": 2.5},
                "- tail: Expected an integer from 1 to 5000, got a number.",
            ),
            ("list_revisions", {}, "- installation_id: Field required."),
            ("logs", {"installation_id": 7}, "- installation_id: Expected a string, got a number."),
            (
                "list_installations",
                {"server_id": ANY_ID, "include_removed": "yes"},
                "- include_removed: Expected true or false, got a string.",
            ),
        ],
    )
    async def test_other_tools_check_types_and_ranges_first(
        self, app: App, owner: User, tool: str, args: dict[str, Any], line: str
    ) -> None:
        """Every tool's arguments are checked against its schema, in berth's words."""
        with pytest.raises(ToolError) as caught:
            await _bus_server(app, owner).call_tool(tool, args)
        assert line in _texts(caught)

    async def test_a_whole_number_float_is_that_integer(
        self, app: App, owner: User, server: Server
    ) -> None:
        """port 8080.0 (an integer to JSON Schema) deploys on port 8080."""
        result = await _bus_server(app, owner).call_tool(
            "deploy", _deploy_args(server, port=8080.0)
        )
        assert result.structured_content["installation"]["port"] == 8080


class TestAdvertised:
    async def test_server_info_has_berths_version_and_only_tools(
        self, app: App, owner: User
    ) -> None:
        """initialize names berth's version; no prompts or resources are advertised, and
        their methods are unknown."""
        async with McpClient(_bus_server(app, owner), mode="legacy") as mcp:
            assert mcp.server_info is not None
            assert mcp.server_info.version == importlib.metadata.version("berth")
            capabilities = mcp.server_capabilities
            assert capabilities.tools is not None
            assert capabilities.prompts is None
            assert capabilities.resources is None
            with pytest.raises(MCPError, match="Method not found"):
                await mcp.list_prompts()

    async def test_input_schemas_are_closed_and_titled_after_their_tool(
        self, app: App, owner: User
    ) -> None:
        """Each schema is titled `<tool>Arguments`, allows no other argument, and has no
        `default: null` on an argument that is not nullable."""
        for tool in await _bus_server(app, owner).list_tools():
            schema = tool.input_schema
            assert schema["title"] == f"{tool.name}Arguments"
            assert schema["additionalProperties"] is False
            for name, prop in schema["properties"].items():
                assert prop.get("default", "unset") is not None, (tool.name, name)

    async def test_remove_installation_says_what_delete_does(self, app: App, owner: User) -> None:
        """remove_installation's description says a running deployment is canceled first,
        as DELETE does, not that it is a conflict."""
        tools = {t.name: t for t in await _bus_server(app, owner).list_tools()}
        description = tools["remove_installation"].description or ""
        assert "canceled first" in description
        assert "A conflict while a deployment runs" not in description


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the dashboard's
class TestWaiting:
    async def test_a_long_wait_returns_by_the_cap_with_progress_and_how_to_go_on(
        self, app: App, owner: User, server: Server, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """deploy with wait=300 answers once the per-call cap has passed (here 1 s), the
        deployment still queued, with its id and a `next` saying how to keep waiting,
        through either backend; its events came as progress (the facade's: the client's
        stream is read in process only once it ended, see tests/integration/test_mcp.py)."""
        monkeypatch.setattr(tools_module, "CALL_WAIT_MAX", 1)
        async with await _client(app, owner, Recorder(app)) as client:
            for port, tools in ((3001, _bus_server(app, owner)), (3002, stdio_server(client))):
                seen: list[tuple[float, str | None]] = []

                async def progress(done: float, total: float | None, message: str | None) -> None:
                    seen.append((done, message))  # noqa: B023

                async with McpClient(tools) as mcp:
                    result = await mcp.call_tool(
                        "deploy",
                        _deploy_args(server, name=f"w{port}", port=port, wait=300),
                        progress_callback=progress,
                    )
                body = result.structured_content
                assert body is not None, result.content
                ident = body["deployment"]["id"]
                assert body["deployment"]["state"] == "queued"
                assert f"get_deployment with deployment_id={ident} and wait=" in body["next"]
                if port == 3002:
                    continue  # httpx's ASGITransport hands over a stream only once it ended
                assert seen
                assert seen[0][0] == 1
                assert seen[0][1] is not None
                assert seen[0][1].startswith("queued: ")

    async def test_get_deployment_waits_too(self, app: App, owner: User, server: Server) -> None:
        """get_deployment takes wait, and with it reports the events as progress."""
        tools = _bus_server(app, owner)
        queued = (await tools.call_tool("deploy", _deploy_args(server))).structured_content
        seen: list[float] = []

        async def progress(done: float, total: float | None, message: str | None) -> None:
            seen.append(done)

        async with McpClient(tools) as mcp:
            result = await mcp.call_tool(
                "get_deployment",
                {"deployment_id": queued["deployment"]["id"], "wait": 1},
                progress_callback=progress,
            )
        assert result.structured_content is not None
        assert result.structured_content["state"] == "queued"
        assert seen == list(range(1, len(seen) + 1))  # one per event, counted up
        assert seen
