"""berth as a library: the documented example runs as written, the rules still hold, and
with ``worker=True, local=True`` a deployment runs in-process on this machine.

The first example is taken from docs/library.md (its first ``python`` block) and run in
a fresh directory with the project's Python, so the documentation cannot drift from what
the package does; the second (which needs the demo image built) is compiled, and the
methods the page lists are Berth's.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import berth
import pytest
from berth.core.errors import Conflict, FieldError, InvalidInput, NotFound
from deploy_support import (
    RUN,
    TRICKY_ENV,
    containers_of,
    environ_of,
    get_app,
    host_port,
    inspect_named,
    remove_containers,
)
from harness import HOST_KEY

T = TypeVar("T")

LIBRARY_PAGE = Path(__file__).resolve().parents[2] / "docs" / "library.md"
TEAMS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "teams.md"
PASSWORD = "correct horse battery staple"


def library_section() -> str:
    """The text of docs/library.md."""
    return LIBRARY_PAGE.read_text()


def readme_examples() -> list[str]:
    """The ```python blocks of docs/library.md, in order."""
    return re.findall(r"^```python\n(.*?)^```", library_section(), re.M | re.S)


def readme_example() -> str:
    """The first ```python block of docs/library.md."""
    examples = readme_examples()
    assert examples, "docs/library.md has no python block"
    return examples[0]


async def eventually(
    fetch: Callable[[], Awaitable[T]], done: Callable[[T], bool], seconds: float, what: str
) -> T:
    """Await ``fetch()`` every 0.1 s until ``done(value)``; fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        value = await fetch()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached within {seconds:g} s; last: {value!r}")
        await asyncio.sleep(0.1)


def run_example(source: str, where: Path) -> subprocess.CompletedProcess[str]:
    """Run a page's example as a script in the directory ``where``; it must exit 0."""
    script = where / "example.py"
    script.write_text(source)
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


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
    # Enrolled (host keys given), so it takes deploys; no worker or monitor runs here.
    added = await app.create_server(
        user, name="web-1", address="203.0.113.10", host_keys=[HOST_KEY]
    )
    return user, added.server


class TestReadmeExample:
    """The example in docs/library.md, exactly as written."""

    def test_example_runs_and_prints_pending(self, tmp_path: Path) -> None:
        """Run in an empty directory it exits 0, prints the install command and ``pending``,
        and creates ./data."""
        done = run_example(readme_example(), tmp_path)
        install, status = done.stdout.splitlines()
        assert install.startswith(
            "curl -fsSL http://127.0.0.1:8080/api/deploy | BERTH_ENROLL_TOKEN="
        )
        assert install.split("BERTH_ENROLL_TOKEN=")[1].startswith("berth_enroll_")
        assert status == "pending"
        assert "Traceback" not in done.stderr
        assert (tmp_path / "data" / "berth.db").is_file()

    def test_worker_example_compiles(self) -> None:
        """The second example (worker and local) is valid Python calling the facade."""
        examples = readme_examples()
        assert len(examples) == 2
        compile(examples[1], "docs/library.md", "exec")
        assert 'berth.open("./data", worker=True, local=True)' in examples[1]

    def test_method_list_is_the_facade(self) -> None:
        """The methods the page names are exactly Berth's public methods."""
        named = set(re.findall(r"\bapp\.([a-z_]+)\(", library_section()))
        public = {
            name
            for name, member in inspect.getmembers(berth.Berth, inspect.iscoroutinefunction)
            if not name.startswith("_")
        }
        assert named == public


class TestTeamsExample:
    def test_the_teams_pages_example_prints_what_it_says(self, tmp_path: Path) -> None:
        """docs/guide/teams.md's example, run as written on a new data dir: the agent's
        token sees its one server, is refused a new one, and the team's log holds every
        call, the refusal first."""
        (example,) = re.findall(r"^```python\n(.*?)^```", TEAMS_PAGE.read_text(), re.M | re.S)
        done = run_example(example, tmp_path)
        lines = done.stdout.splitlines()
        assert lines[0] == "['web-1']"
        assert lines[1].startswith("refused: This needs the `admin` scope")
        assert lines[2:] == [
            "server.create denied bob@example.com ci",
            "token.create ok bob@example.com library",
            "server.create ok ada@example.com library",
            "member.join ok bob@example.com library",
            "member.invite ok ada@example.com library",
            "team.create ok ada@example.com library",
        ]


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
                "server_id",
                "name",
                "image",
                "port",
                "domain",
                "env.1BAD",
                "env.OK",
                "volumes[0]",
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
        assert {e.location for e in exc.value.errors} == {"name", "address", "ssh_port"}

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
        assert all(loc.startswith(f"{field}") for loc in _locations(exc))
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


