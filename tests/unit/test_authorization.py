"""Who may do what (SPEC.md, "Teams, roles and scoped tokens"): the one check in the bus,
the matrix of every command by role by scope on the fakes, and its rules as properties."""

from __future__ import annotations

import dataclasses
from typing import Any
from uuid import uuid4

import pytest
from authz_matrix import COMMANDS, NEEDS, allowed, build_world, run_cell
from berth.core import commands as c
from berth.core.access import Actor, Right, Role, TokenScope, rights_of, scope_closure
from berth.core.bus import MessageBus
from berth.core.errors import InsufficientScope, NotFound
from berth.core.models import User
from hypothesis import given
from hypothesis import strategies as st
from wiring import App, build_app

ROLES = list(Role)
SCOPES = list(TokenScope)


def _snapshot(app: App) -> Any:
    async def read() -> object:
        state = app.store.state
        return {
            f.name: dict(getattr(state, f.name))
            for f in dataclasses.fields(state)
            if f.name != "audit"
        }

    return read


class TestEveryCommandDeclaresARight:
    def test_every_registered_command_has_a_right_and_a_matrix_row(self) -> None:
        """Each command the composition root registers declares the right it needs, and
        each one a signed-in actor may send is in the matrix with SPEC.md's right."""
        bus = build_app().bus
        for kind in bus.registered():
            assert isinstance(kind.__dict__.get("right") or kind.right, Right), kind
            if kind.right is Right.PUBLIC:
                continue
            assert kind in COMMANDS, f"{kind.__name__} is missing from the matrix"
            assert kind.right.value == NEEDS[kind], kind.__name__

    def test_a_command_without_a_right_cannot_be_registered(self) -> None:
        """Registering a command class that declares no right fails at once."""

        class Undeclared(c.Command[None], frozen=True, kw_only=True):
            """A command someone forgot to give a right."""

        async def handler(actor: Any, cmd: Undeclared) -> None:
            return None

        with pytest.raises(TypeError, match="declares no right"):
            MessageBus().register(Undeclared, handler)

    def test_a_change_names_its_audit_action(self) -> None:
        """Every command that needs more than ``read`` (a change) names its audit action."""
        for kind, needed in NEEDS.items():
            if needed not in ("read", "signed-in") and kind is not c.ListRegistries:
                if kind in (
                    c.ListWebhooks,
                    c.ListWebhookDeliveries,
                    c.ListAudit,
                    c.ListGitCredentials,
                ):
                    continue
                assert kind.audited, kind.__name__


@pytest.mark.parametrize("scope", SCOPES, ids=str)
@pytest.mark.parametrize("role", ROLES, ids=str)
async def test_the_matrix(role: Role, scope: TokenScope) -> None:
    """Every command, sent through a member's token of ``role`` and ``scope``, is allowed
    when SPEC.md says so and otherwise refused with 403 insufficient-scope, changing
    nothing but the audit log (one ``denied`` entry)."""
    seen: dict[str, int] = {"allowed": 0, "refused": 0}
    for kind in COMMANDS:
        app = build_app()
        world = await build_world(app.bus, role, scope)
        seen[await run_cell(world, kind, _snapshot(app))] += 1
    assert seen["allowed"]
    assert seen["allowed"] + seen["refused"] == len(COMMANDS)


@pytest.mark.parametrize("scope", SCOPES, ids=str)
@pytest.mark.parametrize("role", ROLES, ids=str)
async def test_the_matrix_for_a_token_limited_to_a_server(role: Role, scope: TokenScope) -> None:
    """A token limited to servers may read and deploy (as its role and scopes allow) and
    nothing team-wide: every other command is a 403."""
    for kind in COMMANDS:
        app = build_app()
        world = await build_world(app.bus, role, scope, limited=True)
        await run_cell(world, kind, _snapshot(app), limited=True)


#: The commands that name one of the team's things by id.
_BY_ID = [
    kind
    for kind in COMMANDS
    if any(f.endswith("_id") and f != "team_id" for f in kind.__struct_fields__)
    and kind not in (c.RevokeToken, c.ChangeMemberRole, c.RemoveMember)
]


