"""What a deploy may mount, through a real ``berth serve --local`` and a real Docker Engine
(issue 21, finding 2: the first account read berth's master key with a volume of the data
dir and a command that printed it)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from deploy_support import (
    ECHO_V1,
    FAST_ENV,
    RUN,
    get_json,
    host_port,
    local_server_id,
    remove_containers,
    wait_final,
    wait_online,
)
from harness import PASSWORD, Api, BerthProcess, cli, unique_email
from infra import build_cat_image

PREFIX = f"hostpaths-{RUN}-"


@dataclass
class Local:
    process: BerthProcess
    api: Api
    server_id: str
    cat: str  # the image that prints the files named on its command line

    @property
    def key(self) -> str:
        return (self.process.data_dir / "secret.key").read_text().strip()

    def deploy(self, name: str, **body: Any) -> Any:
        return self.api.post(
            "/api/agent/docker/deploy",
            params={"wait": 30},
            json={"serverId": self.server_id, "name": PREFIX + name, **body},
        )


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory, echo_image: str) -> Iterator[Local]:
    """``berth serve --local`` whose first account (the owner of this machine's server)
    has an API token, with the local server online."""
    data = tmp_path_factory.mktemp("host-paths") / "data"
    process = BerthProcess(data, env=FAST_ENV, args=["--local"]).start()
    try:
        _, token = process.new_users(1, "owner")[0]
        api = process.api(token)
        server_id = local_server_id(api)
        wait_online(api, server_id)
        yield Local(process, api, server_id, build_cat_image())
    finally:
        process.stop()
        remove_containers(PREFIX)


class TestBerthsOwnData:
    @pytest.mark.parametrize(
        ("mounted", "inside"),
        [
            pytest.param(".", "secret.key", id="the data dir"),
            pytest.param("secret.key", "", id="the key file"),
            pytest.param("..", "data/secret.key", id="the directory holding it"),
        ],
    )
    def test_the_master_key_cannot_be_read_through_a_volume(
        self, local: Local, mounted: str, inside: str
    ) -> None:
        """A deploy to this machine's server mounting berth's data dir (or its key, or a
        directory holding it) with a command that prints the key is a 422 at the volume,
        saying why; the key is nowhere in the answer, and nothing runs."""
        host = (local.process.data_dir / mounted).resolve()
        target = "/berth/" + inside if inside else "/berth"
        response = local.deploy(
            f"thief-{len(mounted)}",
            image=local.cat,
            port=host_port(),
            volumes=[f"{host}:/berth:ro"],
            command=[target],
        )
        if response.status_code in (200, 202):  # what finding 2 saw: say what leaked
            deployment = wait_final(local.api, response.json()["deployment"]["id"], 30)
            leaked = local.key in str(deployment["events"])
            pytest.fail(f"deploy accepted ({deployment['state']}); the key leaked: {leaked}")
        assert response.status_code == 422, response.text
        problem = response.json()
        [error] = problem["errors"]
        assert error["location"] == "body.volumes[0]"
        assert "berth's own data" in error["message"]
        assert local.key not in response.text
        listed = get_json(local.api, "/api/agent/install", serverId=local.server_id)
        assert not any(i["name"].startswith(PREFIX + "thief") for i in listed["installations"])

    @pytest.mark.parametrize(
        "volume",
        ["/etc:/host-etc:ro", "/proc:/p", "/run/containerd/containerd.sock:/c", "/var/lib:/v"],
    )
    def test_system_paths_are_refused_on_this_machine_too(self, local: Local, volume: str) -> None:
        """The paths refused on every server are refused on this one, naming the volume."""
        response = local.deploy("system", image=ECHO_V1, port=host_port(), volumes=[volume])
        assert response.status_code == 422, response.text
        assert [e["location"] for e in response.json()["errors"]] == ["body.volumes[0]"]

    def test_an_ordinary_volume_still_deploys(self, local: Local, tmp_path: Path) -> None:
        """A directory of one's own (beside berth's data dir, not holding it) deploys as
        before. (Relative paths, under /var/lib/berth/apps, are left to tests that do not
        share this machine's /var/lib/berth with the install script's.)"""
        port = host_port()
        response = local.deploy(
            "ordinary",
            image=ECHO_V1,
            port=port,
            env={"PORT": str(port)},
            volumes=[f"{tmp_path}:/mine:ro"],
        )
        assert response.status_code == 200, response.text
        assert response.json()["deployment"]["state"] == "succeeded"


class TestLocalOwner:
    def test_berth_local_owner_names_who_owns_this_machine(
        self, tmp_path: Path, docker_ready: None
    ) -> None:
        """With ``BERTH_LOCAL_OWNER`` this machine's server goes to that account, not to
        the first one, as soon as it exists."""
        owner = unique_email("ops")
        process = BerthProcess(
            tmp_path / "data", env={**FAST_ENV, "BERTH_LOCAL_OWNER": owner}, args=["--local"]
        ).start()
        try:
            _, first_token = process.new_users(1, "first")[0]
            cli(process.data_dir, "user", "create", "--email", owner, stdin=PASSWORD + "\n")
            token = cli(process.data_dir, "token", "regenerate", "--email", owner).stdout
            owners = process.api(token.strip())
            local_server_id(owners)
            assert [s["name"] for s in get_json(owners, "/api/agent/servers")["servers"]] == [
                "local"
            ]
            first = process.api(first_token)
            assert get_json(first, "/api/agent/servers")["servers"] == []
        finally:
            process.stop()
