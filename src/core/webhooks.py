"""Webhooks as rules: which event a state change is, the URL and events a webhook may
have, its secret, the Standard Webhooks signature, the body of an event and when a
failed delivery is tried again. Pure functions; the store, the outbox and the HTTP
client are ports.

Signature (https://www.standardwebhooks.com/, "Signature scheme"): the secret is
``whsec_`` + base64 of random bytes; each attempt is sent with ``webhook-id`` (the
delivery's id, the same on every retry: the receiver's idempotency key),
``webhook-timestamp`` (the attempt's Unix time) and ``webhook-signature`` =
``v1,`` + base64(HMAC-SHA256(secret bytes, "{id}.{timestamp}.{body}")).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

import msgspec

from .models import DeploymentState, RunState, ServerStatus, WebhookEvent, WebhookFormat
from .outbound import check_host_spelling
from .types import RuleError, checked_text

__all__ = [
    "ERROR_MAX",
    "EVENTS",
    "HTTP_URL_PATTERN",
    "SECRET_PREFIX",
    "TEST_EVENT",
    "TEST_MESSAGE",
    "URL_MAX",
    "WEBHOOKS_MAX",
    "RetryPolicy",
    "attempt_error",
    "chat_body",
    "chat_text",
    "check_events",
    "check_format",
    "check_webhook_url",
    "deployment_body",
    "event_of_deployment",
    "event_of_server",
    "generate_secret",
    "installation_body",
    "message_id",
    "ping_body",
    "retry_delay",
    "server_body",
    "shown_url",
    "sign",
    "signed_headers",
    "user_info_of",
    "without_user_info",
]

SECRET_PREFIX = "whsec_"  # noqa: S105  (a format, not a secret)
SECRET_BYTES = 32
URL_MAX = 2048
#: An http(s) URL as a schema can state ``check_webhook_url``'s rules: printable ASCII,
#: no user or password (no ``@`` before the path) and no fragment (no ``#``).
HTTP_URL_PATTERN = '^[Hh][Tt][Tt][Pp][Ss]?://[!-"$-.0->A-~]+(?:[/?][!-"$-~]*)?$'
WEBHOOKS_MAX = 20  # per user
ERROR_MAX = 1000  # characters of a deployment's error in an event's body, or of an attempt's
EVENTS = tuple(WebhookEvent)

_DEPLOYMENT_EVENTS = {
    DeploymentState.SUCCEEDED: WebhookEvent.DEPLOYMENT_SUCCEEDED,
    DeploymentState.FAILED: WebhookEvent.DEPLOYMENT_FAILED,
    DeploymentState.TIMED_OUT: WebhookEvent.DEPLOYMENT_FAILED,
    DeploymentState.CANCELED: WebhookEvent.DEPLOYMENT_CANCELED,
}
_SERVER_EVENTS = {
    ServerStatus.ONLINE: WebhookEvent.SERVER_ONLINE,
    ServerStatus.OFFLINE: WebhookEvent.SERVER_OFFLINE,
}


def event_of_deployment(state: DeploymentState) -> WebhookEvent | None:
    """The event a deployment reaching ``state`` is (``None`` for a state that is not final).

    ``timed_out`` is a ``deployment.failed``: the deploy did not happen and nobody asked
    it to stop; the body's ``state`` tells the two apart.
    """
    return _DEPLOYMENT_EVENTS.get(state)


def event_of_server(status: ServerStatus) -> WebhookEvent | None:
    """The event a server changing to ``status`` is (``None`` for ``pending``)."""
    return _SERVER_EVENTS.get(status)


# --- a webhook's fields --------------------------------------------------------------------


def check_webhook_url(value: object) -> str:
    """An absolute ``http``/``https`` URL to POST to, returned as given.

    Printable ASCII only (no spaces, no control characters: an internationalized host
    is given in punycode), at most 2048 characters, a host that is a DNS name or an IP
    address, an optional port 1-65535; no user or password (they would be shown in
    every listing) and no fragment (never sent); an IPv4 address written as four decimal
    numbers, not in a legacy spelling (``0x7f000001``). Where the host resolves to is
    the outbound guard's to check (``berth.core.outbound``): that needs the network.
    """
    value = checked_text(value, URL_MAX)
    if any(not 0x21 <= ord(ch) <= 0x7E for ch in value):
        raise RuleError(
            "Must be printable ASCII without spaces: percent-encode the path, use punycode "
            "for the host."
        )
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise RuleError(f"Not a URL: {exc}.") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise RuleError("The scheme must be http or https.")
    if not value.lower().startswith(f"{parts.scheme.lower()}://"):
        raise RuleError("Expected an absolute URL like https://example.com/hooks/berth.")
    if "@" in parts.netloc:
        raise RuleError("Must not carry a user or password; put a token in the path instead.")
    if parts.fragment or "#" in value:
        raise RuleError("Must not have a fragment (#…): it is never sent.")
    if port is not None and not 0 < port < 65536:
        raise RuleError("The port must be 1 to 65535.")
    if parts.netloc.endswith(":"):
        raise RuleError("An empty port: drop the ':' or give a port.")
    host = parts.hostname or ""
    check_host_spelling(host)
    if not _is_host(host, bracketed=parts.netloc.startswith("[")):
        raise RuleError("Expected a host name like hooks.example.com or an IP address.")
    return value


def shown_url(url: str) -> str:
    """A webhook's URL as listings show it: ``https://hooks.example.com/…``, its scheme,
    host and port, with any path and query cut to ``…``: a chat service's webhook URL
    (``/services/T0/B0/XXXX``, ``?token=…``) is itself the credential. The whole URL is
    shown once, when the webhook is created."""
    parts = urlsplit(url)
    origin = f"{parts.scheme}://{parts.netloc}"
    if not parts.netloc or not url.startswith(origin):
        return url  # not a URL (one that cannot be unsealed says so in words)
    rest = url[len(origin) :]
    return origin + ("/…" if rest not in ("", "/") else rest)


def _is_host(host: str, *, bracketed: bool) -> bool:
    if bracketed:
        try:
            return isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address)
        except ValueError:
            return False
    if not host or len(host) > 253:
        return False
    try:
        ipaddress.IPv4Address(host)
        return True
    except ValueError:
        pass
    labels = (host[:-1] if host.endswith(".") else host).split(".")
    return all(
        0 < len(label) <= 63
        and label[0] != "-"
        and label[-1] != "-"
        and all(ch.isascii() and (ch.isalnum() or ch in "-_") for ch in label)
        for label in labels
    ) and not all(label.isdigit() for label in labels)


def check_events(value: object) -> tuple[WebhookEvent, ...]:
    """One or more distinct event names of ``EVENTS``, returned in that order."""
    if not isinstance(value, list):
        raise RuleError("Expected an array of event names.")
    if not value:
        raise RuleError("Name at least one event.")
    known = {event.value: event for event in EVENTS}
    wrong = [item for item in value if not isinstance(item, str) or item not in known]
    if wrong:
        shown = ", ".join(repr(item)[:60] for item in wrong[:5])
        raise RuleError(f"Unknown event(s) {shown}; the events are {', '.join(known)}.")
    if len(set(value)) != len(value):
        raise RuleError("Each event at most once.")
    return tuple(event for event in EVENTS if event.value in value)


# --- secret and signature ------------------------------------------------------------------


def generate_secret() -> str:
    """A new signing secret: ``whsec_`` + base64 of 32 random bytes (Standard Webhooks)."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def _key(secret: str) -> bytes:
    if not secret.startswith(SECRET_PREFIX):
        raise ValueError("A webhook secret starts with whsec_.")
    return base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)


