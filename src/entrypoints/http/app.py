"""The Litestar app factory. It takes built services, so tests can pass fakes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from litestar import Litestar
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig
from litestar.openapi.spec import Components, SecurityScheme, Tag

from ..bootstrap import Services
from ..settings import Settings
from .context import AppContext
from .errors import handle
from .middleware import request_context
from .routes import AgentApi, PublicRoutes

__all__ = ["create_app"]

API_VERSION = "1.0.0"


def create_app(
    services: Services,
    settings: Settings,
    *,
    on_shutdown: Sequence[Callable[[], Awaitable[None]]] = (),
) -> Litestar:
    """The HTTP app: the public API, the install script and health probes."""
    ctx = AppContext(services=services, settings=settings)

    def provide_services() -> Services:
        return services

    return Litestar(
        route_handlers=[AgentApi, PublicRoutes],
        dependencies={"services": Provide(provide_services, sync_to_thread=False)},
        exception_handlers={Exception: handle},
        middleware=[request_context],
        request_max_body_size=settings.max_body_bytes,
        state=_state(ctx),
        on_shutdown=list(on_shutdown),
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
            path="/api/agent",
            render_plugins=[],
            components=Components(
                security_schemes={
                    "BearerToken": SecurityScheme(
                        type="http",
                        scheme="bearer",
                        bearer_format="berth_<49 base62 characters>",
                        description="Your API token from Settings → API Token.",
                    )
                }
            ),
            tags=[
                Tag(name="agent", description="The public API, version 1."),
                Tag(name="public", description="No authentication."),
            ],
        ),
    )


def _state(ctx: AppContext) -> dict[str, object]:
    return {"berth": ctx}
