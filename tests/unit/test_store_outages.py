"""When berth's own database is down or refuses writes (issue 11), on in-memory fakes:
bookkeeping writes never fail a read, the API answers 503 store-unavailable with
Retry-After (never 401 or 500), /readyz says not ready, and the log gets one warning
per interval instead of a traceback per request."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from berth.core import commands as c
from berth.core import outages
from berth.core.errors import StoreUnavailable
from berth.core.models import User
from berth.core.outages import ThrottledWarning
from berth.core.use_cases.accounts import TOUCH_EVERY
from berth.core.use_cases.sessions import SESSION_IDLE, SESSION_TOUCH_EVERY
from berth.entrypoints.http import create_app
from berth.entrypoints.settings import Settings
from fakes.store import FakeSessionRepository, FakeTokenRepository, FakeUserRepository
from litestar.testing import TestClient
from wiring import App, first_sign_up, unique_email

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PASSWORD = "correct horse battery staple"
DOWN = StoreUnavailable("The database is unreachable; try again shortly.", retry_after=5)


class Recorder:
    """Stands in for ``outages.log``: what the throttled warnings wrote."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.lines.append((event, fields))

    def events(self, name: str) -> list[dict[str, Any]]:
        return [fields for event, fields in self.lines if event == name]


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    found = Recorder()
    monkeypatch.setattr(outages, "log", found)
    # Each test starts a new interval: the module-level warnings forget earlier tests.
    for module in ("accounts", "sessions"):
        mod = __import__(f"berth.core.use_cases.{module}", fromlist=["x"])
        for name, value in vars(mod).items():
            if isinstance(value, ThrottledWarning):
                monkeypatch.setattr(mod, name, ThrottledWarning(value.event))
    from berth.entrypoints.http import errors

    monkeypatch.setattr(errors, "_store_down", ThrottledWarning("store_unavailable"))
    return found


async def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise DOWN


async def _user_and_token(app: App) -> tuple[User, str]:
    user = await app.bus.handle(c.CreateUser(email=unique_email(), password=PASSWORD))
    return user, await app.bus.handle(c.RegenerateToken(), user)


class TestThrottledWarning:
    def test_once_per_interval_with_a_count_of_the_rest(self, recorder: Recorder) -> None:
        """Within one interval only the first call writes; the next line counts the others."""
        now = [100.0]
        warning = ThrottledWarning("store_unavailable", interval=10.0, clock=lambda: now[0])
        assert [warning.warn(n=n) for n in range(50)] == [True] + [False] * 49
        now[0] += 10.0
        assert warning.warn(n=50) is True
        assert recorder.events("store_unavailable") == [
            {"suppressed": 0, "n": 0},
            {"suppressed": 49, "n": 50},
        ]


