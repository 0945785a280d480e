"""The library facade over in-memory fakes, and the parsers it checks its arguments with."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from datetime import UTC, datetime
from typing import Any
from uuid import UUID, uuid4

import asyncssh
import berth
import berth.facade
import msgspec
import pytest
from berth.core import commands as c
from berth.core.commands import (
    EnrollCommand,
    parse_count,
    parse_id,
    parse_idempotency_key,
    parse_seconds,
)
from berth.core.errors import Conflict, InvalidInput, NotFound
from berth.core.models import DeploymentState, Server, ServerStatus, User
from berth.facade import Berth
from hypothesis import given
from hypothesis import strategies as st
from wiring import App, finish, unique_email

HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


def _locations(exc: pytest.ExceptionInfo[InvalidInput]) -> list[str]:
    return [e.location for e in exc.value.errors]


Queued = tuple[Berth, UUID]  # a facade and a deployment it queued


async def _queued(facade: Berth, owner: User, server: Server) -> UUID:
    result = await facade.deploy(owner, server_id=server.id, name="web", image="nginx:1.27")
    return result.deployment.id


class TestParseId:
    def test_uuid_and_its_text_are_the_same_id(self) -> None:
        """A UUID passes as it is; its canonical text, in any case, becomes the same UUID."""
        key = uuid4()
        assert parse_id(key, "Server") is key
        assert parse_id(str(key), "Server") == key
        assert parse_id(str(key).upper(), "Server") == key

    @pytest.mark.parametrize(
        "value", ["", "nope", "1234", 42, None, b"x" * 16, "{" + "0" * 32 + "}"]
    )
    def test_anything_else_names_nothing(self, value: object) -> None:
        """A value that is no UUID is NotFound, as a non-UUID path id is a 404 in the API."""
        with pytest.raises(NotFound, match=r"^Deployment not found\.$"):
            parse_id(value, "Deployment")


class TestParseCount:
    @pytest.mark.parametrize("value", [1, 50, 100])
    def test_in_range_is_kept(self, value: int) -> None:
        """An integer within the bounds comes back as given."""
        assert parse_count(value, loc="x.limit", low=1, high=100) == value

    @pytest.mark.parametrize("value", [0, 101, -1, True, 5.0, "5", None, 2**70])
    def test_anything_else_is_one_field_error(self, value: object) -> None:
        """Out of range or not an int is InvalidInput at the location: never clamped."""
        with pytest.raises(InvalidInput) as exc:
            parse_count(value, loc="x.limit", low=1, high=100)
        assert _locations(exc) == ["x.limit"]
        assert "1 to 100" in exc.value.errors[0].message


class TestParseSeconds:
    @pytest.mark.parametrize(("value", "seconds"), [(0, 0.0), (3, 3.0), (0.25, 0.25)])
    def test_finite_non_negative_numbers(self, value: float, seconds: float) -> None:
        """Zero, ints and floats are seconds, as floats."""
        assert parse_seconds(value, loc="wait.timeout") == seconds

    @pytest.mark.parametrize(
        "value", [-1, -0.5, float("nan"), float("inf"), True, "5", None, 10**400]
    )
    def test_anything_else_is_one_field_error(self, value: object) -> None:
        """Negative, not finite, a bool, text or an int beyond a float is InvalidInput."""
        with pytest.raises(InvalidInput) as exc:
            parse_seconds(value, loc="wait.timeout")
        assert _locations(exc) == ["wait.timeout"]


class TestParseIdempotencyKey:
    @given(
        st.text(
            alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=255
        )
    )
    def test_printable_ascii_keys_are_kept(self, key: str) -> None:
        assert parse_idempotency_key(key, loc="idempotency_key") == key

    def test_none_is_no_key(self) -> None:
        assert parse_idempotency_key(None, loc="idempotency_key") is None

    @pytest.mark.parametrize("value", ["", "a b", "x" * 256, "new\nline", "é", 42, b"k"])
    def test_anything_else_is_one_field_error(self, value: object) -> None:
        """Empty, too long, spaces, control or non-ASCII characters, or not text."""
        with pytest.raises(InvalidInput) as exc:
            parse_idempotency_key(value, loc="idempotency_key")
        assert _locations(exc) == ["idempotency_key"]


class TestExports:
    def test_package_exports_the_facade(self) -> None:
        """``berth.X`` is the facade's ``X`` for every name of its ``__all__``, and no other."""
        assert berth.__all__ == berth.facade.__all__
        for name in berth.__all__:
            assert getattr(berth, name) is getattr(berth.facade, name)
        assert berth.NotFound is NotFound
        with pytest.raises(AttributeError):
            _ = berth.nothing_here

    def test_importing_berth_loads_no_facade(self) -> None:
        """``import berth`` alone imports neither the facade nor an adapter."""
        code = (
            "import sys, berth; "
            "print(sorted(m for m in sys.modules "
            "if m == 'berth.facade' or m.startswith('berth.adapters') or m == 'sqlalchemy'))"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
        )
        assert done.stdout.strip() == "[]"