def message_id(delivery_id: UUID) -> str:
    """The ``webhook-id`` of a delivery: the same on each of its attempts."""
    return f"msg_{delivery_id.hex}"


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """``v1,`` + base64(HMAC-SHA256(key, ``{msg_id}.{timestamp}.{body}``)), the key being
    the secret's bytes (base64-decoded after ``whsec_``)."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    mac = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def signed_headers(secret: str, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The headers of one attempt: content type and the three Standard Webhooks headers."""
    return {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(secret, msg_id, timestamp, body),
    }


# --- what is sent --------------------------------------------------------------------------


def _body(event: WebhookEvent | str, at: datetime, data: Mapping[str, Any]) -> bytes:
    kind = event.value if isinstance(event, WebhookEvent) else event
    return msgspec.json.encode({"type": kind, "timestamp": at, "data": dict(data)})


#: The type of the event a "send a test" sends: never subscribed to, never retried.
TEST_EVENT = "webhook.test"
TEST_MESSAGE = "A test from berth: notifications reach this endpoint."


def ping_body(webhook_id: UUID, at: datetime) -> bytes:
    """The JSON body of a test event (``TEST_EVENT``): which webhook, and words saying so."""
    return _body(TEST_EVENT, at, {"webhookId": str(webhook_id), "message": TEST_MESSAGE, "at": at})


