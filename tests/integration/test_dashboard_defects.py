"""The defects a first-time user hit in the dashboard (issue 15, items 3, 6 and the
containers list), each reproduced in Debian's chromium through Playwright against a real
``berth serve --local``.

The fixtures and helpers are ``test_dashboard``'s (imported, not copied): this module
gets its own ``berth serve`` and owner through them.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import uuid
from typing import Any

import httpx
import test_dashboard as dash
from deploy_support import add_ssh_server, deploy, host_port, remove_containers, wait_until
from harness import Api, BerthProcess, new_server
from infra import RUN, RUN_LABEL, docker_client, held_port
from test_dashboard import PREFIX, Account, api_token, expect

# test_dashboard's fixtures, used by name here (this module gets its own instances).
chromium = dash.chromium
stack = dash.stack
owner = dash.owner
owner_page = dash.owner_page
local_server = dash.local_server

ENROLL = "/api/agent/servers/enroll"
ENROLL_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHhrIFB7HL8lCEpUrZ2zMm3T9eZEzSPkNR1ElUZGHUgG"


def _api(stack: BerthProcess, owner: Account) -> Api:
    return stack.api(api_token(stack, owner.email))


def _offline_server(api: Api) -> str:
    """An enrolled server at 127.0.0.1:1 (nothing answers): offline, with its reason."""
    server_id: str = new_server(api, f"{PREFIX}far-{uuid.uuid4().hex[:6]}")["id"]
    wait_until(
        lambda: api.get(f"/api/agent/servers/{server_id}").json(),
        lambda s: s["status"] == "offline" and s.get("statusDetail"),
        30,
        "the unreachable server offline with a reason",
    )
    return server_id


def _queued_far_away(api: Api, page: Any, name: str) -> tuple[str, dict[str, Any]]:
    """A deploy of ``name`` through the API to a server that cannot be reached (it waits,
    queued), that server's page open: ``(server id, the 202 body)``."""
    server_id = _offline_server(api)
    response = deploy(api, server_id, name, 8080, image="echo:1.0", wait=None)
    assert response.status_code == 202, response.text
    queued: dict[str, Any] = response.json()
    assert queued["deployment"]["state"] == "queued"
    page.goto(f"/servers/{server_id}")
    return server_id, queued


class TestPendingServer:
    def test_a_pending_servers_page_gives_a_new_install_command(
        self, owner_page: Any, stack: BerthProcess, owner: Account
    ) -> None:
        """A pending server's page says what is pending (no ``berth@—``), offers no
        deploy, and "New install command" shows a fresh command at the server's own
        address; the first token then enrolls nothing, the new one does."""
        with _api(stack, owner) as api:
            server = new_server(api, f"{PREFIX}lost", enrolled=False)
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
            # Enrolled: the page's live part drops the install-command section by itself.
            expect(page.get_by_role("button", name="New install command")).to_have_count(0)
            expect(page.locator("#deploy-blocked")).not_to_contain_text("has not enrolled")

    def test_the_deploy_form_of_a_pending_server_explains_instead(
        self, owner_page: Any, stack: BerthProcess, owner: Account
    ) -> None:
        """Opened directly, a pending server's deploy page says why there is no form."""
        with _api(stack, owner) as api:
            server_id = new_server(api, f"{PREFIX}wait", enrolled=False)["id"]
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
        page = owner_page
        with _api(stack, owner) as api:
            _, queued = _queued_far_away(api, page, f"{PREFIX}queued")
            deployment_id = queued["deployment"]["id"]
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
        page = owner_page
        with _api(stack, owner) as api:
            server_id, queued = _queued_far_away(api, page, f"{PREFIX}never")
            installation_id = queued["installation"]["id"]
            page.locator(f"#remove-{installation_id}").click()
            dialog = page.get_by_role("dialog")
            expect(dialog).to_contain_text(f"Remove {PREFIX}never?")
            dialog.get_by_role("button", name="Remove app").click()
            expect(page).to_have_url(re.compile(r"\?done=installation-removed$"))
            listed = api.get(f"/api/agent/install?serverId={server_id}").json()
            assert listed["installations"] == []


