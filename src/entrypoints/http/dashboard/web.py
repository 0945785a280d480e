"""The dashboard's plumbing: templates, security headers, cookies, sessions, CSRF, forms.

Promises kept here for every dashboard response:

* HTML comes from Jinja templates with autoescaping on; nothing else writes markup.
* Every page carries the Content-Security-Policy below (no inline script or style,
  nothing from another origin), ``X-Frame-Options: DENY``,
  ``Referrer-Policy: same-origin`` and ``Cache-Control: no-store``.
* The session cookie is ``HttpOnly; SameSite=Lax; Path=/`` and ``Secure`` whenever
  the request came over HTTPS or the base URL is ``https://``; it holds a random id
  of which the store keeps only a hash.
* Every POST must carry the CSRF token of its session (or, before signing in, the one
  of the ``berth_csrf`` cookie) and, when the browser sends an ``Origin``, come from
  this origin; otherwise it is refused with a 403 page before anything happens.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any

import jinja2
import markupsafe
from berth.core.access import Actor
from berth.core.bus import MessageBus
from berth.core.commands import ResolveSession
from berth.core.models import SESSION_MAX, Server, User, WebSession
from berth.core.types import host_key_fingerprint
from litestar import Request, Response
from litestar.datastructures import State
from litestar.response import Redirect

from ..streams import CREDENTIAL, session_credential

__all__ = [
    "CSRF_COOKIE",
    "SECURITY_HEADERS",
    "SESSION_COOKIE",
    "STATIC_DIR",
    "TEMPLATES_DIR",
    "CsrfRefused",
    "Form",
    "FormRefused",
    "Templates",
    "Visitor",
    "clear_session_cookie",
    "page",
    "read_form",
    "redirect",
    "set_session_cookie",
    "visitor_loader",
    "visitor_of",
]

Req = Request[Any, Any, State]

HTTP_DIR = Path(__file__).resolve().parent.parent
TEMPLATES_DIR = HTTP_DIR / "templates"
STATIC_DIR = HTTP_DIR / "static"

SESSION_COOKIE = "berth_session"
CSRF_COOKIE = "berth_csrf"
CSRF_FIELD = "csrf_token"

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)
SECURITY_HEADERS: Mapping[str, str] = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
}


class CsrfRefused(Exception):
    """A POST without this session's CSRF token, or from another origin."""


