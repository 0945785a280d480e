"""Building from source (SPEC.md, "Building from source"): the rules of a deploy's
``build`` and the names a build gives its image.

``parse_build`` checks a ``build`` object as the deploy parser does every field: every
broken rule at once, at paths like ``build.git.url``. The image a build makes is tagged
``berth/<containerName>:<deployment id prefix>`` (``build_tag``), so each revision's image
has a name of its own and a rollback finds it again by its id.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from uuid import UUID

from .errors import FieldError
from .models import BuildSpec, GitSource
from .types import (
    ENV_MAX_KEYS,
    RuleError,
    check_env_key,
    check_env_value,
    check_uuid,
    checked_text,
)
from .webhooks import check_webhook_url, user_info_of, without_user_info

__all__ = [
    "BUILD_PATH_MAX",
    "BUILD_PATH_PATTERN",
    "BUILT_IMAGES_KEPT",
    "GIT_REF_MAX",
    "GIT_REF_PATTERN",
    "TARGET_MAX",
    "TARGET_PATTERN",
    "build_repository",
    "build_tag",
    "check_build_path",
    "check_git_ref",
    "check_git_url",
    "check_target",
    "parse_build",
]

#: Built images of an app kept on its server: those of its newest builds; older ones go.
BUILT_IMAGES_KEPT = 5
BUILD_PATH_MAX = 1024
GIT_REF_MAX = 255
TARGET_MAX = 128

_PATH_CHARS = re.compile(r"^[A-Za-z0-9._@/+-]+$")
# A path's segment other than ``..`` (``""`` and ``.`` are dropped; ``...`` is a name).
_SEGMENT = r"(?:\.?|\.\.[A-Za-z0-9._@+-]+|\.?[A-Za-z0-9_@+-][A-Za-z0-9._@+-]*)"
#: ``check_build_path``'s rules as a schema states them: relative, no ``..`` segment.
BUILD_PATH_PATTERN = rf"^(?!/){_SEGMENT}(?:/{_SEGMENT})*$"
_REF_SEGMENT = r"[A-Za-z0-9_+-](?:\.?[A-Za-z0-9_+-])*"
#: ``check_git_ref``'s rules as a schema states them.
GIT_REF_PATTERN = rf"^(?!.*\.lock$)(?![-/.]){_REF_SEGMENT}(?:\.?/{_REF_SEGMENT})*$"
#: ``check_target``'s rules.
TARGET_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
_REF_CHARS = re.compile(r"^[A-Za-z0-9._/+-]+$")
_TARGET = re.compile(TARGET_PATTERN)
_BUILD_FIELDS = {"git", "source_id", "context", "dockerfile", "args", "target"}
_GIT_FIELDS = {"url", "ref"}


def build_repository(container_name: str) -> str:
    """The repository of an app's built images: ``berth/<containerName>``."""
    return f"berth/{container_name}"


def build_tag(container_name: str, deployment_id: UUID) -> str:
    """The tag of the image a deployment builds: ``berth/<containerName>:<first 12 hex
    digits of the deployment id>``."""
    return f"{build_repository(container_name)}:{deployment_id.hex[:12]}"


def check_git_url(value: object) -> str:
    """An ``https://`` or ``http://`` repository URL without a user or password (those
    are saved as git credentials, sealed, never shown); otherwise a webhook URL's rules."""
    if isinstance(value, str) and user_info_of(value) is not None:
        raise RuleError(
            "Must not carry a user or password: save them with POST /api/agent/git-credentials."
        )
    return check_webhook_url(value)


def check_git_ref(value: object) -> str:
    """A branch, tag or commit as Git allows it: ``[A-Za-z0-9._/+-]``, 1-255 characters,
    not starting with ``-`` or ``/``, no ``..`` or ``//``, not ending with ``/``, ``.`` or
    ``.lock``."""
    value = checked_text(value, GIT_REF_MAX)
    if not _REF_CHARS.fullmatch(value):
        raise RuleError("A ref holds only letters, digits and . _ / + -.")
    if (
        value.startswith(("-", "/", "."))
        or value.endswith(("/", ".", ".lock"))
        or ".." in value
        or "//" in value
        or "/." in value
    ):
        raise RuleError(
            "Not a valid Git ref: it must not start with -, / or ., hold .. or //, or end "
            "with /, . or .lock."
        )
    return value


