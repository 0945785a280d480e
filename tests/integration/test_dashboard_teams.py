"""Teams in the dashboard, in a real browser (Debian's chromium driven by Playwright)
against a real ``berth serve`` (SQLite): the team switcher, Members, Tokens, the Audit
log and an invitation's page — and what the issue's "Done means" asks of real
processes: two users, an invitation accepted in the browser, a deployer's token (made in
the dashboard) deploys and a viewer-scoped one does not, a removed member's token stops
at once and their open event stream within seconds, a server-limited token sees one
server. Each test then checks that the team's audit log holds every call it made.

The servers answer nowhere (``127.0.0.1:1``), so a deploy queues and waits there
(``BERTH_QUEUE_TIMEOUT``): no Docker is needed.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from harness import PASSWORD, BerthProcess, new_server, problem, unique_email
from test_dashboard import (
    Account,
    csrf_of,
    expect,
    launch_chromium,
    open_context,
    watched,
)

pytestmark = pytest.mark.integration

ENV = {"BERTH_QUEUE_TIMEOUT": "600", "BERTH_OPEN_SIGNUP": "1", "BERTH_MONITOR_SECONDS": "60"}
#: How long a stream of a removed member may go on: the promise is 5 s (the credential is
#: asked again every 5 s); the rest is slack for a loaded machine, as in test_streams.
STREAM_DEADLINE = 15.0


# --- fixtures --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with launch_chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BerthProcess]:
    """A fresh ``berth serve`` (open sign-up, so an invitee without an account can make
    one); it must log no error."""
    process = BerthProcess(tmp_path_factory.mktemp("teams-ui"), env=dict(ENV)).start()
    try:
        yield process
    finally:
        process.stop()
    errors = [r for r in process.log_records() if r.get("level") in ("error", "critical")]
    assert not errors, f"berth logged errors: {errors[:3]}"


def sign_in(browser: Any, stack: BerthProcess, email: str) -> Account:
    """``email`` signed in through the sign-in form: the browser state to reuse."""
    context = open_context(browser, stack)
    page = context.new_page()
    page.goto("/login")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(r"/servers$"))
    state = context.storage_state()
    context.close()
    return Account(email, state)


@dataclass
class Crew:
    """Alice owns the team ``ops`` with two servers; Bob joined it as a deployer."""

    team: str
    team_name: str
    alice: Account
    alice_main: str
    bob: Account
    bob_main: str
    bob_id: str
    servers: list[str]
    deployer_token: str  # Alice's deploy-scoped token for the team, to queue deployments
    log: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture(scope="module")
def crew(browser: Any, stack: BerthProcess) -> Crew:
    (alice_email, alice), (bob_email, bob) = stack.new_users(2, "crew")
    name = f"ops-{uuid.uuid4().hex[:6]}"
    with stack.api(alice) as api:
        team = api.post("/api/agent/teams", json={"name": name}).json()["id"]
        servers = [new_server(api, teamId=team)["id"] for _ in range(2)]
        invited = api.post(
            f"/api/agent/teams/{team}/invitations", json={"email": bob_email, "role": "deployer"}
        ).json()
        made = api.post(
            "/api/agent/tokens", json={"name": "queue", "teamId": team, "scopes": ["deploy"]}
        ).json()
    with stack.api(bob) as api:
        bob_id = api.post(f"/api/agent/invitations/{invited['token']}/accept").json()["userId"]
    return Crew(
        team=team,
        team_name=name,
        alice=sign_in(browser, stack, alice_email),
        alice_main=alice,
        bob=sign_in(browser, stack, bob_email),
        bob_main=bob,
        bob_id=bob_id,
        servers=servers,
        deployer_token=made["token"],
    )


@pytest.fixture
def pages(browser: Any, stack: BerthProcess) -> Iterator[Any]:
    """Opens pages as a signed-in account (or nobody); each is closed after the test,
    which fails on a console error or CSP report."""
    opened: list[tuple[Any, list[str]]] = []

    def open_as(account: Account | None) -> Any:
        context = open_context(browser, stack, account)
        page, problems = watched(context)
        opened.append((context, problems))
        return page

    yield open_as
    for context, problems in opened:
        context.close()
        assert not problems, problems


def switch(page: Any, option_text: str) -> None:
    """Choose the team whose option reads ``option_text`` with the page's team switcher."""
    switcher = page.locator("#team-switcher")
    option = switcher.locator("option", has_text=option_text)
    switcher.get_by_label("Team").select_option(value=option.get_attribute("value"))
    switcher.get_by_role("button", name="Switch").click()


