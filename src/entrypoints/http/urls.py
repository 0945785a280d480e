"""berth's own base URL, as the install script and install commands give it."""

from __future__ import annotations

import re
from typing import Any

from litestar import Request

from ..settings import Settings

__all__ = ["base_url"]

_SAFE_NETLOC = re.compile(r"^[A-Za-z0-9.\-]+(?::[0-9]{1,5})?$|^\[[0-9A-Fa-f:.]+\](?::[0-9]{1,5})?$")


def base_url(request: Request[Any, Any, Any], settings: Settings) -> str:
    """``BERTH_BASE_URL`` if set, else this request's scheme and Host.

    A hostile Host header never reaches a script or a command line: a Host that is not
    a plain host[:port] is replaced by the address berth listens on.
    """
    if settings.base_url:
        return settings.base_url.rstrip("/")
    netloc = request.url.netloc
    if not _SAFE_NETLOC.match(netloc):
        netloc = f"{settings.listen_host}:{settings.listen_port}"
    return f"{request.url.scheme}://{netloc}"
