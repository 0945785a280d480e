"""The MCP server with the SDK's own client, against a real ``berth serve --local``:
mounted at ``/mcp`` (streamable HTTP, the Bearer token) and ``berth mcp`` (stdio, spawned
with ``BERTH_URL``/``BERTH_TOKEN``). Both are driven by the same tests."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import jsonschema
import pytest
from deploy_support import ECHO_V1, Stack, get_app, host_port
from harness import BERTH
from infra import build_echo_image
from mcp import Client, ClientSession, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult
from mcp_catalogue import READ_TOOLS

pytestmark = pytest.mark.integration

TOOLS = {
    "whoami",
    "list_servers",
    "list_installations",
    "list_containers",
    "deploy",
    "get_deployment",
    "list_revisions",
    "logs",
    "get_stats",
    "get_disk_usage",
    "change_server",
    "rollback",
    "cancel",
    "stop",
    "start",
    "restart",
    "remove_installation",
}
READ_ONLY = set(READ_TOOLS)
DESTRUCTIVE = {"remove_installation", "stop", "rollback", "cancel"}
MODES = ["http", "stdio"]
SECRET = "s3cr3t-$HOME-'quoted' #not-a-comment"


#: A health check may take this long here: the slow deploy's app opens its port after 70 s.
STACK_ENV = {"BERTH_HEALTH_TIMEOUT": "100"}
#: What an MCP client allows a request before it gives up (the TypeScript SDK's 60 s).
CLIENT_TIMEOUT = 59.0


@pytest.fixture(scope="module")
def echo_v2(docker_ready: None) -> str:
    return build_echo_image("v2")


@asynccontextmanager
async def session(url: str, token: str, mode: str) -> AsyncIterator[ClientSession]:
    """An initialized MCP client session: over streamable HTTP at ``/mcp`` (``http``: the
    initialize handshake; ``http-2026``: the SDK's ``Client``, which discovers and speaks
    the 2026-07-28 protocol), or with ``berth mcp`` spawned on stdio. Every request gives
    up after ``CLIENT_TIMEOUT`` seconds, as clients do."""
    if mode.startswith("http"):
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(headers=headers, timeout=120) as http:
            transport = streamable_http_client(f"{url}/mcp", http_client=http)
            if mode == "http-2026":
                async with Client(transport, read_timeout_seconds=CLIENT_TIMEOUT) as modern:
                    assert modern.protocol_version == "2026-07-28"
                    yield modern.session
                return
            async with (
                transport as streams,
                ClientSession(
                    streams[0], streams[1], read_timeout_seconds=CLIENT_TIMEOUT
                ) as client,
            ):
                await client.initialize()
                yield client
    else:
        env = {"BERTH_URL": url, "BERTH_TOKEN": token, "PATH": os.environ.get("PATH", "")}
        if "PYTHONPATH" in os.environ:  # the code under test, where it is not the install's
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        params = StdioServerParameters(command=BERTH, args=["mcp"], env=env)
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write, read_timeout_seconds=CLIENT_TIMEOUT) as client,
        ):
            await client.initialize()
            yield client


def _ok(result: CallToolResult) -> dict[str, Any]:
    text = result.content[0].text if result.content else ""  # type: ignore[union-attr]
    assert not result.is_error, text
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def _error(result: CallToolResult) -> str:
    assert result.is_error
    text: str = result.content[0].text  # type: ignore[union-attr]
    return text


def _echo(server_id: str, name: str, port: int, **more: Any) -> dict[str, Any]:
    """``deploy``'s arguments: the echo image v1 as ``name`` on ``server_id``, answering on
    ``port`` (its ``PORT`` in the env); ``more`` adds arguments or replaces these."""
    return {
        "server_id": server_id,
        "name": name,
        "image": ECHO_V1,
        "port": port,
        "env": {"PORT": str(port)},
        **more,
    }


def _answer(port: int) -> str:
    return get_app(port).text.strip()


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class TestToolList:
    async def test_every_tool_has_a_description_a_schema_and_annotations(
        self, stack: Stack, mode: str
    ) -> None:
        """Every tool is listed with a description, an object input schema and its hints."""
        async with session(stack.berth.url, stack.alice.token, mode) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == TOOLS
        for name, tool in tools.items():
            assert tool.description, name
            assert len(tool.description) > 30, name
            assert tool.input_schema["type"] == "object", name
            assert tool.annotations is not None, name
            assert tool.annotations.read_only_hint is (name in READ_ONLY), name
            assert tool.annotations.destructive_hint is (name in DESTRUCTIVE), name
        deploy = tools["deploy"].input_schema
        assert deploy["required"] == ["server_id", "name"]  # and exactly one of image and build
        assert deploy["properties"]["port"]["maximum"] == 65535
        assert deploy["properties"]["restart"]["enum"] == [
            "unless-stopped",
            "always",
            "on-failure",
            "no",
        ]
        assert "pattern" in deploy["properties"]["image"]
        assert tools["get_deployment"].annotations.idempotent_hint is True  # type: ignore[union-attr]


class TestDeploy:
    async def test_deploy_wait_logs_then_rollback(
        self, stack: Stack, mode: str, echo_v2: str
    ) -> None:
        """deploy with wait succeeds (env keys only), logs read, a rollback to v1 succeeds."""
        server_id = stack.alice.servers["local"]
        name, port = stack.name(f"flow-{mode}"), host_port()
        env = {"PORT": str(port), "MARK": SECRET}
        async with session(stack.berth.url, stack.alice.token, mode) as client:
            first = await client.call_tool("deploy", _echo(server_id, name, port, env=env, wait=60))
            body = _ok(first)
            assert body["deployment"]["state"] == "succeeded", body["deployment"]
            assert body["deployment"]["envKeys"] == ["MARK", "PORT"]
            assert "logs" in body["next"]
            assert SECRET not in first.model_dump_json()
            assert _answer(port) == "hello from v1"
            installation_id = body["installation"]["id"]

            logs = _ok(await client.call_tool("logs", {"installation_id": installation_id}))
            assert isinstance(logs["lines"], list)
            assert logs["installationId"] == installation_id

            again = _echo(server_id, name, port, image=echo_v2, env=env, wait=60)
            second = _ok(await client.call_tool("deploy", again))
            assert second["deployment"]["state"] == "succeeded"
            assert _answer(port) == "hello from v2"

            rolled = await client.call_tool(
                "rollback", {"installation_id": installation_id, "wait": 60}
            )
            back = _ok(rolled)
            assert back["deployment"]["state"] == "succeeded"
            assert back["deployment"]["rollbackOf"] == body["deployment"]["id"]
            assert SECRET not in rolled.model_dump_json()
            assert _answer(port) == "hello from v1"

            revisions = _ok(
                await client.call_tool("list_revisions", {"installation_id": installation_id})
            )
            assert len(revisions["deployments"]) == 3
            found = _ok(
                await client.call_tool(
                    "get_deployment", {"deployment_id": back["deployment"]["id"]}
                )
            )
            assert found["state"] == "succeeded"

    async def test_deploy_without_wait_says_how_to_follow_it(self, stack: Stack, mode: str) -> None:
        """A deploy without wait returns the queued deployment and how to follow it."""
        arguments = _echo(stack.alice.servers["local"], stack.name(f"nowait-{mode}"), host_port())
        async with session(stack.berth.url, stack.alice.token, mode) as client:
            body = _ok(await client.call_tool("deploy", arguments))
            ident = body["deployment"]["id"]
            assert body["deployment"]["state"] in ("queued", "running", "succeeded")
            if body["deployment"]["state"] != "succeeded":
                assert f"get_deployment with deployment_id={ident} and wait=50" in body["next"]

    async def test_invalid_deploy_names_each_field(self, stack: Stack, mode: str) -> None:
        """A bad port and a bad env key come back as one tool error naming both fields."""
        async with session(stack.berth.url, stack.alice.token, mode) as client:
            result = await client.call_tool(
                "deploy",
                {
                    "server_id": stack.alice.servers["local"],
                    "name": stack.name("bad"),
                    "image": ECHO_V1,
                    "port": 70000,
                    "env": {"BAD-KEY": "x"},
                    "health_path": "no-slash",
                },
            )
        text = _error(result)
        assert "invalid-input" in text
        assert "- port: Expected an integer from 1 to 65535." in text
        assert "- env.BAD-KEY:" in text
        assert "- health_path:" in text


class TestLongDeploy:
    async def test_a_70_s_health_check_completes_with_progress_and_no_timeout(
        self, stack: Stack
    ) -> None:
        """A deploy whose app answers only after 70 s, through each transport (at once:
        the 70 s are the app's, not the test's to wait three times): deploy with wait=300
        answers within the client's 60 s, still running, with its id and how to go on,
        having sent each step as progress; get_deployment with wait then sees it succeed.
        No request times out."""
        await asyncio.gather(*(_long_deploy(stack, via) for via in ("http", "http-2026", "stdio")))


async def _long_deploy(stack: Stack, via: str) -> None:
    server_id = stack.alice.servers["local"]
    name, port = stack.name(f"slow-{via}"), host_port()
    env = {"PORT": str(port), "BERTH_TEST_DELAY": "70"}
    progress: list[tuple[float, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, message))

    async with session(stack.berth.url, stack.alice.token, via) as client:
        first = _ok(
            await client.call_tool(
                "deploy",
                _echo(server_id, name, port, env=env, wait=300),
                progress_callback=on_progress,
            )
        )
        ident = first["deployment"]["id"]
        assert first["deployment"]["state"] == "running", (via, first["deployment"])
        assert f"deployment_id={ident} and wait=50" in first["next"], via
        steps = [message for _, message in progress]
        assert [done for done, _ in progress] == list(range(1, len(progress) + 1)), via
        assert any(m and m.startswith("queued: ") for m in steps), (via, steps)
        assert any(m and m.startswith("health: Waiting for port") for m in steps), (via, steps)
        state = first["deployment"]["state"]
        for _ in range(3):  # 70 s of health check: two more calls at most
            body = _ok(
                await client.call_tool(
                    "get_deployment",
                    {"deployment_id": ident, "wait": 50},
                    progress_callback=on_progress,
                )
            )
            state = body["state"]
            if state != "running":
                break
    assert state == "succeeded", (via, body)
    assert len(progress) > len(steps), via  # the later calls reported steps too
    assert _answer(port) == "hello from v1", via


class TestLifecycle:
    async def test_stop_start_restart_list_and_remove(self, stack: Stack, mode: str) -> None:
        """stop, start, restart, the listings, cancel of an ended deployment and removal
        each do what the API does."""
        server_id = stack.alice.servers["local"]
        name, port = stack.name(f"life-{mode}"), host_port()
        async with session(stack.berth.url, stack.alice.token, mode) as client:

            async def call(tool: str, **arguments: Any) -> dict[str, Any]:
                return _ok(await client.call_tool(tool, arguments))

            body = await call("deploy", **_echo(server_id, name, port, wait=60))
            installation_id = body["installation"]["id"]
            assert (await call("stop", installation_id=installation_id))["status"] == "stopped"
            assert (await call("start", installation_id=installation_id))["status"] == "running"
            assert (await call("restart", installation_id=installation_id))["status"] == "running"
            usage = await call("get_stats", installation_id=installation_id)
            assert usage["installationId"] == installation_id
            assert usage["stats"]["running"] is True
            assert usage["stats"]["memoryBytes"] > 0
            disk = await call("get_disk_usage", server_id=server_id)
            assert disk["serverId"] == server_id
            assert disk["usage"]["images"] >= 1

            listed = await call("list_installations", server_id=server_id)
            assert installation_id in [i["id"] for i in listed["installations"]]
            containers = await call("list_containers", server_id=server_id)
            assert body["installation"]["containerName"] in [
                c["name"] for c in containers["containers"]
            ]

            ended = await client.call_tool("cancel", {"deployment_id": body["deployment"]["id"]})
            assert "deployment-finished: " in _error(ended)  # a conflict's own kind

            removed = await call("remove_installation", installation_id=installation_id)
            assert removed["removed"] == installation_id
            listed = await call("list_installations", server_id=server_id)
            assert installation_id not in [i["id"] for i in listed["installations"]]
            listed = await call("list_installations", server_id=server_id, include_removed=True)
            assert installation_id in [i["id"] for i in listed["installations"]]


class TestAccess:
    async def test_a_wrong_token_is_refused_with_401(self, stack: Stack) -> None:
        """/mcp answers a wrong or missing token 401 whose WWW-Authenticate names the
        protected resource metadata (where an OAuth client starts: test_mcp_oauth.py)."""
        for headers in ({"Authorization": "Bearer berth_wrong"}, {}):
            async with httpx.AsyncClient(timeout=10) as http:
                response = await http.post(
                    f"{stack.berth.url}/mcp",
                    json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                    headers={**headers, "Accept": "application/json, text/event-stream"},
                )
            assert response.status_code == 401
            metadata = f"{stack.berth.url}/.well-known/oauth-protected-resource/mcp"
            assert response.headers["WWW-Authenticate"] == f'Bearer resource_metadata="{metadata}"'
        with pytest.raises(BaseExceptionGroup) as caught:  # the SDK's client: no session
            async with session(stack.berth.url, "berth_wrong", "http") as client:
                await client.list_tools()
        assert caught.group_contains(MCPError)

    async def test_stdio_with_a_wrong_token_says_so(self, stack: Stack) -> None:
        """berth mcp with a wrong BERTH_TOKEN answers each call with an unauthorized error."""
        async with session(stack.berth.url, "berth_wrong", "stdio") as client:
            text = _error(await client.call_tool("list_servers", {}))
        assert "unauthorized" in text
        assert "BERTH_TOKEN" in text

    async def test_another_users_ids_are_not_found(self, stack: Stack, mode: str) -> None:
        """Bob's tools see alice's server, installation and deployment as not found."""
        port = host_port()
        async with session(stack.berth.url, stack.alice.token, mode) as alice:
            arguments = _echo(
                stack.alice.servers["local"], stack.name(f"owned-{mode}"), port, wait=60
            )
            body = _ok(await alice.call_tool("deploy", arguments))
        installation_id = body["installation"]["id"]
        calls = [
            ("list_installations", {"server_id": stack.alice.servers["local"]}),
            ("list_containers", {"server_id": stack.alice.servers["local"]}),
            ("get_deployment", {"deployment_id": body["deployment"]["id"]}),
            ("logs", {"installation_id": installation_id}),
            ("get_stats", {"installation_id": installation_id}),
            ("get_disk_usage", {"server_id": stack.alice.servers["local"]}),
            ("stop", {"installation_id": installation_id}),
            ("rollback", {"installation_id": installation_id}),
            ("remove_installation", {"installation_id": installation_id}),
        ]
        async with session(stack.berth.url, stack.bob.token, mode) as bob:
            for name, arguments in calls:
                text = _error(await bob.call_tool(name, arguments))
                assert text.endswith("not found."), (name, text)
                assert "not-found" in text, name
        assert _answer(port) == "hello from v1"  # still running


class TestChangeServer:
    async def test_change_server_renames_and_moves_a_server_in_place(
        self, stack: Stack, mode: str
    ) -> None:
        """change_server sets a server's name and SSH port (same id, as the API then says);
        a wrong port is refused naming it, and nothing changes."""
        created = stack.alice.api.post(
            "/api/agent/servers", json={"name": stack.name(f"edit-{mode}")}
        ).json()
        async with session(stack.berth.url, stack.alice.token, mode) as client:
            wrong = _error(
                await client.call_tool("change_server", {"server_id": created["id"], "ssh_port": 0})
            )
            assert "ssh_port" in wrong or "sshPort" in wrong, wrong
            body = _ok(
                await client.call_tool(
                    "change_server",
                    {"server_id": created["id"], "name": f"{created['name']}-2", "ssh_port": 2222},
                )
            )
        assert (body["id"], body["name"], body["sshPort"]) == (
            created["id"],
            f"{created['name']}-2",
            2222,
        )
        stored = stack.alice.api.get(f"/api/agent/servers/{created['id']}").json()
        assert (stored["name"], stored["sshPort"]) == (f"{created['name']}-2", 2222)


class TestRights:
    async def test_a_read_token_sees_and_may_call_only_the_read_tools(
        self, stack: Stack, mode: str
    ) -> None:
        """A read-scoped token's tools/list has only the read tools and whoami; deploy
        called anyway is the API's insufficient-scope, and nothing runs."""
        async with httpx.AsyncClient(timeout=30) as http:
            made = await http.post(
                f"{stack.berth.url}/api/agent/tokens",
                json={"name": f"mcp-reader-{mode}", "scopes": ["read"]},
                headers={"Authorization": f"Bearer {stack.alice.token}"},
            )
        assert made.status_code == 201, made.text
        port = host_port()
        async with session(stack.berth.url, made.json()["token"], mode) as client:
            offered = {t.name for t in (await client.list_tools()).tools}
            me = _ok(await client.call_tool("whoami", {}))
            arguments = _echo(stack.alice.servers["local"], stack.name(f"read-only-{mode}"), port)
            refused = _error(await client.call_tool("deploy", arguments))
            listed = _ok(
                await client.call_tool(
                    "list_installations", {"server_id": stack.alice.servers["local"]}
                )
            )
        assert offered == READ_ONLY
        assert (me["name"], me["scopes"], me["id"]) == (
            f"mcp-reader-{mode}",
            ["read"],
            made.json()["id"],
        )
        assert ": insufficient-scope: This needs the `deploy` scope" in refused, refused
        assert stack.name(f"read-only-{mode}") not in [i["name"] for i in listed["installations"]]


