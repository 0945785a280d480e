"""The HTTP sender (``HttpWebhookSender``) against real endpoints on loopback: it POSTs
the body and headers as given, never follows a redirect, bounds the time, and turns
every failure into a result (no exception)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from berth.adapters.webhooks import HttpWebhookSender

pytestmark = pytest.mark.integration


class Endpoint:
    """Answers each POST by its path: ``/ok`` 204, ``/redirect`` 302 to ``/ok``, ``/slow``
    after 3 s, ``/big`` 200 with 10 MiB; records what reached it."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, str], bytes]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                outer.seen.append(
                    (self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
                if self.path == "/slow":
                    time.sleep(3)
                if self.path == "/redirect":
                    self.send_response(302)
                    self.send_header("location", "/ok")
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                if self.path == "/big":
                    chunk = b"x" * 65536
                    self.send_response(200)
                    self.send_header("content-length", str(len(chunk) * 160))
                    self.end_headers()
                    try:
                        for _ in range(160):
                            self.wfile.write(chunk)
                    except OSError:
                        pass
                    return
                self.send_response(204)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    found = Endpoint()
    yield found
    found.server.shutdown()
    found.server.server_close()


HEADERS = {"content-type": "application/json", "webhook-id": "msg_1", "webhook-signature": "v1,x"}


async def test_posts_the_body_and_headers(endpoint: Endpoint) -> None:
    """The endpoint gets the bytes and the webhook-* headers; a 204 is the result."""
    sender = HttpWebhookSender()
    try:
        result = await sender.send(endpoint.url("/ok"), HEADERS, b'{"a":1}', 5)
    finally:
        await sender.close()
    assert result.status_code == 204
    assert result.delivered
    ((path, headers, body),) = endpoint.seen
    assert (path, body) == ("/ok", b'{"a":1}')
    assert headers["webhook-id"] == "msg_1"
    assert headers["webhook-signature"] == "v1,x"
    assert headers["user-agent"].startswith("berth-webhooks/")


async def test_never_follows_a_redirect(endpoint: Endpoint) -> None:
    """A 302 is the answer: the Location is not requested."""
    sender = HttpWebhookSender()
    try:
        result = await sender.send(endpoint.url("/redirect"), HEADERS, b"{}", 5)
    finally:
        await sender.close()
    assert result.status_code == 302
    assert not result.delivered
    assert [path for path, _, _ in endpoint.seen] == ["/redirect"]


async def test_a_slow_endpoint_is_cut_off(endpoint: Endpoint) -> None:
    """No answer within the time given: a result saying so."""
    sender = HttpWebhookSender()
    try:
        result = await sender.send(endpoint.url("/slow"), HEADERS, b"{}", 0.5)
    finally:
        await sender.close()
    assert result.status_code is None
    assert result.error == "No answer within 0.5 s."  # the endpoint takes 3 s


async def test_a_huge_answer_is_not_read(endpoint: Endpoint) -> None:
    """A 10 MiB answer: its status counts (the body is dropped unread past a few KiB)."""
    sender = HttpWebhookSender()
    try:
        result = await sender.send(endpoint.url("/big"), HEADERS, b"{}", 5)
    finally:
        await sender.close()
    assert result.status_code == 200


async def test_nothing_listening_is_a_result() -> None:
    """A closed port: no status code, an error naming the failure, no exception."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sender = HttpWebhookSender()
    try:
        result = await sender.send(f"http://127.0.0.1:{port}/x", HEADERS, b"{}", 5)
    finally:
        await sender.close()
    assert result.status_code is None
    assert result.error is not None
    assert result.error.startswith("Could not connect: ")
    assert f"127.0.0.1:{port}" not in result.error  # the URL may carry a token: not quoted
