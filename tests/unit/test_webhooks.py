"""Webhooks in the core: the Standard Webhooks signature (checked by a verifier written
here from the specification, not from berth's code), the retry schedule, the URL and
event rules, the use cases through the bus, and a delivery pass over fakes."""

from __future__ import annotations

import base64
import hmac
import json
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from uuid import UUID, uuid4

import pytest
from berth.core import commands as c
from berth.core.errors import Conflict, InvalidInput, NotFound
from berth.core.models import (
    DeliveryAttempt,
    DeliveryState,
    DeploymentEvent,
    DeploymentState,
    Server,
    User,
    WebhookEvent,
    WebhookFormat,
)
from berth.core.outbox import OutboxMessage, SendResult
from berth.core.results import CreatedWebhook
from berth.core.types import RuleError
from berth.core.use_cases import DeliverWebhooks
from berth.core.webhooks import (
    URL_MAX,
    WEBHOOKS_MAX,
    RetryPolicy,
    chat_body,
    check_events,
    check_webhook_url,
    deployment_body,
    event_of_deployment,
    generate_secret,
    message_id,
    retry_delay,
    sign,
    signed_headers,
)
from fakes import FakeClock
from hypothesis import given
from hypothesis import strategies as st
from wiring import App, build_app

# --- an independent verifier, from https://www.standardwebhooks.com/ ----------------------


def verify(secret: str, headers: Mapping[str, str], body: bytes, now: int) -> bool:
    """The Standard Webhooks check, written from the specification: the signed content is
    ``{webhook-id}.{webhook-timestamp}.{body}``, the key is the base64 after ``whsec_``, the
    header holds space-separated ``v1,<base64 HMAC-SHA256>``; a timestamp more than five
    minutes off is refused."""
    msg_id = headers["webhook-id"]
    timestamp = headers["webhook-timestamp"]
    if abs(now - int(timestamp)) > 300:
        return False
    key = base64.b64decode(secret.split("_", 1)[1])
    content = msg_id.encode() + b"." + timestamp.encode() + b"." + body
    expected = base64.b64encode(hmac.digest(key, content, "sha256"))
    for candidate in headers["webhook-signature"].split(" "):
        version, _, signature = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(signature.encode(), expected):
            return True
    return False


class TestSignature:
    def test_matches_the_specifications_test_vector(self) -> None:
        """The signature of the Standard Webhooks test vector is the published one."""
        signed = sign(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            b'{"test": 2432232314}',
        )
        assert signed == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

    @given(body=st.binary(max_size=4096), timestamp=st.integers(0, 2**40), seed=st.uuids())
    def test_the_verifier_accepts_what_berth_signs(
        self, body: bytes, timestamp: int, seed: UUID
    ) -> None:
        """Any body, id and time signed by berth passes the specification's check."""
        secret = generate_secret()
        headers = signed_headers(secret, message_id(seed), timestamp, body)
        assert verify(secret, headers, body, timestamp)

    @given(body=st.binary(min_size=1, max_size=512), data=st.data())
    def test_any_change_to_the_body_is_refused(self, body: bytes, data: st.DataObject) -> None:
        """Flipping any bit of the body makes the signature fail."""
        secret = generate_secret()
        headers = signed_headers(secret, "msg_x", 1000, body)
        index = data.draw(st.integers(0, len(body) - 1))
        bit = data.draw(st.integers(0, 7))
        tampered = bytearray(body)
        tampered[index] ^= 1 << bit
        assert not verify(secret, headers, bytes(tampered), 1000)

    def test_another_secret_id_or_time_is_refused(self) -> None:
        """The id and timestamp are signed too; another secret does not verify."""
        secret, body = generate_secret(), b"{}"
        headers = signed_headers(secret, "msg_a", 1000, body)
        assert not verify(generate_secret(), headers, body, 1000)
        assert not verify(secret, {**headers, "webhook-id": "msg_b"}, body, 1000)
        assert not verify(secret, {**headers, "webhook-timestamp": "1001"}, body, 1000)

    def test_secrets_are_standard_and_unique(self) -> None:
        """A secret is whsec_ + base64 of 32 random bytes, new each time."""
        secrets = {generate_secret() for _ in range(50)}
        assert len(secrets) == 50
        for secret in secrets:
            assert secret.startswith("whsec_")
            assert len(base64.b64decode(secret[6:], validate=True)) == 32

    def test_headers_are_the_standard_ones(self) -> None:
        """Content type JSON and the three webhook-* headers, nothing else."""
        headers = signed_headers(generate_secret(), "msg_a", 5, b"{}")
        assert set(headers) == {
            "content-type",
            "webhook-id",
            "webhook-timestamp",
            "webhook-signature",
        }
        assert headers["webhook-timestamp"] == "5"


