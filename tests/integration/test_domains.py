"""Apps with a domain, end to end: berth loads every route of a server into a real Caddy
through its admin socket (forwarded over SSH, or directly for the local server), and
requests go through Caddy's HTTPS port — verified against the root of Caddy's internal
CA, no DNS needed — to the app.

Every server here gets a Caddy of its own (two berths, one per transport: a Caddy
serves the whole route set of one server, so two servers must not share one).
"""

from __future__ import annotations

import contextlib
import json
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from deploy_support import (
    RUN,
    TRANSPORTS,
    assert_no_errors_logged,
    behind_caddy,
    containers_of,
    deploy,
    deployed,
    get_app,
    get_json,
    host_port,
    steps,
    wait_until,
)
from harness import Api, BerthProcess, problem
from infra import (
    Caddy,
    Sshd,
    build_echo_image,
    echo_tag,
    ensure_stable_bridge,
    http_get,
    https_get,
)

pytestmark = pytest.mark.integration

APP_PORT = 8080  # the echo server's port inside every container (host ports are ephemeral)
VERSIONS = ("v1", "v2", "v3", "v4")
WINDOW = 20.0  # seconds of continuous traffic in the zero-downtime test


@dataclass
class DomainStack:
    """One berth with one server (over SSH, or this machine), and that server's Caddy."""

    transport: str
    berth: BerthProcess
    caddy: Caddy
    api: Api
    server_id: str
    prefix: str

    def name(self, what: str) -> str:
        """An app (and container) name unique to this stack and session."""
        return f"{self.prefix}{what}"

    def domain(self, what: str) -> str:
        """A domain unique to this stack and session."""
        return f"{what}-{RUN}.{self.transport}.berth.test"

    def https(self, domain: str, path: str = "/") -> tuple[int, dict[str, str], bytes]:
        """``GET https://<domain><path>`` through Caddy, verified against Caddy's root CA."""
        return https_get(self.caddy.https_port, domain, self.caddy.root_ca_path, path)

    def serves(self, domain: str, body: bytes) -> bool:
        """Whether Caddy answers ``domain`` over HTTPS with ``body`` right now."""
        try:
            status, _, got = self.https(domain)
        except (OSError, ssl.SSLError):
            return False
        return status == 200 and got == body

    def deploy(self, what: str, version: str = "v1", **kwargs: Any) -> Any:
        """Deploy the echo image ``version`` as app ``what`` on domain ``domain(what)``."""
        return deploy(
            self.api,
            self.server_id,
            self.name(what),
            APP_PORT,
            image=echo(version),
            domain=kwargs.pop("domain", self.domain(what)),
            **kwargs,
        )


def _hello(version: str) -> bytes:
    return f"hello from {version}\n".encode()


def echo(version: str) -> str:
    return echo_tag(version)


@pytest.fixture(scope="module")
def echo_versions(docker_ready: None) -> dict[str, str]:
    """The echo image built for every version the redeploys use."""
    return {version: build_echo_image(version) for version in VERSIONS}


@pytest.fixture(scope="module", params=TRANSPORTS)
def stack(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    echo_versions: dict[str, str],
    sshd: Sshd,
) -> Iterator[DomainStack]:
    """A Caddy, and a ``berth serve`` (internal issuer, fast loops) whose one user has one
    online server — over SSH, or this machine with ``--local`` — served by that Caddy."""
    transport: str = request.param
    ensure_stable_bridge()
    prefix = f"e2e-{RUN}-dom-{transport}-"
    with behind_caddy(
        tmp_path_factory.mktemp(f"domains-{transport}"),
        transport,
        sshd,
        prefix,
        user=f"domains-{transport}",
        env={},
    ) as (process, caddy, api, server_id):
        yield DomainStack(transport, process, caddy, api, server_id, prefix)
    assert_no_errors_logged(process)


# -- HTTPS through Caddy -------------------------------------------------------------------


