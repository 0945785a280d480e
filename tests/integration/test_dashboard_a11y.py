"""Every dashboard page checked by axe-core (WCAG 2.0/2.1/2.2 A and AA and axe's best
practices) in Debian's chromium, at desktop width, phone width and in dark mode, against a
real ``berth serve --local`` (real SQLite, real dockerd, the echo image).

The pages are the list ``PAGES``: a name (also the screenshots' name) and how to reach the
page from a fresh browser context. A new page is one more line there. Each page is reached
once, at desktop width, then checked at desktop width, at phone width and in dark mode, and
photographed in each (``test_dashboard.shoot``: written only with ``BERTH_SCREENSHOTS``).

axe-core comes from npm at the version pinned in ``tests/integration/axe/package-lock.json``
(``scripts/dev test`` installs it with ``npm ci``); without it these tests skip (or fail
under ``BERTH_TESTS_REQUIRE_INFRA``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from deploy_support import (
    ECHO_V1,
    RUN,
    deploy,
    deployed,
    host_port,
    remove_built_images,
    remove_containers,
    server_of,
    wait_until,
)
from git_support import GitRepo, served_repo
from harness import BerthProcess, new_server, unique_email
from infra import unavailable
from oauth_support import authorize_url, pkce, register_client
from test_dashboard import (
    DESKTOP,
    ENV,
    PHONE,
    Account,
    api_token,
    expect,
    fill_a_broken_deploy_form,
    invited,
    launch_chromium,
    open_context,
    shoot,
    sign_up,
    watched,
)

AXE = Path(__file__).resolve().parent / "axe" / "node_modules" / "axe-core" / "axe.min.js"
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"]
PREFIX = f"a11y-{RUN}-"


@dataclass(frozen=True)
class Mode:
    name: str
    viewport: dict[str, int]
    color_scheme: str


MODES = [
    Mode("desktop", DESKTOP, "light"),
    Mode("phone", PHONE, "light"),
    Mode("dark", DESKTOP, "dark"),
]


@dataclass
class Site:
    """The running berth and what the pages need: accounts, servers, an app."""

    browser: Any
    stack: BerthProcess
    owner: Account
    token: str  # the owner's API token, for setting things up
    local_server: str
    pending_server: str
    offline_server: str
    installation: str  # an app deployed on the local server
    deployment: str  # its deployment
    repo: GitRepo  # a Git repository served on 127.0.0.1, which this berth may fetch

    def newcomer(self) -> Account:
        """A new account with nothing yet (each call: another one)."""
        return invited(self.browser, self.stack, "a11y-new")

    def invitation(self) -> str:
        return self.stack.invite_link(unique_email("a11y-invited"))

    def team_invitation(self) -> str:
        """The link of an invitation to the owner's personal team, for a new email."""
        with self.stack.api(self.token) as api:
            team = api.get("/api/agent/teams").json()["teams"][0]["id"]
            body = {"email": unique_email("a11y-joiner"), "role": "deployer"}
            made = api.post(f"/api/agent/teams/{team}/invitations", json=body)
        assert made.status_code == 201, made.text
        return str(made.json()["url"])


#: Who opens a page: the owner (servers, an app), nobody, or a new account (no servers).
OWNER, GUEST, NEWCOMER = "owner", "guest", "newcomer"


@dataclass(frozen=True)
class Visit:
    name: str
    who: str
    reach: Callable[[Any, Site], object]  # (page, site): brings the page to it


def add_server(page: Any, site: Site) -> None:
    page.goto("/servers/new")
    page.get_by_label("Name", exact=True).fill(f"{PREFIX}added-{uuid.uuid4().hex[:6]}")
    page.get_by_role("button", name="Add server").click()
    expect(page.locator("#install-command")).to_be_visible()


def deploy_errors(page: Any, site: Site) -> None:
    page.goto(f"/servers/{site.local_server}/deploy")
    fill_a_broken_deploy_form(page)
    page.locator("#deploy-form").get_by_role("button", name="Deploy").click()
    expect(page.locator("#port-error")).to_be_visible()


