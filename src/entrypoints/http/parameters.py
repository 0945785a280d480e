"""The API's path ids, query parameters and headers, declared once.

Each is a type a handler names in its signature (``wait: Wait = None``): its wire name,
its prose and constraints for the document, and its rule (``inputs.read_inputs`` reads
it strictly before Litestar converts it). A parameter that may be left out is never
``null`` in the document: absent is absent.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import UUID

from berth.core.commands import AUDIT_PAGE_DEFAULT, AUDIT_PAGE_MAX, PAGE_MAX, TAIL_MAX, WAIT_MAX
from berth.core.models import InstallationStatus, ServerStatus
from berth.core.types import check_idempotency_key
from litestar.params import HeaderParameter, PathParameter, QueryParameter

from .inputs import Rule

__all__ = [
    "DELIVERIES_DEFAULT",
    "EVENT_ID_MAX",
    "PAGE_DEFAULT",
    "AuditBefore",
    "AuditLimit",
    "Before",
    "Cursor",
    "DeliveryLimit",
    "DeploymentId",
    "Follow",
    "GitCredentialId",
    "HookId",
    "IdempotencyKey",
    "Include",
    "InstallationId",
    "InstallationStatusQuery",
    "InvitationToken",
    "LastEventId",
    "LastEventIdQuery",
    "ListLimit",
    "NameQuery",
    "PageLimit",
    "RegistryId",
    "ServerId",
    "ServerQuery",
    "ServerStatusQuery",
    "Tail",
    "TeamId",
    "TeamQuery",
    "TokenId",
    "UrlQuery",
    "UserId",
    "Wait",
    "WebhookId",
]

# ?wait (0-WAIT_MAX), ?tail (1-TAIL_MAX) and ?limit (1-PAGE_MAX): the core's commands'
# limits, read here to document the query parameters.
PAGE_DEFAULT = 20
DELIVERIES_DEFAULT = 50  # ?limit of a webhook's deliveries (1-PAGE_MAX)
EVENT_ID_MAX = 2**63 - 1  # the event table's BIGINT key

_DIGITS = "in plain digits without a leading zero, given once."


def _whole(low: int, high: int) -> dict[str, Any]:
    """A whole number's bounds, checked and documented exactly (and never ``null``)."""
    return {
        "ge": low,
        "le": high,
        "schema_extra": {"type": "integer", "oneOf": None, "minimum": low, "maximum": high},
    }


def _path_id(name: str, description: str) -> PathParameter:
    return PathParameter(name=name, description=description)


def _uuid_query(name: str, description: str) -> QueryParameter:
    """An optional id in the query: a UUID when given (never ``null`` in the document)."""
    schema = {"type": "string", "format": "uuid", "oneOf": None}
    return QueryParameter(name=name, description=description, schema_extra=schema)


def _yours(what: str) -> str:
    return f"One of your {what} (UUID); another user's is a 404, like a missing one."


ServerId = Annotated[UUID, _path_id("serverId", _yours("servers"))]
InstallationId = Annotated[UUID, _path_id("installationId", _yours("installations"))]
DeploymentId = Annotated[UUID, _path_id("deploymentId", _yours("deployments"))]
RegistryId = Annotated[UUID, _path_id("registryId", "An id (UUID).")]
WebhookId = Annotated[UUID, _path_id("webhookId", "An id (UUID).")]
GitCredentialId = Annotated[UUID, _path_id("gitCredentialId", "An id (UUID).")]
HookId = Annotated[UUID, _path_id("hookId", "The hook's id: the last part of its URL (UUID).")]
TeamId = Annotated[UUID, _path_id("teamId", _yours("teams"))]
UserId = Annotated[UUID, _path_id("userId", "A member's user id (UUID).")]
TokenId = Annotated[UUID, _path_id("tokenId", "One of your named tokens (UUID).")]
InvitationToken = Annotated[
    str,
    PathParameter(
        name="invitationToken",
        description="The invitation's one-time token (`berth_join_…`).",
        max_length=200,
    ),
]
TeamQuery = Annotated[
    UUID | None,
    _uuid_query("teamId", "One of your teams (UUID), given once; default: the token's team."),
]
AuditLimit = Annotated[
    int,
    QueryParameter(
        name="limit",
        description=f"Entries: 1-{AUDIT_PAGE_MAX} (default {AUDIT_PAGE_DEFAULT}), newest first; "
        + _DIGITS,
        **_whole(1, AUDIT_PAGE_MAX),
    ),
]
AuditBefore = Annotated[
    UUID | None,
    _uuid_query("before", "The previous page's `nextBefore`: only entries older than that one."),
]

