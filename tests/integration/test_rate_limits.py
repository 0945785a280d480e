"""Rate limits of a real ``berth serve`` started with tiny budgets.

``BERTH_RATE_LIMIT=5`` (requests per user per minute), ``BERTH_DEPLOY_RATE_LIMIT=2``
(deploys per user per minute) and ``BERTH_AUTH_FAILURE_LIMIT=3`` (failed
authentications per client address per minute). Budgets refill evenly over a
minute, so each test spends a user's budget within a few seconds.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from berth.core import tokens
from harness import PASSWORD, Api, BerthProcess, new_server, problem

LIMITS = {
    "BERTH_RATE_LIMIT": "5",
    "BERTH_DEPLOY_RATE_LIMIT": "2",
    "BERTH_AUTH_FAILURE_LIMIT": "3",
}


#: A JSON-RPC call an MCP client makes (stateless: no session needed).
_MCP_TOOLS_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}


def _throttled(response: httpx.Response) -> dict[str, Any]:
    """A 429 problem with an integer ``Retry-After`` of at least one second."""
    body = problem(response, 429)
    retry_after = response.headers["retry-after"]
    assert retry_after.isdigit(), retry_after
    assert int(retry_after) >= 1
    return body


def _deploy(api: Api, server_id: str, name: str, **extra: Any) -> httpx.Response:
    """Deploy ``name``; each name gets its own host port, so apps never conflict."""
    port = 3000 + sum(name.encode()) % 1000
    body = {"serverId": server_id, "name": name, "image": "shop:1.0", "port": port, **extra}
    return api.post("/api/agent/docker/deploy", json=body)


@dataclass
class Limited:
    process: BerthProcess
    tokens: list[str]  # one user per use, made in one batch (the CLI is slow to start)


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Limited]:
    """A serve with tiny budgets; its tests must not fail authentication (that is per address)."""
    process = BerthProcess(tmp_path_factory.mktemp("limited"), env=dict(LIMITS)).start()
    try:
        yield Limited(process, [token for _, token in process.new_users(4, "limited")])
    finally:
        process.stop()


class TestUserBudgets:
    """Requests and deploys are counted per user."""

    def test_deploy_and_request_budgets_per_user(self, limited: Limited) -> None:
        """422s spend no deploy budget, the 3rd deploy and 6th request are 429, per user."""
        token_a, token_b = limited.tokens[0], limited.tokens[1]
        with limited.process.api(token_a) as a:
            server = new_server(a)["id"]  # request 1
            assert _deploy(a, server, "one").status_code == 202  # 2, deploy 1
            problem(_deploy(a, server, "bad", port=0), 422)  # 3, no deploy spent
            problem(_deploy(a, server, "bad", image="shop"), 422)  # 4, no deploy spent
            assert _deploy(a, server, "two").status_code == 202  # 5, deploy 2
            request_limited = _throttled(a.get("/api/agent/servers"))  # 6
            assert "deploy" not in request_limited["detail"].lower()
            _throttled(a.get(f"/api/agent/servers/{server}"))
        with limited.process.api(token_b) as b:
            assert b.get("/api/agent/servers").status_code == 200  # 1
            own = new_server(b)["id"]  # 2
            assert _deploy(b, own, "one").status_code == 202  # 3, deploy 1
            assert _deploy(b, own, "two").status_code == 202  # 4, deploy 2
            deploy_limited = _throttled(_deploy(b, own, "three"))  # 5
            assert "deploy" in deploy_limited["detail"].lower()
            _throttled(b.get("/api/agent/servers"))  # 6

    def test_unknown_server_is_404_even_with_deploy_budget_spent(self, limited: Limited) -> None:
        """Ownership is checked before the deploy budget: an unknown server stays a 404."""
        with limited.process.api(limited.tokens[2]) as api:
            server = new_server(api)["id"]  # request 1
            assert _deploy(api, server, "one").status_code == 202  # 2
            assert _deploy(api, server, "two").status_code == 202  # 3
            problem(_deploy(api, str(uuid.uuid4()), "three"), 404)  # 4
            _throttled(_deploy(api, server, "three"))  # 5


def _untrusted_warnings(process: BerthProcess, wait: float = 10.0) -> list[dict[str, Any]]:
    """The ``forwarded_for_untrusted`` lines of the log, once there is one (or ``wait``
    seconds passed: the log is written as requests are answered)."""
    deadline = time.monotonic() + wait
    while True:
        found = [r for r in process.log_records() if r.get("event") == "forwarded_for_untrusted"]
        if found or time.monotonic() >= deadline:
            return found
        time.sleep(0.1)


class TestAuthFailures:
    """Failed authentications are throttled per client address; a valid token is not."""

    def test_a_throttled_address_still_lets_a_valid_token_in(
        self, limited: Limited, fresh_berth: BerthProcess
    ) -> None:
        """After its failed authentications (one a minute here) from an address, its bad
        tokens get 429 but a valid token from the same address is still answered (the API
        and /mcp)."""
        # A second serve over the same data dir: budgets are per process, so the
        # module's serve keeps this address unthrottled. One failure a minute: the budget
        # refills after 60 s, longer than this test takes however loaded the machine (with
        # three a minute, one came back after 20 s and a bad token got its 401 again).
        fresh_berth.data_dir = limited.process.data_dir
        fresh_berth.env.update({**LIMITS, "BERTH_AUTH_FAILURE_LIMIT": "1"})
        fresh_berth.start()
        good_token = limited.tokens[3]
        with fresh_berth.api(good_token) as good, fresh_berth.api(tokens.generate()) as bad:
            problem(bad.get("/api/agent/servers"), 401)
            _throttled(bad.get("/api/agent/servers"))
            _throttled(bad.post("/api/agent/servers", json={"name": "x"}))
            # A malformed token from the throttled address: 429 too, not 401.
            _throttled(bad.get("/api/agent/servers", headers={"Authorization": "Bearer nope"}))
            assert good.get("/api/agent/servers").status_code == 200
            mcp = httpx.post(
                f"{fresh_berth.url}/mcp",
                json=_MCP_TOOLS_LIST,
                headers={
                    "Authorization": f"Bearer {good_token}",
                    "Accept": "application/json, text/event-stream",
                },
                timeout=30,
            )
            assert mcp.status_code == 200, mcp.text
            assert "list_servers" in mcp.text
            _throttled(
                httpx.post(
                    f"{fresh_berth.url}/mcp",
                    json=_MCP_TOOLS_LIST,
                    headers={"Authorization": f"Bearer {tokens.generate()}"},
                    timeout=30,
                )
            )
            # Public endpoints need no authentication and are not throttled.
            assert good.get("/healthz").status_code == 200

    def test_a_forwarded_for_header_does_not_reset_the_count(
        self, fresh_berth: BerthProcess
    ) -> None:
        """By default no one's X-Forwarded-For is believed: a new address in it each time
        still counts against the TCP peer's budget."""
        fresh_berth.env.update(LIMITS)
        fresh_berth.start()
        with fresh_berth.api(tokens.generate()) as bad:
            for i in range(3):
                xff = {"X-Forwarded-For": f"203.0.113.{i + 1}"}
                problem(bad.get("/api/agent/servers", headers=xff), 401)
            _throttled(bad.get("/api/agent/servers", headers={"X-Forwarded-For": "198.51.100.9"}))

    def test_a_forwarded_for_header_from_an_untrusted_peer_is_warned_about(
        self, fresh_berth: BerthProcess
    ) -> None:
        """The first request with X-Forwarded-For from a peer not in BERTH_TRUSTED_PROXIES
        logs one warning naming the setting; more such requests stay quiet for a while."""
        fresh_berth.start()
        with fresh_berth.api() as anonymous:
            assert anonymous.get("/healthz").status_code == 200
            assert _untrusted_warnings(fresh_berth, wait=0) == []
            for i in range(3):
                forwarded = {"X-Forwarded-For": f"203.0.113.{i + 1}"}
                assert anonymous.get("/healthz", headers=forwarded).status_code == 200
        [warning] = _untrusted_warnings(fresh_berth)
        assert warning["level"] == "warning"
        assert warning["peer"] == "127.0.0.1"
        assert "BERTH_TRUSTED_PROXIES" in warning["hint"]

    def test_a_trusted_proxy_names_the_client(self, fresh_berth: BerthProcess) -> None:
        """With BERTH_TRUSTED_PROXIES naming the proxy, each forwarded client has its own
        budget, and the one that failed three times is throttled."""
        fresh_berth.env.update({**LIMITS, "BERTH_TRUSTED_PROXIES": "127.0.0.1"})
        fresh_berth.start()
        with fresh_berth.api(tokens.generate()) as bad:
            one = {"X-Forwarded-For": "203.0.113.1"}
            for _ in range(3):
                problem(bad.get("/api/agent/servers", headers=one), 401)
            _throttled(bad.get("/api/agent/servers", headers=one))
            for i in range(3):
                other = {"X-Forwarded-For": f"198.51.100.{i + 1}"}
                problem(bad.get("/api/agent/servers", headers=other), 401)
        assert _untrusted_warnings(fresh_berth, wait=0) == []


