"""The dashboard in a real browser: Debian's chromium driven by Playwright against a real
``berth serve --local`` (real SQLite, real dockerd, the echo image).

Covers the issue's acceptance tests — sign-up, the API token (generate, copy, use,
regenerate), deploying from the form and watching it succeed without a reload, CSRF,
another user's server — and the dashboard's promises: throttled sign-ins, sign-up
closed after the first account, the Content-Security-Policy and no inline script, no
secret in any page. ``shoot`` photographs a page at desktop and phone widths and in dark
mode (each picture must stay small); only with ``BERTH_SCREENSHOTS=<dir>`` set are the
pictures written, into that directory (``docs/screenshots`` regenerates the committed
ones): a test run never rewrites a file of the checkout. ``test_dashboard_a11y.py``
calls it for every page it checks.
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from berth.core import tokens
from deploy_support import (
    RUN,
    assert_no_errors_logged,
    deploy,
    deployed,
    host_port,
    remove_containers,
    wait_until,
)
from harness import HOST_KEY, PASSWORD, BerthProcess, unique_email
from infra import InfraUnavailable, Sshd, install_script_sshd_block, unavailable

playwright_api = pytest.importorskip("playwright.sync_api")
Browser = playwright_api.Browser
BrowserContext = playwright_api.BrowserContext
Page = playwright_api.Page
expect = playwright_api.expect

#: Debian's headless build of Chromium (the same engine; what Playwright itself runs for
#: headless tests): a third of the full browser's CPU per page here. ``BERTH_TEST_CHROMIUM``
#: names another, e.g. ``/usr/bin/chromium`` (decision record 2026-11-28-c).
CHROMIUM = os.environ.get("BERTH_TEST_CHROMIUM", "/usr/bin/chromium-headless-shell")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
#: Where ``shoot`` writes its pictures: nowhere unless asked (``BERTH_SCREENSHOTS``).
SHOTS = Path(os.environ["BERTH_SCREENSHOTS"]) if os.environ.get("BERTH_SCREENSHOTS") else None
PREFIX = f"dash-{RUN}-"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)
ENV = {
    "BERTH_MONITOR_SECONDS": "0.5",
    "BERTH_HEALTH_TIMEOUT": "20",
    "BERTH_DEPLOY_RATE_LIMIT": "1000",
    "BERTH_LOGIN_FAILURES_PER_EMAIL": "3",
    "BERTH_LOGIN_FAILURES_PER_ADDRESS": "100",
}
NOT_FOUND = "There is nothing here: this page does not exist, or it is not yours."
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\ssrc=)[^>]*>", re.IGNORECASE)
INLINE_HANDLER = re.compile(r"<[^>]+\son[a-z]+\s*=", re.IGNORECASE)
INLINE_STYLE = re.compile(r"<[^>]+\sstyle\s*=", re.IGNORECASE)
ASSET = re.compile(r'<(?:script|link|img)\b[^>]*?\s(?:src|href)="([^"]*)"', re.IGNORECASE)

expect.set_options(timeout=15_000)


@dataclass
class Account:
    email: str
    state: dict[str, Any]  # Playwright storage state: the signed-in session cookie


# --- fixtures --------------------------------------------------------------------------


@contextmanager
def launch_chromium() -> Iterator[Any]:
    """Debian's chromium, headless, driven by Playwright (its own download is not used)."""
    if not Path(CHROMIUM).exists():
        unavailable(f"{CHROMIUM} is not installed (apt-get install chromium-headless-shell)")
    with playwright_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Debian's chromium for this module's tests."""
    with launch_chromium() as browser:
        yield browser


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, docker_ready: None, echo_image: str
) -> Iterator[BerthProcess]:
    """A fresh ``berth serve --local``: no account yet; fast monitor; low sign-in limits."""
    yield from serve_dashboard(tmp_path_factory.mktemp("dashboard"), ENV)


def serve_dashboard(data_dir: Path, env: dict[str, str]) -> Iterator[BerthProcess]:
    """For a fixture: a fresh ``berth serve --local`` on ``data_dir`` with ``env``; at the
    end it stops, the containers named ``PREFIX…`` go, and it must have logged no error."""
    process = BerthProcess(data_dir, env=dict(env), args=["--local"])
    process.start()
    try:
        yield process
    finally:
        process.stop()
        remove_containers(PREFIX)
    assert_no_errors_logged(process)


def open_context(
    browser: Any,
    stack: BerthProcess,
    account: Account | None = None,
    *,
    javascript: bool = True,
) -> Any:
    context = browser.new_context(
        base_url=stack.url,
        storage_state=account.state if account else None,
        java_script_enabled=javascript,
        viewport=DESKTOP,
    )
    context.set_default_timeout(15_000)
    return context


def watched(context: Any) -> tuple[Any, list[str]]:
    """A page of ``context`` and the list its console errors and CSP reports go to."""
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"pageerror: {exc}"))

    def console(message: Any) -> None:
        text = message.text
        if "Content Security Policy" in text or "Refused to" in text:
            problems.append(f"csp: {text}")
        elif message.type == "error" and "status of 4" not in text:
            problems.append(f"console: {text}")

    page.on("console", console)
    return page, problems


#: Notes, as the first /servers page changes, "empty" when it says "No servers yet" and
#: each server badge's state.
FIRST_PAGE_RECORDER = """
window.__seen = [];
const note = () => {
  const main = document.querySelector("main");
  if (main && main.textContent.includes("No servers yet")) window.__seen.push("empty");
  for (const b of document.querySelectorAll("#servers [data-state]")) {
    window.__seen.push(b.dataset.state);
  }
};
const all = { subtree: true, childList: true, characterData: true };
new MutationObserver(note).observe(document, all);
document.addEventListener("DOMContentLoaded", note);
"""
FIRST_RUN: list[str] = []  # what the owner's first /servers page showed, in order


@pytest.fixture(scope="module")
def owner(chromium: Any, stack: BerthProcess) -> Account:
    """The first account, signed up in the browser on the fresh install."""
    context = open_context(chromium, stack)
    context.add_init_script(FIRST_PAGE_RECORDER)
    page, problems = watched(context)
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/signup$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Create the first account")
    # The README's first run: open the link `berth serve` printed; it fills the code in.
    page.goto(stack.setup_link())
    expect(page.get_by_label("Setup code")).to_have_value(stack.setup_code())
    email = unique_email("owner")
    sign_up(page, email)
    expect(page.get_by_role("heading", level=1)).to_have_text("Servers")
    # What the first page showed until this machine was online (test_first_run_…).
    badge = page.locator("#servers [data-state]").first
    expect(badge).to_have_attribute("data-state", "online", timeout=30_000)
    FIRST_RUN.extend(page.evaluate("window.__seen"))
    state = context.storage_state()
    context.close()
    assert not problems, problems
    return Account(email, state)


@pytest.fixture
def owner_page(chromium: Any, stack: BerthProcess, owner: Account) -> Iterator[Any]:
    """A page signed in as the owner; fails the test on a console error or CSP report."""
    context = open_context(chromium, stack, owner)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=stack.url)
    page, problems = watched(context)
    yield page
    context.close()
    assert not problems, problems


@pytest.fixture(scope="module")
def local_server(chromium: Any, stack: BerthProcess, owner: Account) -> str:
    """The id of this machine's server, which the first account owns."""
    context = open_context(chromium, stack, owner)
    page = context.new_page()

    def find() -> str | None:
        page.goto("/servers")
        row = page.locator("tr", has=page.locator(".tag", has_text="this machine"))
        return row.get_attribute("data-server-id") if row.count() else None

    server_id = wait_until(find, bool, 15, "the local server is listed")
    context.close()
    assert server_id is not None
    return server_id


