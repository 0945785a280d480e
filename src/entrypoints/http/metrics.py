"""``GET /metrics``: berth's metrics in Prometheus' text format, for an operator.

Not part of the agent API (nor its OpenAPI document): it is protected by its own
token, ``BERTH_METRICS_TOKEN``, never by a user's API token. Without that token set,
only requests from this machine are answered (docs/decisions/2026-11-25-metrics.md).
"""

from __future__ import annotations

import hmac
import ipaddress
from datetime import UTC, datetime
from typing import Any

from berth.adapters.metrics import CONTENT_TYPE, PrometheusMetrics
from berth.core import commands as c
from berth.core.bus import MessageBus
from berth.core.errors import Forbidden, Unauthorized
from litestar import Controller, HttpMethod, Request, Response, route
from litestar.di import NamedDependency
from litestar.exceptions import NotFoundException

from ..settings import Settings

__all__ = ["MetricsRoute"]


def _loopback(request: Request[Any, Any, Any]) -> bool:
    host = request.client.host if request.client else ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class MetricsTokenRequired(Unauthorized):
    """A scrape without the metrics token (its detail says which token is meant)."""

    def __init__(self) -> None:
        super().__init__("The metrics token is required: Authorization: Bearer <token>.")


def bears(authorization: str, token: str) -> bool:
    """Whether an ``Authorization`` header is ``Bearer <token>`` (scheme in any case,
    compared in constant time)."""
    scheme, _, given = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode("utf-8", "surrogateescape"), token.encode()
    )


def allowed(request: Request[Any, Any, Any], token: str | None) -> None:
    """Refuse a scrape: without the metrics token when one is set (401), from another
    machine when none is (403)."""
    if token is not None:
        if not bears(request.headers.get("authorization", ""), token):
            raise MetricsTokenRequired()
        return
    if not _loopback(request):
        raise Forbidden(
            "Metrics are answered only to this machine; set BERTH_METRICS_TOKEN to "
            "scrape them from elsewhere."
        )


def exactly_metrics(request: Request[Any, Any, Any]) -> None:
    """A 404, as for any unknown path, unless the request's path is ``/metrics`` as
    written. Litestar's router also brings ``/metrics/``, ``//metrics`` and
    ``/metrics%2F`` here (it drops a trailing slash, merges slashes, decodes ``%2F``),
    and a reverse proxy that hides the exact path ``/metrics`` passes those on."""
    raw = request.scope.get("raw_path")
    path = raw.decode("latin-1") if isinstance(raw, bytes) else request.scope["path"]
    if path != "/metrics":
        raise NotFoundException()


class MetricsRoute(Controller):
    path = "/metrics"
    include_in_schema = False

    @route("/", http_method=[HttpMethod.GET, HttpMethod.HEAD], include_in_schema=False)
    async def metrics(
        self,
        request: Request[Any, Any, Any],
        bus: NamedDependency[MessageBus],
        settings: NamedDependency[Settings],
        metrics: NamedDependency[PrometheusMetrics],
    ) -> Response[bytes]:
        exactly_metrics(request)
        allowed(request, settings.metrics_token)
        counts = await bus.handle(c.ReadStoreCounts())
        return Response(metrics.render(counts, datetime.now(UTC)), media_type=CONTENT_TYPE)
