"""The Litestar app factory. It takes built services, so tests can pass fakes."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec
from litestar import Litestar, Router
from litestar._openapi.schema_generation.plugins.struct import StructSchemaPlugin
from litestar.di import Provide
from litestar.exceptions import NotFoundException
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin
from litestar.openapi.spec import Components, SecurityScheme, Tag

from ..bootstrap import Services
from ..settings import Settings
from .context import AppContext
from .dashboard import Templates, dashboard_routers
from .enroll import ENROLLMENT_SCHEME, EnrollmentApi, enrollment_security_scheme
from .errors import handle
from .middleware import request_context
from .routes import AgentApi, PublicRoutes

__all__ = ["create_app"]

API_VERSION = "1.0.0"


def create_app(
    services: Services,
    settings: Settings,
    *,
    on_startup: Sequence[Callable[[], Awaitable[None]]] = (),
    on_shutdown: Sequence[Callable[[], Awaitable[None]]] = (),
) -> Litestar:
    """The HTTP app: the public API, the install script, health probes and the dashboard."""
    ctx = AppContext(services=services, settings=settings)

    def provide_services() -> Services:
        return services

    app = Litestar(
        route_handlers=[AgentApi, EnrollmentApi, PublicRoutes, *dashboard_routers()],
        dependencies={"services": Provide(provide_services, sync_to_thread=False)},
        exception_handlers={Exception: handle},
        plugins=[_StrictStructs()],
        request_max_body_size=settings.max_body_bytes,
        state=_state(ctx),
        on_startup=list(on_startup),
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
            # PublicRoutes serves the document at /api/agent/openapi.json, so that it
            # describes itself; the router Litestar always mounts for it answers nothing
            # (its catch-all would otherwise answer unknown /api/agent/* paths in HTML).
            openapi_router=Router(
                "/_litestar-schema",
                route_handlers=[],
                include_in_schema=False,
                guards=[_nothing_here],
            ),
            render_plugins=[JsonRenderPlugin()],
            components=Components(
                security_schemes={
                    "BearerToken": SecurityScheme(
                        type="http",
                        scheme="bearer",
                        bearer_format="berth_<49 base62 characters>",
                        description="Your API token from Settings → API Token.",
                    ),
                    ENROLLMENT_SCHEME: enrollment_security_scheme(),
                }
            ),
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
    app.asgi_handler = request_context(app.asgi_handler)
    return app


def _nothing_here(connection: Any, handler: Any) -> None:
    raise NotFoundException()


class _StrictStructs(StructSchemaPlugin):
    """Request bodies (Structs that refuse unknown fields, 422) as msgspec describes them.

    Litestar's own schemas drop what msgspec knows about a dict's keys and a list's
    items (``env``'s key pattern and size, each volume's pattern); msgspec's JSON Schema
    of the Struct keeps them, and ``additionalProperties: false``. A property that
    refers to another Struct keeps Litestar's ``$ref`` (its component is Litestar's).
    """

    def is_plugin_supported_field(self, field_definition: Any) -> bool:
        if not super().is_plugin_supported_field(field_definition):
            return False
        info = msgspec.inspect.type_info(field_definition.type_)
        return isinstance(info, msgspec.inspect.StructType) and info.forbid_unknown_fields

    def to_openapi_schema(self, field_definition: Any, schema_creator: Any) -> Any:
        schema = super().to_openapi_schema(field_definition, schema_creator)
        schema.additional_properties = False
        properties: dict[str, Any] = dict(schema.properties or {})
        for name, prop in _msgspec_schema(field_definition.type_).get("properties", {}).items():
            if name in properties and "$ref" not in json.dumps(prop):
                properties[name] = prop  # a plain dict: Litestar serializes it as is
        schema.properties = properties
        return schema


def _msgspec_schema(struct: type) -> dict[str, Any]:
    """msgspec's JSON Schema of ``struct`` itself (not of the Structs it refers to)."""
    (ref,), components = msgspec.json.schema_components([struct])
    found: dict[str, Any] = components[ref["$ref"].rsplit("/", 1)[1]]
    return found


def _state(ctx: AppContext) -> dict[str, object]:
    return {"berth": ctx, "berth_templates": Templates()}
