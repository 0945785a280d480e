"""Live events (issue 12) on a real ``berth serve --local`` deploying the echo image on real
Docker: a deployment's events as Server-Sent Events."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import jsonschema
import pytest
from deploy_support import (
    ECHO_V1,
    Stack,
    deploy,
    deployed,
    deployment_of,
    host_port,
)
from harness import BERTH, problem

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Message:
    id: int | None
    event: str | None
    data: dict[str, Any] | None
    comment: str | None


def parse_messages(lines: Iterable[str]) -> Iterator[Message]:
    """SSE messages from the stream's lines, as a client reads them."""
    fields: dict[str, str] = {}
    for line in lines:
        if line == "":
            if fields:
                yield Message(
                    id=int(fields["id"]) if "id" in fields else None,
                    event=fields.get("event"),
                    data=json.loads(fields["data"]) if "data" in fields else None,
                    comment=fields.get(":"),
                )
            fields = {}
            continue
        if line.startswith(":"):
            fields[":"] = line[1:].strip()
            continue
        name, _, value = line.partition(":")
        fields[name] = value.removeprefix(" ")


def events_url(deployment_id: str) -> str:
    return f"/api/agent/deployments/{deployment_id}/events"


def read_stream(
    stack: Stack, deployment_id: str, headers: dict[str, str] | None = None, **params: Any
) -> tuple[httpx.Response, list[Message]]:
    """The whole stream, read as it comes (not through the schema-checking client)."""
    with (
        httpx.Client(base_url=stack.berth.url, timeout=90) as client,
        client.stream(
            "GET",
            events_url(deployment_id),
            headers={"Authorization": f"Bearer {stack.alice.token}", **(headers or {})},
            params=params or None,
        ) as response,
    ):
        return response, list(parse_messages(response.iter_lines()))


def steps_of(messages: list[Message]) -> list[Message]:
    return [m for m in messages if m.event == "step"]


class TestDeploymentEvents:
    def test_stream_replays_then_follows_to_the_end(self, stack: Stack) -> None:
        """Opened as the deploy is queued, the stream sends every step in the stored order,
        then ``end`` with the final state, and closes."""
        api, server_id = stack.alice.api, stack.alice.servers["local"]
        queued = deploy(api, server_id, stack.name("follow"), host_port(), wait=None)
        assert queued.status_code == 202, queued.text
        key = queued.json()["deployment"]["id"]
        response, messages = read_stream(stack, key)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert messages[-1].event == "end"
        assert messages[-1].data == {"state": "succeeded"}
        stored = deployment_of(api, key)
        sent = steps_of(messages)
        assert [m.data for m in sent] == [
            {"at": e["at"], "step": e["step"], "message": e["message"]} for e in stored["events"]
        ]
        ids = [m.id for m in sent]
        assert all(isinstance(i, int) for i in ids)
        assert ids == sorted(ids)
        assert len(set(ids)) == len(ids)

    def test_last_event_id_resumes_without_repeats(self, stack: Stack) -> None:
        """``Last-Event-ID`` (or ``?lastEventId``) starts after that event: no repeats."""
        api, server_id = stack.alice.api, stack.alice.servers["local"]
        first, _ = deployed(deploy(api, server_id, stack.name("resume"), host_port()), "succeeded")
        _, whole = read_stream(stack, first["id"])
        sent = steps_of(whole)
        assert len(sent) >= 3
        _, rest = read_stream(stack, first["id"], headers={"Last-Event-ID": str(sent[1].id)})
        assert steps_of(rest) == sent[2:]
        assert rest[-1].event == "end"
        _, by_query = read_stream(stack, first["id"], lastEventId=str(sent[0].id))
        assert steps_of(by_query) == sent[1:]

    def test_finished_deployment_replays_and_ends_at_once(self, stack: Stack) -> None:
        """A final deployment's stream is its events and its end, closed at once; the
        answer matches the OpenAPI document."""
        api, server_id = stack.alice.api, stack.alice.servers["local"]
        done, _ = deployed(deploy(api, server_id, stack.name("replay"), host_port()), "succeeded")
        started = time.monotonic()
        response = api.get(events_url(done["id"]))  # checked against the document
        assert time.monotonic() - started < 3
        assert response.status_code == 200
        messages = list(parse_messages(response.text.splitlines()))
        assert len(steps_of(messages)) == len(done["events"])
        assert messages[-1] == Message(None, "end", {"state": "succeeded"}, None)

    def test_another_users_deployment_is_404(self, stack: Stack) -> None:
        """Bob cannot stream Alice's deployment, an unknown or non-UUID id: 404 problem."""
        api, server_id = stack.alice.api, stack.alice.servers["local"]
        done, _ = deployed(deploy(api, server_id, stack.name("theirs"), host_port()), "succeeded")
        problem(stack.bob.api.get(events_url(done["id"])), 404)
        problem(stack.bob.api.get(events_url(str(uuid.uuid4()))), 404)
        problem(stack.bob.api.get(events_url("not-a-uuid")), 404)

    def test_a_bad_last_event_id_is_a_422(self, stack: Stack) -> None:
        """A ``Last-Event-ID`` that is not an event id is refused at header.Last-Event-ID."""
        api, server_id = stack.alice.api, stack.alice.servers["local"]
        done, _ = deployed(deploy(api, server_id, stack.name("badid"), host_port()), "succeeded")
        body = problem(api.get(events_url(done["id"]), headers={"Last-Event-ID": "x1"}), 422)
        assert [e["location"] for e in body["errors"]] == ["header.Last-Event-ID"]

    def test_every_event_of_a_stream_is_one_the_document_describes(self, stack: Stack) -> None:
        """Each message of a real stream (its raw fields, as a client reads them) is valid
        against the document's per-event schema, whose `data` is JSON."""
        api, server_id = stack.alice.api, stack.alice.servers["local"]
        done, _ = deployed(deploy(api, server_id, stack.name("schema"), host_port()), "succeeded")
        document = httpx.get(f"{stack.berth.url}/api/agent/openapi.json", timeout=10).json()
        responses = document["paths"]["/api/agent/deployments/{deploymentId}/events"]["get"]
        schema = responses["responses"]["200"]["content"]["text/event-stream"]["schema"]
        validator = jsonschema.Draft202012Validator(schema)
        with httpx.Client(base_url=stack.berth.url, timeout=30) as client:
            text = client.get(
                events_url(done["id"]), headers={"Authorization": f"Bearer {stack.alice.token}"}
            ).text
        raw: list[dict[str, Any]] = []
        for block in text.replace("\r\n", "\n").split("\n\n"):
            fields = dict(
                line.split(":", 1) for line in block.splitlines() if not line.startswith(":")
            )
            fields = {k: v.removeprefix(" ") for k, v in fields.items()}
            if fields:
                raw.append({k: int(v) if k == "retry" else v for k, v in fields.items()})
        assert [e.get("event") for e in raw if "event" in e][-1] == "end"
        assert len(raw) >= 3
        for event in raw:
            assert list(validator.iter_errors(event)) == [], event
            if "data" in event:
                json.loads(event["data"])


