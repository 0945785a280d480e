"""Teams, members, invitations, named tokens and the audit log, through the bus."""

from __future__ import annotations

from datetime import timedelta
from uuid import uuid4

import pytest
from berth.core import commands as c
from berth.core import tokens
from berth.core.access import Actor, Role, TokenScope
from berth.core.errors import Conflict, InsufficientScope, InvalidInput, NotFound, Unauthorized
from berth.core.models import User
from berth.core.teams import AuditOutcome
from berth.core.use_cases import PruneAudit
from team_scenarios import audit_filters_keep_what_matches
from wiring import App, build_app, unique_email

PASSWORD = "correct horse battery staple"


async def user(app: App, tag: str = "user") -> User:
    return await app.bus.handle(c.CreateUser(email=unique_email(tag), password=PASSWORD))


async def team_with(app: App, owner: User, *members: tuple[User, Role]) -> Actor:
    """A new team of ``owner`` with ``members`` joined by invitation; the owner acting in it."""
    team = await app.bus.handle(c.CreateTeam(name="platform"), owner)
    for member, role in members:
        invited = await app.bus.handle(
            c.InviteMember(team_id=team.id, email=member.email, role=role), owner
        )
        await app.bus.handle(c.AcceptInvitation(token=invited.token), member)
    return await app.bus.handle(c.ActAs(team_id=team.id), owner)


async def token_of(
    app: App, who: User, team_id: object, scope: TokenScope = TokenScope.ADMIN, **kw: object
) -> str:
    made = await app.bus.handle(
        c.CreateToken(name="agent", scopes=frozenset({scope}), team_id=team_id, **kw), who
    )
    return made.secret


class TestPersonalTeams:
    async def test_a_new_user_owns_a_personal_team(self) -> None:
        """Every user has a personal team, made with the account: its id is the user's and
        the user is its owner."""
        app = build_app()
        ada = await user(app)
        (team,) = await app.bus.handle(c.ListTeams(), ada)
        assert (team.id, team.personal_of, team.role) == (ada.id, ada.id, Role.OWNER)

    async def test_the_personal_team_comes_first(self) -> None:
        """A user's teams list their personal team first, then the others oldest first,
        though a team they joined is older than their account."""
        app = build_app()
        ada = await user(app)
        early = await app.bus.handle(c.CreateTeam(name="early"), ada)
        app.clock.advance(60)
        bob = await user(app)
        invited = await app.bus.handle(
            c.InviteMember(team_id=early.id, email=bob.email, role=Role.VIEWER), ada
        )
        await app.bus.handle(c.AcceptInvitation(token=invited.token), bob)
        app.clock.advance(60)
        late = await app.bus.handle(c.CreateTeam(name="late"), bob)
        teams = await app.bus.handle(c.ListTeams(), bob)
        assert [(t.id, t.role) for t in teams] == [
            (bob.id, Role.OWNER),
            (early.id, Role.VIEWER),
            (late.id, Role.OWNER),
        ]

    async def test_the_main_token_acts_in_the_personal_team_with_every_right(self) -> None:
        """The main token (Settings → API token) keeps the seed's meaning: full access, the
        user's personal team."""
        app = build_app()
        ada = await user(app)
        actor = await app.bus.handle(
            c.Authenticate(token=await app.bus.handle(c.RegenerateToken(), ada))
        )
        assert (actor.team_id, actor.role, actor.token_id) == (ada.id, Role.OWNER, None)
        assert actor.scopes == frozenset(TokenScope)
        assert actor.token_name == "main token"

    async def test_a_personal_teams_user_stays_its_owner(self) -> None:
        """The user of a personal team can be neither demoted nor removed from it."""
        app = build_app()
        ada, bob = await user(app), await user(app)
        invited = await app.bus.handle(
            c.InviteMember(team_id=ada.id, email=bob.email, role=Role.OWNER), ada
        )
        await app.bus.handle(c.AcceptInvitation(token=invited.token), bob)
        for cmd in (
            c.ChangeMemberRole(team_id=ada.id, user_id=ada.id, role=Role.VIEWER),
            c.RemoveMember(team_id=ada.id, user_id=ada.id),
        ):
            with pytest.raises(Conflict):
                await app.bus.handle(cmd, bob)


