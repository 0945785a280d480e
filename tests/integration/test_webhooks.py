"""Webhooks end to end: a real ``berth serve`` delivers signed events to a receiver on
loopback that fails the first attempts; the API refuses hostile input; the CLI manages
webhooks. Signatures are checked with the function the documentation shows (read from
docs/guide/webhooks.md itself) and with a verifier written from the Standard Webhooks text.

The receivers live on loopback, where only an operator's ``BERTH_ALLOW_PRIVATE_TARGETS=1``
lets webhooks go (``test_outbound.py`` shows the refusal): the berths that deliver run
with it. Hooks that are only created name a public IP address (this machine may have no
DNS to resolve a name with), to which nothing is sent."""

from __future__ import annotations

import base64
import hmac
import json
import os
import re
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from harness import (
    BERTH,
    PASSWORD,
    BerthProcess,
    new_server,
    problem,
    queue_deploy,
    without_request_id,
)
from infra import RUN, postgres_database

pytestmark = pytest.mark.integration

WEBHOOKS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "webhooks.md"

# Fast retries: 0.3 s, then 0.6 s; deployments to an offline server time out after 2 s.
FAST = {
    "BERTH_WEBHOOK_RETRY_SECONDS": "0.3",
    "BERTH_WEBHOOK_RETRY_FACTOR": "2",
    "BERTH_WEBHOOK_POLL_SECONDS": "0.1",
    "BERTH_WEBHOOK_TIMEOUT": "5",
    "BERTH_QUEUE_TIMEOUT": "2",
    "BERTH_MONITOR_SECONDS": "0.5",
    "BERTH_ALLOW_PRIVATE_TARGETS": "1",
}
#: A public address: a webhook to it is created without a lookup; no event reaches it.
ELSEWHERE = "https://93.184.215.14"


def documented_verifier() -> Callable[..., dict[str, Any]]:
    """``verify_webhook`` as docs/guide/webhooks.md shows it, executed."""
    (code,) = re.findall(r"```python\n(.*?)```", WEBHOOKS_PAGE.read_text(), re.S)
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/guide/webhooks.md", "exec"), namespace)
    verify: Callable[..., dict[str, Any]] = namespace["verify_webhook"]
    return verify


def spec_verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """Standard Webhooks, from its text: HMAC-SHA256 keyed with the base64 after whsec_
    over ``id.timestamp.body``, base64, as ``v1,<sig>`` among space-separated entries."""
    key = base64.b64decode(secret[len("whsec_") :])
    content = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    wanted = base64.b64encode(hmac.digest(key, content, "sha256")).decode()
    return any(entry == f"v1,{wanted}" for entry in headers["webhook-signature"].split(" "))


