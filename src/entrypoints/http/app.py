"""The Litestar app factory. It takes the built bus, so tests can pass one over fakes."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from berth.adapters.metrics import PrometheusMetrics
from berth.core.bus import MessageBus
from berth.core.limits import Limit, RateLimiter
from berth.core.streams import OpenStreams
from litestar import Litestar, Router
from litestar.datastructures import State
from litestar.di import Provide
from litestar.exceptions import NotFoundException
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin
from litestar.openapi.spec import Components, Tag
from litestar.plugins import PluginProtocol
from litestar.plugins.core import MsgspecDIPlugin

from ..settings import Settings
from .auth import HttpLimits, bearer_auth, enrollment_auth, server_signature_auth
from .controllers import (
    API_CONTROLLERS,
    DeployHookController,
    EnrollmentController,
    PublicController,
    ServerSelfController,
    caller_of,
)
from .dashboard import csrf_config, dashboard_routers, template_config
from .errors import EXCEPTION_HANDLERS
from .etags import etags
from .inputs import JsonBodies, read_inputs
from .metrics import MetricsRoute
from .middleware import allowed_methods, request_context
from .openapi import API_SCHEME, ENROLLMENT_SCHEME, SERVER_SCHEME, security_schemes
from .schemas import BODIES
from .streams import STREAMS

__all__ = ["create_app", "create_metrics_app"]

API_VERSION = "1.0.0"


class _Litestar(Litestar):
    """Litestar without the plugins it adds for pydantic and attrs whenever they are
    installed (the MCP SDK brings pydantic): berth's bodies, answers and dependencies are
    msgspec Structs and plain objects, and importing those plugins cost every ``berth
    serve`` start ~0.13 s of CPU (measured: Litestar alone 0.29 s, with them 0.42 s; the
    test suite starts some two hundred). The MCP SDK imports pydantic at its first use."""

    @staticmethod
    def _get_default_plugins(plugins: list[PluginProtocol]) -> list[PluginProtocol]:
        return [*plugins, MsgspecDIPlugin()]

    def _validate_registration_value(self, value: Any) -> Any:
        """A router registered as itself, not as a deep copy: Litestar copies one so that
        the same router may go into several apps, but ``create_app`` makes its routers
        for this app alone, and copying them (every handler, its signature and its
        dependencies) was ~40 % of making the app."""
        if isinstance(value, Router) and value is not self:
            value.owner = self
            return value
        return super()._validate_registration_value(value)


def create_app(
    bus: MessageBus,
    settings: Settings,
    *,
    limiter: RateLimiter | None = None,
    on_startup: Sequence[Callable[[], Awaitable[None]]] = (),
    on_shutdown: Sequence[Callable[[], Awaitable[None]]] = (),
    metrics: PrometheusMetrics | None = None,
    csrf_secret: str | None = None,
) -> Litestar:
    """The HTTP app: the public API, the install script, health probes and the dashboard.

    A handler's signature names its inputs: ``bus`` and ``settings`` (given here),
    ``caller`` (the API router's), its body, parameters and path ids, read strictly by
    ``inputs`` (``read_inputs``, ``JsonBodies``). Exceptions become problems through one
    map (``errors.EXCEPTION_HANDLERS``). Authentication is middleware on the API's
    routers, so a route added to them cannot go without it; the public routes are the
    ones of ``PublicController`` and nothing else; ``/metrics`` has its own protection
    (the metrics token, else this machine only). Without a ``limiter``, limits are per
    process; without ``metrics``, the app counts its requests in a registry of its own.
    ``csrf_secret`` signs the dashboard's CSRF tokens: the same in every process that
    serves the same users (without it, one of this process's own, for tests).
    """
    meter = metrics or PrometheusMetrics()
    if limiter is None:
        from berth.adapters.ratelimit import MemoryRateLimiter

        limiter = MemoryRateLimiter()
    limits = HttpLimits(
        limiter=limiter,
        requests=Limit(count=settings.rate_limit_per_minute, period=60.0),
        auth_failures=Limit(count=settings.auth_failures_per_minute, period=60.0),
    )
    # Each router takes one kind of credential: its middleware checks it, its security
    # documents it on every route.
    enrollment = Router(
        "/api/agent/servers/enroll",
        route_handlers=[EnrollmentController],
        middleware=[enrollment_auth(bus, limits)],
        tags=["enrollment"],
        security=[{ENROLLMENT_SCHEME: []}],
    )
    server_self = Router(
        "/api/agent/servers/self",
        route_handlers=[ServerSelfController],
        middleware=[server_signature_auth(bus, limits)],
        tags=["enrollment"],
        security=[{SERVER_SCHEME: []}],
    )
    api = Router(
        "/api/agent",
        route_handlers=API_CONTROLLERS,
        middleware=[bearer_auth(bus, limits), etags],
        dependencies={"caller": Provide(caller_of, sync_to_thread=False)},
        tags=["agent"],
        security=[{API_SCHEME: []}],
    )
    from ..mcp.mount import MountedMcp  # the MCP server at /mcp, same token and limits

    mcp = MountedMcp(bus, limits, max_body_bytes=settings.max_body_bytes)

    app = _Litestar(
        route_handlers=[
            api,
            enrollment,
            server_self,
            mcp.router,
            PublicController,
            DeployHookController,
            MetricsRoute,
            *dashboard_routers(bus, settings.base_url),
        ],
        csrf_config=csrf_config(csrf_secret or secrets.token_hex(32), settings.base_url),
        template_config=template_config(),
        dependencies=_given(bus=bus, settings=settings, metrics=meter),
        plugins=[JsonBodies(BODIES)],
        before_request=read_inputs,
        exception_handlers=EXCEPTION_HANDLERS,
        request_max_body_size=settings.max_body_bytes,
        state=State(
            {
                STREAMS: OpenStreams(
                    per_user=settings.streams_per_user, per_process=settings.streams_per_process
                ),
            }
        ),
        on_startup=list(on_startup),
        on_shutdown=list(on_shutdown),
        lifespan=[mcp.lifespan],
        logging_config=None,
        debug=False,
        openapi_config=OpenAPIConfig(
            title="berth",
            version=API_VERSION,
            description=(
                "Deploy Docker applications to your own servers. Authenticate with "
                "`Authorization: Bearer <token>` (Settings → API Token). Errors are "
                "RFC 9457 application/problem+json."
            ),
            # PublicController serves the document at /api/agent/openapi.json, so that it
            # describes itself; the router Litestar always mounts for it answers nothing
            # (its catch-all would otherwise answer unknown /api/agent/* paths in HTML).
            openapi_router=Router(
                "/_litestar-schema",
                route_handlers=[],
                include_in_schema=False,
                guards=[_nothing_here],
            ),
            render_plugins=[JsonRenderPlugin()],
            components=Components(security_schemes=security_schemes()),
            tags=[
                Tag(name="agent", description="The public API, version 1."),
                Tag(name="public", description="No authentication."),
                Tag(
                    name="enrollment",
                    description="The install script's routes, with a server's enrollment token.",
                ),
            ],
        ),
    )
    # Around the whole app, not each route: unknown routes and wrong methods get a
    # request id (header and problem body), the safety headers and a log line too.
    from ..mcp.oauth import serve_oauth  # OAuth for MCP clients: its routes, /mcp's 401

    serve_oauth(app, bus, settings, limits)
    app.asgi_handler = request_context(
        app.asgi_handler, allowed_methods(app.routes), observe=meter.request
    )
    return app


def create_metrics_app(bus: MessageBus, settings: Settings, metrics: PrometheusMetrics) -> Litestar:
    """``GET /metrics`` alone, for a ``berth worker`` (``--metrics-listen``): its step
    durations and takeovers, and the store's counts, under the same protection."""

    app = _Litestar(
        route_handlers=[MetricsRoute],
        dependencies=_given(bus=bus, settings=settings, metrics=metrics),
        exception_handlers=EXCEPTION_HANDLERS,
        logging_config=None,
        debug=False,
        openapi_config=None,
    )
    app.asgi_handler = request_context(app.asgi_handler)
    return app


def _given(**objects: object) -> dict[str, Provide]:
    """Each object as the dependency of its name: the same one for every request."""

    def provider(value: object) -> Provide:
        return Provide(lambda: value, sync_to_thread=False)

    return {name: provider(value) for name, value in objects.items()}


def _nothing_here(connection: Any, handler: Any) -> None:
    raise NotFoundException()