class TestAgent:
    async def test_a_deploy_built_from_the_schema_succeeds_first_time(
        self, stack: Stack, mode: str
    ) -> None:
        """Arguments made from the tool list's schema alone (required fields, the port's
        rules, examples) are valid against it and deploy on the first call."""
        port = host_port()
        async with session(stack.berth.url, stack.alice.token, mode) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            schema = tools["deploy"].input_schema
            servers = _ok(await client.call_tool("list_servers", {}))["servers"]
            local = next(s for s in servers if s["transport"] == "local")
            # What the user asked for: this image on port `port`; the rest from the schema.
            wanted = {
                "server_id": local["id"],
                "name": stack.name(f"agent-{mode}"),
                "image": ECHO_V1,
            }
            arguments = {key: wanted[key] for key in schema["required"]}
            props = schema["properties"]
            assert "Give either `image` or `build`" in props["image"]["description"]
            arguments["image"] = wanted["image"]  # the one of the two this user wants
            assert props["port"]["minimum"] <= port <= props["port"]["maximum"]
            arguments["port"] = port
            example_env = props["env"]["examples"][0]
            arguments["env"] = {key: str(port) for key in example_env if key == "PORT"}
            arguments["wait"] = 60
            assert props["wait"]["maximum"] >= 60
            jsonschema.validate(arguments, schema)
            body = _ok(await client.call_tool("deploy", arguments))
        assert body["deployment"]["state"] == "succeeded", body["deployment"]
        assert _answer(port) == "hello from v1"
