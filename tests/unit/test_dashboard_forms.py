"""The dashboard's forms map onto the API's parsers: same rules, errors beside their fields."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

import pytest
from berth.core.models import (
    BuildSpec,
    DeploymentSpec,
    GitSource,
    Installation,
    InstallationStatus,
)
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


def a_spec(image: str, **options: Any) -> DeploymentSpec:
    """A spec of ``image`` on port 3000 without domain, env or volumes, but for ``options``."""
    fields: dict[str, Any] = {"port": 3000, "domain": None, "env_keys": (), "volumes": ()}
    return DeploymentSpec(image=image, **(fields | options))


def installation_of(spec: DeploymentSpec, name: str = "shop") -> Installation:
    """A running installation ``name`` of ``spec``, its host port the spec's."""
    return Installation(
        id=uuid4(),
        server_id=SERVER,
        name=name,
        container_name=name,
        spec=spec,
        host_port=spec.port,
        status=InstallationStatus.RUNNING,
        created_at=EPOCH,
        updated_at=EPOCH,
    )


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
        spec = a_spec(
            "api:2",
            memory=cmd.memory,
            cpus=cmd.cpus,
            restart=cmd.restart,
            health_path=cmd.health_path,
            command=cmd.command,
        )
        again = DeployForm.redeploy(installation_of(spec, "api"))
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
        spec = a_spec("x:1", port=8080, env_keys=("A", "B"), volumes=("/a:/b",))
        shown = DeployForm.redeploy(installation_of(spec, "web"))
        assert (shown.name, shown.image, shown.port, shown.volumes) == (
            "web",
            "x:1",
            "8080",
            "/a:/b",
        )
        assert [(r.key, r.keep) for r in shown.env] == [("A", True), ("B", True), ("", False)]