def act_in(page: Any, team_name: str) -> None:
    """Choose ``team_name`` with the team switcher (from the Members page)."""
    page.goto("/team/members")
    switch(page, team_name)
    expect(page.get_by_role("heading", level=1)).to_contain_text(team_name)


def confirm(page: Any, opener: str, button: str) -> None:
    """Click ``opener`` (a destructive form's button) and confirm in berth's dialog."""
    page.locator(opener).click()
    page.get_by_role("dialog").get_by_role("button", name=button).click()


def audit_log(stack: BerthProcess, crew: Crew) -> list[dict[str, Any]]:
    """Every entry of the team's audit log, through the API (paged to the end)."""
    entries: list[dict[str, Any]] = []
    before: str | None = None
    with stack.api(crew.alice_main) as api:
        for _ in range(100):  # bounded: 200 a page
            params = {"teamId": crew.team, "limit": "200", **({"before": before} if before else {})}
            page = api.get("/api/agent/audit", params=params)
            assert page.status_code == 200, page.text
            entries.extend(page.json()["events"])
            before = page.json()["nextBefore"]
            if before is None:
                break
    return entries


def assert_audited(stack: BerthProcess, crew: Crew, *expected: dict[str, Any]) -> None:
    """Each of ``expected`` (keys ``action``, ``outcome``, ``email``, ``token`` — the
    token's name —, ``target``) matches its own entry of the team's audit log."""
    entries = audit_log(stack, crew)
    unused = list(entries)
    for wanted in expected:
        for entry in unused:
            facts = {
                "action": entry["action"],
                "outcome": entry["outcome"],
                "email": entry["actor"]["email"],
                "token": entry["actor"]["tokenName"],
                "target": entry["target"].get("name") or entry["target"].get("id"),
            }
            if all(facts[k] == v for k, v in wanted.items()):
                unused.remove(entry)
                break
        else:
            raise AssertionError(f"not in the audit log: {wanted}; it holds {entries[:20]}")


def deploy_with(stack: BerthProcess, token: str, server_id: str) -> httpx.Response:
    body = {"serverId": server_id, "name": f"app{uuid.uuid4().hex[:6]}", "image": "nginx:1"}
    with stack.api(token) as api:
        return api.post("/api/agent/docker/deploy", json=body)


@dataclass(eq=False)  # a thread: hashed by identity
class EventStream(threading.Thread):
    """An event stream read by ``client`` (a token's or a signed-in browser's), in a
    thread, until the server ends it (bounded: a read waits at most 60 s)."""

    client: httpx.Client
    path: str
    status: int | None = None
    ended_at: float | None = None
    started: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        super().__init__(daemon=True)

    def open(self) -> EventStream:
        """Start reading; returns once the stream answered 200."""
        self.start()
        assert self.started.wait(30)
        assert self.status == 200
        return self

    def run(self) -> None:
        try:
            with self.client.stream("GET", self.path) as response:
                self.status = response.status_code
                self.started.set()
                for _ in response.iter_raw():
                    pass
        except httpx.HTTPError:
            pass
        finally:
            self.ended_at = time.monotonic()
            self.started.set()


def browser_session(stack: BerthProcess, email: str, team: str) -> httpx.Client:
    """A dashboard session of ``email`` (signed in by the form) acting in ``team``."""
    client = httpx.Client(base_url=stack.url, timeout=httpx.Timeout(30, read=60))
    csrf = re.compile(r'name="_csrf_token" value="([^"]+)"')
    token = csrf.search(client.get("/login").text)
    assert token
    form = {"email": email, "password": PASSWORD, "_csrf_token": token[1]}
    assert client.post("/login", data=form).status_code == 303
    token = csrf.search(client.get("/servers").text)
    assert token
    switched = client.post("/team/switch", data={"team": team, "_csrf_token": token[1]})
    assert switched.status_code == 303, switched.text
    return client


# --- the invitation --------------------------------------------------------------------


