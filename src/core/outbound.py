"""Where the control plane may connect on a user's word (SPEC.md, "Outbound requests").

A webhook URL (and, later, a git source the control plane fetches) names a host that
berth itself connects to, from inside the operator's network. Every address that host
resolves to must be a public one: never loopback, private (RFC 1918), shared
(carrier-grade NAT), link-local (cloud metadata lives at 169.254.169.254), unique local,
unspecified, multicast, reserved, or an IPv4 address dressed as IPv6. The rule is
checked when the target is given (a 422 at its field) and again on each connection, on
the very addresses connected to, so a name that resolves elsewhere later (DNS
rebinding) gains nothing.

Operators whose endpoints live inside their own network set
``BERTH_ALLOW_PRIVATE_TARGETS=1``: loopback, private, shared, unique-local, site-local
and IPv4-mapped addresses are then allowed. Link-local, unspecified, multicast,
documentation and reserved addresses stay refused either way: no endpoint lives there.

The rule is pure (``refusal``); resolving is a port (``HostResolver``) that
``OutboundGuard`` asks.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from .errors import FieldError, InvalidInput
from .types import RuleError

if TYPE_CHECKING:
    from .ports import HostResolver

__all__ = [
    "Address",
    "OutboundGuard",
    "TargetRefused",
    "check_host_spelling",
    "check_server_address",
    "check_url_target",
    "host_literal",
    "refusal",
    "server_address_refusal",
]

Address = IPv4Address | IPv6Address

_ALWAYS = False  # refused even with BERTH_ALLOW_PRIVATE_TARGETS=1
_PRIVATE = True  # allowed with it

_UNSPECIFIED = "an unspecified address"
_LOOPBACK = "a loopback address"
_PRIVATE_NET = "a private address"
_LINK_LOCAL = "a link-local address (cloud metadata services answer there)"
_MULTICAST = "a multicast address"
_DOCUMENTATION = "a documentation address"
_RESERVED = "a reserved address"

#: (network, what an address in it is, whether BERTH_ALLOW_PRIVATE_TARGETS=1 allows it);
#: the first network an address lies in decides.
_V4: tuple[tuple[IPv4Network, str, bool], ...] = tuple(
    (IPv4Network(net), what, allowable)
    for net, what, allowable in (
        ("0.0.0.0/8", _UNSPECIFIED, _ALWAYS),
        ("127.0.0.0/8", _LOOPBACK, _PRIVATE),
        ("10.0.0.0/8", _PRIVATE_NET, _PRIVATE),
        ("172.16.0.0/12", _PRIVATE_NET, _PRIVATE),
        ("192.168.0.0/16", _PRIVATE_NET, _PRIVATE),
        ("100.64.0.0/10", "a shared (carrier-grade NAT) address", _PRIVATE),
        ("169.254.0.0/16", _LINK_LOCAL, _ALWAYS),
        ("192.0.0.0/24", "an address reserved for IETF protocols", _ALWAYS),
        ("192.0.2.0/24", _DOCUMENTATION, _ALWAYS),
        ("198.51.100.0/24", _DOCUMENTATION, _ALWAYS),
        ("203.0.113.0/24", _DOCUMENTATION, _ALWAYS),
        ("198.18.0.0/15", "a benchmarking address", _ALWAYS),
        ("192.88.99.0/24", "a 6to4 relay address", _ALWAYS),
        ("224.0.0.0/4", _MULTICAST, _ALWAYS),
        ("240.0.0.0/4", _RESERVED, _ALWAYS),  # 255.255.255.255 (broadcast) among them
    )
)
_V6: tuple[tuple[IPv6Network, str, bool], ...] = tuple(
    (IPv6Network(net), what, allowable)
    for net, what, allowable in (
        ("::/128", _UNSPECIFIED, _ALWAYS),
        ("::1/128", _LOOPBACK, _PRIVATE),
        ("::ffff:0:0/96", "an IPv4-mapped address (write the IPv4 address itself)", _PRIVATE),
        ("64:ff9b:1::/48", "a local-use NAT64 address", _PRIVATE),
        ("fc00::/7", "a unique local (ULA) address", _PRIVATE),
        ("fec0::/10", "a site-local address", _PRIVATE),
        ("fe80::/10", _LINK_LOCAL, _ALWAYS),
        ("ff00::/8", _MULTICAST, _ALWAYS),
        ("2001:db8::/32", _DOCUMENTATION, _ALWAYS),
        ("3fff::/20", _DOCUMENTATION, _ALWAYS),
        ("2001::/23", "an address reserved for IETF protocols (Teredo among them)", _ALWAYS),
        ("100::/64", "a discard-only address", _ALWAYS),
    )
)
_GLOBAL_UNICAST = IPv6Network("2000::/3")
#: IPv6 forms that carry an IPv4 address: the address reached is the IPv4 one.
_NAT64 = IPv6Network("64:ff9b::/96")
_6TO4 = IPv6Network("2002::/16")


def _embedded_ipv4(address: IPv6Address) -> tuple[IPv4Address, str] | None:
    """The IPv4 address a NAT64 or 6to4 address leads to, and the form's name."""
    if address in _NAT64:
        return IPv4Address(int(address) & 0xFFFFFFFF), "a NAT64 address"
    if address in _6TO4:
        return IPv4Address((int(address) >> 80) & 0xFFFFFFFF), "a 6to4 address"
    return None


