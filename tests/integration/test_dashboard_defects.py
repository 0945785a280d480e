"""The defects a first-time user hit in the dashboard (issue 15, items 3, 6 and the
containers list), each reproduced in Debian's chromium through Playwright against a real
``berth serve --local``.

The fixtures and helpers are ``test_dashboard``'s (imported, not copied): this module
gets its own ``berth serve`` and owner through them.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import httpx
import test_dashboard as dash
from deploy_support import wait_until
from harness import HOST_KEY, BerthProcess
from test_dashboard import PREFIX, Account, api_token, expect

# test_dashboard's fixtures, used by name here (this module gets its own instances).
chromium = dash.chromium
stack = dash.stack
owner = dash.owner
owner_page = dash.owner_page
local_server = dash.local_server

ENROLL = "/api/agent/servers/enroll"
ENROLL_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHhrIFB7HL8lCEpUrZ2zMm3T9eZEzSPkNR1ElUZGHUgG"


def _api(stack: BerthProcess, owner: Account) -> httpx.Client:
    token = api_token(stack, owner.email)
    return httpx.Client(
        base_url=stack.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )


def _offline_server(stack: BerthProcess, api: httpx.Client) -> str:
    """An enrolled server at 127.0.0.1:1 (nothing answers): offline, with its reason."""
    body = {
        "name": f"{PREFIX}far-{uuid.uuid4().hex[:6]}",
        "address": "127.0.0.1",
        "sshPort": 1,
        "hostKeys": [HOST_KEY],
    }
    created = api.post("/api/agent/servers", json=body)
    assert created.status_code == 201, created.text
    server_id: str = created.json()["id"]
    wait_until(
        lambda: api.get(f"/api/agent/servers/{server_id}").json(),
        lambda s: s["status"] == "offline" and s.get("statusDetail"),
        30,
        "the unreachable server offline with a reason",
    )
    return server_id


def _queue(api: httpx.Client, server_id: str, name: str) -> dict[str, Any]:
    """A deploy through the API to a server that cannot be reached: it waits, queued."""
    body = {"serverId": server_id, "name": name, "image": "echo:1.0", "port": 8080}
    response = api.post("/api/agent/docker/deploy", json=body)
    assert response.status_code == 202, response.text
    queued: dict[str, Any] = response.json()
    assert queued["deployment"]["state"] == "queued"
    return queued


class TestPendingServer:
    def test_a_pending_servers_page_gives_a_new_install_command(
        self, owner_page: Any, stack: BerthProcess, owner: Account
    ) -> None:
        """A pending server's page says what is pending (no ``berth@—``), offers no
        deploy, and "New install command" shows a fresh command at the server's own
        address; the first token then enrolls nothing, the new one does."""
        with _api(stack, owner) as api:
            created = api.post("/api/agent/servers", json={"name": f"{PREFIX}lost"})
            assert created.status_code == 201, created.text
            server = created.json()
            page = owner_page
            page.goto(f"/servers/{server['id']}")
            expect(page.locator("[data-address]")).to_have_text("known once it enrolls")
            expect(page.locator("main")).not_to_contain_text("berth@—")
            expect(page.get_by_role("link", name="Deploy an app")).to_have_count(0)
            expect(page.locator("#deploy-blocked")).to_contain_text("has not enrolled yet")

            page.get_by_role("button", name="New install command").click()
            expect(page).to_have_url(re.compile(rf"/servers/{server['id']}$"))
            command = page.locator("#install-command").input_value()
            assert "BERTH_ENROLL_TOKEN=berth_enroll_" in command
            assert server["enrollmentToken"] not in command
            fresh = command.split("BERTH_ENROLL_TOKEN=", 1)[1].split(" ", 1)[0]
            page.reload()
            expect(page.locator("#install-command")).to_have_count(0)

            old = {"Authorization": f"Bearer {server['enrollmentToken']}"}
            new = {"Authorization": f"Bearer {fresh}"}
            keys = {"hostKeys": [ENROLL_KEY]}
            assert httpx.post(f"{stack.url}{ENROLL}", json=keys, headers=old).status_code == 401
            assert httpx.post(f"{stack.url}{ENROLL}", json=keys, headers=new).status_code == 200
            page.reload()
            expect(page.get_by_role("button", name="New install command")).to_have_count(0)

    def test_the_deploy_form_of_a_pending_server_explains_instead(
        self, owner_page: Any, stack: BerthProcess, owner: Account
    ) -> None:
        """Opened directly, a pending server's deploy page says why there is no form."""
        with _api(stack, owner) as api:
            created = api.post("/api/agent/servers", json={"name": f"{PREFIX}wait"})
            server_id = created.json()["id"]
        page = owner_page
        page.goto(f"/servers/{server_id}/deploy")
        expect(page.get_by_role("alert")).to_contain_text("has not enrolled yet")
        expect(page.locator("#deploy-form")).to_have_count(0)


class TestUnreachableServer:
    def test_no_deploy_offered_and_a_queued_deploy_says_why_and_cancels(
        self, owner_page: Any, stack: BerthProcess, owner: Account
    ) -> None:
        """An offline server's page offers no Deploy and says why; a deployment queued
        for it through the API shows, open, that it waits for the server, and Cancel ends
        it."""
        with _api(stack, owner) as api:
            server_id = _offline_server(stack, api)
            queued = _queue(api, server_id, f"{PREFIX}queued")
            deployment_id = queued["deployment"]["id"]
            page = owner_page
            page.goto(f"/servers/{server_id}")
            expect(page.get_by_role("link", name="Deploy an app")).to_have_count(0)
            expect(page.locator("#deploy-blocked")).to_contain_text("cannot reach this server")
            row = page.locator(f'#installations tr[data-installation="{PREFIX}queued"]')
            expect(row.get_by_role("link", name="Redeploy")).to_have_count(0)
            entry = page.locator(f"#deployment-{deployment_id}")
            expect(entry).to_have_attribute("open", "")
            expect(entry.locator("[data-waiting]")).to_contain_text("cannot reach now")
            entry.get_by_role("button", name="Cancel this deployment").click()
            expect(page.locator(f"#deployment-{deployment_id} summary .badge")).to_have_text(
                "canceled"
            )
            state = api.get(f"/api/agent/deployments/{deployment_id}").json()["state"]
            assert state == "canceled"

    def test_an_app_that_never_ran_is_removed_while_its_server_is_unreachable(
        self, owner_page: Any, stack: BerthProcess, owner: Account
    ) -> None:
        """Remove of an app whose only deployment waits for an unreachable server removes
        it (nothing of it is on the server), instead of failing with "Server unreachable"."""
        with _api(stack, owner) as api:
            server_id = _offline_server(stack, api)
            queued = _queue(api, server_id, f"{PREFIX}never")
            installation_id = queued["installation"]["id"]
            page = owner_page
            page.goto(f"/servers/{server_id}")
            page.locator(f"#remove-{installation_id}").click()
            dialog = page.get_by_role("dialog")
            expect(dialog).to_contain_text(f"Remove {PREFIX}never?")
            dialog.get_by_role("button", name="Remove app").click()
            expect(page).to_have_url(re.compile(r"\?done=installation-removed$"))
            listed = api.get(f"/api/agent/install?serverId={server_id}").json()
            assert listed["installations"] == []
