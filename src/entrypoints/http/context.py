"""What every request handler and hook can reach: the services, settings and limits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from litestar import Request

from ..bootstrap import Services
from ..settings import Settings
from .ratelimit import Buckets

__all__ = ["AppContext", "context_of"]


@dataclass(slots=True)
class AppContext:
    services: Services
    settings: Settings
    requests: Buckets = field(init=False)
    deploys: Buckets = field(init=False)
    auth_failures: Buckets = field(init=False)
    #: The served OpenAPI document, built on first request (``routes.openapi_document``).
    openapi_document: dict[str, Any] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.requests = Buckets(self.settings.rate_limit_per_minute)
        self.deploys = Buckets(self.settings.deploy_rate_limit_per_minute)
        self.auth_failures = Buckets(self.settings.auth_failures_per_minute)


def context_of(request: Request) -> AppContext:  # type: ignore[type-arg]
    ctx: AppContext = request.app.state["berth"]
    return ctx
