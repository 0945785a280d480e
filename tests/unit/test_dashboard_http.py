"""The dashboard's HTTP layer on in-memory fakes (Litestar's test client, no browser):
redirects, cookies, CSRF, safe ``next`` targets, headers, and that the API is untouched."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any
from uuid import UUID, uuid4

import builders
import msgspec
import pytest
from berth.core.commands import IssueSetupCode
from berth.core.models import ServerStatus
from berth.core.outbound import OutboundGuard
from berth.core.unit_of_work import EventHandlers
from berth.entrypoints.bootstrap import Adapters, Policy, build_bus
from berth.entrypoints.http import create_app
from berth.entrypoints.http.dashboard.web import CSP, safe_next
from berth.entrypoints.mcp.oauth import OAUTH_PATHS
from berth.entrypoints.settings import Settings
from fakes import FakeBox, FakeClock, FakeGateway, FakeHasher, FakeKeys, FakeResolver, FakeStore
from fakes import FakeUnitOfWorkFactory as Uow
from litestar.testing import TestClient

# Building the app warns about the API handlers' parameter styles, which Litestar 2.25
# deprecates (the dashboard's own handlers use the new markers): not this module's subject.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PASSWORD = "correct horse battery staple"
CSRF = re.compile(r'name="_csrf_token" value="([^"]+)"')


@contextlib.contextmanager
def serving(settings: Settings, *, refuse_local_servers: bool = False) -> Iterator[TestClient]:  # type: ignore[type-arg]
    """The app over fresh fakes, with ``settings`` (``refuse_local_servers`` as
    ``BERTH_ALLOW_PRIVATE_TARGETS=0`` makes it); ``client.setup_code`` is the code
    ``berth serve`` would print (the first sign-up needs it); ``client.store`` and
    ``client.gateway`` are the fakes it runs on."""
    box = FakeBox()
    events = EventHandlers()
    store = FakeStore(box)
    adapters = Adapters(
        uow=Uow(store, events),
        clock=FakeClock(),
        hasher=FakeHasher(),
        box=box,
        keys=FakeKeys(),
        gateway=(gateway := FakeGateway()),
        outbound=OutboundGuard(FakeResolver()),
    )
    policy = Policy(local_managed=settings.local, refuse_local_servers=refuse_local_servers)
    bus = build_bus(adapters, policy, events=events)
    with TestClient(create_app(bus, settings), base_url="http://berth.local") as client:
        client.setup_code = client.blocking_portal.call(bus.handle, IssueSetupCode())  # type: ignore[attr-defined]
        client.store = store  # type: ignore[attr-defined]
        client.gateway = gateway  # type: ignore[attr-defined]
        yield client


@pytest.fixture
def client() -> Iterator[TestClient]:  # type: ignore[type-arg]
    with serving(Settings()) as client:
        yield client


def csrf(html: str) -> str:
    found = CSRF.search(html)
    assert found, html
    return found[1]


def post_sign_up(
    client: TestClient,  # type: ignore[type-arg]
    email: str,
    code: str,
    again: str = PASSWORD,
) -> Any:
    """The sign-up form, filled in with ``email``, the password (``again`` in its second
    field) and ``code``, sent."""
    page = client.get("/signup")
    return client.post(
        "/signup",
        data={
            "_csrf_token": csrf(page.text),
            "email": email,
            "password": PASSWORD,
            "password_again": again,
            "invite": code,
        },
        follow_redirects=False,
    )


def sign_up(client: TestClient, email: str = "ada@example.com") -> None:  # type: ignore[type-arg]
    response = post_sign_up(client, email, client.setup_code)  # type: ignore[attr-defined]
    assert response.status_code == 303, response.text
    assert response.headers["location"] == "/servers"


class TestRouting:
    def test_a_fresh_install_asks_for_the_first_account(self, client: TestClient) -> None:  # type: ignore[type-arg]
        """``/`` goes to sign-in, which goes to sign-up while there is no account."""
        assert client.get("/", follow_redirects=False).headers["location"] == "/login"
        assert client.get("/login", follow_redirects=False).headers["location"] == "/signup"

    def test_pages_name_their_charset_once(self, client: TestClient) -> None:  # type: ignore[type-arg]
        """HTML pages, error pages included, say ``text/html; charset=utf-8``, exactly."""
        assert client.get("/signup").headers["content-type"] == "text/html; charset=utf-8"
        sign_up(client)
        missing = f"/servers/{uuid4()}"  # the dashboard's own 404 page
        for path in ("/servers", "/settings", missing):
            assert client.get(path).headers["content-type"] == "text/html; charset=utf-8", path

    def test_pages_need_a_session(self, client: TestClient) -> None:  # type: ignore[type-arg]
        """A page asked for without a session sends to sign-in and back; fragments say 401."""
        response = client.get("/settings", follow_redirects=False)
        assert response.status_code == 303
        assert response.headers["location"] == "/login?next=%2Fsettings"
        assert client.get("/servers/live").status_code == 401

    def test_the_api_keeps_its_problem_json(self, client: TestClient) -> None:  # type: ignore[type-arg]
        """Unknown paths and API errors are still problem+json, never dashboard HTML."""
        for path in ("/nope", "/api/agent/servers", "/servers/x/y/z"):
            response = client.get(path)
            assert response.headers["content-type"].startswith("application/problem+json"), path

    def test_dashboard_routes_are_not_in_the_openapi_document(self, client: TestClient) -> None:  # type: ignore[type-arg]
        """The OpenAPI document lists the API only."""
        paths = client.get("/api/agent/openapi.json").json()["paths"]
        assert not [p for p in paths if not p.startswith(("/api/", "/healthz", "/readyz"))]


NOT_PAGES = (
    "/api/",
    "/mcp",
    "/static/",
    "/_litestar",
    "/healthz",
    "/readyz",
    "/metrics",
    *OAUTH_PATHS,  # the MCP SDK's OAuth endpoints (their clients hold no session)
)


class TestEveryPage:
    def test_every_page_needs_a_session_and_every_form_its_token(self, client: TestClient) -> None:  # type: ignore[type-arg]
        """Every dashboard route, read from the app (so a page added later is checked
        too): without a session a page sends to sign-in and a fragment is 401, the public
        pages aside; a POST without the CSRF token is 403, with it and no session it
        sends to sign-in too."""
        sign_up(client)
        client.cookies.delete("berth_session")
        token = csrf(client.get("/login").text)
        checked = 0
        for route in client.app.routes:
            if route.path.startswith(NOT_PAGES):
                continue
            path = re.sub(r"\{[^}]+\}", str(uuid4()), route.path)
            for handler in route.route_handlers:
                public = handler.opt.get("public", False)
                for method in handler.http_methods - {"OPTIONS", "HEAD"}:
                    checked += 1
                    if method == "POST":
                        refused = client.post(path, data={"email": "a@example.com"})
                        assert refused.status_code == 403, path
                        if public:
                            continue
                        answer = client.post(
                            path, data={"_csrf_token": token}, follow_redirects=False
                        )
                    else:
                        answer = client.get(path, follow_redirects=False)
                        if public:  # open to anybody: never sent to sign in
                            assert "next=" not in answer.headers.get("location", ""), path
                            named = path != route.path  # e.g. an invitation: none with this id
                            assert answer.status_code in (200, 303, 403, *[404] * named), path
                            continue
                    if handler.opt.get("fragment"):
                        assert answer.status_code == 401, path
                    else:
                        assert answer.status_code == 303, path
                        assert answer.headers["location"].startswith("/login?next="), path
        assert checked > 30


class TestSessions:
    def test_sign_up_sets_a_locked_down_cookie(self, client: TestClient) -> None:  # type: ignore[type-arg]
        """The session cookie is HttpOnly, SameSite=Lax, Path=/ (not Secure over HTTP)."""
        response = post_sign_up(client, "ada@example.com", client.setup_code)  # type: ignore[attr-defined]
        cookie = next(
            v for k, v in response.headers.multi_items() if v.startswith("berth_session=")
        )
        attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")}
        assert {"httponly", "path", "samesite"} <= attributes
        assert "samesite=lax" in cookie.lower()
        assert "secure" not in attributes
        assert client.get("/servers").status_code == 200

    def test_the_first_account_needs_the_setup_code(self, client: TestClient) -> None:  # type: ignore[type-arg]
        """Without the code (or with a wrong one) the first sign-up is a 403 that says,
        beside the code's field, where the code is; every other error is shown too."""
        page = client.get("/signup")
        assert 'id="invite"' in page.text
        assert "berth serve" in page.text
        for code, email in (("", "not an email"), ("berth_setup_nope", "ada@example.com")):
            response = post_sign_up(client, email, code)
            assert response.status_code == 403
            assert 'data-error-for="invite">' in response.text
            assert ("Expected an email address" in response.text) == (email == "not an email")
        assert client.get("/login", follow_redirects=False).headers["location"] == "/signup"

    def test_the_printed_link_fills_the_code_in(self, client: TestClient) -> None:  # type: ignore[type-arg]
        """``/signup?invite=<code>`` (the link ``berth serve`` prints) shows the code in
        its field, so the form needs only an email and a password."""
        code = client.setup_code  # type: ignore[attr-defined]
        assert f'value="{code}"' in client.get(f"/signup?invite={code}").text

    def test_mismatched_passwords_are_refused(self, client: TestClient) -> None:  # type: ignore[type-arg]
        """The two password fields must agree; no account is created."""
        code = client.setup_code  # type: ignore[attr-defined]
        response = post_sign_up(client, "ada@example.com", code, again=PASSWORD + "!")
        assert response.status_code == 422
        assert "The two passwords differ." in response.text
        assert client.get("/login", follow_redirects=False).headers["location"] == "/signup"

    def test_a_post_without_the_csrf_token_is_refused(self, client: TestClient) -> None:  # type: ignore[type-arg]
        """No token, a wrong one, or another origin: 403 before anything happens."""
        sign_up(client)
        token = csrf(client.get("/settings").text)
        for data, headers in (
            ({"confirm": "yes"}, {}),
            ({"_csrf_token": "nope"}, {}),
            ({"_csrf_token": token}, {"Origin": "http://evil.example"}),
            ({"_csrf_token": token}, {"Origin": "null"}),
        ):
            response = client.post("/settings/token", data=data, headers=headers)
            assert response.status_code == 403
            assert response.headers["content-security-policy"] == CSP
        assert "You have no API token yet." in client.get("/settings").text
        generated = client.post(
            "/settings/token", data={"_csrf_token": token}, headers={"Origin": "http://berth.local"}
        )
        assert generated.status_code == 201
        assert "berth_" in generated.text

    def test_a_form_that_is_not_urlencoded_is_refused(self, client: TestClient) -> None:  # type: ignore[type-arg]
        """Only the forms berth sends are read: JSON, even with the CSRF token in Litestar's
        header, is a 415 page."""
        sign_up(client)
        token = csrf(client.get("/settings").text)
        response = client.post("/settings/token", json={}, headers={"X-CSRFToken": token})
        assert response.status_code == 415
        assert "Send this form from berth" in response.text
        assert "You have no API token yet." in client.get("/settings").text

    def test_the_api_needs_no_csrf_token_and_pages_do(self, client: TestClient) -> None:  # type: ignore[type-arg]
        """CSRF is the dashboard's alone: an API or MCP POST with a Bearer token and no
        CSRF cookie or token is served, and no API answer sets the CSRF cookie; the same
        client's dashboard POST without the token is refused."""
        sign_up(client)
        page = client.post(
            "/settings/token", data={"_csrf_token": csrf(client.get("/settings").text)}
        )
        found = re.search(r'id="new-token" class="mono" readonly value="([^"]+)"', page.text)
        assert found, page.text
        bearer = {"Authorization": f"Bearer {found[1]}"}
        session = client.cookies.get("berth_session")
        client.cookies.clear()
        created = client.post("/api/agent/servers", json={"name": "api-made"}, headers=bearer)
        assert created.status_code == 201, created.text
        listed = client.get("/api/agent/servers", headers=bearer)
        mcp = client.post(
            "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=bearer
        )
        assert mcp.status_code == 200, mcp.text
        for response in (created, listed, mcp, client.get("/healthz")):
            assert "berth_csrf" not in response.headers.get("set-cookie", "")
        client.cookies.set("berth_session", session)
        refused = client.post("/servers", data={"name": "page-made"})
        assert refused.status_code == 403
        assert "expired or did not come from this page" in refused.text
        assert "page-made" not in client.get("/servers").text

    def test_sign_out_needs_the_token_and_ends_the_session(self, client: TestClient) -> None:  # type: ignore[type-arg]
        """Sign-out is a POST with the CSRF token; afterwards pages need a sign-in again."""
        sign_up(client)
        token = csrf(client.get("/servers").text)
        response = client.post("/logout", data={"_csrf_token": token}, follow_redirects=False)
        assert response.headers["location"] == "/login?done=signed-out"
        assert client.get("/servers", follow_redirects=False).status_code == 303


