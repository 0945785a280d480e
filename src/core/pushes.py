"""Push events from a Git forge, as a deploy hook receives them: their signature and the
few fields of their body berth reads.

GitHub signs a delivery's raw body with the hook's secret in ``X-Hub-Signature-256``
(``sha256=`` and the hex HMAC-SHA256); Gitea and Forgejo in ``X-Gitea-Signature`` (and
Forgejo in ``X-Forgejo-Signature``: the bare hex HMAC-SHA256). Every one is HMAC-SHA256 of
the same body with the same secret, so any that is present and right proves the sender
knows the secret; each is compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping

import msgspec

from .errors import FieldError, InvalidInput

__all__ = [
    "HOOK_SECRET_PREFIX",
    "PUSH_BODY_MAX",
    "SIGNATURE_HEADERS",
    "Push",
    "branch_of",
    "event_of",
    "parse_push",
    "sign",
    "signed",
]

#: The most a push event's body may weigh (bytes): GitHub's own cap is 25 MB, but a push
#: of a few commits is some kilobytes; past this a POST is a 413 before it is read whole.
PUSH_BODY_MAX = 5 * 1024 * 1024
#: What a hook's secret starts with (so a leaked one is recognisable).
HOOK_SECRET_PREFIX = "berth_hook_"  # noqa: S105 (a prefix, not a secret)
#: The headers a signature may come in (lowercase), with the prefix its hex follows.
SIGNATURE_HEADERS: Mapping[str, str] = {
    "x-hub-signature-256": "sha256=",
    "x-gitea-signature": "",
    "x-forgejo-signature": "",
}
#: The headers that name a delivery's event (GitHub's, Gitea's, Forgejo's, Gogs').
EVENT_HEADERS = ("x-github-event", "x-gitea-event", "x-forgejo-event", "x-gogs-event")

_SHA = re.compile(r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")
_NO_COMMIT = re.compile(r"^0+$")


def sign(secret: str, body: bytes) -> str:
    """The hex HMAC-SHA256 of ``body`` with ``secret``: what a forge sends."""
    return hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def signed(secret: str, body: bytes, headers: Mapping[str, str]) -> bool:
    """Whether one of the signature headers (``headers`` keyed in lowercase) holds the
    right signature of ``body``: compared in constant time, case-insensitive hex."""
    expected = sign(secret, body).encode("ascii")
    found = False
    for name, prefix in SIGNATURE_HEADERS.items():
        given = headers.get(name)
        if given is None:
            continue
        given = given.strip()
        if prefix and not given.lower().startswith(prefix):
            continue
        digest = given[len(prefix) :].lower().encode("utf-8", "replace")
        found = hmac.compare_digest(expected, digest) or found
    return found


def event_of(headers: Mapping[str, str]) -> str | None:
    """The delivery's event (``push``, ``ping``, …) as its forge names it; ``None`` if no
    header names one."""
    for name in EVENT_HEADERS:
        if (value := headers.get(name)) is not None:
            return value.strip().lower()
    return None


class Push(msgspec.Struct, frozen=True, kw_only=True):
    """What berth reads of a push event: the ref pushed (``refs/heads/main``), the commit
    it now points at (``None``: the ref was deleted), the repository's default branch if
    the event says it."""

    ref: str
    after: str | None
    default_branch: str | None = None


def parse_push(body: bytes) -> Push:
    """The push event of ``body`` (JSON, as GitHub, Gitea and Forgejo send it); a body
    that is none is ``InvalidInput`` naming the fields missing."""
    try:
        event = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise InvalidInput([FieldError("body", "Expected a push event in JSON.")]) from None
    errors: list[FieldError] = []
    if not isinstance(event, dict):
        raise InvalidInput([FieldError("body", "Expected a push event: a JSON object.")])
    ref, after = event.get("ref"), event.get("after")
    if not isinstance(ref, str) or not ref.startswith("refs/"):
        errors.append(FieldError("ref", "Expected the ref pushed, like refs/heads/main.", None))
    if not isinstance(after, str) or not _SHA.fullmatch(after.lower()):
        errors.append(FieldError("after", "Expected the commit pushed (40 hex digits).", None))
    if errors:
        raise InvalidInput(errors)
    assert isinstance(ref, str)
    assert isinstance(after, str)
    repository = event.get("repository")
    default = repository.get("default_branch") if isinstance(repository, dict) else None
    deleted = event.get("deleted") is True or _NO_COMMIT.fullmatch(after) is not None
    return Push(
        ref=ref,
        after=None if deleted else after.lower(),
        default_branch=default if isinstance(default, str) and default else None,
    )


def branch_of(ref: str) -> str | None:
    """The branch a pushed ref names (``refs/heads/main`` → ``main``); ``None`` for a tag
    or any other ref."""
    branch = ref.removeprefix("refs/heads/")
    return branch if branch != ref and branch else None