# --- the retry schedule ---------------------------------------------------------------------

policies = st.builds(
    RetryPolicy,
    max_attempts=st.integers(1, 50),
    first_delay=st.floats(0.01, 100),
    factor=st.floats(1, 10),
    max_delay=st.floats(100, 100_000),
    timeout=st.floats(0.1, 300),
)


class TestRetrySchedule:
    @given(policy=policies, failed=st.integers(1, 60), jitter=st.floats(0, 1))
    def test_delays_are_bounded_and_end_at_the_last_attempt(
        self, policy: RetryPolicy, failed: int, jitter: float
    ) -> None:
        """Each delay is within [d/2, d] for d = first*factor^(n-1) capped; none after the
        last attempt."""
        delay = retry_delay(policy, failed, jitter)
        if failed >= policy.max_attempts:
            assert delay is None
            return
        full = min(policy.max_delay, policy.first_delay * policy.factor ** (failed - 1))
        assert delay is not None
        assert full / 2 - 1e-9 <= delay <= full + 1e-9

    @given(policy=policies, failed=st.integers(1, 49))
    def test_backoff_never_shrinks(self, policy: RetryPolicy, failed: int) -> None:
        """The shortest wait after n+1 failures is at least the shortest after n."""
        now = retry_delay(policy, failed, 0.0)
        later = retry_delay(policy, failed + 1, 0.0)
        if later is not None:
            assert now is not None
            assert later >= now - 1e-9

    @given(jitter=st.lists(st.floats(0, 1), min_size=7, max_size=7))
    def test_the_default_spans_a_few_hours_in_eight_attempts(self, jitter: list[float]) -> None:
        """By default: 8 attempts, the last one between 2 and 5 hours after the first."""
        policy = RetryPolicy()
        delays = [retry_delay(policy, n, j) for n, j in enumerate(jitter, start=1)]
        assert all(d is not None for d in delays)
        assert retry_delay(policy, 8, 0.5) is None
        total = sum(d for d in delays if d is not None)
        assert 2 * 3600 <= total <= 5 * 3600

    def test_bad_policies_are_refused(self) -> None:
        """Attempts 1-50, a positive first delay under the cap, a factor of at least 1."""
        for bad in (
            {"max_attempts": 0},
            {"max_attempts": 51},
            {"first_delay": 0},
            {"first_delay": 10, "max_delay": 5},
            {"factor": 0.5},
            {"timeout": 0},
        ):
            with pytest.raises(ValueError, match="must be"):
                RetryPolicy(**bad)  # type: ignore[arg-type]


# --- URL and event rules --------------------------------------------------------------------