def sign_up(page: Any, email: str) -> None:
    """Fill the sign-up form open in ``page`` and send it; it lands on the server list."""
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password", exact=True).fill(PASSWORD)
    page.get_by_label("Password again").fill(PASSWORD)
    page.get_by_role("button", name="Create account").click()
    expect(page).to_have_url(re.compile(r"/servers$"))


def invited(chromium: Any, stack: BerthProcess, tag: str) -> Account:
    """A new account, signed up in the browser through an invitation link."""
    email = unique_email(tag)
    context = open_context(chromium, stack)
    page = context.new_page()
    page.goto(stack.invite_link(email))
    expect(page.get_by_role("heading", level=1)).to_have_text("Accept your invitation")
    sign_up(page, email)
    state = context.storage_state()
    context.close()
    return Account(email, state)


def api_token(stack: BerthProcess, email: str) -> str:
    return stack.token_for(email)


def api_get(stack: BerthProcess, path: str, token: str) -> httpx.Response:
    return httpx.get(f"{stack.url}{path}", headers={"Authorization": f"Bearer {token}"}, timeout=30)


def _fingerprint(key: str, tmp: Path) -> str:
    """The key's fingerprint as `ssh-keygen -lf` prints it."""
    path = tmp / "key.pub"
    path.write_text(key + "\n")
    out = subprocess.run(["ssh-keygen", "-lf", str(path)], check=True, capture_output=True)
    return out.stdout.decode().split()[1]


def csrf_of(page: Any) -> str:
    value = page.locator('input[name="_csrf_token"]').first.get_attribute("value")
    assert value
    return str(value)


def shoot(page: Any, name: str) -> None:
    """Photograph the page at desktop and phone widths and in dark mode (desktop width,
    ``prefers-color-scheme: dark``) into ``SHOTS`` as ``<name>-<look>.png``, each under
    400 KB -- when ``BERTH_SCREENSHOTS`` names a directory; else do nothing (the local
    server's page lists every container of the Engine: how long it is depends on who else
    uses it). Leaves the page at desktop width, light."""
    if SHOTS is None:
        return
    SHOTS.mkdir(parents=True, exist_ok=True)
    looks = (("desktop", DESKTOP, "light"), ("phone", PHONE, "light"), ("dark", DESKTOP, "dark"))
    for label, size, scheme in looks:
        page.set_viewport_size(size)
        page.emulate_media(color_scheme=scheme)
        path = SHOTS / f"{name}-{label}.png"
        page.screenshot(
            path=str(path),
            full_page=True,
            animations="disabled",
            caret="hide",
        )
        assert path.stat().st_size < 400_000, f"{path.name} is {path.stat().st_size} bytes"
    page.set_viewport_size(DESKTOP)
    page.emulate_media(color_scheme="light")


def deploy_in_browser(
    page: Any, server_id: str, name: str, port: int, image: str, env: dict[str, str]
) -> str:
    """Fill the deploy form and submit it; returns the new deployment's id."""
    page.goto(f"/servers/{server_id}")
    page.get_by_role("link", name="Deploy an app").click()
    expect(page).to_have_url(re.compile(rf"/servers/{server_id}/deploy$"))
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Image").fill(image)
    page.get_by_label("Port", exact=True).fill(str(port))
    for i, (key, value) in enumerate(env.items()):
        if i >= page.locator("[data-env-row]").count():
            page.get_by_role("button", name="Add variable").click()
        page.locator('input[name="env_key"]').nth(i).fill(key)
        page.locator('textarea[name="env_value"]').nth(i).fill(value)
    page.locator("#deploy-form").get_by_role("button", name="Deploy").click()
    expect(page).to_have_url(re.compile(rf"/servers/{server_id}\?deployment="))
    found = re.search(r"deployment=([0-9a-f-]{36})", page.url)
    assert found, page.url
    return found[1]


def fill_a_broken_deploy_form(page: Any) -> None:
    """Fill the deploy form open in ``page`` with a broken rule in every field but Image's
    tag (missing) and the env value (``typed-value``, which must not come back)."""
    page.get_by_label("Name", exact=True).fill("x")
    page.get_by_label("Image").fill("nginx")
    page.get_by_label("Port", exact=True).fill("70000")
    page.get_by_label("Domain").fill("not a domain")
    page.locator('input[name="env_key"]').first.fill("1BAD")
    page.locator('textarea[name="env_value"]').first.fill("typed-value")
    page.get_by_label("Volumes").fill("/srv/data:/data\n../etc:/etc-copy")


def wait_succeeded(page: Any, deployment_id: str, timeout: float = 60_000) -> None:
    """Wait (bounded) for the deployment's badge to show a final state; it must be
    ``succeeded`` (else the failure names the deployment's events). On the server page it
    is a deployment, on the app page (where a Redeploy returns) a revision."""
    entry = page.locator(f"#deployment-{deployment_id}, #revision-{deployment_id}")
    badge = entry.locator("summary .badge")
    expect(badge).to_have_text(re.compile(r"succeeded|failed|timed out|canceled"), timeout=timeout)
    assert badge.inner_text() == "succeeded", entry.inner_text()


# --- sign-up and the API token ---------------------------------------------------------


class TestSignUp:
    def test_first_account_owns_this_machine(self, owner_page: Any, local_server: str) -> None:
        """The first sign-up (fixture ``owner``) lands on a server list with this machine."""
        owner_page.goto("/servers")
        row = owner_page.locator(f'tr[data-server-id="{local_server}"]')
        expect(row.locator(".badge")).to_have_text("online")
        expect(row).to_contain_text("this machine")

    def test_first_run_lists_this_machine_at_once(self, owner: Account) -> None:
        """Right after the first sign-up the server list already has this machine: never
        "No servers yet", never "offline" while berth has not tried it yet ("checking"),
        then online."""
        assert FIRST_RUN, "the first page recorded nothing"
        assert "empty" not in FIRST_RUN, FIRST_RUN
        assert "offline" not in FIRST_RUN, FIRST_RUN
        assert FIRST_RUN[-1] == "online", FIRST_RUN

    def test_sign_up_is_closed_after_the_first_account(
        self, chromium: Any, stack: BerthProcess, owner: Account
    ) -> None:
        """Without an invitation (or open sign-up), a second sign-up is refused: 403."""
        context = open_context(chromium, stack)
        page, problems = watched(context)
        response = page.goto("/signup")
        assert response is not None
        assert response.status == 403
        expect(page.get_by_role("heading", level=1)).to_have_text("Sign-up is closed")
        expect(page.locator('form[action="/signup"]')).to_have_count(0)
        csrf = next(c["value"] for c in context.cookies() if c["name"] == "berth_csrf")
        email = unique_email("intruder")
        posted = context.request.post(
            "/signup",
            form={
                "_csrf_token": csrf,
                "email": email,
                "password": PASSWORD,
                "password_again": PASSWORD,
                "invite": "",
            },
        )
        assert posted.status == 403
        assert "Sign-up is closed" in posted.text()
        page.goto("/login")
        expect(page.get_by_text("Accounts are created by invitation")).to_be_visible()
        expect(page.get_by_role("link", name="Create an account")).to_have_count(0)
        page.get_by_label("Email").fill(email)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("alert")).to_have_text("Wrong email or password.")
        context.close()
        assert not problems, problems

    def test_sign_up_shows_every_error_at_once(self, chromium: Any, stack: BerthProcess) -> None:
        """A bad email, a short password and a second password that differs are all
        reported on the first try, each beside its field; what was typed in the email
        stays; the invitation is not used up."""
        email = unique_email("errors")
        context = open_context(chromium, stack)
        page, problems = watched(context)
        page.goto(stack.invite_link(email))
        page.get_by_label("Email").fill("not-an-email")
        page.get_by_label("Password", exact=True).fill("short")
        page.get_by_label("Password again").fill("other")
        page.get_by_role("button", name="Create account").click()
        expect(page.locator("#email-error")).to_have_text(re.compile("email address"))
        expect(page.locator("#password-error")).to_have_text(re.compile("8 to 1024"))
        expect(page.locator("#password_again-error")).to_have_text("The two passwords differ.")
        for field in ("email", "password", "password_again"):
            expect(page.locator(f"#{field}")).to_have_attribute("aria-invalid", "true")
        expect(page.get_by_label("Email")).to_have_value("not-an-email")
        # Nothing was used up: the same invitation signs up once the fields are right.
        page.get_by_label("Email").fill(email)
        page.get_by_label("Password", exact=True).fill(PASSWORD)
        page.get_by_label("Password again").fill(PASSWORD)
        page.get_by_role("button", name="Create account").click()
        expect(page).to_have_url(re.compile(r"/servers$"))
        context.close()
        assert not problems, problems


