"""API tokens and the admin CLI against a running ``berth serve``.

Regeneration through the CLI takes effect in the serving process at once;
every kind of wrong token gets the same 401; the CLI's failures are one-line
messages on stderr, never tracebacks.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from berth.core import tokens
from harness import (
    PASSWORD,
    BerthProcess,
    cli,
    new_server,
    problem,
    unique_email,
    without_request_id,
)

TOKEN_LINE = re.compile(r"^berth_[0-9A-Za-z]{49}$")


def _whoami(berth: BerthProcess, token: str) -> httpx.Response:
    with berth.api(token) as api:
        return api.get("/api/agent/servers")


def _refused(response: httpx.Response) -> dict[str, object]:
    body = problem(response, 401)
    assert response.headers["www-authenticate"] == "Bearer"
    return without_request_id(body)


def _one_changed(token: str) -> str:
    i = len("berth_") + 20
    return token[:i] + ("a" if token[i] != "a" else "b") + token[i + 1 :]


def _last_changed(token: str) -> str:
    return token[:-1] + ("a" if token[-1] != "a" else "b")


# Ways to get a token wrong, from a valid one (an enrollment token is added per test).
MANGLED: dict[str, Callable[[str], str]] = {
    "one character changed": _one_changed,
    "checksum character changed": _last_changed,
    "truncated by one": lambda t: t[:-1],
    "truncated to the prefix": lambda t: t[:10],
    "with the enrollment prefix": lambda t: "berth_enroll_" + t.removeprefix("berth_"),
    "lower-cased": lambda t: t.lower(),
    "extra character": lambda t: t + "a",
    "well-formed but unknown": lambda _t: tokens.generate(),
}


class TestRegenerate:
    """``berth token regenerate`` while serve runs."""

    def test_old_token_refused_at_once_new_one_works(self, berth: BerthProcess) -> None:
        """After regeneration the old token gets 401 on the very next request; the new works."""
        ((email, old),) = berth.new_users(1, "regen")
        assert _whoami(berth, old).status_code == 200
        new = cli(berth.data_dir, "token", "regenerate", "--email", email).stdout.strip()
        assert new != old
        _refused(_whoami(berth, old))
        assert _whoami(berth, new).status_code == 200
        _refused(_whoami(berth, old))

    def test_prints_exactly_the_token(self, berth: BerthProcess) -> None:
        """stdout is one line, the token itself, and nothing is written to stderr."""
        ((email, _),) = berth.new_users(1, "regen-out")
        done = cli(berth.data_dir, "token", "regenerate", "--email", email)
        lines = done.stdout.split("\n")
        assert lines[1:] == [""], done.stdout
        assert TOKEN_LINE.match(lines[0]), lines[0]
        assert tokens.is_well_formed(lines[0])
        assert done.stderr == ""
        assert _whoami(berth, lines[0]).status_code == 200

    def test_unknown_email_fails_cleanly(self, berth: BerthProcess) -> None:
        """An email nobody has exits non-zero, prints no token, says so on stderr."""
        done = cli(
            berth.data_dir, "token", "regenerate", "--email", unique_email("nobody"), check=False
        )
        assert done.returncode != 0
        assert done.stdout == ""
        assert done.stderr.strip()
        assert "Traceback" not in done.stderr


class TestWrongTokens:
    """Every wrong token is a 401 with the same body: no hint which way it was wrong."""

    @pytest.fixture(scope="class")
    @staticmethod
    def valid(berth: BerthProcess) -> tuple[str, str]:
        """A user's valid token and an enrollment token of one of its servers."""
        ((_, token),) = berth.new_users(1, "wrong")
        with berth.api(token) as api:
            enrollment = new_server(api, enrolled=False)["enrollmentToken"]
        return token, enrollment

    @pytest.fixture(scope="class")
    @staticmethod
    def reference(berth: BerthProcess) -> dict[str, object]:
        """The 401 for a token that is plainly garbage."""
        return _refused(_whoami(berth, "garbage"))

    @pytest.mark.parametrize("how", list(MANGLED))
    def test_mangled_token_refused(
        self, berth: BerthProcess, valid: tuple[str, str], reference: dict[str, object], how: str
    ) -> None:
        """A valid token changed in one way is refused like garbage."""
        token, _ = valid
        wrong = MANGLED[how](token)
        assert wrong != token
        assert _refused(_whoami(berth, wrong)) == reference
        assert _whoami(berth, token).status_code == 200

    def test_enrollment_token_is_not_an_api_token(
        self, berth: BerthProcess, valid: tuple[str, str], reference: dict[str, object]
    ) -> None:
        """A server's enrollment token, valid for enrolling, is refused as an API token."""
        _, enrollment = valid
        assert tokens.is_well_formed(enrollment, tokens.ENROLL_PREFIX)
        assert _refused(_whoami(berth, enrollment)) == reference

    def test_api_token_shaped_enrollment_body_refused(
        self, berth: BerthProcess, valid: tuple[str, str], reference: dict[str, object]
    ) -> None:
        """The enrollment token with ``enroll_`` cut out (an API token's shape) is refused."""
        _, enrollment = valid
        assert _refused(_whoami(berth, enrollment.replace("berth_enroll_", "berth_"))) == reference


class TestUserCreate:
    """``berth user create`` refuses what it must, with a message and no traceback."""

    def test_duplicate_email_refused(self, berth: BerthProcess) -> None:
        """A second user with the same email (in any case) exits non-zero with a message."""
        ((email, _),) = berth.new_users(1, "dup")
        for again in (email, email.upper()):
            done = cli(
                berth.data_dir,
                "user",
                "create",
                "--email",
                again,
                stdin=PASSWORD + "\n",
                check=False,
            )
            assert done.returncode != 0
            assert done.stdout == ""
            assert done.stderr.strip()
            assert "Traceback" not in done.stderr

    @pytest.mark.parametrize("password", ["short", "x" * 1025])
    def test_weak_password_refused(self, tmp_path: Path, password: str) -> None:
        """A password outside 8 to 1,024 characters is refused and no user is created."""
        email = unique_email("weak")
        done = cli(tmp_path, "user", "create", "--email", email, stdin=password + "\n", check=False)
        assert done.returncode != 0
        assert done.stdout == ""
        assert "password" in done.stderr.lower()
        assert "Traceback" not in done.stderr
        assert password not in done.stderr
        if password == "short":
            regen = cli(tmp_path, "token", "regenerate", "--email", email, check=False)
            assert regen.returncode != 0, "the refused user was created anyway"