class TestInvitation:
    def test_an_invitation_is_made_and_accepted_in_the_browser(
        self, stack: BerthProcess, crew: Crew, pages: Any
    ) -> None:
        """Alice invites Dan as viewer on the Members page and gets the one-time link; Dan,
        not signed in, opens it, sees the team and role, signs in, comes back, joins with
        the button and acts in the team; both calls are in the audit log."""
        ((dan_email, _),) = stack.new_users(1, "dan")
        alice = pages(crew.alice)
        act_in(alice, crew.team_name)
        alice.get_by_label("Email").fill(dan_email)
        alice.locator("#invite-form").get_by_label("Role").select_option("viewer")
        alice.get_by_role("button", name="Make invitation link").click()
        link = alice.locator("#invitation-url").input_value()
        assert link.startswith(f"{stack.url}/invitations/berth_join_")
        dan = pages(None)
        dan.goto(link)
        expect(dan.locator("#invited-team")).to_have_text(crew.team_name)
        expect(dan.locator("#invited-role")).to_have_text("viewer")
        dan.get_by_role("link", name="Sign in").click()
        dan.get_by_label("Email").fill(dan_email)
        dan.get_by_label("Password").fill(PASSWORD)
        dan.get_by_role("button", name="Sign in").click()
        expect(dan).to_have_url(link)
        dan.get_by_role("button", name=f"Join {crew.team_name}").click()
        expect(dan).to_have_url(re.compile(r"/team/members\?done=joined$"))
        expect(dan.locator("#my-role")).to_have_text("viewer")
        selected = dan.locator("#team-switch option:checked")
        expect(selected).to_contain_text(crew.team_name)
        assert dan.locator("#invite-form").count() == 0  # a viewer invites nobody
        alice.goto("/team/members")
        expect(alice.locator(f'tr[data-member="{dan_email}"] [data-role]')).to_have_text("viewer")
        dan.goto(link)  # one time: used now
        expect(dan.get_by_role("heading", level=1)).to_have_text("Not found")
        assert_audited(
            stack,
            crew,
            {"action": "member.invite", "email": crew.alice.email, "target": dan_email},
            {"action": "member.join", "outcome": "ok", "email": dan_email},
        )

    def test_a_newcomer_signs_up_from_the_invitation_and_comes_back(
        self, stack: BerthProcess, crew: Crew, pages: Any
    ) -> None:
        """Someone without an account creates one from the invitation's page, lands back
        on it and joins; another signed-in user is told the invitation is not theirs."""
        email = unique_email("newcomer")
        with stack.api(crew.alice_main) as api:
            link = api.post(
                f"/api/agent/teams/{crew.team}/invitations",
                json={"email": email, "role": "deployer"},
            ).json()["url"]
        bob = pages(crew.bob)
        bob.goto(link)
        expect(bob.locator("#other-user")).to_contain_text(email)
        assert bob.get_by_role("button", name=re.compile("^Join")).count() == 0
        page = pages(None)
        page.goto(link)
        page.get_by_role("link", name="Create one with this email").click()
        page.get_by_label("Email").fill(email)
        page.get_by_label("Password", exact=True).fill(PASSWORD)
        page.get_by_label("Password again").fill(PASSWORD)
        page.get_by_role("button", name="Create account").click()
        expect(page).to_have_url(link)
        page.get_by_role("button", name=f"Join {crew.team_name}").click()
        expect(page.locator("#my-role")).to_have_text("deployer")
        assert_audited(stack, crew, {"action": "member.join", "outcome": "ok", "email": email})


# --- tokens ----------------------------------------------------------------------------


def make_token(page: Any, name: str, scope: str, servers: list[str] = ()) -> str:  # type: ignore[assignment]
    """Fill the Tokens page's form; the secret it shows once."""
    page.goto("/team/tokens")
    form = page.locator("#token-form")
    form.get_by_label("Name").fill(name)
    form.locator(f'input[name="scope"][value="{scope}"]').check()
    for server_id in servers:
        form.locator(f'input[name="servers"][value="{server_id}"]').check()
    form.get_by_label("Expires").select_option("7")
    form.get_by_role("button", name="Make token").click()
    secret = page.locator("#new-token").input_value()
    assert secret.startswith("berth_")
    return str(secret)