def attempt_error(status_code: int | None, error: str | None) -> str | None:
    """What went wrong with an attempt, in words (at most ``ERROR_MAX`` characters):
    ``error`` (no answer), ``HTTP <code>`` for an answer that is not a 2xx; ``None``
    when it was delivered."""
    if status_code is not None and not 200 <= status_code < 300:
        error = f"HTTP {status_code}" + (
            ": redirects are not followed" if 300 <= status_code < 400 else ""
        )
    if error is not None and len(error) > ERROR_MAX:
        error = error[:ERROR_MAX] + "…"
    return error


def _cut(text: str | None) -> str | None:
    return text if text is None or len(text) <= ERROR_MAX else text[:ERROR_MAX] + "…"


def deployment_body(
    event: WebhookEvent,
    *,
    deployment_id: UUID,
    installation_id: UUID,
    installation_name: str,
    server_id: UUID,
    server_name: str = "",
    state: DeploymentState,
    error: str | None,
    finished_at: datetime,
) -> bytes:
    """The JSON body of a ``deployment.*`` event (``type``, ``timestamp``, ``data``)."""
    return _body(
        event,
        finished_at,
        {
            "deploymentId": str(deployment_id),
            "installationId": str(installation_id),
            "installationName": installation_name,
            "serverId": str(server_id),
            "serverName": server_name,
            "state": state.value,
            "error": _cut(error),
            "finishedAt": finished_at,
        },
    )


def server_body(
    event: WebhookEvent,
    *,
    server_id: UUID,
    server_name: str,
    status: ServerStatus,
    detail: str | None,
    at: datetime,
) -> bytes:
    """The JSON body of a ``server.*`` event."""
    return _body(
        event,
        at,
        {
            "serverId": str(server_id),
            "serverName": server_name,
            "status": status.value,
            "detail": _cut(detail),
            "at": at,
        },
    )


def installation_body(
    event: WebhookEvent,
    *,
    installation_id: UUID,
    installation_name: str,
    server_id: UUID,
    server_name: str,
    state: RunState,
    exit_code: int | None,
    restart_count: int,
    message: str,
    at: datetime,
) -> bytes:
    """The JSON body of an ``installation.*`` event: its container's ``state`` (running,
    restarting, exited, missing), exit code and restart count, and the change in words."""
    return _body(
        event,
        at,
        {
            "installationId": str(installation_id),
            "installationName": installation_name,
            "serverId": str(server_id),
            "serverName": server_name,
            "state": state.value,
            "exitCode": exit_code,
            "restartCount": restart_count,
            "message": message,
            "at": at,
        },
    )