class Receiver:
    """An HTTP endpoint on 127.0.0.1 that answers 500 to the first ``failures`` POSTs,
    then 204; it records each request's headers (lowercased) and body."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.requests: list[tuple[dict[str, str], bytes, int]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                with outer.lock:
                    status = 500 if len(outer.requests) < outer.failures else 204
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    outer.requests.append((headers, body, status))
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks/berth?token=t0k3n"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver(failures=2)
    yield found
    found.close()


@pytest.fixture(scope="module")
def fast_berth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BerthProcess]:
    process = BerthProcess(tmp_path_factory.mktemp("webhooks"), env=dict(FAST)).start()
    yield process
    process.stop()


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_failed_deploy_is_delivered_signed_after_two_failures(
    fast_berth: BerthProcess, receiver: Receiver
) -> None:
    """deployment.failed reaches a receiver that fails twice: three signed POSTs with one
    webhook-id, and the delivery log shows 500, 500, 204 and no next attempt."""
    _, token = fast_berth.new_users(1, "hooks")[0]
    verify = documented_verifier()
    with fast_berth.api(token) as api:
        created = api.post(
            "/api/agent/webhooks",
            json={"url": receiver.url, "events": ["deployment.failed", "deployment.succeeded"]},
        )
        assert created.status_code == 201, created.text
        webhook = created.json()
        secret = webhook["secret"]
        assert secret.startswith("whsec_")
        assert created.headers["location"] == f"/api/agent/webhooks/{webhook['id']}/deliveries"
        server = new_server(api)  # offline: its deployment times out after 2 s
        deployment_id = queue_deploy(api, server["id"], "hooked", "web:1.0")["deployment"]["id"]

        wait_for(lambda: len(receiver.requests) >= 3, 30, "three delivery attempts")
        time.sleep(1.0)  # nothing more comes once it was accepted
        assert [status for _, _, status in receiver.requests] == [500, 500, 204]
        ids = {headers["webhook-id"] for headers, _, _ in receiver.requests}
        assert len(ids) == 1
        for headers, body, _ in receiver.requests:
            assert headers["content-type"] == "application/json"
            assert spec_verify(secret, headers, body)
            event = verify(secret, headers, body)
            assert event["type"] == "deployment.failed"
            assert event["data"]["deploymentId"] == deployment_id
            assert event["data"]["state"] == "timed_out"
            assert event["data"]["installationName"] == "hooked"
            with pytest.raises(ValueError, match="bad signature"):
                verify(secret, headers, body + b" ")
            with pytest.raises(ValueError, match="bad signature"):
                verify("whsec_" + base64.b64encode(b"x" * 32).decode(), headers, body)

        log = api.get(f"/api/agent/webhooks/{webhook['id']}/deliveries")
        assert log.status_code == 200, log.text
        (delivery,) = log.json()["deliveries"]
        assert delivery["messageId"] == ids.pop()
        assert delivery["event"] == "deployment.failed"
        assert delivery["state"] == "delivered"
        assert [a["statusCode"] for a in delivery["attempts"]] == [500, 500, 204]
        assert [a["error"] for a in delivery["attempts"]] == ["HTTP 500", "HTTP 500", None]
        assert delivery["nextAttemptAt"] is None
        assert delivery["deliveredAt"] is not None

        listed = api.get("/api/agent/webhooks").json()["webhooks"]
        assert [w["id"] for w in listed] == [webhook["id"]]
        assert "secret" not in listed[0]
    assert secret not in fast_berth.logs()
    assert secret.removeprefix("whsec_") not in fast_berth.logs()
    assert "t0k3n" not in fast_berth.logs()  # the URL (it may hold a token) is not logged


def test_a_test_event_says_how_the_endpoint_answered(
    fast_berth: BerthProcess, receiver: Receiver
) -> None:
    """POST /webhooks/{id}/test sends one signed webhook.test at once and answers with the
    endpoint's status (500, "HTTP 500", not delivered; then 204, delivered); the CLI's
    webhooks test exits 1 on a refusal; nothing enters the delivery log; another user's
    webhook is a 404."""
    (_, token), (_, other) = fast_berth.new_users(2, "tests")
    env = {"BERTH_URL": fast_berth.url, "BERTH_TOKEN": token}
    with fast_berth.api(token) as api:
        created = api.post(
            "/api/agent/webhooks", json={"url": receiver.url, "events": ["server.offline"]}
        )
        assert created.status_code == 201, created.text
        webhook, secret = created.json(), created.json()["secret"]
        refused = api.post(f"/api/agent/webhooks/{webhook['id']}/test")
        assert refused.status_code == 200, refused.text
        answer = refused.json()
        assert answer["event"] == "webhook.test"
        assert (answer["delivered"], answer["statusCode"], answer["error"]) == (
            False,
            500,
            "HTTP 500",
        )
        by_cli = _cli("webhooks", "test", webhook["id"], env=env, check=False)
        assert by_cli.returncode == 1
        assert "not delivered: HTTP 500" in by_cli.stdout
        taken = api.post(f"/api/agent/webhooks/{webhook['id']}/test").json()
        assert (taken["delivered"], taken["statusCode"], taken["error"]) == (True, 204, None)
        assert [status for _, _, status in receiver.requests] == [500, 500, 204]
        for headers, body, _ in receiver.requests:
            assert spec_verify(secret, headers, body)
            assert json.loads(body)["type"] == "webhook.test"
            assert json.loads(body)["data"]["webhookId"] == webhook["id"]
        log = api.get(f"/api/agent/webhooks/{webhook['id']}/deliveries").json()
        assert log["deliveries"] == []
    with fast_berth.api(other) as stranger:
        assert stranger.post(f"/api/agent/webhooks/{webhook['id']}/test").status_code == 404
    assert len(receiver.requests) == 3


@pytest.fixture
def chat_receivers() -> Iterator[tuple[Receiver, Receiver]]:
    slack, discord = Receiver(failures=0), Receiver(failures=0)
    yield slack, discord
    slack.close()
    discord.close()


def test_slack_and_discord_formats_say_the_event_in_words_with_a_link(
    tmp_path: Path, chat_receivers: tuple[Receiver, Receiver]
) -> None:
    """A ``slack`` webhook gets Slack's incoming-webhook shape ``{"text"}`` and a
    ``discord`` one Discord's execute-webhook ``{"content"}`` (at most 2000 characters,
    mentions off): the failed deployment in words, naming the app and the server, with a
    link to the app's page under ``BERTH_BASE_URL``; names are escaped for each chat's
    markup; both are signed as a standard delivery is."""
    slack, discord = chat_receivers
    base = "https://berth.example.com"
    env = {**FAST, "BERTH_BASE_URL": base}
    process = BerthProcess(tmp_path / "data", env=env).start()
    try:
        _, token = process.new_users(1, "chat")[0]
        with process.api(token) as api:
            hooks = {}
            for fmt, receiver in (("slack", slack), ("discord", discord)):
                created = api.post(
                    "/api/agent/webhooks",
                    json={"url": receiver.url, "events": ["deployment.failed"], "format": fmt},
                )
                assert created.status_code == 201, created.text
                assert created.json()["format"] == fmt
                hooks[fmt] = created.json()
            listed = api.get("/api/agent/webhooks").json()["webhooks"]
            assert sorted(w["format"] for w in listed) == ["discord", "slack"]
            server = new_server(api, "web <1>")  # offline: the deploy times out after 2 s
            queued = queue_deploy(api, server["id"], "Shop *beta*", "web:1.0")
            installation_id = queued["installation"]["id"]
            wait_for(lambda: slack.requests and discord.requests, 30, "both chat deliveries")
        page = f"{base}/servers/{server['id']}/installations/{installation_id}/"

        headers, body, _ = slack.requests[0]
        message = json.loads(body)
        assert list(message) == ["text"]
        assert isinstance(message["text"], str)
        assert message["text"].startswith(
            "❌ Deployment of Shop *beta* on web &lt;1&gt; timed out."
        )
        assert message["text"].endswith(f"<{page}|Open the app>")
        assert spec_verify(hooks["slack"]["secret"], headers, body)

        headers, body, _ = discord.requests[0]
        message = json.loads(body)
        assert set(message) == {"content", "allowed_mentions"}
        assert message["allowed_mentions"] == {"parse": []}
        assert 0 < len(message["content"]) <= 2000
        assert message["content"].startswith(
            "❌ Deployment of Shop \\*beta\\* on web \\<1\\> timed out."
        )
        assert message["content"].endswith(f"[Open the app](<{page}>)")
        assert spec_verify(hooks["discord"]["secret"], headers, body)
    finally:
        process.stop()


def test_a_format_is_checked(berth: BerthProcess) -> None:
    """A format other than standard, slack or discord is a 422 at ``body.format``."""
    _, token = berth.new_users(1, "fmt")[0]
    with berth.api(token) as api:
        refused = api.post(
            "/api/agent/webhooks",
            json={"url": ELSEWHERE, "events": ["server.online"], "format": "teams"},
        )
        body = problem(refused, 422)
        assert [e["location"] for e in body["errors"]] == ["body.format"]
        plain = api.post(
            "/api/agent/webhooks", json={"url": ELSEWHERE, "events": ["server.online"]}
        )
        assert plain.status_code == 201, plain.text
        assert plain.json()["format"] == "standard"


def test_an_endpoint_that_never_answers_well_is_given_up(
    tmp_path: Path, receiver: Receiver
) -> None:
    """With 2 attempts allowed, two 500s end the delivery failed, with no next attempt."""
    process = BerthProcess(
        tmp_path / "data", env={**FAST, "BERTH_WEBHOOK_MAX_ATTEMPTS": "2"}
    ).start()
    try:
        _, token = process.new_users(1, "giveup")[0]
        with process.api(token) as api:
            hook = api.post(
                "/api/agent/webhooks", json={"url": receiver.url, "events": ["deployment.failed"]}
            ).json()
            server = new_server(api)
            queue_deploy(api, server["id"], "doomed", "web:1.0")
            path = f"/api/agent/webhooks/{hook['id']}/deliveries"
            (delivery,) = wait_for(
                lambda: [d for d in api.get(path).json()["deliveries"] if d["state"] == "failed"],
                30,
                "the delivery given up",
            )
        assert len(receiver.requests) == 2
        assert [a["statusCode"] for a in delivery["attempts"]] == [500, 500]
        assert delivery["nextAttemptAt"] is None
    finally:
        process.stop()


class TestHostileInput:
    @pytest.mark.parametrize(
        "url",
        [
            "ftp://example.com/hook",
            "file:///etc/passwd",
            "javascript:alert(1)",
            "https://example.com/\r\nX-Injected: 1",
            "https://user:secret@example.com/",
            "https://bücher.example/",
            "https://example.com:99999/",
            "https://example.com/" + "a" * 3000,
        ],
    )
    def test_bad_urls_are_a_422_at_body_url(self, berth: BerthProcess, url: str) -> None:
        """Other schemes, newlines, credentials, non-ASCII, bad ports, too long: 422."""
        _, token = berth.new_users(1, "hostile")[0]
        with berth.api(token) as api:
            response = api.post(
                "/api/agent/webhooks", json={"url": url, "events": ["server.offline"]}
            )
            body = problem(response, 422)
            assert [e["location"] for e in body["errors"]] == ["body.url"]
            assert "user:secret" not in response.text  # credentials are not echoed
            assert api.get("/api/agent/webhooks").json()["webhooks"] == []

    def test_every_bad_field_at_once(self, berth: BerthProcess) -> None:
        """Bad URL, unknown event, an unknown field (a secret of one's own): all named."""
        _, token = berth.new_users(1, "hostile")[0]
        with berth.api(token) as api:
            response = api.post(
                "/api/agent/webhooks",
                json={"url": "gopher://x", "events": ["deployment.exploded"], "secret": "mine"},
            )
            body = problem(response, 422)
            assert {e["location"] for e in body["errors"]} == {
                "body.url",
                "body.events",
                "body.secret",
            }
            for bad_events in ([], ["server.online", "server.online"], "server.online", [1]):
                response = api.post(
                    "/api/agent/webhooks",
                    json={"url": "https://example.com/x", "events": bad_events},
                )
                assert [e["location"] for e in problem(response, 422)["errors"]] == ["body.events"]

    def test_bodies_that_are_not_json_or_too_big(self, berth: BerthProcess) -> None:
        """Not JSON: 415/400; over 1 MiB: 413; nothing is created."""
        _, token = berth.new_users(1, "hostile")[0]
        with berth.api(token) as api:
            text = api.post(
                "/api/agent/webhooks", content=b"url=x", headers={"content-type": "text/plain"}
            )
            problem(text, 415)
            broken = api.post(
                "/api/agent/webhooks", content=b"{", headers={"content-type": "application/json"}
            )
            problem(broken, 400)
            huge = json.dumps(
                {"url": "https://example.com/" + "a" * (2 << 20), "events": ["server.online"]}
            ).encode()
            too_big = api.post(
                "/api/agent/webhooks", content=huge, headers={"content-type": "application/json"}
            )
            problem(too_big, 413)
            assert api.get("/api/agent/webhooks").json()["webhooks"] == []

    def test_another_users_webhook_is_not_found(self, berth: BerthProcess) -> None:
        """Bob can neither read the deliveries of Alice's webhook nor delete it: 404,
        as for an id that does not exist or is not a UUID."""
        _, alice = berth.new_users(1, "alice")[0]
        _, bob = berth.new_users(1, "bob")[0]
        with berth.api(alice) as api:
            hook = api.post(
                "/api/agent/webhooks",
                json={"url": f"{ELSEWHERE}/x", "events": ["server.online"]},
            ).json()
        with berth.api(bob) as api:
            for path in (
                f"/api/agent/webhooks/{hook['id']}/deliveries",
                "/api/agent/webhooks/00000000-0000-4000-8000-000000000000/deliveries",
                "/api/agent/webhooks/not-a-uuid/deliveries",
            ):
                problem(api.get(path), 404)
            problem(api.delete(f"/api/agent/webhooks/{hook['id']}"), 404)
            theirs = api.get(f"/api/agent/webhooks/{hook['id']}/deliveries").json()
            nobodys = api.get(f"/api/agent/webhooks/{uuid.uuid4()}/deliveries").json()
            assert without_request_id(theirs) == without_request_id(nobodys)
            assert api.get("/api/agent/webhooks").json()["webhooks"] == []
        with berth.api(alice) as api:
            assert api.get(f"/api/agent/webhooks/{hook['id']}/deliveries").status_code == 200
            assert api.delete(f"/api/agent/webhooks/{hook['id']}").status_code == 204
            problem(api.delete(f"/api/agent/webhooks/{hook['id']}"), 404)

    def test_twenty_webhooks_at_most(self, berth: BerthProcess) -> None:
        """The 21st is a 409 of type webhook-limit."""
        _, token = berth.new_users(1, "many")[0]
        with berth.api(token) as api:
            for n in range(20):
                created = api.post(
                    "/api/agent/webhooks",
                    json={"url": f"{ELSEWHERE}/{n}", "events": ["server.online"]},
                )
                assert created.status_code == 201, created.text
            refused = api.post(
                "/api/agent/webhooks",
                json={"url": f"{ELSEWHERE}/21", "events": ["server.online"]},
            )
            assert problem(refused, 409)["type"] == "urn:berth:problem:webhook-limit"


def _cli(*args: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BERTH, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=check,
        env={**os.environ, **env},
    )


def test_the_cli_adds_lists_reads_and_removes(berth: BerthProcess) -> None:
    """berth webhooks add prints the secret once; list, deliveries and remove work."""
    _, token = berth.new_users(1, "cli")[0]
    env = {"BERTH_URL": berth.url, "BERTH_TOKEN": token}
    added = _cli(
        "webhooks",
        "add",
        f"{ELSEWHERE}/cli?token=t0k3n",
        "--event",
        "server.offline",
        "--event",
        "server.online",
        "--json",
        env=env,
    )
    body = json.loads(added.stdout)
    assert body["secret"].startswith("whsec_")
    assert body["events"] == ["server.offline", "server.online"]
    assert body["url"] == f"{ELSEWHERE}/cli?token=t0k3n"  # whole, this once
    listed = _cli("webhooks", "list", env=env).stdout
    assert body["id"] in listed
    assert "whsec_" not in listed
    assert f"{ELSEWHERE}/…" in listed  # the path and query (a token's place) cut
    assert "t0k3n" not in listed
    log = _cli("webhooks", "deliveries", body["id"], env=env).stdout
    assert log.split("\n")[0].split() == [
        "MESSAGE",
        "EVENT",
        "STATE",
        "ATTEMPTS",
        "LAST",
        "STATUS",
        "ERROR",
        "NEXT",
    ]
    bad = _cli(
        "webhooks",
        "add",
        "ftp://x",
        "--event",
        "server.online",
        env=env,
        check=False,
    )
    assert bad.returncode == 1
    assert "body.url" in bad.stderr
    _cli("webhooks", "remove", body["id"], env=env)
    assert body["id"] not in _cli("webhooks", "list", env=env).stdout


def test_the_library_manages_webhooks(tmp_path: Path) -> None:
    """berth.open(...): create_webhook returns the secret, webhooks lists, the rules hold."""
    import asyncio

    import berth as library

    async def scenario() -> None:
        async with library.open(tmp_path / "lib") as app:
            user = await app.create_user("lib@example.com", PASSWORD)
            created = await app.create_webhook(
                user, url=f"{ELSEWHERE}/lib", events=["deployment.succeeded"]
            )
            assert created.secret.startswith("whsec_")
            assert [w.id for w in await app.webhooks(user)] == [created.webhook.id]
            assert await app.webhook_deliveries(user, created.webhook.id) == []
            with pytest.raises(library.InvalidInput) as caught:
                await app.create_webhook(user, url="ftp://x", events=["nope"])
            assert {e.location for e in caught.value.errors} == {"url", "events"}
            await app.delete_webhook(user, str(created.webhook.id))
            with pytest.raises(library.NotFound):
                await app.delete_webhook(user, created.webhook.id)

    asyncio.run(scenario())


def test_a_deploy_that_fails_on_the_server_is_told(
    tmp_path: Path, receiver: Receiver, docker_ready: None
) -> None:
    """berth serve --local (real Docker): an image that cannot be pulled fails the deploy
    at step pull, and deployment.failed arrives (after the receiver's two 500s) with the
    state failed and Docker's reason."""
    process = BerthProcess(tmp_path / "data", env=dict(FAST), args=["--local"]).start()
    try:
        _, token = process.new_users(1, "local")[0]
        with process.api(token) as api:
            local = wait_for(
                lambda: [
                    s
                    for s in api.get("/api/agent/servers").json()["servers"]
                    if s["transport"] == "local" and s["status"] == "online"
                ],
                30,
                "the local server online",
            )[0]
            hook = api.post(
                "/api/agent/webhooks", json={"url": receiver.url, "events": ["deployment.failed"]}
            ).json()
            image = f"berth-test/missing-{uuid.uuid4().hex[:8]}:nope"
            queued = queue_deploy(api, local["id"], f"e2e-{RUN}-hook-{uuid.uuid4().hex[:6]}", image)
            deployment_id = queued["deployment"]["id"]
            wait_for(lambda: len(receiver.requests) >= 3, 60, "three delivery attempts")
        headers, body, _ = receiver.requests[-1]
        event = documented_verifier()(hook["secret"], headers, body)
        assert event["type"] == "deployment.failed"
        assert event["data"]["deploymentId"] == deployment_id
        assert event["data"]["state"] == "failed"
        # The pull step's own words (no registry is reachable here): which of not found,
        # unauthorized or unreachable happened, and Docker's message.
        assert event["data"]["error"].startswith("pull: ")
        assert image in event["data"]["error"]
    finally:
        process.stop()


def test_two_workers_on_postgresql_deliver_each_event_once(
    tmp_path: Path, receiver: Receiver
) -> None:
    """An API replica (serve --no-worker) and two ``berth worker`` processes on one
    PostgreSQL: six deployments time out; each event reaches the receiver (which fails
    its first two POSTs) and is accepted exactly once, under its own webhook-id."""
    with postgres_database("berth_hooks") as url:
        env = {
            **FAST,
            "BERTH_DATABASE_URL": url,
            "BERTH_SECRET_KEY": base64.b64encode(b"k" * 32).decode(),
        }
        api_process = BerthProcess(tmp_path / "api", env=env, args=["--no-worker"]).start()
        workers = []
        try:
            for n in range(2):
                log = tmp_path / f"worker-{n}.log"
                workers.append(
                    subprocess.Popen(
                        [BERTH, "worker", "--data", str(tmp_path / f"w{n}")],
                        stdout=log.open("wb"),
                        stderr=subprocess.STDOUT,
                        env={**os.environ, "BERTH_LOG_FORMAT": "json", **env},
                    )
                )
            _, token = api_process.new_user("scale")
            with api_process.api(token) as api:
                hook = api.post(
                    "/api/agent/webhooks",
                    json={"url": receiver.url, "events": ["deployment.failed"]},
                ).json()
                server = new_server(api)
                for n in range(6):
                    queue_deploy(api, server["id"], f"app-{n}", "web:1.0", port=4000 + n)
                path = f"/api/agent/webhooks/{hook['id']}/deliveries"
                wait_for(
                    lambda: (
                        len(api.get(path).json()["deliveries"]) == 6
                        and all(
                            d["state"] == "delivered" for d in api.get(path).json()["deliveries"]
                        )
                    ),
                    60,
                    "six deliveries made",
                )
            time.sleep(1.0)
            accepted = [h["webhook-id"] for h, _, status in receiver.requests if status == 204]
            assert len(accepted) == 6
            assert len(set(accepted)) == 6
            assert len(receiver.requests) == 8
            for headers, body, _ in receiver.requests:
                assert spec_verify(hook["secret"], headers, body)
        finally:
            for worker in workers:
                worker.terminate()
                worker.wait(20)
            api_process.stop()