class TestUrlRule:
    @pytest.mark.parametrize(
        "url",
        [
            "https://hooks.example.com/berth",
            "http://127.0.0.1:8080/hook?token=abc&x=1",
            "https://[::1]:9443/x",
            "HTTPS://Example.COM",
            "http://localhost:3000/",
            "https://xn--bcher-kva.example/hook",
        ],
    )
    def test_accepts_http_and_https(self, url: str) -> None:
        """Absolute http(s) URLs to a name or an address, with port, path and query."""
        assert check_webhook_url(url) == url

    @pytest.mark.parametrize(
        "url",
        [
            "",
            "ftp://example.com/x",
            "file:///etc/passwd",
            "javascript:alert(1)",
            "data:text/plain,hi",
            "gopher://example.com/",
            "//example.com/x",
            "example.com/x",
            "http:/example.com",
            "https://",
            "https://user:pass@example.com/",
            "https://example.com/#frag",
            "https://example.com/a b",
            "https://example.com/\nHost: evil",
            "https://example.com/\r\n",
            "https://exa\tmple.com/",
            "https://bücher.example/",
            "https://example.com:0/",
            "https://example.com:65536/",
            "https://example.com:port/",
            "https://example.com:/",
            "https://-bad-.example/",
            "https://[::1/",
            "https://[not-an-ip]/",
            "https://999.1.1.1/",
            "https://" + "a" * 64 + ".example/",
            "https://example.com/" + "a" * URL_MAX,
        ],
    )
    def test_refuses_everything_else(self, url: str) -> None:
        """Other schemes, relative URLs, credentials, fragments, control characters,
        non-ASCII, bad ports and hosts, and over 2048 characters are refused."""
        with pytest.raises(RuleError):
            check_webhook_url(url)

    @given(text=st.text(max_size=100))
    def test_never_accepts_a_non_http_url(self, text: str) -> None:
        """Whatever the text, an accepted URL is http(s), ASCII and free of whitespace."""
        try:
            url = check_webhook_url(text)
        except RuleError:
            return
        assert url.lower().startswith(("http://", "https://"))
        assert url.isascii()
        assert not any(ch.isspace() for ch in url)

    def test_refuses_non_strings(self) -> None:
        """A number, a list or null is not a URL."""
        for value in (1, ["https://example.com"], None, b"https://example.com"):
            with pytest.raises(RuleError):
                check_webhook_url(value)


class TestEventRule:
    def test_known_events_in_a_fixed_order(self) -> None:
        """Events come back in the set's order, whatever order they were given in."""
        assert check_events(["server.online", "deployment.failed"]) == (
            WebhookEvent.DEPLOYMENT_FAILED,
            WebhookEvent.SERVER_ONLINE,
        )

    @pytest.mark.parametrize(
        "events",
        [
            [],
            ["deployment.finished"],
            ["DEPLOYMENT.FAILED"],
            ["deployment.failed", "deployment.failed"],
            ["deployment.failed", 1],
            "deployment.failed",
            None,
            {"deployment.failed": True},
        ],
    )
    def test_refuses_unknown_repeated_or_none(self, events: object) -> None:
        """Unknown names, repeats, an empty list and non-lists are refused."""
        with pytest.raises(RuleError):
            check_events(events)

    def test_final_states_map_to_events(self) -> None:
        """succeeded, failed (and timed_out), canceled each tell; the others do not."""
        assert event_of_deployment(DeploymentState.TIMED_OUT) is WebhookEvent.DEPLOYMENT_FAILED
        assert event_of_deployment(DeploymentState.CANCELED) is WebhookEvent.DEPLOYMENT_CANCELED
        assert event_of_deployment(DeploymentState.RUNNING) is None

    def test_every_broken_field_at_once(self) -> None:
        """A request with a bad URL, bad events and an unknown field names all three."""
        with pytest.raises(InvalidInput) as caught:
            c.parse_create_webhook({"url": "ftp://x", "events": ["nope"], "secret": "mine"})
        assert {e.location for e in caught.value.errors} == {"url", "events", "secret"}

    def test_a_refused_url_is_echoed_without_its_user_info(self) -> None:
        """A URL refused for the credentials in it comes back without them."""
        with pytest.raises(InvalidInput) as caught:
            c.parse_create_webhook(
                {"url": "https://me:hunter22@hooks.example.com/b", "events": ["deployment.failed"]}
            )
        (error,) = caught.value.errors
        assert (error.location, error.value) == ("url", "https://***@hooks.example.com/b")


# --- the use cases, through the bus ---------------------------------------------------------


async def _create(app: App, user: User, url: str = "https://hooks.example.com/x") -> CreatedWebhook:
    cmd = c.parse_create_webhook({"url": url, "events": ["deployment.failed"]})
    return await app.bus.handle(cmd, user)


