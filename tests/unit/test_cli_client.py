"""The client commands' pure parts: env arguments and files, tables, what they print."""

from __future__ import annotations

import argparse
import io
import json
import re
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import strategies as s
from berth.client import ApiError, DeploymentStep, printable, render_problem
from berth.entrypoints.cli import remote as client
from berth.entrypoints.cli.main import _parser
from hypothesis import given
from hypothesis import strategies as st
from problems import problem_body


class TestEnvArgs:
    @given(s.env_maps)
    def test_round_trip(self, env: dict[str, str]) -> None:
        """Any env map written as KEY=VALUE arguments parses back equal, values untouched."""
        assert client.parse_env_args(f"{k}={v}" for k, v in env.items()) == env

    def test_split_at_first_equals(self) -> None:
        """Only the first `=` separates: the value keeps every later one."""
        assert client.parse_env_args(["A==b=c", "B="]) == {"A": "=b=c", "B": ""}

    def test_tricky_values_untouched(self) -> None:
        """Quotes, `$`, backticks, `$(…)` and newlines pass through byte for byte."""
        value = 'it\'s "$HOME" `id` $(rm -rf /)\nline 2 é 🚀'
        assert client.parse_env_args([f"X={value}"]) == {"X": value}

    def test_last_wins(self) -> None:
        """A key given twice keeps its last value."""
        assert client.parse_env_args(["A=1", "A=2"]) == {"A": "2"}

    def test_missing_equals_is_a_usage_error(self) -> None:
        """An argument without `=` is refused, naming where it came from."""
        with pytest.raises(client.UsageError, match="--env"):
            client.parse_env_args(["JUSTAKEY"])

    def test_key_is_left_to_berth(self) -> None:
        """Keys are not checked here: berth reports them at `body.env.<KEY>`."""
        assert client.parse_env_args(["1BAD=x"]) == {"1BAD": "x"}


class TestEnvFile:
    @given(
        st.dictionaries(
            s.env_keys, s.env_values.filter(lambda v: "\n" not in v and not v.endswith("\r"))
        )
    )
    def test_round_trip(self, env: dict[str, str]) -> None:
        """A file of KEY=VALUE lines parses back to the map (values without a newline)."""
        text = "".join(f"{k}={v}\n" for k, v in env.items())
        assert client.parse_env_file(text) == env

    def test_comments_blank_lines_crlf(self) -> None:
        """`#` lines and blank lines are skipped, CRLF endings dropped, values kept as is."""
        text = "# a comment\n\n   \n  # indented comment\r\nA=1 # not a comment\r\nB= 'q' \"$X\"\n"
        assert client.parse_env_file(text) == {"A": "1 # not a comment", "B": " 'q' \"$X\""}

    def test_line_without_equals(self) -> None:
        """A line without `=` is a usage error naming its line number."""
        with pytest.raises(client.UsageError, match="line 2"):
            client.parse_env_file("A=1\nOOPS\n", "env")


class TestTable:
    def test_columns_aligned(self) -> None:
        """Columns are padded to their widest cell; None shows as `-`."""
        table = client.render_table(("ID", "NAME"), [("1", "alpha"), ("22", None)])
        assert table == "ID  NAME\n1   alpha\n22  -\n"

    def test_empty(self) -> None:
        """No rows: the header alone."""
        assert client.render_table(("A", "B"), []) == "A  B\n"

    def test_newlines_escaped(self) -> None:
        """A cell with a newline stays on one line."""
        assert client.render_table(("M",), [("a\nb",)]) == "M\na\\nb\n"


def _problem(status: int, body: bytes) -> str:
    """What the CLI prints for an error answer (without the token hint)."""
    return "berth: " + render_problem(ApiError.of(status, body, {})) + "\n"


