"""The outbound rule (``berth.core.outbound``): which addresses berth connects to on a
user's word, whatever their spelling, and the guard that resolves a host and checks
every address it resolves to. The standard library's ``ipaddress`` is the oracle."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address

import pytest
from berth.core.outbound import (
    OutboundGuard,
    TargetRefused,
    check_host_spelling,
    check_server_address,
    host_literal,
    refusal,
    server_address_refusal,
)
from berth.core.types import RuleError
from berth.core.webhooks import check_webhook_url, shown_url
from fakes import PUBLIC_ADDRESS, FakeResolver
from hypothesis import given
from hypothesis import strategies as st

#: Networks refused by default, and whether BERTH_ALLOW_PRIVATE_TARGETS=1 allows them.
REFUSED = [
    ("127.0.0.0/8", True),
    ("10.0.0.0/8", True),
    ("172.16.0.0/12", True),
    ("192.168.0.0/16", True),
    ("100.64.0.0/10", True),
    ("0.0.0.0/8", False),
    ("169.254.0.0/16", False),
    ("224.0.0.0/4", False),
    ("240.0.0.0/4", False),
    ("192.0.2.0/24", False),
    ("::1/128", True),
    ("fc00::/7", True),
    ("::ffff:0:0/96", True),
    ("::/128", False),
    ("fe80::/10", False),
    ("ff00::/8", False),
    ("2001:db8::/32", False),
]


def addresses_in(network: str) -> st.SearchStrategy[IPv4Address | IPv6Address]:
    """Any address of ``network``."""
    net = IPv4Network(network) if ":" not in network else IPv6Network(network)
    first, last = int(net.network_address), int(net.broadcast_address)
    kind = IPv4Address if net.version == 4 else IPv6Address
    return st.integers(first, last).map(kind)


ipv4 = st.integers(0, 2**32 - 1).map(IPv4Address)
ipv6 = st.integers(0, 2**128 - 1).map(IPv6Address)


class TestTheRule:
    @pytest.mark.parametrize(("network", "allowable"), REFUSED)
    @given(data=st.data())
    def test_every_address_of_a_refused_network_is_refused(
        self, network: str, allowable: bool, data: st.DataObject
    ) -> None:
        """Loopback, private, shared, unique-local, IPv4-mapped, unspecified, link-local,
        multicast, reserved, documentation: refused, naming the address; the private kinds
        (and only they) are allowed with BERTH_ALLOW_PRIVATE_TARGETS=1."""
        address = data.draw(addresses_in(network))
        why = refusal(address)
        assert why is not None
        mapped = getattr(address, "ipv4_mapped", None)
        assert why.startswith(f"{address} is " if mapped is None else f"::ffff:{mapped} is ")
        allowed = refusal(address, allow_private=True)
        if not allowable:
            assert allowed is not None
        elif mapped is None:
            assert allowed is None
        else:  # allowed as private when the IPv4 address it carries is
            assert (allowed is None) == (refusal(mapped, allow_private=True) is None)

    @given(address=ipv4)
    def test_an_allowed_ipv4_address_is_a_global_unicast_one(self, address: IPv4Address) -> None:
        """What the rule allows, the standard library calls global, and not multicast."""
        if refusal(address) is None:
            assert address.is_global
            assert not address.is_multicast
            assert not address.is_reserved

    @given(address=ipv6)
    def test_an_allowed_ipv6_address_is_global_unicast_or_leads_to_one(
        self, address: IPv6Address
    ) -> None:
        """An allowed IPv6 address is global unicast (2000::/3) and not in a special
        block, or a NAT64/6to4 form of an allowed IPv4 address."""
        if refusal(address) is not None:
            return
        nat64, six_to_four = IPv6Network("64:ff9b::/96"), IPv6Network("2002::/16")
        if address in nat64:
            assert refusal(IPv4Address(int(address) & 0xFFFFFFFF)) is None
        elif address in six_to_four:
            assert refusal(IPv4Address((int(address) >> 80) & 0xFFFFFFFF)) is None
        else:
            assert address in IPv6Network("2000::/3")
            assert address.is_global
            assert address.teredo is None

    @given(inner=ipv4)
    def test_ipv6_forms_of_an_ipv4_address_are_judged_by_it(self, inner: IPv4Address) -> None:
        """NAT64 (64:ff9b::/96) and 6to4 (2002::/16) reach their IPv4 address: allowed
        exactly when it is. IPv4-mapped ones are refused whatever they carry."""
        nat64 = IPv6Address((0x64FF9B << 96) | int(inner))
        six_to_four = IPv6Address((0x2002 << 112) | (int(inner) << 80) | 1)
        mapped = IPv6Address((0xFFFF << 32) | int(inner))
        assert (refusal(nat64) is None) == (refusal(inner) is None)
        assert (refusal(six_to_four) is None) == (refusal(inner) is None)
        assert refusal(mapped) is not None
        if refusal(inner, allow_private=True) is not None:
            assert refusal(mapped, allow_private=True) is not None

    def test_the_reasons_are_words(self) -> None:
        """A refusal names the kind of address, and the IPv4 inside an IPv6 form."""
        assert refusal(ip_address("127.0.0.1")) == "127.0.0.1 is a loopback address"
        assert "link-local" in str(refusal(ip_address("169.254.169.254")))
        assert "carrier-grade NAT" in str(refusal(ip_address("100.64.0.1")))
        assert "unique local" in str(refusal(ip_address("fd00::1")))
        assert str(refusal(ip_address("::ffff:127.0.0.1"))).startswith(
            "::ffff:127.0.0.1 is an IPv4-mapped address"
        )
        assert "for 10.0.0.1, a private address" in str(refusal(ip_address("64:ff9b::a00:1")))
        assert refusal(ip_address("fe80::1%eth0")) is not None
        for public in ("93.184.215.14", "2606:4700::6810:84e5", "64:ff9b::808:808"):
            assert refusal(ip_address(public)) is None


def legacy_spellings(address: IPv4Address) -> list[str]:
    """Spellings the C library reads as ``address`` that are not four decimal numbers."""
    value = int(address)
    octets = address.packed
    spellings = [
        str(value),
        f"0x{value:08x}",
        f"0x{value:X}",
        f"0{value:o}",
        ".".join(f"0x{o:02x}" for o in octets),
        ".".join(f"0{o:o}" for o in octets),
        f"{octets[0]}.{int.from_bytes(octets[1:], 'big')}",
        f"{octets[0]}.{octets[1]}.{int.from_bytes(octets[2:], 'big')}",
    ]
    return [s for s in spellings if s != str(address)]


class TestSpellings:
    @given(address=ipv4)
    def test_legacy_ipv4_spellings_are_refused(self, address: IPv4Address) -> None:
        """Hex, octal, one big number, shortened forms (``0x7f000001``, ``2130706433``,
        ``0177.0.0.1``, ``127.1``): refused in a URL's host, whatever the address."""
        for spelling in legacy_spellings(address):
            with pytest.raises(TargetRefused):
                check_host_spelling(spelling)
            with pytest.raises(RuleError):
                check_webhook_url(f"http://{spelling}:8080/hook")

    @given(address=ipv4)
    def test_four_decimal_numbers_pass(self, address: IPv4Address) -> None:
        """The usual spelling is no spelling problem (where it leads is the rule's)."""
        check_host_spelling(str(address))

    @pytest.mark.parametrize(
        "host", ["example.com", "hooks.example.com", "0x.example.com", "1.example", "::1"]
    )
    def test_names_are_not_spellings(self, host: str) -> None:
        """A DNS name (even with digits or a 0x label) is no IPv4 spelling."""
        check_host_spelling(host)

    @pytest.mark.parametrize(
        ("host", "address"),
        [
            ("[::ffff:127.0.0.1]", "::ffff:127.0.0.1"),
            ("[::1]", "::1"),
            ("::1", "::1"),
            ("127.0.0.1", "127.0.0.1"),
            ("[fe80::1%25eth0]", "fe80::1"),
            ("localhost", None),
        ],
    )
    def test_ip_literals_are_read_as_addresses(self, host: str, address: str | None) -> None:
        """Bracketed or not, with a zone or not: an IP literal is its address."""
        assert host_literal(host) == (None if address is None else ip_address(address))


