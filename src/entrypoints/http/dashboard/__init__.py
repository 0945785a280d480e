"""The web dashboard: server-rendered pages over the same use cases as the API.

``dashboard_routers()`` gives the routers to mount: the pages (behind a session,
none in the OpenAPI document) and ``/static``. Errors inside the dashboard are
HTML pages; the API's problem+json handling is untouched.
"""

from __future__ import annotations

from typing import Any

import structlog
from berth.core.bus import MessageBus
from berth.core.errors import CoreError, NotFound, StoreUnavailable
from litestar import Request, Response, Router
from litestar.datastructures import CacheControlHeader
from litestar.exceptions import HTTPException, NotFoundException
from litestar.static_files import create_static_files_router

from ..errors import EXCEPTION_HANDLERS, status_of
from .pages import Accounts, AppPages, ServerPages, SettingsPages
from .web import (
    SECURITY_HEADERS,
    STATIC_DIR,
    CsrfRefused,
    FormRefused,
    Templates,
    page,
    visitor_loader,
)

__all__ = ["Templates", "dashboard_routers"]

log = structlog.get_logger()

_TITLES = {
    400: "Bad request",
    401: "Not signed in",
    403: "Not allowed",
    404: "Not found",
    405: "Not allowed",
    409: "Conflict",
    413: "Too large",
    415: "Unsupported form",
    422: "Invalid input",
    429: "Slow down",
    500: "Something went wrong",
    502: "The server's Docker refused",
    503: "Server unreachable",
}


def _describe(exc: Exception, request_id: str) -> tuple[int, str]:
    """The status and the sentence a person reads for an error."""
    if isinstance(exc, NotFound | NotFoundException):
        return 404, "There is nothing here: this page does not exist, or it is not yours."
    if isinstance(exc, CsrfRefused):
        return 403, (
            "This form expired or did not come from this page. "
            "Go back, reload the page and try again."
        )
    if isinstance(exc, FormRefused):
        return exc.status, exc.detail
    if isinstance(exc, CoreError):  # the API's status for the same error
        return status_of(exc), exc.detail
    if isinstance(exc, HTTPException) and exc.status_code < 500:
        if exc.status_code == 413:
            return 413, "The form is larger than 1 MiB."
        return exc.status_code, exc.detail
    log.exception("dashboard_error")
    return 500, f"An internal error happened; quote request id {request_id} when reporting it."


def handle_error(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """Every error inside the dashboard, as an HTML page with the security headers."""
    request_id = request.scope.get("state", {}).get("request_id", "")
    status, detail = _describe(exc, request_id)
    try:
        return page(
            request,
            "error.html",
            status=status,
            title="Database unavailable"
            if isinstance(exc, StoreUnavailable)
            else _TITLES.get(status, "Error"),
            detail=detail,
        )
    except Exception:  # the page itself failed: say so plainly
        log.exception("dashboard_error_page_failed")
        return Response(
            detail,
            status_code=status,
            media_type="text/plain",  # Litestar adds the charset
            headers=dict(SECURITY_HEADERS),
        )


def dashboard_routers(bus: MessageBus, base_url: str | None) -> list[Router]:
    """The dashboard's pages and its static files, both outside the OpenAPI document.

    Handlers get ``bus`` and ``settings`` by name like the API's; the visitor (session,
    CSRF) is resolved over ``bus`` before each page.
    """
    pages = Router(
        "/",
        route_handlers=[Accounts, ServerPages, AppPages, SettingsPages],
        before_request=visitor_loader(bus, base_url),
        # Each class the app's problem map names too: a page's error is a page.
        exception_handlers=dict.fromkeys(EXCEPTION_HANDLERS, handle_error),
        include_in_schema=False,
    )
    static = create_static_files_router(
        "/static",
        directories=[STATIC_DIR],
        include_in_schema=False,
        cache_control=CacheControlHeader(max_age=31_536_000, public=True),
    )
    return [pages, static]
