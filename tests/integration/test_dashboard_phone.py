"""The dashboard on a phone (390x844, ``test_dashboard.PHONE``) in a real browser: Debian's
chromium driven by Playwright against a real ``berth serve --local`` (real SQLite, real
dockerd, the echo image).

Nothing is wider than the screen (the page never scrolls sideways) on the app, server,
deploy and settings pages, each with what makes it widest: an app with a long name,
revisions to roll back to and a deployment running, tables with rows; the app's action
buttons stay on the screen and wrap several to a row (issue 28: they stacked one per
line). Fixtures are ``test_dashboard``'s.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import test_dashboard as dashboard
from deploy_support import deploy, host_port
from harness import BerthProcess
from test_dashboard import DESKTOP, PHONE, PREFIX, Account, api_token, expect

# The dashboard tests' fixtures, by name: a berth of this module's own, its first account.
chromium = dashboard.chromium
stack = dashboard.stack
owner = dashboard.owner
owner_page = dashboard.owner_page
local_server = dashboard.local_server

#: A long app name, as people write them (words joined by hyphens).
APP = f"{PREFIX}phone-customer-facing-storefront-with-a-long-name"

#: An image name with no place to break it but its punctuation.
FAR_IMAGE = "registry.invalid/customerfacingstorefrontfrontendservice:20261127build1234"

#: What scrolls sideways: the page itself, or a table's card (which scrolls on its own
#: rather than widen the page), each as (what, scroll width, client width).
OVERFLOW = """() => {
    const root = document.documentElement;
    const named = el => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "")
        + (typeof el.className === "string" && el.className
            ? "." + el.className.trim().split(/\\s+/).join(".") : "");
    const wide = [root, ...document.querySelectorAll(".table-wrap")]
        .filter(el => el.scrollWidth > el.clientWidth)
        .map(el => [named(el.querySelector("table") || el), el.scrollWidth, el.clientWidth]);
    if (root.scrollWidth > root.clientWidth) {  // name what sticks out, deepest first
        const out = [...document.body.querySelectorAll("*")].filter(el =>
            el.getBoundingClientRect().right > root.clientWidth + 1
            && !el.closest(".table-wrap") && ![...el.children].some(c =>
                c.getBoundingClientRect().right > root.clientWidth + 1));
        const texts = [];  // text that runs out of its element, which itself fits
        const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node && texts.length < 5; node = walker.nextNode()) {
            const range = document.createRange();
            range.selectNodeContents(node);
            const right = range.getBoundingClientRect().right;
            if (right > root.clientWidth + 1) {
                texts.push(named(node.parentElement) + " " + Math.round(right) + " "
                    + JSON.stringify(node.textContent.trim().slice(0, 60)));
            }
        }
        wide.push(["sticking out", ...out.slice(0, 5).map(el =>
            named(el) + " " + Math.round(el.getBoundingClientRect().right)
            + " " + JSON.stringify((el.textContent || "").trim().slice(0, 60))), ...texts]);
    }
    return wide;
}"""


def assert_fits(page: Any, what: str) -> None:
    """The page, as it is now, scrolls no wider than the screen, nor do its tables."""
    page.wait_for_load_state("networkidle")
    wide = page.evaluate(OVERFLOW)
    assert not wide, f"{what} scrolls sideways: {wide}"


def rows_of(page: Any, selector: str) -> list[list[str]]:
    """The visible controls matched by ``selector``, grouped by the row they are laid
    out on (their top, to the pixel), each checked to lie within the screen."""
    width = page.evaluate("document.documentElement.clientWidth")
    rows: dict[int, list[str]] = {}
    controls = page.locator(selector)
    for i in range(controls.count()):
        control = controls.nth(i)
        if not control.is_visible():
            continue
        box = control.bounding_box()
        assert box is not None
        label = control.inner_text()
        assert box["x"] >= 0, f"{label!r} starts left of the screen: {box}"
        assert box["x"] + box["width"] <= width, f"{label!r} ends past the screen: {box}"
        rows.setdefault(round(box["y"]), []).append(label)
    return [rows[y] for y in sorted(rows)]


@pytest.fixture
def token(stack: BerthProcess, owner: Account) -> str:
    return api_token(stack, owner.email)


def test_pages_fit_a_phone_and_the_app_actions_wrap(
    owner_page: Any, stack: BerthProcess, local_server: str, token: str, slow_image: str
) -> None:
    """At 390x844 the app page (a long name, revisions to roll back to, a deployment
    running), the server page (an app whose image has a long name), the deploy and
    redeploy forms and the settings page (a registry and a notification listed) scroll
    no wider than the screen, nor do their tables; the app's actions on its page and on
    the server page (Redeploy, Logs, Restart, Stop, Remove) lie within it, several to a
    row (issue 28: on the server page they took a row each)."""
    page = owner_page
    auth = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=stack.url, headers=auth, timeout=90) as api:
        port = host_port()
        for mark in ("one", "two"):
            done = deploy(api, local_server, APP, port, image=slow_image, env={"MARK": mark})
            assert done.status_code == 200, done.text
            assert done.json()["deployment"]["state"] == "succeeded", done.json()
        # A third runs (it answers only after a minute) while the page is looked at.
        # One whose image has a long name and is nowhere: it fails at pull, and is listed.
        far = deploy(api, local_server, f"{APP}-2", host_port(), image=FAR_IMAGE, wait=60)
        assert far.status_code == 200, far.text
        slow = {"BERTH_TEST_DELAY": "60"}
        running = deploy(api, local_server, APP, port, image=slow_image, env=slow, wait=None)
        assert running.status_code == 202, running.text
        deployment_id = running.json()["deployment"]["id"]
        installation_id = running.json()["installation"]["id"]
        registry = {"host": "registry.example.com:5000", "username": "ci", "password": "pw"}
        assert api.post("/api/agent/registries", json=registry).status_code == 201
        hook = {
            "url": "https://93.184.215.14/services/T0/B0/phone",
            "format": "slack",
            "events": ["deployment.failed", "server.offline"],
        }
        assert api.post("/api/agent/webhooks", json=hook).status_code == 201

    app = f"/servers/{local_server}/installations/{installation_id}"
    page.set_viewport_size(PHONE)
    try:
        page.goto(app)
        cancel = page.locator(f"#cancel-{deployment_id}")
        expect(cancel).to_be_visible()
        assert_fits(page, "the app page with a deployment running")
        rows_of(page, "#redeploy, .app-actions .button")
        cancel.click()
        expect(page.locator(f"#revision-{deployment_id} summary .badge")).to_have_text(
            "canceled", timeout=60_000
        )
        expect(page.locator("[data-app-status] .badge")).to_have_text("running")
        page.locator("#revisions > details").nth(1).locator("> summary").click()
        expect(page.locator("#revisions .revision-rollback").first).to_be_visible()
        assert_fits(page, "the app page with its revisions open")
        rows = rows_of(page, "#redeploy, .app-actions .button, .revision-rollback .button")
        assert ["Restart", "Stop"] in rows, f"not side by side: {rows}"
        page.goto(f"/servers/{local_server}")
        assert_fits(page, "the server page")
        actions = f"#installations tr[data-installation='{APP}'] .row-actions .button"
        rows = rows_of(page, actions)
        assert len(rows) <= 2, f"the app's actions take a row each: {rows}"
        assert len(rows[0]) > 2, f"the app's actions are not side by side: {rows}"
        for path, what in (
            (f"/servers/{local_server}/deploy", "the deploy form"),
            (f"/servers/{local_server}/deploy?installation={installation_id}", "the redeploy form"),
            ("/settings", "the settings page"),
        ):
            page.goto(path)
            assert_fits(page, what)
        page.locator("#webhooks-table").scroll_into_view_if_needed()
        assert_fits(page, "the settings page's notifications")
    finally:
        page.set_viewport_size(DESKTOP)
