"""One POST per attempt with httpx: no redirects followed, a bounded time, the answer's
body never read past a few KiB (and never kept), nothing raised for the endpoint's sake."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import httpx
from berth.core.outbox import SendResult

__all__ = ["HttpWebhookSender"]

_USER_AGENT = "berth-webhooks/1"
_READ_AT_MOST = 4096  # bytes of an answer read (then dropped): lets the connection be reused


class HttpWebhookSender:
    """``WebhookSender`` over one pooled ``httpx.AsyncClient`` (created on first use).

    Environment proxies are ignored (``trust_env=False``): an endpoint is reached
    directly. TLS certificates are verified against the system's store.
    """

    def __init__(self) -> None:
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                follow_redirects=False,
                trust_env=False,
                headers={"user-agent": _USER_AGENT},
                limits=httpx.Limits(max_connections=50, max_keepalive_connections=10),
            )
        return self._client

    async def send(
        self, url: str, headers: Mapping[str, str], body: bytes, seconds: float
    ) -> SendResult:
        try:
            async with asyncio.timeout(seconds):
                request = self._http().build_request(
                    "POST", url, headers=dict(headers), content=body, timeout=seconds
                )
                response = await self._http().send(request, stream=True)
                try:
                    read = 0
                    async for chunk in response.aiter_raw():
                        read += len(chunk)
                        if read >= _READ_AT_MOST:
                            break
                finally:
                    await response.aclose()
        except (TimeoutError, httpx.TimeoutException):
            return SendResult(None, f"No answer within {seconds:g} s.")
        except httpx.ConnectError as exc:
            return SendResult(None, f"Could not connect: {_reason(exc)}")
        except httpx.HTTPError as exc:
            return SendResult(None, f"{type(exc).__name__}: {_reason(exc)}")
        return SendResult(response.status_code)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _reason(exc: Exception) -> str:
    """The error's own words (httpx's name the failure, not the URL), cut short."""
    return (str(exc) or type(exc).__name__)[:300]
