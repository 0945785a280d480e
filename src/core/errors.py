"""Domain errors. Adapters translate library errors into these; one map in the
HTTP entrypoint turns them into problem+json."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "ENROLLMENT_REFUSED",
    "NO_SETUP_CODE",
    "SIGNATURE_REFUSED",
    "BadSignature",
    "Conflict",
    "CoreError",
    "FieldError",
    "Forbidden",
    "HostKeyMismatch",
    "InsufficientScope",
    "InvalidInput",
    "NotFound",
    "RateLimited",
    "RuntimeFailure",
    "ServerUnreachable",
    "StoreUnavailable",
    "TooLarge",
    "TooManyAttempts",
    "TooManyStreams",
    "Unauthorized",
    "WriteConflict",
]

#: Why an enrollment token is refused; never which of the reasons it was.
ENROLLMENT_REFUSED = "The enrollment token is unknown, already used, or expired."
#: Why the first account cannot sign up without the one-time setup code.
NO_SETUP_CODE = (
    "This berth has no account yet: the first one needs the one-time setup code that "
    "`berth serve` printed when it started (open the link it printed, or paste the code). "
    "A restart prints a new one; `berth user invite` makes a link too."
)
#: Why a request signed by a server's host key is refused; never which of the reasons.
SIGNATURE_REFUSED = (
    "The server signature is missing, malformed, outside five minutes of berth's clock, "
    "or not made with a host key berth pinned for that server."
)


@dataclass(frozen=True, slots=True)
class FieldError:
    """One invalid field: where it is (``body.port``), why, and the value seen."""

    location: str
    message: str
    value: object = None


class CoreError(Exception):
    """Base of every error the core raises on purpose.

    ``kind`` names what went wrong in a word a client can branch on (the API's problem
    ``type`` is made of it); ``field`` is the core path of the input that caused it, when
    one did (``port``: the host port is taken).
    """

    kind: str = "error"

    def __init__(self, detail: str, *, kind: str | None = None, field: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        if kind is not None:
            self.kind = kind
        self.field = field


class NotFound(CoreError):
    """The thing does not exist, or belongs to someone else (never tell which)."""

    kind = "not-found"


class Conflict(CoreError):
    """The request clashes with the current state (domain, host port, running deployment)."""

    kind = "conflict"


class WriteConflict(Conflict):
    """The store refused a write: a unique key (container name, domain, host port,
    Idempotency-Key) is taken, or a row is no longer in the state the write expects.

    A use case that checked these itself before writing sees this only when another
    transaction committed in between; it may run again on fresh reads, which then
    find the real conflict (or none).
    """


class Unauthorized(CoreError):
    """Authentication failed. The detail never says why."""

    kind = "unauthorized"

    def __init__(self, detail: str = "Authentication required.") -> None:
        super().__init__(detail)


class BadSignature(Unauthorized):
    """A deploy hook's delivery without the right signature of its body: the detail
    says which headers may carry one, never what was expected."""

    def __init__(self) -> None:
        super().__init__(
            "The delivery is not signed with this hook's secret: expected X-Hub-Signature-256 "
            "(sha256=<hex HMAC-SHA256 of the body>) or X-Gitea-Signature (<hex>)."
        )


class Forbidden(CoreError):
    """The caller is known (or needs not be) but may not do this (e.g. sign-up is closed)."""

    kind = "forbidden"


class InsufficientScope(Forbidden):
    """The actor is known but its effective rights (its role in the team and its
    token's scopes and servers) lack the one a command needs; ``detail`` names it.
    Nothing was done."""

    kind = "insufficient-scope"

    def __init__(self, detail: str, *, needed: str) -> None:
        super().__init__(detail)
        self.needed = needed


class RateLimited(CoreError):
    """A rate limit was reached (requests, deploys); retry after ``retry_after`` seconds."""

    kind = "rate-limited"

    def __init__(self, retry_after: int, detail: str = "Rate limit reached.") -> None:
        super().__init__(detail)
        self.retry_after = retry_after


class TooManyAttempts(RateLimited):
    """Too many failed attempts (sign-in); retry after ``retry_after`` seconds."""

    def __init__(self, retry_after: int, detail: str = "Too many failed attempts.") -> None:
        super().__init__(retry_after, detail)


class TooManyStreams(RateLimited):
    """As many streams are open as allowed (the user's or the process's, ``detail``
    says which); retry after ``retry_after`` seconds, or close one."""

    kind = "too-many-streams"


class ServerUnreachable(CoreError):
    """The server could not be reached over its transport."""

    kind = "server-unreachable"


class StoreUnavailable(CoreError):
    """berth's own database cannot be reached, or cannot take writes, right now
    (connection refused or lost, disk full, locked past the busy timeout, no free
    connection). Nothing the caller sent is wrong: the same request may succeed after
    ``retry_after`` seconds. ``detail`` names the cause, never the request."""

    kind = "store-unavailable"

    def __init__(self, detail: str, *, retry_after: int = 5) -> None:
        super().__init__(detail)
        self.retry_after = retry_after


class HostKeyMismatch(ServerUnreachable):
    """The server presented a host key other than the pinned one: never connected to.

    ``offered_key`` is the key it presented (an OpenSSH public key line), when the
    transport saw one.
    """

    kind = "host-key-mismatch"

    def __init__(self, detail: str, *, offered_key: str | None = None) -> None:
        super().__init__(detail)
        self.offered_key = offered_key


class RuntimeFailure(CoreError):
    """The container runtime refused an operation; ``detail`` quotes its message."""

    kind = "runtime-failure"


class TooLarge(CoreError):
    """What was sent is larger than berth takes (an uploaded source past its cap)."""

    kind = "body-too-large"


class InvalidInput(CoreError):
    """One or more fields break the rules; ``errors`` lists every one of them."""

    kind = "invalid-input"

    def __init__(self, errors: Sequence[FieldError], detail: str | None = None) -> None:
        super().__init__(detail or f"{len(errors)} invalid field(s).")
        self.errors: tuple[FieldError, ...] = tuple(errors)

    def __str__(self) -> str:
        """Every broken rule, by field: ``port: Expected …; env.A-B: Must match …``."""
        named = "; ".join(f"{e.location or 'input'}: {e.message}" for e in self.errors)
        return f"{self.detail} {named}" if named else self.detail