class TestWebhookUseCases:
    async def test_the_secret_is_shown_once_and_sealed(self, app: App, owner: User) -> None:
        """Creation returns whsec_…; lists never carry it; the store holds it sealed."""
        user = owner
        created = await _create(app, user)
        assert created.secret.startswith("whsec_")
        listed = await app.bus.handle(c.ListWebhooks(), user)
        assert [w.id for w in listed] == [created.webhook.id]
        assert created.secret not in repr(listed)
        _, sealed = app.store.state.webhooks[created.webhook.id]
        assert created.secret.encode() not in sealed
        assert app.box.open(sealed) == created.secret.encode()

    async def test_another_users_webhook_is_not_found(
        self, app: App, owner: User, make_user: Callable[[], Awaitable[User]]
    ) -> None:
        """Deleting or reading the deliveries of someone else's webhook is a 404."""
        user, other_user = owner, await make_user()
        created = await _create(app, user)
        hook = created.webhook.id
        with pytest.raises(NotFound):
            await app.bus.handle(c.DeleteWebhook(webhook_id=hook), other_user)
        with pytest.raises(NotFound):
            await app.bus.handle(c.ListWebhookDeliveries(webhook_id=hook), other_user)
        assert await app.bus.handle(c.ListWebhooks(), other_user) == []
        await app.bus.handle(c.DeleteWebhook(webhook_id=hook), user)
        with pytest.raises(NotFound):
            await app.bus.handle(c.DeleteWebhook(webhook_id=hook), user)

    async def test_at_most_twenty_per_user(self, app: App, owner: User) -> None:
        """The 21st webhook is a conflict naming the limit."""
        user = owner
        for _ in range(WEBHOOKS_MAX):
            await _create(app, user)
        with pytest.raises(Conflict) as caught:
            await _create(app, user)
        assert caught.value.kind == "webhook-limit"

    @pytest.mark.parametrize(
        ("url", "answers", "said"),
        [
            ("http://127.0.0.1:2019/stop", {}, "127.0.0.1 is a loopback address"),
            ("http://[::1]:8080/", {}, "::1 is a loopback address"),
            ("http://[::ffff:127.0.0.1]/", {}, "IPv4-mapped"),
            ("http://169.254.169.254/latest/meta-data/", {}, "link-local"),
            ("http://10.0.0.1/", {}, "private"),
            ("http://192.168.1.1/", {}, "private"),
            ("http://100.64.0.1/", {}, "carrier-grade NAT"),
            ("http://[fd00::1]/", {}, "unique local"),
            ("http://localhost:8080/", {"localhost": ["127.0.0.1"]}, "localhost resolves to"),
            (
                "http://metadata.google.internal/computeMetadata/v1/",
                {"metadata.google.internal": ["169.254.169.254"]},
                "link-local",
            ),
            ("http://metadata.google.internal/", {"metadata.google.internal": []}, "resolve"),
        ],
    )
    async def test_hooks_that_lead_inside_are_refused_at_the_url(
        self, app: App, owner: User, url: str, answers: dict[str, list[str]], said: str
    ) -> None:
        """A URL whose host is (or resolves to) an inside address: InvalidInput at url,
        saying why; nothing is stored."""
        app.resolver.answers.update(answers)
        with pytest.raises(InvalidInput) as caught:
            await _create(app, owner, url)
        ((error,),) = [caught.value.errors]
        assert error.location == "url"
        assert said in error.message
        assert await app.bus.handle(c.ListWebhooks(), owner) == []

    async def test_private_targets_are_allowed_when_the_operator_says_so(self) -> None:
        """With BERTH_ALLOW_PRIVATE_TARGETS=1 a loopback hook is created; a link-local
        one is still refused."""
        app = build_app(allow_private=True)
        user = await app.bus.handle(
            c.CreateUser(email="ops@example.com", password="correct horse battery staple")
        )
        created = await _create(app, user, "http://127.0.0.1:9000/hook")
        assert created.webhook.url == "http://127.0.0.1:9000/hook"
        with pytest.raises(InvalidInput):
            await _create(app, user, "http://169.254.169.254/")

    async def test_lists_show_the_host_not_the_path(self, app: App, owner: User) -> None:
        """The URL is whole when created; lists show scheme, host and port, the path cut
        (it may be a token)."""
        url = "https://hooks.example.com:8443/services/T0/B0/s3cr3t?token=t0k3n"
        created = await _create(app, owner, url)
        assert created.webhook.url == url
        (listed,) = await app.bus.handle(c.ListWebhooks(), owner)
        assert listed.url == "https://hooks.example.com:8443/…"

    async def test_needs_a_signed_in_user(self, app: App) -> None:
        """No actor, no webhook."""
        from berth.core.errors import Unauthorized

        with pytest.raises(Unauthorized):
            await app.bus.handle(c.ListWebhooks())


