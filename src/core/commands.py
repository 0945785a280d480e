"""Commands (what a caller asks for) and their parsers.

Every entrypoint — HTTP, CLI, the library facade — turns raw input into a
command with ``parse_*``, which checks every field and raises
:class:`~berth.core.errors.InvalidInput` listing all broken rules at once.
Constructing a command directly bypasses nothing only because the use cases
accept commands built by these parsers; a library user goes through them too.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping
from typing import Any
from uuid import UUID

import msgspec

from .errors import FieldError, InvalidInput, NotFound
from .models import ServerFacts
from .types import (
    RuleError,
    check_address,
    check_domain,
    check_env,
    check_env_key,
    check_env_value,
    check_host_keys,
    check_image,
    check_name,
    check_port,
    check_server_name,
    check_ssh_user,
    check_uuid,
    check_volume,
    check_volumes,
    sanitize_container_name,
)

__all__ = [
    "DEFAULT_PORT",
    "CreateServerCommand",
    "DeployCommand",
    "EnrollCommand",
    "parse_count",
    "parse_create_server",
    "parse_deploy",
    "parse_enroll",
    "parse_id",
    "parse_seconds",
]

DEFAULT_PORT = 3000


class DeployCommand(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Deploy (or redeploy) the app ``name`` on one of the owner's servers."""

    server_id: UUID
    name: str
    container_name: str
    image: str
    port: int = DEFAULT_PORT
    domain: str | None = None
    env: dict[str, str] = msgspec.field(default_factory=dict)
    volumes: tuple[str, ...] = ()
    idempotency_key: str | None = None