class TestApiToken:
    def test_a_new_tokens_page_reloads_as_the_settings(
        self, chromium: Any, stack: BerthProcess, owner: Account
    ) -> None:
        """After generating a token the address is /settings: reloading shows the settings
        (the token not again, no regeneration asked); /settings/token opened directly is
        the settings page too, never a bare 405."""
        account = invited(chromium, stack, "reload")
        context = open_context(chromium, stack, account)
        page, problems = watched(context)
        page.goto("/settings")
        page.get_by_role("button", name="Generate token").click()
        shown = page.locator("#new-token").input_value()
        expect(page).to_have_url(re.compile(r"/settings$"))
        page.reload()
        expect(page.locator("#new-token")).to_have_count(0)
        expect(page.locator("#token-prefix")).to_have_text(f"{shown[:10]}…")
        expect(page.get_by_role("dialog")).to_have_count(0)
        response = page.goto("/settings/token")
        assert response is not None
        assert response.status == 200
        expect(page).to_have_url(re.compile(r"/settings$"))
        expect(page.get_by_role("heading", level=1)).to_have_text("Settings")
        context.close()
        assert not problems, problems

    def test_new_user_generates_copies_and_uses_a_token(
        self, chromium: Any, stack: BerthProcess
    ) -> None:
        """A new user signs up, opens Settings, generates a token, copies it with the Copy
        button and uses it against the API; the dashboard then shows its first characters
        and when it was last used, and never the token again."""
        account = invited(chromium, stack, "token")
        context = open_context(chromium, stack, account)
        context.grant_permissions(["clipboard-read", "clipboard-write"], origin=stack.url)
        page, problems = watched(context)
        page.goto("/servers")
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Settings").click()
        expect(page).to_have_url(re.compile(r"/settings$"))
        expect(page.locator("#api-token")).to_contain_text("You have no API token yet.")
        page.get_by_role("button", name="Generate token").click()
        shown = page.locator("#new-token")
        expect(shown).to_be_visible()
        copy = page.locator('button[data-copy="#new-token"]')
        expect(copy).to_have_text("Copy")
        copy.click()
        expect(copy).to_have_text("Copied")
        token = page.evaluate("navigator.clipboard.readText()")
        assert token == shown.input_value()
        assert tokens.is_well_formed(token)

        response = api_get(stack, "/api/agent/servers", token)
        assert response.status_code == 200, response.text
        assert response.json() == {"servers": []}

        page.goto("/settings")
        expect(page.locator("#token-prefix")).to_have_text(token[:10] + "…")
        expect(page.locator("#token-last-used time")).to_have_text(re.compile(r"just now|s ago"))
        assert token not in page.content()
        assert page.locator("#new-token").count() == 0
        context.close()
        assert not problems, problems

    def test_regenerate_revokes_the_old_token(self, owner_page: Any, stack: BerthProcess) -> None:
        """After Regenerate (confirmed in a dialog) the old token gets 401 and the new works."""
        page = owner_page
        page.goto("/settings")
        if page.get_by_role("button", name="Generate token").count():
            page.get_by_role("button", name="Generate token").click()
        else:
            page.get_by_role("button", name="Regenerate token…").click()
            page.get_by_role("dialog").get_by_role("button", name="Regenerate token").click()
        old = page.locator("#new-token").input_value()
        assert api_get(stack, "/api/agent/servers", old).status_code == 200

        page.get_by_role("button", name="Regenerate token…").click()
        dialog = page.get_by_role("dialog")
        expect(dialog).to_contain_text("stops working at once")
        dialog.get_by_role("button", name="Cancel").click()
        expect(dialog).to_have_count(0)
        assert api_get(stack, "/api/agent/servers", old).status_code == 200

        page.get_by_role("button", name="Regenerate token…").click()
        page.get_by_role("dialog").get_by_role("button", name="Regenerate token").click()
        new = page.locator("#new-token").input_value()
        assert new != old
        revoked = api_get(stack, "/api/agent/servers", old)
        assert revoked.status_code == 401
        assert revoked.headers["www-authenticate"] == "Bearer"
        assert api_get(stack, "/api/agent/servers", new).status_code == 200
        expect(page.locator("#token-prefix")).to_have_text(new[:10] + "…")


class TestNotifications:
    def test_add_list_and_remove_a_slack_notification(
        self, chromium: Any, stack: BerthProcess, owner_page: Any
    ) -> None:
        """Settings → Notifications: a bad URL and no event are refused at their fields, a
        Slack webhook is added (its secret shown once), listed with its format (and only
        its host) and reaches the API with format slack; Remove (confirmed) forgets it."""
        account = invited(chromium, stack, "notifications")
        token = api_token(stack, account.email)
        context = open_context(chromium, stack, account)
        page, problems = watched(context)
        page.goto("/settings")
        section = page.locator("#notifications")
        expect(section).to_contain_text("No notifications yet")
        form = page.locator("#add-webhook")
        form.get_by_label("Webhook URL").fill("ftp://hooks.example.com/x")
        for box in form.get_by_role("checkbox").all():
            box.uncheck()
        form.get_by_role("button", name="Add notification").click()
        expect(page.locator('[data-error-for="url"]')).to_contain_text("http or https")
        expect(page.locator('[data-error-for="events"]')).to_contain_text("at least one")

        url = "https://93.184.215.14/services/T0/B0/s3cr3t"
        form.get_by_label("Webhook URL").fill(url)
        form.get_by_label("Format").select_option("slack")
        form.get_by_label("A deployment failed or timed out").check()
        form.get_by_role("button", name="Add notification").click()
        expect(page.locator("#new-webhook-secret")).to_have_value(re.compile("^whsec_"))
        row = section.locator("tr[data-webhook]")
        expect(row).to_have_count(1)
        expect(row.locator("[data-format]")).to_have_text("slack")
        expect(row).to_contain_text("deployment.failed")
        assert "s3cr3t" not in row.inner_text()
        listed = api_get(stack, "/api/agent/webhooks", token).json()["webhooks"]
        assert [(w["format"], w["events"]) for w in listed] == [("slack", ["deployment.failed"])]

        row.get_by_role("button", name=re.compile("^Remove the notification")).click()
        dialog = page.get_by_role("dialog")
        dialog.get_by_role("button", name="Remove notification").click()
        expect(page.locator(".notice")).to_contain_text("notification was removed")
        expect(section).to_contain_text("No notifications yet")
        assert api_get(stack, "/api/agent/webhooks", token).json() == {"webhooks": []}
        context.close()
        assert not problems, problems


