"""The whole Caddy JSON configuration for one server's routes: a pure function.

User values (domains) only ever travel as JSON string values: no Caddyfile, no
template, no text appended anywhere. Each domain is checked again here, so a value
that slipped past validation (or a Caddy placeholder like ``{env.X}``) never reaches
Caddy.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from berth.core.models import ProxyRoute
from berth.core.types import needs_internal_issuer

__all__ = ["ADMIN_ORIGIN", "SERVER_NAME", "Issuer", "IssuerSetting", "issuer_for", "render"]

ADMIN_ORIGIN = "caddy-admin"  # the Host header berth sends; the only one Caddy's admin allows
SERVER_NAME = "berth"  # the name of the one HTTPS server in ``apps.http.servers``

Issuer = Literal["acme", "internal"]
#: ``auto``: each domain by Caddy's own rule (``issuer_for``); else that issuer for all.
IssuerSetting = Literal["auto", "acme", "internal"]


def issuer_for(domain: str, setting: IssuerSetting = "auto") -> Issuer:
    """Who issues ``domain``'s certificate: the forced issuer, or under ``auto`` Caddy's
    internal CA for names no public CA will certify (``localhost``, ``*.localhost``,
    ``*.local``, ``*.internal``, ``*.home.arpa``, IP addresses) and ACME for the rest."""
    if setting != "auto":
        return setting
    return "internal" if needs_internal_issuer(domain) else "acme"


_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_DOMAIN = re.compile(rf"{_LABEL}(?:\.{_LABEL})+")


def render(
    routes: Sequence[ProxyRoute],
    *,
    admin_socket: str,
    https_port: int = 443,
    http_port: int = 80,
    issuer: IssuerSetting = "auto",
    acme_email: str | None = None,
) -> dict[str, Any]:
    """Caddy's configuration serving exactly ``routes``.

    * ``admin``: the admin API stays on the unix socket ``admin_socket`` (an absolute
      path on the server) and accepts only ``Host: caddy-admin``. Every configuration
      berth loads carries it, so a load never moves or opens the admin endpoint.
    * ``apps.http``: one server listening on ``https_port``, one terminal route per
      domain (in domain order) that reverse-proxies to ``127.0.0.1:<upstream_port>``.
      Caddy's automatic HTTPS redirects plain HTTP on ``http_port`` to HTTPS.
    * ``apps.tls``: automation policies whose subjects are exactly the domains: one
      per issuer used (``issuer_for``; ACME's first) — ``acme`` (Let's Encrypt, with
      ``acme_email`` if given) for public names, ``internal`` (Caddy's own CA, not
      installed into any trust store) for names that cannot get a public certificate,
      or the one ``issuer`` forced for all. An ACME-only policy never serves such a
      name: Caddy refuses it ("subject does not qualify for a public certificate")
      and every handshake hangs. Each policy is ``on_demand``: a handshake for one
      of its subjects whose certificate is not in memory loads it from storage (or
      obtains it) there and then. Caddy 2.6 starts every configuration it loads with
      an empty certificate cache and fills it in the background, so without this the
      handshakes of the first moments after each reload fail. Names outside the
      subjects match no on-demand policy: Caddy never obtains a certificate for them.

    Without routes, only the admin block: Caddy then listens on no public port.
    Raises ``ValueError`` for a domain that is not a lowercase DNS name, a domain
    routed twice, a port out of range, an unknown issuer, or an admin socket path
    that is not absolute.
    """
    if not admin_socket.startswith("/") or "\x00" in admin_socket:
        raise ValueError(f"The admin socket must be an absolute path, got {admin_socket!r}.")
    if issuer not in ("auto", "acme", "internal"):
        raise ValueError(f"Unknown issuer {issuer!r}: expected 'auto', 'acme' or 'internal'.")
    for port in (https_port, http_port):
        _check_port(port)
    if https_port == http_port:
        raise ValueError("The HTTPS and HTTP ports must differ.")
    config: dict[str, Any] = {
        "admin": {"listen": f"unix/{admin_socket}", "origins": [ADMIN_ORIGIN]},
    }
    if not routes:
        return config
    ordered = sorted(routes, key=lambda route: route.domain)
    domains = [route.domain for route in ordered]
    for route in ordered:
        if len(route.domain) > 253 or not _DOMAIN.fullmatch(route.domain):
            raise ValueError(f"Not a lowercase DNS name: {route.domain!r}.")
        _check_port(route.upstream_port)
    if len(set(domains)) != len(domains):
        raise ValueError("A domain is routed more than once.")
    server = {
        "listen": [f":{https_port}"],
        "routes": [
            {
                "match": [{"host": [route.domain]}],
                "handle": [
                    {
                        "handler": "reverse_proxy",
                        "upstreams": [{"dial": f"127.0.0.1:{route.upstream_port}"}],
                    }
                ],
                "terminal": True,
            }
            for route in ordered
        ],
    }
    by_issuer: dict[Issuer, list[str]] = {}
    for domain in domains:
        by_issuer.setdefault(issuer_for(domain, issuer), []).append(domain)
    policies = []
    for module in ("acme", "internal"):
        subjects = by_issuer.get(module)
        if not subjects:
            continue
        issuer_config: dict[str, Any] = {"module": module}
        if module == "acme" and acme_email:
            issuer_config["email"] = acme_email
        policies.append({"subjects": subjects, "issuers": [issuer_config], "on_demand": True})
    apps: dict[str, Any] = {
        "http": {
            "http_port": http_port,
            "https_port": https_port,
            "servers": {SERVER_NAME: server},
        },
        "tls": {"automation": {"policies": policies}},
    }
    if "internal" in by_issuer:
        apps["pki"] = {"certificate_authorities": {"local": {"install_trust": False}}}
    config["apps"] = apps
    return config


def _check_port(port: int) -> None:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"Not a TCP port: {port!r}.")
