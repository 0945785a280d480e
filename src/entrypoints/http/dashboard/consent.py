"""The OAuth consent page: where an MCP client's authorization request
(``entrypoints.mcp.oauth_server``'s ``authorize``) waits for the signed-in user, who picks
the team, the scope and the servers the client gets, or denies it.

Approving answers with a redirect to the client's registered redirect URI carrying a
one-time code (which the SDK's token endpoint exchanges for a named token); denying,
with ``error=access_denied`` (RFC 6749 §4.1.2.1). The page's CSP lets its form lead
there (``form-action``), and nowhere else.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Annotated, Any
from uuid import UUID

import msgspec
from berth.core import commands as c
from berth.core.access import TokenScope
from berth.core.errors import InvalidInput
from berth.core.oauth import OAuthAuthorization, OAuthClient
from litestar import Controller, Response, get, post
from litestar.di import NamedDependency
from litestar.params import QueryParameter, URLEncodedBody

from ..controllers.common import Caller
from .forms import Many
from .web import CSP, Html, uuid_or_404

__all__ = ["ConsentPage"]

_DEFAULT_SCOPE = "read"


class ConsentForm(msgspec.Struct):
    request: str = ""
    team_id: str = ""
    scope: str = ""
    servers: str = "all"
    server_ids: Many = msgspec.field(default_factory=list)
    decision: str = ""


def _redirect_to(authorization: OAuthAuthorization, **params: str | None) -> Response[Any]:
    """303 to the client's redirect URI with ``params`` (and the client's ``state``)."""
    parts = urllib.parse.urlsplit(authorization.redirect_uri)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    query += [(k, v) for k, v in {**params, "state": authorization.state}.items() if v is not None]
    target = urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))
    return Response(content=b"", status_code=303, headers={"Location": target})


_SOURCE = re.compile(
    r"^[a-z][a-z0-9+.-]*:(//[A-Za-z0-9.\-]+(:[0-9]{1,5})?|//\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?)?$"
)


def _csp(redirect_uri: str) -> str:
    """The dashboard's CSP, with the form allowed to lead to the client's redirect URI
    (browsers apply ``form-action`` to the redirect a form's answer is). A source that is
    not plainly a scheme and host is not added (nothing is spliced into the header)."""
    parts = urllib.parse.urlsplit(redirect_uri)
    source = f"{parts.scheme}://{parts.netloc}" if parts.netloc else f"{parts.scheme}:"
    if not _SOURCE.match(source):
        return CSP
    return CSP.replace("form-action 'self'", f"form-action 'self' {source}")


async def _page(
    caller: Caller,
    authorization: OAuthAuthorization,
    client: OAuthClient,
    *,
    team: UUID | None,
    status: int = 200,
    form: ConsentForm | None = None,
    errors: dict[str, str] | None = None,
) -> Html:
    teams = await caller(c.ListTeams())
    chosen = next((t for t in teams if t.id == team), teams[0])
    in_team = await caller(c.ActAs(team_id=chosen.id))
    servers = await caller.bus.handle(c.ListServers(), in_team)
    requested = [
        s for s in authorization.requested_scopes or () if s in TokenScope.__members__.values()
    ]
    scope = (form.scope if form else "") or (requested[-1] if requested else _DEFAULT_SCOPE)
    picked = form.server_ids if form else []
    return Html(
        "consent.html",
        status_code=status,
        headers={"Content-Security-Policy": _csp(authorization.redirect_uri)},
        authorization=authorization,
        client=client,
        redirect_host=urllib.parse.urlsplit(authorization.redirect_uri).netloc
        or authorization.redirect_uri,
        requested=" ".join(authorization.requested_scopes or ()),
        teams=teams,
        chosen=chosen,
        servers=servers,
        scope=scope,
        limited=bool(form and form.servers == "chosen"),
        picked=[picked] if isinstance(picked, str) else picked,
        errors=errors or {},
    )


class ConsentPage(Controller):
    """``/oauth/consent``: the signed-in user's answer to an MCP client."""

    path = "/oauth/consent"

    @get("/")
    async def consent(
        self,
        caller: NamedDependency[Caller],
        request_id: Annotated[str, QueryParameter(name="request")],
        team: Annotated[str | None, QueryParameter(name="team")] = None,
    ) -> Html:
        authorization, client = await caller(
            c.GetOAuthRequest(authorization_id=uuid_or_404(request_id, "Request"))
        )
        chosen = uuid_or_404(team, "Team") if team else None
        return await _page(caller, authorization, client, team=chosen)

    @post("/")
    async def answer(
        self,
        caller: NamedDependency[Caller],
        data: URLEncodedBody[ConsentForm],
    ) -> Response[Any]:
        authorization_id = uuid_or_404(data.request, "Request")
        authorization, client = await caller(c.GetOAuthRequest(authorization_id=authorization_id))
        if data.decision != "approve":
            denied = await caller(c.DenyOAuth(authorization_id=authorization_id))
            return _redirect_to(denied, error="access_denied")
        team_id = uuid_or_404(data.team_id, "Team")
        picked = [data.server_ids] if isinstance(data.server_ids, str) else data.server_ids
        errors: dict[str, str] = {}
        if data.scope not in TokenScope.__members__.values():
            errors["scopes"] = "Choose what the client may do."
        server_ids: frozenset[UUID] | None = None
        if data.servers == "chosen":
            if not picked:
                errors["server_ids"] = "Check at least one server, or choose every server."
            server_ids = frozenset(uuid_or_404(s, "Server") for s in picked)
        if errors:
            return await _page(
                caller, authorization, client, team=team_id, status=422, form=data, errors=errors
            )
        command = c.ApproveOAuth(
            authorization_id=authorization_id,
            team_id=team_id,
            scopes=frozenset({TokenScope(data.scope)}),
            server_ids=server_ids,
        )
        try:
            approved, code = await caller(command)
        except InvalidInput as exc:
            found = {e.location: e.message for e in exc.errors}
            return await _page(
                caller, authorization, client, team=team_id, status=422, form=data, errors=found
            )
        return _redirect_to(approved, code=code)
