"""``CaddyAdmin``: one server's Caddy, driven through its admin API on a unix socket.

The whole configuration is loaded with ``POST /load`` (Caddy swaps it atomically:
the old one keeps serving until the new one runs, and a refused one changes
nothing) and read back with ``GET /config/``, with httpx over the unix socket
(``AsyncHTTPTransport(uds=…)``), one connection per request: the socket may be a
forward over SSH that another server's connection replaces at any time.
"""

from __future__ import annotations

import contextlib
import functools
import json
import ssl
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from berth.core.errors import RuntimeFailure, ServerUnreachable
from berth.core.models import ProxyRoute

from .config import ADMIN_ORIGIN, Issuer, IssuerSetting, issuer_for, render

__all__ = ["CaddyAdmin"]

_MAX_RESPONSE = 16 * 1024 * 1024


class CaddyAdmin:
    """``ReverseProxy`` for the Caddy whose admin API answers on ``socket_path``.

    ``socket_path`` is where berth connects: the server's admin socket itself for
    the local server, or a local socket forwarded to it over SSH. ``admin_socket`` is
    the admin socket's path *on the server* (what the configuration's ``admin``
    block names; default: ``socket_path``). The other arguments are those of
    :func:`berth.adapters.caddy.config.render`; ``http_port`` (redirects to HTTPS) and
    ``https_port`` stay readable (``ProxyEndpoints``). ``timeout`` bounds each request.
    No I/O happens until a method is called.

    Errors: ``ServerUnreachable`` when the socket is missing, refuses, closes without
    an answer or does not answer in time; ``RuntimeFailure`` quoting Caddy when it
    refuses a request.
    """

    def __init__(
        self,
        socket_path: str | Path,
        *,
        admin_socket: str | None = None,
        https_port: int = 443,
        http_port: int = 80,
        issuer: IssuerSetting = "auto",
        acme_email: str | None = None,
        timeout: float = 30.0,
    ) -> None:
        self._socket_path = str(socket_path)
        self._admin_socket = admin_socket or self._socket_path
        self.https_port = https_port
        self.http_port = http_port
        self._issuer: IssuerSetting = issuer
        self._acme_email = acme_email
        self._timeout = timeout
        render(
            [],
            admin_socket=self._admin_socket,
            https_port=https_port,
            http_port=http_port,
            issuer=issuer,
            acme_email=acme_email,
        )  # refuse bad settings now, not at the first deploy

    def __repr__(self) -> str:
        return f"CaddyAdmin({self._socket_path!r})"

    def config(self, routes: Sequence[ProxyRoute]) -> dict[str, Any]:
        """The configuration ``apply(routes)`` loads."""
        return render(
            routes,
            admin_socket=self._admin_socket,
            https_port=self.https_port,
            http_port=self.http_port,
            issuer=self._issuer,
            acme_email=self._acme_email,
        )

    def issuer_for(self, domain: str) -> Issuer:
        """Who issues ``domain``'s certificate in the configurations this loads."""
        return issuer_for(domain, self._issuer)

    async def ca_root(self) -> str | None:
        """The PEM root certificate of Caddy's internal CA (``GET /pki/ca/local``), which
        signs the internal issuer's certificates; ``None`` if Caddy has none (yet) or
        does not serve it. Raises ``ServerUnreachable`` as the other requests do."""
        status, answer = await self._request("GET", "/pki/ca/local")
        if status != 200:
            return None
        try:
            root = json.loads(answer).get("root_certificate")
        except (ValueError, AttributeError):
            return None
        return root if isinstance(root, str) and "BEGIN CERTIFICATE" in root else None

    async def apply(self, routes: Sequence[ProxyRoute]) -> None:
        """Caddy skips a load that changes nothing."""
        body = json.dumps(self.config(routes), separators=(",", ":")).encode()
        status, answer = await self._request("POST", "/load", body)
        if status != 200:
            raise RuntimeFailure(f"Caddy refused the configuration: {_explain(answer, status)}")

    async def matches(self, routes: Sequence[ProxyRoute]) -> bool:
        live = await self.live()
        return bool(live == self.config(routes))

    async def live(self) -> Any:
        """Caddy's live configuration, as JSON values (``None`` if it has none)."""
        status, answer = await self._request("GET", "/config/")
        if status != 200:
            raise RuntimeFailure(
                f"Caddy did not return its configuration: {_explain(answer, status)}"
            )
        try:
            return json.loads(answer or b"null")
        except ValueError as exc:
            raise RuntimeFailure("Caddy returned a configuration that is not JSON.") from exc

    async def _request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        """One exchange with the admin API over its unix socket: ``(status, body)``."""
        where = f"Caddy's admin API (unix socket {self._admin_socket})"
        # The shared (unused) TLS context: httpx would build one per transport, loading
        # the CA bundle each time (some 30 ms of CPU: a pass over 1,000 servers' proxies).
        transport = httpx.AsyncHTTPTransport(uds=self._socket_path, verify=_tls_context())
        try:
            async with (
                httpx.AsyncClient(
                    transport=transport,
                    base_url=f"http://{ADMIN_ORIGIN}",  # the Host Caddy allows
                    timeout=self._timeout,
                ) as client,
                client.stream(
                    method, path, content=body, headers={"Content-Type": "application/json"}
                ) as response,
            ):
                answer = bytearray()
                async for chunk in response.aiter_bytes():
                    answer += chunk
                    if len(answer) > _MAX_RESPONSE:
                        raise RuntimeFailure("Caddy's answer is larger than 16 MiB.")
                return response.status_code, bytes(answer)
        except httpx.TimeoutException as exc:
            raise ServerUnreachable(f"{where} did not answer within {self._timeout:g} s.") from exc
        except httpx.RemoteProtocolError as exc:
            raise ServerUnreachable(
                f"{where} closed the connection without answering: is Caddy running with "
                "berth's admin socket?"
            ) from exc
        except httpx.TransportError as exc:
            reason = _reason(exc)
            raise ServerUnreachable(f"{where} cannot be reached: {reason}.") from exc


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """A TLS context for the admin API's transports; never used (it speaks plain HTTP)."""
    return ssl.create_default_context()


def _reason(exc: httpx.TransportError) -> str:
    """The operating system's words for a failed connection (``No such file or directory``)."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror
        cause = cause.__cause__ or cause.__context__
    return str(exc) or type(exc).__name__


def _explain(body: bytes, status: int) -> str:
    """Caddy's own error message (``{"error": "..."}``), else its status and body."""
    text = body.decode("utf-8", errors="replace").strip()
    with contextlib.suppress(ValueError):
        decoded = json.loads(text)
        if isinstance(decoded, dict) and isinstance(decoded.get("error"), str):
            return str(decoded["error"])
    return f"HTTP {status}: {text[:500]}" if text else f"HTTP {status}"