class TestRegistries:
    def test_add_list_and_remove_a_registry(self, chromium: Any, stack: BerthProcess) -> None:
        """Settings → Registries: a bad host is refused at its field (the password is never
        put back in the page), a good one is listed without its password and reaches the
        API, and Remove (confirmed in a dialog) forgets it."""
        account = invited(chromium, stack, "registries")
        token = api_token(stack, account.email)
        context = open_context(chromium, stack, account)
        page, problems = watched(context)
        secret = f"registry-pw-{uuid.uuid4().hex}"
        page.goto("/settings")
        section = page.locator("#registries")
        expect(section).to_contain_text("No registries yet")
        form = page.locator("#add-registry")
        form.get_by_label("Host").fill("https://registry.example.com/team")
        form.get_by_label("User name").fill("deploy-bot")
        form.get_by_label("Password or access token").fill(secret)
        form.get_by_role("button", name="Add registry").click()
        expect(page.locator('[data-error-for="host"]')).to_contain_text("without a scheme")
        expect(form.get_by_label("User name")).to_have_value("deploy-bot")
        expect(form.get_by_label("Password or access token")).to_have_value("")
        assert secret not in page.content()

        form.get_by_label("Host").fill("Registry.Example.com:5000")
        form.get_by_label("Password or access token").fill(secret)
        form.get_by_role("button", name="Add registry").click()
        expect(page.locator(".notice")).to_contain_text("The registry was saved")
        row = page.locator('tr[data-registry="registry.example.com:5000"]')
        expect(row).to_contain_text("deploy-bot")
        assert secret not in page.content()
        listed = api_get(stack, "/api/agent/registries", token).json()["registries"]
        assert [(r["host"], r["username"]) for r in listed] == [
            ("registry.example.com:5000", "deploy-bot")
        ]

        form.get_by_label("Host").fill("registry.example.com:5000")
        form.get_by_label("User name").fill("someone-else")
        form.get_by_label("Password or access token").fill("another")
        form.get_by_role("button", name="Add registry").click()
        expect(page.locator('[data-error-for="host"]')).to_contain_text("already have")

        row.get_by_role("button", name="Remove registry.example.com:5000").click()
        dialog = page.get_by_role("dialog")
        expect(dialog).to_contain_text("pull without credentials")
        dialog.get_by_role("button", name="Remove registry").click()
        expect(page.locator(".notice")).to_contain_text("credentials were removed")
        expect(section).to_contain_text("No registries yet")
        assert api_get(stack, "/api/agent/registries", token).json() == {"registries": []}
        context.close()
        assert not problems, problems

    def test_another_users_registry_cannot_be_removed(
        self, chromium: Any, stack: BerthProcess, owner_page: Any
    ) -> None:
        """Posting the removal of another user's registry is a 404 page; it stays saved."""
        other = invited(chromium, stack, "registries-other")
        token = api_token(stack, other.email)
        saved = httpx.post(
            f"{stack.url}/api/agent/registries",
            headers={"Authorization": f"Bearer {token}"},
            json={"host": "other.example.com", "username": "u", "password": "pw"},
            timeout=30,
        ).json()
        page = owner_page
        page.goto("/settings")
        response = page.request.post(
            f"/settings/registries/{saved['id']}/delete",
            form={"_csrf_token": csrf_of(page), "confirm": "yes"},
            headers={"Origin": stack.url},
        )
        assert response.status == 404
        assert len(api_get(stack, "/api/agent/registries", token).json()["registries"]) == 1


# --- servers and deploys ---------------------------------------------------------------