class TestInvitations:
    async def test_the_invited_user_joins_with_the_role(self) -> None:
        """An invitation accepted by the user whose email it names makes them a member
        with its role; only its hash is stored."""
        app = build_app()
        ada, bob = await user(app), await user(app)
        lead = await team_with(app, ada)
        invited = await app.bus.handle(
            c.InviteMember(team_id=lead.team_id, email=bob.email.upper(), role=Role.DEPLOYER),
            ada,
        )
        assert invited.invitation.expires_at - invited.invitation.created_at == timedelta(days=7)
        stored = app.store.state.invitations[invited.invitation.id]
        assert stored.token_hash == tokens.hash_token(invited.token) != invited.token
        joined = await app.bus.handle(c.AcceptInvitation(token=invited.token), bob)
        assert joined.role is Role.DEPLOYER
        members = await app.bus.handle(c.ListMembers(team_id=lead.team_id), bob)
        assert {(m.email, m.role) for m in members} == {
            (ada.email, Role.OWNER),
            (bob.email, Role.DEPLOYER),
        }

    async def test_another_user_cannot_accept_it(self) -> None:
        """The invitation is for one email: another signed-in user is refused, and it
        stays usable by the right one."""
        app = build_app()
        ada, bob, eve = await user(app), await user(app), await user(app)
        lead = await team_with(app, ada)
        invited = await app.bus.handle(
            c.InviteMember(team_id=lead.team_id, email=bob.email, role=Role.VIEWER), ada
        )
        with pytest.raises(Conflict) as refused:
            await app.bus.handle(c.AcceptInvitation(token=invited.token), eve)
        assert refused.value.kind == "invitation-for-another-user"
        await app.bus.handle(c.AcceptInvitation(token=invited.token), bob)

    async def test_it_is_one_time_and_ends_after_seven_days(self) -> None:
        """A used invitation, or one older than 7 days, is not found."""
        app = build_app()
        ada, bob, cy = await user(app), await user(app), await user(app)
        lead = await team_with(app, ada)
        used = await app.bus.handle(
            c.InviteMember(team_id=lead.team_id, email=bob.email, role=Role.VIEWER), ada
        )
        await app.bus.handle(c.AcceptInvitation(token=used.token), bob)
        with pytest.raises(NotFound):
            await app.bus.handle(c.AcceptInvitation(token=used.token), bob)
        late = await app.bus.handle(
            c.InviteMember(team_id=lead.team_id, email=cy.email, role=Role.VIEWER), ada
        )
        app.clock.advance(7 * 24 * 3600 + 1)
        with pytest.raises(NotFound):
            await app.bus.handle(c.AcceptInvitation(token=late.token), cy)

    async def test_its_link_shows_the_team_and_role_without_using_it(self) -> None:
        """Anybody holding the link reads its team, role and email (the dashboard's page
        for it); reading uses nothing; a used, expired or malformed one is not found."""
        app = build_app()
        ada, bob, cy = await user(app), await user(app), await user(app)
        lead = await team_with(app, ada)
        invited = await app.bus.handle(
            c.InviteMember(team_id=lead.team_id, email=bob.email, role=Role.DEPLOYER), ada
        )
        shown = await app.bus.handle(c.ShowInvitation(token=invited.token))
        assert (shown.team_id, shown.team_name, shown.email, shown.role) == (
            lead.team_id,
            "platform",
            bob.email,
            Role.DEPLOYER,
        )
        assert shown.expires_at == invited.invitation.expires_at
        await app.bus.handle(c.AcceptInvitation(token=invited.token), bob)
        late = await app.bus.handle(
            c.InviteMember(team_id=lead.team_id, email=cy.email, role=Role.VIEWER), ada
        )
        app.clock.advance(7 * 24 * 3600 + 1)
        for token in (invited.token, late.token, "berth_join_nope", "x" * 5000, 42):
            with pytest.raises(NotFound):
                await app.bus.handle(c.ShowInvitation(token=token))  # type: ignore[arg-type]

    async def test_only_an_owner_invites_an_owner(self) -> None:
        """An admin may invite admins and below; inviting an owner needs the role owner
        (403, recorded as refused)."""
        app = build_app()
        ada, adm = await user(app), await user(app)
        lead = await team_with(app, ada, (adm, Role.ADMIN))
        await app.bus.handle(
            c.InviteMember(team_id=lead.team_id, email=unique_email(), role=Role.ADMIN), adm
        )
        with pytest.raises(InsufficientScope):
            await app.bus.handle(
                c.InviteMember(team_id=lead.team_id, email=unique_email(), role=Role.OWNER), adm
            )
        page = await app.bus.handle(c.ListAudit(team_id=lead.team_id), ada)
        assert [(e.action, e.outcome) for e in page.entries[:2]] == [
            ("member.invite", AuditOutcome.DENIED),
            ("member.invite", AuditOutcome.OK),
        ]


