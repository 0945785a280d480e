"""The ``berth`` client commands against a real ``berth serve``, as a user runs them.

The console script is run with ``BERTH_URL`` and ``BERTH_TOKEN`` in its environment.
Servers at 127.0.0.1:1 are unreachable, so deployments stay queued.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from uuid import UUID

import pytest
from harness import BERTH, BerthProcess, new_server

TRICKY = {
    "QUOTES": "it's \"quoted\" and 'single'",
    "SHELL": "$HOME `id` $(rm -rf /) ${X} ; | & \\",
    "LINES": "line 1\nline 2\r\n\ttabbed",
    "UNICODE": "ünïcødé ✓ 🚀",
    "EQUALS": "a=b==c",
    "EMPTY": "",
    "LEADING": "  spaced  ",
}


def run_cli(
    berth: BerthProcess, token: str, *args: str, extra: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``berth ARGS`` as a client of ``berth`` (token in the environment, not argv)."""
    env = {**os.environ, "BERTH_URL": berth.url, "BERTH_TOKEN": token, **(extra or {})}
    return subprocess.run(
        [BERTH, *args], capture_output=True, text=True, timeout=60, check=False, env=env
    )


def run_deploy(
    berth: BerthProcess, token: str, server_id: str, name: str, image: str, *options: str
) -> subprocess.CompletedProcess[str]:
    """``berth deploy --server SERVER_ID --name NAME --image IMAGE OPTIONS...`` (``run_cli``)."""
    return run_cli(
        berth, token, "deploy", "--server", server_id, "--name", name, "--image", image, *options
    )


def deployment_env(berth: BerthProcess, token: str, deployment_id: str) -> dict[str, str]:
    """The env values berth stored for a deployment, unsealed from its data dir."""
    from berth.adapters.secrets import KeyBox, load_or_create_key
    from berth.adapters.sql import SqlUnitOfWorkFactory, create_engine, sqlite_url
    from berth.core.commands import Authenticate
    from berth.entrypoints.bootstrap import bootstrap
    from berth.entrypoints.settings import Settings

    async def read() -> dict[str, str]:
        runtime = await bootstrap(Settings(data_dir=berth.data_dir))
        engine = create_engine(sqlite_url(berth.data_dir))
        try:
            actor = await runtime.bus.handle(Authenticate(token=token))
            box = KeyBox(load_or_create_key(berth.data_dir, None))
            async with SqlUnitOfWorkFactory(engine, box)() as tx:
                return await tx.deployments.env(actor.team_id, UUID(deployment_id))
        finally:
            await engine.dispose()
            await runtime.close()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, read()).result()


@pytest.fixture
def user(berth: BerthProcess) -> tuple[str, str]:
    """A fresh user's token and one (unreachable) server of theirs: ``(token, server id)``."""
    ((_, token),) = berth.new_users(1, "cli")
    with berth.api(token) as api:
        server = new_server(api)
    return token, str(server["id"])


