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
from typing import Any

import httpx
import test_dashboard as dashboard
from deploy_support import deploy, host_port
from harness import BerthProcess
from test_dashboard import PREFIX, Account, api_get, api_token, expect, invited, open_context, shoot

# The dashboard tests' fixtures, by name: a berth of this module's own, its first account.
chromium = dashboard.chromium
stack = dashboard.stack
owner = dashboard.owner
owner_page = dashboard.owner_page
local_server = dashboard.local_server

APP = f"{PREFIX}app-"


def api(berth: BerthProcess, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=berth.url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    )


def deployed_ok(response: httpx.Response) -> tuple[str, str]:
    """The deployment's and installation's ids of a ``?wait`` deploy that succeeded."""
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["deployment"]["state"] == "succeeded", body["deployment"]
    return body["deployment"]["id"], body["installation"]["id"]


def app_path(server_id: str, installation_id: str) -> str:
    return f"/servers/{server_id}/installations/{installation_id}"


def wait_revision(page: Any, deployment_id: str, state: str = "succeeded") -> None:
    """Wait (bounded) for the revision's badge to show a final state; it must be ``state``."""
    entry = page.locator(f"#revision-{deployment_id}")
    badge = entry.locator("summary .badge")
    expect(badge).to_have_text(re.compile(r"succeeded|failed|timed out|canceled"), timeout=60_000)
    assert badge.inner_text() == state, entry.inner_text()


