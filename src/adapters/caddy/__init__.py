"""Caddy through its admin API: the ``ReverseProxy`` port.

berth renders the whole desired configuration of a server (every domain route) as
Caddy JSON and loads it atomically over the admin unix socket — the server's own for
the local server, one forwarded over SSH for the others (the SSH adapter hands over
its path; this package never imports it).
"""

from __future__ import annotations

from .admin import CaddyAdmin
from .config import ADMIN_ORIGIN, SERVER_NAME, Issuer, IssuerSetting, issuer_for, render

__all__ = [
    "ADMIN_ORIGIN",
    "SERVER_NAME",
    "CaddyAdmin",
    "Issuer",
    "IssuerSetting",
    "issuer_for",
    "render",
]