class TestAuthenticateWhileTheStoreRefusesWrites:
    async def test_a_failed_touch_still_authenticates(
        self, app: App, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """When recording "last used" fails with StoreUnavailable, the token still works."""
        user, token = await _user_and_token(app)
        monkeypatch.setattr(FakeTokenRepository, "touch", _refuse)
        app.clock.advance(TOUCH_EVERY)
        assert (await app.bus.handle(c.Authenticate(token=token))).user.id == user.id
        info = await app.bus.handle(c.TokenInfo(), user)
        assert info is not None
        assert info.last_used_at is None  # not recorded, and nothing else went wrong

    async def test_failed_touches_are_logged_once_per_interval(
        self, app: App, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Fifty failed touches in a row write one warning, naming the cause."""
        _, token = await _user_and_token(app)
        monkeypatch.setattr(FakeTokenRepository, "touch", _refuse)
        for _ in range(50):
            app.clock.advance(TOUCH_EVERY)
            await app.bus.handle(c.Authenticate(token=token))
        lines = recorder.events("token_last_used_not_recorded")
        assert len(lines) == 1
        assert lines[0]["reason"] == DOWN.detail

    async def test_a_touch_that_fails_otherwise_is_not_hidden(
        self, app: App, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Only an outage is forgiven: a bug in the touch still fails the call."""
        _, token = await _user_and_token(app)

        async def broken(*args: Any) -> None:
            raise RuntimeError("a bug")

        monkeypatch.setattr(FakeTokenRepository, "touch", broken)
        app.clock.advance(TOUCH_EVERY)
        with pytest.raises(RuntimeError):
            await app.bus.handle(c.Authenticate(token=token))

    async def test_a_failed_look_up_is_store_unavailable(
        self, app: App, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """When the token cannot be read at all, authenticating raises StoreUnavailable."""
        _, token = await _user_and_token(app)
        monkeypatch.setattr(FakeTokenRepository, "find", _refuse)
        with pytest.raises(StoreUnavailable):
            await app.bus.handle(c.Authenticate(token=token))


class TestResolveSessionWhileTheStoreRefusesWrites:
    async def test_a_failed_touch_keeps_the_session(
        self, app: App, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A session due for its touch resolves as read when the touch cannot be written."""
        email = unique_email()
        started = await first_sign_up(app, email)
        monkeypatch.setattr(FakeSessionRepository, "touch", _refuse)
        app.clock.advance(SESSION_TOUCH_EVERY)
        found = await app.bus.handle(c.ResolveSession(session_id=started.session_id))
        assert found is not None
        assert found[1].last_seen_at == started.session.last_seen_at
        assert len(recorder.events("session_bookkeeping_not_recorded")) == 1

    async def test_a_failed_delete_still_ends_an_expired_session(
        self, app: App, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """An expired session resolves to nobody even when deleting it fails."""
        started = await first_sign_up(app, unique_email())
        monkeypatch.setattr(FakeSessionRepository, "delete", _refuse)
        app.clock.advance(SESSION_IDLE + timedelta(seconds=1))
        assert await app.bus.handle(c.ResolveSession(session_id=started.session_id)) is None


# -- HTTP --------------------------------------------------------------------------------


@pytest.fixture
def served(app: App) -> Iterator[tuple[TestClient[Any], str]]:
    _, token = asyncio.run(_user_and_token(app))
    with TestClient(create_app(app.bus, Settings()), base_url="http://berth.local") as client:
        yield client, token


def _answer_once_down(client: TestClient[Any], monkeypatch: pytest.MonkeyPatch, path: str) -> Any:
    """``path``'s answer once the store refuses to read users (a 200 while it did not)."""
    assert client.get(path).status_code == 200
    monkeypatch.setattr(FakeUserRepository, "first", _refuse)
    return client.get(path)


def _assert_store_unavailable(response: Any) -> dict[str, Any]:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.headers["retry-after"] == "5"
    body: dict[str, Any] = response.json()
    assert body["type"] == "urn:berth:problem:store-unavailable"
    assert body["status"] == 503
    assert "database" in body["detail"]
    assert "restarted" not in body["detail"]
    return body


class TestHttpWhileTheStoreIsDown:
    def test_an_authenticated_call_is_503_not_401(
        self, served: tuple[TestClient[Any], str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A token look-up that cannot reach the store answers 503 store-unavailable."""
        client, token = served
        monkeypatch.setattr(FakeTokenRepository, "find", _refuse)
        response = client.get("/api/agent/servers", headers={"Authorization": f"Bearer {token}"})
        body = _assert_store_unavailable(response)
        assert body["detail"] == DOWN.detail
        assert "www-authenticate" not in response.headers

    def test_a_call_whose_handler_meets_the_outage_is_503(
        self, served: tuple[TestClient[Any], str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Past authentication, a handler's StoreUnavailable is a 503 too, not a 500."""
        client, token = served

        async def refuse_list(*args: Any, **kwargs: Any) -> Any:
            raise DOWN

        from fakes.store import FakeServerRepository

        monkeypatch.setattr(FakeServerRepository, "list", refuse_list)
        response = client.get("/api/agent/servers", headers={"Authorization": f"Bearer {token}"})
        _assert_store_unavailable(response)

    def test_fifty_failed_calls_log_one_warning_and_no_traceback(
        self,
        served: tuple[TestClient[Any], str],
        recorder: Recorder,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """Fifty 503s in a row write one store_unavailable warning, with no exception."""
        client, token = served
        monkeypatch.setattr(FakeTokenRepository, "find", _refuse)
        from berth.entrypoints.http import errors

        exceptions: list[str] = []
        monkeypatch.setattr(errors.log, "exception", lambda event, **kw: exceptions.append(event))
        for _ in range(50):
            response = client.get(
                "/api/agent/servers", headers={"Authorization": f"Bearer {token}"}
            )
            assert response.status_code == 503
        lines = recorder.events("store_unavailable")
        assert len(lines) == 1
        assert lines[0]["path"] == "/api/agent/servers"
        assert exceptions == []

    def test_a_due_touch_that_fails_does_not_fail_the_read(
        self, app: App, served: tuple[TestClient[Any], str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With the last-used touch due and refused, an authenticated GET still answers 200."""
        client, token = served
        monkeypatch.setattr(FakeTokenRepository, "touch", _refuse)
        app.clock.advance(TOUCH_EVERY)
        response = client.get("/api/agent/servers", headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 200, response.text

    def test_readyz_is_503_and_healthz_200(
        self, served: tuple[TestClient[Any], str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """/readyz answers 503 store-unavailable while the store is down; /healthz 200."""
        client, _ = served
        _assert_store_unavailable(_answer_once_down(client, monkeypatch, "/readyz"))
        assert client.get("/healthz").status_code == 200

    def test_readyz_is_503_when_the_store_is_too_slow(
        self, served: tuple[TestClient[Any], str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """/readyz gives up on a store that does not answer within its short timeout."""
        client, _ = served

        async def hang(*args: Any) -> None:
            await asyncio.sleep(30)

        monkeypatch.setattr(FakeUserRepository, "first", hang)
        started = time.monotonic()
        body = _assert_store_unavailable(client.get("/readyz"))
        elapsed = time.monotonic() - started
        assert "did not answer" in body["detail"]
        assert elapsed < 10


class TestDashboardWhileTheStoreIsDown:
    def test_a_page_that_needs_the_store_is_503_naming_the_database(
        self, served: tuple[TestClient[Any], str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The login page, which reads the store, answers a 503 page about the database."""
        response = _answer_once_down(served[0], monkeypatch, "/login")
        assert response.status_code == 503, response.text
        assert "Database unavailable" in response.text
        assert DOWN.detail in response.text
