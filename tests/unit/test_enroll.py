"""Enrollment (``EnrollServer``, ``EnrollmentStatus``) and its parser, with the fakes."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from berth.core import commands as c
from berth.core import tokens
from berth.core.commands import EnrollCommand, NewEnrollmentToken, parse_create_server
from berth.core.commands import parse_enroll as core_parse_enroll
from berth.core.errors import Conflict, InvalidInput, NotFound, Unauthorized
from berth.core.models import ServerFacts, ServerStatus, User
from berth.core.results import CreatedServer
from berth.core.use_cases.servers import ENROLLMENT_TTL
from berth.entrypoints.http.schemas import EnrollRequest
from berth.entrypoints.http.wire import parse_body
from wiring import App


def _wire(struct: Any, parse: Any) -> Any:
    """The core's ``parse`` as the API applies it to a JSON body (camelCase, ``body.``)."""

    def parse_wire(raw: object, **options: Any) -> Any:
        return parse_body(raw, struct, lambda body: parse(body, **options))

    return parse_wire


# The enrollment body as the API reads it: camelCase in, ``body.<wireName>`` out.
parse_enroll = _wire(EnrollRequest, core_parse_enroll)

HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
OTHER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHhrIFB7HL8lCEpUrZ2zMm3T9eZEzSPkNR1ElUZGHUgG"


def enroll_cmd(**body: Any) -> EnrollCommand:
    raw: dict[str, Any] = {"hostKeys": [HOST_KEY + " root@web-1"]}
    raw.update(body)
    return parse_enroll(raw)


def enrolling(created: CreatedServer, address: str | None = None, **body: Any) -> c.EnrollServer:
    """The install script's enrollment of ``created`` with its token, from ``address``."""
    token = created.enrollment_token
    return c.EnrollServer(token=token, enrollment=enroll_cmd(**body), client_address=address)


async def create(app: App, owner: User, **body: Any) -> CreatedServer:
    return await app.bus.handle(parse_create_server({"name": "web-1", **body}), owner)


class TestParseEnroll:
    def test_minimal_body(self) -> None:
        """Only hostKeys is required; comments are dropped; no port, no facts."""
        cmd = parse_enroll({"hostKeys": [HOST_KEY + " root@web-1"]})
        assert cmd == EnrollCommand(host_keys=(HOST_KEY,), ssh_port=None, facts=ServerFacts())

    def test_full_body(self) -> None:
        """Port and every fact are taken as given; a fact may be null."""
        cmd = parse_enroll(
            {
                "hostKeys": [HOST_KEY, OTHER_KEY],
                "sshPort": 2222,
                "facts": {
                    "os": "Debian GNU/Linux 12 (bookworm)",
                    "arch": "x86_64",
                    "dockerVersion": None,
                    "cpus": 4,
                    "memoryBytes": 8 * 2**30,
                },
            }
        )
        assert cmd.host_keys == (HOST_KEY, OTHER_KEY)
        assert cmd.ssh_port == 2222
        assert cmd.facts == ServerFacts(
            os="Debian GNU/Linux 12 (bookworm)", arch="x86_64", cpus=4, memory_bytes=8 * 2**30
        )

    def test_every_error_at_once(self) -> None:
        """Unknown fields, bad keys, a string port and bad facts are all reported."""
        with pytest.raises(InvalidInput) as caught:
            parse_enroll(
                {
                    "hostKeys": ["not a key"],
                    "sshPort": "22",
                    "facts": {"os": 5, "cpus": 0, "memoryBytes": True, "kernel": "6.1"},
                    "token": "x",
                }
            )
        assert {e.location for e in caught.value.errors} == {
            "body.token",
            "body.hostKeys",
            "body.sshPort",
            "body.facts.kernel",
            "body.facts.os",
            "body.facts.cpus",
            "body.facts.memoryBytes",
        }

    @pytest.mark.parametrize("raw", [None, [], "x", {"facts": {}}, {"hostKeys": []}])
    def test_shapes_without_host_keys_are_refused(self, raw: object) -> None:
        """A non-object, or an object without host keys, is a 422."""
        with pytest.raises(InvalidInput):
            parse_enroll(raw)

    def test_facts_must_be_an_object(self) -> None:
        """``facts`` that is not an object is one error at body.facts."""
        with pytest.raises(InvalidInput) as caught:
            parse_enroll({"hostKeys": [HOST_KEY], "facts": "debian"})
        assert [e.location for e in caught.value.errors] == ["body.facts"]

    def test_control_characters_in_a_fact_are_refused(self) -> None:
        """A fact is display text: no newlines or escapes."""
        with pytest.raises(InvalidInput):
            parse_enroll({"hostKeys": [HOST_KEY], "facts": {"os": "Debian\n\x1b[31m"}})