class TestWorkerInProcess:
    """``berth.open(worker=True, local=True)``: this process runs deployments on this machine."""

    async def test_deploy_wait_logs_remove(self, tmp_path: Path, echo_image: str) -> None:
        """Deploy, wait, answer, logs, removal and refused input, all without ``berth serve``."""
        name = f"lib-{RUN}-echo"
        port = host_port()
        tricky = TRICKY_ENV["EVERYTHING"]
        fast = berth.Settings(monitor_seconds=0.5, queue_timeout=60.0, health_timeout=30.0)
        try:
            async with berth.open(tmp_path / "data", worker=True, local=True, settings=fast) as app:
                user = await app.create_user(f"lib-{uuid.uuid4().hex[:8]}@example.com", PASSWORD)
                servers = await eventually(
                    lambda: app.servers(user),
                    lambda found: any(s.status == "online" for s in found),
                    30,
                    "this machine registered and online",
                )
                (server,) = servers
                assert server.transport == "local"

                with pytest.raises(InvalidInput) as exc:
                    await app.deploy(
                        user,
                        server_id=server.id,
                        name="",
                        image="echo",
                        port=70000,
                        env={"BAD KEY": "x", "NUL": "a\x00b"},
                        volumes=["/:/host"],
                    )
                assert sorted(_locations(exc)) == sorted(
                    [
                        "name",
                        "image",
                        "port",
                        "env.BAD KEY",
                        "env.NUL",
                        "volumes[0]",
                    ]
                )
                assert await app.deployments(user, server.id) == []

                result = await app.deploy(
                    user,
                    server_id=server.id,
                    name=name,
                    image=echo_image,
                    port=port,
                    env={"PORT": str(port), "TRICKY": tricky},
                )
                deployment = await app.wait(user, result.deployment.id, timeout=90)
                assert deployment.state == "succeeded", deployment
                assert [d.id for d in await app.deployments(user, server.id)] == [deployment.id]
                installation_id = result.installation.id
                assert (await app.installation(user, installation_id)).status == "running"

                answer = await asyncio.to_thread(get_app, port)
                assert answer.text == "hello from v1\n"
                environ = await asyncio.to_thread(environ_of, port)
                assert environ["TRICKY"] == tricky

                logs = await app.logs(user, str(installation_id), tail=10)
                inspected = await asyncio.to_thread(inspect_named, name)
                assert inspected is not None
                assert logs.container_id == inspected["Id"]
                assert f"echo v1: listening on {port}" in logs.lines
                listed = await app.containers(user, server.id)
                assert inspected["Id"] in {c.id for c in listed.containers}

                with pytest.raises(berth.Conflict):  # this machine, while berth manages it
                    await app.delete_server(user, server.id)

                stopped = await app.stop(user, installation_id)
                assert stopped.status == berth.InstallationStatus.STOPPED
                started = await app.start(user, str(installation_id))
                assert started.status == berth.InstallationStatus.RUNNING
                with pytest.raises(berth.Conflict) as nothing_before:
                    await app.rollback(user, installation_id, wait=5)
                assert nothing_before.value.kind == "revision-unavailable"
                with pytest.raises(berth.Conflict):  # it ended: nothing to cancel
                    await app.cancel(user, deployment.id)

                await app.remove_installation(user, installation_id)
                assert await asyncio.to_thread(inspect_named, name) is None
                assert await asyncio.to_thread(containers_of, str(installation_id)) == []
                removed = await app.installation(user, installation_id)
                assert removed.status == berth.InstallationStatus.REMOVED
                page = await app.revisions(user, installation_id)
                assert [d.id for d in page.deployments] == [deployment.id]
                with pytest.raises(berth.NotFound):
                    await app.remove_installation(user, installation_id)
            background = {"berth-worker", "berth-monitor"}
            assert not [t for t in asyncio.all_tasks() if t.get_name() in background]
        finally:
            await asyncio.to_thread(remove_containers, f"lib-{RUN}-")

    async def test_wait_without_a_worker_polls_until_the_timeout(
        self, app: Any, owner: Any
    ) -> None:
        """Nothing runs the deployment: ``wait`` returns it still queued once the time is up."""
        user, server = owner
        result = await app.deploy(user, server_id=server.id, name="shop", image="shop:1.0")
        started = time.monotonic()
        still = await app.wait(user, result.deployment.id, timeout=0.3)
        assert still.state == "queued"
        assert 0.3 <= time.monotonic() - started < 10


class TestRegistries:
    """Private registries through the facade: the API's rules, the password never returned."""

    async def test_add_list_remove(self, app: Any, owner: Any) -> None:
        """Saved, listed without the password, refused twice for one host, removed."""
        user, _ = owner
        saved = await app.add_registry(
            user, host="Lib.Example.com:5000", username="bot", password="lib-secret"
        )
        assert saved.host == "lib.example.com:5000"
        assert "lib-secret" not in repr(await app.registries(user))
        with pytest.raises(Conflict):
            await app.add_registry(
                user, host="lib.example.com:5000", username="bot", password="other"
            )
        stranger = await app.create_user(f"other-{uuid.uuid4().hex[:8]}@example.com", PASSWORD)
        with pytest.raises(NotFound):
            await app.remove_registry(stranger, saved.id)
        await app.remove_registry(user, str(saved.id))
        assert await app.registries(user) == []

    async def test_every_broken_rule_and_no_password_echoed(self, app: Any, owner: Any) -> None:
        """A bad host, user name and password are all reported; the password never echoed."""
        user, _ = owner
        with pytest.raises(InvalidInput) as exc:
            await app.add_registry(user, host="https://x", username="a:b", password="")
        assert sorted(_locations(exc)) == ["host", "password", "username"]
        assert all(e.value is None for e in exc.value.errors if e.location == "password")
