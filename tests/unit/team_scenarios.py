"""Scenarios of the teams' use cases run on the fake store (``test_teams.py``) and on
SQLite and PostgreSQL (``tests/integration/test_teams_sql.py``), so both keep one rule."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

import pytest
from berth.core import commands as c
from berth.core.access import Role, TokenScope
from berth.core.errors import InsufficientScope
from berth.core.teams import AuditOutcome

PASSWORD = "correct horse battery staple"


async def audit_filters_keep_what_matches(bus: Any, clock: Any) -> None:
    """The audit log's filters (action, outcome, actor's email in any case) keep only the
    entries matching each one given, and page like the whole log."""
    tag = uuid4().hex[:8]
    ada = await bus.handle(c.CreateUser(email=f"ada-{tag}@example.com", password=PASSWORD))
    bob = await bus.handle(c.CreateUser(email=f"bob-{tag}@example.com", password=PASSWORD))
    team = await bus.handle(c.CreateTeam(name="filtered"), ada)
    invited = await bus.handle(
        c.InviteMember(team_id=team.id, email=bob.email, role=Role.VIEWER), ada
    )
    clock.advance(1)
    await bus.handle(c.AcceptInvitation(token=invited.token), bob)
    for n in range(3):
        clock.advance(1)
        made = c.CreateToken(name=f"k{n}", scopes=frozenset({TokenScope.READ}), team_id=team.id)
        await bus.handle(made, ada)
    clock.advance(1)
    with pytest.raises(InsufficientScope):  # a viewer invites nobody: a denied entry
        await bus.handle(
            c.InviteMember(team_id=team.id, email=f"cy-{tag}@example.com", role=Role.VIEWER), bob
        )

    async def page(**filters: Any) -> list[tuple[str, str, str]]:
        found = await bus.handle(c.ListAudit(team_id=team.id, **filters), ada)
        return [(e.action, e.outcome.value, e.actor.email) for e in found.entries]

    assert await page(outcome=AuditOutcome.DENIED) == [("member.invite", "denied", bob.email)]
    assert await page(actor=bob.email.upper()) == [
        ("member.invite", "denied", bob.email),
        ("member.join", "ok", bob.email),
    ]
    assert await page(action="member.invite", outcome=AuditOutcome.OK) == [
        ("member.invite", "ok", ada.email)
    ]
    assert await page(actor="nobody@example.com") == []
    first = await bus.handle(c.ListAudit(team_id=team.id, action="token.create", limit=2), ada)
    rest = await bus.handle(
        c.ListAudit(team_id=team.id, action="token.create", limit=2, before=first.next_before),
        ada,
    )
    names = [e.target.name for e in (*first.entries, *rest.entries)]
    assert names == ["k2", "k1", "k0"]
    assert rest.next_before is None