class TestProblem:
    def test_field_errors_listed(self) -> None:
        """Title, detail and each error's `location: message`, one per line."""
        body = problem_body(
            422,
            "invalid-input",
            "The request is invalid.",
            ("body.port", "Expected 1-65535."),
            ("body.image", "A tag is required."),
        )
        assert _problem(422, body).splitlines() == [
            "berth: 422 Unprocessable Entity",
            "  The request is invalid.",
            "  body.port: Expected 1-65535.",
            "  body.image: A tag is required.",
        ]

    def test_401_mentions_the_token(self) -> None:
        """A 401 tells the user to check the token, without showing it."""
        body = problem_body(401, "unauthorized", "x")
        args = argparse.Namespace(
            command="servers", url="http://berth.test", token="berth_s3cret", json=False
        )
        err = io.StringIO()
        answer = httpx.MockTransport(lambda request: httpx.Response(401, content=body))
        assert client.run(args, environ={}, out=io.StringIO(), err=err, transport=answer) == 1
        assert "Check the API token (BERTH_TOKEN or --token) for http://berth.test" in (
            err.getvalue()
        )
        assert "s3cret" not in err.getvalue()

    def test_not_json(self) -> None:
        """A body that is not a problem (a proxy's page) is shown cut short."""
        assert _problem(502, b"<html>bad gateway</html>") == (
            "berth: HTTP 502: <html>bad gateway</html>\n"
        )

    def test_a_servers_controls_are_shown_not_sent(self) -> None:
        """Escape sequences in a problem's text are printed as text, never to the terminal."""
        body = problem_body(409, "conflict", "taken by \x1b]0;pwned\x07 \x1b[2J")
        printed = _problem(409, body)
        assert "\x1b" not in printed
        assert "\x07" not in printed
        assert "taken by \\x1b]0;pwned\\x07 \\x1b[2J" in printed


class TestArguments:
    def test_env_and_volume_repeat(self) -> None:
        """`--env` and `--volume` collect every occurrence."""
        args = _parser().parse_args(
            [
                "deploy",
                "--server",
                "S",
                "--name",
                "n",
                "--image",
                "i:1",
                "--env",
                "A=1",
                "--env=B=-x",
                "--volume",
                "data:/data",
                "--volume",
                "/a:/b:ro",
            ]
        )
        assert args.env == ["A=1", "B=-x"]
        assert args.volume == ["data:/data", "/a:/b:ro"]

    @pytest.mark.parametrize(
        "argv",
        [
            ["--url", "http://a", "servers"],
            ["servers", "--url", "http://a"],
        ],
    )
    def test_url_anywhere(self, argv: list[str]) -> None:
        """`--url` works before or after the command."""
        assert _parser().parse_args(argv).url == "http://a"

    def test_missing_required_is_exit_2(self) -> None:
        """A missing required option is a usage error (exit code 2)."""
        with pytest.raises(SystemExit) as exc:
            _parser().parse_args(["installations"])
        assert exc.value.code == 2

    def test_no_token_is_exit_2(self) -> None:
        """Without BERTH_TOKEN or --token nothing is sent: exit code 2."""
        args = _parser().parse_args(["servers"])
        err = io.StringIO()
        assert client.run(args, environ={}, out=io.StringIO(), err=err) == 2
        assert "BERTH_TOKEN" in err.getvalue()

    def test_token_never_printed(self) -> None:
        """An unreachable berth is reported with its URL, never the token."""
        args = argparse.Namespace(
            command="servers", url="http://127.0.0.1:1", token="berth_s3cret", json=False
        )
        out, err = io.StringIO(), io.StringIO()
        assert client.run(args, environ={}, out=out, err=err) == 1
        assert "not reachable at http://127.0.0.1:1" in err.getvalue()
        assert "s3cret" not in err.getvalue() + out.getvalue()


class TestFollow:
    def test_step_line_is_time_step_message(self) -> None:
        """A step prints as ``HH:MM:SS step message``, its message on one line."""
        at = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
        line = client.step_line(DeploymentStep(id=7, at=at, step="health", message="a\nb"))
        assert line == "03:04:05 health a\\nb\n"

    def test_follow_and_wait_together_is_a_usage_error(self) -> None:
        """``deploy --follow --wait`` is refused (exit 2) before any request."""
        args = _parser().parse_args(
            ["deploy", "--server", "s", "--name", "n", "--image", "i:1", "--wait", "5", "--follow"]
        )
        err = io.StringIO()
        code = client.run(args, environ={"BERTH_TOKEN": "t"}, out=io.StringIO(), err=err)
        assert code == client.EXIT_USAGE
        assert "--follow" in err.getvalue()


