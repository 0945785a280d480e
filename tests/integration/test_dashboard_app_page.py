"""An app's page in a real browser: Debian's chromium driven by Playwright against a real
``berth serve --local`` (real SQLite, real dockerd, the echo image).

The page of one installation: its revision and status, revision history with what each
changed, rollback, stop/start, cancel, CPU and memory, and its logs followed live
through the dashboard's event stream; a failed deployment's captured output with the
port it names; never an env value. Fixtures and helpers are ``test_dashboard``'s.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import test_dashboard as dashboard
from deploy_support import deploy, host_port
from harness import BerthProcess
from infra import docker_client
from test_dashboard import PREFIX, Account, api_get, api_token, expect, invited, open_context, shoot

# The dashboard tests' fixtures, by name: a berth of this module's own, its first account.
chromium = dashboard.chromium
stack = dashboard.stack
owner = dashboard.owner
owner_page = dashboard.owner_page
local_server = dashboard.local_server

APP = f"{PREFIX}app-"


@dataclass
class Here:
    """What each test uses: the owner's page, the berth, an API token, this machine."""

    page: Any
    stack: BerthProcess
    owner: Account
    token: str
    server_id: str
    image: str

    def deploy(self, name: str, port: int, **options: Any) -> httpx.Response:
        """``deploy_support.deploy`` here, of the echo image unless ``image=`` says."""
        auth = {"Authorization": f"Bearer {self.token}"}
        with httpx.Client(base_url=self.stack.url, headers=auth, timeout=90) as client:
            return deploy(client, self.server_id, name, port, **{"image": self.image, **options})

    def deployed(self, name: str, port: int, **options: Any) -> tuple[str, str]:
        """The deployment's and installation's ids of a ``?wait`` deploy that succeeded."""
        response = self.deploy(name, port, **options)
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["deployment"]["state"] == "succeeded", body["deployment"]
        return body["deployment"]["id"], body["installation"]["id"]

    def app(self, installation_id: str) -> str:
        return f"/servers/{self.server_id}/installations/{installation_id}"


@pytest.fixture
def here(
    owner_page: Any, stack: BerthProcess, owner: Account, local_server: str, echo_image: str
) -> Here:
    token = api_token(stack, owner.email)
    return Here(owner_page, stack, owner, token, local_server, echo_image)


def wait_revision(page: Any, deployment_id: str, state: str = "succeeded") -> None:
    """Wait (bounded) for the revision's badge to show a final state; it must be ``state``."""
    entry = page.locator(f"#revision-{deployment_id}")
    badge = entry.locator("summary .badge")
    expect(badge).to_have_text(re.compile(r"succeeded|failed|timed out|canceled"), timeout=60_000)
    assert badge.inner_text() == state, entry.inner_text()


