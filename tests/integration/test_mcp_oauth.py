"""OAuth for remote MCP clients, end to end: the MCP SDK's own OAuth client against a
real ``berth serve``, with a person answering the dashboard's consent page over HTTP.

The client knows only the URL of ``/mcp``: it is told where the protected resource
metadata is (``WWW-Authenticate``), registers itself, sends the person to the consent
page (who picks a team, a scope, servers), exchanges the code with PKCE, and calls the
tools with what it got — a named token of that team, that scope, those servers.
"""

from __future__ import annotations

import http.server
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import PASSWORD, BerthProcess, new_server
from oauth_support import (
    CALLBACK,
    TIMEOUT,
    Choice,
    MemoryStorage,
    Person,
    authorize_url,
    mcp_session,
    pkce,
    register_client,
    structured,
)
from test_dashboard import DESKTOP, expect, launch_chromium, watched

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def berth_oauth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BerthProcess]:
    process = BerthProcess(tmp_path_factory.mktemp("oauth")).start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def world(berth_oauth: BerthProcess) -> dict[str, Any]:
    """A user who owns a team ``ops`` with two servers, and has a server of their own."""
    email, token = berth_oauth.new_users(1, "oauth")[0]
    with berth_oauth.api(token) as api:
        team = api.post("/api/agent/teams", json={"name": "ops"})
        assert team.status_code == 201, team.text
        web = new_server(api, "web-1", teamId=team.json()["id"])
        db = new_server(api, "db-1", teamId=team.json()["id"])
        mine = new_server(api, "personal-1")
    return {
        "email": email,
        "token": token,
        "team": team.json()["id"],
        "web": web["id"],
        "db": db["id"],
        "mine": mine["id"],
    }


@pytest.fixture
def person(berth_oauth: BerthProcess, world: dict[str, Any]) -> Iterator[Person]:
    signed_in = Person(berth_oauth.url, world["email"])
    yield signed_in
    signed_in.close()


def _exchange(
    url: str, client_id: str, code: str, verifier: str, redirect_uri: str = CALLBACK
) -> httpx.Response:
    return httpx.post(
        f"{url}/token",
        data={
            "grant_type": "authorization_code",
            "client_id": client_id,
            "code": code,
            "code_verifier": verifier,
            "redirect_uri": redirect_uri,
        },
    )


@contextmanager
def client_callback() -> Iterator[tuple[str, list[str]]]:
    """A client's redirect URI served for real on loopback: its URL and the paths (with
    query) the browser was sent to, answered with "back at the client"."""
    seen: list[str] = []

    class Callback(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            body = b"back at the client"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Callback)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/callback", seen
    finally:
        server.shutdown()
        server.server_close()


def _refresh(url: str, client_id: str, refresh_token: str) -> httpx.Response:
    data = {"grant_type": "refresh_token", "client_id": client_id, "refresh_token": refresh_token}
    return httpx.post(f"{url}/token", data=data, timeout=TIMEOUT)


def _whoami(url: str, token: str) -> httpx.Response:
    return httpx.get(
        f"{url}/api/agent/tokens/current",
        headers={"Authorization": f"Bearer {token}"},
        timeout=TIMEOUT,
    )


class TestDiscovery:
    def test_mcp_401_names_the_protected_resource_metadata(self, berth_oauth: BerthProcess) -> None:
        """``/mcp`` without a token is a 401 whose ``WWW-Authenticate`` points at the
        RFC 9728 document, which names berth as the authorization server (RFC 8414)."""
        url = berth_oauth.url
        refused = httpx.post(f"{url}/mcp", json={}, timeout=TIMEOUT)
        assert refused.status_code == 401
        metadata_url = f"{url}/.well-known/oauth-protected-resource/mcp"
        assert refused.headers["www-authenticate"] == f'Bearer resource_metadata="{metadata_url}"'
        resource = httpx.get(metadata_url, timeout=TIMEOUT).json()
        assert resource["resource"] == f"{url}/mcp"
        assert resource["scopes_supported"] == ["read", "deploy", "admin"]
        server = httpx.get(f"{url}/.well-known/oauth-authorization-server", timeout=TIMEOUT).json()
        assert server["issuer"].rstrip("/") == url
        assert resource["authorization_servers"] == [server["issuer"]]
        assert server["code_challenge_methods_supported"] == ["S256"]
        assert server["registration_endpoint"] == f"{url}/register"


