"""The README's first deploy runs as written (issue 28, finding 2): its command blocks,
in order, in one ``bash``, against a real ``berth serve --local`` on a fresh data dir --
the CLI's (create the account, its token, deploy ``berth-demo:1``, ``curl`` the app) and
the HTTP API's (the same app again, through ``curl``). The only change made to them is
berth's address (this test's port for ``http://127.0.0.1:8080``). The library's examples
are run from their page by ``test_library.py``.

The blocks deploy on port 3000, as written: runs on this machine take turns at it
(``machine_lock``), and the app is removed at the end.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from harness import BERTH, BerthProcess
from infra import ECHO_DIR, build_static_image, machine_lock, unavailable

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCK = re.compile(r"^```sh\n(.*?)^```", re.MULTILINE | re.DOTALL)
MARK = "::berth-readme-block::"


def first_deploy_blocks() -> list[str]:
    """The ``sh`` blocks of the README's "A first deploy" section, in order."""
    text = README.read_text()
    section = text.split("\n## A first deploy\n", 1)[1].split("\n## ", 1)[0]
    return BLOCK.findall(section)


@pytest.fixture
def served(tmp_path: Path, docker_ready: None) -> Iterator[BerthProcess]:
    """A fresh ``berth serve --local`` (data in ``<tmp>/data``), with ``berth-demo:1``
    built as ``scripts/dev serve`` builds it, holding port 3000 for this test."""
    build_static_image(ECHO_DIR, "server", "berth-demo:1")
    with machine_lock("readme-port-3000"):
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", 3000)) == 0:
                unavailable("something else answers on 127.0.0.1:3000, where the README deploys")
        process = BerthProcess(tmp_path / "data", args=["--local"]).start()
        try:
            yield process
        finally:
            _remove_hello(process)
            process.stop()


def _remove_hello(process: BerthProcess) -> None:
    """Remove the README's app ``hello`` through the API (its container goes)."""
    from harness import cli

    found = cli(process.data_dir, "token", "regenerate", "--email", "you@example.com", check=False)
    token = found.stdout.strip()
    if found.returncode != 0 or not token:
        return
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=process.url, headers=headers, timeout=60) as api:
        for server in api.get("/api/agent/servers").json().get("servers", []):
            listed = api.get("/api/agent/install", params={"serverId": server["id"]}).json()
            for app in listed.get("installations", []):
                if app["name"] == "hello":
                    api.delete(f"/api/agent/installations/{app['id']}")


class TestReadme:
    def test_the_first_deploy_blocks_run_as_written(self, served: BerthProcess) -> None:
        """The README's CLI block creates the account and deploys berth-demo:1, which
        answers `hello from v1` on port 3000; its API block deploys the app again and
        answers with the deployment succeeded."""
        blocks = first_deploy_blocks()
        assert len(blocks) == 2, blocks
        script = f"\necho {MARK}\n".join(blocks).replace("http://127.0.0.1:8080", served.url)
        env = {**os.environ, "PATH": f"{Path(BERTH).parent}:{os.environ['PATH']}"}
        env.pop("BERTH_TOKEN", None)
        env.pop("BERTH_URL", None)
        done = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", script],
            cwd=served.data_dir.parent,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
        cli_out, api_out = done.stdout.split(f"{MARK}\n")
        assert cli_out.endswith("hello from v1\n"), cli_out
        answer = json.loads(api_out)
        assert answer["deployment"]["state"] == "succeeded", answer
        assert answer["deployment"]["envKeys"] == ["GREETING"]
        assert httpx.get("http://127.0.0.1:3000/", timeout=10).text == "hello from v1\n"