class TestFacadeArguments:
    """Arguments are checked before any use case runs, with the API's rules."""

    @pytest.fixture
    def facade(self, app: App) -> Berth:
        return Berth(app.bus)

    @pytest.mark.parametrize("tail", [0, 5001, True, "10"])
    async def test_log_tail_out_of_range_is_invalid(
        self, facade: Berth, owner: User, tail: Any
    ) -> None:
        """``tail`` outside 1-5000 is InvalidInput at ``tail``, as the API's 422."""
        with pytest.raises(InvalidInput) as exc:
            await facade.logs(owner, uuid4(), tail=tail)
        assert _locations(exc) == ["tail"]

    @pytest.mark.parametrize("wait", [300.5, 301, 10**6, float("inf")])
    async def test_a_wait_past_the_cap_is_invalid(
        self, facade: Berth, owner: User, server: Server, wait: float
    ) -> None:
        """Every wait is capped at ``WAIT_MAX`` seconds, as the API's ``?wait``: a deploy's,
        a rollback's, a cancel's (at ``wait``) and ``wait``'s own (at ``timeout``)."""
        key = await _queued(facade, owner, server)
        calls = {
            "wait": [
                facade.deploy(
                    owner, server_id=server.id, name="web", image="nginx:1.27", wait=wait
                ),
                facade.rollback(owner, uuid4(), wait=wait),
                facade.cancel(owner, key, wait=wait),
            ],
            "timeout": [facade.wait(owner, key, timeout=wait)],
        }
        for where, refused in calls.items():
            for call in refused:
                with pytest.raises(InvalidInput) as exc:
                    await call
                assert _locations(exc) == [where]
                assert f"{c.WAIT_MAX}" in exc.value.errors[0].message

    async def test_the_longest_wait_is_allowed(
        self, facade: Berth, owner: User, server: Server
    ) -> None:
        """``WAIT_MAX`` itself is a wait (a final deployment answers at once)."""
        key = await _queued(facade, owner, server)
        await facade.cancel(owner, key)
        done = await facade.wait(owner, key, timeout=c.WAIT_MAX)
        assert done.state is DeploymentState.CANCELED

    @pytest.mark.parametrize("limit", [0, 101])
    async def test_page_limits_out_of_range_are_invalid(
        self, facade: Berth, owner: User, limit: int
    ) -> None:
        """A revisions' or deliveries' page of more than ``PAGE_MAX`` (or none) is
        InvalidInput at ``limit``."""
        for call in (
            facade.revisions(owner, uuid4(), limit=limit),
            facade.webhook_deliveries(owner, uuid4(), limit=limit),
        ):
            with pytest.raises(InvalidInput) as exc:
                await call
            assert _locations(exc) == ["limit"]

    async def test_deployments_limit_out_of_range_is_invalid(
        self, facade: Berth, owner: User, server: Server
    ) -> None:
        """``limit`` outside 1-100 is InvalidInput at ``deployments.limit``."""
        with pytest.raises(InvalidInput) as exc:
            await facade.deployments(owner, server.id, limit=101)
        assert _locations(exc) == ["limit"]

    @pytest.mark.parametrize(
        "call",
        [
            pytest.param(lambda f, u: f.server(u, "not-a-uuid"), id="server"),
            pytest.param(lambda f, u: f.delete_server(u, "x"), id="delete_server"),
            pytest.param(lambda f, u: f.new_enrollment_token(u, "x"), id="new_enrollment_token"),
            pytest.param(lambda f, u: f.containers(u, "x"), id="containers"),
            pytest.param(lambda f, u: f.installations(u, "x"), id="installations"),
            pytest.param(lambda f, u: f.installation(u, "x"), id="installation"),
            pytest.param(lambda f, u: f.logs(u, "x"), id="logs"),
            pytest.param(lambda f, u: f.remove_installation(u, "x"), id="remove_installation"),
            pytest.param(lambda f, u: f.deployment(u, "x"), id="deployment"),
            pytest.param(lambda f, u: f.deployments(u, "x"), id="deployments"),
            pytest.param(lambda f, u: f.wait(u, "x", 0), id="wait"),
        ],
    )
    async def test_an_id_that_is_no_uuid_is_not_found(
        self, facade: Berth, owner: User, call: Any
    ) -> None:
        """Every method taking an id answers NotFound for text that is not a UUID."""
        with pytest.raises(NotFound):
            await call(facade, owner)

    async def test_server_takes_ssh_user_and_host_keys_with_the_api_rules(
        self, facade: Berth, owner: User
    ) -> None:
        """``ssh_user`` and ``host_keys`` follow the API's rules; with keys, it is enrolled."""
        key = asyncssh.generate_private_key("ssh-ed25519").export_public_key("openssh")
        host_key = key.decode().strip()
        with pytest.raises(InvalidInput) as exc:
            await facade.create_server(owner, name="web-1", ssh_user="Root!", host_keys=[host_key])
        assert sorted(_locations(exc)) == ["address", "ssh_user"]
        added = await facade.create_server(
            owner, name="web-1", address="203.0.113.9", ssh_user="deploy", host_keys=[host_key]
        )
        server = added.server
        assert (server.ssh_user, server.host_keys) == ("deploy", (host_key,))
        assert server.status is ServerStatus.OFFLINE  # not pending: the monitor reaches it next
        read = await facade.server(owner, str(server.id))  # not verified yet: checking
        assert (read.status, read.last_known_status) == (ServerStatus.CHECKING, server.status)
        assert msgspec.structs.replace(read, status=server.status, last_known_status=None) == server

    async def test_a_pending_server_gets_a_new_install_command(self, app: App, owner: User) -> None:
        """``new_enrollment_token`` gives a pending server a new token and, with a base
        URL, its install command; an enrolled one is a Conflict."""
        facade = Berth(app.bus, base_url="https://berth.example")
        added = await facade.create_server(owner, name="web-2")
        renewed = await facade.new_enrollment_token(owner, str(added.server.id))
        assert renewed.enrollment_token != added.enrollment_token
        assert renewed.install_command is not None
        assert renewed.enrollment_token in renewed.install_command
        await app.bus.handle(
            c.EnrollServer(
                token=renewed.enrollment_token,
                enrollment=EnrollCommand(host_keys=(HOST_KEY,)),
                client_address=None,
            )
        )
        with pytest.raises(Conflict):
            await facade.new_enrollment_token(owner, added.server.id)

    async def test_deployments_of_a_server_newest_first(
        self, app: App, facade: Berth, owner: User, server: Server
    ) -> None:
        """The deployments of a server are listed newest first, up to ``limit``."""
        first = await _queued(facade, owner, server)
        await finish(app, owner, first)
        second = await _queued(facade, owner, server)
        listed = await facade.deployments(owner, str(server.id), limit=1)
        assert [d.id for d in listed] == [second]
        assert [d.id for d in await facade.deployments(owner, server.id)] == [second, first]


