"""The install command berth shows for a new server: ``--insecure`` exactly when the
server would reach berth in clear over a network (issue 21, finding 12)."""

from __future__ import annotations

import pytest
from berth.entrypoints.install import install_command, loopback, plain_http

TOKEN = "berth_enroll_" + "A" * 49


@pytest.mark.parametrize(
    "base_url",
    [
        "http://127.0.0.1:8080",
        "http://127.8.9.10",
        "http://[::1]:8080",
        "http://localhost:8080",
        "http://LOCALHOST",
        "https://berth.example.com",
        "https://203.0.113.7:8443",
    ],
)
def test_https_or_this_machine_needs_no_insecure(base_url: str) -> None:
    """https:// anywhere, or plain http:// to loopback: the line has no --insecure."""
    assert not plain_http(base_url)
    assert install_command(base_url, TOKEN) == (
        f"curl -fsSL {base_url}/api/deploy | BERTH_ENROLL_TOKEN={TOKEN} sh"
    )


@pytest.mark.parametrize(
    "base_url",
    [
        "http://203.0.113.7:8080",
        "http://10.0.0.5:8080",
        "http://192.168.1.2",
        "http://[fd00::1]:8080",
        "http://berth.example.com",
        "http://berth.lan:8080",
    ],
)
def test_plain_http_to_another_machine_carries_insecure(base_url: str) -> None:
    """http:// to any other address or to a name (a private network too): the line
    carries --insecure, after --ssh-port when there is one, so it works as shown."""
    assert plain_http(base_url)
    assert install_command(base_url, TOKEN).endswith(" sh -s -- --insecure")
    assert install_command(base_url, TOKEN, 2222).endswith(" sh -s -- --ssh-port 2222 --insecure")


@pytest.mark.parametrize(
    ("base_url", "expected"),
    [
        ("http://127.0.0.1:8080", True),
        ("http://127.8.9.10", True),
        ("http://[::1]:8080", True),
        ("http://LOCALHOST:8080", True),
        ("https://app.localhost", True),
        ("http://10.0.0.5:8080", False),
        ("https://berth.example.com", False),
        ("http://[fd00::1]:8080", False),
    ],
)
def test_loopback_is_this_machine_only(base_url: str, expected: bool) -> None:
    """Only loopback names and addresses count as this machine's own (issue 28: a server
    elsewhere cannot fetch the install script there)."""
    assert loopback(base_url) is expected