class TestDeployFormSource:
    """The deploy form's Source: an image, or a Git repository built on the server."""

    def test_a_git_source_is_the_apis_build(self) -> None:
        """Source Git: url, ref, context, Dockerfile, target and the build arguments (a
        NAME=value per line) become the command's ``build``; the Image field is ignored."""
        shown, cmd = parse_deploy_form(
            SERVER,
            DeployForm(
                name="shop",
                source_type="git",
                image="left:over",
                git_url=" https://git.example.com/acme/shop.git ",
                git_ref="main",
                build_context="web",
                build_dockerfile="docker/App.dockerfile",
                build_target="prod",
                build_args="FLAVOUR=mint\r\n\nEMPTY=\nEQ=a=b\n",
            ),
        )
        assert cmd is not None, shown.errors
        assert cmd.image is None
        assert cmd.build == BuildSpec(
            git=GitSource(url="https://git.example.com/acme/shop.git", ref="main"),
            context="web",
            dockerfile="docker/App.dockerfile",
            target="prod",
            args={"FLAVOUR": "mint", "EMPTY": "", "EQ": "a=b"},
        )

    def test_a_git_source_without_ref_or_options_takes_the_defaults(self) -> None:
        """Only a URL: the repository's default branch, the root, ``Dockerfile``."""
        _, cmd = parse_deploy_form(
            SERVER,
            DeployForm(name="shop", source_type="git", git_url="https://git.example.com/s.git"),
        )
        assert cmd is not None
        assert cmd.build == BuildSpec(git=GitSource(url="https://git.example.com/s.git"))

    def test_an_image_source_ignores_the_git_fields(self) -> None:
        """Source Image (the default): the Git fields, even filled in, are not used."""
        for source in ("image", ""):
            shown, cmd = parse_deploy_form(
                SERVER,
                DeployForm(
                    name="shop", source_type=source, image="shop:1", git_url="ftp://x", git_ref="-x"
                ),
            )
            assert cmd is not None, shown.errors
            assert (cmd.image, cmd.build) == ("shop:1", None)

    def test_git_errors_are_beside_their_fields(self) -> None:
        """Every broken rule of the Git fields at once, each under its own field; a build
        argument's by its line or its name."""
        shown, cmd = parse_deploy_form(
            SERVER,
            DeployForm(
                name="shop",
                source_type="git",
                git_url="ftp://git.example.com/shop.git",
                git_ref="-x",
                build_context="../up",
                build_dockerfile="/abs",
                build_target="-t",
                build_args="GOOD=1\nno equals sign\n1BAD=x\nGOOD=2",
            ),
        )
        assert cmd is None
        assert set(shown.errors) == {
            "git_url",
            "git_ref",
            "build_context",
            "build_dockerfile",
            "build_target",
            "build_args",
        }
        assert "Line 2" in shown.errors["build_args"]
        assert "1BAD" in shown.errors["build_args"]
        assert "Line 4" in shown.errors["build_args"]
        assert shown.git

    def test_a_password_in_the_url_is_refused_and_not_shown_again(self) -> None:
        """A URL with a user and password is refused beside the URL, which comes back
        without them (never rendered into the page)."""
        shown, cmd = parse_deploy_form(
            SERVER,
            DeployForm(
                name="shop", source_type="git", git_url="https://me:s3cr3t@git.example.com/s.git"
            ),
        )
        assert cmd is None
        assert "user or password" in shown.errors["git_url"]
        assert shown.git_url == "https://git.example.com/s.git"

    def test_a_git_source_needs_a_url(self) -> None:
        """Source Git with the URL left empty: the error is beside the URL, not the image."""
        shown, cmd = parse_deploy_form(SERVER, DeployForm(name="shop", source_type="git"))
        assert cmd is None
        assert set(shown.errors) == {"git_url"}

    def test_an_unknown_source_is_refused(self) -> None:
        """A source other than image or git did not come from the form."""
        with pytest.raises(HTTPException):
            parse_deploy_form(SERVER, DeployForm(name="shop", source_type="svn", image="x:1"))

    def test_a_refusal_of_the_use_case_lands_beside_the_url(self) -> None:
        """An error the deploy use case finds (the outbound guard's, at ``build.git.url``)
        is shown beside the URL field."""
        from berth.core.errors import FieldError
        from berth.entrypoints.http.dashboard.forms import place_deploy_errors

        shown = DeployForm(source_type="git")
        place_deploy_errors(shown, (FieldError("build.git.url", "A private address."),))
        assert shown.errors == {"git_url": "A private address."}

    def test_redeploy_of_a_git_app_prefills_its_source(self) -> None:
        """A redeploy of an app built from Git: Source Git, with its URL, ref, and the
        options that differ from the defaults; the build's tag is not offered as image."""
        build = BuildSpec(
            git=GitSource(url="https://git.example.com/s.git", ref="main"),
            args={"A": "1", "B": "x=y"},
            target="prod",
        )
        spec = a_spec("berth/shop:0123456789ab", build=build)
        shown = DeployForm.redeploy(installation_of(spec))
        assert (shown.source_type, shown.image) == ("git", "")
        assert (shown.git_url, shown.git_ref) == ("https://git.example.com/s.git", "main")
        assert (shown.build_context, shown.build_dockerfile) == ("", "")
        assert (shown.build_target, shown.build_args) == ("prod", "A=1\nB=x=y")
        _, cmd = parse_deploy_form(SERVER, shown)
        assert cmd is not None
        assert cmd.build == build

    def test_redeploy_of_an_uploaded_build_offers_its_image(self) -> None:
        """A redeploy of an app built from an upload (which a browser does not send
        again): Source Image, the image that build made."""
        spec = a_spec("berth/shop:0123456789ab", build=BuildSpec(source_id=uuid4(), context="web"))
        shown = DeployForm.redeploy(installation_of(spec))
        assert (shown.source_type, shown.image, shown.git_url) == (
            "image",
            "berth/shop:0123456789ab",
            "",
        )
        assert shown.uploaded


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