class TestAddServerPage:
    def test_it_says_what_a_deploy_can_do_on_the_server(self, client: TestClient) -> None:  # type: ignore[type-arg]
        """The Add-server page says plainly that an app with a host path is root-equivalent
        there, and that berth's key (with its database) is root on the server."""
        sign_up(client)
        text = " ".join(client.get("/servers/new").text.split())
        assert "an app with a host path (any volume) is root-equivalent on that server" in text
        assert "is root on the server" in text
        assert "serve --local" not in text  # this berth manages no machine of its own

    def test_over_plain_http_it_says_why_the_command_carries_insecure(self) -> None:
        """A berth at a plain http:// address (not loopback): the Add-server page says the
        command will carry --insecure and why; the command shown carries it."""
        with serving(Settings(base_url="http://192.0.2.10:8080")) as plain:
            sign_up(plain)
            form = plain.get("/servers/new")
            assert "--insecure" in form.text
            added = plain.post("/servers", data={"_csrf_token": csrf(form.text), "name": "web-1"})
        assert added.status_code == 201, added.text
        assert re.search(r'value="curl [^"]* sh -s -- --insecure"', added.text)
        assert 'id="insecure-note"' in added.text

    def test_a_loopback_address_is_said_to_be_unreachable_from_elsewhere(self) -> None:
        """A berth whose address is loopback (issue 28): Add server, and the install
        command's page, say a server elsewhere can't reach it and how to fix it; a berth
        at a routable address says nothing of the kind."""
        with serving(Settings(base_url="http://127.0.0.1:8080")) as here:
            sign_up(here)
            form = here.get("/servers/new")
            added = here.post("/servers", data={"_csrf_token": csrf(form.text), "name": "web-1"})
        for page in (form.text, added.text):
            text = " ".join(page.split())
            assert 'id="loopback-note"' in text
            assert "a server elsewhere can't reach it" in text
            assert "--base-url" in text
        with serving(Settings(base_url="http://192.0.2.10:8080")) as public:
            sign_up(public)
            assert 'id="loopback-note"' not in public.get("/servers/new").text

    def test_under_local_it_says_the_local_owner_is_trusted_like_the_operator(self) -> None:
        """Under ``serve --local`` the page also says who owns this machine's server is
        trusted like berth's operator."""
        with serving(Settings(local=True)) as local:
            sign_up(local)
            text = " ".join(local.get("/servers/new").text.split())
        assert "the account that owns that server is trusted like berth's operator" in text