_CSRF = re.compile(r'name="_csrf_token" value="([^"]+)"')


def _sign_in(url: str, email: str, password: str, client_address: str) -> int:
    """POST the dashboard's sign-in form as a browser at ``client_address`` (named by
    ``X-Forwarded-For``, believed from the trusted proxy 127.0.0.1); the status."""
    forwarded = {"X-Forwarded-For": client_address}
    with httpx.Client(base_url=url, headers=forwarded, timeout=30) as browser:
        form = browser.get("/login")
        assert form.status_code == 200, form.text
        found = _CSRF.search(form.text)
        assert found, form.text
        data = {"email": email, "password": password, "_csrf_token": found[1], "next": ""}
        return browser.post("/login", data=data).status_code


class TestSignIns:
    """Failed dashboard sign-ins are throttled per (email, client address) and per
    client address: an attacker elsewhere cannot lock a user out."""

    def test_an_attacker_elsewhere_cannot_lock_a_user_out(self, fresh_berth: BerthProcess) -> None:
        """Wrong passwords for a user from two other addresses, each throttled there,
        leave the user's own address free to sign in."""
        fresh_berth.env.update(
            {
                "BERTH_TRUSTED_PROXIES": "127.0.0.1",
                "BERTH_LOGIN_FAILURES_PER_EMAIL": "3",
                "BERTH_LOGIN_FAILURES_PER_ADDRESS": "20",
            }
        )
        fresh_berth.start()
        [(email, _)] = fresh_berth.new_users(1, "victim")
        for attacker in ("203.0.113.1", "203.0.113.2"):
            statuses = [_sign_in(fresh_berth.url, email, "wrong", attacker) for _ in range(4)]
            assert statuses == [400, 400, 400, 429]
            assert _sign_in(fresh_berth.url, email, PASSWORD, attacker) == 429
        assert _sign_in(fresh_berth.url, email, PASSWORD, "198.51.100.7") == 303

    def test_one_address_cannot_spray_many_accounts(self, fresh_berth: BerthProcess) -> None:
        """Past its ceiling of failures over every email, an address waits even with a
        right password; other addresses do not."""
        fresh_berth.env.update(
            {
                "BERTH_TRUSTED_PROXIES": "127.0.0.1",
                "BERTH_LOGIN_FAILURES_PER_EMAIL": "3",
                "BERTH_LOGIN_FAILURES_PER_ADDRESS": "4",
            }
        )
        fresh_berth.start()
        [(email, _)] = fresh_berth.new_users(1, "sprayed")
        sprayer = "203.0.113.9"
        for i in range(4):
            assert _sign_in(fresh_berth.url, f"nobody{i}@example.com", "wrong", sprayer) == 400
        assert _sign_in(fresh_berth.url, email, PASSWORD, sprayer) == 429
        assert _sign_in(fresh_berth.url, email, PASSWORD, "198.51.100.8") == 303
