"""A person answering berth's OAuth consent page, over httpx against the real dashboard,
and the MCP SDK's OAuth client wired to them (``oauth_client``)."""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import httpx2
from harness import PASSWORD
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from pydantic import AnyUrl

__all__ = [
    "CALLBACK",
    "TIMEOUT",
    "Choice",
    "MemoryStorage",
    "Person",
    "authorize_url",
    "mcp_session",
    "pkce",
    "register_client",
    "structured",
]

#: Where the test clients say they are sent back to (nothing listens: the person reads it).
CALLBACK = "http://127.0.0.1:9/callback"
TIMEOUT = 60  # the first OAuth request imports the MCP SDK: seconds on a busy machine
_CSRF = re.compile(r'name="_csrf_token" value="([^"]+)"')


def register_client(url: str, **extra: Any) -> str:
    """A client registered over RFC 7591 (public: no secret); its id."""
    body = {"client_name": "Raw client", "redirect_uris": [CALLBACK], **extra}
    made = httpx.post(
        f"{url}/register", json={**body, "token_endpoint_auth_method": "none"}, timeout=TIMEOUT
    )
    assert made.status_code == 201, made.text
    client_id: str = made.json()["client_id"]
    return client_id


def authorize_url(url: str, client_id: str, challenge: str, **extra: str) -> str:
    """The URL a client sends the person to (``/authorize``, state ``xyz``)."""
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": CALLBACK,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": "xyz",
        "scope": "read deploy",
        **extra,
    }
    return f"{url}/authorize?{urllib.parse.urlencode(query)}"


def pkce() -> tuple[str, str]:
    """A PKCE verifier and its S256 challenge."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).decode().rstrip("=")


@dataclass
class Choice:
    """What the person picks on the consent page (``team``: its id, else the first)."""

    team: str | None = None
    scope: str = "read"
    servers: list[str] | None = None  # None: every server of the team
    approve: bool = True


class Person:
    """A signed-in dashboard user who answers consent pages as ``choice`` says."""

    def __init__(self, url: str, email: str) -> None:
        self.url = url
        self.email = email
        self.http = httpx.Client(base_url=url, timeout=30, follow_redirects=False)
        page = self.http.get("/login")
        signed = self.http.post(
            "/login",
            data={
                "email": email,
                "password": PASSWORD,
                "next": "/servers",
                "_csrf_token": _csrf(page),
            },
        )
        assert signed.status_code == 303, signed.text

    def consent_page(self, authorization_url: str, team: str | None = None) -> httpx.Response:
        """Follow the client's authorization URL to the consent page (``team`` chosen)."""
        sent = self.http.get(authorization_url)
        assert sent.status_code in (302, 303, 307), sent.text
        location = sent.headers["location"]
        assert location.startswith("/oauth/consent?request="), location
        if team is not None:
            location += f"&team={team}"
        page = self.http.get(location)
        assert page.status_code == 200, page.text
        return page

    def answer(self, authorization_url: str, choice: Choice) -> httpx.Response:
        """The consent form, posted: the answer (a 303 to the client, or a page again)."""
        page = self.consent_page(authorization_url, choice.team)
        request_id = re.search(r'name="request" value="([^"]+)"', page.text)
        team_id = re.search(r'name="team_id" value="([^"]+)"', page.text)
        assert request_id
        assert team_id
        form: list[tuple[str, str]] = [
            ("_csrf_token", _csrf(page)),
            ("request", request_id.group(1)),
            ("team_id", team_id.group(1)),
            ("scope", choice.scope),
            ("servers", "all" if choice.servers is None else "chosen"),
            ("decision", "approve" if choice.approve else "deny"),
        ]
        form += [("server_ids", s) for s in choice.servers or ()]
        return self.http.post(
            "/oauth/consent",
            content=urllib.parse.urlencode(form),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )

    def code_for(self, authorization_url: str, choice: Choice) -> dict[str, str]:
        """The query the client's redirect URI gets (``code`` and ``state``)."""
        answer = self.answer(authorization_url, choice)
        assert answer.status_code == 303, answer.text
        target = answer.headers["location"]
        assert target.startswith(CALLBACK), target
        return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(target).query))

    def close(self) -> None:
        self.http.close()


def _csrf(page: httpx.Response) -> str:
    found = _CSRF.search(page.text)
    assert found, page.text
    return found.group(1)


@dataclass
class MemoryStorage:
    """The SDK client's ``TokenStorage``, in memory."""

    tokens: OAuthToken | None = None
    client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


@dataclass
class _Redirects:
    """The SDK's redirect and callback handlers, answered by ``person``."""

    person: Person
    choice: Choice
    seen: list[str] = field(default_factory=list)

    async def redirect(self, authorization_url: str) -> None:
        self.seen.append(authorization_url)

    async def callback(self) -> AuthorizationCodeResult:
        query = self.person.code_for(self.seen[-1], self.choice)
        return AuthorizationCodeResult(code=query["code"], state=query.get("state"))


@asynccontextmanager
async def mcp_session(
    url: str, person: Person, choice: Choice, storage: MemoryStorage
) -> AsyncIterator[ClientSession]:
    """An MCP session at ``url``/mcp by URL alone: the SDK's OAuth client registers,
    sends ``person`` to the consent page, exchanges the code (or uses ``storage``'s tokens)."""
    handlers = _Redirects(person, choice)
    auth = OAuthClientProvider(
        server_url=f"{url}/mcp",
        client_metadata=OAuthClientMetadata(
            client_name="Test agent",
            redirect_uris=[AnyUrl(CALLBACK)],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
        ),
        storage=storage,
        redirect_handler=handlers.redirect,
        callback_handler=handlers.callback,
    )
    async with (
        httpx2.AsyncClient(auth=auth, timeout=60) as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        yield session


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    found: dict[str, Any] = result.structured_content
    return found
