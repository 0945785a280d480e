"""A newcomer's first hour (issue 28), as one person goes: ``scripts/dev serve`` from the
checkout, open the URL it prints, create the account, deploy the demo app from the
dashboard, see it answer -- in Debian's chromium, against what ``scripts/dev serve``
itself started (berth, its Caddy, the demo image ``berth-demo:1`` it builds when missing).

Its Debian packages and ``.venv`` are those ``scripts/dev test`` prepared (their checks are
quick when nothing is missing). The data dir and the port are the test's own
(``--data``, ``--listen``); the Caddy it starts is stopped at the end.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from deploy_support import RUN, host_port, remove_containers
from harness import PASSWORD, SETUP_LINK, unique_email
from infra import free_port, unavailable
from test_dashboard import launch_chromium

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect

ROOT = Path(__file__).resolve().parents[2]
DEV = ROOT / "scripts" / "dev"
#: The one human line ``serve`` prints as it starts.
OPEN_LINE = re.compile(r"^berth: open (http\S+) in a browser", re.MULTILINE)
APP = f"hello-{RUN}"


@dataclass
class DevServe:
    url: str  # where berth listens
    data_dir: Path
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def _stop_caddy(socket_path: Path) -> None:
    """Stop the Caddy ``scripts/dev serve`` started for this data dir (its admin API)."""
    if socket_path.exists():
        with contextlib.suppress(httpx.HTTPError):
            transport = httpx.HTTPTransport(uds=str(socket_path))
            with httpx.Client(transport=transport, timeout=10) as admin:
                admin.post("http://caddy-admin/stop", headers={"Host": "caddy-admin"})


@pytest.fixture(scope="module")
def dev_serve(tmp_path_factory: pytest.TempPathFactory, docker_ready: None) -> Iterator[DevServe]:
    """``scripts/dev serve --data <tmp> --listen 127.0.0.1:<free port>``, until its one
    human line is printed; stopped (SIGTERM) with its Caddy at the end."""
    if not (ROOT / ".venv" / "bin" / "berth").exists():
        unavailable("scripts/dev serve runs the checkout's .venv, which scripts/dev test makes")
    base = tmp_path_factory.mktemp("newcomer")
    data, log = base / "data", base / "serve.log"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "BERTH_CADDY_ADMIN_SOCKET"}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(DEV), "serve", "--data", str(data), "--listen", f"127.0.0.1:{port}"],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    served = DevServe(f"http://127.0.0.1:{port}", data, log)
    try:
        deadline = time.monotonic() + 240  # a first run builds the demo image
        while not OPEN_LINE.search(served.output()):
            assert proc.poll() is None, f"scripts/dev serve ended:\n{served.output()}"
            assert time.monotonic() < deadline, f"no 'open' line:\n{served.output()}"
            time.sleep(0.2)
        yield served
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        _stop_caddy(data / "caddy" / "admin.sock")
        remove_containers(APP)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with launch_chromium() as launched:
        yield launched


class TestNewcomer:
    def test_from_scripts_dev_serve_to_an_app_that_answers(
        self, dev_serve: DevServe, browser: Any
    ) -> None:
        """The newcomer's path: the one line `scripts/dev serve` prints opens the sign-up
        with the code filled in; the account owns this machine; the demo image it built
        deploys from the dashboard and answers on its port; its Caddy keeps its state in
        the data dir given (`--data`), not ./data. Add server says a server elsewhere
        cannot reach berth's loopback address."""
        output = dev_serve.output()
        opened = OPEN_LINE.findall(output)
        assert len(opened) == 1, output
        assert SETUP_LINK.search(opened[0]), output
        assert opened[0].startswith(f"{dev_serve.url}/signup?invite=")
        assert (dev_serve.data_dir / "caddy" / "admin.sock").exists()

        context = browser.new_context(viewport={"width": 1280, "height": 800})
        context.set_default_timeout(30_000)
        page = context.new_page()
        page.goto(opened[0])
        expect(page.get_by_role("heading", level=1)).to_have_text("Create the first account")
        page.get_by_label("Email").fill(unique_email("newcomer"))
        page.get_by_label("Password", exact=True).fill(PASSWORD)
        page.get_by_label("Password again").fill(PASSWORD)
        page.get_by_role("button", name="Create account").click()
        expect(page).to_have_url(re.compile(r"/servers$"))
        # Adding a server elsewhere: berth says its address is loopback, and what to do.
        page.goto(f"{dev_serve.url}/servers/new")
        note = page.locator("#loopback-note")
        expect(note).to_contain_text(f"{dev_serve.url}, this machine's own")
        expect(note).to_contain_text("--base-url")
        page.goto(f"{dev_serve.url}/servers")

        local = page.locator("tr", has=page.locator(".tag", has_text="this machine"))
        badge = local.locator("[data-state]")
        expect(badge).to_have_attribute("data-state", "online", timeout=60_000)
        local.get_by_role("link").first.click()
        page.get_by_role("link", name="Deploy an app").click()
        # On a phone, the options' Command label stands clear of the hint above it.
        page.set_viewport_size({"width": 390, "height": 844})
        page.locator("details.advanced summary").click()
        hint = page.locator("#health_path-hint").bounding_box()
        label = page.locator('label[for="command"]').bounding_box()
        assert hint is not None
        assert label is not None
        assert label["y"] - (hint["y"] + hint["height"]) >= 12, (hint, label)
        page.locator("details.advanced summary").click()
        page.set_viewport_size({"width": 1280, "height": 800})
        port = host_port()
        page.get_by_label("Name", exact=True).fill(APP)
        page.get_by_label("Image").fill("berth-demo:1")
        page.get_by_label("Port", exact=True).fill(str(port))
        page.locator('input[name="env_key"]').first.fill("PORT")  # the demo's own default: 3000
        page.locator('textarea[name="env_value"]').first.fill(str(port))
        page.locator("#deploy-form").get_by_role("button", name="Deploy").click()
        expect(page).to_have_url(re.compile(r"deployment="))
        found = re.search(r"deployment=([0-9a-f-]{36})", page.url)
        assert found, page.url
        badge = page.locator(f"#deployment-{found[1]} summary .badge")
        expect(badge).to_have_text(
            re.compile(r"succeeded|failed|timed out|canceled"), timeout=90_000
        )
        assert badge.inner_text() == "succeeded", page.locator(
            f"#deployment-{found[1]}"
        ).inner_text()
        answer = httpx.get(f"http://127.0.0.1:{port}/", timeout=10)
        assert answer.text == "hello from v1\n"
        context.close()