class TestAppPage:
    def test_history_says_what_changed_and_never_an_env_value(self, here: Here) -> None:
        """The server page's app name opens the app's page: status, the revision serving,
        its URL, CPU and memory, and each revision with what it changed (port, env names
        added) and how long it took; no env value in the page, its fragments or its logs."""
        page = here.page
        name, first_port, second_port = f"{APP}hist", host_port(), host_port()
        secret, other = f"s3cr3t-{uuid.uuid4().hex}", f"0th3r-{uuid.uuid4().hex}"
        first, installation_id = here.deployed(name, first_port, env={"SECRET": secret})
        second, _ = here.deployed(name, second_port, env={"SECRET": other, "MARK": "two"})
        page.goto(f"/servers/{here.server_id}")
        page.get_by_role("link", name=name, exact=True).click()
        base = here.app(installation_id)
        expect(page).to_have_url(re.compile(rf"{base}$"))
        expect(page.get_by_role("heading", level=1)).to_have_text(name)
        expect(page.locator("[data-app-status] .badge")).to_have_text("running")
        expect(page.locator("[data-current-revision]")).to_contain_text(second[:8])
        expect(page.locator("[data-app-url] a")).to_have_attribute(
            "href", f"http://127.0.0.1:{second_port}"
        )
        expect(page.locator("[data-tls]")).to_contain_text("no domain")

        newest, oldest = page.locator(f"#revision-{second}"), page.locator(f"#revision-{first}")
        expect(page.locator("#revisions > details")).to_have_count(2)
        expect(newest.locator("[data-current]")).to_have_text("serving")
        changes = newest.locator(".changes li")
        expect(changes).to_have_text([f"Port: {first_port} → {second_port}", "Env added: MARK"])
        expect(newest.locator("[data-duration]")).to_have_text(re.compile(r"^\d+ s$|min"))
        oldest.locator("summary").first.click()
        expect(oldest.locator(".changes li")).to_have_text(["First deployment."])
        expect(page.locator(f"#rollback-{first}")).to_be_visible()
        expect(page.locator(f"#rollback-{second}")).to_have_count(0)

        expect(page.locator("[data-cpu]")).to_have_text(re.compile(r"^\d+\.\d %$"))
        expect(page.locator("[data-memory]")).to_have_text(re.compile(r"\d (B|KiB|MiB)$"))
        expect(page.locator("#log-lines")).to_contain_text(f"listening on {second_port}")

        request = page.context.request
        for path in ("", "/live", "/stats", "/logs/download", "?q=listening"):
            text = request.get(f"{base}{path}").text()
            for value in (secret, other, here.token):
                assert value not in text, path
        for value in (secret, other):
            assert value not in page.content()
        shoot(page, "app")

    def test_roll_back_stop_and_start_from_the_app_page(self, here: Here) -> None:
        """Each earlier succeeded revision has a Rollback button: the new deployment is
        followed on the app's page until it serves (no reload); Stop and Start act on the
        container and come back to the app's page."""
        page = here.page
        name, port = f"{APP}roll", host_port()
        first, installation_id = here.deployed(name, port)
        second, _ = here.deployed(name, port, env={"MARK": "two"})
        base = here.app(installation_id)
        page.goto(base)
        earlier = page.locator(f"#revision-{first}")
        earlier.locator("summary").first.click()
        page.locator(f"#rollback-{first}").click()
        expect(page).to_have_url(re.compile(rf"{base}\?deployment=[0-9a-f-]{{36}}#revision-"))
        third = page.url.split("deployment=", 1)[1].split("#", 1)[0]
        assert third not in (first, second)
        page.evaluate("window.__berthNoReload = true")
        wait_revision(page, third)
        expect(page.locator(f"#revision-{third} [data-current]")).to_have_text("serving")
        expect(page.locator(f"#revision-{third} .changes li")).to_have_text(["Env removed: MARK"])
        assert page.evaluate("window.__berthNoReload") is True, "the page reloaded"
        rolled = api_get(here.stack, f"/api/agent/deployments/{third}", here.token).json()
        assert rolled["rollbackOf"] == first

        page.get_by_role("button", name="Stop", exact=True).click()
        expect(page).to_have_url(re.compile(rf"{base}\?done=stopped"))
        expect(page.locator(".notice")).to_contain_text("stopped")
        expect(page.locator("[data-app-status] .badge")).to_have_text("stopped")
        expect(page.locator("[data-usage-none]")).to_be_visible()
        expect(page.locator("#log-follow")).to_have_attribute("aria-pressed", "false")
        page.get_by_role("button", name="Start", exact=True).click()
        expect(page).to_have_url(re.compile(rf"{base}\?done=started"))
        expect(page.locator("[data-app-status] .badge")).to_have_text("running")
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=5).status_code == 200

    def test_an_app_killed_behind_berths_back_reads_exited_live_and_offers_start(
        self, here: Here
    ) -> None:
        """``docker kill`` of an app with restart "no" while its page is open: the page
        shows exited, exit code 137, and Start (not Restart/Stop) without a reload; Start
        brings it back running; the servers list counted it down meanwhile."""
        page = here.page
        name, port = f"{APP}killed", host_port()
        _, installation_id = here.deployed(name, port, restart="no")
        base = here.app(installation_id)
        page.goto(base)
        expect(page.locator("[data-app-status] .badge")).to_have_text("running")
        page.evaluate("window.__berthNoReload = true")
        client = docker_client()
        try:
            (row,) = client.api.containers(
                filters={"label": f"berth.installation={installation_id}"}
            )
            client.api.kill(row["Id"])
        finally:
            client.close()
        status = page.locator("[data-app-status]")
        expect(status.locator(".badge")).to_have_text("exited", timeout=30_000)
        expect(status.locator("[data-exit-code]")).to_have_text("exit code 137")
        expect(page.get_by_role("button", name="Start", exact=True)).to_be_visible()
        expect(page.get_by_role("button", name="Stop", exact=True)).to_have_count(0)
        assert page.evaluate("window.__berthNoReload") is True, "the page reloaded"
        page.goto("/servers")
        expect(
            page.locator(f"[data-server-id='{here.server_id}'] [data-apps-down]")
        ).to_be_visible()
        page.goto(base)
        page.get_by_role("button", name="Start", exact=True).click()
        expect(page).to_have_url(re.compile(rf"{base}\?done=started"))
        expect(page.locator("[data-app-status] .badge")).to_have_text("running")
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=5).status_code == 200

    def test_cancel_a_running_deployment_from_the_app_page(
        self, here: Here, slow_image: str
    ) -> None:
        """While a deployment runs its Cancel button is on the app's page; canceled, the
        revision says so and the button is gone; the notice does not promise a previous
        version back for an app's first deployment (issue 28)."""
        page = here.page
        delayed = {"BERTH_TEST_DELAY": "60"}
        queued = here.deploy(f"{APP}cancel", host_port(), image=slow_image, env=delayed, wait=None)
        assert queued.status_code == 202, queued.text
        deployment_id = queued.json()["deployment"]["id"]
        base = here.app(queued.json()["installation"]["id"])
        page.goto(base)
        cancel = page.locator(f"#cancel-{deployment_id}")
        expect(cancel).to_have_text(re.compile(r"Cancel the (queued|running) deployment"))
        cancel.click()
        expect(page).to_have_url(re.compile(rf"{base}\?done=canceled-first"))
        # Its first deployment: nothing earlier is put back, and the notice says so.
        expect(page.locator(".notice")).to_contain_text("no earlier version serves instead")
        expect(page.locator(".notice")).not_to_contain_text("previous version back")
        wait_revision(page, deployment_id, "canceled")
        expect(page.locator(f"#cancel-{deployment_id}")).to_have_count(0)

    def test_logs_follow_pause_search_timestamps_and_download(self, here: Here) -> None:
        """The logs show the container's lines with their times; followed through the
        dashboard's event stream they receive the lines of a restart without a reload;
        Pause stops following; search filters lines; Download saves the output."""
        page = here.page
        streams: list[str] = []
        page.on(
            "request",
            lambda r: streams.append(r.url) if r.resource_type == "eventsource" else None,
        )
        name, port = f"{APP}logs", host_port()
        _, installation_id = here.deployed(name, port)
        base = here.app(installation_id)
        page.goto(f"{base}#logs")
        listening = page.locator("#log-lines .log-line", has_text=f"listening on {port}")
        expect(listening).to_have_count(1)
        follow = page.locator("#log-follow")
        expect(follow).to_have_attribute("aria-pressed", "true")
        expect(listening.locator("time.ts")).to_have_attribute(
            "datetime", re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00$")
        )
        expect(listening.locator("time.ts")).to_be_visible()
        page.evaluate("window.__berthNoReload = true")

        restart = f"{here.stack.url}/api/agent/installations/{installation_id}/restart"
        auth = {"Authorization": f"Bearer {here.token}"}
        answer = httpx.post(restart, headers=auth, timeout=60)  # outside the page
        assert answer.status_code == 200, answer.text
        expect(listening).to_have_count(2, timeout=40_000)
        assert page.evaluate("window.__berthNoReload") is True, "the page reloaded"
        assert f"{here.stack.url}{base}/logs/events" in streams, streams

        follow.click()
        expect(follow).to_have_attribute("aria-pressed", "false")
        expect(follow).to_have_text("Follow")
        page.get_by_label("Timestamps").uncheck()
        expect(listening.first.locator("time.ts")).to_be_hidden()

        page.get_by_label("Search the output").fill("listening")
        expect(page.locator("#log-count")).to_have_text(
            re.compile(r"^Lines containing “listening”: 2 of \d+\.$")
        )
        page.get_by_label("Search the output").fill("no such text anywhere")
        expect(page.locator("#log-lines .log-line:visible")).to_have_count(0)

        with page.expect_download() as download:
            page.locator("#log-download").click()
        saved = download.value.path()
        assert saved is not None
        assert saved.read_text(encoding="utf-8").count(f"listening on {port}") == 2
        assert download.value.suggested_filename == f"{name}.log"

    def test_a_failed_deployment_shows_its_captured_output_and_the_port_it_names(
        self, here: Here
    ) -> None:
        """An app whose only deployment failed has no container: its logs show the output
        the deployment captured, and say that the app listens on another port than the
        one it was deployed with; the former logs address leads there too; its URL is not
        a link, since nothing serves there."""
        page = here.page
        port, listens = host_port(), host_port()
        response = here.deploy(f"{APP}failed", port, env={"PORT": str(listens)})
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["deployment"]["state"] == "failed", body["deployment"]
        base = here.app(body["installation"]["id"])

        page.goto(f"{base}/logs")
        expect(page).to_have_url(re.compile(rf"{base}#logs$"))
        captured = page.locator("#captured-output")
        expect(captured.locator("pre")).to_contain_text(f"listening on {listens}")
        hint = captured.locator("[data-port-hint]")
        expect(hint).to_contain_text(f"listening on {listens}")
        expect(hint).to_contain_text(f"deployed with port {port}")
        expect(page.get_by_text("no running container")).to_have_count(0)
        revision = page.locator(f"#revision-{body['deployment']['id']}")
        expect(revision.locator("summary .badge").first).to_have_text("failed")
        expect(revision.locator("[data-port-hint]")).to_contain_text(f"port {port}")
        download = page.context.request.get(f"{base}/logs/download").text()
        assert f"listening on {listens}" in download
        # Nothing serves at its address: shown, not offered as a link (issue 28).
        expect(page.locator("[data-app-url] a")).to_have_count(0)
        expect(page.locator("[data-app-url] [data-not-serving]")).to_be_visible()

    def test_without_javascript_the_app_page_reads_and_acts(
        self, here: Here, chromium: Any
    ) -> None:
        """With JavaScript off the app's page shows its revisions and its logs; search is
        a plain form; Restart posts and comes back."""
        name, port = f"{APP}nojs", host_port()
        _, installation_id = here.deployed(name, port)
        base = here.app(installation_id)
        context = open_context(chromium, here.stack, here.owner, javascript=False)
        page = context.new_page()
        page.goto(base)
        expect(page.locator("#revisions > details")).to_have_count(1)
        expect(page.locator("#log-lines")).to_contain_text(f"listening on {port}")
        page.get_by_label("Search the output").fill("<b>no such</b> text")
        page.get_by_role("button", name="Search").click()
        expect(page).to_have_url(re.compile(r"\?q=%3Cb%3Eno\+such%3C%2Fb%3E\+text"))
        expect(page.locator("#log-count")).to_have_text(
            "Lines containing “<b>no such</b> text”: 0 of 1."
        )
        expect(page.locator("#log-count b")).to_have_count(0)
        page.get_by_role("button", name="Restart", exact=True).click()
        expect(page).to_have_url(re.compile(rf"{base}\?done=restarted"))
        expect(page.locator(".notice")).to_contain_text("restarted")
        context.close()

    def test_another_users_app_page_is_a_404(self, here: Here, chromium: Any) -> None:
        """Another user's app — its page, fragments, log stream and download — is a 404;
        signed out, the log stream is a bare 401."""
        _, installation_id = here.deployed(f"{APP}theirs", host_port())
        base = here.app(installation_id)
        stranger = open_context(chromium, here.stack, invited(chromium, here.stack, "app-other"))
        for path in ("", "/live", "/stats", "/logs", "/logs/events", "/logs/download"):
            assert stranger.request.get(f"{base}{path}").status == 404, path
        for wrong in (f"/servers/{here.server_id}/installations/not-an-id", base + "x"):
            assert here.page.context.request.get(wrong).status == 404, wrong
        elsewhere = f"/servers/{uuid.uuid4()}/installations/{installation_id}"
        assert here.page.context.request.get(elsewhere).status == 404
        stranger.close()
        assert httpx.get(f"{here.stack.url}{base}/logs/events", timeout=10).status_code == 401


