"""The first account of a fresh berth needs the one-time setup code ``berth serve`` prints
(issue 21, finding 12: the first account went to whoever reached a fresh instance first —
under ``serve --local``, root on the machine). Through a real ``berth serve`` and its
dashboard's sign-up form."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from harness import PASSWORD, SETUP_LINK, BerthProcess, cli, unique_email

CSRF = re.compile(r'name="_csrf_token" value="([^"]+)"')


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[BerthProcess]:
    process = BerthProcess(tmp_path / "data").start()
    yield process
    process.stop()


def sign_up(process: BerthProcess, code: str, email: str | None = None) -> httpx.Response:
    """The dashboard's sign-up form, sent as a browser sends it (its CSRF cookie and field,
    from the sign-in page: once an account exists, sign-up shows no form)."""
    with httpx.Client(base_url=process.url, timeout=30, follow_redirects=True) as browser:
        form = browser.get("/login")
        token = CSRF.search(form.text)
        assert token, form.text
        return browser.post(
            "/signup",
            data={
                "_csrf_token": token[1],
                "email": email or unique_email("first"),
                "password": PASSWORD,
                "password_again": PASSWORD,
                "invite": code,
            },
        )


class TestSetupCode:
    def test_serve_prints_a_link_with_a_one_time_code(self, fresh: BerthProcess) -> None:
        """A fresh ``berth serve`` prints, in a line a person reads, the sign-up link at its
        own address with the code; the store keeps no copy of the code."""
        link = fresh.setup_link()
        assert link.startswith(f"{fresh.url}/signup?invite=berth_setup_")
        assert f"berth: open {link} in a browser and create your account" in fresh.logs()
        code = fresh.setup_code().encode()
        for stored in fresh.data_dir.glob("berth.db*"):  # the database, its WAL
            assert code not in stored.read_bytes()

    def test_without_the_code_the_first_sign_up_is_refused(self, fresh: BerthProcess) -> None:
        """No code, or a made-up one: 403, saying where the code is; no account is made."""
        for code in ("", "berth_setup_" + "A" * 49):
            response = sign_up(fresh, code)
            assert response.status_code == 403, response.text
            assert "berth serve" in response.text
        still = httpx.get(f"{fresh.url}/login", follow_redirects=True)
        assert still.url.path == "/signup"  # no account yet

    def test_the_printed_code_works_once(self, fresh: BerthProcess) -> None:
        """The printed code creates the first account (signed in); used again it admits
        nobody, and the next start prints no code."""
        code = fresh.setup_code()
        first = sign_up(fresh, code)
        assert first.status_code == 200, first.text
        assert first.url.path == "/servers"
        again = sign_up(fresh, code)
        assert again.status_code == 403
        assert "unknown, used or expired" in again.text
        fresh.stop()
        fresh.start()
        assert not SETUP_LINK.search(fresh.logs())

    def test_the_admin_command_needs_no_code(self, fresh: BerthProcess) -> None:
        """``berth user create`` acts on the data dir as its owner: no code is asked for,
        and the printed code admits nobody once that account exists."""
        email = unique_email("admin")
        cli(fresh.data_dir, "user", "create", "--email", email, stdin=PASSWORD + "\n")
        response = sign_up(fresh, fresh.setup_code())
        assert response.status_code == 403


class TestWhereBerthIs:
    """Issue 28, finding 1: berth's address is what serve was told or listens at, for the
    admin commands and the library too -- not a default that points elsewhere."""

    def test_serve_says_where_to_open_it(self, fresh: BerthProcess) -> None:
        """Once an account exists, serve's one human line says where to open it (its own
        address, not a default), and nothing about a setup code."""
        cli(fresh.data_dir, "user", "create", "--email", unique_email("o"), stdin=PASSWORD + "\n")
        fresh.stop()
        fresh.start()
        assert f"berth: open {fresh.url}/ in a browser and sign in." in fresh.logs()

    def test_invite_and_library_use_the_served_address(self, fresh: BerthProcess) -> None:
        """`berth user invite` and `berth.open(data_dir)` on serve's data dir give the
        address serve listens at (a random port here), not http://127.0.0.1:8080."""
        import asyncio

        import berth

        assert not fresh.url.endswith(":8080")
        link = cli(fresh.data_dir, "user", "invite").stdout.strip()
        assert link.startswith(f"{fresh.url}/signup?invite=")

        async def install_command() -> str | None:
            async with berth.open(fresh.data_dir) as b:
                user = await b.create_user(unique_email("lib"), PASSWORD)
                return (await b.create_server(user, name="web-1")).install_command

        command = asyncio.run(install_command())
        assert command is not None
        assert f"curl -fsSL {fresh.url}/api/deploy " in command

    def test_base_url_wins(self, tmp_path: Path) -> None:
        """With --base-url, serve's line, invitations and the library give that URL."""
        process = BerthProcess(tmp_path / "data", args=["--base-url", "https://berth.example"])
        process.start()
        try:
            assert "berth: open https://berth.example/signup?invite=" in process.logs()
        finally:
            process.stop()
        link = cli(process.data_dir, "user", "invite").stdout.strip()
        assert link.startswith("https://berth.example/signup?invite=")
