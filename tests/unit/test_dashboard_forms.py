"""The dashboard's forms map onto the API's parsers: same rules, errors beside their fields."""

from __future__ import annotations

from uuid import uuid4

import pytest
from berth.core.models import DeploymentSpec, Installation, InstallationStatus
from berth.entrypoints.http.dashboard.forms import (
    DeployForm,
    ServerForm,
    parse_deploy_form,
    parse_server_form,
)
from fakes import EPOCH
from litestar.exceptions import HTTPException

SERVER = uuid4()

HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


class TestDeployForm:
    def test_a_valid_form_is_the_apis_command(self) -> None:
        """Fields become the command the API would build from the same JSON body."""
        shown, cmd = parse_deploy_form(
            SERVER,
            DeployForm(
                name=" My Shop ",
                image="shop:1.0",
                port="8080",
                domain="Shop.Example.com",
                env_key=["GREETING", "", "EMPTY"],
                env_value=["it's $HOME\r\nline 2", "", ""],
                volumes="/srv/a:/data\r\n\r\nuploads:/up:ro\n",
            ),
        )
        assert cmd is not None, shown.errors
        assert (cmd.name, cmd.container_name, cmd.image, cmd.port) == (
            "My Shop",
            "my-shop",
            "shop:1.0",
            8080,
        )
        assert cmd.domain == "shop.example.com"
        assert cmd.env == {"GREETING": "it's $HOME\nline 2", "EMPTY": ""}
        assert cmd.volumes == ("/srv/a:/data", "uploads:/up:ro")
        assert cmd.keep_env == frozenset()

    def test_options_reach_the_command_and_come_back_on_redeploy(self) -> None:
        """Memory, CPUs, restart, health path and the command (a word per line) become the
        command's options; a redeploy form shows them again, its section open."""
        shown, cmd = parse_deploy_form(
            SERVER,
            DeployForm(
                name="api",
                image="api:2",
                memory="512m",
                cpus="0.5",
                restart="on-failure",
                health_path="/healthz",
                command="node\r\nserver.js; rm -rf /\n\n",
            ),
        )
        assert cmd is not None, shown.errors
        assert (cmd.memory, cmd.cpus, cmd.restart.value, cmd.health_path) == (
            512 * 1024 * 1024,
            0.5,
            "on-failure",
            "/healthz",
        )
        assert cmd.command == ("node", "server.js; rm -rf /")
        assert shown.advanced
        spec = DeploymentSpec(
            image="api:2",
            port=3000,
            domain=None,
            env_keys=(),
            volumes=(),
            memory=cmd.memory,
            cpus=cmd.cpus,
            restart=cmd.restart,
            health_path=cmd.health_path,
            command=cmd.command,
        )
        again = DeployForm.redeploy(
            Installation(
                id=uuid4(),
                server_id=SERVER,
                name="api",
                container_name="api",
                spec=spec,
                host_port=3000,
                status=InstallationStatus.RUNNING,
                created_at=EPOCH,
                updated_at=EPOCH,
            )
        )
        assert (again.memory, again.cpus, again.restart, again.health_path) == (
            str(512 * 1024 * 1024),
            "0.5",
            "on-failure",
            "/healthz",
        )
        assert again.command == "node\nserver.js; rm -rf /"

    def test_bad_options_are_shown_beside_their_fields(self) -> None:
        """Each broken option is an error under its own field; nothing is deployed."""
        shown, cmd = parse_deploy_form(
            SERVER,
            DeployForm(name="api", image="api:2", memory="lots", cpus="none", health_path="x"),
        )
        assert cmd is None
        assert {"memory", "cpus", "health_path"} <= set(shown.errors)
        assert shown.advanced

    def test_empty_optional_fields_take_the_defaults(self) -> None:
        """No port, domain, env or volumes: port 3000 and nothing else."""
        _, cmd = parse_deploy_form(
            SERVER, DeployForm(name="web", image="x:1", port="", domain="", volumes="")
        )
        assert cmd is not None
        assert (cmd.port, cmd.domain, cmd.env, cmd.volumes) == (3000, None, {}, ())

    def test_every_error_is_beside_its_field(self) -> None:
        """All broken rules come back at once, each under the field it concerns."""
        shown, cmd = parse_deploy_form(
            SERVER,
            DeployForm(
                name="x",
                image="nginx",
                port="70000",
                domain="not a domain",
                env_key=["1BAD", "OK", "OK", ""],
                env_value=["v", "1", "2", "orphan"],
                volumes="/srv/a:/data\n../x:/y",
            ),
        )
        assert cmd is None
        assert set(shown.errors) == {"name", "image", "port", "domain", "env", "volumes"}
        assert shown.errors["volumes"].startswith("Line 2:")
        rows = {row.key: row.error for row in shown.env if row.key or row.value}
        assert rows["1BAD"] is not None
        assert [r.error for r in shown.env if r.key == "OK"] == [
            None,
            "This variable is set twice.",
        ]
        assert rows[""] == "Give the variable a name."

    def test_a_port_that_is_not_a_number_gets_the_apis_message(self) -> None:
        """Text in the port field is refused like a string in the JSON body."""
        shown, cmd = parse_deploy_form(SERVER, DeployForm(name="web", image="x:1", port="eighty"))
        assert cmd is None
        assert "integer" in shown.errors["port"]

    def test_env_values_are_never_kept_for_display(self) -> None:
        """A form re-shown after errors holds no env value a template could render."""
        shown, _ = parse_deploy_form(
            SERVER, DeployForm(name="x", image="bad", env_key="SECRET", env_value="hunter2")
        )
        rendered = repr(shown.errors) + repr([(r.key, r.keep, r.error) for r in shown.env])
        assert "hunter2" not in rendered

    def test_unchanged_values_are_kept(self) -> None:
        """A kept key left empty is kept; retyped, it takes the new value."""
        _, cmd = parse_deploy_form(
            SERVER,
            DeployForm(
                name="web",
                image="x:1",
                env_key=["A", "B"],
                env_value=["", "new"],
                env_keep=["A", "B"],
            ),
        )
        assert cmd is not None
        assert cmd.keep_env == frozenset({"A"})
        assert cmd.env == {"A": "", "B": "new"}

    def test_mismatched_rows_are_refused(self) -> None:
        """A body with more keys than values did not come from the form."""
        with pytest.raises(HTTPException):
            parse_deploy_form(
                SERVER, DeployForm(name="w", image="x:1", env_key=["A", "B"], env_value="1")
            )

    def test_redeploy_prefills_the_spec_and_keeps_env_keys(self) -> None:
        """The redeploy form shows the spec and each env key as unchanged."""
        installation = Installation(
            id=uuid4(),
            server_id=SERVER,
            name="web",
            container_name="web",
            spec=DeploymentSpec(
                image="x:1", port=8080, domain=None, env_keys=("A", "B"), volumes=("/a:/b",)
            ),
            host_port=8080,
            status=InstallationStatus.RUNNING,
            created_at=EPOCH,
            updated_at=EPOCH,
        )
        shown = DeployForm.redeploy(installation)
        assert (shown.name, shown.image, shown.port, shown.volumes) == (
            "web",
            "x:1",
            "8080",
            "/a:/b",
        )
        assert [(r.key, r.keep) for r in shown.env] == [("A", True), ("B", True), ("", False)]


class TestServerForm:
    def test_fields_become_the_create_server_command(self) -> None:
        """Name, address, SSH details and host keys as the API takes them."""
        key = f"{HOST_KEY} comment"
        shown, cmd = parse_server_form(
            ServerForm(
                name="web-1",
                address="203.0.113.7",
                ssh_port="2222",
                ssh_user="deploy",
                host_keys=f"{key}\r\n",
            )
        )
        assert cmd is not None, shown.errors
        assert (cmd.name, cmd.address, cmd.ssh_port, cmd.ssh_user) == (
            "web-1",
            "203.0.113.7",
            2222,
            "deploy",
        )
        assert cmd.host_keys == (HOST_KEY,)

    def test_errors_are_beside_their_fields(self) -> None:
        """Every broken rule of the API, under its field; SSH errors open the section."""
        shown, cmd = parse_server_form(ServerForm(name="", ssh_port="0", host_keys="nonsense"))
        assert cmd is None
        assert set(shown.errors) == {"name", "ssh_port", "host_keys"}
        assert shown.advanced