class TestTheGuard:
    async def test_every_resolved_address_is_checked(self) -> None:
        """A name resolving to a public and a loopback address is refused: the check
        holds for each address a connection might use."""
        resolver = FakeResolver({"mixed.example": [PUBLIC_ADDRESS, "127.0.0.1"]})
        with pytest.raises(TargetRefused) as refused:
            await OutboundGuard(resolver).addresses("mixed.example", 443)
        assert str(refused.value) == (
            "mixed.example resolves to 127.0.0.1, a loopback address: berth connects only "
            "to public IP addresses."
        )

    @pytest.mark.parametrize(
        ("host", "answers", "said"),
        [
            ("localhost", ["127.0.0.1", "::1"], "loopback"),
            ("metadata.google.internal", ["169.254.169.254"], "link-local"),
            ("metadata.google.internal", [], "does not resolve"),
            ("internal.example", ["10.1.2.3"], "private"),
            ("cgnat.example", ["100.64.1.1"], "carrier-grade NAT"),
            ("ula.example", ["fd12::1"], "unique local"),
        ],
    )
    async def test_names_that_lead_inside_are_refused(
        self, host: str, answers: list[str], said: str
    ) -> None:
        """A name is judged by what it resolves to; a name that does not resolve is
        refused too (berth cannot tell where it leads)."""
        guard = OutboundGuard(FakeResolver({host: answers}))
        with pytest.raises(TargetRefused) as refused:
            await guard.addresses(host, 80)
        assert said in str(refused.value)
        assert host in str(refused.value)

    async def test_literals_are_not_resolved(self) -> None:
        """An IP literal is checked as is: no lookup."""
        resolver = FakeResolver()
        guard = OutboundGuard(resolver)
        for host in ("[::ffff:127.0.0.1]", "127.0.0.1", "[::1]", "0.0.0.0"):
            with pytest.raises(TargetRefused):
                await guard.addresses(host, 80)
        assert await guard.addresses(PUBLIC_ADDRESS, 80) == (ip_address(PUBLIC_ADDRESS),)
        assert resolver.asked == []

    async def test_private_targets_may_be_allowed(self) -> None:
        """With allow_private, loopback and private names pass; link-local and
        unresolvable ones still do not."""
        resolver = FakeResolver(
            {"localhost": ["127.0.0.1"], "metadata": ["169.254.169.254"], "gone": []}
        )
        guard = OutboundGuard(resolver, allow_private=True)
        assert await guard.addresses("localhost", 80) == (ip_address("127.0.0.1"),)
        assert await guard.addresses("10.0.0.7", 80) == (ip_address("10.0.0.7"),)
        for host in ("metadata", "gone", "0x7f000001"):
            with pytest.raises(TargetRefused):
                await guard.addresses(host, 80)

    async def test_the_resolvers_addresses_are_what_is_connected_to(self) -> None:
        """The guard hands back the checked addresses, each once, in the resolver's order."""
        resolver = FakeResolver({"cdn.example": ["2606:4700::1", PUBLIC_ADDRESS, "2606:4700::1"]})
        found = await OutboundGuard(resolver).addresses("cdn.example", 443)
        assert [str(a) for a in found] == ["2606:4700::1", PUBLIC_ADDRESS]
        assert resolver.asked == [("cdn.example", 443)]


