"""What apps use on their server, through the public API, on real Docker over SSH and
locally: an installation's CPU and memory (Docker's stats) and a server's Docker disk
usage (``/system/df``), with the CLI reading the same."""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import docker
import docker.errors
import pytest
from berth.adapters.docker.runtime import DF_BUSY
from deploy_support import Stack, deployed, get_json, host_port
from harness import BERTH, Api, new_server, problem
from infra import docker_client

pytestmark = pytest.mark.integration

MEMORY = 64 * 1024 * 1024


def _deploy_limited(api: Api, server_id: str, name: str, image: str) -> dict[str, object]:
    port = host_port()
    body = {
        "serverId": server_id,
        "name": name,
        "image": image,
        "port": port,
        "env": {"PORT": str(port)},
        "memory": "64m",
    }
    response = api.post("/api/agent/docker/deploy", params={"wait": 60}, json=body, timeout=90)
    _, installation = deployed(response, "succeeded")
    return installation


class TestInstallationStats:
    def test_a_running_app_reports_cpu_memory_and_its_limit(
        self, stack: Stack, target: tuple[Api, str, str], echo_image: str
    ) -> None:
        """The running container's figures: memory in use within its 64 MiB limit, a CPU
        share; Docker's own id for the container."""
        api, server_id, transport = target
        installation = _deploy_limited(api, server_id, stack.name(f"stats-{transport}"), echo_image)
        body = get_json(api, f"/api/agent/installations/{installation['id']}/stats")
        assert body["installationId"] == installation["id"]
        stats = body["stats"]
        assert stats["running"] is True
        assert stats["memoryLimitBytes"] == MEMORY
        assert 0 < stats["memoryBytes"] < MEMORY
        assert stats["cpuPercent"] is not None
        assert stats["cpuPercent"] >= 0
        client = docker_client()
        try:
            container = client.containers.get(body["containerId"])
            assert container.labels["berth.installation"] == installation["id"]
        finally:
            client.close()

    def test_a_stopped_app_has_no_figures(
        self, stack: Stack, target: tuple[Api, str, str], echo_image: str
    ) -> None:
        api, server_id, transport = target
        installation = _deploy_limited(api, server_id, stack.name(f"halt-{transport}"), echo_image)
        path = f"/api/agent/installations/{installation['id']}"
        assert api.post(f"{path}/stop").status_code == 200
        stats = get_json(api, f"{path}/stats")["stats"]
        assert stats == {
            "running": False,
            "cpuPercent": None,
            "memoryBytes": None,
            "memoryLimitBytes": None,
        }

    def test_a_removed_app_has_no_container(self, stack: Stack, echo_image: str) -> None:
        api, server_id = stack.alice.api, stack.alice.servers["local"]
        installation = _deploy_limited(api, server_id, stack.name("gone"), echo_image)
        path = f"/api/agent/installations/{installation['id']}"
        assert api.delete(path, timeout=90).status_code == 204
        body = get_json(api, f"{path}/stats")
        assert body == {"installationId": installation["id"], "containerId": None, "stats": None}

    def test_other_users_unknown_and_malformed_ids_are_404(
        self, stack: Stack, echo_image: str
    ) -> None:
        api, server_id = stack.alice.api, stack.alice.servers["local"]
        installation = _deploy_limited(api, server_id, stack.name("mine"), echo_image)
        problem(stack.bob.api.get(f"/api/agent/installations/{installation['id']}/stats"), 404)
        problem(api.get(f"/api/agent/installations/{uuid.uuid4()}/stats"), 404)
        # A path id that is not a UUID names no installation, as everywhere in the API.
        bad = problem(api.get("/api/agent/installations/not-an-id;rm%20-rf/stats"), 404)
        assert bad["detail"] == "Installation not found."


