"""``berth.client`` against a real ``berth serve --local`` deploying the echo image on real
Docker: the blocking and the async client, errors, both streams, the OpenAPI document;
and the CLI showing a container's control characters instead of sending them to the
terminal (issue 21, finding 10)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from berth.client import (
    ApiError,
    AsyncClient,
    Client,
    DeploymentEnd,
    DeploymentStep,
    Unreachable,
)
from client_agreement import disagreements
from deploy_support import (
    ECHO_V1,
    FAST_ENV,
    RUN,
    get_app,
    host_port,
    remove_containers,
    wait_until,
)
from harness import BERTH, BerthProcess
from infra import build_echo_image

pytestmark = pytest.mark.integration

# The echo server's VERSION, printed in its first log line: ESC sequences (colour, a
# window title ended by BEL, the C1 CSI as UTF-8), a backspace, a tab, a CR, Unicode.
CONTROLS = r"ctl \033[31mred\033[0m \033]0;title\007 \302\2332J \010bs tab\there ü cr\rend"
SHOWN = r"ctl \x1b[31mred\x1b[0m \x1b]0;title\x07 \x9b2J \x08bs tab" + "\there ü cr"


@dataclass(frozen=True)
class Local:
    berth: BerthProcess
    token: str
    server_id: str
    prefix: str


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory, echo_image: str) -> Iterator[Local]:
    """A ``berth serve --local`` whose first user owns this machine, online."""
    process = BerthProcess(
        tmp_path_factory.mktemp("client"), env=FAST_ENV, args=["--local"]
    ).start()
    prefix = f"e2e-{RUN}-client-"
    try:
        ((_, token),) = process.new_users(1, "client")
        with Client(process.url, token) as berth:
            servers = wait_until(
                lambda: berth.servers().servers,
                lambda found: any(s.status == "online" for s in found),
                20,
                "the local server online",
            )
        yield Local(process, token, str(servers[0].id), prefix)
    finally:
        process.stop()
        remove_containers(prefix)


@pytest.fixture(scope="module")
def controls_image(docker_ready: None) -> str:
    """The echo image whose first log line carries ``CONTROLS``."""
    return build_echo_image(CONTROLS)


def _deploy(berth: Client, local: Local, name: str, port: int, **more: Any) -> Any:
    """Deploy ``name`` (the echo image unless ``image`` is given) on the local server."""
    arguments = {"image": ECHO_V1, "env": {"PORT": str(port)}, **more}
    return berth.deploy.response(
        server_id=local.server_id, name=f"{local.prefix}{name}", port=port, **arguments
    )


def _cli(local: Local, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BERTH_URL": local.berth.url, "BERTH_TOKEN": local.token}
    return subprocess.run(
        [BERTH, *args], capture_output=True, text=True, timeout=120, check=False, env=env
    )


class TestBlocking:
    def test_deploy_wait_read_stream_and_stop(self, local: Local) -> None:
        """A deploy with wait succeeds (typed bodies), its events replay to the end (through
        either operation), the log follows until the container stops, and the app answered
        meanwhile."""
        port = host_port()
        with Client(local.berth.url, local.token) as berth:
            queued = _deploy(berth, local, "sync", port, wait=60)
            assert queued.status == 200
            assert queued.headers["Location"].endswith(str(queued.body.deployment.id))
            deployment, installation = queued.body.deployment, queued.body.installation
            assert deployment.state == "succeeded", deployment.error
            assert deployment.env_keys == ["PORT"]
            assert get_app(port).text.strip() == "hello from v1"

            items = list(berth.events(deployment.id))
            assert items[-1] == DeploymentEnd(state="succeeded")
            assert list(berth.events_text(deployment.id)) == items  # one stream, two operations
            stored = berth.deployment(deployment.id).events
            assert [(i.at, i.step, i.message) for i in items[:-1]] == [
                (e.at, e.step, e.message) for e in stored
            ]
            steps = [i for i in items if isinstance(i, DeploymentStep)]
            after = list(berth.events(deployment.id, last_event_id=steps[1].id))
            assert [i.id for i in after[:-1]] == [s.id for s in steps[2:]]

            assert f"echo v1: listening on {port}" in berth.logs(installation.id, tail=5).lines
            lines = berth.follow_logs(installation.id, tail=5)
            assert next(lines) == f"echo v1: listening on {port}"
            assert berth.stop(installation.id).status == "stopped"
            assert all("listening" not in line for line in lines)  # ends: it stopped

    def test_errors_are_api_errors(self, local: Local) -> None:
        """Every invalid argument at once, named as the method names it; another id is a
        404; a wrong token a 401; nothing listening is Unreachable."""
        wrong = {"name": "x", "image": "no-tag", "port": 70000, "health_path": "no-slash"}
        with Client(local.berth.url, local.token) as berth:
            with pytest.raises(ApiError) as caught:
                berth.deploy(server_id=local.server_id, env={"BAD-KEY": "secret-value"}, **wrong)
            error = caught.value
            assert (error.status, error.kind) == (422, "invalid-input")
            assert {e.argument for e in error.errors} >= {*wrong, "env.BAD-KEY"}
            assert "secret-value" not in str(error)
            with pytest.raises(ApiError) as missing:
                berth.installation(uuid4())
            assert (missing.value.status, missing.value.kind) == (404, "not-found")
        with Client(local.berth.url, "berth_" + "A" * 49) as stranger:
            with pytest.raises(ApiError) as refused:
                stranger.servers()
            assert refused.value.status == 401
        with (
            Client("http://127.0.0.1:9", local.token) as nowhere,
            pytest.raises(Unreachable, match=r"not reachable at http://127\.0\.0\.1:9"),
        ):
            nowhere.servers()

    def test_the_client_agrees_with_the_running_document(self, local: Local) -> None:
        """The running berth's OpenAPI document and the client agree, operation by
        operation and field by field."""
        with Client(local.berth.url) as berth:
            assert disagreements(berth.openapi()) == []


class TestAsync:
    def test_the_same_flow_awaited(self, local: Local) -> None:
        """The async client deploys, lists, streams the events and the log, rolls back
        nothing (a 409 it can read) and removes the app."""

        async def flow() -> None:
            port = host_port()
            async with AsyncClient(local.berth.url, local.token) as berth:
                queued = await berth.deploy(
                    server_id=local.server_id,
                    name=f"{local.prefix}async",
                    image=ECHO_V1,
                    port=port,
                    env={"PORT": str(port)},
                )
                assert queued.deployment.state in ("queued", "running")
                items = [item async for item in berth.events(queued.deployment.id)]
                assert items[-1] == DeploymentEnd(state="succeeded")
                installation_id = queued.installation.id
                listed = await berth.installations(local.server_id)
                assert installation_id in [i.id for i in listed.installations]
                page = await berth.revisions(installation_id)
                assert [d.id for d in page.deployments] == [queued.deployment.id]
                with pytest.raises(ApiError) as caught:
                    await berth.rollback(installation_id)
                assert caught.value.status == 409
                lines = berth.follow_logs(installation_id, tail=5)
                assert await anext(lines) == f"echo v1: listening on {port}"
                await berth.stop(installation_id)
                assert [line async for line in lines if "listening" in line] == []
                await berth.remove_installation(installation_id)
                listed = await berth.installations(local.server_id, include_removed=True)
                (removed,) = [i for i in listed.installations if i.id == installation_id]
                assert removed.status == "removed"

        asyncio.run(flow())


DOCS = Path(__file__).resolve().parents[2] / "docs" / "client.md"


def test_the_documented_examples_run_as_written(local: Local) -> None:
    """Every Python example of ``docs/client.md`` runs as written, for a new user, and
    prints what its comments say."""
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.DOTALL)
    assert len(blocks) >= 4
    ((_, token),) = local.berth.new_users(1, "docs")
    env = {**os.environ, "BERTH_URL": local.berth.url, "BERTH_TOKEN": token}
    printed = ""
    for block in blocks:
        done = subprocess.run(
            [sys.executable, "-c", block], capture_output=True, text=True, timeout=60, env=env
        )
        assert done.returncode == 0, (block, done.stderr)
        printed += done.stdout
    for said in (
        "queued shop",
        "canceled",
        "ended canceled",
        "['canceled']",
        "200 application/json",
    ):
        assert said in printed
    assert "422 invalid-input" in printed
    assert "409 server-pending" in printed
    assert "\\x1b[31mred\\x1b[0m 50%\\r100%" in printed


class TestControlCharacters:
    def test_logs_show_a_containers_controls_instead_of_sending_them(
        self, local: Local, controls_image: str
    ) -> None:
        """``berth logs`` and ``logs --follow`` print a container's ESC sequences, BEL,
        backspace, C1 controls and CR as text (``\\x1b``, ``\\r``); tabs, newlines and
        Unicode pass; ``--json`` is the body as received."""
        port = host_port()
        with Client(local.berth.url, local.token) as berth:
            queued = _deploy(berth, local, "controls", port, image=controls_image, wait=60).body
        assert queued.deployment.state == "succeeded", queued.deployment.error
        installation_id = str(queued.installation.id)

        shown = _cli(local, "logs", installation_id, "--tail", "5")
        assert shown.returncode == 0, shown.stderr
        assert f"echo {SHOWN}" in shown.stdout  # (berth's JSON lines end at a CR, too)
        assert not any(c in shown.stdout for c in "\x1b\x07\x08\x9b\r")
        raw = _cli(local, "logs", installation_id, "--tail", "5", "--json")
        body = json.loads(raw.stdout)
        assert any("\x1b[31mred" in line for line in body["lines"])
        assert "\\u001b" in raw.stdout or "\\u001B" in raw.stdout

        with Client(local.berth.url, local.token) as berth:
            berth.stop(installation_id)  # the followed log then ends after its tail
        followed = _cli(local, "logs", installation_id, "--follow", "--tail", "5")
        assert followed.returncode == 0, followed.stderr
        assert followed.stdout.splitlines()[0] == f"echo {SHOWN}\\rend: listening on {port}"

    def test_deployment_events_show_the_containers_controls(
        self, local: Local, controls_image: str
    ) -> None:
        """A failed deployment's events (its container's last lines) print neutralised,
        in ``berth deployment`` and ``deployment --follow`` alike."""
        with Client(local.berth.url, local.token) as berth:
            failed = _deploy(
                berth,
                local,
                "controls-exit",
                host_port(),
                image=controls_image,
                env={"BERTH_TEST_MODE": "exit"},
                wait=60,
            ).body
        assert failed.deployment.state == "failed"
        assert any("\x1b[31m" in e.message for e in failed.deployment.events)
        for args in ((), ("--follow",)):
            shown = _cli(local, "deployment", str(failed.deployment.id), *args)
            assert shown.returncode == (1 if args else 0), shown.stderr
            assert r"\x1b[31mred\x1b[0m" in shown.stdout
            assert not any(c in shown.stdout for c in "\x1b\x07\x08\x9b\r")