class TestTokens:
    def test_a_deployers_token_deploys_a_read_scoped_one_does_not(
        self, stack: BerthProcess, crew: Crew, pages: Any
    ) -> None:
        """Bob (deployer) makes a deploy token and a read token on the Tokens page (each
        secret shown once, never again): the first deploys (202), the second is a 403
        ``insufficient-scope``; the list shows when the first was last used."""
        bob = pages(crew.bob)
        act_in(bob, crew.team_name)
        ci = make_token(bob, "ci", "deploy")
        bob.reload()  # the page's address is the list again: the secret is gone
        expect(bob.locator('tr[data-token="ci"]')).to_be_visible()
        assert bob.locator("#new-token").count() == 0
        assert ci not in bob.content()
        read = make_token(bob, "ro", "read")
        assert deploy_with(stack, ci, crew.servers[0]).status_code == 202
        refused = problem(deploy_with(stack, read, crew.servers[0]), 403)
        assert refused["type"] == "urn:berth:problem:insufficient-scope"
        bob.goto("/team/tokens")
        row = bob.locator('tr[data-token="ci"]')
        expect(row.locator("td").nth(0)).to_have_text("deploy, read")
        expect(row.locator(".last-used")).not_to_have_text("never")
        expect(bob.locator('tr[data-token="ro"] .last-used')).not_to_have_text("never")
        assert_audited(
            stack,
            crew,
            {
                "action": "token.create",
                "email": crew.bob.email,
                "token": "dashboard",
                "target": "ci",
            },
            {
                "action": "token.create",
                "email": crew.bob.email,
                "token": "dashboard",
                "target": "ro",
            },
            {"action": "deploy", "outcome": "ok", "email": crew.bob.email, "token": "ci"},
            {"action": "deploy", "outcome": "denied", "email": crew.bob.email, "token": "ro"},
        )

    def test_a_server_limited_token_sees_one_server_and_revoking_stops_it(
        self, stack: BerthProcess, crew: Crew, pages: Any
    ) -> None:
        """A token limited to one server on the Tokens page lists that server alone (the
        other is a 404); revoked on the page, it is refused at once."""
        bob = pages(crew.bob)
        act_in(bob, crew.team_name)
        one = make_token(bob, "one-server", "read", [crew.servers[0]])
        with stack.api(one) as api:
            listed = [s["id"] for s in api.get("/api/agent/servers").json()["servers"]]
            assert listed == [crew.servers[0]]
            problem(api.get(f"/api/agent/servers/{crew.servers[1]}"), 404)
        bob.goto("/team/tokens")
        token_id = bob.locator('tr[data-token="one-server"] form').get_attribute("action")
        confirm(bob, f'form[action="{token_id}"] button', "Revoke token")
        expect(bob.locator(".notice")).to_contain_text("revoked")
        assert bob.locator('tr[data-token="one-server"]').count() == 0
        with stack.api(one) as api:
            problem(api.get("/api/agent/servers"), 401)
        assert_audited(
            stack,
            crew,
            {"action": "token.create", "email": crew.bob.email, "target": "one-server"},
            {"action": "token.revoke", "email": crew.bob.email, "target": "one-server"},
        )

    def test_the_form_names_every_wrong_field(self, crew: Crew, pages: Any) -> None:
        """A blank name, an unknown scope and a server id that is none: each beside its
        field, and no token made."""
        bob = pages(crew.bob)
        act_in(bob, crew.team_name)
        csrf = csrf_of(bob)
        answer = bob.request.post(
            "/team/tokens",
            form={"_csrf_token": csrf, "name": " ", "scope": "root", "servers": "nope"},
            headers={"Origin": bob.url.split("/team")[0]},
        )
        assert answer.status == 422
        text = answer.text()
        for name in ("name", "scope", "servers"):
            assert f'id="{name}-error" data-error-for="{name}">' in text, name


# --- members ---------------------------------------------------------------------------


def joined(stack: BerthProcess, crew: Crew, tag: str, role: str) -> tuple[str, str, str]:
    """A new user who joined the crew's team with ``role`` (through the API): their
    email, main token and user id."""
    ((email, main),) = stack.new_users(1, tag)
    with stack.api(crew.alice_main) as api:
        invited = api.post(
            f"/api/agent/teams/{crew.team}/invitations", json={"email": email, "role": role}
        ).json()
    with stack.api(main) as api:
        member = api.post(f"/api/agent/invitations/{invited['token']}/accept").json()
    return email, main, str(member["userId"])