def deploy_git_errors(page: Any, site: Site) -> None:
    """The deploy form with its Git source chosen, and refused: errors beside its fields."""
    page.goto(f"/servers/{site.local_server}/deploy")
    page.get_by_label("Name", exact=True).fill(f"{PREFIX}git-bad")
    page.get_by_label("Build from a Git repository").check()
    page.get_by_label("Repository URL").fill("ftp://git.example.com/shop.git")
    page.get_by_label("Branch, tag or commit").fill("-x")
    page.get_by_label("Build arguments").fill("no equals sign")
    page.locator("#deploy-form").get_by_role("button", name="Deploy").click()
    expect(page.locator("#git_url-error")).to_be_visible()


def app_built(page: Any, site: Site) -> None:
    """The page of an app built from Git: its revision's commit, source and build log."""
    name = f"{PREFIX}built"
    port = host_port()
    site.repo.commit({"Dockerfile": f"FROM {ECHO_V1}\nENV BUILT=a11y\n"}, "a11y")
    with site.stack.api(site.token) as api:
        body = {
            "serverId": site.local_server,
            "name": name,
            "port": port,
            "env": {"PORT": str(port)},
            "build": {"git": {"url": site.repo.url, "ref": "main"}},
        }
        response = api.post(
            "/api/agent/docker/deploy", params={"wait": 120}, json=body, timeout=150
        )
    deployment, installation = deployed(response, "succeeded")
    page.goto(
        f"/servers/{site.local_server}/installations/{installation['id']}"
        f"?deployment={deployment['id']}#revision-{deployment['id']}"
    )
    page.locator(f"#build-log-{deployment['id']} summary").click()
    expect(page.locator("[data-build-log]")).to_be_visible()


def confirm_removal(page: Any, site: Site) -> None:
    """The confirmation page, as without JavaScript: the form posted without its dialog."""
    page.goto(f"/servers/{site.local_server}")
    form = page.locator(f'form[action$="/installations/{site.installation}/remove"]')
    form.evaluate("f => f.submit()")  # submit() skips the submit event, so the dialog
    expect(page.get_by_role("button", name="Remove app")).to_be_visible()


def remove_dialog(page: Any, site: Site) -> None:
    page.goto(f"/servers/{site.pending_server}")
    page.get_by_role("button", name="Remove server…").click()
    expect(page.get_by_role("dialog")).to_be_visible()


def wrong_password(page: Any, site: Site) -> None:
    page.goto("/login")
    page.get_by_label("Email").fill(site.owner.email)
    page.get_by_label("Password").fill("not the password")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_be_visible()


def token_shown(page: Any, site: Site) -> None:
    page.goto("/settings")
    page.get_by_role("button", name="Generate token").click()
    expect(page.locator("#new-token")).to_be_visible()
    # The picture shows a stand-in: a real token, even a throwaway one, is not published.
    page.locator("#new-token").evaluate("el => { el.value = 'berth_' + '•'.repeat(49); }")


def notification_added(page: Any, site: Site) -> None:
    """Settings → Notifications with a Slack notification just added (its secret shown
    once, here a stand-in) and a wrong URL's error shown by the next try."""
    page.goto("/settings#notifications")
    form = page.locator("#add-webhook")
    form.get_by_label("Webhook URL").fill("https://93.184.215.14/services/T0/B0/a11y")
    form.get_by_label("Format").select_option("slack")
    form.get_by_role("button", name="Add notification").click()
    expect(page.locator("#new-webhook-secret")).to_be_visible()
    page.locator("#new-webhook-secret").evaluate("el => { el.value = 'whsec_' + '•'.repeat(44); }")
    form.get_by_label("Webhook URL").fill("ftp://hooks.example.com")
    form.get_by_role("button", name="Add notification").click()
    expect(page.locator('[data-error-for="url"]')).to_be_visible()


def signup_errors(page: Any, site: Site) -> None:
    page.goto(site.invitation())
    page.get_by_label("Email").fill("not-an-email")
    page.get_by_label("Password", exact=True).fill("short")
    page.get_by_label("Password again").fill("other")
    page.get_by_role("button", name="Create account").click()
    expect(page.locator("#password_again-error")).to_be_visible()