class TestDeploy:
    def test_deploy_from_the_form_succeeds_without_a_reload(
        self,
        owner_page: Any,
        stack: BerthProcess,
        owner: Account,
        local_server: str,
        echo_image: str,
    ) -> None:
        """Deploying the echo image from the form shows ``succeeded`` and the container in
        the list as they happen, without reloading, and Resources measures the app at once;
        the API agrees; no env value is shown."""
        page = owner_page
        name, port, secret = f"{PREFIX}web", host_port(), f"s3cr3t-{uuid.uuid4().hex}"
        deployment_id = deploy_in_browser(
            page, local_server, name, port, echo_image, {"PORT": str(port), "SECRET": secret}
        )
        page.evaluate("window.__berthNoReload = true")
        entry = page.locator(f"#deployment-{deployment_id}")
        expect(entry).to_have_attribute("open", "")
        wait_succeeded(page, deployment_id)
        # Resources measures the new app as soon as its deployment ends, not at its next
        # 15-second refresh (issue 28).
        expect(page.locator(f'#usage tr[data-usage="{name}"] [data-label="CPU"]')).to_be_visible(
            timeout=5_000
        )
        for step in ("create", "start", "health"):
            expect(entry.locator(".events .step", has_text=step).first).to_be_visible()
        container = page.locator(f'#containers tr[data-container="{name}"]')
        expect(container.locator(".badge")).to_have_text("running")
        expect(container).to_contain_text(f":{port} → {port}/tcp")
        app = page.locator(f'#installations tr[data-installation="{name}"]')
        expect(app.locator(".badge")).to_have_text("running")
        expect(app.get_by_role("link", name=f"127.0.0.1:{port}")).to_have_attribute(
            "href", f"http://127.0.0.1:{port}"
        )
        assert page.evaluate("window.__berthNoReload") is True, "the page reloaded"
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=5).status_code == 200

        token = api_token(stack, owner.email)
        listed = api_get(stack, f"/api/agent/install?serverId={local_server}", token).json()
        mine = next(i for i in listed["installations"] if i["name"] == name)
        assert mine["status"] == "running"
        assert mine["lastDeployment"]["id"] == deployment_id
        assert mine["envKeys"] == ["PORT", "SECRET"]

        request = page.context.request
        for path in (
            f"/servers/{local_server}",
            f"/servers/{local_server}/live",
            f"/servers/{local_server}/deploy?installation={mine['id']}",
            f"/servers/{local_server}/installations/{mine['id']}/logs",
        ):
            html = request.get(path).text()
            assert secret not in html, path
            assert token not in html, path
        assert secret not in page.content()

    def test_the_server_page_follows_a_deployment_by_its_event_stream(
        self,
        chromium: Any,
        owner_page: Any,
        owner: Account,
        stack: BerthProcess,
        local_server: str,
        echo_image: str,
    ) -> None:
        """While a deployment runs, the server page holds its event stream (an
        ``EventSource`` on the dashboard's own, session-authenticated route) and refreshes
        on its steps; the stream replays the deployment's steps and ends with its state.
        Signed out it is a bare 401; another user gets the 404 of a missing deployment."""
        page = owner_page
        streams: list[str] = []
        page.on(
            "request",
            lambda r: streams.append(r.url) if r.resource_type == "eventsource" else None,
        )
        name, port = f"{PREFIX}sse", host_port()
        # The app listens after 3 s: the deployment still runs when the page loads.
        env = {"PORT": str(port), "BERTH_TEST_DELAY": "3"}
        deployment_id = deploy_in_browser(page, local_server, name, port, echo_image, env)
        wait_succeeded(page, deployment_id)
        path = f"/servers/{local_server}/deployments/{deployment_id}/events"
        assert f"{stack.url}{path}" in streams, streams

        replay = page.context.request.get(path)
        assert replay.status == 200
        assert replay.headers["content-type"].startswith("text/event-stream")
        body = replay.text()
        assert "event: step" in body
        assert 'event: end\r\ndata: {"state":"succeeded"}' in body
        resumed = page.context.request.get(path, headers={"Last-Event-ID": "9" * 30})
        assert resumed.status == 422

        anonymous = httpx.get(f"{stack.url}{path}", timeout=10)
        assert anonymous.status_code == 401
        stranger = open_context(chromium, stack, invited(chromium, stack, "sse-stranger"))
        assert stranger.request.get(path).status == 404
        stranger.close()

    def test_the_server_page_shows_what_apps_use(
        self, owner_page: Any, local_server: str, echo_image: str
    ) -> None:
        """Resources: each running app's CPU and memory as Docker's stats sample them, and
        Docker's disk on the server, loaded after the page (no reload)."""
        page = owner_page
        name, port = f"{PREFIX}usage", host_port()
        deployment_id = deploy_in_browser(
            page, local_server, name, port, echo_image, {"PORT": str(port)}
        )
        wait_succeeded(page, deployment_id)
        page.reload()
        row = page.locator(f'#app-usage tr[data-usage="{name}"]')
        expect(row.locator('[data-label="CPU"]')).to_have_text(re.compile(r"^\d+\.\d %$"))
        expect(row.locator('[data-label="Memory"]')).to_have_text(re.compile(r"\d (B|KiB|MiB)$"))
        disk_total = re.compile(r"\d+(\.\d)? (KiB|MiB|GiB)")
        expect(page.locator("[data-disk-total]")).to_have_text(disk_total)
        expect(page.locator("[data-usage-pending]")).to_have_count(0)

    def test_redeploy_keeps_unchanged_env_values(
        self,
        owner_page: Any,
        stack: BerthProcess,
        owner: Account,
        local_server: str,
        echo_image: str,
    ) -> None:
        """The redeploy form lists env keys as unchanged; left so, their values stay."""
        page = owner_page
        name, port, secret = f"{PREFIX}keep", host_port(), f"kept-{uuid.uuid4().hex}"
        first = deploy_in_browser(
            page, local_server, name, port, echo_image, {"PORT": str(port), "SECRET": secret}
        )
        wait_succeeded(page, first)
        row = page.locator(f'#installations tr[data-installation="{name}"]')
        row.get_by_role("link", name="Redeploy").click()
        expect(page.get_by_label("Name", exact=True)).to_have_value(name)
        expect(page.get_by_label("Port", exact=True)).to_have_value(str(port))
        expect(page.locator('textarea[name="env_value"]').first).to_have_attribute(
            "placeholder", "unchanged — type to replace"
        )
        assert secret not in page.content()
        page.locator("#deploy-form").get_by_role("button", name="Deploy").click()
        expect(page).to_have_url(re.compile(r"\?deployment="))
        second = re.search(r"deployment=([0-9a-f-]{36})", page.url)
        assert second
        wait_succeeded(page, second[1])
        environ = httpx.get(f"http://127.0.0.1:{port}/env", timeout=5).content.split(b"\0")
        assert f"SECRET={secret}".encode() in environ

    def test_redeploy_after_a_failure_shows_the_settings_that_run(
        self,
        owner_page: Any,
        stack: BerthProcess,
        owner: Account,
        local_server: str,
        echo_image: str,
    ) -> None:
        """After a redeploy fails (here: a port the app does not listen on), Redeploy
        pre-fills the version that still runs, says why, and its kept env values are that
        version's: deploying the form as shown succeeds."""
        page = owner_page
        name, port, secret = f"{PREFIX}refill", host_port(), f"runs-{uuid.uuid4().hex}"
        first = deploy_in_browser(
            page, local_server, name, port, echo_image, {"PORT": str(port), "SECRET": secret}
        )
        wait_succeeded(page, first)
        token = api_token(stack, owner.email)
        broken = httpx.post(
            f"{stack.url}/api/agent/docker/deploy",
            params={"wait": 60},
            headers={"Authorization": f"Bearer {token}"},
            json={
                "serverId": local_server,
                "name": name,
                "image": echo_image,
                "port": host_port(),  # the app still listens on the first port: unhealthy
                "env": {"PORT": str(port), "OTHER": "1"},
            },
            timeout=90,
        )
        assert broken.json()["deployment"]["state"] == "failed", broken.text
        page.goto(f"/servers/{local_server}")
        row = page.locator(f'#installations tr[data-installation="{name}"]')
        row.get_by_role("link", name="Redeploy").click()
        expect(page.locator("[data-notice]")).to_contain_text("did not succeed")
        expect(page.get_by_label("Port", exact=True)).to_have_value(str(port))
        keys = page.locator('input[name="env_key"]')
        expect(keys.nth(0)).to_have_value("PORT")
        expect(keys.nth(1)).to_have_value("SECRET")
        assert "OTHER" not in [keys.nth(i).input_value() for i in range(keys.count())]
        assert page.evaluate("document.activeElement.id") == "image"
        page.locator("#deploy-form").get_by_role("button", name="Deploy").click()
        expect(page).to_have_url(re.compile(r"\?deployment="))
        again = re.search(r"deployment=([0-9a-f-]{36})", page.url)
        assert again
        wait_succeeded(page, again[1])
        environ = httpx.get(f"http://127.0.0.1:{port}/env", timeout=5).content.split(b"\0")
        assert f"SECRET={secret}".encode() in environ

    def test_a_deploy_loads_the_server_page_once_and_focuses_the_deployment(
        self, owner_page: Any, local_server: str, echo_image: str
    ) -> None:
        """The form's own submit navigates once (no page fetched for nothing first), focus
        lands on the new deployment; the form starts on Name; each env row's Remove button
        names its variable."""
        page = owner_page
        page.goto(f"/servers/{local_server}/deploy")
        assert page.evaluate("document.activeElement.id") == "name"
        page.locator('input[name="env_key"]').first.fill("GREETING")
        remove = page.locator("[data-remove-row]").first
        expect(remove).to_have_attribute("aria-label", "Remove variable GREETING")
        loads: list[str] = []
        server_page = f"/servers/{local_server}?deployment="
        page.on("request", lambda r: loads.append(r.url) if server_page in r.url else None)
        name, port = f"{PREFIX}once", host_port()
        deployment_id = deploy_in_browser(
            page, local_server, name, port, echo_image, {"PORT": str(port)}
        )
        wait_succeeded(page, deployment_id)
        assert len(loads) == 1, loads
        focused = page.evaluate("document.activeElement.closest('details')?.id")
        assert focused == f"deployment-{deployment_id}"

    def test_roll_back_stop_and_start_from_the_server_page(
        self,
        owner_page: Any,
        stack: BerthProcess,
        owner: Account,
        local_server: str,
        echo_image: str,
    ) -> None:
        """A past succeeded deployment has a "Roll back to this version" button that deploys
        it again; Stop and Start act on the app's container; the API agrees."""
        page = owner_page
        name, port = f"{PREFIX}roll", host_port()
        first = deploy_in_browser(page, local_server, name, port, echo_image, {"PORT": str(port)})
        wait_succeeded(page, first)
        second = deploy_in_browser(
            page, local_server, name, port, echo_image, {"PORT": str(port), "MARK": "two"}
        )
        wait_succeeded(page, second)
        expect(page.locator(f"#rollback-{second}")).to_have_count(0)  # the one serving
        page.locator(f"#deployment-{first} > summary").click()
        page.locator(f"#rollback-{first}").click()
        expect(page).to_have_url(re.compile(r"\?deployment="))
        third = re.search(r"deployment=([0-9a-f-]{36})", page.url)
        assert third
        assert third[1] not in (first, second)
        wait_succeeded(page, third[1])
        environ = httpx.get(f"http://127.0.0.1:{port}/env", timeout=5).content.split(b"\0")
        assert not any(entry.startswith(b"MARK=") for entry in environ)

        token = api_token(stack, owner.email)
        rolled = api_get(stack, f"/api/agent/deployments/{third[1]}", token).json()
        assert rolled["rollbackOf"] == first
        row = page.locator(f'#installations tr[data-installation="{name}"]')
        row.get_by_role("button", name=f"Stop {name}").click()
        expect(page.locator(".notice")).to_contain_text("stopped")
        expect(row.locator(".badge")).to_have_text("stopped")
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://127.0.0.1:{port}/", timeout=2)
        row.get_by_role("button", name=f"Start {name}").click()
        expect(page.locator(".notice")).to_contain_text("started")
        expect(row.locator(".badge")).to_have_text("running")
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=5).status_code == 200

    def test_form_errors_show_beside_their_fields(self, owner_page: Any, local_server: str) -> None:
        """Every broken rule is shown beside its field, with the API's messages, and what
        was typed stays in the form; nothing is deployed."""
        page = owner_page
        page.goto(f"/servers/{local_server}/deploy")
        fill_a_broken_deploy_form(page)
        with page.expect_response(lambda r: r.request.method == "POST") as posted:
            page.locator("#deploy-form").get_by_role("button", name="Deploy").click()
        assert posted.value.status == 422
        assert "typed-value" not in posted.value.text()
        expect(page.locator("#name-error")).to_contain_text("one-character container name")
        expect(page.locator("#image-error")).to_contain_text("A tag is required")
        expect(page.locator("#port-error")).to_have_text("Expected an integer from 1 to 65535.")
        expect(page.locator("#domain-error")).to_contain_text("Expected a DNS name")
        expect(page.locator("[data-env-row] .field-error").first).to_contain_text("1BAD")
        expect(page.locator("#volumes-error")).to_contain_text("Line 2:")
        expect(page.get_by_label("Port", exact=True)).to_have_attribute("aria-invalid", "true")
        expect(page.locator('textarea[name="env_value"]').first).to_have_value("typed-value")
        expect(page).to_have_url(re.compile(r"/deploy$"))

    def test_form_errors_without_javascript(
        self, chromium: Any, stack: BerthProcess, owner: Account, local_server: str
    ) -> None:
        """Without JavaScript the form posts normally and comes back with the same errors;
        env values typed are not sent back."""
        context = open_context(chromium, stack, owner, javascript=False)
        page = context.new_page()
        page.goto(f"/servers/{local_server}/deploy")
        page.get_by_label("Name", exact=True).fill("web")
        page.get_by_label("Image").fill("web:1")
        page.get_by_label("Port", exact=True).fill("0")
        page.locator('input[name="env_key"]').first.fill("TOKEN")
        page.locator('textarea[name="env_value"]').first.fill("do-not-echo")
        page.locator("#deploy-form").get_by_role("button", name="Deploy").click()
        expect(page.locator("#port-error")).to_have_text("Expected an integer from 1 to 65535.")
        expect(page.locator('input[name="env_key"]').first).to_have_value("TOKEN")
        assert "do-not-echo" not in page.content()
        context.close()