class TestRoles:
    async def test_a_team_keeps_an_owner(self) -> None:
        """The last owner can be neither demoted nor removed (409 last-owner); with a
        second owner, either can leave the role."""
        app = build_app()
        ada, bob = await user(app), await user(app)
        lead = await team_with(app, ada)
        for cmd in (
            c.ChangeMemberRole(team_id=lead.team_id, user_id=ada.id, role=Role.ADMIN),
            c.RemoveMember(team_id=lead.team_id, user_id=ada.id),
        ):
            with pytest.raises(Conflict) as refused:
                await app.bus.handle(cmd, ada)
            assert refused.value.kind == "last-owner"
        invited = await app.bus.handle(
            c.InviteMember(team_id=lead.team_id, email=bob.email, role=Role.OWNER), ada
        )
        await app.bus.handle(c.AcceptInvitation(token=invited.token), bob)
        changed = await app.bus.handle(
            c.ChangeMemberRole(team_id=lead.team_id, user_id=ada.id, role=Role.ADMIN), bob
        )
        assert changed.role is Role.ADMIN

    async def test_an_admin_cannot_touch_an_owner(self) -> None:
        """An admin changes and removes members below owner, never an owner (403)."""
        app = build_app()
        ada, adm, dev = await user(app), await user(app), await user(app)
        lead = await team_with(app, ada, (adm, Role.ADMIN), (dev, Role.VIEWER))
        await app.bus.handle(
            c.ChangeMemberRole(team_id=lead.team_id, user_id=dev.id, role=Role.DEPLOYER), adm
        )
        for cmd in (
            c.ChangeMemberRole(team_id=lead.team_id, user_id=ada.id, role=Role.VIEWER),
            c.RemoveMember(team_id=lead.team_id, user_id=ada.id),
            c.ChangeMemberRole(team_id=lead.team_id, user_id=dev.id, role=Role.OWNER),
        ):
            with pytest.raises(InsufficientScope):
                await app.bus.handle(cmd, adm)

    async def test_a_removed_members_tokens_stop_at_once(self) -> None:
        """Removing a member deletes their tokens for that team: the next request with one
        is 401, while their tokens for other teams still work."""
        app = build_app()
        ada, bob = await user(app), await user(app)
        lead = await team_with(app, ada, (bob, Role.DEPLOYER))
        here = await token_of(app, bob, lead.team_id, TokenScope.DEPLOY)
        own = await token_of(app, bob, bob.id, TokenScope.READ)
        await app.bus.handle(c.Authenticate(token=here))
        await app.bus.handle(c.RemoveMember(team_id=lead.team_id, user_id=bob.id), ada)
        with pytest.raises(Unauthorized):
            await app.bus.handle(c.Authenticate(token=here))
        assert (await app.bus.handle(c.Authenticate(token=own))).team_id == bob.id