def new_team(page: Any, site: Site) -> None:
    """A team made on the Members page: the visitor has two now, so the switcher shows."""
    page.goto("/team/members")
    page.get_by_label("Team name").fill(f"{PREFIX}team")
    page.get_by_role("button", name="Make team").click()
    expect(page.locator("#team-switcher")).to_be_visible()


def invitation_made(page: Any, site: Site) -> None:
    new_team(page, site)
    page.locator("#invite-form").get_by_label("Email").fill(unique_email("a11y-invitee"))
    page.get_by_role("button", name="Make invitation link").click()
    expect(page.locator("#invitation-url")).to_be_visible()


def team_token_shown(page: Any, site: Site) -> None:
    page.goto("/team/tokens")
    page.locator("#token-form").get_by_label("Name").fill("ci")
    page.get_by_role("button", name="Make token").click()
    expect(page.locator("#new-token")).to_be_visible()
    page.locator("#new-token").evaluate("el => { el.value = 'berth_' + '•'.repeat(49); }")


def team_token_errors(page: Any, site: Site) -> None:
    page.goto("/team/tokens")
    page.get_by_role("button", name="Make token").click()
    expect(page.locator("#name-error")).to_be_visible()


def oauth_consent(page: Any, site: Site) -> None:
    """An MCP client's authorization request, as the browser follows it to the consent page."""
    client = register_client(site.stack.url)
    _, challenge = pkce()
    page.goto(authorize_url(site.stack.url, client, challenge))
    expect(page.get_by_role("heading", level=1)).to_have_text("Connect Raw client to berth?")


def oauth_consent_errors(page: Any, site: Site) -> None:
    """The consent form sent for chosen servers with none checked: shown again, with why."""
    oauth_consent(page, site)
    page.get_by_label("Only the servers checked below", exact=False).check()
    page.get_by_role("button", name="Allow").click()
    expect(page.locator("#server_ids-error")).to_be_visible()


#: Every dashboard page: (name, who opens it, how to reach it). Add new pages here.
PAGES = [
    Visit("login", GUEST, lambda page, site: page.goto("/login")),
    Visit("login-error", GUEST, wrong_password),
    Visit("signup-closed", GUEST, lambda page, site: page.goto("/signup")),
    Visit("signup", GUEST, lambda page, site: page.goto(site.invitation())),
    Visit("signup-errors", GUEST, signup_errors),
    Visit("servers-empty", NEWCOMER, lambda page, site: page.goto("/servers")),
    Visit("servers", OWNER, lambda page, site: page.goto("/servers")),
    Visit("server-new", OWNER, lambda page, site: page.goto("/servers/new")),
    Visit("server-added", OWNER, add_server),
    Visit("server", OWNER, lambda page, site: page.goto(f"/servers/{site.local_server}")),
    Visit(
        "server-deployment",
        OWNER,
        lambda page, site: page.goto(f"/servers/{site.local_server}?deployment={site.deployment}"),
    ),
    Visit("remove-dialog", OWNER, remove_dialog),
    Visit("server-pending", OWNER, lambda page, site: page.goto(f"/servers/{site.pending_server}")),
    Visit("server-offline", OWNER, lambda page, site: page.goto(f"/servers/{site.offline_server}")),
    Visit("deploy", OWNER, lambda page, site: page.goto(f"/servers/{site.local_server}/deploy")),
    Visit("deploy-errors", OWNER, deploy_errors),
    Visit("deploy-git-errors", OWNER, deploy_git_errors),
    Visit(
        "app",
        OWNER,
        lambda page, site: page.goto(
            f"/servers/{site.local_server}/installations/{site.installation}"
        ),
    ),
    Visit("app-built", OWNER, app_built),
    Visit("confirm", OWNER, confirm_removal),
    Visit("settings", OWNER, lambda page, site: page.goto("/settings")),
    Visit("settings-token", NEWCOMER, token_shown),
    Visit("settings-notifications", NEWCOMER, notification_added),
    Visit("error-404", OWNER, lambda page, site: page.goto(f"/servers/{uuid.uuid4()}")),
    Visit("team-members", NEWCOMER, new_team),
    Visit("team-invited", NEWCOMER, invitation_made),
    Visit("team-tokens", OWNER, lambda page, site: page.goto("/team/tokens")),
    Visit("team-token-shown", NEWCOMER, team_token_shown),
    Visit("team-token-errors", NEWCOMER, team_token_errors),
    Visit("team-audit", OWNER, lambda page, site: page.goto("/team/audit")),
    Visit("invitation", GUEST, lambda page, site: page.goto(site.team_invitation())),
    Visit("invitation-other", OWNER, lambda page, site: page.goto(site.team_invitation())),
    Visit("oauth-consent", OWNER, oauth_consent),
    Visit("oauth-consent-errors", OWNER, oauth_consent_errors),
]