class TestServers:
    def test_the_list_says_why_a_server_is_offline_and_how_it_is_reached(
        self, owner_page: Any, stack: BerthProcess, owner: Account
    ) -> None:
        """An SSH server berth cannot reach shows its reason under the badge and its
        address as berth reaches it (user, host, port); a pending server's page says its
        address is known once it enrolls instead of ``berth@—``."""
        token = api_token(stack, owner.email)
        headers = {"Authorization": f"Bearer {token}"}
        name = f"{PREFIX}far-{uuid.uuid4().hex[:6]}"
        body = {"name": name, "address": "127.0.0.1", "sshPort": 1, "hostKeys": [HOST_KEY]}
        created = httpx.post(f"{stack.url}/api/agent/servers", json=body, headers=headers)
        assert created.status_code == 201, created.text
        far = created.json()["id"]
        wait_until(
            lambda: api_get(stack, f"/api/agent/servers/{far}", token).json(),
            lambda s: s["status"] == "offline" and s.get("statusDetail"),
            30,
            "the unreachable server offline with a reason",
        )
        page = owner_page
        page.goto("/servers")
        row = page.locator(f'#servers tr[data-server-id="{far}"]')
        expect(row.locator('[data-label="Address"]')).to_have_text("berth@127.0.0.1:1")
        expect(row.locator("[data-status-detail]")).to_contain_text("Unreachable")
        pending = httpx.post(
            f"{stack.url}/api/agent/servers", json={"name": f"{name}-new"}, headers=headers
        )
        assert pending.status_code == 201, pending.text
        pending_id = pending.json()["id"]
        page.goto(f"/servers/{pending_id}")
        expect(page.locator("[data-address]")).to_have_text("known once it enrolls")

    def test_the_server_page_changes_a_server_in_place(
        self, owner_page: Any, stack: BerthProcess, owner: Account
    ) -> None:
        """The server page's edit form changes the name, address and SSH port through the
        API's command: a wrong port is named at its field, nothing changes; then the change
        is saved and the page (and the API) show it, under the same id."""
        token = api_token(stack, owner.email)
        headers = {"Authorization": f"Bearer {token}"}
        name = f"{PREFIX}edit-{uuid.uuid4().hex[:6]}"
        created = httpx.post(f"{stack.url}/api/agent/servers", json={"name": name}, headers=headers)
        assert created.status_code == 201, created.text
        sid = created.json()["id"]
        page = owner_page
        page.goto(f"/servers/{sid}")
        form = page.locator("#edit-server")
        form.get_by_label("SSH port").fill("0")
        form.get_by_role("button", name="Save changes").click()
        expect(page.locator("#edit-ssh_port-error")).to_be_visible()
        expect(page.locator("#edit-ssh_port")).to_have_attribute("aria-invalid", "true")
        assert api_get(stack, f"/api/agent/servers/{sid}", token).json()["sshPort"] == 22
        form = page.locator("#edit-server")
        form.get_by_label("Name").fill(f"{name}-renamed")
        form.get_by_label("Address").fill("198.51.100.20")
        form.get_by_label("SSH port").fill("2222")
        form.get_by_role("button", name="Save changes").click()
        expect(page).to_have_url(re.compile(r"\?done=server-changed$"))
        expect(page.get_by_role("heading", level=1)).to_have_text(f"{name}-renamed")
        stored = api_get(stack, f"/api/agent/servers/{sid}", token).json()
        assert (stored["name"], stored["address"], stored["sshPort"]) == (
            f"{name}-renamed",
            "198.51.100.20",
            2222,
        )

    def test_add_server_shows_the_install_command(
        self, owner_page: Any, stack: BerthProcess
    ) -> None:
        """ "Add server" shows the install one-liner once, with a Copy button; the server is
        pending; removing it (confirmed) forgets it, as the API then says."""
        page = owner_page
        page.goto("/servers")
        page.get_by_role("link", name="Add server").click()
        page.get_by_label("Name", exact=True).fill(f"{PREFIX}pending")
        page.get_by_role("button", name="Add server").click()
        command = page.locator("#install-command").input_value()
        assert re.fullmatch(
            rf"curl -fsSL {re.escape(stack.url)}/api/deploy \| "
            r"BERTH_ENROLL_TOKEN=berth_enroll_[0-9A-Za-z]{49} sh",
            command,
        ), command
        page.get_by_role("button", name="Copy").click()
        assert page.evaluate("navigator.clipboard.readText()") == command
        expect(page.locator("#server-status")).to_have_attribute("data-status", "pending")
        enrollment = command.split("BERTH_ENROLL_TOKEN=", 1)[1].split(" ", 1)[0]
        page.get_by_role("link", name=re.compile("^Go to ")).click()
        assert enrollment not in page.content()
        server_id = page.url.rstrip("/").rsplit("/", 1)[1]

        page.get_by_role("button", name="Remove server…").click()
        dialog = page.get_by_role("dialog")
        expect(dialog).to_contain_text("keep running")
        dialog.get_by_role("button", name="Remove server").click()
        expect(page).to_have_url(re.compile(r"/servers\?done=server-deleted$"))
        expect(page.get_by_role("status")).to_contain_text("containers keep running")
        expect(page.locator(f'tr[data-server-id="{server_id}"]')).to_have_count(0)

    def test_reloading_after_add_server_adds_nothing(
        self, owner_page: Any, stack: BerthProcess, owner: Account
    ) -> None:
        """The page that shows a new server's install command stands at that server's
        address: reloading it shows the server's page, and no second server is added."""
        page = owner_page
        name = f"{PREFIX}once-{uuid.uuid4().hex[:6]}"
        page.goto("/servers/new")
        page.get_by_label("Name", exact=True).fill(name)
        page.get_by_role("button", name="Add server").click()
        expect(page.locator("#install-command")).to_be_visible()
        expect(page).to_have_url(re.compile(r"/servers/[0-9a-f-]{36}$"))
        page.reload()
        expect(page.get_by_role("heading", level=1)).to_have_text(name)
        expect(page.locator("#install-command")).to_have_count(0)
        token = api_token(stack, owner.email)
        servers = api_get(stack, "/api/agent/servers", token).json()["servers"]
        assert [s["name"] for s in servers].count(name) == 1

    def test_server_switches_online_when_it_enrolls(self, owner_page: Any, sshd: Any) -> None:
        """A server added with its host key turns online on the page, without a reload,
        once berth's key is authorized on it."""
        page = owner_page
        page.goto("/servers/new")
        page.get_by_label("Name", exact=True).fill(f"{PREFIX}ssh")
        page.get_by_label("Address").fill("127.0.0.1")
        page.get_by_text("Connect over SSH yourself").click()
        page.get_by_label("SSH port").fill(str(sshd.port))
        page.get_by_label("SSH user").fill("berth")
        page.get_by_label("SSH host keys").fill(sshd.host_public_key)
        page.get_by_role("button", name="Add server").click()
        line = page.locator("#authorized-keys-line").input_value()
        assert line.startswith(
            'restrict,port-forwarding,permitlisten="127.0.0.1:1",command="/bin/false" ssh-ed25519 '
        )
        # The sshd block to add by hand: its command prints what the install script adds.
        block = page.locator("#sshd-block-command").input_value()
        fetch, _, target = block.partition(" > ")
        assert target == "/etc/ssh/sshd_config.d/00-berth.conf && systemctl reload ssh"
        printed = subprocess.run(["sh", "-c", fetch], capture_output=True, text=True, check=True)
        assert printed.stdout == install_script_sshd_block()
        page.evaluate("window.__berthNoReload = true")
        expect(page.locator("#server-status")).not_to_have_attribute("data-status", "online")
        sshd.authorize(line.split(" ", 1)[1])
        expect(page.locator("#server-status")).to_have_attribute(
            "data-status", "online", timeout=20_000
        )
        expect(page.locator("#server-status")).to_contain_text("Docker")
        assert page.evaluate("window.__berthNoReload") is True
        page.get_by_role("link", name=re.compile("^Go to ")).click()
        page.get_by_role("button", name="Remove server…").click()
        page.get_by_role("dialog").get_by_role("button", name="Remove server").click()
        expect(page).to_have_url(re.compile(r"/servers\?done=server-deleted$"))

    def test_a_changed_host_key_shows_both_fingerprints_and_is_re_pinned(
        self, owner_page: Any, tmp_path: Path
    ) -> None:
        """A server whose sshd comes back with another key shows the pinned and offered
        fingerprints; a wrong fingerprint is refused beside its field; the right one
        re-pins and the server turns online again."""
        try:
            own = Sshd().start()
        except InfraUnavailable as exc:
            unavailable(str(exc))
        page = owner_page
        try:
            page.goto("/servers/new")
            page.get_by_label("Name", exact=True).fill(f"{PREFIX}rekey")
            page.get_by_label("Address").fill("127.0.0.1")
            page.get_by_text("Connect over SSH yourself").click()
            page.get_by_label("SSH port").fill(str(own.port))
            page.get_by_label("SSH user").fill("berth")
            page.get_by_label("SSH host keys").fill(own.host_public_key)
            page.get_by_role("button", name="Add server").click()
            line = page.locator("#authorized-keys-line").input_value()
            own.authorize(line.split(" ", 1)[1])
            expect(page.locator("#server-status")).to_have_attribute(
                "data-status", "online", timeout=20_000
            )
            page.get_by_role("link", name=re.compile("^Go to ")).click()
            server_url = page.url
            old_key = own.host_public_key
            own.halt()
            new_key = own.new_host_key()
            own.start()

            def shown() -> bool:
                page.goto(server_url)
                return page.locator("#host-key-change").count() == 1

            wait_until(shown, bool, 30, "the host-key change shown")
            section = page.locator("#host-key-change")
            expect(section.locator('[data-fingerprint="pinned"]')).to_have_text(
                _fingerprint(old_key, tmp_path)
            )
            expect(section.locator('[data-fingerprint="offered"]')).to_have_text(
                _fingerprint(new_key, tmp_path)
            )
            expect(section.get_by_label(re.compile("^New host public keys"))).to_have_value(
                re.compile("^" + re.escape(" ".join(new_key.split()[:2])))
            )

            section.get_by_label("Fingerprint you checked on the server").fill(
                _fingerprint(old_key, tmp_path)
            )
            section.get_by_role("button", name="Trust the new key").click()
            expect(page.locator("#fingerprint-error")).to_be_visible()
            expect(page.locator("#fingerprint-error")).to_contain_text("not that of the key")
            expect(page.locator("#fingerprint")).to_have_attribute("aria-invalid", "true")

            page.locator("#host-key-change").get_by_label(
                "Fingerprint you checked on the server"
            ).fill(_fingerprint(new_key, tmp_path))
            page.locator("#host-key-change").get_by_role("button", name="Trust the new key").click()
            expect(page).to_have_url(re.compile(r"\?done=host-keys-repinned$"))
            expect(page.get_by_role("status").first).to_contain_text("new host key is pinned")
            expect(page.locator("#host-key-change")).to_have_count(0)
            expect(page.locator("#live .badge-server-online")).to_have_count(1, timeout=20_000)
            page.get_by_role("button", name="Remove server…").click()
            page.get_by_role("dialog").get_by_role("button", name="Remove server").click()
            expect(page).to_have_url(re.compile(r"/servers\?done=server-deleted$"))
        finally:
            own.stop()

    def test_without_javascript_pages_read_and_confirmations_still_ask(
        self,
        chromium: Any,
        stack: BerthProcess,
        owner: Account,
        local_server: str,
        echo_image: str,
    ) -> None:
        """With JavaScript off the server page lists apps, containers and deployments,
        logs read, and removing an app asks on a page of its own before doing it."""
        name, port = f"{PREFIX}nojs", host_port()
        token = api_token(stack, owner.email)
        with stack.api(token) as api:
            response = deploy(api, local_server, name, port, image=echo_image)
        installation_id = deployed(response, "succeeded")[1]["id"]
        context = open_context(chromium, stack, owner, javascript=False)
        page = context.new_page()
        page.goto(f"/servers/{local_server}")
        row = page.locator(f'#installations tr[data-installation="{name}"]')
        expect(row.locator(".badge")).to_have_text("running")
        expect(page.locator(f'#containers tr[data-container="{name}"]')).to_be_visible()
        expect(page.locator("details.deployment").first).to_be_visible()

        row.get_by_role("link", name="Logs").click()
        expect(page.locator("pre.logs")).to_contain_text(f"listening on {port}")

        page.goto(f"/servers/{local_server}")
        row.get_by_role("button", name="Remove…").click()
        expect(page.get_by_role("heading", level=1)).to_have_text(f"Remove {name}?")
        page.get_by_role("button", name="Remove app").click()
        expect(page).to_have_url(re.compile(r"\?done=installation-removed$"))
        expect(page.locator(f'tr[data-installation="{name}"]')).to_have_count(0)
        gone = api_get(stack, f"/api/agent/installations/{installation_id}", token)
        assert gone.status_code == 200  # its history is kept
        assert gone.json()["status"] == "removed"
        context.close()