class TestErrorsInWords:
    def test_form_errors_read_as_sentences(self, owner_page: Any, local_server: str) -> None:
        """No Markdown backticks (code is shown as code), the variable-name rule in words
        and no JSON type words ("got a string") in the deploy form's errors."""
        page = owner_page
        page.goto(f"/servers/{local_server}/deploy")
        page.get_by_label("Name", exact=True).fill(f"{PREFIX}words")
        page.get_by_label("Image").fill("nginx")
        page.get_by_label("Port", exact=True).fill("eighty")
        page.locator('input[name="env_key"]').first.fill("1BAD")
        page.locator('textarea[name="env_value"]').first.fill("x")
        page.locator("#deploy-form").get_by_role("button", name="Deploy").click()
        image = page.locator("#image-error")
        expect(image).to_be_visible()
        expect(image.locator("code").first).to_be_visible()
        expect(page.locator("#port-error")).to_be_visible()
        env = page.locator("[data-env-row] .env-error").first
        expect(env).to_contain_text("letter")
        texts = [image.inner_text(), page.locator("#port-error").inner_text(), env.inner_text()]
        for text in texts:
            assert "`" not in text, text
            assert "got a" not in text, text
            assert "^[" not in text, text

    def test_a_port_held_on_the_server_is_named_beside_the_port(
        self, owner_page: Any, local_server: str, echo_image: str
    ) -> None:
        """Deploying on a host port a process holds answers beside the Port field, in
        words, and deploys nothing."""
        page = owner_page
        port = host_port()
        with held_port(port):
            page.goto(f"/servers/{local_server}/deploy")
            page.get_by_label("Name", exact=True).fill(f"{PREFIX}squat")
            page.get_by_label("Image").fill(echo_image)
            page.get_by_label("Port", exact=True).fill(str(port))
            page.locator("#deploy-form").get_by_role("button", name="Deploy").click()
            expect(page.locator("#port-error")).to_contain_text(
                f"Host port {port} is already in use on this server by a process"
            )
        expect(page).to_have_url(re.compile(rf"/servers/{local_server}/deploy$"))

    def test_an_unreachable_servers_reason_is_a_sentence(
        self, owner_page: Any, stack: BerthProcess, owner: Account
    ) -> None:
        """An SSH server nothing answers for reads "berth could not reach … over SSH
        (unreachable…", not asyncio's "Connect call failed ('127.0.0.1', 1)" (nor which
        failure it was: issue 21)."""
        with _api(stack, owner) as api:
            server_id = _offline_server(api)
        page = owner_page
        page.goto(f"/servers/{server_id}")
        facts = page.locator("#server-facts")
        expect(facts).to_contain_text(
            "berth could not reach 127.0.0.1 on port 1 over SSH (unreachable"
        )
        expect(facts).not_to_contain_text("refused")
        expect(facts).not_to_contain_text("Connect call failed")