def test_domain_app_is_served_over_https_and_http_redirects(stack: DomainStack) -> None:
    """A deploy with a domain answers over HTTPS through Caddy (test CA); HTTP redirects."""
    domain = stack.domain("hello")
    deployment, installation = deployed(stack.deploy("hello"), "succeeded")
    order = steps(deployment)
    assert order.index("health") < order.index("route") < order.index("retire")
    assert installation["domain"] == domain
    assert installation["url"] == f"https://{domain}"

    # Published on the loopback only, on an ephemeral port: reachable only through Caddy.
    (inspected,) = containers_of(installation["id"])
    assert inspected["Name"] == f"/{stack.name('hello')}"
    (binding,) = inspected["NetworkSettings"]["Ports"][f"{APP_PORT}/tcp"]
    assert binding["HostIp"] == "127.0.0.1"
    assert int(binding["HostPort"]) != APP_PORT

    status, _, body = stack.https(domain)
    assert (status, body) == (200, _hello("v1"))
    status, headers, _ = http_get(stack.caddy.http_port, domain, "/some/path?q=1")
    assert status in (301, 308)
    assert headers["location"].startswith(f"https://{domain}")
    assert headers["location"].endswith("/some/path?q=1")

    # Caddy routes (and holds certificates for) this server's domains only.
    assert stack.caddy.routed_domains() == [domain]
    other = f"other-{RUN}.berth.test"
    with pytest.raises(ssl.SSLError):
        stack.https(other)
    certificates = stack.caddy.dir / "data" / "caddy" / "certificates" / "local"
    assert sorted(p.name for p in certificates.iterdir()) == [domain]
    upstream = f"127.0.0.1:{binding['HostPort']}"
    assert upstream in json.dumps(stack.caddy.config())


def test_domain_conflict_on_one_server_is_409(stack: DomainStack) -> None:
    """A domain held by another installation of the server is a 409 at request time."""
    domain = stack.domain("taken")
    deployed(stack.deploy("taken"), "succeeded")
    refused = problem(stack.deploy("taker", domain=domain), 409)
    assert domain in refused["detail"]
    listing = get_json(stack.api, "/api/agent/install", serverId=stack.server_id)
    assert stack.name("taker") not in [i["containerName"] for i in listing["installations"]]


# -- zero downtime -----------------------------------------------------------------------


@dataclass
class Client:
    """Sends HTTPS requests through Caddy back to back on a thread (a new connection
    each) until stopped or ``limit`` seconds have passed, recording every answer."""

    stack: DomainStack
    domain: str
    limit: float = 20.0
    answers: list[bytes] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    started: float = 0.0
    ended: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Client:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.limit + 10)

    def _run(self) -> None:
        deadline = self.started + self.limit
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                status, _, body = self.stack.https(self.domain)
            except (OSError, ssl.SSLError) as exc:
                self.failures.append(f"{self._at()}: {type(exc).__name__}: {exc}")
                continue
            if status != 200 or not body.startswith(b"hello from "):
                self.failures.append(f"{self._at()}: HTTP {status}: {body[:80]!r}")
            else:
                self.answers.append(body)
        self.ended = time.monotonic()

    def _at(self) -> str:
        now = time.strftime("%H:%M:%S", time.gmtime()) + f"{time.time() % 1:.3f}"[1:]
        return f"at {time.monotonic() - self.started:.3f} s ({now}Z)"

    @property
    def requests(self) -> int:
        return len(self.answers) + len(self.failures)

    def versions(self) -> list[bytes]:
        """The answers in order, consecutive repeats collapsed."""
        seen: list[bytes] = []
        for answer in self.answers:
            if not seen or seen[-1] != answer:
                seen.append(answer)
        return seen


