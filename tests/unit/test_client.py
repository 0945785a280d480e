"""``berth.client`` against the real HTTP app over the fakes (in process), and its
streams and errors against transports that misbehave on purpose."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any
from uuid import UUID, uuid4

import builders
import httpx
import msgspec
import pytest
from berth.client import (
    ApiError,
    AsyncClient,
    Client,
    DeploymentEnd,
    DeploymentStep,
    UnexpectedAnswer,
    Unreachable,
    models,
)
from berth.client.streams import DeploymentEvents, LogLines
from berth.core.commands import RegenerateToken
from berth.core.models import Server, ServerStatus, User
from berth.entrypoints.http import create_app
from berth.entrypoints.settings import Settings
from hypothesis import given
from hypothesis import strategies as st
from litestar.testing import TestClient
from litestar.testing import transport as litestar_transport
from problems import problem_body
from wiring import App, finish

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the dashboard's

URL = "http://berth.test"
IMAGE_ID = "sha256:" + "3f4e5d6c7b8a" * 5 + "9f0e"


async def _token(app: App, user: User) -> str:
    token: str = await app.bus.handle(RegenerateToken(), user)
    return token


def _asgi(app: App, settings: Settings | None = None) -> httpx.ASGITransport:
    return httpx.ASGITransport(create_app(app.bus, settings or Settings()))


class _Closable(litestar_transport.TestClientTransport[Any]):
    def close(self) -> None:  # httpx.Client closes its transport
        pass


@pytest.fixture
def sync_transport(app: App) -> Iterator[httpx.BaseTransport]:
    """The HTTP app for the blocking client (Litestar's test transport, in a portal)."""
    with TestClient(create_app(app.bus, Settings())) as test_client:
        yield _Closable(test_client)


class TestBlocking:
    async def test_bodies_are_typed_and_the_raw_answer_kept(
        self, app: App, owner: User, sync_transport: httpx.BaseTransport
    ) -> None:
        """A method returns the body as a Struct; ``.response`` the status, headers and
        the bytes as berth sent them; a 204 is ``None``."""
        token = await _token(app, owner)
        with Client(URL, token, transport=sync_transport) as berth:
            created = berth.create_server.response(name="web-1", address="203.0.113.7")
            assert created.status == 201
            assert isinstance(created.body, models.CreatedServer)
            assert created.body.status == "pending"
            assert json.loads(created.content)["installCommand"] == created.body.install_command
            listed = berth.servers()
            assert [s.id for s in listed.servers] == [created.body.id]
            assert isinstance(listed.servers[0].id, UUID)
            assert berth.delete_server(created.body.id) is None
            assert berth.servers().servers == []

    async def test_an_error_names_every_argument(
        self, app: App, owner: User, server: Server, sync_transport: httpx.BaseTransport
    ) -> None:
        """A 422 lists each invalid field with the argument it came from."""
        token = await _token(app, owner)
        with (
            Client(URL, token, transport=sync_transport) as berth,
            pytest.raises(ApiError) as caught,
        ):
            berth.deploy(
                server_id=server.id,
                name="x",
                image="nginx",
                port=0,
                health_path="x",
                env={"A-B": "secret"},
            )
        error = caught.value
        assert (error.status, error.kind, error.title) == (
            422,
            "invalid-input",
            "Unprocessable Entity",
        )
        assert [(e.location, e.argument) for e in error.errors] == [
            ("body.name", "name"),
            ("body.image", "image"),
            ("body.port", "port"),
            ("body.env.A-B", "env.A-B"),
            ("body.healthPath", "health_path"),
        ]
        assert str(error).startswith("422 Unprocessable Entity\n  5 invalid field(s).\n")
        assert "secret" not in str(error)

    async def test_a_containers_image_id_reaches_the_client(
        self, app: App, owner: User, server: Server, sync_transport: httpx.BaseTransport
    ) -> None:
        """Each listed container carries the id of the image it runs (``imageId``), null
        where Docker did not say; the client reads it as ``image_id``."""
        app.store.state.servers[server.id] = msgspec.structs.replace(
            server, status=ServerStatus.ONLINE
        )
        app.gateway.containers[server.id] = [
            builders.a_container(id="c1", name="web", image_id=IMAGE_ID),
            builders.a_container(id="c2", name="db"),
        ]
        with Client(URL, await _token(app, owner), transport=sync_transport) as berth:
            answer = berth.containers.response(server.id)
        assert [c.image_id for c in answer.body.containers] == [IMAGE_ID, None]
        wire = json.loads(answer.content)["containers"]
        assert [c["imageId"] for c in wire] == [IMAGE_ID, None]


class TestAsync:
    async def test_deploy_events_and_revisions(self, app: App, owner: User, server: Server) -> None:
        """The async client deploys (camelCase body, ?wait, Idempotency-Key), reads the
        ended deployment's events to its end and lists its revisions."""
        seen: list[httpx.Request] = []
        asgi = _asgi(app)

        async def handle(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            return await asgi.handle_async_request(request)

        transport = httpx.MockTransport(handle)
        async with AsyncClient(URL, await _token(app, owner), transport=transport) as berth:
            queued = await berth.deploy(
                server_id=str(server.id),
                name="shop",
                image="shop:1.0",
                port=8080,
                env={"K": "it's $HOME"},
                idempotency_key="k-1",
            )
            assert isinstance(queued, models.Queued)
            assert queued.deployment.state == "queued"
            assert json.loads(seen[0].content) == {
                "serverId": str(server.id),
                "name": "shop",
                "image": "shop:1.0",
                "port": 8080,
                "env": {"K": "it's $HOME"},
            }
            assert seen[0].headers["Idempotency-Key"] == "k-1"
            assert "wait" not in seen[0].url.params
            await finish(app, owner, queued.deployment.id)
            items = [item async for item in berth.events(queued.deployment.id)]
            assert seen[-1].headers["Accept"] == "text/event-stream"
            assert items[-1] == DeploymentEnd(state="succeeded")
            assert all(isinstance(i, DeploymentStep) and i.id for i in items[:-1])
            page = await berth.revisions(queued.installation.id, limit=5)
            assert [d.id for d in page.deployments] == [queued.deployment.id]
            assert seen[-1].url.params["limit"] == "5"

    async def test_a_429_says_when_to_retry(self, app: App, owner: User) -> None:
        """Past the token's request limit: ``ApiError`` 429 with ``retry_after``."""
        transport = _asgi(app, Settings(rate_limit_per_minute=2))
        async with AsyncClient(URL, await _token(app, owner), transport=transport) as berth:
            await berth.servers()
            await berth.servers()
            with pytest.raises(ApiError) as caught:
                await berth.servers()
        assert caught.value.status == 429
        assert caught.value.kind == "rate-limited"
        assert caught.value.retry_after is not None
        assert caught.value.retry_after > 0

    async def test_another_users_ids_and_a_wrong_token(
        self, app: App, owner: User, server: Server, make_user: Any
    ) -> None:
        """Another user's server is a 404 like a missing one; a wrong token a 401."""
        other = await _token(app, await make_user())
        async with AsyncClient(URL, other, transport=_asgi(app)) as berth:
            with pytest.raises(ApiError) as caught:
                await berth.containers(server.id)
            assert (caught.value.status, caught.value.kind) == (404, "not-found")
        async with AsyncClient(URL, "berth_wrong", transport=_asgi(app)) as stranger:
            with pytest.raises(ApiError) as refused:
                await stranger.servers()
        assert refused.value.status == 401


def _mock(answer: Callable[[httpx.Request], httpx.Response]) -> Client:
    return Client(URL, "t", transport=httpx.MockTransport(answer))


class TestFailures:
    def test_a_url_that_is_not_http_is_refused(self) -> None:
        """Only http:// and https:// URLs: nothing is sent elsewhere."""
        with pytest.raises(ValueError, match="http:// or https://"):
            Client("ftp://berth.test", "t")

    def test_no_answer_is_unreachable(self) -> None:
        """A refused connection names the URL, never the token."""

        def refuse(request: httpx.Request) -> httpx.Response:
            raise httpx.ConnectError("connection refused")

        with pytest.raises(Unreachable) as caught, _mock(refuse) as berth:
            berth.servers()
        assert str(caught.value) == (
            "berth is not reachable at http://berth.test: connection refused"
        )

    def test_a_body_that_is_not_the_apis_is_unexpected(self) -> None:
        """A 200 whose body is not the documented one is an ``UnexpectedAnswer``."""
        with (
            pytest.raises(UnexpectedAnswer, match=r"unexpected answer from http://berth\.test"),
            _mock(lambda request: httpx.Response(200, json={"servers": [{"id": 1}]})) as berth,
        ):
            berth.servers()

    def test_a_page_that_is_not_a_problem_is_still_an_api_error(self) -> None:
        """A proxy's HTML 502 is an ``ApiError`` whose detail is the page, cut short."""
        page = b"<html>" + b"x" * 500 + b"</html>"
        with (
            pytest.raises(ApiError) as caught,
            _mock(lambda request: httpx.Response(502, content=page)) as berth,
        ):
            berth.servers()
        assert caught.value.status == 502
        assert caught.value.detail == page.decode()[:200]
        assert str(caught.value) == f"HTTP 502: {page.decode()[:200]}"


def _events(*parts: bytes, cut: bool = False) -> httpx.Response:
    """An event stream answered in ``parts``; with ``cut``, the connection then breaks."""

    def chunks() -> Iterator[bytes]:
        yield from parts
        if cut:
            raise httpx.ReadError("connection reset")

    return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, content=chunks())


STEP_1 = b'id: 1\nevent: step\ndata: {"at":"2026-01-02T03:04:05Z","step":"pull","message":"a"}\n\n'
STEP_2 = (  # CRLF line ends, and a U+2028 in the message (not a line end in SSE)
    b'id: 2\r\nevent: step\r\ndata: {"at":"2026-01-02T03:04:06Z","step":"create",'
    b'"message":"b\xe2\x80\xa8c"}\r\n\r\n'
)
END = b'event: end\ndata: {"state":"failed"}\n\n'


class TestStreams:
    def test_a_cut_event_stream_resumes_after_the_last_step(self) -> None:
        """A broken connection is opened again with ``Last-Event-ID`` of the last step
        read whole; a half-read message is read again, not twice."""
        seen: list[httpx.Request] = []

        def answer(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            if len(seen) == 1:
                return _events(b"retry: 2000\n\n: keep-alive\n\n", STEP_1, STEP_2[:30], cut=True)
            return _events(STEP_2, END, b"id: 9\nevent: step\ndata: {}\n\n")

        with _mock(answer) as berth:
            items = list(berth.events(uuid4()))
        assert [getattr(i, "step", None) for i in items] == ["pull", "create", None]
        assert items[1].message == "b\u2028c"  # type: ignore[union-attr]
        assert items[-1] == DeploymentEnd(state="failed")
        assert "Last-Event-ID" not in seen[0].headers
        assert seen[1].headers["Last-Event-ID"] == "1"

    def test_a_stream_cut_every_time_gives_up(self) -> None:
        """Five broken connections in a row: ``Unreachable``, saying the stream was lost."""
        calls = []

        def answer(request: httpx.Request) -> httpx.Response:
            calls.append(request)
            return _events(STEP_1, cut=True)

        with pytest.raises(Unreachable, match="lost the stream"), _mock(answer) as berth:
            list(berth.events(uuid4()))
        assert len(calls) == 5

    def test_an_error_answer_to_a_stream_is_an_api_error(self) -> None:
        """A 404 to the events request raises the problem, not an empty stream."""
        problem = problem_body(404, "not-found", "Deployment not found.")
        with (
            pytest.raises(ApiError, match="Deployment not found"),
            _mock(lambda request: httpx.Response(404, content=problem)) as berth,
        ):
            list(berth.events(uuid4()))

    def test_log_lines_end_at_newlines_only(self) -> None:
        """A followed log splits at ``\\n`` alone: a CR, a form feed or a U+2028 an app
        writes stays inside its line; the last line needs no newline."""
        body = "50%\r100%\nform\x0cfeed \u2028 sep\nlast".encode()
        parts = [body[:3], body[3:10], body[10:]]

        def answer(request: httpx.Request) -> httpx.Response:
            assert request.url.path.endswith("/logs/follow")  # its own operation
            assert dict(request.url.params) == {"tail": "3"}
            return httpx.Response(200, content=iter(parts))

        with _mock(answer) as berth:
            lines = list(berth.follow_logs(uuid4(), tail=3))
        assert lines == ["50%\r100%", "form\x0cfeed \u2028 sep", "last"]

    def test_a_cut_log_is_not_resumed(self) -> None:
        """A log stream is not resumable (it would repeat lines): a cut is ``Unreachable``."""
        calls = []

        def answer(request: httpx.Request) -> httpx.Response:
            calls.append(request)
            return _events(b"one\n", cut=True)

        with _mock(answer) as berth:
            lines = berth.follow_logs(uuid4())
            assert next(lines) == "one"
            with pytest.raises(Unreachable):
                next(lines)
        assert len(calls) == 1

    @given(st.lists(st.integers(0, len(STEP_1 + STEP_2 + END)), max_size=8))
    def test_events_read_the_same_however_they_are_cut(self, cuts: list[int]) -> None:
        """The event reader gives the same items whatever the chunk boundaries (a CRLF
        split in two included)."""
        text = (STEP_1 + STEP_2 + END).decode()
        reader, items = DeploymentEvents(), []
        start = 0
        for cut in sorted(cuts):
            items += reader.feed(text[start:cut])
            start = max(start, cut)
        items += reader.feed(text[start:])
        items += reader.close()
        assert [type(i).__name__ for i in items] == [
            "DeploymentStep",
            "DeploymentStep",
            "DeploymentEnd",
        ]
        assert reader.done

    @given(st.lists(st.text(st.characters(blacklist_characters="\n")), min_size=1))
    def test_log_lines_round_trip(self, lines: list[str]) -> None:
        """Any lines without a newline, written one a line, read back equal."""
        reader = LogLines()
        text = "".join(f"{line}\n" for line in lines)
        half = len(text) // 2
        assert reader.feed(text[:half]) + reader.feed(text[half:]) + reader.close() == lines