# --- security --------------------------------------------------------------------------


class TestSecurity:
    def test_a_form_post_without_the_csrf_token_is_refused(
        self, owner_page: Any, stack: BerthProcess, local_server: str
    ) -> None:
        """POSTs without this session's CSRF token, with another's, or from another origin
        are refused with 403 and change nothing."""
        page = owner_page
        page.goto("/settings")
        prefix = page.locator("#token-prefix")
        before = prefix.inner_text() if prefix.count() else None
        csrf = csrf_of(page)
        request = page.context.request
        stranger = httpx.get(f"{stack.url}/login", timeout=10).cookies["berth_csrf"]
        refused = [
            request.post("/settings/token", form={"confirm": "yes"}),
            request.post("/settings/token", form={"confirm": "yes", "_csrf_token": "x" * 43}),
            # Another visitor's token, valid with that visitor's own cookie.
            request.post("/settings/token", form={"confirm": "yes", "_csrf_token": stranger}),
            request.post(
                "/settings/token",
                form={"confirm": "yes", "_csrf_token": csrf},
                headers={"Origin": "https://evil.example"},
            ),
            request.post(
                f"/servers/{local_server}/deploy",
                form={"name": f"{PREFIX}csrf", "image": "x:1", "port": "9"},
            ),
            request.post(f"/servers/{local_server}/delete", form={"confirm": "yes"}),
            request.post("/logout", form={}),
        ]
        for response in refused:
            assert response.status == 403, response.url
            assert "expired or did not come from this page" in response.text()
            assert response.headers["content-security-policy"] == CSP
        page.goto("/settings")
        assert (prefix.inner_text() if prefix.count() else None) == before
        page.goto(f"/servers/{local_server}")
        expect(page.locator(f'tr[data-installation="{PREFIX}csrf"]')).to_have_count(0)
        anonymous = httpx.post(
            f"{stack.url}/login",
            data={"email": "a@example.com", "password": PASSWORD},
            timeout=10,
        )
        assert anonymous.status_code == 403

    def test_another_users_server_page_is_a_404(
        self, chromium: Any, stack: BerthProcess, owner: Account, local_server: str
    ) -> None:
        """Another user's server — its page, fragments, forms and actions — is the same 404
        page as a server that does not exist, and nothing happens to it."""
        stranger = invited(chromium, stack, "stranger")
        context = open_context(chromium, stack, stranger)
        page, problems = watched(context)
        page.goto("/servers")
        expect(page.get_by_role("heading", name="No servers yet")).to_be_visible()
        csrf = csrf_of(page)
        missing = str(uuid.uuid4())
        for server_id in (local_server, missing):
            response = page.goto(f"/servers/{server_id}")
            assert response is not None
            assert response.status == 404
            expect(page.locator("[data-error-detail]")).to_have_text(NOT_FOUND)
            for path in ("live", "status", "deploy"):
                got = context.request.get(f"/servers/{server_id}/{path}")
                assert got.status == 404, path
            for path, form in (
                ("deploy", {"name": f"{PREFIX}x", "image": "x:1"}),
                ("delete", {"confirm": "yes"}),
            ):
                posted = context.request.post(
                    f"/servers/{server_id}/{path}", form={**form, "_csrf_token": csrf}
                )
                assert posted.status == 404, path
                assert NOT_FOUND in posted.text()
        context.close()
        assert not problems, problems
        owner_context = open_context(chromium, stack, owner)
        assert owner_context.request.get(f"/servers/{local_server}").status == 200
        owner_context.close()

    def test_sign_ins_are_throttled(self, chromium: Any, stack: BerthProcess) -> None:
        """After the failure limit for an email from one address, even the right password
        waits there (429)."""
        account = invited(chromium, stack, "throttled")
        context = open_context(chromium, stack)
        page, _ = watched(context)
        page.goto("/login")

        def sign_in(password: str) -> Any:
            page.get_by_label("Email").fill(account.email)
            page.get_by_label("Password").fill(password)
            with page.expect_response(lambda r: r.request.method == "POST") as info:
                page.get_by_role("button", name="Sign in").click()
            return info.value

        for _ in range(3):
            assert sign_in("not the password").status == 400
            expect(page.get_by_role("alert")).to_have_text("Wrong email or password.")
        throttled = sign_in(PASSWORD)
        assert throttled.status == 429
        assert int(throttled.headers["retry-after"]) > 0
        expect(page.get_by_role("alert")).to_contain_text("Too many failed sign-ins")
        expect(page).to_have_url(re.compile(r"/login$"))
        context.close()

    def test_sign_out_ends_the_session(self, chromium: Any, stack: BerthProcess) -> None:
        """Signing out deletes the session: its cookie no longer opens any page."""
        account = invited(chromium, stack, "leaver")
        context = open_context(chromium, stack, account)
        page = context.new_page()
        page.goto("/servers")
        page.get_by_role("button", name="Sign out").click()
        expect(page).to_have_url(re.compile(r"/login\?done=signed-out$"))
        expect(page.get_by_role("status")).to_have_text("You are signed out.")
        context.close()
        replay = open_context(chromium, stack, account)  # the old cookie, replayed
        page = replay.new_page()
        page.goto("/settings")
        expect(page).to_have_url(re.compile(r"/login\?next=%2Fsettings$"))
        replay.close()

    def test_pages_send_the_csp_and_carry_no_inline_script(
        self, owner_page: Any, stack: BerthProcess, local_server: str
    ) -> None:
        """Every page has the CSP and framing headers, no inline script, handler or style,
        and the session cookie is HttpOnly, SameSite=Lax, Path=/."""
        page = owner_page
        paths = [
            "/servers",
            "/servers/new",
            f"/servers/{local_server}",
            f"/servers/{local_server}/deploy",
            "/settings",
        ]
        for path in paths:
            response = page.goto(path)
            assert response is not None
            assert response.status == 200, path
            headers = response.headers
            assert headers["content-security-policy"] == CSP, path
            assert headers["x-frame-options"] == "DENY"
            assert headers["referrer-policy"] == "same-origin"
            assert headers["cache-control"] == "no-store"
            html = response.text()
            assert not INLINE_SCRIPT.search(html), path
            assert not INLINE_HANDLER.search(html), path
            assert not INLINE_STYLE.search(html), path
            for asset in ASSET.findall(html):  # nothing from another origin, no CDN
                assert asset.startswith("/static/"), (path, asset)
        cookie = next(c for c in page.context.cookies() if c["name"] == "berth_session")
        assert cookie["httpOnly"] is True
        assert cookie["sameSite"] == "Lax"
        assert cookie["path"] == "/"
        anonymous = httpx.get(f"{stack.url}/login", timeout=10)
        assert anonymous.headers["content-security-policy"] == CSP
        assert not INLINE_SCRIPT.search(anonymous.text)

    def test_form_tokens_outlive_a_restart_and_belong_to_the_installation(
        self, tmp_path: Path
    ) -> None:
        """The CSRF tokens are signed with a secret from the installation's key: a form's
        token from before a restart is taken after it (as by any replica); one from
        another installation is refused."""

        def form_token(process: BerthProcess) -> str:
            return httpx.get(f"{process.url}/signup", timeout=10).cookies["berth_csrf"]

        def sign_in(process: BerthProcess, token: str) -> int:
            return httpx.post(
                f"{process.url}/login",
                data={"_csrf_token": token, "email": "nobody@example.com", "password": "x"},
                cookies={"berth_csrf": token},
                timeout=10,
            ).status_code

        first = BerthProcess(tmp_path / "one").start()
        try:
            token = form_token(first)
        finally:
            first.stop()
        again = BerthProcess(tmp_path / "one").start()
        other = BerthProcess(tmp_path / "two").start()
        try:
            assert sign_in(again, token) == 400  # read: no such account
            assert sign_in(other, token) == 403
            assert sign_in(other, form_token(other)) == 400
        finally:
            again.stop()
            other.stop()

    def test_dashboard_routes_are_not_in_the_openapi_document(self, stack: BerthProcess) -> None:
        """The OpenAPI document describes the API only."""
        document = httpx.get(f"{stack.url}/api/agent/openapi.json", timeout=10).json()
        assert all(p.startswith(("/api/", "/healthz", "/readyz")) for p in document["paths"])