class TestClient:
    def test_servers_lists_the_server(self, berth: BerthProcess, user: tuple[str, str]) -> None:
        """`berth servers` shows the user's server in a table; `--json` is the API's body."""
        token, server_id = user
        table = run_cli(berth, token, "servers")
        assert table.returncode == 0, table.stderr
        assert table.stdout.splitlines()[0].split() == ["ID", "NAME", "STATUS", "ADDRESS"]
        assert any(server_id in line and "127.0.0.1" in line for line in table.stdout.splitlines())
        raw = run_cli(berth, token, "servers", "--json")
        assert raw.returncode == 0, raw.stderr
        assert [s["id"] for s in json.loads(raw.stdout)["servers"]] == [server_id]
        assert token not in table.stdout + table.stderr + raw.stdout + raw.stderr

    def test_deploy_tricky_env(
        self, berth: BerthProcess, user: tuple[str, str], tmp_path: Path
    ) -> None:
        """Env values from --env and --env-file reach berth byte for byte; the app is listed."""
        token, server_id = user
        env_file = tmp_path / "app.env"
        env_file.write_bytes(b'# settings\n\nFROM_FILE=it\'s #1 "$PATH"\r\nLEADING=overridden\n')
        options = [
            "--json",
            "--port",
            "8080",
            "--env-file",
            str(env_file),
            "--volume",
            "data:/data",
        ]
        for key, value in TRICKY.items():
            options += ["--env", f"{key}={value}"]
        done = run_deploy(berth, token, server_id, "Shop App", "shop:1.0", *options)
        assert done.returncode == 0, done.stderr
        body = json.loads(done.stdout)
        deployment, installation = body["deployment"], body["installation"]
        assert deployment["state"] == "queued"
        expected = {**TRICKY, "FROM_FILE": 'it\'s #1 "$PATH"'}
        assert sorted(deployment["envKeys"]) == sorted(expected)
        assert deployment_env(berth, token, deployment["id"]) == expected

        listed = run_cli(berth, token, "installations", "--server", server_id)
        assert listed.returncode == 0, listed.stderr
        assert installation["id"] in listed.stdout
        assert "shop:1.0" in listed.stdout
        raw = run_cli(berth, token, "installations", "--server", server_id, "--json")
        assert [i["id"] for i in json.loads(raw.stdout)["installations"]] == [installation["id"]]

        shown = run_cli(berth, token, "deployment", deployment["id"])
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.splitlines()[0].split() == ["state:", "queued"]
        shown_json = run_cli(berth, token, "deployment", deployment["id"], "--json")
        assert json.loads(shown_json.stdout)["id"] == deployment["id"]

    def test_deploy_wait_still_queued_exits_3(
        self, berth: BerthProcess, user: tuple[str, str]
    ) -> None:
        """`deploy --wait` that ends while the deployment is still queued exits 3."""
        token, server_id = user
        done = run_deploy(berth, token, server_id, "waiter", "shop:1.0", "--wait", "1")
        assert done.returncode == 3, done.stderr
        assert "queued" in done.stdout

    def test_bad_deploy_lists_every_error(self, berth: BerthProcess, user: tuple[str, str]) -> None:
        """A deploy with several invalid fields prints each `location: message`, exit 1."""
        token, server_id = user
        done = run_deploy(
            berth,
            token,
            server_id,
            "x",
            "no-tag",
            "--port",
            "70000",
            "--domain",
            "nodot",
            "--env",
            "1BAD=secret-value",
            "--volume",
            "/:/x",
        )
        assert done.returncode == 1
        assert done.stdout == ""
        for location in ("body.image", "body.port", "body.domain", "body.env.1BAD", "body.volumes"):
            assert f"  {location}" in done.stderr, done.stderr
        assert "422" in done.stderr
        assert "secret-value" not in done.stderr

    def test_usage_errors_exit_2(self, berth: BerthProcess, user: tuple[str, str]) -> None:
        """A missing option or a malformed --env is a usage error: exit 2, nothing sent."""
        token, server_id = user
        assert run_cli(berth, token, "installations").returncode == 2
        done = run_deploy(berth, token, server_id, "n", "i:1", "--env", "NOEQUALS")
        assert done.returncode == 2
        assert "KEY=VALUE" in done.stderr

    def test_unknown_server_is_404(self, berth: BerthProcess, user: tuple[str, str]) -> None:
        """Another id than the user's gives the API's 404, exit 1."""
        token, _ = user
        done = run_cli(
            berth, token, "containers", "--server", "00000000-0000-4000-8000-000000000000"
        )
        assert done.returncode == 1
        assert done.stderr.startswith("berth: 404")

    def test_bad_token(self, berth: BerthProcess) -> None:
        """A wrong token exits 1 and says to check the token, without printing it."""
        bad = "berth_" + "A" * 49
        done = run_cli(berth, bad, "servers")
        assert done.returncode == 1
        assert "401" in done.stderr
        assert "token" in done.stderr.lower()
        assert bad not in done.stderr + done.stdout

    def test_not_reachable(self, berth: BerthProcess) -> None:
        """Nothing listening at the URL: exit 1 naming the URL."""
        done = run_cli(berth, "berth_x", "servers", extra={"BERTH_URL": "http://127.0.0.1:9"})
        assert done.returncode == 1
        assert "not reachable at http://127.0.0.1:9" in done.stderr