@pytest.mark.parametrize("kind", _BY_ID, ids=lambda k: k.__name__)
async def test_another_teams_ids_are_not_found(kind: type[c.Command[Any]]) -> None:
    """An owner of another team, with every scope, is told 404 for each of this team's
    ids, and nothing changes: exactly as for an id that does not exist."""
    app = build_app()
    world = await build_world(app.bus, Role.OWNER, TokenScope.ADMIN)
    stranger = await app.bus.handle(
        c.CreateUser(email=f"s-{uuid4().hex[:8]}@example.com", password="long enough pw")
    )
    before = await _snapshot(app)()
    with pytest.raises(NotFound):
        await app.bus.handle(COMMANDS[kind](world), stranger)
    assert await _snapshot(app)() == before


@pytest.mark.parametrize("kind", _BY_ID, ids=lambda k: k.__name__)
async def test_a_limited_tokens_other_servers_are_not_found(kind: type[c.Command[Any]]) -> None:
    """A token limited to one server is told 404 for the team's other server and what is
    on it, as if it did not exist (a right it lacks is 403 first)."""
    app = build_app()
    world = await build_world(app.bus, Role.OWNER, TokenScope.DEPLOY, limited=True)
    outside = dataclasses.replace(world, server_id=world.other_server_id)
    command = COMMANDS[kind](outside)
    if not world.actor.may(kind.right) or getattr(command, "server_id", None) is None:
        return
    with pytest.raises(NotFound):
        await app.bus.handle(command, world.actor)


async def test_a_limited_token_lists_only_its_servers() -> None:
    """``ListServers`` through a token limited to one server lists that server only."""
    app = build_app()
    world = await build_world(app.bus, Role.VIEWER, TokenScope.READ, limited=True)
    listed = await app.bus.handle(c.ListServers(), world.actor)
    assert [s.id for s in listed] == [world.server_id]


_role = st.sampled_from(ROLES)
_scopes = st.frozensets(st.sampled_from(SCOPES), min_size=1)


class TestEffectiveRights:
    @given(role=_role, scopes=_scopes, limited=st.booleans())
    def test_never_more_than_the_role_or_the_scopes(
        self, role: Role, scopes: frozenset[TokenScope], limited: bool
    ) -> None:
        """Effective rights never exceed the role's rights nor the scopes' (the account's
        own and ``signed-in`` aside), and a limited token has nothing team-wide."""
        effective = rights_of(role, scope_closure(scopes), limited=limited)
        for right in effective - {Right.PUBLIC, Right.SIGNED_IN, Right.ACCOUNT}:
            assert allowed(right.value, role, max(scopes, key=SCOPES.index))
        if limited:
            assert not effective & {Right.ADMIN, Right.MEMBERS, Right.OWNER, Right.ACCOUNT}

    @given(role=_role, scopes=_scopes, limited=st.booleans())
    def test_exactly_what_spec_allows(
        self, role: Role, scopes: frozenset[TokenScope], limited: bool
    ) -> None:
        """For every right, the bus's rule agrees with SPEC.md's table."""
        top = max(scopes, key=SCOPES.index)
        effective = rights_of(role, scope_closure(scopes), limited=limited)
        for right in set(Right) - {Right.PUBLIC}:
            assert (right in effective) == allowed(right.value, role, top, limited=limited)

    @given(role=_role, scopes=_scopes, wider=_scopes)
    def test_a_wider_scope_never_takes_a_right_away(
        self, role: Role, scopes: frozenset[TokenScope], wider: frozenset[TokenScope]
    ) -> None:
        """Adding scopes only adds rights (``read`` ⊂ ``deploy`` ⊂ ``admin``)."""
        narrow = rights_of(role, scope_closure(scopes))
        assert narrow <= rights_of(role, scope_closure(scopes | wider))


class TestTheBusCheck:
    async def test_a_refusal_names_what_is_needed(self) -> None:
        """A viewer's deploy is refused before its handler runs, saying what it needs."""
        ran: list[object] = []
        bus = MessageBus()

        async def handler(actor: Any, cmd: Any) -> None:
            ran.append(cmd)

        bus.register(c.DeleteServer, handler)
        user = User(id=uuid4(), email="v@example.com", password_hash="x", created_at=_now())
        viewer = Actor(user=user, team_id=uuid4(), role=Role.VIEWER)
        with pytest.raises(InsufficientScope) as refused:
            await bus.handle(c.DeleteServer(server_id=uuid4()), viewer)
        assert ran == []
        assert refused.value.kind == "insufficient-scope"
        assert "`admin`" in refused.value.detail


def _now() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC)
