"""The Caddy configuration berth loads: a pure function of a server's routes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from berth.adapters.caddy import render
from berth.core.models import ProxyRoute
from hypothesis import given
from hypothesis import strategies as st
from strategies import domains

SOCKET = "/run/berth/caddy-admin.sock"
ADMIN = {"listen": "unix//run/berth/caddy-admin.sock", "origins": ["caddy-admin"]}


def route(domain: str, port: int) -> ProxyRoute:
    return ProxyRoute(domain=domain, upstream_port=port)


def http_routes(config: dict[str, Any]) -> list[dict[str, Any]]:
    routes: list[dict[str, Any]] = config["apps"]["http"]["servers"]["berth"]["routes"]
    return routes


class TestRender:
    def test_no_routes_is_the_admin_block_alone(self) -> None:
        """Without routes Caddy gets its admin endpoint and nothing that listens publicly."""
        assert render([], admin_socket=SOCKET) == {"admin": ADMIN}

    def test_production_config(self) -> None:
        """Routes become one HTTPS server, host-matched reverse proxies and one ACME policy."""
        config = render(
            [route("b.example.com", 32001), route("a.example.com", 32000)],
            admin_socket=SOCKET,
            acme_email="ops@example.com",
        )
        assert config == {
            "admin": ADMIN,
            "apps": {
                "http": {
                    "http_port": 80,
                    "https_port": 443,
                    "servers": {
                        "berth": {
                            "listen": [":443"],
                            "routes": [
                                {
                                    "match": [{"host": ["a.example.com"]}],
                                    "handle": [
                                        {
                                            "handler": "reverse_proxy",
                                            "upstreams": [{"dial": "127.0.0.1:32000"}],
                                        }
                                    ],
                                    "terminal": True,
                                },
                                {
                                    "match": [{"host": ["b.example.com"]}],
                                    "handle": [
                                        {
                                            "handler": "reverse_proxy",
                                            "upstreams": [{"dial": "127.0.0.1:32001"}],
                                        }
                                    ],
                                    "terminal": True,
                                },
                            ],
                        }
                    },
                },
                "tls": {
                    "automation": {
                        "policies": [
                            {
                                "subjects": ["a.example.com", "b.example.com"],
                                "issuers": [{"module": "acme", "email": "ops@example.com"}],
                                "on_demand": True,
                            }
                        ]
                    }
                },
            },
        }

    def test_internal_issuer_for_tests(self) -> None:
        """The internal issuer: Caddy's own CA, never installed into a trust store; ports as set."""
        config = render(
            [route("app.example.com", 32000)],
            admin_socket="/tmp/x/admin.sock",
            https_port=8443,
            http_port=8080,
            issuer="internal",
        )
        assert config["admin"]["listen"] == "unix//tmp/x/admin.sock"
        http = config["apps"]["http"]
        assert (http["https_port"], http["http_port"]) == (8443, 8080)
        assert http["servers"]["berth"]["listen"] == [":8443"]
        (policy,) = config["apps"]["tls"]["automation"]["policies"]
        assert policy["issuers"] == [{"module": "internal"}]
        assert config["apps"]["pki"] == {
            "certificate_authorities": {"local": {"install_trust": False}}
        }

    def test_acme_without_email(self) -> None:
        """No email: the ACME issuer carries none (and there is no pki app)."""
        config = render([route("app.example.com", 32000)], admin_socket=SOCKET)
        (policy,) = config["apps"]["tls"]["automation"]["policies"]
        assert policy["issuers"] == [{"module": "acme"}]
        assert "pki" not in config["apps"]

    @given(st.lists(domains.map(str.lower), unique=True, min_size=1, max_size=8))
    def test_certificates_only_for_the_routed_domains(self, names: list[str]) -> None:
        """The TLS policies' subjects are exactly the routed domains, each once, sorted within
        a policy (one for public names, one for names only Caddy's own CA can sign)."""
        config = render([route(d, 30000 + i) for i, d in enumerate(names)], admin_socket=SOCKET)
        policies = config["apps"]["tls"]["automation"]["policies"]
        subjects = [name for policy in policies for name in policy["subjects"]]
        assert sorted(subjects) == sorted(names)
        assert all(policy["subjects"] == sorted(policy["subjects"]) for policy in policies)
        hosts = [r["match"][0]["host"] for r in http_routes(config)]
        assert hosts == [[d] for d in sorted(names)]
        assert json.loads(json.dumps(config)) == config  # plain JSON values, as Caddy echoes

    @given(st.lists(domains.map(str.lower), unique=True, max_size=6))
    def test_order_of_routes_does_not_matter(self, names: list[str]) -> None:
        """The same routes in any order render the same configuration (so ``matches`` holds)."""
        routes = [route(d, 30000 + i) for i, d in enumerate(names)]
        assert render(routes, admin_socket=SOCKET) == render(routes[::-1], admin_socket=SOCKET)


HOSTILE = [
    'a.com"}],"x":{"',
    "a.com/../x",
    "*.example.com",
    "exa mple.com",
    "ex\u0430mple.com",
    "$(id).example.com",
    "{env.HOME}.example.com",
    "example.com:443",
    "localhost",
    "Example.com",  # not lowercased: validation lowercases, so this never comes from berth
    "example.com.",
    "a" * 64 + ".example.com",
    "",
]


class TestRefusals:
    @pytest.mark.parametrize("domain", HOSTILE)
    def test_a_domain_that_is_not_a_dns_name_is_refused(self, domain: str) -> None:
        """Defence in depth: whatever slipped past validation never becomes configuration."""
        with pytest.raises(ValueError, match="Not a lowercase DNS name"):
            render([route(domain, 32000)], admin_socket=SOCKET)

    def test_a_domain_routed_twice_is_refused(self) -> None:
        """One domain, two upstreams: refused rather than guessed."""
        with pytest.raises(ValueError, match="more than once"):
            render([route("a.example.com", 1), route("a.example.com", 2)], admin_socket=SOCKET)

    @pytest.mark.parametrize("port", [0, 65536, -1])
    def test_bad_ports_are_refused(self, port: int) -> None:
        """Upstream, HTTPS and HTTP ports must be TCP ports; HTTPS and HTTP must differ."""
        with pytest.raises(ValueError, match="TCP port"):
            render([route("a.example.com", port)], admin_socket=SOCKET)
        with pytest.raises(ValueError, match="TCP port"):
            render([], admin_socket=SOCKET, https_port=port)
        with pytest.raises(ValueError, match="differ"):
            render([], admin_socket=SOCKET, https_port=8443, http_port=8443)

    @pytest.mark.parametrize("path", ["run/admin.sock", "", "/run/a\x00b"])
    def test_admin_socket_must_be_an_absolute_path(self, path: str) -> None:
        """The admin block names an absolute socket path on the server."""
        with pytest.raises(ValueError, match="absolute"):
            render([], admin_socket=path)

    def test_unknown_issuer_is_refused(self) -> None:
        """Only acme and internal issue certificates."""
        with pytest.raises(ValueError, match="issuer"):
            render([], admin_socket=SOCKET, issuer="selfsigned")  # type: ignore[arg-type]