def refusal(address: Address, *, allow_private: bool = False) -> str | None:
    """Why berth does not connect to ``address`` ("127.0.0.1 is a loopback address"),
    or ``None`` when it may: a public unicast address (or, with ``allow_private``, one
    of the private kinds listed in the module's docstring)."""
    what = _what(address, allow_private)
    return None if what is None else f"{_shown(address)} is {what}"


def _shown(address: Address) -> str:
    """``address`` as a reader expects it: IPv4-mapped ones as ``::ffff:127.0.0.1``."""
    if isinstance(address, IPv4Address):
        return str(address)
    plain = _plain(address)
    return f"::ffff:{plain.ipv4_mapped}" if plain.ipv4_mapped is not None else str(plain)


def _refused(host: str, address: Address, what: str, *, resolved: bool) -> str:
    """A refused address and ``what`` it is, in words: as given, or as what ``host``
    ``resolved`` to."""
    shown = _shown(address)
    return f"{host} resolves to {shown}, {what}" if resolved else f"{shown} is {what}"


def _plain(address: IPv6Address) -> IPv6Address:
    """``address`` without its zone (``fe80::1%eth0`` is ``fe80::1``)."""
    return IPv6Address(int(address))


def _what(address: Address, allow_private: bool) -> str | None:
    """What a refused ``address`` is ("a loopback address"); ``None`` if allowed."""
    if isinstance(address, IPv4Address):
        for net4, what, allowable in _V4:
            if address in net4:
                return None if allowable and allow_private else what
        # Whatever the standard library knows that the table does not.
        return None if address.is_global else _RESERVED
    v6 = _plain(address)
    mapped = v6.ipv4_mapped
    for net6, what, allowable in _V6:
        if v6 in net6:
            if not (allowable and allow_private):
                return what
            # Allowed as private; an IPv4-mapped one reaches its IPv4 address: check that.
            inner = _what(mapped, allow_private) if mapped is not None else None
            return None if inner is None else f"an IPv4-mapped address for {mapped}, {inner}"
    embedded = _embedded_ipv4(v6)
    if embedded is not None:
        inner = _what(embedded[0], allow_private)
        return None if inner is None else f"{embedded[1]} for {embedded[0]}, {inner}"
    return None if v6 in _GLOBAL_UNICAST else _RESERVED


class TargetRefused(RuleError):
    """A host berth will not connect to; the message says why and names the address."""


def host_literal(host: str) -> Address | None:
    """The address a host written as an IP literal is (``[::1]``, ``::1`` or
    ``127.0.0.1``; an IPv6 zone such as ``%25eth0`` is dropped), or ``None`` for a name."""
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        found = ipaddress.ip_address(bare.split("%", 1)[0])
    except ValueError:
        return None
    return found


def _inet_aton_number(part: str) -> int | None:
    """A part of a legacy IPv4 spelling (``0x7f``, ``0177``, ``127``) as the C library
    reads it, or ``None`` if it is not a number."""
    text = part.lower()
    try:
        if text.startswith("0x"):
            return int(text[2:] or "0", 16)
        if len(text) > 1 and text.startswith("0"):
            return int(text[1:], 8)
        return int(text, 10) if text.isdigit() else None
    except ValueError:
        return None


