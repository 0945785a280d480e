"""What the API's answers say about caching: ETags on reads (If-None-Match → 304), one
Cache-Control on every answer, and the event stream's 204 for a client resuming after
its end."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from collections.abc import Iterator
from typing import Any

import pytest
from berth.core import commands as c
from berth.core.models import Server, User
from berth.entrypoints.http import create_app
from berth.entrypoints.http.etags import etags, matches
from berth.entrypoints.settings import Settings
from litestar.testing import TestClient
from wiring import App, finish

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the dashboard's


@pytest.fixture
def served(
    app: App, owner: User, server: Server
) -> Iterator[tuple[TestClient[Any], dict[str, str]]]:
    token = asyncio.run(app.bus.handle(c.RegenerateToken(), owner))
    with TestClient(create_app(app.bus, Settings()), base_url="http://berth.local") as client:
        yield client, {"Authorization": f"Bearer {token}"}


def test_a_read_carries_an_etag_and_if_none_match_is_304(
    served: tuple[TestClient[Any], dict[str, str]], server: Server
) -> None:
    """GET of a server has a strong ETag and `private, no-cache`; the same tag in
    If-None-Match is a 304 without a body; after a change the tag is another."""
    client, auth = served
    path = f"/api/agent/servers/{server.id}"
    first = client.get(path, headers=auth)
    assert first.status_code == 200
    tag = first.headers["ETag"]
    assert tag.startswith('"')
    assert first.headers.get_list("Cache-Control") == ["private, no-cache"]
    again = client.get(path, headers={**auth, "If-None-Match": tag})
    assert again.status_code == 304
    assert again.content == b""
    assert again.headers["ETag"] == tag
    assert client.get(path, headers={**auth, "If-None-Match": '"other"'}).status_code == 200
    listing = f"/api/agent/install?serverId={server.id}"
    before = client.get(listing, headers=auth).headers["ETag"]
    body = {"serverId": str(server.id), "name": "web", "image": "nginx:1.27"}
    assert client.post("/api/agent/docker/deploy", json=body, headers=auth).status_code == 202
    changed = client.get(listing, headers={**auth, "If-None-Match": before})
    assert changed.status_code == 200  # a new app listed: another tag
    assert changed.headers["ETag"] != before


def test_writes_and_errors_carry_no_etag_and_one_cache_control(
    served: tuple[TestClient[Any], dict[str, str]],
) -> None:
    """A 404 and a POST have no ETag and exactly one Cache-Control (no-store)."""
    client, auth = served
    missing = client.get("/api/agent/servers/0b5d4c36-1d6a-4d0e-9a53-6f1f6f0b8a11", headers=auth)
    assert missing.status_code == 404
    assert "ETag" not in missing.headers
    assert missing.headers.get_list("Cache-Control") == ["no-store"]


def test_if_none_match_reads_lists_and_weak_tags() -> None:
    """If-None-Match matches `*`, any tag of a list, and a weak form of the tag."""
    assert matches("*", '"a"')
    assert matches('"b", "a"', '"a"')
    assert matches('W/"a"', '"a"')
    assert not matches('"b"', '"a"')


async def test_a_body_sent_again_is_hashed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same body object answered again (a listing rendered once) keeps its tag without
    hashing it again; an equal body in another object gets the very same tag."""
    hashed: list[bytes] = []
    sha256 = hashlib.sha256

    def counting(data: bytes) -> Any:
        hashed.append(data)
        return sha256(data)

    monkeypatch.setattr(hashlib, "sha256", counting)
    rendered = b'{"installations": []}' * 100

    async def route(scope: Any, receive: Any, send: Any) -> None:
        body = rendered if scope["path"] == "/same" else bytes(bytearray(rendered))
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def get(path: str) -> str:
        sent: list[Any] = []

        async def send(message: Any) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "GET", "path": path, "headers": []}
        await etags(route)(scope, None, send)  # type: ignore[arg-type]
        return dict(sent[0]["headers"])[b"etag"].decode()

    tags = [await get("/same") for _ in range(3)]
    assert len(hashed) == 1
    digest = base64.urlsafe_b64encode(sha256(rendered).digest()[:18]).decode()
    assert tags == [f'"{digest}"'] * 3
    assert await get("/copy") == tags[0]
    assert len(hashed) == 2


async def test_resuming_after_the_end_is_204_and_a_stream_has_one_cache_control(
    app: App, owner: User, server: Server
) -> None:
    """An event stream has one Cache-Control; resuming after the last event of a
    deployment that has ended is a 204 (an EventSource stops), while a fresh reader still
    gets its events and end."""
    queued = await app.bus.handle(
        c.parse_deploy({"server_id": str(server.id), "name": "web", "image": "nginx:1.27"}), owner
    )
    ident = queued.deployment.id
    await finish(app, owner, ident)
    token = await app.bus.handle(c.RegenerateToken(), owner)
    auth = {"Authorization": f"Bearer {token}"}
    path = f"/api/agent/deployments/{ident}/events"

    def read() -> tuple[Any, Any]:
        with TestClient(create_app(app.bus, Settings()), base_url="http://berth.local") as client:
            whole = client.get(path, headers=auth)
            ids = [line[3:].strip() for line in whole.text.splitlines() if line.startswith("id:")]
            after = client.get(path, headers={**auth, "Last-Event-ID": ids[-1]})
            return whole, after

    whole, after = await asyncio.to_thread(read)
    assert whole.status_code == 200
    assert "event: end" in whole.text
    assert whole.headers.get_list("Cache-Control") == ["no-cache"]
    assert after.status_code == 204
    assert after.content == b""
