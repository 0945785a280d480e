"""berth as a library: the README example runs as written, and the rules still hold.

The example is taken from README.md (the ``python`` block under "## As a
library") and run in a fresh directory with the project's Python, so the
documentation cannot drift from what the package does.
"""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import berth
import pytest
from berth.core.errors import FieldError, InvalidInput, NotFound

README = Path(__file__).resolve().parents[2] / "README.md"
PASSWORD = "correct horse battery staple"


def readme_example() -> str:
    """The first ```python block after the "## As a library" heading."""
    text = README.read_text()
    section = text.split("\n## As a library\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"^```python\n(.*?)^```", section, re.M | re.S)
    assert found, "README.md has no python block under '## As a library'"
    return found.group(1)


def _locations(exc: pytest.ExceptionInfo[InvalidInput]) -> list[str]:
    return [e.location for e in exc.value.errors]


@pytest.fixture
async def app(tmp_path: Path) -> Any:
    """A berth opened on this test's own data dir."""
    async with berth.open(tmp_path / "data") as opened:
        yield opened


@pytest.fixture
async def owner(app: Any) -> Any:
    """``(user, server)``: a user of ``app`` with one server."""
    user = await app.create_user(f"lib-{uuid.uuid4().hex[:8]}@example.com", PASSWORD)
    server = await app.create_server(user, name="web-1", address="203.0.113.10")
    return user, server


class TestReadmeExample:
    """The example in README.md, exactly as written."""

    def test_example_runs_and_prints_queued(self, tmp_path: Path) -> None:
        """Run in an empty directory it exits 0, prints only ``queued`` and creates ./data."""
        script = tmp_path / "example.py"
        script.write_text(readme_example())
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout == "queued\n"
        assert "Traceback" not in done.stderr
        assert (tmp_path / "data" / "berth.db").is_file()


class TestFacadeRules:
    """The facade goes through the API's parsers: bad input raises InvalidInput, all at once."""

    async def test_deploy_lists_every_broken_rule(self, app: Any, owner: Any) -> None:
        """Each bad argument of deploy is reported, in one InvalidInput."""
        user, _ = owner
        with pytest.raises(InvalidInput) as exc:
            await app.deploy(
                user,
                server_id="not-a-uuid",
                name="",
                image="nginx",
                port=0,
                domain="-bad-.example.com",
                env={"1BAD": "x", "OK": "nul\x00"},
                volumes=["/var/run/docker.sock:/sock"],
            )
        assert sorted(_locations(exc)) == sorted(
            [
                "deploy.serverId",
                "deploy.name",
                "deploy.image",
                "deploy.port",
                "deploy.domain",
                "deploy.env.1BAD",
                "deploy.env.OK",
                "deploy.volumes[0]",
            ]
        )
        assert all(isinstance(e, FieldError) and e.message for e in exc.value.errors)

    async def test_create_user_lists_every_broken_rule(self, app: Any) -> None:
        """A bad email and a short password are both reported; the password is not echoed."""
        with pytest.raises(InvalidInput) as exc:
            await app.create_user("not an email", "short")
        assert sorted(_locations(exc)) == ["email", "password"]
        assert all(e.value != "short" for e in exc.value.errors)

    async def test_create_server_lists_every_broken_rule(self, app: Any, owner: Any) -> None:
        """A bad server name, address and SSH port are all reported."""
        user, _ = owner
        with pytest.raises(InvalidInput) as exc:
            await app.create_server(user, name="", address="not an address!", ssh_port=70000)
        assert len(exc.value.errors) == 3
        assert all(e.location.startswith("server.") for e in exc.value.errors)

    @pytest.mark.parametrize(
        ("field", "value"),
        [
            pytest.param("port", "80", id="port as a string"),
            pytest.param("port", 80.0, id="port as a float"),
            pytest.param("port", True, id="port as a bool"),
            pytest.param("image", "nginx", id="image without tag"),
            pytest.param("image", "nginx:latest@sha256:abc", id="image with a short digest"),
            pytest.param("domain", "", id="empty domain"),
            pytest.param("env", {"KEY": 1}, id="env value not a string"),
            pytest.param("volumes", ["/:/host"], id="the host root as a volume"),
            pytest.param("volumes", ["../etc:/etc"], id="a volume escaping with .."),
        ],
    )
    async def test_no_rule_can_be_bypassed(
        self, app: Any, owner: Any, field: str, value: object
    ) -> None:
        """A library caller gets the API's 422 rules: no coercion, no default image tag."""
        user, server = owner
        kwargs: dict[str, Any] = {"server_id": server.id, "name": "shop", "image": "shop:1.0"}
        kwargs[field] = value
        with pytest.raises(InvalidInput) as exc:
            await app.deploy(user, **kwargs)
        assert _locations(exc)
        assert all(loc.startswith(f"deploy.{field}") for loc in _locations(exc))
        assert not (await app.installations(user, server.id)).installations

    async def test_other_users_server_is_not_found(self, app: Any, owner: Any) -> None:
        """Ownership holds without HTTP: another user's server is NotFound."""
        _, server = owner
        stranger = await app.create_user(f"other-{uuid.uuid4().hex[:8]}@example.com", PASSWORD)
        with pytest.raises(NotFound):
            await app.deploy(stranger, server_id=server.id, name="shop", image="shop:1.0")
        with pytest.raises(NotFound):
            await app.installations(stranger, server.id)

    async def test_valid_deploy_is_queued(self, app: Any, owner: Any) -> None:
        """A valid deploy through the facade is queued, env keys recorded, values not exposed."""
        user, server = owner
        result = await app.deploy(
            user, server_id=str(server.id), name="Shop", image="shop:1.0", env={"A": "secret"}
        )
        assert result.deployment.state.value == "queued"
        assert result.installation.container_name == "shop"
        assert result.deployment.spec.env_keys == ("A",)