class TestTheSdkClient:
    async def test_by_url_alone_with_the_team_scope_and_servers_chosen(
        self, berth_oauth: BerthProcess, world: dict[str, Any], person: Person
    ) -> None:
        """The SDK's client registers, the person picks team ``ops``, ``read`` and one
        server; the tools then act in that team with that scope on that server only."""
        choice = Choice(team=world["team"], scope="read", servers=[world["web"]])
        storage = MemoryStorage()
        async with mcp_session(berth_oauth.url, person, choice, storage) as session:
            tools = {t.name for t in (await session.list_tools()).tools}
            assert "list_servers" in tools
            assert "deploy" not in tools  # a read-scoped token is offered the reads only
            me = structured(await session.call_tool("whoami", {}))
            servers = structured(await session.call_tool("list_servers", {}))
            refused = await session.call_tool(
                "deploy", {"server_id": world["web"], "name": "shop", "image": "nginx:1"}
            )
        assert me["teamId"] == world["team"]
        assert me["scopes"] == ["read"]
        assert me["serverIds"] == [world["web"]]
        assert me["name"] == "OAuth: Test agent"
        assert [s["id"] for s in servers["servers"]] == [world["web"]]
        assert refused.is_error
        assert "deploy" in str(refused.content)
        assert storage.tokens is not None
        assert storage.tokens.scope == "read"
        assert storage.tokens.refresh_token is not None

    async def test_stored_tokens_are_used_without_asking_again(
        self, berth_oauth: BerthProcess, world: dict[str, Any], person: Person
    ) -> None:
        """A second session with the same storage asks nobody: the person is not needed."""
        storage = MemoryStorage()
        choice = Choice(scope="deploy")  # the personal team, every server
        async with mcp_session(berth_oauth.url, person, choice, storage) as session:
            first = structured(await session.call_tool("list_servers", {}))
        nobody = Choice(approve=False)  # would deny, were it asked
        async with mcp_session(berth_oauth.url, person, nobody, storage) as session:
            again = structured(await session.call_tool("list_servers", {}))
        assert [s["id"] for s in first["servers"]] == [world["mine"]]
        # The same servers, by id: their status is the monitor's and may move meanwhile
        # (seen in CI: "offline", then "checking" once no pass had stood by it lately).
        assert [s["id"] for s in again["servers"]] == [world["mine"]]


def _authorized(
    url: str, person: Person, choice: Choice | None = None
) -> tuple[str, str, dict[str, str]]:
    """A new client, its PKCE verifier, and the redirect's query once ``person`` approved
    its authorization request (``choice``: the defaults): ``(client, verifier, query)``."""
    client = register_client(url)
    verifier, challenge = pkce()
    query = person.code_for(authorize_url(url, client, challenge), choice or Choice())
    return client, verifier, query


