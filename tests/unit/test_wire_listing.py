"""The wire form of an installation listing (``schemas.installations_out``,
``installation_list_out``) and its JSON (``ListingResponse``).

It is remembered by its server's id and address and the identity of the (frozen)
installation objects it was built from, so the same ones give the same answer without
rebuilding (or re-encoding) it, and any other -- a changed installation, a server with
another address -- gives the answer for that one, never a remembered one.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import uuid4

import builders
import msgspec
from berth.core.models import (
    DeploymentRef,
    DeploymentState,
    Installation,
    InstallationStatus,
    Server,
    ServerStatus,
)
from berth.entrypoints.http.schemas import (
    InstallationListOut,
    ListingResponse,
    installation_list_out,
    installation_out,
    installations_out,
)
from litestar import MediaType, Response


def a_server(address: str | None = "203.0.113.10") -> Server:
    return builders.a_server(name="web", address=address)


def an_installation(server: Server, port: int, domain: str | None = None) -> Installation:
    return builders.an_installation(
        server,
        name=f"app-{port}",
        spec=builders.a_spec(port=port, domain=domain, env_keys=("A",), volumes=("d:/d",)),
        host_port=port,
        status=InstallationStatus.DEPLOYING,
        last_deployment=DeploymentRef(id=uuid4(), state=DeploymentState.QUEUED, finished_at=None),
    )


def expected(server: Server, installations: list[Installation]) -> bytes:
    return msgspec.json.encode([installation_out(server, i) for i in installations])


def test_same_objects_same_wire_form() -> None:
    server = a_server()
    installations = [an_installation(server, 8000 + n) for n in range(5)]
    installations.append(an_installation(server, 9000, domain="shop.example.com"))
    first = installations_out(server, installations)
    assert msgspec.json.encode(first) == expected(server, installations)
    first.clear()  # the caller's own list
    assert msgspec.json.encode(installations_out(server, installations)) == expected(
        server, installations
    )


def test_a_changed_installation_is_rebuilt() -> None:
    server = a_server()
    installations = [an_installation(server, 8000), an_installation(server, 8001)]
    installations_out(server, installations)
    changed = msgspec.structs.replace(installations[1], status=InstallationStatus.RUNNING)
    now = installations_out(server, [installations[0], changed])
    assert [o.status for o in now] == ["deploying", "running"]
    assert len(installations_out(server, installations[:1])) == 1


def test_another_server_object_is_rebuilt() -> None:
    server = a_server()
    installations = [an_installation(server, 8000)]
    assert installations_out(server, installations)[0].url == "http://203.0.113.10:8000"
    moved = msgspec.structs.replace(server, address="2001:db8::1")
    assert installations_out(moved, installations)[0].url == "http://[2001:db8::1]:8000"
    unaddressed = msgspec.structs.replace(server, address=None)
    assert installations_out(unaddressed, installations)[0].url is None


def test_a_server_shown_checking_keeps_the_listing() -> None:
    """The same server read again as another object (shown ``checking``: a new one at each
    read) with the same address keeps the listing and its body: nothing is rebuilt."""
    server = a_server()
    installations = [an_installation(server, 8000 + n) for n in range(3)]
    listing = installation_list_out(server, installations)
    body = rendered(listing)
    later = datetime.now(UTC) + timedelta(days=1)
    for _ in range(2):
        shown = msgspec.structs.replace(server, status=ServerStatus.ONLINE).shown(
            later, timedelta(seconds=30)
        )
        assert shown.status is ServerStatus.CHECKING
        assert installation_list_out(shown, installations) is listing
        assert rendered(installation_list_out(shown, installations)) is body


def rendered(listing: InstallationListOut) -> bytes:
    """The body of ``GET /install`` for ``listing``."""
    return ListingResponse(listing).render(listing, MediaType.JSON)


def test_a_listing_renders_as_a_plain_response_would() -> None:
    """``ListingResponse``'s body is the bytes Litestar's ``Response`` renders, hit or miss."""
    server = a_server()
    installations = [an_installation(server, 8000 + n) for n in range(3)]
    listing = installation_list_out(server, installations)
    plain = Response(listing).render(listing, MediaType.JSON)
    assert rendered(listing) == plain
    assert installation_list_out(server, installations) is listing
    assert rendered(installation_list_out(server, installations)) == plain
    assert msgspec.json.decode(plain)["serverId"] == str(server.id)


def test_a_changed_listing_renders_anew() -> None:
    """After an installation changed (a new object), the body says so: no remembered bytes."""
    server = a_server()
    installations = [an_installation(server, 8000), an_installation(server, 8001)]
    rendered(installation_list_out(server, installations))
    changed = msgspec.structs.replace(installations[1], status=InstallationStatus.RUNNING)
    body = msgspec.json.decode(rendered(installation_list_out(server, [installations[0], changed])))
    assert [i["status"] for i in body["installations"]] == ["deploying", "running"]


def test_a_listing_not_remembered_still_renders() -> None:
    """A listing the memo does not hold (built by hand) is encoded, not looked up."""
    server = a_server()
    listing = InstallationListOut(
        server_id=server.id, installations=[installation_out(server, an_installation(server, 1))]
    )
    assert rendered(listing) == Response(listing).render(listing, MediaType.JSON)
