"""The web dashboard: server-rendered pages over the same use cases as the API.

``dashboard_routers(bus)`` gives the routers to mount — the pages (none in the OpenAPI
document) and ``/static`` — and ``csrf_config`` Litestar's CSRF check for the app.
Configured once for every page, so a new one cannot forget them:

* the visitor: ``session_auth`` resolves the session cookie through the bus into
  ``request.user`` (``None`` for nobody) and the credential its streams re-check;
* the guard ``signed_in``: a visitor who is not is sent to the sign-in page (then back);
  a fragment polled by a script gets a bare 401; only the handlers marked
  ``public`` (the sign-in and sign-up pages) let anybody in;
* the guard ``posted_here``: a POST must be a urlencoded form (else 415) and, when the
  browser sends an ``Origin``, come from this origin (else 403);
* Litestar's CSRF check (``csrf_config``): every POST but the API's carries the
  ``_csrf_token`` of the ``berth_csrf`` cookie (else 403, before anything happens).

Errors inside the dashboard are HTML pages; the API's problem+json handling is untouched.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

import structlog
from berth.core.access import Actor
from berth.core.bus import MessageBus
from berth.core.commands import ResolveSession
from berth.core.errors import CoreError, NotFound, StoreUnavailable
from berth.core.models import User
from litestar import Request, Response, Router
from litestar.config.csrf import CSRFConfig
from litestar.connection import ASGIConnection
from litestar.datastructures import CacheControlHeader, ResponseHeader
from litestar.di import NamedDependency, Provide
from litestar.exceptions import (
    HTTPException,
    NotAuthorizedException,
    NotFoundException,
    PermissionDeniedException,
    ValidationException,
)
from litestar.handlers import BaseRouteHandler
from litestar.middleware.authentication import (
    AbstractAuthenticationMiddleware,
    AuthenticationResult,
)
from litestar.static_files import create_static_files_router
from litestar.types import Empty, Guard
from litestar.utils.scope.state import ScopeState

from ..controllers.common import Caller
from ..errors import EXCEPTION_HANDLERS, status_of
from ..streams import CREDENTIAL, session_credential
from .accounts import AccountPages
from .acting import ACTING, TEAM_NAV, acting_actor, user_teams
from .apps import AppPage
from .consent import ConsentPage
from .live_status import LiveStatus
from .servers import ServerList, ServerPage
from .settings_page import SettingsPage
from .teams import InvitationPage, TeamPages
from .web import SECURITY_HEADERS, SESSION_COOKIE, STATIC_DIR, Html, SeeOther, template_config

__all__ = ["csrf_config", "dashboard_routers", "template_config"]

log = structlog.get_logger()

#: Where Litestar's CSRF check does not apply: the API (a Bearer token, an enrollment
#: token or a signature; never a cookie), MCP and its OAuth endpoints (their clients hold
#: no session), the probes, metrics and the static files.
#: Everything else — the dashboard, and any page added later — needs the token.
NOT_PAGES = [
    "^/api/",
    "^/mcp(/|$)",
    "^/\\.well-known/",
    "^/(authorize|token|register|revoke)$",  # OAuth's (entrypoints.mcp.oauth)
    "^/healthz$",
    "^/readyz$",
    "^/metrics$",
    "^/static/",
    "^/_litestar-schema",
]


def csrf_config(secret: str, base_url: str | None) -> CSRFConfig:
    """Litestar's double-submit CSRF check: an HMAC-signed token (``secret``) in an
    HttpOnly, SameSite=Strict cookie (``Secure`` under an ``https://`` base URL) that
    each form sends back as ``_csrf_token``."""
    return CSRFConfig(
        secret=secret,
        cookie_name="berth_csrf",
        cookie_httponly=True,
        cookie_samesite="strict",
        cookie_secure=(base_url or "").startswith("https://"),
        exclude=NOT_PAGES,
    )


def session_auth(bus: MessageBus) -> type[AbstractAuthenticationMiddleware]:
    """Middleware: the session cookie resolved over ``bus`` into ``request.user`` and
    ``request.auth`` (the ``WebSession``), both ``None`` without a live session; the
    actor the visitor acts as (``acting.acting_actor``: in the session's acting team)
    and, for a page (not a polled fragment), the teams of its team switcher. A class
    made here, not ``DefineMiddleware`` arguments: Litestar deep-copies those, and the
    bus must stay the one bus."""

    class SessionAuth(AbstractAuthenticationMiddleware):
        async def authenticate_request(
            self, connection: ASGIConnection[Any, Any, Any, Any]
        ) -> AuthenticationResult:
            session_id = connection.cookies.get(SESSION_COOKIE)
            found = await bus.handle(ResolveSession(session_id=session_id)) if session_id else None
            if session_id and found is not None:
                actor = await acting_actor(bus, connection, found[0])
                connection.scope[ACTING] = actor  # type: ignore[literal-required]
                # what a live region re-checks (streams.py): the session, and the team
                credential = session_credential(bus, session_id, found[0], actor.team_id)
                connection.scope[CREDENTIAL] = credential  # type: ignore[literal-required]
                handler = connection.scope.get("route_handler")
                if handler is None or not handler.opt.get("fragment"):  # the team switcher's
                    state = connection.scope.setdefault("state", {})
                    state[TEAM_NAV] = await user_teams(bus, actor)
            return AuthenticationResult(*(found or (None, None)))

    return SessionAuth


def signed_in(connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler) -> None:
    """Every page but the ``public`` ones needs a signed-in visitor."""
    if connection.scope.get("user") is None and not handler.opt.get("public"):
        raise NotAuthorizedException()


def posted_here(base_url: str | None) -> Guard:
    """The guard: a POST is a form sent from this origin (``base_url``'s, else the
    request's ``Host``); Litestar checked its CSRF token before."""

    def guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        if not isinstance(connection, Request) or connection.method != "POST":
            return
        if connection.content_type[0] != "application/x-www-form-urlencoded":
            raise HTTPException(status_code=415, detail="Send this form from berth's own page.")
        origin = connection.headers.get("origin")
        if origin is None:
            return  # older browsers and non-browser clients: the CSRF token decides
        host = (
            urllib.parse.urlsplit(base_url).netloc if base_url else connection.headers.get("host")
        )
        if origin == "null" or urllib.parse.urlsplit(origin).netloc != host:
            raise PermissionDeniedException("The form came from another site.")

    return guard


def _provide_user(request: Request[User, Any, Any]) -> Actor:
    """Who the signed-in visitor acts as (``session_auth`` found it): their role in the
    session's acting team. ``signed_in`` let only them through, public pages aside."""
    actor: Actor = request.scope[ACTING]  # type: ignore[literal-required]
    return actor


def _provide_caller(bus: NamedDependency[MessageBus], user: NamedDependency[Actor]) -> Caller:
    """The bus for the signed-in visitor, as the API's handlers have it: ``await
    caller(command)`` handles ``command`` as ``user``."""
    return Caller(bus, user)


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
    if isinstance(exc, PermissionDeniedException):  # Litestar's CSRF check, posted_here
        return 403, (
            "This form expired or did not come from this page. "
            "Go back, reload the page and try again."
        )
    if isinstance(exc, CoreError):  # the API's status for the same error
        return status_of(exc), exc.detail
    if isinstance(exc, ValidationException):  # not sent by berth's pages: as the API's 422
        return 422, "This request could not be read: send it from berth's own page."
    if isinstance(exc, HTTPException) and exc.status_code < 500:
        if exc.status_code == 413:
            return 413, "The form is larger than 1 MiB."
        return exc.status_code, exc.detail
    log.exception("dashboard_error")
    return 500, f"An internal error happened; quote request id {request_id} when reporting it."


def handle_error(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """Every error inside the dashboard, as an HTML page with the security headers; a
    visitor who is not signed in goes to the sign-in page."""
    headers = dict(SECURITY_HEADERS)
    if isinstance(exc, NotAuthorizedException):  # signed_in
        if request.route_handler.opt.get("fragment"):
            return Response(
                "Signed out.", status_code=401, media_type="text/plain", headers=headers
            )
        target = "/servers"
        if request.method == "GET":
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return SeeOther("/login?" + urllib.parse.urlencode({"next": target}), headers=headers)
    state = ScopeState.from_scope(request.scope)
    if state.csrf_token is Empty and request.app.csrf_config:  # refused before the check
        state.csrf_token = request.cookies.get(request.app.csrf_config.cookie_name, "")
    status, detail = _describe(exc, request.scope.get("state", {}).get("request_id", ""))
    title = (
        "Database unavailable"
        if isinstance(exc, StoreUnavailable)
        else _TITLES.get(status, "Error")
    )
    return Html("error.html", status_code=status, headers=headers, title=title, detail=detail)


def dashboard_routers(bus: MessageBus, base_url: str | None) -> list[Router]:
    """The dashboard's pages and its static files, both outside the OpenAPI document.

    Handlers get ``bus`` and ``settings`` by name like the API's, and from this router
    ``user`` (the signed-in one) and ``caller`` (the bus for them, as the API's).
    """
    pages = Router(
        "/",
        route_handlers=[
            AccountPages,
            ServerList,
            ServerPage,
            AppPage,
            LiveStatus,
            SettingsPage,
            TeamPages,
            InvitationPage,
            ConsentPage,
        ],
        middleware=[session_auth(bus)],
        guards=[signed_in, posted_here(base_url)],
        dependencies={
            "user": Provide(_provide_user, sync_to_thread=False),
            "caller": Provide(_provide_caller, sync_to_thread=False),
        },
        response_headers=[ResponseHeader(name=k, value=v) for k, v in SECURITY_HEADERS.items()],
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