class TestTokens:
    def _tokens(self, url: str, person: Person, choice: Choice) -> tuple[str, dict[str, Any]]:
        client, verifier, query = _authorized(url, person, choice)
        assert query["state"] == "xyz"
        issued = _exchange(url, client, query["code"], verifier)
        assert issued.status_code == 200, issued.text
        return client, issued.json()

    def test_refresh_rotates_both_tokens(
        self, berth_oauth: BerthProcess, world: dict[str, Any], person: Person
    ) -> None:
        """A refresh gives a new access and refresh token; the old ones stop working."""
        url = berth_oauth.url
        client_id, first = self._tokens(url, person, Choice(team=world["team"], scope="deploy"))
        assert first["scope"] == "read deploy"
        assert first["expires_in"] == 3600
        assert _whoami(url, first["access_token"]).status_code == 200
        second = _refresh(url, client_id, first["refresh_token"])
        assert second.status_code == 200, second.text
        fresh = second.json()
        assert fresh["access_token"] != first["access_token"]
        assert _whoami(url, first["access_token"]).status_code == 401
        me = _whoami(url, fresh["access_token"]).json()
        assert (me["teamId"], me["scopes"]) == (world["team"], ["read", "deploy"])
        reused = _refresh(url, client_id, first["refresh_token"])
        assert (reused.status_code, reused.json()["error"]) == (400, "invalid_grant")

    @pytest.mark.parametrize("where", ["rfc7009-endpoint", "berth-api"])
    def test_a_revoked_token_ends_the_grant(
        self, berth_oauth: BerthProcess, world: dict[str, Any], person: Person, where: str
    ) -> None:
        """Revocation, at RFC 7009's endpoint or of the named token through berth's API,
        ends the access token (API and ``/mcp``) and its refresh token at once."""
        url = berth_oauth.url
        client_id, issued = self._tokens(url, person, Choice())
        if where == "rfc7009-endpoint":
            revoked = httpx.post(
                f"{url}/revoke",
                data={"token": issued["access_token"], "client_id": client_id, "client_secret": ""},
            )
            assert revoked.status_code == 200, revoked.text
        else:
            token_id = _whoami(url, issued["access_token"]).json()["id"]
            with berth_oauth.api(world["token"]) as api:
                assert api.delete(f"/api/agent/tokens/{token_id}").status_code == 204
        assert _whoami(url, issued["access_token"]).status_code == 401
        headers = {"Authorization": f"Bearer {issued['access_token']}"}
        assert (
            httpx.post(f"{url}/mcp", json={}, headers=headers, timeout=TIMEOUT).status_code == 401
        )
        again = _refresh(url, client_id, issued["refresh_token"])
        assert (again.status_code, again.json()["error"]) == (400, "invalid_grant")

    def test_denied_consent_tells_the_client(
        self, berth_oauth: BerthProcess, world: dict[str, Any], person: Person
    ) -> None:
        """Deny sends the client ``error=access_denied`` with its state, and no code."""
        client = register_client(berth_oauth.url)
        _, challenge = pkce()
        authorize = authorize_url(berth_oauth.url, client, challenge)
        answer = person.answer(authorize, Choice(approve=False))
        assert answer.status_code == 303
        query = dict(
            urllib.parse.parse_qsl(urllib.parse.urlsplit(answer.headers["location"]).query)
        )
        assert query == {"error": "access_denied", "state": "xyz"}


