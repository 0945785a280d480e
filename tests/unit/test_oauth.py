"""OAuth's rules over the in-memory store: the SDK's token endpoint (its Starlette routes,
called in process) over ``BerthOAuthProvider`` and the bus, with a clock the test moves.

What needs time to pass is here (a code or a consent page that expired); the whole flow
with the SDK's client against a real ``berth serve`` is ``tests/integration/test_mcp_oauth.py``.
"""

from __future__ import annotations

import base64
import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import httpx
import pytest
from berth.core import commands as c
from berth.core.access import Actor, Role, TokenScope
from berth.core.errors import NotFound
from berth.core.oauth import CONSENT_LIFETIME
from berth.entrypoints.http.dashboard.consent import _csp
from berth.entrypoints.http.dashboard.web import CSP
from berth.entrypoints.mcp.oauth_server import oauth_router
from fakes import FakeClock
from hypothesis import given
from hypothesis import strategies as st
from wiring import App, build_app, unique_email

BASE = "http://127.0.0.1:8000"
CALLBACK = "http://127.0.0.1:9/callback"
VERIFIER = "v" * 50
CHALLENGE = (
    base64.urlsafe_b64encode(hashlib.sha256(VERIFIER.encode()).digest()).decode().rstrip("=")
)


def _app() -> App:
    # The SDK compares a code's expiry with the real time: the clock starts at it.
    return build_app(clock=FakeClock(datetime.now(UTC)))


def _client(app: App) -> httpx.AsyncClient:
    router = oauth_router(app.bus, BASE, "/mcp")
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=router), base_url=BASE)


async def _registered(http: httpx.AsyncClient) -> str:
    body = {
        "client_name": "Agent",
        "redirect_uris": [CALLBACK],
        "token_endpoint_auth_method": "none",
    }
    made = await http.post("/register", json=body)
    assert made.status_code == 201, made.text
    client_id: str = made.json()["client_id"]
    return client_id


async def _begin(app: App, client_id: str) -> UUID:
    """The client's authorization request (the SDK checked it), pending: its id."""
    begin = c.BeginOAuth(
        client_id=client_id,
        redirect_uri=CALLBACK,
        redirect_uri_explicit=True,
        code_challenge=CHALLENGE,
    )
    return await app.bus.handle(begin)


async def _owner(app: App) -> Actor:
    user = await app.bus.handle(c.CreateUser(email=unique_email("oauth"), password="x" * 12))
    return Actor.personal(user)


async def _approved(
    app: App, http: httpx.AsyncClient, actor: Actor, scope: TokenScope = TokenScope.DEPLOY
) -> tuple[str, str]:
    """A client's code, approved by ``actor`` for their personal team: (client id, code)."""
    client_id = await _registered(http)
    request_id = await _begin(app, client_id)
    approve = c.ApproveOAuth(
        authorization_id=request_id, team_id=actor.team_id, scopes=frozenset({scope})
    )
    _, code = await app.bus.handle(approve, actor)
    return client_id, code


async def _exchange(http: httpx.AsyncClient, client_id: str, code: str) -> httpx.Response:
    data = {
        "grant_type": "authorization_code",
        "client_id": client_id,
        "code": code,
        "code_verifier": VERIFIER,
        "redirect_uri": CALLBACK,
    }
    return await http.post("/token", data=data)


def _error(response: httpx.Response) -> tuple[int, str]:
    body: dict[str, Any] = response.json()
    return response.status_code, body["error"]


async def test_an_expired_code_gets_nothing() -> None:
    """A code exchanged after its ten minutes is ``invalid_grant``, and mints no token."""
    app = _app()
    owner = await _owner(app)
    async with _client(app) as http:
        client_id, code = await _approved(app, http, owner)
        app.clock.advance(CONSENT_LIFETIME + timedelta(seconds=1))
        refused = await _exchange(http, client_id, code)
    assert _error(refused) == (400, "invalid_grant")
    assert not app.store.state.access_tokens