class TestMembers:
    def test_a_removed_members_token_and_stream_stop(
        self, stack: BerthProcess, crew: Crew, pages: Any
    ) -> None:
        """Alice changes Carol's role, then removes her on the Members page: Carol's token
        for the team is refused on the very next call (within a second), and her open
        event streams — the API's with that token, and her dashboard's live region in the
        team — end within seconds (5 s promised); every change is in the audit log."""
        carol_email, carol_main, carol_id = joined(stack, crew, "carol", "viewer")
        with stack.api(carol_main) as api:
            carol = api.post(
                "/api/agent/tokens", json={"name": "watch", "teamId": crew.team, "scopes": ["read"]}
            ).json()["token"]
        queued = deploy_with(stack, crew.deployer_token, crew.servers[1])
        assert queued.status_code == 202, queued.text
        deployment = queued.json()["deployment"]["id"]
        api_client = httpx.Client(
            base_url=stack.url,
            headers={"Authorization": f"Bearer {carol}"},
            timeout=httpx.Timeout(30, read=60),
        )
        stream = EventStream(api_client, f"/api/agent/deployments/{deployment}/events").open()
        dashboard = browser_session(stack, carol_email, crew.team)
        live = f"/servers/{crew.servers[1]}/deployments/{deployment}/events"
        page_stream = EventStream(dashboard, live).open()
        alice = pages(crew.alice)
        act_in(alice, crew.team_name)
        row = alice.locator(f'tr[data-member="{carol_email}"]')
        row.get_by_label(f"Role of {carol_email}", exact=True).select_option("deployer")
        row.get_by_role("button", name=f"Change role of {carol_email}").click()
        expect(alice.locator(".notice")).to_contain_text("role was changed")
        expect(row.locator("[data-role]")).to_have_text("deployer")
        with stack.api(carol) as api:
            assert api.get("/api/agent/tokens/current").json()["role"] == "deployer"
        assert stream.ended_at is None  # still open while Carol is a member
        assert page_stream.ended_at is None
        confirm(alice, f"#remove-{carol_id}", "Remove member")
        expect(alice.locator(".notice")).to_contain_text("removed")
        removed_at = time.monotonic()
        with stack.api(carol) as api:
            problem(api.get("/api/agent/servers"), 401)
        assert time.monotonic() - removed_at < 1.0
        for reading in (stream, page_stream):
            reading.join(STREAM_DEADLINE)
            assert reading.ended_at is not None, f"{reading.path} is still open"
        api_client.close()
        dashboard.close()
        assert alice.locator(f'tr[data-member="{carol_email}"]').count() == 0
        assert_audited(
            stack,
            crew,
            {"action": "member.join", "email": carol_email},
            {"action": "token.create", "email": carol_email, "target": "watch"},
            {"action": "deploy", "outcome": "ok", "email": crew.alice.email, "token": "queue"},
            {"action": "member.role", "email": crew.alice.email, "target": carol_email},
            {"action": "member.remove", "email": crew.alice.email, "target": carol_email},
        )

    def test_an_admin_cannot_touch_an_owner(
        self, stack: BerthProcess, crew: Crew, browser: Any, pages: Any
    ) -> None:
        """An admin sees no control on an owner's row and cannot give the role owner; a
        forged form doing it is a 403 page, recorded as denied."""
        erin_email, erin_main, _ = joined(stack, crew, "erin", "admin")
        with stack.api(erin_main) as api:
            alice_id = next(
                m["userId"]
                for m in api.get(f"/api/agent/teams/{crew.team}/members").json()["members"]
                if m["email"] == crew.alice.email
            )
        erin = pages(sign_in(browser, stack, erin_email))
        act_in(erin, crew.team_name)
        owner_row = erin.locator(f'tr[data-member="{crew.alice.email}"]')
        assert owner_row.locator("form").count() == 0
        roles = erin.locator(f"#role-{crew.bob_id} option").all_inner_texts()
        assert roles == ["admin", "deployer", "viewer"]
        assert "owner" not in erin.locator("#invite-role option").all_inner_texts()
        answer = erin.request.post(
            f"/team/members/{alice_id}/role",
            form={"_csrf_token": csrf_of(erin), "role": "viewer"},
        )
        assert answer.status == 403
        assert "owner" in answer.text()
        assert_audited(
            stack,
            crew,
            {"action": "member.role", "outcome": "denied", "email": erin_email},
        )

    def test_a_personal_teams_owner_stays(self, crew: Crew, pages: Any) -> None:
        """In one's personal team one's own row offers nothing to change."""
        alice = pages(crew.alice)
        alice.goto("/team/members")
        switch(alice, "(personal)")
        expect(alice.locator(".tag", has_text="personal")).to_be_visible()
        row = alice.locator(f'tr[data-member="{crew.alice.email}"]')
        assert row.locator("form").count() == 0


# --- the team switcher -----------------------------------------------------------------