class TestPrintable:
    """What the CLI prints of a server's or a container's text (issue 21, finding 10)."""

    @pytest.mark.parametrize(
        ("raw", "shown"),
        [
            ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
            ("50%\r100%", "50%\\r100%"),
            ("bell\x07 nul\x00 del\x7f", "bell\\x07 nul\\x00 del\\x7f"),
            ("csi\x9b2J nel\x85", "csi\\x9b2J nel\\x85"),
        ],
    )
    def test_controls_are_shown_as_python_writes_them(self, raw: str, shown: str) -> None:
        """C0 controls (but tab and newline), DEL and C1 controls become ``\\xNN``/``\\r``."""
        assert printable(raw) == shown

    @given(st.text(st.characters(exclude_categories=["Cc"])))
    def test_text_without_controls_is_untouched(self, text: str) -> None:
        """Letters, Unicode, symbols and line separators other than C0/C1 pass unchanged."""
        assert printable(text) == text

    def test_tab_and_newline_pass(self) -> None:
        """Tabs and newlines are layout, not commands: they stay."""
        assert printable("a\tb\nc ünïcødé ✓") == "a\tb\nc ünïcødé ✓"

    @given(st.text())
    def test_nothing_a_terminal_acts_on_is_left(self, text: str) -> None:
        """Whatever the text, what is printed holds no control but tab and newline."""
        assert all(c in "\t\n" or not (ord(c) < 32 or 127 <= ord(c) < 160) for c in printable(text))

    def test_table_cells_are_printable(self) -> None:
        """A table cell's controls are shown too (a container's name, a deployment's error)."""
        table = client.render_table(("M",), [("\x1b[2Jgone",)])
        assert table == "M\n\\x1b[2Jgone\n"


_TOKEN = {
    "id": "7d2f3c1e-0000-4000-8000-000000000001",
    "name": "ci",
    "teamId": "7d2f3c1e-0000-4000-8000-000000000002",
    "scopes": ["read"],
    "serverIds": None,
    "expiresAt": None,
    "createdAt": "2026-11-26T10:00:00Z",
    "lastUsedAt": None,
}


def _answering(bodies: dict[str, tuple[int, object]], seen: list[httpx.Request]) -> Any:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        status, body = bodies[f"{request.method} {request.url.path}"]
        return httpx.Response(status, json=body)

    return httpx.MockTransport(handle)


class TestTeamCommands:
    def test_scopes_and_servers_repeat_and_whoami_is_current(self) -> None:
        """`--scope` and `--server` collect every occurrence; `tokens whoami` is `current`."""
        args = _parser().parse_args(
            ["tokens", "create", "ci", "--scope", "read", "--scope=deploy", "--server", "S"]
        )
        assert (args.scopes, args.servers, args.team, args.expires) == (
            ["read", "deploy"],
            ["S"],
            None,
            None,
        )
        assert _parser().parse_args(["tokens", "whoami"]).tokens_action == "whoami"

    def test_the_secret_is_printed_once(self) -> None:
        """`tokens create` sends what was given and prints the secret; `tokens list` never."""
        seen: list[httpx.Request] = []
        transport = _answering(
            {
                "POST /api/agent/tokens": (201, {**_TOKEN, "token": "berth_s3cret"}),
                "GET /api/agent/tokens": (200, {"tokens": [_TOKEN]}),
            },
            seen,
        )
        env = {"BERTH_TOKEN": "berth_main"}
        out = io.StringIO()
        argv = ["tokens", "create", "ci", "--scope", "read", "--expires", "2027-01-31T00:00:00Z"]
        assert client.run(_parser().parse_args(argv), env, out, io.StringIO(), None, transport) == 0
        assert "token: berth_s3cret\n" in out.getvalue()
        assert json.loads(seen[0].content) == {
            "name": "ci",
            "scopes": ["read"],
            "expiresAt": "2027-01-31T00:00:00+00:00",
        }
        out = io.StringIO()
        parsed = _parser().parse_args(["tokens", "list"])
        assert client.run(parsed, env, out, io.StringIO(), None, transport) == 0
        assert "ci" in out.getvalue()
        assert "s3cret" not in out.getvalue()

    def test_an_unreadable_expiry_is_a_usage_error(self) -> None:
        """`--expires` that is no RFC 3339 time is exit 2 naming it; nothing is sent."""
        seen: list[httpx.Request] = []
        err = io.StringIO()
        argv = ["tokens", "create", "ci", "--scope", "read", "--expires", "tomorrow"]
        code = client.run(
            _parser().parse_args(argv),
            {"BERTH_TOKEN": "t"},
            io.StringIO(),
            err,
            None,
            _answering({}, seen),
        )
        assert code == 2
        assert "--expires" in err.getvalue()
        assert seen == []

    def test_an_invitation_link_is_accepted_by_its_token(self) -> None:
        """`invitations accept` takes the token or the link it came in."""
        member = {
            "userId": _TOKEN["id"],
            "email": "b@example.com",
            "role": "viewer",
            "joinedAt": "2026-11-26T10:00:00Z",
            "teamId": _TOKEN["teamId"],
        }
        for typed in ("tok123", "https://berth.example.com/invitations/tok123"):
            seen: list[httpx.Request] = []
            transport = _answering(
                {"POST /api/agent/invitations/tok123/accept": (200, member)}, seen
            )
            out = io.StringIO()
            args = _parser().parse_args(["invitations", "accept", typed])
            assert client.run(args, {"BERTH_TOKEN": "t"}, out, io.StringIO(), None, transport) == 0
            assert out.getvalue() == f"joined team {_TOKEN['teamId']} as viewer\n"


