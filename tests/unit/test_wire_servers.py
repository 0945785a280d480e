"""The wire form of a servers list (``schemas.servers_out``): each server's is remembered
by the server it was built from, so a list asked again (a fleet's thousand servers, every
few seconds) is not built again; a server that changed in anything the wire shows gets
its own, never a remembered one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import uuid4

import builders
import msgspec
from berth.core.models import Server, ServerStatus
from berth.entrypoints.http.schemas import (
    ServerListOut,
    ServerListResponse,
    _server_lists,
    _ServerListMemo,
    server_list_out,
    server_out,
    servers_out,
)

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def fleet(count: int) -> list[Server]:
    return [
        builders.a_server(name=f"web-{n}", status=ServerStatus.ONLINE, checked_at=NOW)
        for n in range(count)
    ]


def test_the_same_servers_give_the_same_wire_objects() -> None:
    """Asked twice with the same servers, each server's wire form is the very same object,
    and equal to what ``server_out`` builds."""
    servers = fleet(3)
    first = servers_out(servers)
    assert first == [server_out(s) for s in servers]
    assert all(map(lambda a, b: a is b, servers_out(servers), first))


def test_a_newer_stand_by_keeps_the_wire_form() -> None:
    """A server equal but for ``checked_at`` (a monitor's pass stood by it again: the wire
    does not show it) keeps its wire form."""
    servers = fleet(2)
    first = servers_out(servers)
    later = [msgspec.structs.replace(s, checked_at=NOW + timedelta(seconds=5)) for s in servers]
    assert all(map(lambda a, b: a is b, servers_out(later), first))


def test_a_change_the_wire_shows_is_built_anew() -> None:
    """A new status (or one shown ``checking``), name or last-seen time gives that
    server's wire form as it is now; the others keep theirs."""
    servers = fleet(4)
    first = servers_out(servers)
    changed = [
        msgspec.structs.replace(servers[0], status=ServerStatus.OFFLINE, status_detail="down"),
        servers[1].shown(NOW + timedelta(hours=1), timedelta(seconds=30)),
        msgspec.structs.replace(servers[2], name="renamed"),
        msgspec.structs.replace(servers[3], last_seen_at=NOW),
    ]
    again = servers_out(changed)
    assert again == [server_out(s) for s in changed]
    assert not any(map(lambda a, b: a is b, again, first))
    assert again[1].status is ServerStatus.CHECKING
    assert servers_out(servers) == first


def test_a_page_asked_again_is_the_same_object_encoded_once() -> None:
    """The same servers (and cursor) give the very same page, whose JSON is encoded once
    (``ServerListResponse``); a changed server or another cursor gives a page of its own."""
    servers = fleet(3)
    page = server_list_out(servers, None)
    assert page == ServerListOut(servers=[server_out(s) for s in servers])
    assert server_list_out(list(servers), None) is page
    assert server_list_out(servers, uuid4()) is not page
    changed = [msgspec.structs.replace(servers[0], name="renamed"), *servers[1:]]
    assert server_list_out(changed, None) is not page

    encoded: list[ServerListOut] = []

    def encode(out: ServerListOut) -> bytes:
        encoded.append(out)
        return msgspec.json.encode(out)

    response = ServerListResponse(page)
    first = response.render(page, "application/json")
    second = ServerListResponse(page).render(page, "application/json")
    assert first is second
    assert msgspec.json.decode(first)["servers"][0]["name"] == "web-0"
    assert _server_lists.encoded.body(page, encode) is first
    assert encoded == []


def test_the_pages_held_are_bounded() -> None:
    """Past its bound the oldest page goes (and its body): asked again, it is built anew."""
    memo = _ServerListMemo(max_pages=2, max_servers=10)
    cursors = [uuid4() for _ in range(3)]
    pages = [memo.get(servers_out(fleet(2)), cursor) for cursor in cursors]
    first_again = memo.get(list(pages[0].servers), cursors[0])
    assert first_again is not pages[0]
    assert first_again == pages[0]
    assert memo.get(list(pages[2].servers), cursors[2]) is pages[2]
    too_big = memo.get(servers_out(fleet(11)), None)
    assert memo.get(list(too_big.servers), None) is not too_big
    assert memo.encoded.body(too_big, msgspec.json.encode) == msgspec.json.encode(too_big)
