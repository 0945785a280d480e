"""Routes without authentication: the install script, the API document, health probes.

Each answers HEAD as well as GET (docs/decisions/2026-11-22-problem-details.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from berth.core import commands as c
from berth.core.bus import MessageBus
from berth.core.errors import StoreUnavailable
from litestar import Controller, HttpMethod, MediaType, Request, Response, route
from litestar.di import NamedDependency
from litestar.enums import OpenAPIMediaType
from litestar.handlers import HTTPRouteHandler

from ...install import render_install_script
from ...settings import Settings
from ..openapi import complete, documented
from ..schemas import Health, Readiness
from ..urls import base_url

__all__ = ["PublicController"]

Req = Request[Any, Any, Any]


def _get_and_head(path: str, name: str, **kwargs: Any) -> Callable[[Any], HTTPRouteHandler]:
    """A GET route that answers HEAD too: the GET's status and headers, without the body."""
    return documented(route, path, name, http_method=[HttpMethod.GET, HttpMethod.HEAD], **kwargs)


class PublicController(Controller):
    path = "/"
    tags = ["public"]

    @_get_and_head("/api/deploy", "getInstallScript", media_type="text/x-shellscript")
    async def install_script(
        self, request: Req, settings: NamedDependency[Settings]
    ) -> Response[str]:
        """The server install script (POSIX sh)

        Run on a server as root with the enrollment token of `POST /api/agent/servers` (its
        `installCommand`): installs Docker and Caddy if missing, creates the `berth` user,
        authorizes berth's forward-only key and enrolls the server. `--dry-run` shows what
        it would do; `--uninstall` undoes it. Embeds no secret.

        Returns:
            The script (shellcheck-clean POSIX sh).
        """
        return Response(
            render_install_script(base_url(request, settings)), media_type="text/x-shellscript"
        )

    @_get_and_head(
        "/api/agent/openapi.json", "getOpenApiDocument", media_type=OpenAPIMediaType.OPENAPI_JSON
    )
    async def openapi_document(self, request: Req) -> dict[str, Any]:
        """This document: the OpenAPI 3.1 description of every public endpoint

        Describes what this server does, always; no token needed. Problem kinds are the enum
        of `Problem.type`.

        Returns:
            The OpenAPI 3.1 document.
        """
        app = request.app
        document: dict[str, Any] | None = app.state.get("openapi_document")
        if document is None:  # built once: Litestar's, completed (openapi.py)
            document = complete(app.openapi_schema.to_schema())
            app.state["openapi_document"] = document
        return document

    @_get_and_head("/healthz", "getLiveness", media_type=MediaType.JSON)
    async def healthz(self) -> Health:
        """Liveness

        Answers while the process serves requests; says nothing of the store.

        Returns:
            The process is alive.
        """
        return Health(status="ok")

    @_get_and_head("/readyz", "getReadiness")
    async def readyz(
        self, bus: NamedDependency[MessageBus], settings: NamedDependency[Settings]
    ) -> Readiness:
        """Readiness: the store answers

        Ready when one read of the database answers within 2 s; the answer names the kind of
        database (a replica of a scaled-out berth: postgresql).

        Returns:
            Ready: the store answered.

        Raises:
            503: Not ready (store-unavailable): the store did not answer; retry after
                `Retry-After`.
        """
        # Ready when one read of the store answers within ``timeout`` seconds; else 503
        # store-unavailable with Retry-After (the map in errors.py). /healthz: liveness only.
        timeout = 2.0
        try:
            async with asyncio.timeout(timeout):
                await bus.handle(c.SignUpPolicy())  # one read of the store, never cached
        except TimeoutError:
            raise StoreUnavailable(
                f"The database did not answer within {timeout:g} s; try again shortly."
            ) from None
        url = settings.database_url or "sqlite"
        return Readiness(
            status="ready", database="postgresql" if url.startswith("postgresql") else "sqlite"
        )