# --- chat formats --------------------------------------------------------------------------

#: Discord's limit on a message's ``content``.
DISCORD_MAX = 2000
_SLACK_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})
_DISCORD_MARKUP = "\\*_~`|[]()<>@"


def check_format(value: object) -> WebhookFormat:
    """``standard``, ``slack`` or ``discord``."""
    if not isinstance(value, str) or value not in {f.value for f in WebhookFormat}:
        raise RuleError("Must be one of standard, slack, discord.")
    return WebhookFormat(value)


def _plain(fmt: WebhookFormat, text: str) -> str:
    """``text`` shown as itself: Slack's three control characters escaped, Discord's
    markdown (and mentions) backslashed."""
    if fmt is WebhookFormat.SLACK:
        return text.translate(_SLACK_ESCAPES)
    return "".join("\\" + ch if ch in _DISCORD_MARKUP else ch for ch in text)


def _link(fmt: WebhookFormat, url: str, label: str) -> str:
    if fmt is WebhookFormat.SLACK:
        return f"<{url.translate(_SLACK_ESCAPES)}|{_plain(fmt, label)}>"
    return f"[{_plain(fmt, label)}](<{url}>)"


_DEPLOYMENT_WORDS = {
    WebhookEvent.DEPLOYMENT_SUCCEEDED: "✅ {app} on {server} deployed: it answers.",
    WebhookEvent.DEPLOYMENT_FAILED: "❌ Deployment of {app} on {server} {state}",
    WebhookEvent.DEPLOYMENT_CANCELED: "⏹️ Deployment of {app} on {server} canceled.",
}


def _app(fmt: WebhookFormat, data: dict[str, Any]) -> tuple[str, str]:
    """An app event's app as a chat shows it, and the path of its page."""
    name = _plain(fmt, data.get("installationName") or data.get("installationId", "?"))
    return name, f"/servers/{data['serverId']}/installations/{data['installationId']}/"


def chat_text(fmt: WebhookFormat, body: bytes, link_base: str | None) -> str:
    """The event of a standard ``body`` in words for a chat: what happened, to which app
    on which server, and a link to the app's page (or the server's) when berth knows its
    own address (``link_base``)."""
    event: dict[str, Any] = msgspec.json.decode(body)
    base = link_base.rstrip("/") if link_base else None
    if event["type"] == TEST_EVENT:
        text = "🔔 " + _plain(fmt, TEST_MESSAGE)
        if base is not None:
            text += " " + _link(fmt, base + "/settings#notifications", "Notification settings")
        return text
    kind = WebhookEvent(event["type"])
    data: dict[str, Any] = event["data"]
    server = _plain(fmt, data.get("serverName") or data.get("serverId", "?"))
    if kind in _DEPLOYMENT_WORDS:
        app, page = _app(fmt, data)
        state = "timed out." if data.get("state") == "timed_out" else "failed."
        text = _DEPLOYMENT_WORDS[kind].format(app=app, server=server, state=state)
        detail = data.get("error") if kind is WebhookEvent.DEPLOYMENT_FAILED else None
        label = "Open the app"
    elif kind in (WebhookEvent.INSTALLATION_DOWN, WebhookEvent.INSTALLATION_UP):
        app, page = _app(fmt, data)
        down = kind is WebhookEvent.INSTALLATION_DOWN
        text = f"{'🔴' if down else '🟢'} {app} on {server} is {'down' if down else 'up'}."
        detail = data.get("message")
        label = "Open the app"
    else:
        online = kind is WebhookEvent.SERVER_ONLINE
        text = f"{'🟢' if online else '🔴'} Server {server} is {'online' if online else 'offline'}."
        detail = data.get("detail")
        page = f"/servers/{data['serverId']}/"
        label = "Open the server"
    if detail:
        text += " " + _plain(fmt, detail)
    if base is not None:
        text += " " + _link(fmt, base + page, label)
    return text


