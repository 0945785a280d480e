"""``behind_proxies``: X-Forwarded-For believed from trusted proxies only, and a
warning when another peer sends it."""

from __future__ import annotations

from typing import Any

import pytest
from berth.entrypoints.http.forwarded import behind_proxies
from structlog.testing import capture_logs


async def _seen_client(trusted: str | None, peer: str, forwarded: str | None) -> Any:
    """The client address the app behind ``behind_proxies`` sees for one request."""
    seen: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["client"])

    headers = [(b"x-forwarded-for", forwarded.encode())] if forwarded else []
    scope = {"type": "http", "client": (peer, 5000), "headers": headers, "scheme": "http"}
    await behind_proxies(app, trusted)(scope, None, None)  # type: ignore[arg-type]
    return seen[0]


class TestBehindProxies:
    @pytest.mark.parametrize(
        ("trusted", "peer", "client", "warned"),
        [
            (None, "127.0.0.1", "127.0.0.1", True),
            ("127.0.0.1", "127.0.0.1", "203.0.113.5", False),
            ("10.0.0.0/8", "10.1.2.3", "203.0.113.5", False),
            ("10.0.0.0/8", "192.0.2.1", "192.0.2.1", True),
            ("*", "192.0.2.1", "203.0.113.5", False),
        ],
    )
    async def test_the_header_is_believed_from_trusted_peers_only(
        self, trusted: str | None, peer: str, client: str, warned: bool
    ) -> None:
        """A trusted peer's X-Forwarded-For names the client; anyone else's is ignored
        and warned about, naming BERTH_TRUSTED_PROXIES."""
        with capture_logs() as logs:
            seen = await _seen_client(trusted, peer, "203.0.113.5")
        assert seen[0] == client
        warnings = [e for e in logs if e["event"] == "forwarded_for_untrusted"]
        assert len(warnings) == (1 if warned else 0)
        if warned:
            assert warnings[0]["peer"] == peer
            assert "BERTH_TRUSTED_PROXIES" in warnings[0]["hint"]

    async def test_once_then_quiet(self) -> None:
        """One app warns once, then keeps quiet; a request without the header never warns."""

        async def app(scope: Any, receive: Any, send: Any) -> None:
            return None

        served = behind_proxies(app, None)
        plain = {"type": "http", "client": ("127.0.0.1", 1), "headers": []}
        forwarded = {**plain, "headers": [(b"x-forwarded-for", b"203.0.113.5")]}
        with capture_logs() as logs:
            await served(plain, None, None)  # type: ignore[arg-type]
            assert logs == []
            for _ in range(3):
                await served(forwarded, None, None)  # type: ignore[arg-type]
        assert [e["event"] for e in logs] == ["forwarded_for_untrusted"]