class TestNamedTokens:
    async def test_shown_once_stored_hashed_listed_without_secret(self) -> None:
        """A named token's secret is in the answer that makes it and nowhere else: the
        store and the listing hold its hash and first characters."""
        app = build_app()
        ada = await user(app)
        made = await app.bus.handle(
            c.CreateToken(name="ci", scopes=frozenset({TokenScope.DEPLOY})), ada
        )
        assert tokens.is_well_formed(made.secret)
        assert made.token.scopes == {TokenScope.READ, TokenScope.DEPLOY}
        (listed,) = await app.bus.handle(c.ListTokens(), ada)
        assert listed.token_hash == tokens.hash_token(made.secret)
        assert made.secret not in repr(app.store.state.access_tokens)
        assert made.secret.startswith(listed.prefix)

    async def test_acts_in_its_team_with_its_scopes(self) -> None:
        """A named token authenticates as its user in its team, role and scopes; its last
        use is recorded; ``CurrentToken`` says so."""
        app = build_app()
        ada, bob = await user(app), await user(app)
        lead = await team_with(app, ada, (bob, Role.DEPLOYER))
        secret = await token_of(app, bob, lead.team_id, TokenScope.READ)
        actor = await app.bus.handle(c.Authenticate(token=secret, client_address="192.0.2.1"))
        me = await app.bus.handle(c.CurrentToken(), actor)
        assert (me.team_id, me.role, me.scopes, me.token_name) == (
            lead.team_id,
            Role.DEPLOYER,
            frozenset({TokenScope.READ}),
            "agent",
        )
        (stored,) = app.store.state.access_tokens.values()
        assert stored.last_used_at == app.clock.now()

    async def test_revoked_and_expired_tokens_are_refused(self) -> None:
        """A revoked token is refused at once; one past its ``expires_at`` too."""
        app = build_app()
        ada = await user(app)
        made = await app.bus.handle(
            c.CreateToken(
                name="short",
                scopes=frozenset({TokenScope.READ}),
                expires_at=app.clock.now() + timedelta(hours=1),
            ),
            ada,
        )
        await app.bus.handle(c.Authenticate(token=made.secret))
        app.clock.advance(3601)
        with pytest.raises(Unauthorized):
            await app.bus.handle(c.Authenticate(token=made.secret))
        other = await token_of(app, ada, ada.id)
        (listed, _) = await app.bus.handle(c.ListTokens(), ada)
        await app.bus.handle(c.RevokeToken(token_id=listed.id), ada)
        with pytest.raises(Unauthorized):
            await app.bus.handle(c.Authenticate(token=other))

    async def test_a_token_is_for_a_team_of_the_user_and_servers_of_that_team(self) -> None:
        """A token for a team the user is not in is 404; so is one naming servers that are
        not the team's (as any such server id is), naming them; an expiry in the past is
        422."""
        app = build_app()
        ada, eve = await user(app), await user(app)
        with pytest.raises(NotFound):
            await app.bus.handle(
                c.CreateToken(name="x", scopes=frozenset({TokenScope.READ}), team_id=eve.id), ada
            )
        theirs = uuid4()
        with pytest.raises(NotFound) as missing:
            await app.bus.handle(
                c.CreateToken(
                    name="x", scopes=frozenset({TokenScope.READ}), server_ids=frozenset({theirs})
                ),
                ada,
            )
        assert str(theirs) in str(missing.value)
        with pytest.raises(InvalidInput):
            c.parse_create_token(
                {"name": "x", "scopes": ["read"], "expires_at": "2000-01-01T00:00:00Z"},
                now=app.clock.now(),
            )

    async def test_a_named_token_acts_in_its_own_team_only(self) -> None:
        """A named token naming another of its user's teams gets 404: it is one team's."""
        app = build_app()
        ada = await user(app)
        lead = await team_with(app, ada)
        actor = await app.bus.handle(c.Authenticate(token=await token_of(app, ada, ada.id)))
        with pytest.raises(NotFound):
            await app.bus.handle(c.ListMembers(team_id=lead.team_id), actor)

    async def test_parse_create_token_names_every_bad_field(self) -> None:
        """Every broken field of a new token is named at once."""
        with pytest.raises(InvalidInput) as bad:
            c.parse_create_token(
                {"name": "", "scopes": ["write"], "server_ids": ["x"], "expires_at": 3, "x": 1}
            )
        assert {e.location for e in bad.value.errors} == {
            "name",
            "scopes",
            "server_ids",
            "expires_at",
            "x",
        }

    @pytest.mark.parametrize("scopes", [[], ["read"] * 4, ["read", "deploy", "admin", "read"]])
    async def test_scopes_are_one_to_three_as_the_schema_says(self, scopes: list[str]) -> None:
        """A token's scopes are a list of 1 to 3 (the schema's minItems/maxItems): even
        repeated known scopes past three are refused."""
        with pytest.raises(InvalidInput) as bad:
            c.parse_create_token({"name": "x", "scopes": scopes})
        assert [e.location for e in bad.value.errors] == ["scopes"]