# --- fixtures --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's chromium, headless, driven by Playwright; axe-core at hand."""
    if not AXE.exists():
        unavailable(f"axe-core is not installed ({AXE}): run scripts/dev test, or npm ci there")
    with launch_chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def site(
    tmp_path_factory: pytest.TempPathFactory,
    docker_ready: None,
    echo_image: str,
    browser: Any,
) -> Iterator[Site]:
    """A fresh ``berth serve --local`` whose first account owns this machine (online), a
    pending server, an offline one, an app deployed on this machine, and a Git repository
    it may build from (on 127.0.0.1)."""
    env = {**ENV, "BERTH_ALLOW_PRIVATE_TARGETS": "1"}
    stack = BerthProcess(tmp_path_factory.mktemp("a11y"), env=env, args=["--local"])
    stack.start()
    try:
        with served_repo(tmp_path_factory.mktemp("a11y-git")) as repo:
            yield _populate(browser, stack, echo_image, repo)
    finally:
        stack.stop()
        remove_containers(PREFIX)
        remove_built_images(PREFIX)


def _populate(browser: Any, stack: BerthProcess, echo_image: str, repo: GitRepo) -> Site:
    context = open_context(browser, stack)
    page = context.new_page()
    page.goto(stack.setup_link())  # the link `berth serve` printed: the code filled in
    email = unique_email("a11y-owner")
    sign_up(page, email)
    row = page.locator("#servers tr", has=page.locator(".tag", has_text="this machine"))
    expect(row.locator("[data-state]")).to_have_attribute("data-state", "online", timeout=30_000)
    local_server = row.get_attribute("data-server-id")
    assert local_server
    owner = Account(email, context.storage_state())
    context.close()

    token = api_token(stack, email)
    api = stack.api(token)
    pending = new_server(api, f"{PREFIX}pending", enrolled=False)
    offline = new_server(api, f"{PREFIX}far")  # at 127.0.0.1:1, where nothing answers
    deployment, installation = deployed(
        deploy(api, local_server, f"{PREFIX}web", host_port(), image=echo_image), "succeeded"
    )
    wait_until(
        lambda: server_of(api, offline["id"]),
        lambda s: s["status"] == "offline",
        30,
        "the unreachable server offline",
    )
    api.close()
    return Site(
        browser=browser,
        stack=stack,
        owner=owner,
        token=token,
        local_server=local_server,
        pending_server=pending["id"],
        offline_server=offline["id"],
        installation=installation["id"],
        deployment=deployment["id"],
        repo=repo,
    )