class TestEnrollServer:
    async def test_enrollment_pins_keys_and_records_facts(self, app: App, owner: User) -> None:
        """The pending server becomes offline with the keys, facts and port it reported."""
        created = await create(app, owner, address="203.0.113.7")
        facts = {"os": "Debian", "arch": "x86_64", "cpus": 2, "memoryBytes": 1024}
        server = await app.bus.handle(enrolling(created, "198.51.100.1", sshPort=2222, facts=facts))
        assert server.status is ServerStatus.OFFLINE
        stored = await app.bus.handle(c.GetServer(server_id=created.server.id), owner)
        # Read back, a status no worker has verified yet reads ``checking``.
        assert stored == msgspec.structs.replace(
            server, status=ServerStatus.CHECKING, last_known_status=ServerStatus.OFFLINE
        )
        assert stored.host_keys == (HOST_KEY,)
        assert stored.facts == ServerFacts(os="Debian", arch="x86_64", cpus=2, memory_bytes=1024)
        assert stored.ssh_port == 2222
        assert stored.address == "203.0.113.7"  # the user's address wins over the client's
        assert stored.public_key == created.server.public_key

    async def test_without_an_address_the_client_address_is_used(
        self, app: App, owner: User
    ) -> None:
        """A server created without an address gets the one the enrollment came from."""
        created = await create(app, owner)
        server = await app.bus.handle(enrolling(created, "198.51.100.1"))
        assert server.address == "198.51.100.1"

    async def test_an_unusable_client_address_is_not_used(self, app: App, owner: User) -> None:
        """A client "address" that is no host name or IP leaves the address unset."""
        created = await create(app, owner)
        server = await app.bus.handle(enrolling(created, "unix:socket"))
        assert server.address is None

    async def test_without_ssh_port_the_port_is_kept(self, app: App, owner: User) -> None:
        """No sshPort in the body: the port given at creation stays."""
        created = await create(app, owner, ssh_port=2200)
        server = await app.bus.handle(enrolling(created))
        assert server.ssh_port == 2200

    async def test_a_used_token_is_refused_and_changes_nothing(self, app: App, owner: User) -> None:
        """The second enrollment with a token is Unauthorized; the first one's keys stay."""
        created = await create(app, owner)
        await app.bus.handle(enrolling(created, "198.51.100.1"))
        commits = app.store.commits
        with pytest.raises(Unauthorized):
            await app.bus.handle(enrolling(created, "192.0.2.9", hostKeys=[OTHER_KEY]))
        assert app.store.commits == commits
        stored = await app.bus.handle(c.GetServer(server_id=created.server.id), owner)
        assert stored.host_keys == (HOST_KEY,)
        assert stored.address == "198.51.100.1"

    async def test_an_expired_token_is_refused(self, app: App, owner: User) -> None:
        """At the end of its hour the token enrolls nothing; the server stays pending."""
        created = await create(app, owner)
        app.clock.advance(ENROLLMENT_TTL)
        with pytest.raises(Unauthorized):
            await app.bus.handle(enrolling(created))
        stored = await app.bus.handle(c.GetServer(server_id=created.server.id), owner)
        assert stored.status is ServerStatus.PENDING
        assert stored.host_keys == ()

    async def test_just_before_expiry_the_token_works(self, app: App, owner: User) -> None:
        """A second before its hour ends, the token still enrolls."""
        created = await create(app, owner)
        app.clock.advance(ENROLLMENT_TTL.total_seconds() - 1)
        server = await app.bus.handle(enrolling(created))
        assert server.status is ServerStatus.OFFLINE

    async def test_a_server_created_with_host_keys_is_already_enrolled(
        self, app: App, owner: User
    ) -> None:
        """Its token cannot replace the keys the user pinned."""
        created = await create(app, owner, address="203.0.113.7", host_keys=[HOST_KEY])
        with pytest.raises(Unauthorized):
            await app.bus.handle(enrolling(created, hostKeys=[OTHER_KEY]))

    @pytest.mark.parametrize(
        "token",
        [
            "",
            "berth_enroll_",
            tokens.generate(tokens.ENROLL_PREFIX)[:-1] + "!",
            tokens.generate(tokens.ENROLL_PREFIX),  # well formed, unknown
        ],
        ids=["empty", "the-prefix-alone", "a-character-not-in-the-alphabet", "unknown"],
    )
    async def test_malformed_or_unknown_tokens_are_refused(self, app: App, token: str) -> None:
        """Only a server's own enrollment token enrolls it."""
        with pytest.raises(Unauthorized):
            await app.bus.handle(
                c.EnrollServer(token=token, enrollment=enroll_cmd(), client_address=None)
            )

    async def test_an_api_token_cannot_enroll(self, app: App, owner: User) -> None:
        """The user's API token is not an enrollment token."""
        await create(app, owner)
        api_token = await app.bus.handle(c.RegenerateToken(), owner)
        with pytest.raises(Unauthorized):
            await app.bus.handle(
                c.EnrollServer(token=api_token, enrollment=enroll_cmd(), client_address=None)
            )

    async def test_the_token_enrolls_only_its_own_server(self, app: App, owner: User) -> None:
        """Two pending servers: each token enrolls its server and no other."""
        first = await create(app, owner)
        second = await create(app, owner)
        server = await app.bus.handle(enrolling(second))
        assert server.id == second.server.id
        assert (
            await app.bus.handle(c.GetServer(server_id=first.server.id), owner)
        ).status is ServerStatus.PENDING