class TestHostile:
    def test_wrong_pkce_verifier_gets_nothing(
        self, berth_oauth: BerthProcess, world: dict[str, Any], person: Person
    ) -> None:
        """A code presented with another verifier is ``invalid_grant``; no token is made."""
        url = berth_oauth.url
        client, _, query = _authorized(url, person)
        other_verifier, _ = pkce()
        refused = _exchange(url, client, query["code"], other_verifier)
        assert (refused.status_code, refused.json()["error"]) == (400, "invalid_grant")
        assert "access_token" not in refused.json()

    def test_a_code_is_used_once(
        self, berth_oauth: BerthProcess, world: dict[str, Any], person: Person
    ) -> None:
        """The second exchange of a code is ``invalid_grant``."""
        url = berth_oauth.url
        client, verifier, query = _authorized(url, person)
        assert _exchange(url, client, query["code"], verifier).status_code == 200
        again = _exchange(url, client, query["code"], verifier)
        assert (again.status_code, again.json()["error"]) == (400, "invalid_grant")

    def test_another_clients_code_is_refused(
        self, berth_oauth: BerthProcess, world: dict[str, Any], person: Person
    ) -> None:
        """A code made for one client, presented by another, is ``invalid_grant``."""
        url = berth_oauth.url
        _, verifier, query = _authorized(url, person)
        thief = register_client(url)
        stolen = _exchange(url, thief, query["code"], verifier)
        assert (stolen.status_code, stolen.json()["error"]) == (400, "invalid_grant")

    def test_unregistered_redirect_uri_is_never_followed(
        self, berth_oauth: BerthProcess, world: dict[str, Any], person: Person
    ) -> None:
        """An authorization request naming a redirect URI the client did not register is
        a 400 at berth itself: nobody is sent to the consent page nor to that URI."""
        url = berth_oauth.url
        client = register_client(url)
        _, challenge = pkce()
        evil = authorize_url(url, client, challenge, redirect_uri="https://evil.example/cb")
        refused = person.http.get(evil)
        assert refused.status_code == 400
        assert refused.json()["error"] == "invalid_request"
        assert "location" not in refused.headers

    def test_consent_page_of_an_unknown_request_is_404(self, person: Person) -> None:
        """A consent page for a request that does not exist (or expired) is a 404."""
        page = person.http.get("/oauth/consent?request=00000000-0000-4000-8000-000000000000")
        assert page.status_code == 404

    def test_consent_for_another_users_team_is_refused(
        self, berth_oauth: BerthProcess, world: dict[str, Any], tmp_path: Path
    ) -> None:
        """A user cannot approve for a team they are not in (the team id posted by hand)."""
        email, _ = berth_oauth.new_users(1, "outsider")[0]
        outsider = Person(berth_oauth.url, email)
        try:
            client = register_client(berth_oauth.url)
            _, challenge = pkce()
            authorize = authorize_url(berth_oauth.url, client, challenge)
            page = outsider.consent_page(authorize)
            assert "ops" not in page.text
            request_id = page.text.split('name="request" value="')[1].split('"')[0]
            csrf = page.text.split('name="_csrf_token" value="')[1].split('"')[0]
            posted = outsider.http.post(
                "/oauth/consent",
                data={
                    "_csrf_token": csrf,
                    "request": request_id,
                    "team_id": world["team"],
                    "scope": "admin",
                    "servers": "all",
                    "decision": "approve",
                },
            )
            assert posted.status_code == 404
        finally:
            outsider.close()


class TestInABrowser:
    def test_allow_in_chromium_sends_the_code_to_the_client(
        self, berth_oauth: BerthProcess, world: dict[str, Any]
    ) -> None:
        """In a real browser, with the page's CSP enforced: sign in, choose the team, a
        scope and a server, Allow; the browser is sent to the client's redirect URI with a
        code that the client exchanges for a token of that choice."""
        url = berth_oauth.url
        with client_callback() as (callback, sent_back):
            client = register_client(url, redirect_uris=[callback])
            verifier, challenge = pkce()
            with launch_chromium() as browser:
                context = browser.new_context(base_url=url, viewport=DESKTOP)
                context.set_default_timeout(30_000)
                page, problems = watched(context)
                page.goto(authorize_url(url, client, challenge, redirect_uri=callback))
                page.get_by_label("Email").fill(world["email"])
                page.get_by_label("Password").fill(PASSWORD)
                page.get_by_role("button", name="Sign in").click()
                expect(page.get_by_role("heading", level=1)).to_have_text(
                    "Connect Raw client to berth?"
                )
                page.locator("#team").select_option(world["team"])
                page.get_by_role("button", name="Show this team's servers").click()
                page.get_by_label("Deploy:", exact=False).check()
                page.get_by_label("Only the servers checked below", exact=False).check()
                page.get_by_label("db-1").check()
                page.get_by_role("button", name="Allow").click()
                expect(page.locator("body")).to_have_text("back at the client")
                context.close()
        assert not problems, problems
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(sent_back[0]).query))
        assert query["state"] == "xyz"
        issued = _exchange(url, client, query["code"], verifier, callback)
        assert issued.status_code == 200, issued.text
        me = _whoami(url, issued.json()["access_token"]).json()
        assert (me["teamId"], me["scopes"], me["serverIds"]) == (
            world["team"],
            ["read", "deploy"],
            [world["db"]],
        )