def chat_body(fmt: WebhookFormat, body: bytes, link_base: str | None) -> bytes:
    """What a webhook of format ``fmt`` is sent for the standard ``body``: the body
    itself, Slack's ``{"text"}`` or Discord's ``{"content"}`` (at most 2000 characters,
    mentions off: an app's name never pings anyone)."""
    if fmt is WebhookFormat.STANDARD:
        return body
    text = chat_text(fmt, body, link_base)
    if fmt is WebhookFormat.SLACK:
        return msgspec.json.encode({"text": text})
    if len(text) > DISCORD_MAX:
        text = text[: DISCORD_MAX - 1] + "…"
    return msgspec.json.encode({"content": text, "allowed_mentions": {"parse": []}})


# --- retries -------------------------------------------------------------------------------


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """How deliveries are attempted: at most ``max_attempts`` POSTs of ``timeout`` seconds
    each; after the n-th failure the next waits ``first_delay * factor**(n-1)`` seconds,
    at most ``max_delay``, with jitter (see ``retry_delay``). The defaults give 8
    attempts over about 2.5 to 5 hours."""

    max_attempts: int = 8
    first_delay: float = 10.0
    factor: float = 4.0
    max_delay: float = 7200.0
    timeout: float = 10.0

    def __post_init__(self) -> None:
        if not 1 <= self.max_attempts <= 50:
            raise ValueError("max_attempts must be 1 to 50.")
        if not 0 < self.first_delay <= self.max_delay:
            raise ValueError("first_delay must be positive and at most max_delay.")
        if not 1 <= self.factor <= 100:
            raise ValueError("factor must be 1 to 100.")
        if not 0 < self.timeout <= 300:
            raise ValueError("timeout must be over 0 and at most 300 seconds.")


def retry_delay(policy: RetryPolicy, failed: int, jitter: float) -> float | None:
    """Seconds from the ``failed``-th failed attempt (1-based) to the next one; ``None``
    when that was the last attempt allowed.

    "Equal jitter": the delay is drawn from ``[d/2, d]`` by ``jitter`` in ``[0, 1)``, where
    ``d`` grows by ``factor`` per failure up to ``max_delay``: retries of many deliveries
    that failed together spread out, and never come sooner than half the schedule.
    """
    if failed < 1:
        raise ValueError("failed counts attempts from 1.")
    if failed >= policy.max_attempts:
        return None
    delay = policy.first_delay
    for _ in range(failed - 1):
        delay = min(policy.max_delay, delay * policy.factor)
    jitter = min(max(jitter, 0.0), 1.0)
    return delay / 2 + delay / 2 * jitter


def user_info_of(url: str) -> str | None:
    """What stands before the host's ``@`` in ``url`` (a user, a password, a token), or
    ``None``. The authority ends at the first ``/``, ``?`` or ``#``: an ``@`` after it
    is a path's or a query's (``https://host?@x`` has none)."""
    rest = url.partition("://")[2] or url
    end = next((i for i, ch in enumerate(rest) if ch in "/?#"), len(rest))
    user_info, at, _ = rest[:end].rpartition("@")
    return user_info if at else None


def without_user_info(value: object, mark: str = "***@") -> object:
    """A refused URL as its error may echo it: what stands before an ``@`` ahead of its
    first ``/`` is ``mark`` (``***@``; ``""`` drops it). Cautious: up to the ``/``,
    not the authority's end (``user_info_of``), so a password holding ``?`` or ``#``
    is hidden too."""
    if not isinstance(value, str):
        return value
    scheme, sep, rest = value.partition("://")
    if not sep:
        scheme, rest = "", value
    netloc, slash, path = rest.partition("/")
    if "@" in netloc:
        netloc = mark + netloc.rpartition("@")[2]
    return f"{scheme}{sep}{netloc}{slash}{path}"
