"""The install script served at ``GET /api/deploy`` (``install.sh`` beside this module).

The only value put into it is berth's base URL, through ``shlex.quote``; the
script embeds no secret (the enrollment token is the script's argument).
"""

from __future__ import annotations

import shlex
from functools import cache
from importlib.resources import files

__all__ = ["render_install_script"]

_PLACEHOLDER = "BERTH_URL=@BERTH_URL@\n"


@cache
def _template() -> str:
    text = files(__package__).joinpath("install.sh").read_text(encoding="utf-8")
    if text.count(_PLACEHOLDER) != 1:
        raise RuntimeError("install.sh must assign BERTH_URL=@BERTH_URL@ exactly once")
    return text


def render_install_script(base_url: str) -> str:
    """The script text for a control plane at ``base_url`` (``http(s)://host[:port]``).

    Raises ``ValueError`` for a base URL with control characters: one line of shell is
    all it may take up.
    """
    if any(ord(c) < 32 or ord(c) == 127 for c in base_url):
        raise ValueError("The base URL must not contain control characters.")
    return _template().replace(_PLACEHOLDER, f"BERTH_URL={shlex.quote(base_url)}\n")
