"""``ServerRegistered``: this machine is registered for the first account as it signs up
(under ``serve --local``), and a server berth can reach at once is announced, so the
monitor checks it now."""

from __future__ import annotations

from berth.core import commands as c
from berth.core.commands import parse_create_server
from berth.core.events import ServerRegistered
from berth.core.models import ServerStatus, Transport
from fakes import HOST_KEY
from wiring import build_app, unique_email

PASSWORD = "correct horse battery staple"


def _announced(app: object) -> list[ServerRegistered]:
    seen: list[ServerRegistered] = []
    app.bus.subscribe(ServerRegistered, seen.append)  # type: ignore[attr-defined]
    return seen


async def test_the_first_sign_up_finds_this_machine_registered() -> None:
    app = build_app(local_managed=True)
    seen = _announced(app)
    code = await app.bus.handle(c.IssueSetupCode())
    started = await app.bus.handle(c.SignUp(email=unique_email(), password=PASSWORD, invite=code))
    (local,) = await app.bus.handle(c.ListServers(), started.user)
    assert local.transport is Transport.LOCAL
    assert local.status is ServerStatus.OFFLINE  # not tried yet: the monitor is told
    assert local.owner_id == started.user.id
    assert [e.server_id for e in seen] == [local.id]


async def test_later_accounts_and_plain_serve_register_nothing() -> None:
    app = build_app(local_managed=True)
    await app.bus.handle(c.CreateUser(email=unique_email(), password=PASSWORD))
    seen = _announced(app)
    await app.bus.handle(c.CreateUser(email=unique_email(), password=PASSWORD))
    assert seen == []  # the machine is the first account's, registered once
    plain = build_app()
    user = await plain.bus.handle(c.CreateUser(email=unique_email(), password=PASSWORD))
    assert await plain.bus.handle(c.ListServers(), user) == []


async def test_a_server_created_with_host_keys_is_announced_a_pending_one_not() -> None:
    app = build_app()
    user = await app.bus.handle(c.CreateUser(email=unique_email(), password=PASSWORD))
    seen = _announced(app)
    keyed = parse_create_server(
        {"name": "web-1", "address": "203.0.113.10", "host_keys": [HOST_KEY]}
    )
    created = await app.bus.handle(keyed, user)
    await app.bus.handle(parse_create_server({"name": "web-2"}), user)
    assert [e.server_id for e in seen] == [created.server.id]