class TestSendTestWebhook:
    async def test_a_signed_test_event_and_how_the_endpoint_answered(
        self, app: App, owner: User
    ) -> None:
        """A test is one POST of webhook.test, signed with the webhook's secret, now; the
        answer says delivered and the status code; nothing goes to the delivery log."""
        created = await _create(app, owner)
        tested = await app.bus.handle(c.SendTestWebhook(webhook_id=created.webhook.id), owner)
        assert (tested.delivered, tested.status_code, tested.error) == (True, 204, None)
        assert tested.event == "webhook.test"
        ((url, headers, body),) = app.sender.sent
        assert url == "https://hooks.example.com/x"
        assert verify(created.secret, headers, body, int(headers["webhook-timestamp"]))
        sent = json.loads(body)
        assert sent["type"] == "webhook.test"
        assert sent["data"]["webhookId"] == str(created.webhook.id)
        assert (
            await app.bus.handle(c.ListWebhookDeliveries(webhook_id=created.webhook.id), owner)
            == []
        )

    async def test_a_refusal_or_no_answer_is_said_in_words(self, app: App, owner: User) -> None:
        """A 500 is "HTTP 500", a redirect is not followed, no answer says why."""
        created = await _create(app, owner)
        app.sender.answers[:] = [
            SendResult(500),
            SendResult(301),
            SendResult(None, "Could not connect: refused"),
        ]
        said = []
        for _ in range(3):
            cmd = c.SendTestWebhook(webhook_id=created.webhook.id)
            tested = await app.bus.handle(cmd, owner)
            assert not tested.delivered
            said.append((tested.status_code, tested.error))
        assert said == [
            (500, "HTTP 500"),
            (301, "HTTP 301: redirects are not followed"),
            (None, "Could not connect: refused"),
        ]

    async def test_a_chat_webhook_gets_the_test_in_words(self, app: App, owner: User) -> None:
        """A Slack webhook's test is {"text"} saying it is a test from berth."""
        cmd = c.parse_create_webhook(
            {"url": "https://hooks.example.com/s", "events": ["server.offline"], "format": "slack"}
        )
        created = await app.bus.handle(cmd, owner)
        await app.bus.handle(c.SendTestWebhook(webhook_id=created.webhook.id), owner)
        ((_, _, body),) = app.sender.sent
        assert json.loads(body) == {
            "text": "🔔 A test from berth: notifications reach this endpoint."
        }

    async def test_another_teams_webhook_is_not_found(
        self, app: App, owner: User, make_user: Callable[[], Awaitable[User]]
    ) -> None:
        """Someone else's webhook is a 404 and nothing is sent."""
        created = await _create(app, owner)
        cmd, other = c.SendTestWebhook(webhook_id=created.webhook.id), await make_user()
        with pytest.raises(NotFound):
            await app.bus.handle(cmd, other)
        assert app.sender.sent == []


# --- a delivery pass over fakes ---------------------------------------------------------


class FakeOutbox:
    """One delivery, claimed while due and unleased; records what the worker writes."""

    def __init__(self, message: OutboxMessage) -> None:
        self.message = message
        self.attempts = 0
        self.state = DeliveryState.PENDING
        self.next_at = None
        self.log: list[DeliveryAttempt] = []

    async def claim(self, worker_id, now, lease_until, limit, max_attempts):  # type: ignore[no-untyped-def]
        if self.state is not DeliveryState.PENDING or (self.next_at and self.next_at > now):
            return []
        self.attempts += 1
        from dataclasses import replace

        return [replace(self.message, attempt=self.attempts)]

    async def record(self, delivery_id, worker_id, attempt, state, next_attempt_at):  # type: ignore[no-untyped-def]
        self.log.append(attempt)
        self.state = state
        self.next_at = next_attempt_at
        return True


class ScriptedSender:
    def __init__(self, answers: list[SendResult]) -> None:
        self.answers = answers
        self.sent: list[tuple[str, dict[str, str], bytes]] = []

    async def send(self, url, headers, body, seconds):  # type: ignore[no-untyped-def]
        self.sent.append((url, dict(headers), body))
        return self.answers.pop(0)