class FormRefused(Exception):
    """A POST body that is not a form berth sent (wrong media type, not UTF-8)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


# --- templates -------------------------------------------------------------------------


def _fingerprints(keys: Any) -> list[str]:
    """The SHA-256 fingerprints (OpenSSH format) of host key lines; unreadable ones left out."""
    found = []
    for key in keys or ():
        try:
            found.append(host_key_fingerprint(str(key)))
        except ValueError:
            continue
    return found


def _ago(value: datetime | None, now: datetime | None = None) -> str:
    """``3 min ago``; ``never`` for ``None``."""
    if value is None:
        return "never"
    seconds = int(((now or datetime.now(UTC)) - value).total_seconds())
    if seconds < 5:
        return "just now"
    if seconds < 60:
        return f"{seconds} s ago"
    if seconds < 3600:
        return f"{seconds // 60} min ago"
    if seconds < 86400:
        return f"{seconds // 3600} h ago"
    days = seconds // 86400
    if days < 30:
        return f"{days} day{'s' if days > 1 else ''} ago"
    return value.strftime("%Y-%m-%d")


def _when(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if value else ""


def _iso(value: datetime | None) -> str:
    return value.astimezone(UTC).isoformat(timespec="seconds") if value else ""


def _size(value: int | None) -> str:
    if not value:
        return "—"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit in ("B", "KiB") else f"{size:.1f} {unit}"
        size /= 1024
    return f"{value} B"


def shown_status(server: Server) -> str:
    """A server's status as the dashboard words it: ``checking`` for one berth has not
    tried yet (offline, never seen, no reason recorded) — e.g. this machine right after
    the first sign-up — which is not known to be offline."""
    status = server.status.value
    if status == "offline" and server.last_seen_at is None and not server.status_detail:
        return "checking"
    return status


_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_JSON_TYPE = re.compile(r", got (?:a string|a number|a boolean|an array|an object|null)\.")


def prose(text: object) -> markupsafe.Markup:
    """A message the core wrote for every entrypoint, as the dashboard shows it: its
    Markdown code spans (`` `nginx:1.27` ``) as ``<code>``, and without the JSON type
    of a wrong value (``, got a string.``), which a form, where everything is typed as
    text, makes meaningless. The API keeps the text as it is."""
    escaped = str(markupsafe.escape(_JSON_TYPE.sub(".", str(text))))
    # Safe: every character of the message was escaped; only the <code> tags are ours.
    return markupsafe.Markup(_CODE_SPAN.sub(r"<code>\1</code>", escaped))  # noqa: S704


def deploy_blocked(server: Server) -> str | None:
    """Why the dashboard offers no deploy on ``server`` now, in words; ``None`` when it
    does (the server is online). The API still queues a deploy to an offline server (it
    waits, SPEC.md); the dashboard does not offer one that would only sit queued."""
    status = shown_status(server)
    if status == "online":
        return None
    if status == "pending":
        return (
            "This server has not enrolled yet: run its install command on it, and deploys "
            "open once berth reaches it."
        )
    if status == "checking":
        return "berth has not reached this server yet; deploys open once it is online."
    if status == "host_key_mismatch":
        return "The server's SSH host key changed: deploys open once you confirm the new key."
    if status == "removed":
        return "berth was uninstalled from this server: add it again to deploy on it."
    reason = f" ({server.status_detail.rstrip('.')})" if server.status_detail else ""
    return f"berth cannot reach this server now{reason}; deploys open once it is back online."


class Templates:
    """The Jinja environment: autoescaping on, undefined names are errors."""

    def __init__(self, directory: Path = TEMPLATES_DIR, static: Path = STATIC_DIR) -> None:
        self._static = static
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(directory),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            auto_reload=False,
        )
        self.env.filters.update(
            ago=_ago,
            when=_when,
            iso=_iso,
            size=_size,
            shown_status=shown_status,
            deploy_blocked=deploy_blocked,
            prose=prose,
            fingerprints=_fingerprints,
        )
        self.env.globals["static"] = self.static_url

    @cached_property
    def _versions(self) -> dict[str, str]:
        return {
            path.name: hashlib.sha256(path.read_bytes()).hexdigest()[:12]
            for path in self._static.iterdir()
            if path.is_file()
        }

    def static_url(self, name: str) -> str:
        """``/static/<name>?v=<content hash>``: cacheable for ever, new URL on change."""
        return f"/static/{name}?v={self._versions.get(name, '0')}"

    def render(self, name: str, context: Mapping[str, Any]) -> str:
        return self.env.get_template(name).render(context)


# --- who is asking ---------------------------------------------------------------------


@dataclass(slots=True)
class Visitor:
    """The signed-in user and session of a request, or nobody."""

    user: User | None = None
    session: WebSession | None = None
    #: Who the signed-in user acts as: every right of their role in the session's team
    #: (their personal team: the team switcher is the dashboard's to add).
    actor: Actor | None = None
    anonymous_csrf: str | None = None  # the berth_csrf cookie (before signing in)
    new_anonymous_csrf: bool = False  # set the cookie on the response
    extra_cookies: list[tuple[str, str | None]] = field(default_factory=list)
    base_url: str | None = None  # BERTH_BASE_URL: the origin forms must come from

    @property
    def csrf_token(self) -> str:
        if self.session is not None:
            return self.session.csrf_token
        if self.anonymous_csrf is None:
            self.anonymous_csrf = secrets.token_urlsafe(32)
            self.new_anonymous_csrf = True
        return self.anonymous_csrf


def visitor_of(request: Req) -> Visitor:
    visitor: Visitor = request.state.visitor
    return visitor


def _secure(request: Req) -> bool:
    visitor: Visitor | None = request.state.get("visitor")
    base = (visitor.base_url if visitor else None) or ""
    return request.url.scheme == "https" or base.startswith("https://")


def visitor_loader(
    bus: MessageBus, base_url: str | None
) -> Callable[[Req], Awaitable[Response[Any] | None]]:
    """The dashboard's before-request hook, over ``bus``."""

    async def load_visitor(request: Req) -> Response[Any] | None:
        """Resolve the session cookie into ``state.visitor``; send a visitor without one
        to the sign-in page (then back), except on public pages; fragments polled by
        scripts get a bare 401."""
        visitor = Visitor(
            anonymous_csrf=request.cookies.get(CSRF_COOKIE) or None, base_url=base_url
        )
        session_id = request.cookies.get(SESSION_COOKIE)
        if session_id:
            found = await bus.handle(ResolveSession(session_id=session_id))
            if found is not None:
                visitor.user, visitor.session = found
                address = request.client.host if request.client else None
                visitor.actor = Actor.personal(
                    visitor.user,
                    token_name="dashboard",  # noqa: S106 (a name)
                    client_address=address,
                )
                request.scope[CREDENTIAL] = session_credential(bus, session_id, visitor.user)  # type: ignore[literal-required]
        request.state.visitor = visitor
        return _admit(request, visitor)

    return load_visitor


def _admit(request: Req, visitor: Visitor) -> Response[Any] | None:
    opt = request.route_handler.opt
    if visitor.user is not None or opt.get("public"):
        return None
    if opt.get("fragment"):
        return Response(
            "Signed out.", status_code=401, media_type="text/plain", headers=SECURITY_HEADERS
        )
    target = request.url.path if request.method == "GET" else "/servers"
    if request.url.query and request.method == "GET":
        target += "?" + request.url.query
    return redirect(request, "/login?" + urllib.parse.urlencode({"next": target}))


def safe_next(value: str | None) -> str:
    """A local path to go back to after signing in; anything else is ``/servers``."""
    if (
        value
        and value.startswith("/")
        and not value.startswith("//")
        and "\\" not in value
        and all(32 < ord(c) < 127 for c in value)
    ):
        return value
    return "/servers"


# --- responses -------------------------------------------------------------------------