class TestContainersList:
    def test_only_berths_containers_by_default_with_a_count_of_the_others(
        self,
        owner_page: Any,
        stack: BerthProcess,
        owner: Account,
        local_server: str,
        echo_image: str,
    ) -> None:
        """The server's containers list shows those berth manages, says how many others
        run, and shows every one on request (kept through live updates)."""
        stray = f"{PREFIX}stray-{uuid.uuid4().hex[:6]}"
        client = docker_client()
        try:
            client.containers.run(
                echo_image,
                name=stray,
                detach=True,
                environment={"PORT": "1"},
                labels={RUN_LABEL: RUN},
            )
            with _api(stack, owner) as api:
                managed = deploy(
                    api, local_server, f"{PREFIX}managed", host_port(), image=echo_image
                )
                assert managed.json()["deployment"]["state"] == "succeeded", managed.text
            page = owner_page
            page.goto(f"/servers/{local_server}")
            rows = page.locator("#containers tr[data-container]")
            expect(
                page.locator(f'#containers tr[data-container="{PREFIX}managed"]')
            ).to_be_visible()
            expect(page.locator(f'tr[data-container="{stray}"]')).to_have_count(0)
            others = int(page.locator("#containers-filter").get_attribute("data-others") or 0)
            assert others >= 1
            link = page.get_by_role("link", name=re.compile(rf"^Show all, with {others} other"))
            link.click()
            expect(page).to_have_url(re.compile(r"\?containers=all"))
            expect(page.locator(f'tr[data-container="{stray}"]')).to_be_visible()
            # The next live refresh asks for every container too, and keeps it shown.
            with page.expect_response(lambda r: "/live?containers=all" in r.url):
                pass
            expect(page.locator(f'tr[data-container="{stray}"]')).to_be_visible()
            # Berth's own row beside the stray one. (Not a count against `others`: other
            # runs on the same Engine remove theirs meanwhile; 13 rows after 25 others.)
            managed_row = page.locator(f'#containers tr[data-container="{PREFIX}managed"]')
            expect(managed_row).to_be_visible()
            assert rows.count() >= 2
            page.get_by_role("link", name="Show only those managed by berth").click()
            expect(page.locator(f'tr[data-container="{stray}"]')).to_have_count(0)
        finally:
            client.containers.get(stray).remove(force=True)
            client.close()


class _Relay:
    """A TCP relay on 127.0.0.1 to ``target_port`` that can be cut: the server berth
    reaches through it becomes unreachable at once (its connections closed, no listener)."""

    def __init__(self, target_port: int) -> None:
        self._target = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self._target))
            self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        with contextlib.suppress(OSError):  # wakes the blocked accept (close alone does not)
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class TestRemoveOnAnUnreachableServer:
    def test_removing_an_app_that_ran_says_why_it_was_not_removed(
        self, chromium: Any, stack: BerthProcess, owner: Account, sshd: Any, echo_image: str
    ) -> None:
        """An app that ran on a server berth can no longer reach is not removed, and the
        page says so in words (nothing changed, try again when it is back) rather than
        a bare "Server unreachable"."""
        relay = _Relay(sshd.port)
        try:
            with _api(stack, owner) as api:
                server = add_ssh_server(
                    api, sshd, f"{PREFIX}cut-{uuid.uuid4().hex[:6]}", port=relay.port
                )
                wait_until(
                    lambda: api.get(f"/api/agent/servers/{server['id']}").json(),
                    lambda s: s["status"] == "online",
                    30,
                    "the relayed SSH server online",
                )
                name = f"{PREFIX}ran-{uuid.uuid4().hex[:6]}"
                ran = deploy(api, server["id"], name, host_port(), image=echo_image)
                assert ran.json()["deployment"]["state"] == "succeeded", ran.text
                installation_id = ran.json()["installation"]["id"]
                relay.cut()
                # Not owner_page: the answer is a 503 page, which the console reports.
                context = dash.open_context(chromium, stack, owner)
                page = context.new_page()
                page.goto(f"/servers/{server['id']}")
                page.locator(f"#remove-{installation_id}").click()
                dialog = page.get_by_role("dialog")
                expect(dialog).to_contain_text(f"Remove {name}?")
                dialog.get_by_role("button", name="Remove app").click()
                expect(page.get_by_role("heading", level=1)).to_have_text(f"{name} was not removed")
                expect(page.locator("[data-error-detail]")).to_contain_text("nothing was changed")
                context.close()
                kept = api.get(f"/api/agent/installations/{installation_id}").json()
                assert kept["status"] != "removed"
        finally:
            relay.cut()
            remove_containers(f"{PREFIX}ran-")