def axe_violations(page: Any) -> list[dict[str, Any]]:
    """What axe-core finds wrong on the page as it is now."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    result = page.evaluate(
        """tags => axe.run(document, {runOnly: {type: "tag", values: tags}})
        .then(r => r.violations.map(v => ({
            id: v.id, impact: v.impact, help: v.help,
            nodes: v.nodes.map(n => ({target: n.target, summary: n.failureSummary})),
        })))""",
        AXE_TAGS,
    )
    return list(result)


def describe(violations: list[dict[str, Any]]) -> str:
    lines = []
    for v in violations:
        lines.append(f"{v['id']} ({v['impact']}): {v['help']}")
        for node in v["nodes"]:
            summary = " ".join(str(node["summary"] or "").split())
            lines.append(f"    {node['target']}  {summary[:300]}")
    return "\n".join(lines)


# --- the checks ------------------------------------------------------------------------


@pytest.mark.parametrize("visit", PAGES, ids=lambda v: v.name)
def test_page_has_no_accessibility_violations(site: Site, visit: Visit) -> None:
    """axe-core finds no WCAG 2.2 AA or best-practice violation on the page, at desktop
    width, at phone width and in dark mode."""
    account = {OWNER: lambda: site.owner, GUEST: lambda: None, NEWCOMER: site.newcomer}
    signed_in = account[visit.who]()
    context = site.browser.new_context(
        base_url=site.stack.url,
        storage_state=signed_in.state if signed_in else None,
        viewport=DESKTOP,
        bypass_csp=True,  # axe is injected as an inline script; test_dashboard checks the CSP
    )
    context.set_default_timeout(15_000)
    page, problems = watched(context)
    found = []
    try:
        visit.reach(page, site)  # once: the page as reached, looked at in every mode
        page.wait_for_load_state("networkidle")
        for mode in MODES:
            page.set_viewport_size(mode.viewport)
            page.emulate_media(color_scheme=mode.color_scheme)
            assert page.evaluate("matchMedia('(prefers-color-scheme: dark)').matches") == (
                mode.color_scheme == "dark"
            )
            violations = axe_violations(page)
            if violations:
                found.append(f"{visit.name} at {mode.name}:\n{describe(violations)}")
        shoot(page, visit.name)
    finally:
        context.close()
    assert not found, "\n".join(found)
    assert not problems, problems


def test_the_first_account_page_has_no_accessibility_violations(
    browser: Any, tmp_path: Path
) -> None:
    """A fresh berth's sign-up page (the setup code's field, filled in by the printed
    link) and its refusal without the code: no axe-core violation in any mode."""
    fresh = BerthProcess(tmp_path / "data", env=dict(ENV)).start()
    try:
        for mode in MODES:
            context = browser.new_context(
                base_url=fresh.url,
                viewport=mode.viewport,
                color_scheme=mode.color_scheme,
                bypass_csp=True,
            )
            page, problems = watched(context)
            try:
                page.goto(fresh.setup_link())
                expect(page.get_by_label("Setup code")).to_have_value(fresh.setup_code())
                violations = axe_violations(page)
                assert not violations, f"signup-first at {mode.name}:\n{describe(violations)}"
                if mode.name == "desktop":
                    # The picture shows a stand-in: even a throwaway code is not published.
                    page.locator("#invite").evaluate(
                        "el => { el.value = 'berth_setup_' + '•'.repeat(49); }"
                    )
                    shoot(page, "signup-first")
                    page.set_viewport_size(mode.viewport)
                    page.emulate_media(color_scheme=mode.color_scheme)
                page.get_by_label("Setup code").fill("")
                page.get_by_role("button", name="Create account").click()
                expect(page.locator("#invite-error")).to_be_visible()
                violations = axe_violations(page)
                assert not violations, f"signup-no-code at {mode.name}:\n{describe(violations)}"
            finally:
                context.close()
            assert not problems, problems
    finally:
        fresh.stop()


def test_add_server_button_stands_clear_of_the_table(site: Site) -> None:
    """On the server list the "Add server" button has room between it and the top bar
    above and the table below, at desktop width, phone width and the narrowest phone
    (issue 15: it touched an edge)."""
    context = open_context(site.browser, site.stack, site.owner)
    page = context.new_page()
    try:
        page.goto("/servers")
        for size in (DESKTOP, PHONE, {"width": 320, "height": 640}):
            page.set_viewport_size(size)
            button = page.get_by_role("link", name="Add server").bounding_box()
            topbar = page.locator("header.topbar").bounding_box()
            table = page.locator(".table-wrap").bounding_box()
            assert button is not None
            assert topbar is not None
            assert table is not None
            above = button["y"] - (topbar["y"] + topbar["height"])
            below = table["y"] - (button["y"] + button["height"])
            assert above >= 12, f"{above}px between the top bar and the button at {size}"
            assert below >= 12, f"{below}px between the button and the table at {size}"
    finally:
        context.close()
