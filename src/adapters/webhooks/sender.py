"""One POST per attempt with httpx: no redirects followed, a bounded time, the answer's
body never read past a few KiB (and never kept), nothing raised for the endpoint's sake.

What the deliveries list says of a failed attempt is the endpoint's HTTP status, or one
sentence for every other failure: refused, timed out, reset, a TLS failure and an
address the outbound guard refused all read the same, so a webhook cannot be used to
map which hosts and ports answer (a port scanner). The operator's log keeps the cause.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import httpx
import structlog
from berth.core.outbox import SendResult

__all__ = ["UNDELIVERED", "HttpWebhookSender"]

log = structlog.get_logger()

_USER_AGENT = "berth-webhooks/1"
_READ_AT_MOST = 4096  # bytes of an answer read (then dropped): lets the connection be reused

#: The error of every attempt that got no HTTP answer, whatever the cause.
UNDELIVERED = (
    "Could not deliver: no answer from the endpoint, or its address is not one berth sends to."
)


class HttpWebhookSender:
    """``WebhookSender`` over one pooled ``httpx.AsyncClient`` (created on first use).

    ``transport`` is where connections come from: in berth, the outbound guard's
    (``berth.adapters.outbound.guarded_transport``), so every connection goes to an
    address checked as it is made. Environment proxies are ignored (``trust_env=False``):
    an endpoint is reached directly.
    """

    def __init__(self, transport: httpx.AsyncBaseTransport) -> None:
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                transport=self._transport,
                follow_redirects=False,
                trust_env=False,
                headers={"user-agent": _USER_AGENT},
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
        except (TimeoutError, httpx.HTTPError) as exc:
            log.info("webhook_not_answered", cause=_cause(exc))
            return SendResult(None, UNDELIVERED)
        return SendResult(response.status_code)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _cause(exc: BaseException) -> str:
    """The failure in the operator's words (httpx's name the failure, not the URL)."""
    inner = exc.__cause__ or exc
    return f"{type(inner).__name__}: {str(inner) or type(exc).__name__}"[:300]