class TestServerAddresses:
    @given(address=st.one_of(addresses_in("127.0.0.0/8"), addresses_in("169.254.0.0/16")))
    def test_loopback_and_link_local_servers_are_refused(self, address: IPv4Address) -> None:
        """Under BERTH_ALLOW_PRIVATE_TARGETS=0 such a server address is refused."""
        assert server_address_refusal(address) is not None
        mapped = IPv6Address((0xFFFF << 32) | int(address))
        assert server_address_refusal(mapped) is not None

    @given(
        address=st.one_of(
            addresses_in("10.0.0.0/8"),
            addresses_in("192.168.0.0/16"),
            addresses_in("172.16.0.0/12"),
            addresses_in("fd00::/8"),
        )
    )
    def test_lan_servers_are_allowed(self, address: IPv4Address | IPv6Address) -> None:
        """Private and unique-local addresses are servers on a LAN: allowed."""
        assert server_address_refusal(address) is None

    async def test_names_are_resolved_and_unknown_ones_pass(self) -> None:
        """A name resolving to loopback is refused; one that does not resolve passes."""
        resolver = FakeResolver({"localhost": ["127.0.0.1"], "later.example": []})
        with pytest.raises(TargetRefused):
            await check_server_address(resolver, "localhost", 22)
        await check_server_address(resolver, "later.example", 22)
        await check_server_address(resolver, "192.168.1.20", 22)


class TestShownUrl:
    @pytest.mark.parametrize(
        ("url", "shown"),
        [
            ("https://hooks.slack.com/services/T0/B0/XXXX", "https://hooks.slack.com/…"),
            ("https://hooks.example.com:8443/x?token=t0k3n", "https://hooks.example.com:8443/…"),
            ("https://hooks.example.com/", "https://hooks.example.com/"),
            ("https://hooks.example.com", "https://hooks.example.com"),
            ("http://[2606:4700::1]:8080/a", "http://[2606:4700::1]:8080/…"),
            ("https://hooks.example.com?token=x", "https://hooks.example.com/…"),
        ],
    )
    def test_lists_show_where_not_what(self, url: str, shown: str) -> None:
        """Scheme, host and port stay; a path or query (a token's place) becomes …."""
        assert shown_url(url) == shown