async def test_a_code_in_time_mints_a_named_token_of_the_choice() -> None:
    """Just before it expires, the code gives a named token of the team and scope chosen,
    which ``Authenticate`` takes like any other."""
    app = _app()
    owner = await _owner(app)
    async with _client(app) as http:
        client_id, code = await _approved(app, http, owner, TokenScope.READ)
        app.clock.advance(CONSENT_LIFETIME - timedelta(seconds=1))
        issued = await _exchange(http, client_id, code)
    assert issued.status_code == 200, issued.text
    assert issued.json()["scope"] == "read"
    actor = await app.bus.handle(c.Authenticate(token=issued.json()["access_token"]))
    assert (actor.team_id, actor.scopes) == (owner.team_id, frozenset({TokenScope.READ}))


async def test_an_unanswered_consent_page_expires() -> None:
    """Ten minutes after the client asked, the consent page is gone (404) and cannot be approved."""
    app = _app()
    owner = await _owner(app)
    async with _client(app) as http:
        client_id = await _registered(http)
    request_id = await _begin(app, client_id)
    app.clock.advance(CONSENT_LIFETIME)
    with pytest.raises(NotFound):
        await app.bus.handle(c.GetOAuthRequest(authorization_id=request_id), owner)
    approve = c.ApproveOAuth(
        authorization_id=request_id, team_id=owner.team_id, scopes=frozenset({TokenScope.READ})
    )
    with pytest.raises(NotFound):
        await app.bus.handle(approve, owner)


async def test_a_member_who_left_the_team_gets_no_token() -> None:
    """A code approved by a member who then leaves the team is ``invalid_grant``."""
    app = _app()
    owner = await _owner(app)
    member = await _owner(app)
    team = await app.bus.handle(c.CreateTeam(name="ops"), owner)
    invited = await app.bus.handle(
        c.InviteMember(team_id=team.id, email=member.user.email, role=Role.DEPLOYER), owner
    )
    await app.bus.handle(c.AcceptInvitation(token=invited.token), member)
    async with _client(app) as http:
        client_id = await _registered(http)
        request_id = await _begin(app, client_id)
        approve = c.ApproveOAuth(
            authorization_id=request_id, team_id=team.id, scopes=frozenset({TokenScope.DEPLOY})
        )
        _, code = await app.bus.handle(approve, member)
        await app.bus.handle(c.RemoveMember(team_id=team.id, user_id=member.user.id), owner)
        refused = await _exchange(http, client_id, code)
    assert _error(refused) == (400, "invalid_grant")


@given(
    granted=st.sampled_from(list(TokenScope)),
    asked=st.sets(st.sampled_from(list(TokenScope))),
)
async def test_a_refresh_never_widens_the_grant(
    granted: TokenScope, asked: set[TokenScope]
) -> None:
    """Whatever scopes a refresh asks for, the new token has at most the grant's."""
    app = _app()
    owner = await _owner(app)
    async with _client(app) as http:
        client_id, code = await _approved(app, http, owner, granted)
        first = (await _exchange(http, client_id, code)).json()
        data = {
            "grant_type": "refresh_token",
            "client_id": client_id,
            "refresh_token": first["refresh_token"],
        }
        if asked:
            data["scope"] = " ".join(sorted(s.value for s in asked))
        refreshed = await http.post("/token", data=data)
    allowed = set(first["scope"].split())
    if asked and not {s.value for s in asked} <= allowed:
        assert _error(refreshed) == (400, "invalid_scope")
        return
    assert refreshed.status_code == 200, refreshed.text
    actor = await app.bus.handle(c.Authenticate(token=refreshed.json()["access_token"]))
    assert {s.value for s in actor.scopes} <= allowed


@pytest.mark.parametrize(
    ("redirect_uri", "allowed"),
    [
        ("http://127.0.0.1:9/callback", "'self' http://127.0.0.1:9;"),
        ("cursor://anysphere.cursor-retrieval/cb", "'self' cursor://anysphere.cursor-retrieval"),
        ("http://x;script-src *", "'self'"),
        ("http://x y/cb", "'self'"),
    ],
)
def test_the_consent_pages_form_may_lead_to_the_redirect_uri_only(
    redirect_uri: str, allowed: str
) -> None:
    """The consent page's CSP lets its form lead to the client's redirect origin; a URI
    that is not plainly a scheme and host adds nothing to the header."""
    policy = _csp(redirect_uri)
    assert policy.split("form-action ")[1].startswith(allowed.rstrip(";"))
    assert policy.count(";") == CSP.count(";")
