"""The dashboard's responses: Litestar's Jinja templates, its redirects, its cookies.

Promises kept here for every dashboard response:

* HTML comes from Jinja templates with autoescaping on; nothing else writes markup.
* Every page carries the Content-Security-Policy below (no inline script or style,
  nothing from another origin), ``X-Frame-Options: DENY``,
  ``Referrer-Policy: same-origin`` and ``Cache-Control: no-store`` (the dashboard
  router's ``response_headers``; its error pages add them themselves).
* The session cookie is ``HttpOnly; SameSite=Lax; Path=/`` and ``Secure`` whenever
  the request came over HTTPS or the base URL is ``https://``; it holds a random id
  of which the store keeps only a hash.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any
from uuid import UUID

import jinja2
import markupsafe
from berth.core.errors import NotFound
from berth.core.models import SESSION_MAX, Server
from berth.core.types import host_key_fingerprint
from litestar import Request, Response
from litestar.datastructures import Cookie
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.response import Redirect, Template
from litestar.response.base import ASGIResponse
from litestar.template import TemplateConfig

from .acting import TEAM_COOKIE, TEAM_NAV

__all__ = [
    "CSP",
    "FRAGMENT",
    "PUBLIC",
    "SECURITY_HEADERS",
    "SESSION_COOKIE",
    "STATIC_DIR",
    "Html",
    "SeeOther",
    "deploy_blocked",
    "prose",
    "safe_next",
    "session_cookies",
    "shown_status",
    "template_config",
    "uuid_or_404",
]

HTTP_DIR = Path(__file__).resolve().parent.parent
TEMPLATES_DIR = HTTP_DIR / "templates"
STATIC_DIR = HTTP_DIR / "static"

SESSION_COOKIE = "berth_session"

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

#: A handler's ``opt``: ``PUBLIC`` pages let anybody in; a ``FRAGMENT``, polled by a
#: script, answers a bare 401 when signed out instead of sending to the sign-in page.
PUBLIC = {"public": True}
FRAGMENT = {"fragment": True}

# Messages shown after a redirect (``?done=``): fixed texts, never echoed input.
DONE = {
    "signed-out": "You are signed out.",
    "server-deleted": "The server was removed from berth. Its containers keep running.",
    "host-keys-repinned": "The new host key is pinned; berth reconnects to the server now.",
    "server-changed": "The server was changed; a new address or SSH port is checked now.",
    "installation-removed": (
        "The app was removed: its containers are gone from the server; its deployments stay "
        "in the history."
    ),
    "stopped": "The app was stopped. Start runs it again.",
    "started": "The app was started.",
    "restarted": "The app was restarted.",
    "canceled": "The deployment was canceled (a running one puts the previous version back).",
    "canceled-first": (
        "The deployment was canceled. It was the app's first, so no earlier version serves "
        "instead: deploy again when ready."
    ),
    "registry-added": "The registry was saved: deploys of its images pull with it.",
    "registry-removed": "The registry's credentials were removed.",
    "git-credential-added": "Saved: builds from that host fetch with these credentials.",
    "git-credential-removed": "The Git credentials were removed.",
    "hook-removed": "The deploy hook was removed: pushes no longer deploy this app.",
    "team-created": "The team was made, with you as its owner: you act in it now.",
    "team-switched": "You act in this team now: every page shows its servers and apps.",
    "joined": "You joined the team: you act in it now.",
    "role-changed": "The member's role was changed.",
    "member-removed": "The member was removed: their tokens for this team stopped working.",
    "token-revoked": "The token was revoked: requests with it are refused from now on.",
    "webhook-removed": "The notification was removed: nothing more is sent to it.",
}


def uuid_or_404(value: str, what: str) -> UUID:
    """A path's id: one that is not a UUID names nothing (the same 404 as a missing one)."""
    try:
        return UUID(value)
    except ValueError:
        raise NotFound(f"{what} not found.") from None


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


# --- template filters ------------------------------------------------------------------


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


_BREAK_AFTER = re.compile(r"(//|[/.@])")


def _breakable(value: str) -> markupsafe.Markup:
    """``value`` (a URL, an image reference) escaped, with a line-break opportunity
    (``<wbr>``) after ``//``, ``/``, ``.`` and ``@`` and before ``:``: a narrow card
    wraps it there, never inside a port or a tag (issue 28)."""
    text = str(markupsafe.escape(value))
    text = _BREAK_AFTER.sub(r"\1<wbr>", text).replace(":", "<wbr>:")
    return markupsafe.Markup(text)  # noqa: S704 -- escaped above; only <wbr> added


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