class TestFindingYourWay:
    """Issue 28, finding 3: the app page's navigation."""

    def test_redeploy_stays_on_the_app_page(self, here: Here) -> None:
        """Redeploy from the app's page, then Deploy: back on the app's page (as Roll
        back), following the new revision until it serves."""
        page = here.page
        name, port = f"{APP}again", host_port()
        _, installation_id = here.deployed(name, port)
        base = here.app(installation_id)
        page.goto(base)
        page.locator("#redeploy").click()
        expect(page).to_have_url(re.compile(rf"/deploy\?installation={installation_id}$"))
        page.locator("#deploy-form").get_by_role("button", name="Deploy").click()
        expect(page).to_have_url(re.compile(rf"{base}\?deployment=[0-9a-f-]{{36}}#revision-"))
        new = page.url.split("deployment=", 1)[1].split("#", 1)[0]
        wait_revision(page, new)
        expect(page.locator(f"#revision-{new} [data-current]")).to_have_text("serving")

    def test_collapsed_revisions_show_their_image_and_roll_back_button(self, here: Here) -> None:
        """A collapsed revision's summary names its image, and an earlier revision's Roll
        back button shows without opening it."""
        page = here.page
        name, port = f"{APP}collapsed", host_port()
        first, installation_id = here.deployed(name, port)
        second, _ = here.deployed(name, port, env={"MARK": "two"})
        page.goto(here.app(installation_id))
        oldest = page.locator(f"#revision-{first}")
        expect(oldest).not_to_have_attribute("open", "")
        expect(oldest.locator("summary [data-revision-image]")).to_have_text(here.image)
        expect(oldest.locator("summary [data-revision-image]")).to_be_visible()
        expect(page.locator(f"#rollback-{first}")).to_be_visible()
        expect(page.locator(f"#rollback-{second}")).to_have_count(0)

    def test_removed_apps_are_listed_on_the_server_page(self, here: Here) -> None:
        """A removed app is listed under the server's Removed apps, and its link opens its
        page, with its revisions."""
        page = here.page
        name, port = f"{APP}removed", host_port()
        first, installation_id = here.deployed(name, port)
        auth = {"Authorization": f"Bearer {here.token}"}
        gone = httpx.delete(
            f"{here.stack.url}/api/agent/installations/{installation_id}", headers=auth, timeout=60
        )
        assert gone.status_code == 204, gone.text
        page.goto(f"/servers/{here.server_id}")
        removed = page.locator("#removed-apps")
        removed.locator("summary").click()
        removed.get_by_role("link", name=name, exact=True).click()
        expect(page).to_have_url(re.compile(rf"{here.app(installation_id)}$"))
        expect(page.locator("[data-app-status] .badge")).to_have_text("removed")
        expect(page.locator(f"#revision-{first}")).to_be_visible()
