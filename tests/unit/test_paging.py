"""Paging and filters of the lists (issue 27, item 5): a cursor is the last id of the
previous page, a stale or foreign one is refused, and the pages cover the list once."""

from __future__ import annotations

from uuid import UUID, uuid4

import msgspec
import pytest
from berth.core import commands as c
from berth.core.commands import parse_create_server
from berth.core.errors import InvalidInput
from berth.core.models import Server, ServerStatus, User
from berth.core.paging import page
from hypothesis import given
from hypothesis import strategies as st
from wiring import App


class TestPage:
    @given(st.integers(min_value=0, max_value=30), st.integers(min_value=1, max_value=12))
    def test_pages_cover_the_list_once_in_order(self, size: int, limit: int) -> None:
        """Following ``next_cursor`` from the first page gives every entry once, in order,
        each page at most ``limit`` long, the last one with no cursor."""
        ids = [uuid4() for _ in range(size)]
        seen: list[UUID] = []
        cursor = None
        for _ in range(size + 1):
            got = page(ids, limit=limit, cursor=cursor, key=lambda i: i)
            assert len(got.items) <= limit
            seen += got.items
            cursor = got.next_cursor
            if cursor is None:
                break
        assert seen == ids

    def test_an_unknown_cursor_is_refused(self) -> None:
        """A cursor naming no entry is an InvalidInput at ``cursor``, not an empty page."""
        with pytest.raises(InvalidInput) as caught:
            page([uuid4()], limit=5, cursor=uuid4(), key=lambda i: i)
        assert [e.location for e in caught.value.errors] == ["cursor"]


class TestListFilters:
    async def _servers(self, app: App, owner: User, *names: str) -> list[Server]:
        made = []
        for name in names:
            made.append((await app.bus.handle(parse_create_server({"name": name}), owner)).server)
        return made

    async def test_servers_by_status_and_name(self, app: App, owner: User) -> None:
        """``status`` keeps the servers in that status, ``name`` those whose name holds it
        (any case); both at once narrow further."""
        web1, web2, db = await self._servers(app, owner, "Web-1", "web-2", "db-1")
        app.store.state.servers[web2.id] = msgspec.structs.replace(
            web2, status=ServerStatus.OFFLINE
        )
        by_name = await app.bus.handle(c.ListServers(name="WEB"), owner)
        assert [s.id for s in by_name] == [web1.id, web2.id]
        pending = await app.bus.handle(c.ListServers(status=ServerStatus.PENDING), owner)
        assert [s.id for s in pending] == [web1.id, db.id]
        both = await app.bus.handle(c.ListServers(status=ServerStatus.PENDING, name="web"), owner)
        assert [s.id for s in both] == [web1.id]


class TestRevisionsCursor:
    async def test_an_unknown_before_is_refused(
        self, app: App, owner: User, server: Server
    ) -> None:
        """``before`` that is no deployment of this installation (unknown, or another
        installation's) is an InvalidInput at ``before``, not an empty page."""
        from test_use_cases import deploy_cmd

        a = await app.bus.handle(deploy_cmd(server, name="alpha", port=1001), owner)
        b = await app.bus.handle(deploy_cmd(server, name="beta", port=1002), owner)
        for before in (uuid4(), b.deployment.id):
            with pytest.raises(InvalidInput) as caught:
                await app.bus.handle(
                    c.ListRevisions(installation_id=a.installation.id, before=before), owner
                )
            assert [e.location for e in caught.value.errors] == ["before"]
        own = await app.bus.handle(
            c.ListRevisions(installation_id=a.installation.id, before=a.deployment.id), owner
        )
        assert own.deployments == []
