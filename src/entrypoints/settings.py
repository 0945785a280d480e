"""Settings: from CLI flags, else ``BERTH_*`` environment variables, else defaults."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from berth.core.types import RuleError, check_email
from berth.core.webhooks import RetryPolicy

__all__ = ["SERVED_URL_FILE", "Settings", "known_base_url", "record_served_url", "served_url"]


N = TypeVar("N", int, float)


def _number(env: Mapping[str, str], name: str, default: N, kind: type[N], what: str) -> N:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return kind(raw)
    except ValueError:
        raise SystemExit(f"{name} must be {what}, got {raw!r}") from None


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    return _number(env, name, default, int, "an integer")


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    return _number(env, name, default, float, "a number")


def _positive(env: Mapping[str, str], name: str, default: int) -> int:
    value = _int(env, name, default)
    if value < 1:
        raise SystemExit(f"{name} must be a positive integer, got {value}")
    return value


def _port(env: Mapping[str, str], name: str, default: int) -> int:
    port = _int(env, name, default)
    if not 0 < port < 65536:
        raise SystemExit(f"{name} must be a TCP port (1-65535), got {port}")
    return port


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...], default: str) -> str:
    raw = env.get(name) or default
    if raw not in choices:
        raise SystemExit(f"{name} must be one of {', '.join(choices)}; got {raw!r}")
    return raw


def _flag(env: Mapping[str, str], name: str) -> bool | None:
    """``1``/``true``/``yes`` or ``0``/``false``/``no``; ``None`` when unset or empty."""
    raw = (env.get(name) or "").strip().lower()
    if not raw:
        return None
    if raw in ("1", "true", "yes"):
        return True
    if raw in ("0", "false", "no"):
        return False
    raise SystemExit(f"{name} must be 1 or 0, got {raw!r}")


def _absolute(env: Mapping[str, str], name: str, default: str) -> str:
    raw = env.get(name) or default
    if not raw.startswith("/"):
        raise SystemExit(f"{name} must be an absolute path, got {raw!r}")
    return raw


def _email(env: Mapping[str, str], name: str) -> str | None:
    raw = env.get(name)
    if not raw:
        return None
    try:
        return check_email(raw)
    except RuleError as exc:
        raise SystemExit(f"{name}: {exc} Got {raw!r}.") from None


def _text(env: Mapping[str, str], name: str, default: str | None) -> str | None:
    return env.get(name) or default


#: The settings read the same way, ``read(env, variable, default)``: field, its variable
#: and how its text is read (unset or empty: the default).
_READ: dict[str, tuple[str, Callable[[Mapping[str, str], str, Any], Any]]] = {
    "base_url": ("BERTH_BASE_URL", _text),
    "database_url": ("BERTH_DATABASE_URL", _text),
    "secret_key": ("BERTH_SECRET_KEY", _text),
    "rate_limit_per_minute": ("BERTH_RATE_LIMIT", _int),
    "deploy_rate_limit_per_minute": ("BERTH_DEPLOY_RATE_LIMIT", _int),
    "auth_failures_per_minute": ("BERTH_AUTH_FAILURE_LIMIT", _int),
    "streams_per_user": ("BERTH_STREAMS_PER_USER", _positive),
    "streams_per_process": ("BERTH_STREAMS_PER_PROCESS", _positive),
    "servers_per_user": ("BERTH_SERVERS_PER_USER", _positive),
    "audit_days": ("BERTH_AUDIT_DAYS", _positive),
    "docker_max_bytes": ("BERTH_DOCKER_MAX_BYTES", _positive),
    "source_max_bytes": ("BERTH_SOURCE_MAX_BYTES", _positive),
    "docker_socket": ("BERTH_DOCKER_SOCKET", _text),
    "queue_timeout": ("BERTH_QUEUE_TIMEOUT", _float),
    "health_timeout": ("BERTH_HEALTH_TIMEOUT", _float),
    "pull_timeout": ("BERTH_PULL_TIMEOUT", _float),
    "monitor_seconds": ("BERTH_MONITOR_SECONDS", _float),
    "host_key_check_seconds": ("BERTH_HOST_KEY_CHECK_SECONDS", _float),
    "lease_seconds": ("BERTH_LEASE_SECONDS", _float),
    "caddy_admin_socket": ("BERTH_CADDY_ADMIN_SOCKET", _absolute),
    "proxy_https_port": ("BERTH_PROXY_HTTPS_PORT", _port),
    "proxy_http_port": ("BERTH_PROXY_HTTP_PORT", _port),
    "acme_email": ("BERTH_ACME_EMAIL", _text),
    "proxy_drain_seconds": ("BERTH_PROXY_DRAIN_SECONDS", _float),
    "login_failures_per_email": ("BERTH_LOGIN_FAILURES_PER_EMAIL", _int),
    "login_failures_per_address": ("BERTH_LOGIN_FAILURES_PER_ADDRESS", _int),
    "trusted_proxies": ("BERTH_TRUSTED_PROXIES", _text),
    "metrics_token": ("BERTH_METRICS_TOKEN", _text),
    "webhook_max_attempts": ("BERTH_WEBHOOK_MAX_ATTEMPTS", _int),
    "webhook_retry_seconds": ("BERTH_WEBHOOK_RETRY_SECONDS", _float),
    "webhook_retry_factor": ("BERTH_WEBHOOK_RETRY_FACTOR", _float),
    "webhook_retry_max_seconds": ("BERTH_WEBHOOK_RETRY_MAX_SECONDS", _float),
    "webhook_timeout": ("BERTH_WEBHOOK_TIMEOUT", _float),
    "webhook_poll_seconds": ("BERTH_WEBHOOK_POLL_SECONDS", _float),
    "log_format": ("BERTH_LOG_FORMAT", _text),
    "log_level": ("BERTH_LOG_LEVEL", _text),
}


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything configurable. No secret has a default: keys are generated on first start."""

    data_dir: Path = Path("./data")
    listen_host: str = "127.0.0.1"
    listen_port: int = 8080
    base_url: str | None = None  # else derived from each request's Host
    database_url: str | None = None  # else SQLite in data_dir
    secret_key: str | None = field(default=None, repr=False)  # else <data_dir>/secret.key
    rate_limit_per_minute: int = 600
    deploy_rate_limit_per_minute: int = 30
    auth_failures_per_minute: int = 300
    max_body_bytes: int = 1024 * 1024
    # Bytes of one uploaded build context (POST /api/agent/sources); past it a 413.
    source_max_bytes: int = 200 * 1024 * 1024
    # Streams open at once (deployment events, log follows, the dashboard's live
    # regions): per user, and in all, in this process. One more is a 429 naming the limit.
    streams_per_user: int = 16
    streams_per_process: int = 256
    # Servers one team may add (one more is a 409 ``server-limit``); the name predates teams.
    servers_per_user: int = 1000
    # Days each team's audit log keeps an entry (older ones are pruned by the background).
    audit_days: int = 365
    # Bytes berth reads from one answer of a server's Docker Engine (a container list,
    # ``info``, ``df``, an inspect, stats, a log read, a pull's message); past it the call
    # fails saying so (502 response-too-large).
    docker_max_bytes: int = 16 * 1024 * 1024
    log_format: str = "auto"  # auto | json | console
    log_level: str = "info"
    local: bool = False  # register this machine as a server of the first user
    # The account that owns this machine's server under `--local` (BERTH_LOCAL_OWNER, an
    # email); None: the first account. Whoever owns it is trusted like the operator.
    local_owner: str | None = None
    worker: bool = True  # run the deployment worker in this process
    docker_socket: str = "/var/run/docker.sock"
    queue_timeout: float = 600.0  # seconds a deployment may wait for its server
    health_timeout: float = 60.0  # seconds a new container has to answer on its port
    pull_timeout: float = 120.0  # seconds a pull of an absent image may take
    monitor_seconds: float = 5.0  # how often every server is checked
    # Hold each online server's Docker event stream open (apps' exits seen at once); off:
    # the monitor's pass alone sees them (BERTH_CONTAINER_EVENTS=0).
    container_events: bool = True
    # How often a live SSH connection's server is asked again for its host key (a key
    # exchange alone): a restarted sshd with a new key is noticed within this, not only
    # when the old connection drops.
    host_key_check_seconds: float = 300.0
    # A worker's lease on a running deployment: renewed every third of it; another worker
    # takes the deployment over once it has run out (the worker died or lost the store).
    lease_seconds: float = 15.0
    # The reverse proxy (Caddy) on every server: where its admin socket is on the server,
    # the ports it serves, and who issues its certificates.
    caddy_admin_socket: str = "/run/berth/caddy-admin.sock"
    proxy_https_port: int = 443
    proxy_http_port: int = 80
    # auto: per domain, Caddy's internal CA for names no public CA certifies (localhost,
    # *.local, *.internal, *.home.arpa, IPs) and ACME (Let's Encrypt) for the rest;
    # acme | internal: that issuer for every domain.
    tls_issuer: str = "auto"
    acme_email: str | None = None
    proxy_drain_seconds: float = 1.0  # a replaced domain app's container keeps running this long
    open_signup: bool = False  # anyone may create an account (else: the first, or invited)
    # Failed dashboard sign-ins per 5 minutes: for one email from one client address,
    # and from one client address over every email.
    login_failures_per_email: int = 5
    login_failures_per_address: int = 20
    # Addresses whose X-Forwarded-For/-Proto berth believes (uvicorn's forwarded_allow_ips:
    # comma-separated IPs or networks, or "*"). None: no one's; the client address counted
    # by every throttle is the TCP peer's.
    trusted_proxies: str | None = None
    # GET /metrics: with a token, a request must bear it (Authorization: Bearer); without
    # one, only requests from this machine (the TCP peer, or the forwarded address when
    # the proxy is trusted) are answered.
    metrics_token: str | None = field(default=None, repr=False)
    # Where `berth worker` serves GET /metrics (host, port); None: it serves nothing.
    metrics_listen: tuple[str, int] | None = None
    # Webhook deliveries (docs/decisions/2026-11-25-webhook-outbox-and-retries.md): at most
    # this many attempts, each within webhook_timeout seconds; after the n-th failure the next waits
    # webhook_retry_seconds * webhook_retry_factor**(n-1), at most webhook_retry_max_seconds,
    # drawn from its upper half (jitter). The defaults: 8 attempts over 2.5-5 hours.
    webhook_max_attempts: int = 8
    webhook_retry_seconds: float = 10.0
    webhook_retry_factor: float = 4.0
    webhook_retry_max_seconds: float = 7200.0
    webhook_timeout: float = 10.0
    webhook_poll_seconds: float = 1.0  # how often a worker looks for due deliveries
    # What berth connects to on a user's word (docs/security.md, "Outbound requests").
    # None (unset) or False: webhook URLs must resolve to public addresses only. True (1):
    # loopback, private (RFC 1918), shared (100.64/10), unique-local and IPv4-mapped ones
    # are allowed too, for endpoints inside the operator's network. False (set to 0) also
    # refuses servers whose address is loopback or link-local (unset: any address).
    allow_private_targets: bool | None = None

    def webhook_policy(self) -> RetryPolicy:
        """The retry policy of webhook deliveries; bad settings stop the start."""
        try:
            return RetryPolicy(
                max_attempts=self.webhook_max_attempts,
                first_delay=self.webhook_retry_seconds,
                factor=self.webhook_retry_factor,
                max_delay=self.webhook_retry_max_seconds,
                timeout=self.webhook_timeout,
            )
        except ValueError as exc:
            raise SystemExit(f"BERTH_WEBHOOK_* settings: {exc}") from None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read ``BERTH_*`` variables; unset ones keep their defaults."""
        env = os.environ if env is None else env
        base = cls()
        host, port = base.listen_host, base.listen_port
        if env.get("BERTH_LISTEN"):
            host, port = parse_listen(env["BERTH_LISTEN"])
        return replace(
            base,
            data_dir=Path(env.get("BERTH_DATA") or base.data_dir),
            listen_host=host,
            listen_port=port,
            local=env.get("BERTH_LOCAL", "") in ("1", "true", "yes"),
            local_owner=_email(env, "BERTH_LOCAL_OWNER"),
            container_events=env.get("BERTH_CONTAINER_EVENTS", "1") not in ("0", "false", "no"),
            tls_issuer=_choice(
                env, "BERTH_TLS_ISSUER", ("auto", "acme", "internal"), base.tls_issuer
            ),
            open_signup=env.get("BERTH_OPEN_SIGNUP", "") in ("1", "true", "yes"),
            metrics_listen=(
                parse_listen(env["BERTH_METRICS_LISTEN"])
                if env.get("BERTH_METRICS_LISTEN")
                else None
            ),
            allow_private_targets=_flag(env, "BERTH_ALLOW_PRIVATE_TARGETS"),
            **{
                name: read(env, variable, getattr(base, name))
                for name, (variable, read) in _READ.items()
            },
        )


def parse_listen(value: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:8080`` for IPv6) into its parts."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise SystemExit(f"--listen wants HOST:PORT, got {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


#: Where ``serve`` records the URL it serves at, in its data dir, for the commands and
#: the library that open the same data dir (``known_base_url``).
SERVED_URL_FILE = "served-url"


def served_url(settings: Settings) -> str:
    """The URL ``serve`` answers at: ``base_url`` if set, else its listen address (a
    wildcard one as this machine's loopback, where a browser here opens it)."""
    if settings.base_url:
        return settings.base_url.rstrip("/")
    host = settings.listen_host
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)  # noqa: S104
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{settings.listen_port}"


def record_served_url(settings: Settings) -> None:
    """Write ``served_url`` into the data dir (best effort: a read-only dir keeps none)."""
    with contextlib.suppress(OSError):
        path = settings.data_dir / SERVED_URL_FILE
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # owner only
        os.fchmod(fd, 0o600)  # also one an older berth wrote readable by all
        with os.fdopen(fd, "w") as out:
            out.write(served_url(settings) + "\n")


def known_base_url(settings: Settings) -> str:
    """berth's URL as the admin commands and the library give it: ``base_url`` if set,
    else the one the last ``serve`` of this data dir recorded, else ``served_url``."""
    if settings.base_url:
        return settings.base_url.rstrip("/")
    try:
        recorded = (settings.data_dir / SERVED_URL_FILE).read_text().strip()
    except OSError:
        recorded = ""
    if recorded.startswith(("http://", "https://")) and recorded.isprintable():
        return recorded
    return served_url(settings)