def _signed_up_with_a_server(client: TestClient, **stored: Any) -> UUID:  # type: ignore[type-arg]
    """Sign up, add server ``web-1`` through its form, then give its stored row ``stored``
    (as a worker would have written it); its id."""
    sign_up(client)
    form = client.get("/servers/new")
    added = client.post("/servers", data={"_csrf_token": csrf(form.text), "name": "web-1"})
    assert added.status_code == 201, added.text
    servers = client.store.state.servers  # type: ignore[attr-defined]
    [(server_id, server)] = servers.items()
    servers[server_id] = msgspec.structs.replace(server, **stored)
    return server_id  # type: ignore[no-any-return]


class TestServerPage:
    def test_a_pending_server_does_not_say_no_others_run(self, client: TestClient) -> None:  # type: ignore[type-arg]
        """A server that has not enrolled says berth has not seen its containers yet, not
        that "No others run on this server" (issue 28)."""
        sign_up(client)
        form = client.get("/servers/new")
        added = client.post("/servers", data={"_csrf_token": csrf(form.text), "name": "web-1"})
        assert added.status_code == 201, added.text
        server_id = re.search(r'href="/servers/([0-9a-f-]{36})"', added.text)
        assert server_id
        text = " ".join(client.get(f"/servers/{server_id[1]}").text.split())
        assert "No others run on this server" not in text
        assert "berth has not seen this server's containers yet" in text
        assert "once the server has enrolled" in text

    def test_a_status_nobody_verified_lately_reads_checking_with_the_last_known(
        self,
        client: TestClient,  # type: ignore[type-arg]
    ) -> None:
        """A server whose stored ``online`` no worker has stood by (berth just restarted):
        its page shows the ``checking`` badge with the last known status, and offers no
        deploy until it is verified."""
        server_id = _signed_up_with_a_server(client, status=ServerStatus.ONLINE, checked_at=None)
        page = " ".join(client.get(f"/servers/{server_id}").text.split())
        assert re.search(r"<dt>Status</dt><dd>[^/]*checking", page), page
        assert "last known online, not verified since" in page
        assert "deploys open once it is online" in page

    def test_each_container_shows_the_short_id_of_its_image(self, client: TestClient) -> None:  # type: ignore[type-arg]
        """The containers table shows the id of the image each container runs as `docker
        images` does (12 hex digits), the whole id in its title; none where Docker did not
        say."""
        server_id = _signed_up_with_a_server(client, status=ServerStatus.ONLINE)
        image_id = "sha256:" + "3f4e5d6c7b8a" + "0" * 52
        client.gateway.containers[server_id] = [  # type: ignore[attr-defined]
            builders.a_container(id="c1", name="web", image_id=image_id),
            builders.a_container(id="c2", name="db"),
        ]
        page = client.get(f"/servers/{server_id}?containers=all").text
        web = re.search(r'<tr data-container="web">.*?</tr>', page, re.S)
        db = re.search(r'<tr data-container="db">.*?</tr>', page, re.S)
        assert web, page
        assert db, page
        assert f'title="Image {image_id}">3f4e5d6c7b8a<' in web[0]
        assert "data-image-id" not in db[0]


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("/servers/1?deployment=2", "/servers/1?deployment=2"),
        ("/settings", "/settings"),
        ("//evil.example/x", "/servers"),
        ("https://evil.example", "/servers"),
        ("/\\evil.example", "/servers"),
        ("/a b", "/servers"),
        ("", "/servers"),
        (None, "/servers"),
    ],
)
def test_next_targets_stay_on_this_site(target: str | None, expected: str) -> None:
    """After sign-in berth only goes back to one of its own paths."""
    assert safe_next(target) == expected


def test_a_refused_server_address_is_shown_beside_its_field() -> None:
    """Under BERTH_ALLOW_PRIVATE_TARGETS=0 the Add-server form answers 422 with the
    reason beside the address field, in words, and keeps what was typed."""
    with serving(Settings(), refuse_local_servers=True) as client:
        sign_up(client)
        token = csrf(client.get("/servers/new").text)
        response = client.post(
            "/servers",
            data={"_csrf_token": token, "name": "here", "address": "127.0.0.1"},
            follow_redirects=False,
        )
        assert response.status_code == 422
        error = re.search(r'id="address-error"[^>]*>(.*?)</', response.text, re.S)
        assert error is not None, response.text
        assert "127.0.0.1 is a loopback address" in error[1]
        assert 'value="here"' in response.text
        assert "/servers/new" in client.get("/servers").text  # none was created