class TestAppPage:
    def test_history_says_what_changed_and_never_an_env_value(
        self,
        owner_page: Any,
        stack: BerthProcess,
        owner: Account,
        local_server: str,
        echo_image: str,
    ) -> None:
        """The server page's app name opens the app's page: status, the revision serving,
        its URL, CPU and memory, and each revision with what it changed (port, env names
        added) and how long it took; no env value in the page, its fragments or its logs."""
        page = owner_page
        token = api_token(stack, owner.email)
        name, first_port, second_port = f"{APP}hist", host_port(), host_port()
        secret, other = f"s3cr3t-{uuid.uuid4().hex}", f"0th3r-{uuid.uuid4().hex}"
        with api(stack, token) as client:
            first, installation_id = deployed_ok(
                deploy(
                    client, local_server, name, first_port, image=echo_image, env={"SECRET": secret}
                )
            )
            second, _ = deployed_ok(
                deploy(
                    client,
                    local_server,
                    name,
                    second_port,
                    image=echo_image,
                    env={"SECRET": other, "MARK": "two"},
                )
            )
        page.goto(f"/servers/{local_server}")
        page.get_by_role("link", name=name, exact=True).click()
        expect(page).to_have_url(re.compile(rf"{app_path(local_server, installation_id)}$"))
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
        oldest.locator("summary").click()
        expect(oldest.locator(".changes li")).to_have_text(["First deployment."])
        expect(oldest.get_by_role("button", name="Roll back to this revision")).to_be_visible()
        expect(newest.get_by_role("button", name="Roll back to this revision")).to_have_count(0)

        expect(page.locator("[data-cpu]")).to_have_text(re.compile(r"^\d+\.\d %$"))
        expect(page.locator("[data-memory]")).to_have_text(re.compile(r"\d (B|KiB|MiB)$"))
        expect(page.locator("#log-lines")).to_contain_text(f"listening on {second_port}")

        base = app_path(local_server, installation_id)
        request = page.context.request
        for path in ("", "/live", "/stats", "/logs/download", "?q=listening"):
            text = request.get(f"{base}{path}").text()
            for value in (secret, other, token):
                assert value not in text, path
        for value in (secret, other):
            assert value not in page.content()
        shoot(page, "app")

    def test_roll_back_stop_and_start_from_the_app_page(
        self,
        owner_page: Any,
        stack: BerthProcess,
        owner: Account,
        local_server: str,
        echo_image: str,
    ) -> None:
        """Each earlier succeeded revision has a Rollback button: the new deployment is
        followed on the app's page until it serves (no reload); Stop and Start act on the
        container and come back to the app's page."""
        page = owner_page
        token = api_token(stack, owner.email)
        name, port = f"{APP}roll", host_port()
        with api(stack, token) as client:
            first, installation_id = deployed_ok(
                deploy(client, local_server, name, port, image=echo_image)
            )
            second, _ = deployed_ok(
                deploy(client, local_server, name, port, image=echo_image, env={"MARK": "two"})
            )
        base = app_path(local_server, installation_id)
        page.goto(base)
        page.locator(f"#revision-{first} > summary").click()
        page.locator(f"#rollback-{first}").click()
        expect(page).to_have_url(re.compile(rf"{base}\?deployment="))
        third = re.search(r"deployment=([0-9a-f-]{36})", page.url)
        assert third
        assert third[1] not in (first, second)
        page.evaluate("window.__berthNoReload = true")
        wait_revision(page, third[1])
        expect(page.locator(f"#revision-{third[1]} [data-current]")).to_have_text("serving")
        expect(page.locator(f"#revision-{third[1]} .changes li")).to_have_text(
            ["Env removed: MARK"]
        )
        assert page.evaluate("window.__berthNoReload") is True, "the page reloaded"
        rolled = api_get(stack, f"/api/agent/deployments/{third[1]}", token).json()
        assert rolled["rollbackOf"] == first

        page.get_by_role("button", name="Stop", exact=True).click()
        expect(page).to_have_url(re.compile(rf"{base}\?done=stopped"))
        expect(page.locator(".notice")).to_contain_text("stopped")
        expect(page.locator("[data-app-status] .badge")).to_have_text("stopped")
        expect(page.locator("[data-usage-none]")).to_be_visible()
        page.get_by_role("button", name="Start", exact=True).click()
        expect(page).to_have_url(re.compile(rf"{base}\?done=started"))
        expect(page.locator("[data-app-status] .badge")).to_have_text("running")
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=5).status_code == 200

    def test_cancel_a_running_deployment_from_the_app_page(
        self,
        owner_page: Any,
        stack: BerthProcess,
        owner: Account,
        local_server: str,
        slow_image: str,
    ) -> None:
        """While a deployment runs its Cancel button is on the app's page; canceled, the
        revision says so and the button is gone."""
        page = owner_page
        token = api_token(stack, owner.email)
        name, port = f"{APP}cancel", host_port()
        with api(stack, token) as client:
            queued = deploy(
                client,
                local_server,
                name,
                port,
                image=slow_image,
                env={"BERTH_TEST_DELAY": "60"},
                wait=None,
            )
        assert queued.status_code == 202, queued.text
        deployment_id = queued.json()["deployment"]["id"]
        installation_id = queued.json()["installation"]["id"]
        base = app_path(local_server, installation_id)
        page.goto(base)
        cancel = page.locator(f"#cancel-{deployment_id}")
        expect(cancel).to_have_text(re.compile(r"Cancel the (queued|running) deployment"))
        cancel.click()
        expect(page).to_have_url(re.compile(rf"{base}\?done=canceled"))
        wait_revision(page, deployment_id, "canceled")
        expect(page.locator(f"#cancel-{deployment_id}")).to_have_count(0)

    def test_logs_follow_pause_search_timestamps_and_download(
        self,
        owner_page: Any,
        stack: BerthProcess,
        owner: Account,
        local_server: str,
        echo_image: str,
    ) -> None:
        """The logs show the container's lines with their times; followed through the
        dashboard's event stream they receive the lines of a restart without a reload;
        Pause stops following; search filters lines; Download saves the output."""
        page = owner_page
        streams: list[str] = []
        page.on(
            "request",
            lambda r: streams.append(r.url) if r.resource_type == "eventsource" else None,
        )
        token = api_token(stack, owner.email)
        name, port = f"{APP}logs", host_port()
        with api(stack, token) as client:
            _, installation_id = deployed_ok(
                deploy(client, local_server, name, port, image=echo_image)
            )
        base = app_path(local_server, installation_id)
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

        with api(stack, token) as client:
            answer = client.post(f"/api/agent/installations/{installation_id}/restart")
        assert answer.status_code == 200, answer.text
        expect(listening).to_have_count(2, timeout=40_000)
        assert page.evaluate("window.__berthNoReload") is True, "the page reloaded"
        assert f"{stack.url}{base}/logs/events" in streams, streams

        follow.click()
        expect(follow).to_have_attribute("aria-pressed", "false")
        expect(follow).to_have_text("Follow")
        page.get_by_label("Timestamps").uncheck()
        expect(listening.first.locator("time.ts")).to_be_hidden()

        page.get_by_label("Search the output").fill("listening")
        expect(page.locator("#log-count")).to_have_text(
            re.compile(r"^2 of \d+ lines contain “listening”\.$")
        )
        page.get_by_label("Search the output").fill("no such text anywhere")
        expect(page.locator("#log-lines .log-line:visible")).to_have_count(0)

        with page.expect_download() as download:
            page.locator("#log-download").click()
        saved = download.value.path()
        assert saved is not None
        text = saved.read_text(encoding="utf-8")
        assert text.count(f"listening on {port}") == 2
        assert download.value.suggested_filename == f"{name}.log"

    def test_a_failed_deployment_shows_its_captured_output_and_the_port_it_names(
        self,
        owner_page: Any,
        stack: BerthProcess,
        owner: Account,
        local_server: str,
        echo_image: str,
    ) -> None:
        """An app whose only deployment failed has no container: its logs show the output
        the deployment captured, and say that the app listens on another port than the
        one it was deployed with; the former logs address leads there too."""
        page = owner_page
        token = api_token(stack, owner.email)
        name, port, listens = f"{APP}failed", host_port(), host_port()
        with api(stack, token) as client:
            response = deploy(
                client, local_server, name, port, image=echo_image, env={"PORT": str(listens)}
            )
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["deployment"]["state"] == "failed", body["deployment"]
        installation_id = body["installation"]["id"]
        base = app_path(local_server, installation_id)

        page.goto(f"{base}/logs")
        expect(page).to_have_url(re.compile(rf"{base}#logs$"))
        captured = page.locator("#captured-output")
        expect(captured.locator("pre")).to_contain_text(f"listening on {listens}")
        hint = captured.locator("[data-port-hint]")
        expect(hint).to_contain_text(f"listening on {listens}")
        expect(hint).to_contain_text(f"deployed with port {port}")
        expect(page.locator("text=no running container")).to_have_count(0)
        revision = page.locator(f"#revision-{body['deployment']['id']}")
        expect(revision.locator("summary .badge")).to_have_text("failed")
        expect(revision.locator("[data-port-hint]")).to_contain_text(f"port {port}")
        download = page.context.request.get(f"{base}/logs/download").text()
        assert f"listening on {listens}" in download

    def test_without_javascript_the_app_page_reads_and_acts(
        self,
        chromium: Any,
        stack: BerthProcess,
        owner: Account,
        local_server: str,
        echo_image: str,
    ) -> None:
        """With JavaScript off the app's page shows its revisions, CPU and memory behind a
        link, and its logs; search is a plain form; Restart posts and comes back."""
        token = api_token(stack, owner.email)
        name, port = f"{APP}nojs", host_port()
        with api(stack, token) as client:
            _, installation_id = deployed_ok(
                deploy(client, local_server, name, port, image=echo_image)
            )
        base = app_path(local_server, installation_id)
        context = open_context(chromium, stack, owner, javascript=False)
        page = context.new_page()
        page.goto(base)
        expect(page.locator("#revisions > details")).to_have_count(1)
        expect(page.locator("#log-lines")).to_contain_text(f"listening on {port}")
        page.get_by_label("Search the output").fill("no such text")
        page.get_by_role("button", name="Search").click()
        expect(page).to_have_url(re.compile(r"\?q=no\+such\+text"))
        expect(page.locator("#log-count")).to_contain_text("0 of")
        page.get_by_role("button", name="Restart", exact=True).click()
        expect(page).to_have_url(re.compile(rf"{base}\?done=restarted"))
        expect(page.locator(".notice")).to_contain_text("restarted")
        context.close()

    def test_another_users_app_page_is_a_404(
        self,
        chromium: Any,
        stack: BerthProcess,
        owner: Account,
        local_server: str,
        echo_image: str,
    ) -> None:
        """Another user's app — its page, fragments, log stream and download — is a 404."""
        token = api_token(stack, owner.email)
        name, port = f"{APP}theirs", host_port()
        with api(stack, token) as client:
            _, installation_id = deployed_ok(
                deploy(client, local_server, name, port, image=echo_image)
            )
        base = app_path(local_server, installation_id)
        stranger = open_context(chromium, stack, invited(chromium, stack, "app-stranger"))
        for path in ("", "/live", "/stats", "/logs", "/logs/events", "/logs/download"):
            assert stranger.request.get(f"{base}{path}").status == 404, path
        stranger.close()
        assert httpx.get(f"{stack.url}{base}/logs/events", timeout=10).status_code == 401