class TestEnrollmentStatus:
    async def test_status_before_and_never_after_enrollment(self, app: App, owner: User) -> None:
        """The token reads its server's status while pending; once used, nothing."""
        created = await create(app, owner)
        assert (
            await app.bus.handle(c.EnrollmentStatus(token=created.enrollment_token))
        ).status is (ServerStatus.PENDING)
        await app.bus.handle(enrolling(created))
        with pytest.raises(Unauthorized):
            await app.bus.handle(c.EnrollmentStatus(token=created.enrollment_token))

    async def test_status_ends_with_the_tokens_hour(self, app: App, owner: User) -> None:
        """Used or not, the token reads nothing once expired."""
        created = await create(app, owner)
        await app.bus.handle(enrolling(created))
        app.clock.advance(ENROLLMENT_TTL)
        with pytest.raises(Unauthorized):
            await app.bus.handle(c.EnrollmentStatus(token=created.enrollment_token))

    async def test_unknown_token_reads_nothing(self, app: App) -> None:
        """A well-formed token of no server is Unauthorized."""
        with pytest.raises(Unauthorized):
            await app.bus.handle(c.EnrollmentStatus(token=tokens.generate(tokens.ENROLL_PREFIX)))


class TestNewEnrollmentToken:
    async def test_a_new_token_enrolls_and_the_old_one_stops_working(
        self, app: App, owner: User
    ) -> None:
        """A pending server's new token is valid for a new hour; the first no longer
        enrolls nor reads the status."""
        created = await create(app, owner)
        app.clock.advance(ENROLLMENT_TTL)  # the first token's hour is over
        renewed = await app.bus.handle(NewEnrollmentToken(server_id=created.server.id), owner)
        assert renewed.enrollment_token != created.enrollment_token
        assert renewed.server.enrollment_expires_at == app.clock.now() + ENROLLMENT_TTL
        with pytest.raises(Unauthorized):
            await app.bus.handle(c.EnrollmentStatus(token=created.enrollment_token))
        with pytest.raises(Unauthorized):
            await app.bus.handle(enrolling(created))
        server = await app.bus.handle(enrolling(renewed))
        assert server.id == created.server.id
        assert server.status is ServerStatus.OFFLINE

    async def test_an_enrolled_server_gets_no_token(self, app: App, owner: User) -> None:
        """Once enrolled (or created with its keys), a new token is a conflict
        (server-not-pending) and its pinned keys stay."""
        created = await create(app, owner)
        await app.bus.handle(enrolling(created))
        keyed = await create(app, owner, address="203.0.113.7", host_keys=[OTHER_KEY])
        for server_id in (created.server.id, keyed.server.id):
            commits = app.store.commits
            with pytest.raises(Conflict) as caught:
                await app.bus.handle(NewEnrollmentToken(server_id=server_id), owner)
            assert caught.value.kind == "server-not-pending"
            assert app.store.commits == commits
        assert (
            await app.bus.handle(c.GetServer(server_id=created.server.id), owner)
        ).host_keys == (HOST_KEY,)

    async def test_another_users_server_is_not_found(
        self, app: App, owner: User, make_user: Any
    ) -> None:
        """Another user's pending server is NotFound, like a missing one; its token works."""
        created = await create(app, owner)
        other = await make_user()
        with pytest.raises(NotFound):
            await app.bus.handle(NewEnrollmentToken(server_id=created.server.id), other)
        assert (
            await app.bus.handle(c.EnrollmentStatus(token=created.enrollment_token))
        ).id == created.server.id