class TestRevisionCommands:
    def test_options_cancel_revisions_and_refusals(
        self, berth: BerthProcess, user: tuple[str, str]
    ) -> None:
        """Deploy options reach the API; `cancel` ends a queued deployment (twice: exit 1);
        `revisions` lists it; `rollback` with nothing to go back to and `stop` of an app
        that never ran exit 1 with berth's reason; `installations --all` keeps removed ones."""
        token, server_id = user
        done = run_deploy(
            berth,
            token,
            server_id,
            "opts",
            "shop:1.0",
            "--json",
            "--memory",
            "128m",
            "--cpus",
            "1.5",
            "--restart",
            "always",
            "--health-path",
            "/healthz",
            "--command",
            "node",
            "--command",
            "server.js; rm -rf /",
        )
        assert done.returncode == 0, done.stderr
        deployment = json.loads(done.stdout)["deployment"]
        assert deployment["memory"] == 128 * 1024 * 1024
        assert deployment["cpus"] == 1.5
        assert deployment["restart"] == "always"
        assert deployment["healthPath"] == "/healthz"
        assert deployment["command"] == ["node", "server.js; rm -rf /"]
        installation_id = deployment["installationId"]

        canceled = run_cli(berth, token, "cancel", deployment["id"])
        assert canceled.returncode == 0, canceled.stderr
        assert "canceled" in canceled.stdout
        again = run_cli(berth, token, "cancel", deployment["id"])
        assert again.returncode == 1
        assert "already ended" in again.stderr

        listed = run_cli(berth, token, "revisions", installation_id)
        assert listed.returncode == 0, listed.stderr
        assert deployment["id"] in listed.stdout
        assert listed.stdout.splitlines()[0].split()[:2] == ["DEPLOYMENT", "STATE"]

        nothing = run_cli(berth, token, "rollback", installation_id)
        assert nothing.returncode == 1
        assert "no earlier succeeded revision" in nothing.stderr
        never_ran = run_cli(berth, token, "stop", installation_id)
        assert never_ran.returncode == 1
        assert "409" in never_ran.stderr

        bad = run_cli(berth, token, "deploy", "--server", server_id, "--name", "x",
                      "--image", "shop:1.0", "--memory", "lots", "--cpus", "0")  # fmt: skip
        assert bad.returncode == 1
        assert "body.memory" in bad.stderr
        assert "body.cpus" in bad.stderr