class TestTeamSwitcher:
    def test_every_page_acts_in_the_chosen_team(
        self, stack: BerthProcess, browser: Any, pages: Any
    ) -> None:
        """A user of one team has no switcher; a team made on the Members page adds one,
        and the server list follows the team chosen; a forged switch to another's team
        is a 404 and changes nothing."""
        ((email, main),) = stack.new_users(1, "switch")
        with stack.api(main) as api:
            mine = new_server(api, f"mine-{uuid.uuid4().hex[:6]}")
        page = pages(sign_in(browser, stack, email))
        page.goto("/servers")
        assert page.locator("#team-switcher").count() == 0
        expect(page.locator(f'tr[data-server-id="{mine["id"]}"]')).to_be_visible()
        page.goto("/team/members")
        name = f"side-{uuid.uuid4().hex[:6]}"
        page.get_by_label("Team name").fill(name)
        page.get_by_role("button", name="Make team").click()
        expect(page.get_by_role("heading", level=1)).to_contain_text(name)
        page.goto("/servers")
        expect(page.locator("#team-switch option:checked")).to_contain_text(name)
        assert page.locator(f'tr[data-server-id="{mine["id"]}"]').count() == 0
        stranger = stack.new_users(1, "stranger")[0][1]
        with stack.api(stranger) as api:
            theirs = api.get("/api/agent/teams").json()["teams"][0]["id"]
        answer = page.request.post(
            "/team/switch", form={"_csrf_token": csrf_of(page), "team": theirs}
        )
        assert answer.status == 404
        page.goto("/servers")
        switch(page, "(personal)")
        expect(page).to_have_url(re.compile(r"/servers\?done=team-switched$"))
        expect(page.locator(f'tr[data-server-id="{mine["id"]}"]')).to_be_visible()


# --- the audit log ---------------------------------------------------------------------


class TestAuditPage:
    def test_filters_and_pages(self, stack: BerthProcess, crew: Crew, pages: Any) -> None:
        """The Audit page filters by outcome, action and who, and pages 50 at a time."""
        with stack.api(crew.alice_main) as api:
            narrow = api.post(
                "/api/agent/tokens",
                json={"name": "narrow", "teamId": crew.team, "scopes": ["read"]},
            ).json()["token"]
        with stack.api(narrow) as api:
            for _ in range(55):  # refused calls: each one is an entry
                assert api.post("/api/agent/servers", json={"name": "x"}).status_code == 403
        alice = pages(crew.alice)
        act_in(alice, crew.team_name)
        alice.get_by_role("link", name="Audit log").click()
        form = alice.locator("#audit-filters")
        form.get_by_label("Outcome").select_option("denied")
        form.get_by_label("Action").fill("server.create")
        form.get_by_role("button", name="Filter").click()
        rows = alice.locator("#audit tbody tr")
        expect(rows).to_have_count(50)
        assert set(
            alice.locator("#audit tbody tr").evaluate_all(
                "rows => rows.map(r => r.dataset.action + ' ' + r.dataset.outcome)"
            )
        ) == {"server.create denied"}
        alice.get_by_role("link", name="Older entries").click()
        expect(rows).to_have_count(5)
        assert alice.locator("#older").count() == 0
        expect(alice.get_by_role("link", name="Newest")).to_be_visible()
        form.get_by_label("Outcome").select_option("")
        form.get_by_label("Action").fill("")
        form.get_by_label("Who (email)").fill(crew.bob.email.upper())
        form.get_by_role("button", name="Filter").click()
        expect(alice).to_have_url(re.compile(r"actor="))  # the filtered page, not the old one
        cells = alice.locator("#audit tbody tr td:nth-child(2)")
        expect(cells.first).to_contain_text(crew.bob.email)
        whos = cells.all_inner_texts()
        assert whos
        assert all(w.startswith(crew.bob.email) for w in whos)

    def test_it_is_for_admins_and_owners(self, stack: BerthProcess, crew: Crew, pages: Any) -> None:
        """A deployer has no Audit tab, and the page refuses them (403), recorded."""
        bob = pages(crew.bob)
        act_in(bob, crew.team_name)
        assert bob.get_by_role("link", name="Audit log").count() == 0
        bob.goto("/team/audit")
        expect(bob.get_by_role("heading", level=1)).to_have_text("Not allowed")
        assert_audited(
            stack,
            crew,
            {"action": "read.ListAudit", "outcome": "denied", "email": crew.bob.email},
        )