def check_host_spelling(host: str) -> None:
    """Refuse a host that the C library reads as an IPv4 address though it is not
    written as four decimal numbers: ``0x7f000001``, ``2130706433``, ``0177.0.0.1``,
    ``127.1``. Such a host would reach an address that no one reading the URL sees.

    Raises:
        TargetRefused: it is such a spelling.
    """
    bare = host[:-1] if host.endswith(".") else host
    parts = bare.split(".")
    if not 1 <= len(parts) <= 4 or any(_inet_aton_number(p) is None for p in parts):
        return
    try:
        IPv4Address(bare)
    except ValueError:
        raise TargetRefused(
            f"{host} is an IPv4 address in a legacy spelling: write it as four decimal "
            "numbers (like 203.0.113.7), or give a host name."
        ) from None
    if bare != host:
        raise TargetRefused(f"{host}: write the IP address without a trailing dot.")


def server_address_refusal(address: Address) -> str | None:
    """Why a server may not have ``address`` when the operator refuses such servers
    (``BERTH_ALLOW_PRIVATE_TARGETS=0``): loopback, link-local, unspecified and multicast
    addresses point at berth's own machine or at no server at all. Private (RFC 1918)
    and unique-local addresses are servers on a LAN: always allowed."""
    what = _server_what(address)
    return None if what is None else f"{_shown(address)} is {what}"


def _server_what(address: Address) -> str | None:
    if isinstance(address, IPv6Address):
        address = address.ipv4_mapped or _plain(address)
    if address.is_loopback:
        return _LOOPBACK
    if address.is_link_local:
        return _LINK_LOCAL
    if address.is_unspecified:
        return _UNSPECIFIED
    if address.is_multicast:
        return _MULTICAST
    return None


async def check_server_address(resolver: HostResolver, host: str, port: int) -> None:
    """Refuse a server address that is, or resolves to, an address
    ``server_address_refusal`` refuses (any one of them). A name that does not resolve
    (yet) is let through: reaching it is the monitor's business.

    Raises:
        TargetRefused: the message names the address and says why.
    """
    literal = host_literal(host)
    found = [literal] if literal is not None else _parsed(await resolver.resolve(host, port))
    for address in found:
        what = _server_what(address)
        if what is not None:
            said = _refused(host, address, what, resolved=literal is None)
            raise TargetRefused(
                f"{said}: this berth manages remote servers only (its operator refuses "
                "loopback and link-local server addresses)."
            )


@dataclass(frozen=True, slots=True)
class OutboundGuard:
    """The outbound rule with a resolver: what a host may be connected to.

    One per process, shared by what checks a target when it is given (webhooks, …)
    and what connects to it later (the webhook sender's connections).
    """

    resolver: HostResolver
    allow_private: bool = False

    async def addresses(self, host: str, port: int) -> tuple[Address, ...]:
        """Every address ``host`` resolves to (an IP literal is itself, with no lookup),
        each one allowed: connect to these and to nothing else.

        Raises:
            TargetRefused: the host is a legacy IPv4 spelling, does not resolve, or one
                of its addresses is refused (the message names it and says why).
        """
        check_host_spelling(host)
        literal = host_literal(host)
        if literal is not None:
            found: Sequence[Address] = (literal,)
        else:
            found = _parsed(await self.resolver.resolve(host, port))
            if not found:
                raise TargetRefused(
                    f"{host} does not resolve to an IP address: give a host name that "
                    "resolves (from berth's machine), or an IP address."
                )
        for address in found:
            what = _what(address, self.allow_private)
            if what is not None:
                said = _refused(host, address, what, resolved=literal is None)
                raise TargetRefused(f"{said}: berth connects only to public IP addresses.")
        return tuple(found)


def _parsed(addresses: Sequence[str]) -> list[Address]:
    """The resolver's answers as addresses, in its order, each once; an answer that is
    not an address is dropped."""
    found: list[Address] = []
    for text in addresses:
        address = host_literal(text)
        if address is not None and address not in found:
            found.append(address)
    return found


async def check_url_target(guard: OutboundGuard, url: str, field: str) -> None:
    """``InvalidInput`` at ``field`` unless berth may connect to the host of the http(s)
    ``url`` (its port, or the scheme's)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    try:
        await guard.addresses(parts.hostname or "", port)
    except TargetRefused as exc:
        raise InvalidInput([FieldError(field, str(exc), url)]) from None