class TestRegistries:
    """``berth registries list|add|remove``: the password never from argv, never printed."""

    def run(
        self, berth: BerthProcess, token: str, *args: str, stdin: str = "", **env: str
    ) -> subprocess.CompletedProcess[str]:
        environ = {k: v for k, v in os.environ.items() if k != "BERTH_REGISTRY_PASSWORD"}
        environ |= {"BERTH_URL": berth.url, "BERTH_TOKEN": token, **env}
        return subprocess.run(
            [BERTH, "registries", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=environ,
        )

    def test_add_list_remove_without_ever_printing_the_password(
        self, berth: BerthProcess, user: tuple[str, str]
    ) -> None:
        """Added from stdin or the environment, listed without it, removed by host or id."""
        token, _ = user
        from_stdin, from_env = "stdin-pw-" + os.urandom(6).hex(), "env-pw-" + os.urandom(6).hex()
        added = self.run(
            berth,
            token,
            "add",
            "one.example.com:5000",
            "-u",
            "bot",
            "--password-stdin",
            stdin=from_stdin + "\n",
        )
        assert added.returncode == 0, added.stderr
        assert "one.example.com:5000" in added.stdout
        by_env = self.run(
            berth,
            token,
            "add",
            "two.example.com",
            "--username",
            "ci",
            BERTH_REGISTRY_PASSWORD=from_env,
        )
        assert by_env.returncode == 0, by_env.stderr
        listed = self.run(berth, token, "list", "--json")
        assert listed.returncode == 0, listed.stderr
        registries = json.loads(listed.stdout)["registries"]
        assert [(r["host"], r["username"]) for r in registries] == [
            ("one.example.com:5000", "bot"),
            ("two.example.com", "ci"),
        ]
        removed = self.run(berth, token, "remove", "one.example.com:5000")
        assert removed.returncode == 0, removed.stderr
        by_id = self.run(berth, token, "remove", registries[1]["id"])
        assert by_id.returncode == 0, by_id.stderr
        table = self.run(berth, token, "list")
        assert table.stdout.splitlines() == ["ID  HOST  USERNAME  ADDED"]
        for result in (added, by_env, listed, removed, by_id, table):
            assert from_stdin not in result.stdout + result.stderr
            assert from_env not in result.stdout + result.stderr

    def test_no_password_is_a_usage_error(self, berth: BerthProcess, user: tuple[str, str]) -> None:
        """Without stdin, the environment or a terminal there is no password: exit 2."""
        token, _ = user
        result = self.run(berth, token, "add", "three.example.com", "-u", "bot")
        assert result.returncode == 2
        assert "--password-stdin" in result.stderr
        assert json.loads(self.run(berth, token, "list", "--json").stdout)["registries"] == []

    def test_refused_host_names_the_field(self, berth: BerthProcess, user: tuple[str, str]) -> None:
        """A host with a scheme is refused by berth: exit 1, ``body.host`` named."""
        token, _ = user
        result = self.run(
            berth,
            token,
            "add",
            "https://x.example.com",
            "-u",
            "bot",
            "--password-stdin",
            stdin="pw\n",
        )
        assert result.returncode == 1
        assert "body.host" in result.stderr


class TestInstallCommand:
    def test_a_pending_server_gets_a_new_install_command(self, berth: BerthProcess) -> None:
        """`berth servers install-command ID` prints a new install command for a pending
        server; for an enrolled one it fails with the API's reason."""
        ((_, token),) = berth.new_users(1, "cli-enroll")
        with berth.api(token) as api:
            pending = new_server(api, enrolled=False)
            enrolled = new_server(api)
        done = run_cli(berth, token, "servers", "install-command", str(pending["id"]))
        assert done.returncode == 0, done.stderr
        assert "BERTH_ENROLL_TOKEN=berth_enroll_" in done.stdout
        assert pending["enrollmentToken"] not in done.stdout
        refused = run_cli(berth, token, "servers", "install-command", str(enrolled["id"]))
        assert refused.returncode != 0
        assert "not pending" in refused.stderr


class TestTeamsAndTokens:
    """``berth teams|members|invitations|tokens|audit``: thin over the API, as a user runs them."""

    def test_a_token_is_created_shown_once_used_and_revoked(self, berth: BerthProcess) -> None:
        """`tokens create` prints the secret once; `tokens list` never; the read token
        reads but is refused a change (the API's 403 text); revoked, it is a 401."""
        ((_, token),) = berth.new_users(1, "cli-tokens")
        created = run_cli(berth, token, "tokens", "create", "ci reader", "--scope", "read")
        assert created.returncode == 0, created.stderr
        (secret,) = [
            line.removeprefix("token: ")
            for line in created.stdout.splitlines()
            if line.startswith("token: ")
        ]
        listed = run_cli(berth, token, "tokens", "list")
        assert listed.returncode == 0, listed.stderr
        assert "ci reader" in listed.stdout
        assert secret not in listed.stdout
        body = json.loads(run_cli(berth, token, "tokens", "list", "--json").stdout)
        (token_id,) = [t["id"] for t in body["tokens"]]
        current = run_cli(berth, secret, "tokens", "current")
        assert current.returncode == 0, current.stderr
        assert "scopes:  read\n" in current.stdout
        assert run_cli(berth, secret, "servers").returncode == 0
        refused = run_cli(berth, secret, "teams", "create", "nope")
        assert refused.returncode == 1
        assert refused.stderr.startswith("berth: 403 ")
        assert "`admin` scope" in refused.stderr
        revoked = run_cli(berth, token, "tokens", "revoke", token_id)
        assert revoked.returncode == 0, revoked.stderr
        gone = run_cli(berth, secret, "tokens", "whoami")
        assert gone.returncode == 1
        assert "berth: 401 " in gone.stderr
        assert secret not in gone.stderr

    def test_invite_accept_set_role_remove_and_the_audit(self, berth: BerthProcess) -> None:
        """Alice makes a team and invites bob; bob accepts the link; alice changes his
        role and removes him; the team's audit log shows each change, newest first."""
        (alice_email, alice), (bob_email, bob) = berth.new_users(2, "cli-teams")
        made = run_cli(berth, alice, "teams", "create", "Shop", "--json")
        assert made.returncode == 0, made.stderr
        team_id = json.loads(made.stdout)["id"]
        invited = run_cli(
            berth, alice, "members", "invite", team_id, bob_email, "--role", "deployer"
        )
        assert invited.returncode == 0, invited.stderr
        (link,) = [
            line.removeprefix("url: ")
            for line in invited.stdout.splitlines()
            if line.startswith("url: ")
        ]
        accepted = run_cli(berth, bob, "invitations", "accept", link)
        assert accepted.returncode == 0, accepted.stderr
        assert accepted.stdout == f"joined team {team_id} as deployer\n"
        teams = run_cli(berth, bob, "teams", "list")
        assert "Shop" in teams.stdout
        assert "deployer" in teams.stdout
        members = json.loads(run_cli(berth, alice, "members", "list", team_id, "--json").stdout)
        roles = {x["email"]: x["role"] for x in members["members"]}
        assert roles == {alice_email: "owner", bob_email: "deployer"}
        bob_id = next(x["userId"] for x in members["members"] if x["email"] == bob_email)
        changed = run_cli(berth, alice, "members", "set-role", team_id, bob_id, "viewer")
        assert changed.returncode == 0, changed.stderr
        assert "viewer" in changed.stdout
        removed = run_cli(berth, alice, "members", "remove", team_id, bob_id)
        assert removed.returncode == 0, removed.stderr
        audit = run_cli(berth, alice, "audit", "--team", team_id)
        assert audit.returncode == 0, audit.stderr
        actions = [line.split()[2] for line in audit.stdout.splitlines()[1:]]
        assert actions[:4] == ["member.remove", "member.role", "member.join", "member.invite"], (
            audit.stdout
        )
        page = json.loads(run_cli(berth, alice, "audit", "--team", team_id, "--json").stdout)
        assert all(e["outcome"] == "ok" for e in page["events"])
        assert run_cli(berth, bob, "audit", "--team", team_id).returncode == 1

    def test_hostile_input_gets_the_apis_problem(self, berth: BerthProcess) -> None:
        """Bad roles, scopes, emails and ids are the API's own problem text, every field
        named; an unreadable --expires is a usage error naming it."""
        ((_, token),) = berth.new_users(1, "cli-hostile")
        bad = run_cli(
            berth,
            token,
            "tokens",
            "create",
            "",
            "--scope",
            "root",
            "--server",
            "not-an-id",
            "--expires",
            "2020-01-01T00:00:00Z",
        )
        assert bad.returncode == 1
        assert bad.stderr.startswith("berth: 422 ")
        for field in ("body.name", "body.scopes", "body.serverIds", "body.expiresAt"):
            assert field in bad.stderr, (field, bad.stderr)
        team_id = json.loads(run_cli(berth, token, "tokens", "current", "--json").stdout)["teamId"]
        invite = run_cli(berth, token, "members", "invite", team_id, "x\x1b[2J", "--role", "boss")
        assert invite.returncode == 1
        assert "\x1b" not in invite.stderr
        assert invite.stderr.startswith("berth: 422 "), invite.stderr
        assert "body.email" in invite.stderr
        assert "body.role" in invite.stderr
        escaped = run_cli(berth, token, "members", "list", "../../servers")
        assert escaped.returncode == 1
        assert escaped.stderr == "berth: 404 Not Found\n"
        controls = run_cli(berth, token, "teams", "create", "shop \x1b]0;pwned\x07")
        assert controls.returncode == 1
        assert "body.name: Must not contain control characters." in controls.stderr
        usage = run_cli(
            berth, token, "tokens", "create", "x", "--scope", "read", "--expires", "soon"
        )
        assert usage.returncode == 2
        assert "--expires" in usage.stderr


class TestServersAndApps:
    def test_servers_add_and_remove(self, berth: BerthProcess) -> None:
        """`servers add NAME` registers a pending server and prints its install command;
        with --address and --key it is enrolled at once (no command); `servers remove ID`
        forgets it; `servers remove` without an id is exit 2."""
        from harness import HOST_KEY

        ((_, token),) = berth.new_users(1, "cli-servers")
        added = run_cli(berth, token, "servers", "add", "web-1")
        assert added.returncode == 0, added.stderr
        assert added.stdout.splitlines()[0].split() == ["ID", "NAME", "STATUS", "ADDRESS"]
        assert "pending" in added.stdout
        assert "BERTH_ENROLL_TOKEN=berth_enroll_" in added.stdout
        keyed = run_cli(berth, token, "servers", "add", "web-2", "--json",
                        "--address", "127.0.0.1", "--ssh-port", "1", "--key", HOST_KEY)  # fmt: skip
        assert keyed.returncode == 0, keyed.stderr
        server = json.loads(keyed.stdout)
        assert (server["name"], server["sshPort"], server["status"] != "pending") == (
            "web-2",
            1,
            True,
        )
        listed = run_cli(berth, token, "servers")
        assert "web-1" in listed.stdout
        assert "web-2" in listed.stdout
        removed = run_cli(berth, token, "servers", "remove", server["id"])
        assert removed.returncode == 0, removed.stderr
        after = run_cli(berth, token, "servers", "--json")
        assert [s["name"] for s in json.loads(after.stdout)["servers"]] == ["web-1"]
        missing = run_cli(berth, token, "servers", "remove")
        assert missing.returncode == 2
        assert "server's id" in missing.stderr

    def test_remove_an_app(self, berth: BerthProcess, user: tuple[str, str]) -> None:
        """`berth remove INSTALLATION_ID` removes the app: it leaves the list, and shows as
        removed with `installations --all`."""
        token, server_id = user
        done = run_cli(berth, token, "deploy", "--json", "--server", server_id,
                       "--name", "gone", "--image", "berth-demo:1")  # fmt: skip
        assert done.returncode == 0, done.stderr
        deployment = json.loads(done.stdout)["deployment"]
        assert run_cli(berth, token, "cancel", deployment["id"]).returncode == 0
        removed = run_cli(berth, token, "remove", deployment["installationId"])
        assert removed.returncode == 0, removed.stderr
        assert "removed" in removed.stdout
        listed = run_cli(berth, token, "installations", "--server", server_id)
        assert "gone" not in listed.stdout
        kept = run_cli(berth, token, "installations", "--server", server_id, "--all")
        assert "gone" in kept.stdout
        assert "removed" in kept.stdout