def check_build_path(value: object) -> str:
    """A relative path inside the source: ``[A-Za-z0-9._@/+-]``, at most 1024 characters,
    not absolute, no ``..`` segment; ``./`` and trailing ``/`` are dropped (``.``: the
    root)."""
    value = checked_text(value, BUILD_PATH_MAX)
    if not _PATH_CHARS.fullmatch(value):
        raise RuleError("A path holds only letters, digits and . _ @ / + -.")
    if value.startswith("/"):
        raise RuleError("Must be relative to the source's root, not absolute.")
    parts = [p for p in value.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise RuleError("Must not have a '..' segment: it stays inside the source.")
    return "/".join(parts) or "."


def check_target(value: object) -> str:
    """A multi-stage target's name: ``[A-Za-z0-9][A-Za-z0-9_.-]*``, at most 128."""
    if not isinstance(value, str):
        raise RuleError("Expected a string.")
    if not 1 <= len(value) <= TARGET_MAX or not _TARGET.fullmatch(value):
        raise RuleError(
            f"A stage name: 1 to {TARGET_MAX} letters, digits, _ . -, starting with a letter "
            "or digit."
        )
    return value


def _fields(raw: object, known: set[str], at: str, fail: Any) -> Mapping[str, Any] | None:
    """``raw`` as an object, each key it has beyond ``known`` reported at ``at``;
    ``None`` (reported at ``at``) when it is not an object."""
    if not isinstance(raw, Mapping):
        fail(at, "Expected an object.")
        return None
    for key in raw:
        if key not in known:
            fail(f"{at}.{key}" if at else key, "Unknown field.")
    return raw


def parse_build(raw: object, at: str, errors: list[FieldError]) -> BuildSpec | None:
    """A deploy's ``build`` (snake_case keys), checked; every broken rule is appended to
    ``errors`` at ``at``-prefixed paths, and then ``None`` is returned."""
    start = len(errors)

    def fail(where: str, message: str, value: object = None) -> None:
        echoed = value if isinstance(value, str | int | float | bool) else None
        errors.append(FieldError(f"{at}.{where}" if where else at, message, echoed))

    body = _fields(raw, _BUILD_FIELDS, "", fail)
    if body is None:
        return None
    git: GitSource | None = None
    source_id: UUID | None = None
    given = [k for k in ("git", "source_id") if body.get(k) is not None]
    if not given:
        fail("", "Give the source to build: git {url, ref} or sourceId.")
    elif len(given) == 2:
        fail("source_id", "Give git or sourceId, not both.")
    if body.get("git") is not None:
        git = _git(body["git"], fail)
    if body.get("source_id") is not None:
        try:
            source_id = check_uuid(body["source_id"])
        except RuleError as exc:
            fail("source_id", str(exc), body["source_id"])
    values: dict[str, Any] = {}
    for name, check in (
        ("context", check_build_path),
        ("dockerfile", check_build_path),
        ("target", check_target),
    ):
        if body.get(name) is None:
            continue
        try:
            values[name] = check(body[name])
        except RuleError as exc:
            fail(name, str(exc), body[name])
    args = _args(body.get("args"), fail)
    if len(errors) > start:
        return None
    return BuildSpec(git=git, source_id=source_id, args=args, **values)


def _git(raw: object, fail: Any) -> GitSource | None:
    body = _fields(raw, _GIT_FIELDS, "git", fail)
    if body is None:
        return None
    url: str | None = None
    ref: str | None = None
    if "url" not in body:
        fail("git.url", "Field required.")
    else:
        try:
            url = check_git_url(body["url"])
        except RuleError as exc:
            fail("git.url", str(exc), without_user_info(body["url"]))
    if body.get("ref") is not None:
        try:
            ref = check_git_ref(body["ref"])
        except RuleError as exc:
            fail("git.ref", str(exc), body["ref"])
    return GitSource(url=url, ref=ref) if url is not None else None


def _args(raw: object, fail: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        fail("args", "Expected an object of string to string.")
        return {}
    if len(raw) > ENV_MAX_KEYS:
        fail("args", f"At most {ENV_MAX_KEYS} build arguments.")
        return {}
    args: dict[str, str] = {}
    for key, value in raw.items():
        try:
            check_env_key(key)
            args[key] = check_env_value(value)
        except RuleError as exc:
            fail(f"args.{key}", str(exc))
    return args
