"""``ChangeServer`` (PATCH /api/agent/servers/{serverId}): a server's name, address and SSH
port change in place, keeping its history; a new address or port is checked at once."""

from __future__ import annotations

from uuid import uuid4

import msgspec
import pytest
from berth.core import commands as c
from berth.core.commands import parse_change_server
from berth.core.errors import InvalidInput, NotFound
from berth.core.events import ServerRegistered
from berth.core.models import Server, ServerStatus, User
from wiring import App


def _announced(app: App) -> list[ServerRegistered]:
    seen: list[ServerRegistered] = []
    app.bus.subscribe(ServerRegistered, seen.append)
    return seen


class TestChangeServer:
    async def test_a_new_name_changes_only_the_name(
        self, app: App, owner: User, server: Server
    ) -> None:
        """Renaming keeps the server's id, status and address, and checks nothing."""
        seen = _announced(app)
        changed = await app.bus.handle(parse_change_server({"name": "db-1"}, server.id), owner)
        assert changed.name == "db-1"
        assert (changed.id, changed.address, changed.ssh_port) == (
            server.id,
            server.address,
            server.ssh_port,
        )
        stored = await app.bus.handle(c.GetServer(server_id=server.id), owner)
        assert stored.name == "db-1"
        assert seen == []

    async def test_a_new_address_is_checked_at_once(
        self, app: App, owner: User, server: Server
    ) -> None:
        """A new address or SSH port is stored, the server goes offline until the monitor,
        told at once, reaches it there."""
        app.store.state.servers[server.id] = msgspec.structs.replace(
            server, status=ServerStatus.ONLINE
        )
        seen = _announced(app)
        cmd = parse_change_server({"address": "198.51.100.4", "ssh_port": 2222}, server.id)
        changed = await app.bus.handle(cmd, owner)
        assert (changed.address, changed.ssh_port) == ("198.51.100.4", 2222)
        assert changed.last_known_status is ServerStatus.OFFLINE
        stored = app.store.state.servers[server.id]
        assert (stored.address, stored.ssh_port, stored.status) == (
            "198.51.100.4",
            2222,
            ServerStatus.OFFLINE,
        )
        assert [e.server_id for e in seen] == [server.id]

    async def test_a_pending_server_stays_pending(
        self, app: App, owner: User, pending_server: Server
    ) -> None:
        """A pending server's new address is kept; it still waits for its install script."""
        seen = _announced(app)
        cmd = parse_change_server({"address": "198.51.100.5"}, pending_server.id)
        changed = await app.bus.handle(cmd, owner)
        assert changed.status is ServerStatus.PENDING
        assert changed.address == "198.51.100.5"
        assert seen == []

    async def test_another_teams_server_is_not_found(
        self, app: App, owner: User, make_user: object, server: Server
    ) -> None:
        """Another team's server is a 404, and unchanged."""
        stranger = await make_user()  # type: ignore[operator]
        with pytest.raises(NotFound):
            await app.bus.handle(parse_change_server({"name": "mine"}, server.id), stranger)
        assert app.store.state.servers[server.id].name == server.name

    def test_every_wrong_field_is_named(self) -> None:
        """Wrong fields, unknown ones and ``null`` are all named at once."""
        with pytest.raises(InvalidInput) as caught:
            parse_change_server(
                {"name": "", "address": None, "ssh_port": 0, "status": "online"},
                uuid4(),
            )
        fields = sorted(e.location for e in caught.value.errors)
        assert fields == ["address", "name", "ssh_port", "status"]