def test_redeploys_through_caddy_drop_no_request(stack: DomainStack) -> None:
    """Three redeploys under 20 s of continuous HTTPS traffic: zero failures, each version
    served in turn."""
    what = "steady"
    domain = stack.domain(what)
    deployed(stack.deploy(what, "v1"), "succeeded")
    wait_until(lambda: stack.serves(domain, _hello("v1")), bool, 10, "v1 served")
    timings = []
    events = []
    with Client(stack, domain, limit=WINDOW + 15) as client:
        # Redeploy at a quarter, half and three quarters of the window; stop at its end.
        for index, version in enumerate(VERSIONS[1:], start=1):
            _sleep_until(client.started + index * WINDOW / 4)
            began = time.monotonic()
            deployment, installation = deployed(stack.deploy(what, version), "succeeded")
            timings.append(time.monotonic() - began)
            events.append(_timeline(deployment))
            assert "route" in steps(deployment)
            assert "retire" in steps(deployment)
        _sleep_until(client.started + WINDOW)
    duration = client.ended - client.started
    print(
        f"\nzero-downtime over {stack.transport}: {client.requests} requests in "
        f"{duration:.1f} s, {len(client.failures)} failed; the redeploys took "
        + ", ".join(f"{t:.2f} s" for t in timings)
    )
    _explain(stack, client, events)
    assert client.failures == [], client.failures[:5]
    assert client.requests > 100
    assert client.versions() == [_hello(v) for v in VERSIONS]
    (only,) = containers_of(installation["id"])
    assert only["Name"] == f"/{stack.name(what)}"
    assert only["Config"]["Image"] == echo(VERSIONS[-1])


def _explain(stack: DomainStack, client: Client, events: list[list[tuple[str, str, str]]]) -> None:
    """If the client saw failures: when each deployment step happened, and what berth and
    Caddy said about the proxy meanwhile (printed, shown when the test fails)."""
    if not client.failures:
        return
    for deployment_events in events:
        print("EVENTS", deployment_events)
    for record in stack.berth.log_records():
        if "proxy" in str(record.get("event")) or record.get("level") in ("warning", "error"):
            print("BERTH", record.get("timestamp"), record.get("event"), record.get("error"))
    for line in stack.caddy.log().splitlines():
        if '"level":"error"' in line:
            print("CADDY", line[:600])


def _timeline(deployment: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(e["at"][11:23], e["step"], e["message"][:70]) for e in deployment["events"]]


def _sleep_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.monotonic()))


def test_failed_redeploy_keeps_the_old_version_serving(stack: DomainStack) -> None:
    """A new version that never answers fails at health; the old one serves throughout."""
    what = "sturdy"
    domain = stack.domain(what)
    first, installation = deployed(stack.deploy(what, "v1"), "succeeded")
    (before,) = containers_of(installation["id"])
    config_before = stack.caddy.config()
    wait_until(lambda: stack.serves(domain, _hello("v1")), bool, 10, "v1 served")
    with Client(stack, domain) as client:
        failed, again = deployed(
            stack.deploy(what, "v2", env={"BERTH_TEST_MODE": "nolisten"}), "failed"
        )
        time.sleep(0.5)
    assert failed["error"].startswith("health: ")
    assert "route" not in steps(failed)
    _explain(stack, client, [_timeline(failed)])
    assert client.failures == [], client.failures[:5]
    assert client.versions() == [_hello("v1")]
    # The old container alone is left, untouched, and Caddy still sends the domain to it.
    (after,) = containers_of(installation["id"])
    assert after["Id"] == before["Id"]
    assert after["Name"] == f"/{stack.name(what)}"
    assert stack.caddy.config() == config_before
    assert stack.serves(domain, _hello("v1"))
    # The status says what runs: v1, the current revision, still serving.
    assert again["status"] == "running"
    assert again["currentDeploymentId"] == first["id"]
    assert again["lastDeployment"]["state"] == "failed"
    assert again["url"] == f"https://{domain}"


# -- Caddy restarted, edited by hand; removal --------------------------------------------


def test_routes_come_back_after_caddy_restarts_or_is_edited(stack: DomainStack) -> None:
    """Caddy restarted (or its config replaced by hand): berth loads the routes again."""
    what = "phoenix"
    domain = stack.domain(what)
    deployed(stack.deploy(what), "succeeded")
    wait_until(lambda: stack.serves(domain, _hello("v1")), bool, 10, "served")
    reapplied_before = _count(stack.berth, "proxy_reapplied")

    stack.caddy.restart()  # back with the initial config only: no route
    # (Not read back here: berth's monitor, every 0.5 s, may load the routes again before
    # the test can look. That it did is what "proxy_reapplied" below proves.)
    wait_until(lambda: stack.serves(domain, _hello("v1")), bool, 15, "served after restart")
    wait_until(
        lambda: _count(stack.berth, "proxy_reapplied"),
        lambda n: n > reapplied_before,
        10,
        "proxy_reapplied logged",
    )

    status, _ = stack.caddy.admin("POST", "/load", stack.caddy.initial_config)
    assert status == 200
    wait_until(lambda: stack.serves(domain, _hello("v1")), bool, 15, "served after edit")