def _message(secret: str) -> OutboxMessage:
    return OutboxMessage(
        delivery_id=uuid4(),
        webhook_id=uuid4(),
        event=WebhookEvent.DEPLOYMENT_FAILED,
        url="https://hooks.example.com/x",
        body=b'{"type":"deployment.failed"}',
        attempt=0,
        secret=secret,
    )


class TestDeliverWebhooks:
    async def test_retries_with_the_same_id_until_accepted(self) -> None:
        """500, 500, then 200: three signed POSTs with one webhook-id, waits per the policy."""
        secret = generate_secret()
        clock = FakeClock()
        outbox = FakeOutbox(_message(secret))
        sender = ScriptedSender([SendResult(500), SendResult(500), SendResult(200)])
        policy = RetryPolicy(first_delay=10, factor=2, max_delay=100)
        deliver = DeliverWebhooks(
            outbox, sender, clock, worker_id="w", policy=policy, jitter=lambda: 1.0
        )
        assert await deliver() == 1
        assert outbox.next_at == clock.now() + timedelta(seconds=10)
        assert await deliver() == 0  # not due yet
        clock.advance(10)
        assert await deliver() == 1
        assert outbox.next_at == clock.now() + timedelta(seconds=20)
        clock.advance(20)
        assert await deliver() == 1
        assert outbox.state is DeliveryState.DELIVERED
        assert [a.status_code for a in outbox.log] == [500, 500, 200]
        assert [a.error for a in outbox.log] == ["HTTP 500", "HTTP 500", None]
        ids = {headers["webhook-id"] for _, headers, _ in sender.sent}
        assert ids == {message_id(outbox.message.delivery_id)}
        for _, headers, body in sender.sent:
            assert verify(secret, headers, body, int(headers["webhook-timestamp"]))

    async def test_gives_up_after_the_last_attempt(self) -> None:
        """With 2 attempts allowed, two failures end the delivery failed, nothing due."""
        clock = FakeClock()
        outbox = FakeOutbox(_message(generate_secret()))
        sender = ScriptedSender([SendResult(None, "Could not connect: refused")] * 2)
        deliver = DeliverWebhooks(
            outbox, sender, clock, worker_id="w", policy=RetryPolicy(max_attempts=2)
        )
        await deliver()
        clock.advance(3600)
        await deliver()
        assert outbox.state is DeliveryState.FAILED
        assert outbox.next_at is None
        assert outbox.log[-1].error == "Could not connect: refused"

    async def test_a_redirect_is_a_failure(self) -> None:
        """A 3xx is not followed: the attempt failed, saying so."""
        outbox = FakeOutbox(_message(generate_secret()))
        sender = ScriptedSender([SendResult(302)])
        await DeliverWebhooks(outbox, sender, FakeClock(), worker_id="w")()
        assert outbox.state is DeliveryState.PENDING
        assert outbox.log[0].error == "HTTP 302: redirects are not followed"

    def test_the_secret_stays_out_of_repr(self) -> None:
        """A claimed message printed (or logged) does not show its secret."""
        secret = generate_secret()
        assert secret not in repr(_message(secret))


