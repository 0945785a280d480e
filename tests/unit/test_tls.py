"""TLS by Caddy's own rule: which names need the internal issuer, the Caddy policies that
follow, and how a probe through the proxy is judged and recorded after a deployment."""

from __future__ import annotations

import ipaddress

import pytest
from berth.adapters.caddy import issuer_for, render
from berth.core.models import DeploymentState, ProxyProbe, ProxyRoute, TlsState
from berth.core.types import needs_internal_issuer
from berth.core.use_cases.tls import judge
from hypothesis import given
from hypothesis import strategies as st
from strategies import domains
from test_domain_switch import DOMAIN, Rig

SOCKET = "/run/berth/caddy-admin.sock"
PRIVATE_SUFFIXES = ("localhost", "local", "internal", "home.arpa")

labels = st.from_regex(r"[a-z0-9](?:[a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)


def _public(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return not any(name == s or name.endswith("." + s) for s in PRIVATE_SUFFIXES)
    return False


class TestNameRule:
    @given(st.lists(labels, min_size=1, max_size=3), st.sampled_from(PRIVATE_SUFFIXES))
    def test_private_suffixes_need_the_internal_issuer(self, head: list[str], suffix: str) -> None:
        """Any name under localhost, local, internal or home.arpa is internal."""
        assert needs_internal_issuer(".".join([*head, suffix]))

    @given(st.sampled_from(PRIVATE_SUFFIXES), st.booleans(), st.booleans())
    def test_case_and_a_trailing_dot_do_not_matter(self, name: str, upper: bool, dot: bool) -> None:
        """``BLOG.LOCALHOST.`` is ``blog.localhost``."""
        shown = ("blog." + name).upper() if upper else "blog." + name
        assert needs_internal_issuer(shown + ("." if dot else ""))

    @given(st.ip_addresses())
    def test_ip_addresses_need_the_internal_issuer(
        self, address: ipaddress.IPv4Address | ipaddress.IPv6Address
    ) -> None:
        """No public CA certifies an IP address here: internal."""
        assert needs_internal_issuer(str(address))

    @given(domains.map(str.lower))
    def test_other_names_go_to_acme(self, name: str) -> None:
        """A DNS name outside those suffixes (and not an IP) is ACME's."""
        assert needs_internal_issuer(name) is not _public(name)

    @pytest.mark.parametrize(
        "name", ["notlocalhost.com", "local.example.com", "internal.io", "home.arpa.example"]
    )
    def test_lookalikes_are_public(self, name: str) -> None:
        """A private word as a label elsewhere, or a suffix of a label, is not enough."""
        assert not needs_internal_issuer(name)

    @given(domains.map(str.lower), st.sampled_from(["acme", "internal"]))
    def test_a_forced_issuer_wins(self, name: str, forced: str) -> None:
        """BERTH_TLS_ISSUER=acme|internal applies to every name."""
        assert issuer_for(name, forced) == forced  # type: ignore[arg-type]


class TestPolicies:
    def test_mixed_names_get_one_policy_per_issuer(self) -> None:
        """Public names under ACME, private ones under the internal CA (with its pki app)."""
        routes = [
            ProxyRoute(domain=d, upstream_port=30000 + i)
            for i, d in enumerate(["blog.localhost", "app.example.com", "nas.home.arpa"])
        ]
        config = render(routes, admin_socket=SOCKET, acme_email="ops@example.com")
        acme, internal = config["apps"]["tls"]["automation"]["policies"]
        assert acme == {
            "subjects": ["app.example.com"],
            "issuers": [{"module": "acme", "email": "ops@example.com"}],
            "on_demand": True,
        }
        assert internal == {
            "subjects": ["blog.localhost", "nas.home.arpa"],
            "issuers": [{"module": "internal"}],
            "on_demand": True,
        }
        assert config["apps"]["pki"]["certificate_authorities"]["local"] == {"install_trust": False}

    @given(st.lists(domains.map(str.lower), unique=True, min_size=1, max_size=8))
    def test_every_domain_is_in_exactly_one_policy_of_its_issuer(self, names: list[str]) -> None:
        """Each routed domain is a subject once, under the issuer the rule gives it."""
        config = render(
            [ProxyRoute(domain=d, upstream_port=30000 + i) for i, d in enumerate(names)],
            admin_socket=SOCKET,
        )
        policies = config["apps"]["tls"]["automation"]["policies"]
        seen = [(d, p["issuers"][0]["module"]) for p in policies for d in p["subjects"]]
        assert sorted(seen) == sorted((d, issuer_for(d)) for d in names)
        assert ("pki" in config["apps"]) is any(needs_internal_issuer(d) for d in names)


def _probe(**changes: object) -> ProxyProbe:
    base: dict[str, object] = {
        "issuer": "internal",
        "http": "HTTP 308",
        "redirect": "https://blog.localhost/",
        "https": "HTTP 200",
        "tls_error": None,
    }
    return ProxyProbe(**{**base, **changes})  # type: ignore[arg-type]


class TestJudge:
    def test_redirect_and_handshake_is_ready(self) -> None:
        """HTTP redirects to https://<domain> and HTTPS answers: ready, no reason."""
        assert judge("blog.localhost", _probe()) == (TlsState.READY, None)

    @pytest.mark.parametrize(
        ("http", "redirect"),
        [(None, None), ("HTTP 200", None), ("HTTP 308", "https://other.localhost/")],
    )
    def test_no_redirect_to_the_domain_is_an_error(
        self, http: str | None, redirect: str | None
    ) -> None:
        """No HTTP answer, no redirect, or one elsewhere: the proxy does not route it."""
        state, reason = judge("blog.localhost", _probe(http=http, redirect=redirect))
        assert state is TlsState.ERROR
        assert reason

    def test_a_failed_handshake_is_an_error_for_internal_names(self) -> None:
        """The internal CA issues at once: a failed handshake is an error, with its reason."""
        state, reason = judge("blog.localhost", _probe(https=None, tls_error="TLS failed: x"))
        assert state is TlsState.ERROR
        assert reason is not None
        assert "TLS failed: x" in reason

    def test_a_failed_handshake_is_pending_for_acme_names(self) -> None:
        """ACME takes a while: a public name without a certificate yet is pending."""
        probe = _probe(
            issuer="acme", redirect="https://app.example.com/", https=None, tls_error="timeout"
        )
        state, reason = judge("app.example.com", probe)
        assert state is TlsState.PENDING
        assert reason is not None
        assert "timeout" in reason


class TestRecordedAfterDeploy:
    async def test_the_check_follows_the_route_and_is_recorded(self, rig: Rig) -> None:
        """After retire, step tls probes the proxy and records the state on the installation."""
        assert await rig.run() is DeploymentState.SUCCEEDED
        assert rig.jobs.steps[-1] == "tls"
        [tls] = rig.jobs.tls
        assert tls.state is TlsState.READY
        assert tls.issuer == issuer_for(DOMAIN)

    async def test_a_tls_error_does_not_fail_the_deployment(self, rig: Rig) -> None:
        """A failed check is reported (state error, an event) but the app serves: succeeded."""
        rig.proxy.probe = _probe(issuer="acme", http=None, redirect=None, https=None)
        assert await rig.run() is DeploymentState.SUCCEEDED
        [tls] = rig.jobs.tls
        assert tls.state is TlsState.ERROR
        assert any(step == "tls" and "error" in message for _, step, message in rig.jobs.writes)


@pytest.fixture
def rig() -> Rig:
    return Rig()
