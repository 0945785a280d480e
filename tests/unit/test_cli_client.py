"""The client commands' pure parts: env arguments and files, tables, problem rendering."""

from __future__ import annotations

import argparse
import io
import json

import pytest
import strategies as s
from berth.entrypoints.cli import client
from berth.entrypoints.cli.main import _parser
from hypothesis import given
from hypothesis import strategies as st


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


class TestProblem:
    def test_field_errors_listed(self) -> None:
        """Title, detail and each error's `location: message`, one per line."""
        body = json.dumps(
            {
                "type": "about:blank",
                "title": "Unprocessable Entity",
                "status": 422,
                "detail": "The request is invalid.",
                "errors": [
                    {"location": "body.port", "message": "Expected 1-65535.", "value": 0},
                    {"location": "body.image", "message": "A tag is required.", "value": "x"},
                ],
            }
        ).encode()
        text = client.render_problem(422, body, "http://b")
        assert text.splitlines() == [
            "berth: 422 Unprocessable Entity",
            "  The request is invalid.",
            "  body.port: Expected 1-65535.",
            "  body.image: A tag is required.",
        ]

    def test_401_mentions_the_token(self) -> None:
        """A 401 tells the user to check the token, without showing it."""
        body = b'{"title": "Unauthorized", "status": 401, "detail": "x", "errors": []}'
        text = client.render_problem(401, body, "http://b")
        assert "token" in text
        assert "BERTH_TOKEN" in text

    def test_not_json(self) -> None:
        """A body that is not a problem (a proxy's page) is shown cut short."""
        assert client.render_problem(502, b"<html>bad gateway</html>", "u") == (
            "berth: HTTP 502: <html>bad gateway</html>\n"
        )


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
    def test_sse_messages_are_read_as_a_client_reads_them(self) -> None:
        """Comments and ``retry`` are skipped; id, event and data come per message."""
        lines = [
            "retry: 2000",
            "",
            ": keep-alive",
            "",
            "id: 7",
            "event: step",
            'data: {"at":"2026-01-02T03:04:05.678Z","step":"pull","message":"m"}',
            "",
            "event: end",
            'data: {"state":"failed"}',
            "",
        ]
        assert list(client._sse_messages(lines)) == [
            ("7", "step", '{"at":"2026-01-02T03:04:05.678Z","step":"pull","message":"m"}'),
            (None, "end", '{"state":"failed"}'),
        ]

    def test_step_line_is_time_step_message(self) -> None:
        """A step prints as ``HH:MM:SS step message``, its message on one line."""
        data = json.dumps({"at": "2026-01-02T03:04:05.678Z", "step": "health", "message": "a\nb"})
        line = client._step_line(data)
        assert line.startswith("03:04:05 health a")
        assert line.endswith("\n")
        assert line.count("\n") == 1

    def test_follow_and_wait_together_is_a_usage_error(self) -> None:
        """``deploy --follow --wait`` is refused (exit 2) before any request."""
        args = _parser().parse_args(
            ["deploy", "--server", "s", "--name", "n", "--image", "i:1", "--wait", "5", "--follow"]
        )
        err = io.StringIO()
        code = client.run(args, environ={"BERTH_TOKEN": "t"}, out=io.StringIO(), err=err)
        assert code == client.EXIT_USAGE
        assert "--follow" in err.getvalue()