class TestStats:
    def test_the_container_id_is_short(self) -> None:
        """`berth stats` shows the container's id as `docker ps` does: its first 12
        characters, not all 64."""
        full = "0123456789ab" + "c" * 52
        iid = "6f1c2d3e-0000-4000-8000-000000000001"
        body = {
            "installationId": iid,
            "containerId": full,
            "stats": {"running": True, "cpuPercent": 1.5, "memoryBytes": 2048},
        }
        transport = _answering({f"GET /api/agent/installations/{iid}/stats": (200, body)}, [])
        out = io.StringIO()
        args = _parser().parse_args(["stats", iid])
        assert client.run(args, {"BERTH_TOKEN": "t"}, out, io.StringIO(), None, transport) == 0
        row = out.getvalue().splitlines()[1].split()
        assert row[0] == "0123456789ab"
        assert full not in out.getvalue()


class TestContainers:
    def test_the_image_id_is_short_and_the_json_whole(self) -> None:
        """`berth containers` shows the id of each container's image as `docker images`
        does (its first 12 hex digits, no `sha256:`), `-` where Docker did not say;
        `--json` prints it whole."""
        image_id = "sha256:" + "3f4e5d6c7b8a" + "0" * 52
        server = "6f1c2d3e-0000-4000-8000-000000000002"

        def row(name: str, image_id: str | None) -> dict[str, object]:
            return {
                "id": name * 64,
                "name": name,
                "image": "shop:2",
                "state": "running",
                "status": "Up 3 minutes",
                "createdAt": None,
                "ports": [],
                "installationId": None,
                "imageId": image_id,
            }

        body = {
            "serverId": server,
            "observedAt": "2026-11-28T06:00:00Z",
            "serverStatus": "online",
            "containers": [row("a", image_id), row("b", None)],
        }
        transport = _answering({f"GET /api/agent/servers/{server}/containers": (200, body)}, [])
        out = io.StringIO()
        args = _parser().parse_args(["containers", "--server", server])
        assert client.run(args, {"BERTH_TOKEN": "t"}, out, io.StringIO(), None, transport) == 0
        header, first, second = (
            re.split(r"\s{2,}", line) for line in out.getvalue().splitlines()[1:]
        )
        assert header == ["ID", "NAME", "IMAGE", "IMAGE ID", "STATE", "PORTS", "INSTALLATION"]
        assert first == ["a" * 12, "a", "shop:2", "3f4e5d6c7b8a", "running", "-", "-"]
        assert second == ["b" * 12, "b", "shop:2", "-", "running", "-", "-"]
        out = io.StringIO()
        args = _parser().parse_args(["containers", "--server", server, "--json"])
        assert client.run(args, {"BERTH_TOKEN": "t"}, out, io.StringIO(), None, transport) == 0
        assert [c["imageId"] for c in json.loads(out.getvalue())["containers"]] == [image_id, None]