class TestWait:
    """``wait`` returns once the deployment is final, or when its timeout passes."""

    @pytest.fixture
    async def queued(self, app: App, owner: User, server: Server) -> Queued:
        """A facade over ``app`` and the id of a deployment it queued for ``owner``."""
        facade = Berth(app.bus)
        return facade, await _queued(facade, owner, server)

    async def test_final_deployment_returns_at_once(
        self, app: App, owner: User, queued: Queued
    ) -> None:
        """A deployment already final is returned as it is, even with no time to wait."""
        facade, key = queued
        await finish(app, owner, key)
        done = await facade.wait(owner, key, timeout=0)
        assert done.state is DeploymentState.SUCCEEDED

    async def test_timeout_returns_the_deployment_as_it_stands(
        self, owner: User, queued: Queued
    ) -> None:
        """Nothing runs it: after the timeout, the queued deployment comes back."""
        facade, key = queued
        started = time.monotonic()
        still = await facade.wait(owner, str(key), timeout=0.1)
        assert still.state is DeploymentState.QUEUED
        assert 0.09 <= time.monotonic() - started < 5

    @pytest.mark.parametrize(
        "seconds",
        [
            pytest.param(30, id="without-a-worker-the-store-is-polled"),
            pytest.param(120, id="a-worker-in-process-wakes-the-waiter"),
        ],
    )
    async def test_a_deployment_finished_meanwhile_ends_the_wait(
        self, app: App, owner: User, queued: Queued, seconds: float
    ) -> None:
        """A deployment finished elsewhere (another process) is seen at the next poll; with
        the worker in this process, its notice ends the wait before the next poll."""
        facade, key = queued
        waiting = asyncio.create_task(facade.wait(owner, key, timeout=seconds))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        await finish(app, owner, key)  # records DeploymentFinished, as the job queue does
        done = await asyncio.wait_for(waiting, 5)
        assert done.state is DeploymentState.SUCCEEDED

    @pytest.mark.parametrize("seconds", [-1, float("nan"), True, "5"])
    async def test_bad_timeout_is_invalid(self, owner: User, queued: Queued, seconds: Any) -> None:
        """A negative, not finite or non-number timeout is InvalidInput at ``timeout``."""
        facade, key = queued
        with pytest.raises(InvalidInput) as exc:
            await facade.wait(owner, key, timeout=seconds)
        assert _locations(exc) == ["timeout"]

    async def test_another_users_deployment_is_not_found(
        self, app: App, owner: User, queued: Queued
    ) -> None:
        """Waiting on someone else's deployment is NotFound, as reading it is."""
        facade, key = queued
        stranger = await app.bus.handle(
            c.CreateUser(email=unique_email("other"), password="correct horse battery")
        )
        with pytest.raises(NotFound):
            await facade.wait(stranger, key, timeout=0)