@cache
def _versions(static: Path) -> dict[str, str]:
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()[:12]
        for path in static.iterdir()
        if path.is_file()
    }


def static_url(name: str) -> str:
    """``/static/<name>?v=<content hash>``: cacheable for ever, new URL on change."""
    return f"/static/{name}?v={_versions(STATIC_DIR).get(name, '0')}"


def template_config() -> TemplateConfig[JinjaTemplateEngine]:
    """Litestar's Jinja engine over ``templates/``: autoescaping on, undefined names are
    errors, the dashboard's filters and ``static()``."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        auto_reload=False,
    )
    env.filters.update(
        ago=_ago,
        when=_when,
        iso=_iso,
        size=_size,
        breakable=_breakable,
        shown_status=shown_status,
        deploy_blocked=deploy_blocked,
        prose=prose,
        fingerprints=_fingerprints,
    )
    env.globals["static"] = static_url
    return TemplateConfig(instance=JinjaTemplateEngine.from_environment(env))


# --- responses -------------------------------------------------------------------------


class Html(Template):
    """A page or fragment from ``template`` with ``context``. Every template also gets
    ``user`` (signed in, or ``None``), ``path``, ``now``, the ``?done=`` notice, and
    Litestar's ``csrf_token()``."""

    def __init__(
        self,
        template: str,
        *,
        status_code: int = 200,
        headers: dict[str, Any] | None = None,
        cookies: list[Cookie] | None = None,
        **context: Any,
    ) -> None:
        super().__init__(
            template,
            context=context,
            status_code=status_code,
            headers=headers,
            cookies=cookies,
            media_type="text/html",  # Litestar adds "; charset=utf-8" to text/* types
        )

    def create_template_context(self, request: Request[Any, Any, Any]) -> dict[str, Any]:
        return {
            "user": request.scope.get("user"),
            "path": request.url.path,
            "now": datetime.now(UTC),
            "done": DONE.get(request.query_params.get("done", "")),
            "team_nav": request.scope.get("state", {}).get(TEAM_NAV),
            **super().create_template_context(request),
        }


#: Sent by the page's script when it submits a form itself: it navigates on its own, so a
#: redirect is answered ``204`` with ``NAVIGATE_HEADER`` instead of a 303 that ``fetch``
#: would follow (loading the next page once for nothing, then again for the browser).
FETCH_HEADER = "X-Berth-Fetch"
NAVIGATE_HEADER = "X-Berth-Location"


class SeeOther(Redirect):
    """``303 See Other`` to a local path (for the page's own ``fetch``, ``204`` naming
    the path in ``X-Berth-Location``)."""

    def __init__(self, path: str, **kwargs: Any) -> None:
        super().__init__(path, status_code=303, **kwargs)
        self.target = path

    def to_asgi_response(
        self, app: Any, request: Request[Any, Any, Any], **kwargs: Any
    ) -> ASGIResponse:
        if request.headers.get(FETCH_HEADER) == "1":
            headers = {k: v for k, v in self.headers.items() if k.lower() != "location"}
            fetched = Response[None](
                None,
                status_code=204,
                headers={**headers, NAVIGATE_HEADER: self.target},
                cookies=self.cookies,
            )
            return fetched.to_asgi_response(app, request, **kwargs)
        return super().to_asgi_response(app, request, **kwargs)


def session_cookies(request: Request[Any, Any, Any], session_id: str | None) -> list[Cookie]:
    """The cookies of a sign-in (``session_id``) or sign-out (``None``): the session
    cookie, and the CSRF cookie deleted, so that the next page gets a new token (from
    Litestar) and no form of the pages before works after."""
    csrf = request.app.csrf_config
    assert csrf is not None  # create_app configures it: Secure when the base URL is https
    session = Cookie(
        key=SESSION_COOKIE,
        value=session_id or "",
        max_age=int(SESSION_MAX.total_seconds()) if session_id else 0,
        path="/",
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https" or csrf.cookie_secure,
    )
    return [
        session,
        Cookie(key=csrf.cookie_name, value="", max_age=0, path=csrf.cookie_path),
        Cookie(key=TEAM_COOKIE, value="", max_age=0, path="/"),  # each sign-in: personal team
    ]