class TestAuditLog:
    async def test_a_change_is_recorded_with_who_how_and_where(self) -> None:
        """A deploy through a named token is an ``ok`` entry naming the user, the token,
        the action, the app and the client address."""
        app = build_app()
        ada, bob = await user(app), await user(app)
        lead = await team_with(app, ada, (bob, Role.DEPLOYER))
        raw = {"name": "web", "address": "203.0.113.7", "host_keys": [_HOST_KEY]}
        server = (await app.bus.handle(c.parse_create_server(raw), lead)).server
        actor = await app.bus.handle(
            c.Authenticate(
                token=await token_of(app, bob, lead.team_id, TokenScope.DEPLOY),
                client_address="192.0.2.9",
            )
        )
        raw = {"server_id": str(server.id), "name": "shop", "image": "shop:1.0"}
        deployed = await app.bus.handle(c.parse_deploy(raw), actor)
        page = await app.bus.handle(c.ListAudit(team_id=lead.team_id), ada)
        entry = page.entries[0]
        assert (entry.action, entry.outcome, entry.client_address) == (
            "deploy",
            AuditOutcome.OK,
            "192.0.2.9",
        )
        assert (entry.actor.email, entry.actor.token_name) == (bob.email, "agent")
        assert (entry.target.type, entry.target.id, entry.target.name) == (
            "installation",
            str(deployed.installation.id),
            "shop",
        )

    async def test_pages_go_newest_first(self) -> None:
        """The log reads newest first, a page at a time, ``next_before`` leading on."""
        app = build_app()
        ada = await user(app)
        for n in range(5):
            await app.bus.handle(c.CreateTeam(name=f"t{n}"), ada)
            app.clock.advance(1)
        # each team's log holds its own creation; the personal team's holds none of them
        teams = [t for t in await app.bus.handle(c.ListTeams(), ada) if t.personal_of is None]
        first = await app.bus.handle(c.ListAudit(team_id=teams[0].id, limit=1), ada)
        assert [e.action for e in first.entries] == ["team.create"]
        assert first.next_before is None
        for n in range(3):
            await app.bus.handle(
                c.CreateToken(name=f"k{n}", scopes=frozenset({TokenScope.READ})), ada
            )
            app.clock.advance(1)
        one = await app.bus.handle(c.ListAudit(limit=2), ada)
        two = await app.bus.handle(c.ListAudit(limit=2, before=one.next_before), ada)
        names = [e.target.name for e in (*one.entries, *two.entries)]
        assert names == ["k2", "k1", "k0"]
        assert two.next_before is None

    async def test_filters_keep_what_matches(self) -> None:
        """Action, outcome and actor filters keep only matching entries, paged alike."""
        app = build_app()
        await audit_filters_keep_what_matches(app.bus, app.clock)

    async def test_old_entries_are_pruned(self) -> None:
        """Pruning forgets entries older than ``BERTH_AUDIT_DAYS`` and keeps the rest."""
        app = build_app()
        ada = await user(app)
        await app.bus.handle(c.CreateToken(name="old", scopes=frozenset({TokenScope.READ})), ada)
        app.clock.advance(31 * 24 * 3600)
        await app.bus.handle(c.CreateToken(name="new", scopes=frozenset({TokenScope.READ})), ada)
        assert await PruneAudit(app.uow, app.clock, days=30)() == 1
        page = await app.bus.handle(c.ListAudit(), ada)
        assert [e.target.name for e in page.entries] == ["new"]


_HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHk2hJxkfVzN2w2Ccqq3U2ywCyjQDIRr0eSFoLHaBfkd"


class TestPruningInTheBackground:
    def test_berth_audit_days_is_read(self) -> None:
        """``BERTH_AUDIT_DAYS`` sets how long entries are kept (365 days unless set)."""
        from berth.entrypoints.settings import Settings

        assert Settings.from_env({}).audit_days == 365
        assert Settings.from_env({"BERTH_AUDIT_DAYS": "30"}).audit_days == 30

    async def test_the_monitor_loop_prunes_at_start_then_hourly(self) -> None:
        """The background prunes once when it starts and not again within the hour,
        whatever number of monitor passes run meanwhile."""
        import asyncio

        from berth.entrypoints.worker import Background
        from fakes import FakeClock, FakeJobQueue

        pruned: list[int] = []
        passes: list[int] = []

        async def prune() -> int:
            pruned.append(1)
            return 0

        async def monitor() -> None:
            passes.append(1)

        loops = Background(
            FakeJobQueue(),
            FakeClock(),
            lambda worker_id: None,  # type: ignore[arg-type,return-value]
            monitor,
            build_app().bus,
            prune_audit=prune,
            monitor_seconds=0.01,
        )
        await loops.start()
        for _ in range(200):
            if len(passes) >= 3:
                break
            await asyncio.sleep(0.01)
        await loops.stop()
        assert len(passes) >= 3
        assert pruned == [1]