class TestOutboxInTheFakeStore:
    """The outbox is written by ``tell_webhooks``' handler of the change's event, in the
    change's unit of work: never by a repository on the side."""

    async def _told(self, app: App, user: User, server: Server, name: str = "web") -> UUID:
        """A queued deployment of ``name``, and a webhook told of canceled ones."""
        deployed = await app.bus.handle(
            c.parse_deploy({"server_id": str(server.id), "name": name, "image": "web:1"}), user
        )
        cmd = c.parse_create_webhook(
            {"url": "https://hooks.example.com/x", "events": ["deployment.canceled"]}
        )
        self.webhook = (await app.bus.handle(cmd, user)).webhook
        return deployed.deployment.id

    async def _told_of(self, app: App, user: User) -> list[WebhookEvent]:
        found = await app.bus.handle(c.ListWebhookDeliveries(webhook_id=self.webhook.id), user)
        return [d.event for d in found]

    async def test_canceling_a_queued_deployment_enqueues_once(
        self, app: App, owner: User, server: Server
    ) -> None:
        """A webhook for deployment.canceled gets one delivery when a queued one is canceled."""
        deployment_id = await self._told(app, owner, server)
        await app.bus.handle(c.CancelDeployment(deployment_id=deployment_id), owner)
        assert await self._told_of(app, owner) == [WebhookEvent.DEPLOYMENT_CANCELED]

    async def test_a_superseded_deployment_is_told(
        self, app: App, owner: User, server: Server
    ) -> None:
        """A redeploy cancels the queued deployment it supersedes: one delivery."""
        await self._told(app, owner, server)
        redeploy = {"server_id": str(server.id), "name": "web", "image": "web:2"}
        await app.bus.handle(c.parse_deploy(redeploy), owner)
        assert await self._told_of(app, owner) == [WebhookEvent.DEPLOYMENT_CANCELED]

    async def test_removing_an_installation_tells_its_queued_deployment(
        self, app: App, owner: User, server: Server
    ) -> None:
        """Removing an installation cancels its queued deployment: one delivery."""
        deployment_id = await self._told(app, owner, server)
        app.gateway.runtime(server.id)
        installation_id = app.store.state.deployments[deployment_id].deployment.installation_id
        await app.bus.handle(c.RemoveInstallation(installation_id=installation_id), owner)
        assert await self._told_of(app, owner) == [WebhookEvent.DEPLOYMENT_CANCELED]

    async def test_the_repository_alone_writes_no_delivery(
        self, app: App, owner: User, server: Server
    ) -> None:
        """Ending a deployment in a unit of work without recording it tells nobody."""
        deployment_id = await self._told(app, owner, server)
        now = app.clock.now()
        async with app.uow() as uow:
            event = DeploymentEvent(at=now, step="canceled", message="Canceled.")
            await uow.deployments.finish(
                owner.id, deployment_id, DeploymentState.CANCELED, now, "x", event
            )
            await uow.commit()
        assert await self._told_of(app, owner) == []


class TestChatFormats:
    """``chat_body``: the standard body in words for Slack and Discord."""

    @staticmethod
    def _failed(name: str, error: str) -> tuple[bytes, UUID, UUID]:
        installation, server = uuid4(), uuid4()
        body = deployment_body(
            WebhookEvent.DEPLOYMENT_FAILED,
            deployment_id=uuid4(),
            installation_id=installation,
            installation_name=name,
            server_id=server,
            server_name="web-1",
            state=DeploymentState.FAILED,
            error=error,
            finished_at=datetime(2026, 11, 27, tzinfo=UTC),
        )
        return body, installation, server

    @given(st.text(min_size=1, max_size=100), st.text(max_size=3000))
    def test_slack_escapes_its_control_characters_and_links_the_app(
        self, name: str, error: str
    ) -> None:
        """Slack's ``{"text"}``: no raw ``<``, ``>`` or ``&`` from a name or an error; one
        link, to the app's page."""
        body, installation, server = self._failed(name, error)
        message = json.loads(chat_body(WebhookFormat.SLACK, body, "https://b.example"))
        assert list(message) == ["text"]
        link = f"<https://b.example/servers/{server}/installations/{installation}/|Open the app>"
        assert message["text"].endswith(" " + link)
        said = message["text"].removesuffix(" " + link)
        unescaped = said.replace("&amp;", "").replace("&lt;", "").replace("&gt;", "")
        assert not any(ch in unescaped for ch in "<>&")

    @given(st.text(min_size=1, max_size=100), st.text(max_size=3000))
    def test_discord_is_cut_to_2000_characters_with_mentions_off(
        self, name: str, error: str
    ) -> None:
        """Discord's ``{"content"}``: at most 2000 characters, no mention parsed."""
        body, _, _ = self._failed(name, error)
        message = json.loads(chat_body(WebhookFormat.DISCORD, body, None))
        assert set(message) == {"content", "allowed_mentions"}
        assert 0 < len(message["content"]) <= 2000
        assert message["allowed_mentions"] == {"parse": []}

    def test_standard_is_the_body_itself(self) -> None:
        """A standard webhook is sent the stored body, byte for byte."""
        body, _, _ = self._failed("shop", "boom")
        assert chat_body(WebhookFormat.STANDARD, body, "https://b.example") == body
