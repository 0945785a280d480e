"""The install script, rendered: ``install.sh`` beside this module with two values put in.

berth's base URL and the restrictions its key is authorized with
(``berth.core.types.KEY_RESTRICTIONS``, the one place they are written), each
through ``shlex.quote``. The script embeds no secret: the install command hands it the
enrollment token in its environment (``BERTH_ENROLL_TOKEN``), never as an argument, so that it
is not in ``ps``.
"""

from __future__ import annotations

import ipaddress
import shlex
from functools import cache
from importlib.resources import files
from urllib.parse import urlsplit

from berth.core.types import DEFAULT_SSH_PORT, KEY_RESTRICTIONS

__all__ = ["install_command", "loopback", "plain_http", "render_install_script"]

_URL = "BERTH_URL=@BERTH_URL@\n"
_RESTRICTIONS = "RESTRICTIONS=@KEY_RESTRICTIONS@\n"


@cache
def _template() -> str:
    text = files(__package__).joinpath("install.sh").read_text(encoding="utf-8")
    for placeholder in (_URL, _RESTRICTIONS):
        if text.count(placeholder) != 1:
            raise RuntimeError(f"install.sh must hold {placeholder.strip()} exactly once")
    return text.replace(_RESTRICTIONS, f"RESTRICTIONS={shlex.quote(KEY_RESTRICTIONS)}\n")


def render_install_script(base_url: str) -> str:
    """The script text for a control plane at ``base_url`` (``http(s)://host[:port]``).

    Raises ``ValueError`` for a base URL with control characters: one line of shell is
    all it may take up.
    """
    if any(ord(c) < 32 or ord(c) == 127 for c in base_url):
        raise ValueError("The base URL must not contain control characters.")
    return _template().replace(_URL, f"BERTH_URL={shlex.quote(base_url)}\n")


def plain_http(base_url: str) -> bool:
    """Whether a server reaches berth at ``base_url`` unencrypted over a network: ``http://``
    to anything but loopback. The install script then stops unless given ``--insecure``."""
    parts = urlsplit(base_url)
    if parts.scheme != "http":
        return False
    host = (parts.hostname or "").lower()
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name: it may lead anywhere
        return True


def loopback(base_url: str) -> bool:
    """Whether ``base_url`` names this machine's loopback (``localhost``, ``127.0.0.1``,
    ``[::1]``): only a server on this very machine reaches berth there."""
    host = (urlsplit(base_url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def install_command(base_url: str, enrollment_token: str, ssh_port: int = DEFAULT_SSH_PORT) -> str:
    """The one line that brings a server under management, run as root or as a user with
    sudo (the script then runs itself with sudo; no sudo is needed on a root-only
    machine). The token goes in the script's environment; a port other than 22 goes
    along as ``--ssh-port``, so that the script registers it rather than sshd's own; a
    ``plain_http`` base URL brings ``--insecure``, so that the line works as shown while
    it says what it risks."""
    args = [f"--ssh-port {ssh_port}"] if ssh_port != DEFAULT_SSH_PORT else []
    if plain_http(base_url):
        args.append("--insecure")
    options = f" -s -- {' '.join(args)}" if args else ""
    return f"curl -fsSL {base_url}/api/deploy | BERTH_ENROLL_TOKEN={enrollment_token} sh{options}"
