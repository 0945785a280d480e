"""The API's authentication middleware on in-memory fakes: the failed-authentication
throttle counts failures per client address and never refuses a valid credential."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from berth.core import commands as c
from berth.core import tokens
from berth.core.commands import parse_create_server
from berth.entrypoints.http import create_app
from berth.entrypoints.settings import Settings
from litestar.testing import TestClient
from wiring import App, unique_email

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

FAILURES = 3
PASSWORD = "correct horse battery staple"


@pytest.fixture
def served(app: App) -> Iterator[tuple[TestClient[Any], App]]:
    settings = Settings(auth_failures_per_minute=FAILURES)
    with TestClient(create_app(app.bus, settings), base_url="http://berth.local") as client:
        yield client, app


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _fail_until_throttled(client: TestClient[Any], path: str, token: str) -> None:
    for _ in range(FAILURES):
        assert client.get(path, headers=_bearer(token)).status_code == 401
    assert client.get(path, headers=_bearer(token)).status_code == 429


class TestFailedAuthentications:
    def test_a_valid_token_passes_a_throttled_address(
        self, served: tuple[TestClient[Any], App]
    ) -> None:
        """Bad tokens throttle their address (429), yet a valid token from it is answered."""
        client, app = served

        async def token() -> str:
            user = await app.bus.handle(c.CreateUser(email=unique_email(), password=PASSWORD))
            return await app.bus.handle(c.RegenerateToken(), user)

        good = asyncio.run(token())
        _fail_until_throttled(client, "/api/agent/servers", tokens.generate())
        assert client.get("/api/agent/servers", headers=_bearer(good)).status_code == 200
        assert client.get("/api/agent/servers").status_code == 429  # no token at all

    def test_a_malformed_token_from_a_throttled_address_is_not_looked_up(
        self, served: tuple[TestClient[Any], App], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """From a throttled address, a token whose form cannot be valid is a 429 before any
        look-up; a well-formed one is looked up (it may be valid) and refused with 429."""
        client, app = served
        _fail_until_throttled(client, "/api/agent/servers", tokens.generate())
        handled: list[object] = []
        handle = app.bus.handle

        async def counting(command: Any, actor: Any = None) -> Any:
            handled.append(command)
            return await handle(command, actor)

        monkeypatch.setattr(app.bus, "handle", counting)
        assert client.get("/api/agent/servers", headers=_bearer("berth_x")).status_code == 429
        assert handled == []
        well_formed = tokens.generate()
        assert client.get("/api/agent/servers", headers=_bearer(well_formed)).status_code == 429
        assert handled == [c.Authenticate(token=well_formed, client_address="testclient")]

    def test_a_valid_enrollment_token_passes_a_throttled_address(
        self, served: tuple[TestClient[Any], App]
    ) -> None:
        """The install script's enrollment token is not refused because others failed."""
        client, app = served

        async def enrollment() -> str:
            user = await app.bus.handle(c.CreateUser(email=unique_email(), password=PASSWORD))
            created = await app.bus.handle(parse_create_server({"name": "pending"}), user)
            return created.enrollment_token

        token = asyncio.run(enrollment())
        path = "/api/agent/servers/enroll"
        _fail_until_throttled(client, path, tokens.generate(tokens.ENROLL_PREFIX))
        assert client.get(path, headers=_bearer(token)).status_code == 200