class TestFacadeTeams:
    """Teams, members, named tokens and the audit log through the library."""

    @pytest.fixture
    def facade(self, app: App) -> Berth:
        return Berth(app.bus)

    async def test_a_team_from_invitation_to_removal(self, facade: Berth) -> None:
        """An owner makes a team and invites a user, who joins with the role; the owner
        changes the role and removes the member; each step is in the team's audit log."""
        ada = await facade.create_user(unique_email("ada"), "correct horse battery staple")
        bob = await facade.create_user(unique_email("bob"), "correct horse battery staple")
        team = await facade.create_team(ada, name="platform")
        assert [(t.id, t.role) for t in await facade.teams(ada)] == [
            (ada.id, berth.Role.OWNER),
            (team.id, berth.Role.OWNER),
        ]
        invited = await facade.invite(ada, str(team.id), email=bob.email, role="viewer")
        joined = await facade.accept_invitation(bob, invited.token)
        assert (joined.team_id, joined.role) == (team.id, berth.Role.VIEWER)
        changed = await facade.change_role(ada, team.id, bob.id, berth.Role.DEPLOYER)
        assert changed.role is berth.Role.DEPLOYER
        members = await facade.members(bob, team.id)
        assert {(m.email, m.role) for m in members} == {
            (ada.email, berth.Role.OWNER),
            (bob.email, berth.Role.DEPLOYER),
        }
        await facade.remove_member(ada, team.id, str(bob.id))
        with pytest.raises(NotFound):
            await facade.members(bob, team.id)
        log = await facade.audit(ada, team_id=team.id)
        assert [e.action for e in log.entries] == [
            "member.remove",
            "member.role",
            "member.join",
            "member.invite",
            "team.create",
        ]

    async def test_a_named_token_acts_with_its_scopes_and_servers(
        self, facade: Berth, owner: User, make_server: Any
    ) -> None:
        """``authenticate`` of a named token is an actor the methods obey: it sees its one
        server, may not create a server (``InsufficientScope``, nothing made), ``whoami``
        says what it is; revoked, it is ``Unauthorized``."""
        one, other = await make_server(owner), await make_server(owner)
        made = await facade.create_token(
            owner, name="agent", scopes=[berth.TokenScope.DEPLOY], server_ids=[one.id]
        )
        assert made.token.scopes == {berth.TokenScope.READ, berth.TokenScope.DEPLOY}
        agent = await facade.authenticate(made.secret)
        assert [s.id for s in await facade.servers(agent)] == [one.id]
        with pytest.raises(NotFound):
            await facade.server(agent, other.id)
        with pytest.raises(berth.InsufficientScope):
            await facade.create_server(agent, name="web-9")
        assert len(await facade.servers(owner)) == 2
        me = await facade.whoami(agent)
        assert (me.token_id, me.token_name, me.server_ids) == (
            made.token.id,
            "agent",
            frozenset({one.id}),
        )
        assert [t.id for t in await facade.tokens(owner)] == [made.token.id]
        await facade.revoke_token(owner, str(made.token.id))
        with pytest.raises(berth.Unauthorized):
            await facade.authenticate(made.secret)
        refused = (await facade.audit(owner)).entries
        assert ("server.create", "denied") in {(e.action, e.outcome) for e in refused}

    async def test_act_as_works_in_another_team(self, facade: Berth, owner: User) -> None:
        """``act_as`` is the user in another of their teams: a server made through it is
        that team's, not the personal team's; a team they are not in is NotFound."""
        team = await facade.create_team(owner, name="shared")
        there = await facade.act_as(owner, team.id)
        added = await facade.create_server(there, name="web-1", address="203.0.113.4")
        assert [s.id for s in await facade.servers(there)] == [added.server.id]
        assert await facade.servers(owner) == []
        also = await facade.create_server(owner, name="web-2", team_id=team.id)
        assert {s.id for s in await facade.servers(there)} == {added.server.id, also.server.id}
        with pytest.raises(NotFound):
            await facade.act_as(owner, uuid4())

    @pytest.mark.parametrize(
        ("call", "where"),
        [
            pytest.param(lambda f, u: f.create_team(u, name=""), ["name"], id="create_team"),
            pytest.param(
                lambda f, u: f.invite(u, u.id, email="nope", role="boss"),
                ["email", "role"],
                id="invite",
            ),
            pytest.param(
                lambda f, u: f.change_role(u, u.id, uuid4(), "root"), ["role"], id="change_role"
            ),
            pytest.param(
                lambda f, u: f.create_token(
                    u, name="x", scopes="admin", server_ids=["x"], expires_at="soon"
                ),
                ["scopes", "server_ids", "expires_at"],
                id="create_token",
            ),
            pytest.param(lambda f, u: f.audit(u, limit=0), ["limit"], id="audit"),
        ],
    )
    async def test_arguments_follow_the_api_rules(
        self, facade: Berth, owner: User, call: Any, where: list[str]
    ) -> None:
        """Each team method names every broken argument at once (InvalidInput)."""
        with pytest.raises(InvalidInput) as exc:
            await call(facade, owner)
        assert sorted(_locations(exc)) == sorted(where)

    async def test_an_expiry_in_the_past_or_without_a_zone_is_refused(
        self, facade: Berth, owner: User
    ) -> None:
        """``expires_at`` must be a time with its zone, in the future."""
        for when in (datetime(2000, 1, 1, tzinfo=UTC), datetime(2999, 1, 1)):
            with pytest.raises(InvalidInput) as exc:
                await facade.create_token(owner, name="x", scopes=["read"], expires_at=when)
            assert _locations(exc) == ["expires_at"]

    @pytest.mark.parametrize("token", ["", "berth_join_x", 42, None])
    async def test_an_unusable_invitation_is_not_found(
        self, facade: Berth, owner: User, token: Any
    ) -> None:
        """An invitation token that is not one (or not text) is NotFound, nothing joined."""
        with pytest.raises(NotFound):
            await facade.accept_invitation(owner, token)
        assert len(await facade.teams(owner)) == 1