class CreateServerCommand(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Register a server; with ``host_keys`` it is reachable at once, else it waits to enroll."""

    name: str
    address: str | None = None
    ssh_port: int = 22
    ssh_user: str = "berth"
    host_keys: tuple[str, ...] = ()


class _Fields:
    """Collects checked values and every error, with locations like ``body.env.KEY``."""

    def __init__(self, raw: object, loc: str) -> None:
        self.loc = loc
        self.errors: list[FieldError] = []
        self.values: dict[str, Any] = {}
        # A non-object is one error at ``loc``, not also one per "missing" field.
        self.is_object = isinstance(raw, Mapping)
        if not isinstance(raw, Mapping):
            self.errors.append(FieldError(loc, "Expected a JSON object.", _safe(raw)))
            self.raw: Mapping[str, Any] = {}
        else:
            self.raw = raw

    def unknown(self, allowed: set[str]) -> None:
        # The value is not echoed: nothing says a misspelt field (``Env``) holds no secret.
        for key in self.raw:
            if key not in allowed:
                self.errors.append(FieldError(f"{self.loc}.{key}", "Unknown field.", None))

    def take(
        self,
        wire: str,
        check: Callable[[object], Any],
        *,
        required: bool = False,
        nullable: bool = False,
        secret: bool = False,
    ) -> bool:
        """Check field ``wire``; return whether it is present with a usable value.

        A ``secret`` field's value is never echoed in its error, whatever its type.
        """
        if wire not in self.raw:
            if required and self.is_object:
                self.errors.append(FieldError(f"{self.loc}.{wire}", "Field required.", None))
            return False
        value = self.raw[wire]
        if value is None and nullable:
            return False
        try:
            self.values[wire] = check(value)
        except RuleError as exc:
            echoed = None if secret else _safe(value)
            self.errors.append(FieldError(f"{self.loc}.{wire}", str(exc), echoed))
            return False
        return True

    def fail(self, where: str, message: str, value: object) -> None:
        self.errors.append(FieldError(f"{self.loc}.{where}", message, _safe(value)))

    def done(self) -> None:
        if self.errors:
            raise InvalidInput(self.errors)


def _safe(value: object) -> object:
    """The offending value as echoed in errors: short, JSON-encodable, never a blob."""
    if isinstance(value, str):
        return value if len(value) <= 200 else value[:200] + "…"
    if value is None or isinstance(value, bool | float):
        return value
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**64 else None
    return None


_DEPLOY_FIELDS = {"serverId", "name", "image", "port", "domain", "env", "volumes"}


def parse_deploy(
    raw: object, *, loc: str = "body", idempotency_key: str | None = None
) -> DeployCommand:
    """Check a deploy request (SPEC.md, POST /api/agent/docker/deploy)."""
    f = _Fields(raw, loc)
    f.unknown(_DEPLOY_FIELDS)
    f.take("serverId", check_uuid, required=True)
    f.take("name", check_name, required=True)
    f.take("image", check_image, required=True)
    f.take("port", check_port)
    f.take("domain", check_domain, nullable=True)
    # Env is secret: no error at ``body.env`` or under it echoes a value (its location
    # names the key; a string given for the whole object may well be ``KEY=secret``).
    if f.take("env", check_env, nullable=True, secret=True):
        env: dict[str, str] = {}
        for key, value in f.values["env"].items():
            try:
                check_env_key(key)
            except RuleError as exc:
                f.fail(f"env.{key}", str(exc), None)
                continue
            try:
                env[key] = check_env_value(value)
            except RuleError as exc:
                f.fail(f"env.{key}", str(exc), None)
        f.values["env"] = env
    if f.take("volumes", check_volumes, nullable=True):
        seen: set[str] = set()
        for i, item in enumerate(f.values["volumes"]):
            try:
                spec = check_volume(item)
            except RuleError as exc:
                f.fail(f"volumes[{i}]", str(exc), item)
                continue
            if spec.container_path in seen:
                f.fail(f"volumes[{i}]", "Another volume already mounts this container path.", item)
            seen.add(spec.container_path)
    f.done()
    v = f.values
    return DeployCommand(
        server_id=v["serverId"],
        name=v["name"],
        container_name=sanitize_container_name(v["name"]),
        image=v["image"],
        port=v.get("port", DEFAULT_PORT),
        domain=v.get("domain"),
        env=v.get("env", {}),
        volumes=tuple(v.get("volumes", ())),
        idempotency_key=idempotency_key,
    )


def parse_create_server(raw: object, *, loc: str = "body") -> CreateServerCommand:
    """Check a create-server request (SPEC.md, POST /api/agent/servers)."""
    f = _Fields(raw, loc)
    f.unknown({"name", "address", "sshPort", "sshUser", "hostKeys"})
    f.take("name", check_server_name, required=True)
    f.take("address", check_address, nullable=True)
    f.take("sshPort", check_port)
    f.take("sshUser", check_ssh_user)
    if f.take("hostKeys", check_host_keys, nullable=True) and "address" not in f.values:
        f.fail("address", "An address is required with hostKeys.", None)
    f.done()
    v = f.values
    return CreateServerCommand(
        name=v["name"],
        address=v.get("address"),
        ssh_port=v.get("sshPort", 22),
        ssh_user=v.get("sshUser", "berth"),
        host_keys=v.get("hostKeys", ()),
    )


def parse_id(value: object, what: str) -> UUID:
    """An id as a ``UUID`` or its canonical text.

    Anything else names nothing: ``NotFound`` ("<what> not found."), as an id in an API
    path that is not a UUID gets a 404 rather than a 422.
    """
    if isinstance(value, UUID):
        return value
    try:
        return check_uuid(value)
    except RuleError:
        raise NotFound(f"{what} not found.") from None


def parse_count(value: object, *, loc: str, low: int, high: int) -> int:
    """An integer option from ``low`` to ``high`` (a log tail, a list limit), as given.

    Out of range is ``InvalidInput`` at ``loc``, not clamped: the API answers 422 too.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(
            [FieldError(loc, f"Expected an integer from {low} to {high}.", _safe(value))]
        )
    return value


def parse_seconds(value: object, *, loc: str) -> float:
    """A duration in seconds: a finite number, zero or more (booleans are refused)."""
    seconds = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        with contextlib.suppress(OverflowError):  # an int beyond a float's range
            seconds = float(value)
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        raise InvalidInput(
            [FieldError(loc, "Expected a finite number of seconds, zero or more.", _safe(value))]
        )
    return seconds


class EnrollCommand(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a server's install script reports when it enrolls: the SSH host keys to pin,
    the port berth should connect to (``None``: keep the server's), and its facts."""

    host_keys: tuple[str, ...]
    ssh_port: int | None = None
    facts: ServerFacts = msgspec.field(default_factory=ServerFacts)


FACT_TEXT_MAX = 200
CPUS_MAX = 1 << 20
MEMORY_MAX = (1 << 63) - 1


def _check_fact_text(value: object) -> str:
    if not isinstance(value, str):
        raise RuleError("Expected a string.")
    if not value or len(value) > FACT_TEXT_MAX:
        raise RuleError(f"Must be 1 to {FACT_TEXT_MAX} characters.")
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in value):
        raise RuleError("Must not contain control characters.")
    return value


def _check_int(low: int, high: int) -> Callable[[object], int]:
    def check(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise RuleError(f"Expected an integer from {low} to {high}.")
        return value

    return check


_FACTS = {
    "os": ("os", _check_fact_text),
    "arch": ("arch", _check_fact_text),
    "dockerVersion": ("docker_version", _check_fact_text),
    "cpus": ("cpus", _check_int(1, CPUS_MAX)),
    "memoryBytes": ("memory_bytes", _check_int(1, MEMORY_MAX)),
}


def parse_enroll(raw: object, *, loc: str = "body") -> EnrollCommand:
    """Check an enrollment request (SPEC.md, POST /api/agent/servers/enroll).

    ``hostKeys`` is required (berth pins them before it first connects); ``sshPort``
    and every fact are optional, and a fact may be ``null`` (unknown).
    """
    f = _Fields(raw, loc)
    f.unknown({"hostKeys", "sshPort", "facts"})
    f.take("hostKeys", check_host_keys, required=True)
    f.take("sshPort", check_port, nullable=True)
    facts: dict[str, Any] = {}
    raw_facts = f.raw.get("facts") if f.is_object else None
    if raw_facts is not None:
        sub = _Fields(raw_facts, f"{loc}.facts")
        sub.unknown(set(_FACTS))
        for wire, (name, check) in _FACTS.items():
            if sub.take(wire, check, nullable=True):
                facts[name] = sub.values[wire]
        f.errors.extend(sub.errors)
    f.done()
    return EnrollCommand(
        host_keys=f.values["hostKeys"],
        ssh_port=f.values.get("sshPort"),
        facts=ServerFacts(**facts),
    )
