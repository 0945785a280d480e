"""Unit-test fixtures: the use cases wired to in-memory fakes.

``tests/unit`` is put on ``sys.path`` so test modules can ``import fakes``.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from uuid import uuid4

import pytest
from berth.core import commands as c

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from berth.core.commands import parse_create_server  # noqa: E402
from berth.core.models import Server, User  # noqa: E402
from fakes import HOST_KEY  # noqa: E402
from wiring import App, build_app, unique_email  # noqa: E402


@pytest.fixture
def app() -> App:
    return build_app()


@pytest.fixture
def make_user(app: App) -> Callable[[], Awaitable[User]]:
    async def make() -> User:
        return await app.bus.handle(
            c.CreateUser(email=unique_email(), password="correct horse battery staple")
        )

    return make


@pytest.fixture
def make_server(app: App) -> Callable[[User], Awaitable[Server]]:
    async def make(owner: User) -> Server:
        # Enrolled (host keys pinned), as a server berth deploys to is; ``pending`` ones
        # are made explicitly by the tests about them.
        cmd = parse_create_server(
            {"name": f"srv-{uuid4().hex[:8]}", "address": "203.0.113.7", "host_keys": [HOST_KEY]}
        )
        return (await app.bus.handle(cmd, owner)).server

    return make


@pytest.fixture
async def owner(make_user: Callable[[], Awaitable[User]]) -> User:
    return await make_user()


@pytest.fixture
async def server(owner: User, make_server: Callable[[User], Awaitable[Server]]) -> Server:
    return await make_server(owner)


@pytest.fixture
async def pending_server(app: App, owner: User) -> Server:
    """A server created without host keys: it waits for the install script to enroll it."""
    cmd = parse_create_server({"name": f"srv-{uuid4().hex[:8]}", "address": "203.0.113.8"})
    return (await app.bus.handle(cmd, owner)).server