Wait = Annotated[
    int | None,
    QueryParameter(
        name="wait",
        description=f"Seconds to wait for a final state: 0-{WAIT_MAX} (0: answer at once, "
        f"as without it), {_DIGITS}",
        **_whole(0, WAIT_MAX),
    ),
    Rule("whole seconds"),
]
IdempotencyKey = Annotated[
    str | None,
    HeaderParameter(
        name="Idempotency-Key",
        description="Retry-safe key, 1-255 printable ASCII characters without spaces (a UUID "
        "does): a retried request with the same key and body returns the first request's "
        "deployment instead of deploying twice; the same key with another body is a 409.",
        min_length=1,
        max_length=255,
        pattern="^[!-~]+$",
        schema_extra={"type": "string", "oneOf": None},
    ),
    Rule(check=check_idempotency_key),
]
ServerQuery = Annotated[
    UUID, QueryParameter(name="serverId", description="A server id (UUID), given once.")
]
Include = Annotated[
    Literal["removed"] | None,
    QueryParameter(
        description="`removed` lists removed installations too (their history is kept).",
        schema_extra={"type": "string", "enum": ["removed"]},
    ),
    Rule(message="The only value is removed."),
]
Tail = Annotated[
    int,
    QueryParameter(description=f"Lines: 1-{TAIL_MAX}, {_DIGITS}", **_whole(1, TAIL_MAX)),
    Rule("a number of lines"),
]
Follow = Annotated[
    Literal[0, 1],
    QueryParameter(
        description="`1`: stream the output live (`text/plain`) until the container stops."
    ),
]
PageLimit = Annotated[
    int,
    QueryParameter(
        name="limit",
        description=f"Deployments per page: 1-{PAGE_MAX}, {_DIGITS}",
        **_whole(1, PAGE_MAX),
    ),
]
Before = Annotated[
    UUID | None,
    _uuid_query(
        "before", "The previous page's `nextBefore`: only deployments older than that one."
    ),
]
DeliveryLimit = Annotated[
    int,
    QueryParameter(
        name="limit",
        description=f"Deliveries: 1-{PAGE_MAX} (default {DELIVERIES_DEFAULT}), newest first; "
        + _DIGITS,
        **_whole(1, PAGE_MAX),
    ),
]
LastEventId = Annotated[
    int | None,
    HeaderParameter(
        name="Last-Event-ID",
        description="Resume after this event id (an `EventSource` sends it when it reconnects).",
        **_whole(1, EVENT_ID_MAX),
    ),
    Rule("an event id"),
]
LastEventIdQuery = Annotated[
    int | None,
    QueryParameter(
        name="lastEventId",
        description="Resume after this event id, as `Last-Event-ID` (the header wins when both "
        "are given).",
        **_whole(1, EVENT_ID_MAX),
    ),
    Rule("an event id"),
]

# Paging and filters of the lists of servers, installations and webhooks (core.paging).
ListLimit = Annotated[
    int | None,
    QueryParameter(
        name="limit",
        description=f"Entries per page: 1-{PAGE_MAX}, {_DIGITS} Without it: every entry.",
        **_whole(1, PAGE_MAX),
    ),
    Rule("a number of entries"),
]
Cursor = Annotated[
    UUID | None,
    _uuid_query(
        "cursor",
        "The previous page's `nextCursor`: the entries after that one. One that names no "
        "entry of the list (any more) is a 422 at `query.cursor`.",
    ),
]


def _holds(name: str, what: str) -> QueryParameter:
    """A text filter: entries whose ``what`` holds the text (any case)."""
    return QueryParameter(
        name=name,
        description=f"Only those whose {what} holds this text (any case), 1-100 characters.",
        min_length=1,
        max_length=100,
        schema_extra={"type": "string", "oneOf": None},
    )


NameQuery = Annotated[str | None, _holds("name", "name")]
UrlQuery = Annotated[str | None, _holds("url", "URL (as shown)")]
_SERVER_STATUSES = [status.value for status in ServerStatus]
ServerStatusQuery = Annotated[
    Literal["pending", "online", "offline", "host_key_mismatch", "removed", "checking"] | None,
    QueryParameter(
        name="status",
        description="Only the servers in this status (as the list shows it).",
        schema_extra={"type": "string", "enum": _SERVER_STATUSES, "oneOf": None},
    ),
    Rule(message="One of: " + ", ".join(_SERVER_STATUSES) + "."),
]
_APP_STATUSES = [status.value for status in InstallationStatus]
InstallationStatusQuery = Annotated[
    Literal[
        "pending",
        "deploying",
        "running",
        "restarting",
        "exited",
        "missing",
        "stopping",
        "stopped",
        "failed",
        "removed",
    ]
    | None,
    QueryParameter(
        name="status",
        description="Only the installations in this status.",
        schema_extra={"type": "string", "enum": _APP_STATUSES, "oneOf": None},
    ),
    Rule(message="One of: " + ", ".join(_APP_STATUSES) + "."),
]