def run_cli(stack: Stack, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    """``berth ARGS`` as a client of the stack's berth (alice's token in the environment)."""
    env = {**os.environ, "BERTH_URL": stack.berth.url, "BERTH_TOKEN": token or stack.alice.token}
    return subprocess.run(
        [BERTH, *args], capture_output=True, text=True, timeout=120, check=False, env=env
    )


STEP_LINE = re.compile(r"^\d\d:\d\d:\d\d \S+ .*$")


class TestCliFollow:
    def test_deploy_follow_prints_steps_and_exits_0(self, stack: Stack) -> None:
        """``berth deploy --follow`` prints each step as ``HH:MM:SS step message`` in the
        stored order, then the final state, and exits 0 on success."""
        server_id, port = stack.alice.servers["local"], host_port()
        done = run_cli(
            stack,
            *("deploy", "--server", server_id, "--name", stack.name("cli-follow")),
            *("--image", ECHO_V1, "--port", str(port), "--env", f"PORT={port}", "--follow"),
        )
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines[-1] == "state: succeeded"
        key = lines[1].split()[0]  # the table's first row: the deployment's id
        stored = deployment_of(stack.alice.api, key)
        printed = [line for line in lines if STEP_LINE.match(line)]
        assert [line.split(" ", 2)[1] for line in printed] == [e["step"] for e in stored["events"]]
        assert all(
            line.startswith(e["at"][11:19])
            for line, e in zip(printed, stored["events"], strict=True)
        )

    def test_deployment_follow_of_a_failed_one_exits_1(self, stack: Stack) -> None:
        """``berth deployment ID --follow`` of a failed deployment replays it and exits 1."""
        api, server_id = stack.alice.api, stack.alice.servers["local"]
        env = {"BERTH_TEST_MODE": "exit"}
        failed, _ = deployed(
            deploy(api, server_id, stack.name("cli-fail"), host_port(), env=env), "failed"
        )
        done = run_cli(stack, "deployment", failed["id"], "--follow")
        assert done.returncode == 1, done.stderr
        assert done.stdout.splitlines()[-1] == "state: failed"

    def test_follow_of_another_users_deployment_is_an_api_error(self, stack: Stack) -> None:
        """Bob following Alice's deployment: the 404 is printed, exit 1."""
        api, server_id = stack.alice.api, stack.alice.servers["local"]
        done_, _ = deployed(
            deploy(api, server_id, stack.name("cli-theirs"), host_port()), "succeeded"
        )
        done = run_cli(stack, "deployment", done_["id"], "--follow", token=stack.bob.token)
        assert done.returncode == 1
        assert "404" in done.stderr


@contextlib.contextmanager
def _followed_logs(stack: Stack, installation_id: str) -> Iterator[httpx.Response]:
    """Alice's ``logs?follow=1`` of the installation, answered 200, open for the block."""
    url = f"/api/agent/installations/{installation_id}/logs"
    headers = {"Authorization": f"Bearer {stack.alice.token}"}
    with (
        httpx.Client(base_url=stack.berth.url, timeout=30) as client,
        client.stream("GET", url, params={"follow": "1"}, headers=headers) as response,
    ):
        assert response.status_code == 200
        yield response


class TestLogsFollow:
    def test_follow_streams_the_output_until_the_container_stops(self, stack: Stack) -> None:
        """``logs?follow=1`` sends the app's output line, stays open, and ends once the
        container is stopped."""
        api, server_id, port = stack.alice.api, stack.alice.servers["local"], host_port()
        _, installation = deployed(
            deploy(api, server_id, stack.name("logs-follow"), port), "succeeded"
        )
        with _followed_logs(stack, installation["id"]) as response:
            assert response.headers["content-type"].startswith("text/plain")
            lines = response.iter_lines()
            seen = []
            for line in lines:
                seen.append(line)
                if line == f"echo v1: listening on {port}":
                    break
            else:
                raise AssertionError(f"the stream ended first: {seen}")
            stopped = api.post(f"/api/agent/installations/{installation['id']}/stop")
            assert stopped.status_code == 200, stopped.text
            started = time.monotonic()
            rest = list(lines)  # ends: the container stopped
            assert time.monotonic() - started < 20
            assert all("listening" not in line for line in rest)

    def test_follow_redacts_env_values(self, stack: Stack) -> None:
        """An env value the app prints is ``[redacted]`` in the followed output too."""
        api, server_id, port = stack.alice.api, stack.alice.servers["local"], host_port()
        env = {"SECRET": "listening on"}
        _, installation = deployed(
            deploy(api, server_id, stack.name("logs-secret"), port, env=env), "succeeded"
        )
        with _followed_logs(stack, installation["id"]) as response:
            for line in response.iter_lines():
                assert "listening on" not in line
                if line == f"echo v1: [redacted] {port}":
                    break
            else:
                raise AssertionError("the redacted line never came")

    def test_without_follow_the_answer_is_json_as_before(self, stack: Stack) -> None:
        """No ``follow``: the JSON body of the last lines, as documented."""
        api, server_id, port = stack.alice.api, stack.alice.servers["local"], host_port()
        _, installation = deployed(
            deploy(api, server_id, stack.name("logs-json"), port), "succeeded"
        )
        url = f"/api/agent/installations/{installation['id']}/logs"
        body = api.get(url, params={"follow": "0"}).json()
        assert f"echo v1: listening on {port}" in body["lines"]
        problem(api.get(url, params={"follow": "yes"}), 422)
        problem(stack.bob.api.get(url, params={"follow": "1"}), 404)

    def test_logs_follow_prints_lines_until_the_container_stops(self, stack: Stack) -> None:
        """``berth logs ID --follow`` prints the app's output and exits 0 once the
        container is stopped."""
        api, server_id, port = stack.alice.api, stack.alice.servers["local"], host_port()
        _, installation = deployed(
            deploy(api, server_id, stack.name("cli-logs"), port), "succeeded"
        )
        env = {**os.environ, "BERTH_URL": stack.berth.url, "BERTH_TOKEN": stack.alice.token}
        with subprocess.Popen(
            [BERTH, "logs", installation["id"], "--follow", "--tail", "5"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        ) as proc:
            assert proc.stdout is not None
            first = proc.stdout.readline()
            assert first == f"echo v1: listening on {port}\n"
            stopped = api.post(f"/api/agent/installations/{installation['id']}/stop")
            assert stopped.status_code == 200, stopped.text
            assert proc.wait(timeout=20) == 0
