"""The outbound guard on a real ``berth serve`` (issue 21, findings 1 and 8): webhook
URLs that lead inside the operator's network are refused at ``body.url`` through every
entrypoint; a webhook can no longer stop a loopback Caddy through its admin API; with
``BERTH_ALLOW_PRIVATE_TARGETS=0`` loopback server addresses are refused; and a server's
connect errors do not tell a refused port from a silent one or a non-SSH one."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from harness import BERTH, PASSWORD, BerthProcess, free_port, new_server, problem
from infra import CADDY

pytestmark = pytest.mark.integration

#: Finding 1's URLs (and their kin): each reaches inside, or cannot be told not to.
INSIDE = [
    ("http://127.0.0.1:2019/stop", "loopback"),
    ("http://[::1]:8080/", "loopback"),
    ("http://localhost:8080/", "localhost resolves to 127.0.0.1, a loopback address"),
    ("http://0x7f000001:8080/", "legacy spelling"),
    ("http://2130706433:8080/", "legacy spelling"),
    ("http://0177.0.0.1/", "legacy spelling"),
    ("http://127.1/", "legacy spelling"),
    ("http://169.254.169.254/latest/meta-data/", "link-local"),
    ("http://10.0.0.1/", "private"),
    ("http://172.16.5.4/", "private"),
    ("http://192.168.1.1/", "private"),
    ("http://100.64.0.1/", "carrier-grade NAT"),
    ("http://[fd00::1]/", "unique local"),
    ("http://[fe80::1]/", "link-local"),
    ("http://[::ffff:127.0.0.1]/", "IPv4-mapped"),
    ("http://[::ffff:7f00:1]/", "IPv4-mapped"),
    ("http://0.0.0.0:8080/", "unspecified"),
    ("http://[::]/", "unspecified"),
    ("http://224.0.0.1/", "multicast"),
    # Resolves to 169.254.169.254 in a cloud, and to nothing here: refused either way.
    ("http://metadata.google.internal/computeMetadata/v1/", "metadata.google.internal"),
]


def _create(process: BerthProcess, token: str, url: str) -> Any:
    with process.api(token) as api:
        return api.post("/api/agent/webhooks", json={"url": url, "events": ["server.offline"]})


class TestWebhookTargets:
    @pytest.mark.parametrize(("url", "said"), INSIDE)
    def test_a_url_that_leads_inside_is_a_422_at_body_url(
        self, berth: BerthProcess, url: str, said: str
    ) -> None:
        """Loopback, private, shared, link-local, unique-local, IPv4-mapped, unspecified,
        multicast targets, in any spelling, and names resolving there (or nowhere): 422
        at body.url saying why; nothing is created."""
        _, token = berth.new_users(1, "ssrf")[0]
        body = problem(_create(berth, token, url), 422)
        assert [e["location"] for e in body["errors"]] == ["body.url"]
        assert said in body["errors"][0]["message"], body
        with berth.api(token) as api:
            assert api.get("/api/agent/webhooks").json()["webhooks"] == []

    def test_a_public_address_is_taken(self, berth: BerthProcess) -> None:
        """An IP literal of a public address needs no lookup and is accepted."""
        _, token = berth.new_users(1, "public")[0]
        created = _create(berth, token, "https://93.184.215.14/hooks/berth")
        assert created.status_code == 201, created.text

    def test_the_cli_says_why(self, berth: BerthProcess) -> None:
        """berth webhooks add names body.url and the reason, and exits 1."""
        _, token = berth.new_users(1, "ssrf-cli")[0]
        done = subprocess.run(
            [BERTH, "webhooks", "add", "http://localhost:2019/stop", "--event", "server.online"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "BERTH_URL": berth.url, "BERTH_TOKEN": token},
        )
        assert done.returncode == 1
        assert "body.url" in done.stderr
        assert "loopback" in done.stderr

    def test_the_library_is_refused_too(self, tmp_path: Path) -> None:
        """berth.open(...).create_webhook: InvalidInput at url, as the API."""
        import berth as library

        async def scenario() -> None:
            async with library.open(tmp_path / "lib") as app:
                user = await app.create_user("ssrf@example.com", PASSWORD)
                with pytest.raises(library.InvalidInput) as caught:
                    await app.create_webhook(
                        user, url="http://[::ffff:127.0.0.1]:2019/stop", events=["server.online"]
                    )
                assert [e.location for e in caught.value.errors] == ["url"]
                assert await app.webhooks(user) == []

        asyncio.run(scenario())


# -- a loopback Caddy's admin API -----------------------------------------------------------


@pytest.fixture
def caddy_admin_on_loopback() -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A real Caddy with its admin API on 127.0.0.1 (as ``caddy run`` has it by default
    on localhost:2019), on a free port."""
    if not Path(CADDY).exists():
        pytest.skip(f"{CADDY} is not installed")
    port = free_port()
    home = Path(tempfile.mkdtemp(prefix="berth-admin-caddy-"))
    config = home / "caddy.json"
    config.write_text(json.dumps({"admin": {"listen": f"127.0.0.1:{port}"}}))
    process = subprocess.Popen(
        [CADDY, "run", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={"PATH": "/usr/bin:/bin", "HOME": str(home), "XDG_DATA_HOME": str(home / "d")},
    )
    deadline = time.monotonic() + 15
    while not _admin_answers(port):
        assert process.poll() is None, "caddy exited at start"
        assert time.monotonic() < deadline, "caddy's admin API did not answer"
        time.sleep(0.05)
    yield process, port
    process.terminate()
    process.wait(10)


def _admin_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            sock.sendall(b"GET /config/ HTTP/1.0\r\nHost: localhost\r\n\r\n")
            return sock.recv(16).startswith(b"HTTP/1.")
    except OSError:
        return False


def test_a_webhook_cannot_stop_a_loopback_caddy(
    tmp_path: Path, caddy_admin_on_loopback: tuple[subprocess.Popen[bytes], int]
) -> None:
    """Finding 1 as reported: a webhook to a loopback Caddy admin API's /stop, told of a
    deployment that fails. It is refused at creation (422 at body.url, each spelling);
    the deployment fails, and the Caddy still runs."""
    caddy, port = caddy_admin_on_loopback
    process = BerthProcess(
        tmp_path / "data",
        env={"BERTH_QUEUE_TIMEOUT": "1", "BERTH_WEBHOOK_POLL_SECONDS": "0.1"},
    ).start()
    try:
        _, token = process.new_users(1, "caddy")[0]
        with process.api(token) as api:
            answers = [
                api.post("/api/agent/webhooks", json={"url": url, "events": ["deployment.failed"]})
                for url in (
                    f"http://127.0.0.1:{port}/stop",
                    f"http://localhost:{port}/stop",
                    f"http://[::ffff:127.0.0.1]:{port}/stop",
                    f"http://0x7f000001:{port}/stop",
                )
            ]
            server = new_server(api)  # offline: its deployment times out within 1 s
            deployed = api.post(
                "/api/agent/docker/deploy",
                json={"serverId": server["id"], "name": "stopper", "image": "web:1.0"},
            )
            path = f"/api/agent/deployments/{deployed.json()['deployment']['id']}"
            _wait(lambda: api.get(path).json()["state"] == "timed_out", 20, "the deploy failed")
            time.sleep(2.0)  # a delivery, had one been made, goes within 0.1 s of the end
        assert caddy.poll() is None, "the webhook stopped Caddy"
        assert _admin_answers(port)
        for answer in answers:
            body = problem(answer, 422)
            assert [e["location"] for e in body["errors"]] == ["body.url"]
    finally:
        process.stop()


def _wait(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


# -- server addresses ---------------------------------------------------------------------


def test_strict_operators_refuse_loopback_servers(tmp_path: Path) -> None:
    """BERTH_ALLOW_PRIVATE_TARGETS=0: a loopback or link-local server address (or a name
    resolving to one) is a 422 at body.address; a LAN address is created."""
    process = BerthProcess(tmp_path / "data", env={"BERTH_ALLOW_PRIVATE_TARGETS": "0"}).start()
    try:
        _, token = process.new_users(1, "strict")[0]
        with process.api(token) as api:
            for address in ("127.0.0.1", "::1", "localhost", "169.254.169.254", "fe80::1"):
                refused = api.post(
                    "/api/agent/servers",
                    json={"name": f"s-{uuid.uuid4().hex[:6]}", **{"address": address}},
                )
                body = problem(refused, 422)
                assert [e["location"] for e in body["errors"]] == ["body.address"], body
            created = api.post(
                "/api/agent/servers", json={"name": "lan", "address": "192.168.10.20"}
            )
            assert created.status_code == 201, created.text
            assert [s["name"] for s in api.get("/api/agent/servers").json()["servers"]] == ["lan"]
    finally:
        process.stop()


def test_by_default_a_loopback_server_is_taken(berth: BerthProcess) -> None:
    """Unset (the default), a server at 127.0.0.1 is created: an SSH tunnel's end, or a
    test's sshd."""
    _, token = berth.new_users(1, "tunnel")[0]
    with berth.api(token) as api:
        assert new_server(api)["address"] == "127.0.0.1"


class _NotSsh(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


def test_connect_errors_do_not_tell_which_ports_answer(tmp_path: Path) -> None:
    """Three servers at ports where nothing listens, something listens but never speaks,
    and an HTTP server answers: each goes offline with the same sentence (but for the
    port), so a server's address cannot map which ports are open (finding 8)."""
    closed = free_port()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # the kernel completes the handshake; nobody ever says a word
    http = ThreadingHTTPServer(("127.0.0.1", 0), _NotSsh)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    ports = {"closed": closed, "silent": silent.getsockname()[1], "http": http.server_port}
    process = BerthProcess(tmp_path / "data", env={"BERTH_MONITOR_SECONDS": "0.5"}).start()
    try:
        _, token = process.new_users(1, "scan")[0]
        with process.api(token) as api:
            ids = {kind: new_server(api, kind, sshPort=port)["id"] for kind, port in ports.items()}

            def details() -> dict[str, str | None]:
                found = {s["id"]: s for s in api.get("/api/agent/servers").json()["servers"]}
                return {kind: found[i]["statusDetail"] for kind, i in ids.items()}

            _wait(lambda: all(details().values()), 40, "every server's reason")
            said = {
                kind: re.sub(rf"\b{ports[kind]}\b", "PORT", str(detail))
                for kind, detail in details().items()
            }
        assert len(set(said.values())) == 1, said
        (sentence,) = set(said.values())
        assert "berth could not reach 127.0.0.1 on port PORT over SSH" in sentence
        for word in ("refused", "timed out", "time", "protocol", "version", "HTTP"):
            assert word not in sentence
    finally:
        process.stop()
        http.shutdown()
        http.server_close()
        silent.close()