def test_removing_an_installation_removes_its_route(stack: DomainStack) -> None:
    """DELETE removes the app's route (and certificate use); other routes keep serving."""
    gone, kept = stack.domain("gone"), stack.domain("kept")
    _, installation = deployed(stack.deploy("gone"), "succeeded")
    deployed(stack.deploy("kept", "v2"), "succeeded")
    assert {gone, kept} <= set(stack.caddy.routed_domains())
    response = stack.api.delete(f"/api/agent/installations/{installation['id']}")
    assert response.status_code == 204, response.text
    routed = stack.caddy.routed_domains()
    assert gone not in routed
    assert kept in routed
    with pytest.raises(ssl.SSLError):
        stack.https(gone)
    assert stack.serves(kept, _hello("v2"))
    assert containers_of(installation["id"]) == []


def test_an_app_gains_and_loses_its_domain(stack: DomainStack) -> None:
    """No domain → domain: served over HTTPS, loopback only; → no domain: route dropped."""
    what = "shifty"
    domain = stack.domain(what)
    public = host_port()
    _, installation = deployed(
        deploy(stack.api, stack.server_id, stack.name(what), public), "succeeded"
    )
    assert get_app(public).text == "hello from v1\n"

    deployed(stack.deploy(what, "v2"), "succeeded")
    assert stack.serves(domain, _hello("v2"))
    (inspected,) = containers_of(installation["id"])
    (binding,) = inspected["NetworkSettings"]["Ports"][f"{APP_PORT}/tcp"]
    assert binding["HostIp"] == "127.0.0.1"
    with pytest.raises(httpx.HTTPError):
        get_app(public)

    deployed(
        deploy(stack.api, stack.server_id, stack.name(what), public, image=echo("v3")),
        "succeeded",
    )
    assert get_app(public).text == "hello from v3\n"
    wait_until(stack.caddy.routed_domains, lambda d: domain not in d, 10, "route dropped")
    assert len(containers_of(installation["id"])) == 1


# -- hostile input -----------------------------------------------------------------------

HOSTILE_DOMAINS = [
    'a.com"}],"x":{"',  # JSON injection
    'a.com"}]}},"admin":{"listen":"tcp/0.0.0.0:2019',
    "a.com/../x",
    "*.example.com",
    "exa mple.com",
    "ex\u0430mple.com",  # Cyrillic small a
    "\uff45xample.com",  # fullwidth small e
    "exam\u200bple.com",  # zero-width space
    "$(id).example.com",
    "`id`.example.com",
    "{env.HOME}.example.com",  # a Caddy placeholder
    "example.com:443",
    "localhost",
    "example.com\n",
    "a.com\r\nHost: evil",
    "example.com.",
    "-a.example.com",
    "a..example.com",
    "a_b.example.com",
    "a" * 64 + ".example.com",
    "",
]


def test_hostile_domains_are_refused_and_never_reach_caddy(stack: DomainStack) -> None:
    """Domain-like injections, wildcards, homoglyphs, ports: 422, and Caddy never sees them."""
    config_before = stack.caddy.config()
    for index, hostile in enumerate(HOSTILE_DOMAINS):
        response = stack.deploy(f"hostile-{index}", domain=hostile, wait=None)
        body = problem(response, 422)
        assert "body.domain" in [e["location"] for e in body["errors"]], (hostile, body)
    listing = get_json(stack.api, "/api/agent/install", serverId=stack.server_id)
    assert not [i for i in listing["installations"] if "hostile" in i["containerName"]]
    time.sleep(1.0)  # two monitor passes
    config = stack.caddy.config()
    assert config == config_before
    text = json.dumps(config, ensure_ascii=False)
    for hostile in HOSTILE_DOMAINS:
        if hostile:
            assert hostile not in text


def _count(process: BerthProcess, event: str) -> int:
    with contextlib.suppress(Exception):
        return sum(1 for r in process.log_records() if r.get("event") == event)
    return 0