def images_counted(client: docker.APIClient) -> int:
    """The images Docker's ``/system/df`` counts but berth's port holder image (berth's
    own, not the user's), asked again while it counts for another caller (it refuses a
    second one meanwhile, ``DF_BUSY``)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            images = client.df()["Images"] or []
            return len([i for i in images if "berth.holder-image" not in (i["Labels"] or {})])
        except docker.errors.APIError as exc:
            if DF_BUSY not in str(exc.explanation) or time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def images_seen_still(api: Api, server_id: str, tries: int = 10) -> tuple[dict[str, Any], int]:
    """A disk usage answer of berth's and the number of images Docker counted just before
    and just after it, the same both times. Other test runs share this Engine and build or
    remove images at any time: a count that changed around the answer is asked again (at
    most ``tries`` times)."""
    client = docker.APIClient(base_url="unix:///var/run/docker.sock", timeout=120)
    try:
        for _ in range(tries):
            before = images_counted(client)
            body = get_json(api, f"/api/agent/servers/{server_id}/disk")
            if images_counted(client) == before:
                return body, before
    finally:
        client.close()
    raise AssertionError(f"the Engine's images changed around each of {tries} answers")


@contextlib.contextmanager
def others_counting_disk_usage(callers: int = 2) -> Iterator[list[int]]:
    """``callers`` threads asking the Engine's ``/system/df`` over and over while the block
    runs, as other programs on a server do (``docker system df``, another berth); the
    list of how many answers they got (refused ones not counted)."""
    stop = threading.Event()
    answered = [0] * callers

    def ask(n: int) -> None:
        client = docker.APIClient(base_url="unix:///var/run/docker.sock", timeout=60)
        try:
            while not stop.wait(0.01):
                with contextlib.suppress(docker.errors.APIError):
                    client.df()
                    answered[n] += 1
        finally:
            client.close()

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(callers)]
    for thread in threads:
        thread.start()
    try:
        yield answered
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)


class TestServerDisk:
    def test_docker_disk_usage_adds_up(self, stack: Stack, target: tuple[Api, str, str]) -> None:
        """The images are there (the test image at least), as many as Docker counts, and
        the total is the sum."""
        api, server_id, _ = target
        body, images = images_seen_still(api, server_id)
        assert body["serverId"] == server_id
        usage = body["usage"]
        assert usage["images"] >= 1
        assert usage["imagesBytes"] > 0
        parts = ("imagesBytes", "containersBytes", "volumesBytes", "buildCacheBytes")
        assert usage["totalBytes"] == sum(usage[p] for p in parts)
        assert usage["images"] == images

    def test_it_answers_while_others_count_on_the_same_engine(
        self, stack: Stack, target: tuple[Api, str, str]
    ) -> None:
        """Docker refuses a second disk usage count while one runs: berth asks again,
        and answers while others keep counting on the server's Engine."""
        api, server_id, _ = target
        with others_counting_disk_usage() as answered:
            statuses = [
                # berth asks Docker again for up to 30 s: the client waits longer than that
                api.get(f"/api/agent/servers/{server_id}/disk", timeout=90).status_code
                for _ in range(10)
            ]
        assert statuses == [200] * 10
        assert all(answered), answered  # they did count meanwhile

    def test_an_unreachable_server_is_a_503_and_others_a_404(self, stack: Stack) -> None:
        api = stack.alice.api
        offline = new_server(api)  # enrolled at 127.0.0.1:1, where nothing answers
        problem(api.get(f"/api/agent/servers/{offline['id']}/disk"), 503)
        problem(stack.bob.api.get(f"/api/agent/servers/{stack.alice.servers['ssh']}/disk"), 404)


def test_the_cli_prints_both(stack: Stack, echo_image: str) -> None:
    """``berth stats`` and ``berth disk`` print the API's figures (``--json`` as is)."""
    api, server_id = stack.alice.api, stack.alice.servers["local"]
    installation = _deploy_limited(api, server_id, stack.name("cli"), echo_image)
    env = {"BERTH_URL": stack.berth.url, "BERTH_TOKEN": stack.alice.token, "PATH": "/usr/bin"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [BERTH, *args], env=env, capture_output=True, text=True, timeout=60, check=False
        )

    shown = cli("stats", str(installation["id"]))
    assert shown.returncode == 0, shown.stderr
    assert "CPU" in shown.stdout
    assert "64.0 MiB" in shown.stdout
    raw = cli("--json", "stats", str(installation["id"]))
    assert json.loads(raw.stdout)["stats"]["memoryLimitBytes"] == MEMORY
    disk = cli("disk", server_id)
    assert disk.returncode == 0, disk.stderr
    assert "images" in disk.stdout
    assert "total" in disk.stdout
    missing = cli("stats", str(uuid.uuid4()))
    assert missing.returncode != 0
    assert "not found" in missing.stderr.lower()