def _finish(request: Req, response: Response[Any]) -> Response[Any]:
    visitor: Visitor | None = request.state.get("visitor")
    if visitor is not None:
        if visitor.new_anonymous_csrf and visitor.anonymous_csrf:
            response.set_cookie(
                CSRF_COOKIE,
                visitor.anonymous_csrf,
                path="/",
                httponly=True,
                samesite="strict",
                secure=_secure(request),
            )
        for name, value in visitor.extra_cookies:
            if value is None:
                response.delete_cookie(name, path="/")
            else:
                response.set_cookie(
                    name,
                    value,
                    max_age=int(SESSION_MAX.total_seconds()),
                    path="/",
                    httponly=True,
                    samesite="lax",
                    secure=_secure(request),
                )
    return response


def page(
    request: Req,
    template: str,
    *,
    status: int = 200,
    headers: Mapping[str, str] | None = None,
    **context: Any,
) -> Response[str]:
    """An HTML page (or fragment) from ``template``, with the security headers."""
    visitor: Visitor = request.state.get("visitor") or Visitor()
    base = {
        "user": visitor.user,
        "csrf_token": visitor.csrf_token,
        "path": request.url.path,
        "now": datetime.now(UTC),
        "request_id": request.scope.get("state", {}).get("request_id", ""),
    }
    html = _templates(request).render(template, base | context)
    response: Response[str] = Response(
        html,
        status_code=status,
        media_type="text/html",  # Litestar adds "; charset=utf-8" to text/* types
        headers={**SECURITY_HEADERS, **(headers or {})},
    )
    _finish(request, response)
    return response


#: Sent by the page's script when it submits a form itself: it navigates on its own, so a
#: redirect is answered ``204`` with ``NAVIGATE_HEADER`` instead of a 303 that ``fetch``
#: would follow (loading the next page once for nothing, then again for the browser).
FETCH_HEADER = "X-Berth-Fetch"
NAVIGATE_HEADER = "X-Berth-Location"


def redirect(request: Req, target: str) -> Response[Any]:
    """``303 See Other`` to a local path, with the security headers (for the page's own
    ``fetch``, ``204`` naming the path in ``X-Berth-Location``)."""
    headers = dict(SECURITY_HEADERS)
    if request.headers.get(FETCH_HEADER) == "1":
        response: Response[Any] = Response(
            None, status_code=204, headers={**headers, NAVIGATE_HEADER: target}
        )
    else:
        response = Redirect(target, status_code=303, headers=headers)
    return _finish(request, response)


def set_session_cookie(request: Req, session_id: str) -> None:
    """Have the response set the session cookie (after sign-in or sign-up)."""
    visitor_of(request).extra_cookies.append((SESSION_COOKIE, session_id))


def clear_session_cookie(request: Req) -> None:
    """Have the response delete the session cookie (sign-out)."""
    visitor_of(request).extra_cookies.append((SESSION_COOKIE, None))


def _templates(request: Req) -> Templates:
    templates: Templates = request.app.state["berth_templates"]
    return templates


# --- forms -----------------------------------------------------------------------------


class Form:
    """A submitted ``application/x-www-form-urlencoded`` body, in order."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self.pairs = pairs

    def get(self, name: str, default: str = "") -> str:
        """The first value of ``name`` (or ``default``)."""
        return next((v for k, v in self.pairs if k == name), default)

    def getall(self, name: str) -> list[str]:
        return [v for k, v in self.pairs if k == name]

    def __contains__(self, name: object) -> bool:
        return any(k == name for k, _ in self.pairs)


MAX_FIELDS = 2000


async def read_form(request: Req) -> Form:
    """The POSTed form, once its origin and CSRF token are checked.

    Raises ``FormRefused`` (415, 400) for a body that is not a UTF-8 urlencoded form,
    and ``CsrfRefused`` for a missing or wrong token or another origin.
    """
    media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media_type != "application/x-www-form-urlencoded":
        raise FormRefused(415, "Send this form from berth's own page.")
    raw = await request.body()
    try:
        pairs = urllib.parse.parse_qsl(
            raw.decode("utf-8"), keep_blank_values=True, max_num_fields=MAX_FIELDS
        )
    except (UnicodeDecodeError, ValueError):
        raise FormRefused(400, "The form could not be read.") from None
    form = Form(pairs)
    if not _same_origin(request):
        raise CsrfRefused("The form came from another site.")
    visitor = visitor_of(request)
    expected = visitor.session.csrf_token if visitor.session else visitor.anonymous_csrf
    given = form.get(CSRF_FIELD)
    if not expected or not given or not hmac.compare_digest(expected.encode(), given.encode()):
        raise CsrfRefused("The form's security token is missing or out of date.")
    return form


def _same_origin(request: Req) -> bool:
    origin = request.headers.get("origin")
    if origin is None:
        return True  # older browsers and non-browser clients: the CSRF token decides
    if origin == "null":
        return False
    visitor: Visitor | None = request.state.get("visitor")
    expected = visitor.base_url if visitor else None
    wanted = urllib.parse.urlsplit(expected).netloc if expected else request.headers.get("host")
    return urllib.parse.urlsplit(origin).netloc == wanted
