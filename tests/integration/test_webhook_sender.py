"""The HTTP sender (``HttpWebhookSender``) against real endpoints on loopback: it POSTs
the body and headers as given, never follows a redirect, bounds the time, and turns
every failure into a result (no exception) that does not say which failure it was.

Its connections come from the outbound guard's transport (``guarded_transport``): the
tests that deliver allow private targets (the endpoints are on loopback, as
``BERTH_ALLOW_PRIVATE_TARGETS=1`` allows); the others show what the guard refuses,
DNS rebinding included, and that the URL's host stays the TLS name and ``Host``."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from berth.adapters.outbound import SystemResolver, guarded_transport
from berth.adapters.webhooks import UNDELIVERED, HttpWebhookSender
from berth.core.outbound import OutboundGuard

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


def inside_allowed() -> HttpWebhookSender:
    """A sender as under BERTH_ALLOW_PRIVATE_TARGETS=1: loopback endpoints are allowed."""
    return HttpWebhookSender(guarded_transport(OutboundGuard(SystemResolver(), allow_private=True)))


async def test_posts_the_body_and_headers(endpoint: Endpoint) -> None:
    """The endpoint gets the bytes and the webhook-* headers; a 204 is the result."""
    sender = inside_allowed()
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
    sender = inside_allowed()
    try:
        result = await sender.send(endpoint.url("/redirect"), HEADERS, b"{}", 5)
    finally:
        await sender.close()
    assert result.status_code == 302
    assert not result.delivered
    assert [path for path, _, _ in endpoint.seen] == ["/redirect"]


async def test_a_slow_endpoint_is_cut_off(endpoint: Endpoint) -> None:
    """No answer within the time given: a result saying so."""
    sender = inside_allowed()
    try:
        result = await sender.send(endpoint.url("/slow"), HEADERS, b"{}", 0.5)
    finally:
        await sender.close()
    assert result.status_code is None
    assert result.error == UNDELIVERED  # the endpoint takes 3 s


async def test_a_huge_answer_is_not_read(endpoint: Endpoint) -> None:
    """A 10 MiB answer: its status counts (the body is dropped unread past a few KiB)."""
    sender = inside_allowed()
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
    sender = inside_allowed()
    try:
        result = await sender.send(f"http://127.0.0.1:{port}/x", HEADERS, b"{}", 5)
    finally:
        await sender.close()
    assert result.status_code is None
    # The same words as a timeout: which of refused, filtered or silent is not told.
    assert result.error == UNDELIVERED
    assert f"127.0.0.1:{port}" not in result.error  # the URL may carry a token: not quoted


class Resolver:
    """A ``HostResolver`` that answers each name with its scripted answers in turn (the
    last one again when they run out), counting the questions: a DNS server that
    changes its mind."""

    def __init__(self, answers: dict[str, list[list[str]]]) -> None:
        self.answers = answers
        self.asked = 0

    async def resolve(self, host: str, port: int) -> list[str]:
        self.asked += 1
        turns = self.answers.get(host, [[]])
        return turns.pop(0) if len(turns) > 1 else turns[0]


async def test_a_loopback_endpoint_is_refused_by_default(endpoint: Endpoint) -> None:
    """With private targets refused (the default), a loopback URL gets no connection:
    the endpoint sees nothing, the result says no more than for a port nobody opened."""
    sender = HttpWebhookSender(guarded_transport(OutboundGuard(SystemResolver())))
    try:
        for url in (endpoint.url("/ok"), endpoint.url("/ok").replace("127.0.0.1", "localhost")):
            result = await sender.send(url, HEADERS, b"{}", 5)
            assert result.status_code is None
            assert result.error == UNDELIVERED
    finally:
        await sender.close()
    assert endpoint.seen == []


async def test_a_name_that_turns_to_loopback_after_its_check_is_not_reached(
    endpoint: Endpoint,
) -> None:
    """DNS rebinding: hooks.example resolves to a public address when the webhook is
    created (checked), then to 127.0.0.1 when it is sent. The sender resolves and checks
    again at connect time, on the very address it would connect to: nothing reaches
    the loopback endpoint."""
    port = endpoint.server.server_address[1]
    resolver = Resolver({"hooks.example": [["93.184.215.14"], ["127.0.0.1"]]})
    guard = OutboundGuard(resolver)
    assert [str(a) for a in await guard.addresses("hooks.example", port)] == ["93.184.215.14"]
    sender = HttpWebhookSender(guarded_transport(guard))
    try:
        result = await sender.send(f"http://hooks.example:{port}/ok", HEADERS, b"{}", 5)
    finally:
        await sender.close()
    assert result.status_code is None
    assert result.error == UNDELIVERED
    assert endpoint.seen == []
    assert resolver.asked == 2


async def test_one_inside_address_among_public_ones_refuses_the_name(endpoint: Endpoint) -> None:
    """A name resolving to a public address and a loopback one is refused whole: no
    connection is tried to either."""
    port = endpoint.server.server_address[1]
    resolver = Resolver({"mixed.example": [["93.184.215.14", "127.0.0.1"]]})
    sender = HttpWebhookSender(guarded_transport(OutboundGuard(resolver)))
    try:
        result = await sender.send(f"http://mixed.example:{port}/ok", HEADERS, b"{}", 5)
    finally:
        await sender.close()
    assert result.error == UNDELIVERED
    assert endpoint.seen == []


def _certificate(directory: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for ``name`` and its key, as PEM files."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


async def test_the_urls_host_stays_the_tls_name_and_the_host_header(
    endpoint: Endpoint, tmp_path: Path
) -> None:
    """Connected to the checked address, the request still names the URL's host: TLS's
    SNI and certificate check use hooks.test, and so does the Host header."""
    cert, key = _certificate(tmp_path, "hooks.test")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    names: list[str | None] = []

    def remember(sock: ssl.SSLObject, name: str | None, ctx: ssl.SSLContext) -> None:
        names.append(name)

    context.sni_callback = remember  # type: ignore[assignment]
    endpoint.server.socket = context.wrap_socket(endpoint.server.socket, server_side=True)
    port = endpoint.server.server_address[1]
    guard = OutboundGuard(Resolver({"hooks.test": [["127.0.0.1"]]}), allow_private=True)
    trust = ssl.create_default_context(cafile=str(cert))
    sender = HttpWebhookSender(guarded_transport(guard, verify=trust))
    try:
        result = await sender.send(f"https://hooks.test:{port}/ok", HEADERS, b"{}", 5)
    finally:
        await sender.close()
    assert result.status_code == 204, result
    assert names == ["hooks.test"]
    ((_, headers, _),) = endpoint.seen
    assert headers["host"] == f"hooks.test:{port}"
