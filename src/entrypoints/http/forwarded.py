"""Whose ``X-Forwarded-For`` berth believes: only the proxies the operator trusts.

Every throttle counts a request against its client address. Behind a reverse proxy
that is not in ``BERTH_TRUSTED_PROXIES`` that address is the proxy's, so every client
shares one budget of failed authentications and sign-ins: one client's failures then
throttle all of them. ``behind_proxies`` says so in the log (``forwarded_for_untrusted``)
the first time such a request arrives, then at most once an hour.
"""

from __future__ import annotations

from berth.core.outages import ThrottledWarning
from litestar.enums import ScopeType
from litestar.types import ASGIApp, Receive, Scope, Send
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

__all__ = ["UNTRUSTED_WARNING_SECONDS", "behind_proxies"]

#: Seconds between two ``forwarded_for_untrusted`` warnings.
UNTRUSTED_WARNING_SECONDS = 3600.0

_HINT = (
    "A request carried X-Forwarded-For from a peer berth does not trust: berth counts "
    "failed authentications and sign-ins against that peer's address, which every "
    "client behind it shares. If it is your reverse proxy, set BERTH_TRUSTED_PROXIES "
    "to its address."
)


def behind_proxies(app: ASGIApp, trusted_proxies: str | None) -> ASGIApp:
    """``app`` as ``berth serve`` runs it: ``X-Forwarded-For``/``-Proto`` name the client
    only when the TCP peer is one of ``trusted_proxies`` (uvicorn's
    ``forwarded_allow_ips``: comma-separated addresses or networks, or ``*``; ``None``:
    nobody), and a request that carries the header from any other peer is warned about."""
    believing: ASGIApp = app
    trusted = None
    if trusted_proxies is not None:
        proxies = ProxyHeadersMiddleware(app, trusted_hosts=trusted_proxies)  # type: ignore[arg-type]
        believing, trusted = proxies, proxies.trusted_hosts  # type: ignore[assignment]
    warning = ThrottledWarning("forwarded_for_untrusted", interval=UNTRUSTED_WARNING_SECONDS)

    async def served(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == ScopeType.HTTP:
            client = scope.get("client")
            peer = str(client[0]) if client else None
            if (trusted is None or peer not in trusted) and any(
                key == b"x-forwarded-for" for key, _ in scope.get("headers", ())
            ):
                warning.warn(peer=peer, hint=_HINT)
        await believing(scope, receive, send)

    return served
