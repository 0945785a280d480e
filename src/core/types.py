"""Constrained types and the rules behind them, declared once.

The ``Annotated`` aliases carry ``msgspec.Meta`` so the OpenAPI document shows
the constraints; the ``check_*`` functions are the rules themselves, with
messages a person can act on. ``commands.parse_*`` runs the checks and reports
every broken rule at once; a property test keeps the two in agreement.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import ipaddress
import posixpath
import re
from collections.abc import Iterable
from typing import Annotated
from uuid import UUID

from msgspec import Meta

__all__ = [
    "DOMAIN_MAX",
    "ENV_KEY_MAX",
    "ENV_MAX_KEYS",
    "ENV_VALUE_MAX_BYTES",
    "NAME_MAX",
    "REFUSED_HOST_PATHS",
    "STOP_GRACE_DEFAULT",
    "STOP_GRACE_MAX",
    "VOLUMES_MAX",
    "CommandArg",
    "ContainerName",
    "Cpus",
    "Domain",
    "EnvKey",
    "EnvValue",
    "GitHost",
    "HealthPath",
    "ImageRef",
    "MemoryLimit",
    "Port",
    "RegistryHost",
    "RuleError",
    "ServerName",
    "Volume",
    "VolumeSpec",
    "also_matching",
    "authorized_keys_line",
    "check_address",
    "check_command",
    "check_cpus",
    "check_domain",
    "check_email",
    "check_env",
    "check_env_key",
    "check_env_value",
    "check_fingerprint",
    "check_git_host",
    "check_health_path",
    "check_host_keys",
    "check_idempotency_key",
    "check_image",
    "check_memory",
    "check_name",
    "check_password",
    "check_port",
    "check_registry_host",
    "check_registry_password",
    "check_registry_username",
    "check_restart",
    "check_server_name",
    "check_ssh_user",
    "check_stop_grace",
    "check_uuid",
    "check_volume",
    "check_volumes",
    "checked_text",
    "fingerprints",
    "guarded_host_path",
    "host_key_fingerprint",
    "json_type",
    "needs_internal_issuer",
    "refused_host_path",
    "registry_of",
    "sanitize_container_name",
]

NAME_MAX = 100
DOMAIN_MAX = 253
ENV_KEY_MAX = 256
ENV_MAX_KEYS = 200
ENV_VALUE_MAX_BYTES = 32 * 1024
VOLUMES_MAX = 100
VOLUME_PATH_MAX = 4096
IMAGE_MAX = 512
ADDRESS_MAX = 253
MEMORY_MIN = 6 * 1024 * 1024  # Docker refuses less
MEMORY_MAX = 1 << 50
MEMORY_PATTERN = r"^[0-9]{1,16}[bkmgBKMG]$"
CPUS_MIN = 0.01
CPUS_MAX = 1024.0
HEALTH_PATH_MAX = 1024
HEALTH_PATH_PATTERN = r"^/[A-Za-z0-9._~!$&'()*+,;=:@%/?-]*$"
COMMAND_MAX_ARGS = 100
COMMAND_ARG_MAX = 4096


class RuleError(ValueError):
    """A value breaks a rule; the message says which and how to fix it."""


def checked_text(value: object, maximum: int) -> str:
    """``value`` as a string of 1 to ``maximum`` characters: the first rule of the checks
    that go on to the string's content (a Git ref, a URL, a build path)."""
    if not isinstance(value, str):
        raise RuleError("Expected a string.")
    if not 1 <= len(value) <= maximum:
        raise RuleError(f"Must be 1 to {maximum} characters.")
    return value


def digits_between(low: int, high: int, width: int) -> str:
    """A regular expression (no anchors, no lookaround) of the decimal numbers from
    ``low`` to ``high`` (``0 < low <= high``) written in at most ``width`` digits,
    leading zeros allowed: how a schema states a range inside a string (``512m``)."""
    arms = []
    for length in range(len(str(low)), len(str(high)) + 1):
        first = str(low) if length == len(str(low)) else "1" + "0" * (length - 1)
        last = str(high) if length == len(str(high)) else "9" * length
        if length <= width:
            zeros = f"0{{0,{width - length}}}" if width > length else ""
            arms.append(zeros + _same_length(first, last))
    return "(?:" + "|".join(arms) + ")"


def _same_length(first: str, last: str) -> str:
    """The numbers from ``first`` to ``last``, both of the same number of digits."""
    if first == last:
        return first
    if len(first) == 1:
        return f"[{first}-{last}]"
    rest = len(first) - 1
    if first[0] == last[0]:
        return first[0] + "(?:" + _same_length(first[1:], last[1:]) + ")"
    arms = []
    low, high = int(first[0]), int(last[0])
    if first[1:] != "0" * rest:
        arms.append(first[0] + "(?:" + _same_length(first[1:], "9" * rest) + ")")
        low += 1
    tail = None
    if last[1:] != "9" * rest:
        tail = last[0] + "(?:" + _same_length("0" * rest, last[1:]) + ")"
        high -= 1
    if low <= high:
        digit = str(low) if low == high else f"[{low}-{high}]"
        arms.append(f"{digit}[0-9]{{{rest}}}")
    if tail is not None:
        arms.append(tail)
    return "(?:" + "|".join(arms) + ")"


#: ``MEMORY_PATTERN`` with its bounds, as a schema states them: 6 MiB to 1 PiB in each unit.
MEMORY_LIMIT_PATTERN = (
    "^(?:"
    + "|".join(
        digits_between(max(1, -(-MEMORY_MIN // size)), MEMORY_MAX // size, 16)
        + f"[{unit}{unit.upper()}]"
        for unit, size in (("b", 1), ("k", 1024), ("m", 1024**2), ("g", 1024**3))
    )
    + ")$"
)


# --- docker image references (the subset of the distribution grammar we accept)
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_REGISTRY = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*"
_REPOSITORY = rf"(?:{_REGISTRY}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"sha256:[a-f0-9]{64}"
IMAGE_PATTERN = rf"^{_REPOSITORY}:{_TAG}(?:@{_DIGEST})?$"
_IMAGE_RE = re.compile(IMAGE_PATTERN)
REPOSITORY_MAX = 255
#: ``IMAGE_PATTERN`` with the repository's length (what comes before ``:<tag>``) bounded.
IMAGE_REF_PATTERN = rf"^(?=.{{1,{REPOSITORY_MAX}}}:{_TAG}(?:@{_DIGEST})?$){IMAGE_PATTERN[1:]}"

# --- DNS names: labels of [a-z0-9-], not starting/ending with '-', >= 2 labels
_LABEL = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]{0,61}[a-zA-Z0-9])"
DOMAIN_PATTERN = rf"^{_LABEL}(?:\.{_LABEL})+$"
_DOMAIN_RE = re.compile(DOMAIN_PATTERN)

ENV_KEY_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
_ENV_KEY_RE = re.compile(ENV_KEY_PATTERN)
ENV_VALUE_PATTERN = r"^[^\x00]*$"  # no NUL (JSON Schema and Python read \x00 alike)

_VOLUME_CHARS_RE = re.compile(r"^[A-Za-z0-9._@/+-]+$")
#: An absolute path that is not ``/`` however written (``//``, ``/./``): it has a segment
#: other than ``.``.
_NOT_ROOT = r"/[A-Za-z0-9._@/+-]*(?:[A-Za-z0-9_@+-]|\.\.)[A-Za-z0-9._@/+-]*"
VOLUME_PATTERN = r"^[A-Za-z0-9._@/+-]+:/[A-Za-z0-9._@/+-]*(?::(?:ro|rw))?$"
#: No path segment is ``..``: it is not found after the start, a ``/`` or a ``:`` and
#: before a ``/``, a ``:`` or the end.
_NO_DOTDOT = r"(?!(?:.*[/:])?\.\.(?:[/:]|$))"
#: ``VOLUME_PATTERN`` without ``/`` as the host path or the container path, or a ``..``
#: segment in either.
VOLUME_PATHS_PATTERN = (
    rf"^{_NO_DOTDOT}"
    rf"(?:[A-Za-z0-9._@+-][A-Za-z0-9._@/+-]*|{_NOT_ROOT}):{_NOT_ROOT}(?::(?:ro|rw))?$"
)
_CONTAINER_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]+$")
#: Host paths refused as volumes on every server, with what each holds: a container that
#: mounts one of them, a directory under one, or a directory holding one (``/var`` holds
#: ``/var/lib/docker``) could take the server over. The list names what a careful user
#: would never mount; it is not a sandbox (docs/security.md, "What a deploy can do").
REFUSED_HOST_PATHS: tuple[tuple[str, str], ...] = (
    ("/proc", "the kernel's view of every process"),
    ("/sys", "the kernel's and the devices' settings"),
    ("/dev", "the server's devices"),
    ("/boot", "the kernel and the boot loader"),
    ("/etc", "the server's configuration: users, sudo, SSH"),
    ("/run", "the running services' sockets, Docker's and containerd's among them"),
    ("/var/run", "the running services' sockets, Docker's and containerd's among them"),
    ("/var/lib/docker", "Docker's own state"),
    ("/var/lib/containerd", "containerd's own state"),
)
# Docker's or containerd's socket wherever it lives (rootless Docker, snaps, Docker
# Desktop): a path with such a segment is refused whatever directory holds it.
_SOCKET_SEGMENT_RE = re.compile(r"^(?:docker|containerd).*\.sock$")

_UUID_RE = re.compile(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
)
UUID_PATTERN = _UUID_RE.pattern

# --- the aliases used in Structs (documentation for OpenAPI; checks live below)


def also_matching(pattern: str) -> dict[str, object]:
    """A second pattern a value must match too (``allOf``): a rule's bounds beside the
    shape its ``pattern`` has said since 1.0.0, which the document keeps as it was."""
    return {"allOf": [{"pattern": pattern}]}


Port = Annotated[int, Meta(ge=1, le=65535, description="TCP port, 1-65535.")]
# Characters whose lowercase is one of [a-z0-9] (only these survive sanitizing as more
# than a separator): ASCII letters and digits, İ (U+0130) and the Kelvin sign (U+212A).
_NAME_KEPT = "A-Za-z0-9\u0130\u212a"
#: No NUL, and at least two characters that survive sanitizing (SPEC.md: the container
#: name must keep two characters), as JSON Schema can say it.
APP_NAME_PATTERN = rf"^[^\x00]*[{_NAME_KEPT}][^\x00]*[{_NAME_KEPT}][^\x00]*$"
_PRINTABLE = "[^\\x00-\\x1f\\x7f-\\x9f]"
#: No control characters, and not blank.
SERVER_NAME_PATTERN = rf"^{_PRINTABLE}*[^\x00-\x1f\x7f-\x9f\s]{_PRINTABLE}*$"
AppName = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=NAME_MAX,
        pattern=APP_NAME_PATTERN,
        description="1-100 characters, no NUL, at least two letters or digits.",
    ),
]
ServerName = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=NAME_MAX,
        pattern=SERVER_NAME_PATTERN,
        description="1-100 printable characters, not blank.",
    ),
]
ContainerName = Annotated[str, Meta(pattern=_CONTAINER_NAME_RE.pattern)]
ImageRef = Annotated[
    str,
    Meta(
        max_length=IMAGE_MAX,
        pattern=IMAGE_PATTERN,
        description="`<repository>:<tag>`, optionally `@sha256:<digest>`. The tag is required.",
        extra_json_schema=also_matching(IMAGE_REF_PATTERN),
    ),
]
Domain = Annotated[
    str,
    Meta(
        max_length=DOMAIN_MAX,
        pattern=DOMAIN_PATTERN,
        description="A DNS name with at least two labels; stored lowercased.",
    ),
]
EnvKey = Annotated[str, Meta(max_length=ENV_KEY_MAX, pattern=ENV_KEY_PATTERN)]
# 32 KiB of UTF-8 is at most that many characters: the most a schema can say of bytes.
EnvValue = Annotated[
    str,
    Meta(
        max_length=ENV_VALUE_MAX_BYTES,
        pattern=ENV_VALUE_PATTERN,
        description="Any string without NUL, at most 32 KiB of UTF-8.",
    ),
]
Volume = Annotated[
    str,
    Meta(
        max_length=2 * VOLUME_PATH_MAX + 4,
        pattern=VOLUME_PATTERN,
        description="`<host_path>:<container_path>[:ro|:rw]`.",
        extra_json_schema=also_matching(VOLUME_PATHS_PATTERN),
    ),
]
Address = Annotated[
    str, Meta(min_length=1, max_length=ADDRESS_MAX, description="Hostname or IP address.")
]
MemoryLimit = (
    Annotated[
        int,
        Meta(
            ge=MEMORY_MIN,
            le=MEMORY_MAX,
            description="Bytes (at least 6 MiB), or a string such as `512m` or `2g`.",
            examples=[536870912],
        ),
    ]
    | Annotated[
        str,
        Meta(
            pattern=MEMORY_PATTERN,
            examples=["512m", "2g"],
            extra_json_schema=also_matching(MEMORY_LIMIT_PATTERN),
        ),
    ]
)
Cpus = Annotated[
    float,
    Meta(
        ge=CPUS_MIN,
        le=CPUS_MAX,
        description="CPUs the container may use, 0.01-1024 (e.g. 0.5).",
        examples=[0.5],
    ),
]
HealthPath = Annotated[
    str,
    Meta(
        max_length=HEALTH_PATH_MAX,
        pattern=HEALTH_PATH_PATTERN,
        description=(
            "An HTTP path on the app's port that must answer 2xx or 3xx for the app to "
            'count as healthy (instead of "the port accepts connections").'
        ),
        examples=["/healthz"],
    ),
]
CommandArg = Annotated[
    str, Meta(max_length=COMMAND_ARG_MAX, pattern=ENV_VALUE_PATTERN, description="No NUL.")
]


# --- private registries: ``host[:port]`` as an image reference names it (no scheme, no path)
REGISTRY_HOST_MAX = 259  # a 253-character name, ':' and five digits
REGISTRY_USERNAME_MAX = 255
REGISTRY_PASSWORD_MAX = 8192  # a registry token (a cloud's JSON key is some 2.5 KB)
REGISTRY_HOST_PATTERN = rf"^{_LABEL}(?:\.{_LABEL})*(?::[0-9]{{1,5}})?$"
_REGISTRY_HOST_RE = re.compile(REGISTRY_HOST_PATTERN)
_REGISTRY_PORT = digits_between(1, 65535, 5)
#: ``REGISTRY_HOST_PATTERN`` with the rest of ``check_registry_host`` as a schema says it:
#: a name of at most 253 characters, a port 1-65535, and a name Docker reads as a
#: registry (a ``.``, a port, or ``localhost``).
REGISTRY_PATTERN = (
    rf"^(?=[^:]{{1,{DOMAIN_MAX}}}(?::|$))(?:{_LABEL}(?:\.{_LABEL})+(?::{_REGISTRY_PORT})?"
    rf"|{_LABEL}:{_REGISTRY_PORT}|[Ll][Oo][Cc][Aa][Ll][Hh][Oo][Ss][Tt])$"
)
#: ``REGISTRY_HOST_PATTERN`` with the rest of ``check_git_host`` as a schema says it: a
#: name of at most 253 characters and a port 1-65535.
GIT_HOST_PATTERN = (
    rf"^(?=[^:]{{1,{DOMAIN_MAX}}}(?::|$)){_LABEL}(?:\.{_LABEL})*(?::{_REGISTRY_PORT})?$"
)
#: The registry of an image reference without one (``nginx:1.27``), as Docker names it.
DOCKER_HUB = "docker.io"
_DOCKER_HUB_ALIASES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})

#: ``hostname[:port]`` as ``_host_and_port`` takes it (a registry's, a Git host's).
_HostAndPort = Annotated[str, Meta(max_length=REGISTRY_HOST_MAX, pattern=REGISTRY_HOST_PATTERN)]

RegistryHost = Annotated[
    _HostAndPort,
    Meta(
        extra_json_schema=also_matching(REGISTRY_PATTERN),
        description="`hostname[:port]` as in an image reference (`ghcr.io`, "
        "`registry.example.com:5000`); no scheme, no path. Stored lowercased.",
        examples=["registry.example.com:5000"],
    ),
]


GitHost = Annotated[
    _HostAndPort,
    Meta(
        extra_json_schema=also_matching(GIT_HOST_PATTERN),
        description="The Git host as a repository URL names it: `hostname[:port]`, the port "
        "only when the URL gives one (no scheme, path or whitespace; stored lowercased).",
        examples=["git.example.com"],
    ),
]


def _expect_str(value: object) -> str:
    if not isinstance(value, str):
        raise RuleError(f"Expected a string, got {json_type(value)}.")
    return value


def _bounded_str(value: object, maximum: int, *, required: bool = False) -> str:
    """A string of at most ``maximum`` characters (and not empty, if ``required``)."""
    text = _expect_str(value)
    if (required and not text) or len(text) > maximum:
        raise RuleError(f"Must be {'1 to' if required else 'at most'} {maximum} characters.")
    return text


def json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def check_uuid(value: object) -> UUID:
    """A UUID in its canonical 36-character form (any case)."""
    text = _expect_str(value)
    if not _UUID_RE.fullmatch(text):
        raise RuleError("Expected a UUID like 123e4567-e89b-12d3-a456-426614174000.")
    return UUID(text)


def check_port(value: object) -> int:
    """An integer 1-65535; strings, floats and booleans are refused."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise RuleError(f"Expected an integer from 1 to 65535, got {json_type(value)}.")
    if not 1 <= value <= 65535:
        raise RuleError("Expected an integer from 1 to 65535.")
    return value


def check_name(value: object) -> str:
    """An app name: 1-100 characters without NUL that sanitize to a Docker name."""
    text = _expect_str(value)
    if not 1 <= len(text) <= NAME_MAX:
        raise RuleError(f"Must be 1 to {NAME_MAX} characters long.")
    if "\x00" in text:
        raise RuleError("Must not contain NUL characters.")
    sanitize_container_name(text)
    return text


def sanitize_container_name(name: str) -> str:
    """The Docker container name for an app name (SPEC.md).

    Lowercase; every character outside ``[a-z0-9_.-]`` becomes ``-``; runs of
    ``-`` collapse; leading and trailing ``-._`` are trimmed. Docker needs at
    least two characters, so a shorter result is refused like an empty one.
    """
    lowered = name.lower()
    replaced = "".join(c if c in _NAME_CHARS else "-" for c in lowered)
    collapsed = re.sub(r"-{2,}", "-", replaced).strip("-._")
    if not collapsed:
        raise RuleError("Leaves no usable container name once sanitized; use letters or digits.")
    if len(collapsed) < 2:
        raise RuleError("Leaves a one-character container name; Docker needs at least two.")
    return collapsed


_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_.-")


def check_server_name(value: object) -> str:
    """A server's display name: 1-100 characters, no control characters."""
    text = _expect_str(value)
    if not text.strip() or len(text) > NAME_MAX:
        raise RuleError(f"Must be 1 to {NAME_MAX} characters long and not blank.")
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in text):
        raise RuleError("Must not contain control characters.")
    return text


def check_image(value: object) -> str:
    """``<repository>:<tag>[@sha256:<digest>]``; no implicit ``latest``."""
    text = _bounded_str(value, IMAGE_MAX)
    if _IMAGE_RE.fullmatch(text):
        repository = text.split("@", 1)[0].rsplit(":", 1)[0]
        if len(repository) > REPOSITORY_MAX:
            raise RuleError(f"The repository name must be at most {REPOSITORY_MAX} characters.")
        return text
    without_digest = text.split("@", 1)[0]
    last = without_digest.rsplit("/", 1)[-1]
    if text and ":" not in last:
        raise RuleError(
            "A tag is required, as in `nginx:1.27` or `ghcr.io/org/app:2.1`; "
            "there is no implicit `latest`."
        )
    raise RuleError(
        "Expected `<repository>:<tag>` optionally followed by `@sha256:<64 hex digits>`; "
        "repositories are lowercase."
    )


def check_domain(value: object) -> str:
    """A DNS name (SPEC.md), returned lowercased."""
    text = _bounded_str(value, DOMAIN_MAX)
    if not _DOMAIN_RE.fullmatch(text):
        raise RuleError(_domain_fix(text))
    return text.lower()


_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_PORT_RE = re.compile(r":[0-9]*$")


def _domain_fix(text: str) -> str:
    """What to change to make ``text`` a domain berth accepts, as precisely as it can say:
    drop the scheme, the path, the port or the trailing dot; punycode for Unicode."""
    fixes: list[str] = []
    name = text.strip()
    if name != text:
        fixes.append("drop the surrounding spaces")
    if scheme := _SCHEME_RE.match(name):
        fixes.append(f"drop the scheme `{scheme[0]}`")
        name = name[scheme.end() :]
    if "/" in name:
        name, _, path = name.partition("/")
        fixes.append(f"drop the path `/{path}`")
    if "@" in name:
        fixes.append("drop the user part before `@`")
        name = name.rpartition("@")[2]
    if port := _PORT_RE.search(name):
        fixes.append(
            f"drop the port `{port[0]}` (the proxy serves the domain on 443 and 80; "
            "the app's own port is `port`)"
        )
        name = name[: port.start()]
    if name.endswith(".") and name.strip("."):
        fixes.append("drop the trailing dot")
        name = name.rstrip(".")
    if not name.isascii():
        try:
            ascii_name = name.encode("idna").decode("ascii")
        except UnicodeError:
            ascii_name = ""
        if not _DOMAIN_RE.fullmatch(ascii_name):
            fixes.append(
                "use the name's punycode (IDNA) form, e.g. `xn--bcher-kva.example` for "
                "`bücher.example`"
            )
        else:
            fixes.append(f"write it in punycode (labels are ASCII): `{name}` is `{ascii_name}`")
            name = ascii_name
    rule = (
        "Expected a DNS name like app.example.com: at least two dot-separated labels of "
        "1-63 letters, digits or '-', none starting or ending with '-'."
    )
    if fixes and _DOMAIN_RE.fullmatch(name) and len(name) <= DOMAIN_MAX:
        return f"Use `{name.lower()}`: {'; '.join(fixes)}."
    if fixes:
        return f"{rule} Also {'; '.join(fixes)}."
    return rule


def check_address(value: object) -> str:
    """A hostname, an IPv4 address or an IPv6 address (without brackets)."""
    import ipaddress

    text = _bounded_str(value, ADDRESS_MAX, required=True)
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        pass
    else:
        scope = getattr(ip, "scope_id", None)
        if scope is not None and re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", scope) is None:
            raise RuleError("An IPv6 zone (after %) is an interface name like eth0.")
        return str(ip)
    label = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]{0,61}[a-zA-Z0-9])"
    if re.fullmatch(rf"{label}(?:\.{label})*", text) is None:
        raise RuleError("Expected a hostname or an IP address.")
    return text.lower()


def check_env(value: object) -> dict[str, str]:
    """Env keys and values (SPEC.md); raises with every offending key named."""
    if not isinstance(value, dict):
        raise RuleError(f"Expected an object of string to string, got {json_type(value)}.")
    if len(value) > ENV_MAX_KEYS:
        raise RuleError(f"At most {ENV_MAX_KEYS} variables.")
    return value


def check_env_key(value: object) -> str:
    """One env key: ``^[A-Za-z_][A-Za-z0-9_]*$``, at most 256 characters."""
    key = _expect_str(value)
    if len(key) > ENV_KEY_MAX:
        raise RuleError(f"Keys are at most {ENV_KEY_MAX} characters.")
    if not _ENV_KEY_RE.fullmatch(key):
        raise RuleError(
            "Names start with a letter (A-Z, a-z) or an underscore and hold only letters, "
            "digits and underscores."
        )
    return key


def check_env_value(value: object) -> str:
    """One env value: a string without NUL, at most 32 KiB of UTF-8."""
    text = _expect_str(value)
    if "\x00" in text:
        raise RuleError("Values must not contain NUL characters.")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise RuleError("Values must be valid Unicode (no lone surrogates).") from exc
    if size > ENV_VALUE_MAX_BYTES:
        raise RuleError(f"Values are at most {ENV_VALUE_MAX_BYTES} bytes of UTF-8.")
    return text


class VolumeSpec:
    """A parsed volume: where on the host, where in the container, read-only or not."""

    __slots__ = ("container_path", "host_path", "read_only")

    def __init__(self, host_path: str, container_path: str, read_only: bool) -> None:
        self.host_path = host_path
        self.container_path = container_path
        self.read_only = read_only

    @property
    def is_relative(self) -> bool:
        """Relative host paths live under the installation's data directory."""
        return not self.host_path.startswith("/")


def _normalize(path: str) -> str:
    # normpath keeps a leading "//" (POSIX leaves it implementation-defined);
    # Linux treats it as "/", so must we, or "//var/run/docker.sock" slips through.
    norm = posixpath.normpath(path)
    return "/" + norm.lstrip("/") if norm.startswith("/") else norm


def guarded_host_path(host: str, guarded: Iterable[tuple[str, str]]) -> str | None:
    """Why the host path ``host`` (absolute, normalized) is refused, if it is: it is one
    of the ``guarded`` paths, lies under one, or is a directory that holds one. Each
    guarded path comes with what it holds, which the reason names."""
    for path, holds in guarded:
        if host == path:
            return f"The host path `{host}` is refused: it holds {holds}."
        if host.startswith(path + "/"):
            return f"The host path `{host}` is refused: it lies in `{path}`, which holds {holds}."
        if host == "/" or path.startswith(host + "/"):
            return f"The host path `{host}` is refused: it holds `{path}`, which holds {holds}."
    return None


def refused_host_path(host: str) -> str | None:
    """Why the host path ``host`` (absolute, normalized) is refused on every server, if
    it is: ``/``, a Docker or containerd socket, or one of ``REFUSED_HOST_PATHS``."""
    if host == "/":
        return "The host path `/` is refused: it is the whole server."
    if any(_SOCKET_SEGMENT_RE.fullmatch(segment) for segment in host.split("/")):
        return (
            f"The host path `{host}` is refused: it names Docker's or containerd's socket, "
            "which gives root on the server."
        )
    return guarded_host_path(host, REFUSED_HOST_PATHS)


_OWN_DIRECTORY = " Mount a directory of the app's own (like `/srv/<app>`) or a relative path."


def check_volume(value: object) -> VolumeSpec:
    """``<host_path>:<container_path>[:ro|:rw]`` with the rules of SPEC.md; an absolute
    host path must not be one ``refused_host_path`` refuses."""
    text = _expect_str(value)
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise RuleError("Expected `<host_path>:<container_path>` with an optional `:ro` or `:rw`.")
    host, container = parts[0], parts[1]
    mode = parts[2] if len(parts) == 3 else "rw"
    if mode not in ("ro", "rw"):
        raise RuleError("The mode after the container path is `ro` or `rw`.")
    for label, path in (("host", host), ("container", container)):
        if not path:
            raise RuleError(f"The {label} path is empty.")
        if len(path) > VOLUME_PATH_MAX:
            raise RuleError(f"The {label} path is longer than {VOLUME_PATH_MAX} characters.")
        if not _VOLUME_CHARS_RE.fullmatch(path):
            raise RuleError(f"The {label} path may only contain A-Z a-z 0-9 . _ @ / + -.")
        if ".." in path.split("/"):
            raise RuleError(f"The {label} path must not contain a `..` segment.")
    if not container.startswith("/"):
        raise RuleError("The container path must be absolute.")
    if _normalize(container) == "/":
        raise RuleError("The container path must not be `/`.")
    host = _normalize(host)
    if host.startswith("/"):
        reason = refused_host_path(host)
        if reason is not None:
            raise RuleError(reason + _OWN_DIRECTORY)
    return VolumeSpec(host, _normalize(container), mode == "ro")


def check_volumes(value: object) -> list[object]:
    """The array itself: a list of at most 100 entries."""
    if not isinstance(value, list):
        raise RuleError(f"Expected an array of strings, got {json_type(value)}.")
    if len(value) > VOLUMES_MAX:
        raise RuleError(f"At most {VOLUMES_MAX} volumes.")
    return value


_EMAIL_RE = re.compile(r"^[^@\s]{1,64}@[^@\s]{1,189}$")
PASSWORD_MIN = 8
PASSWORD_MAX = 1024
IDEMPOTENCY_KEY_MAX = 255


def check_email(value: object) -> str:
    """An email address, kept lowercased: one ``@``, no spaces, at most 254 characters."""
    text = _expect_str(value).strip()
    if len(text) > 254 or not _EMAIL_RE.fullmatch(text) or "." not in text.rsplit("@", 1)[1]:
        raise RuleError("Expected an email address like ada@example.com.")
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise RuleError("Must not contain control characters.")
    return text.lower()


def check_password(value: object) -> str:
    """A password of 8 to 1024 characters."""
    text = _expect_str(value)
    if not PASSWORD_MIN <= len(text) <= PASSWORD_MAX:
        raise RuleError(f"Passwords are {PASSWORD_MIN} to {PASSWORD_MAX} characters long.")
    return text


def check_idempotency_key(value: object) -> str:
    """1-255 printable ASCII characters."""
    text = _expect_str(value)
    if not 1 <= len(text) <= IDEMPOTENCY_KEY_MAX or not all(33 <= ord(c) <= 126 for c in text):
        raise RuleError(
            f"Expected 1 to {IDEMPOTENCY_KEY_MAX} printable ASCII characters without spaces."
        )
    return text


_HOST_KEY_RE = re.compile(
    r"(ssh-ed25519|ecdsa-sha2-nistp256|ecdsa-sha2-nistp384|ecdsa-sha2-nistp521|ssh-rsa)"
    r" ([A-Za-z0-9+/]{16,8192}={0,3})(?: [\x20-\x7e]{0,200})?"
)
_SSH_USER_RE = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
HOST_KEYS_MAX = 10


def check_host_keys(value: object) -> tuple[str, ...]:
    """SSH host public keys as in ``/etc/ssh/ssh_host_*_key.pub``; comments are dropped.

    Each key's blob is decoded and checked against its algorithm (RFC 4253, 5656, 8709):
    a key berth could never match is refused here, not discovered at the first connect.
    """
    if not isinstance(value, list) or not value:
        raise RuleError("Expected a non-empty array of SSH public keys.")
    if len(value) > HOST_KEYS_MAX:
        raise RuleError(f"At most {HOST_KEYS_MAX} host keys.")
    keys = []
    for item in value:
        match = _HOST_KEY_RE.fullmatch(item.strip()) if isinstance(item, str) else None
        if match is None:
            raise RuleError("Each host key looks like `ssh-ed25519 AAAAC3Nza… [comment]`.")
        problem = _host_key_blob_problem(match[1], match[2])
        if problem is not None:
            raise RuleError(f"The {match[1]} key is not a valid public key: {problem}.")
        keys.append(f"{match[1]} {match[2]}")
    return tuple(keys)


_FINGERPRINT_RE = re.compile(r"SHA256:[A-Za-z0-9+/]{43}")


@functools.lru_cache(maxsize=16384)
def host_key_fingerprint(key: str) -> str:
    """The key's fingerprint as OpenSSH prints it (``ssh-keygen -lf``, the ``ssh``
    prompt): ``SHA256:`` and the unpadded base64 of the SHA-256 of the key's blob.

    ``key`` is an OpenSSH public key line (``ssh-ed25519 AAAA… [comment]``); raises
    ``ValueError`` when its second field is not base64. Remembered (a servers list shows
    a thousand servers' fingerprints per request: they were a tenth of the event loop's
    time while the fleet benchmark's deploys ran).
    """
    parts = key.split()
    if len(parts) < 2:
        raise ValueError("Not an OpenSSH public key line.")
    try:
        blob = binascii.a2b_base64(parts[1], strict_mode=True)
    except binascii.Error as exc:
        raise ValueError("The key's base64 does not decode.") from exc
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode("ascii")
    return "SHA256:" + digest.rstrip("=")


def fingerprints(keys: tuple[str, ...]) -> list[str]:
    """The SHA-256 fingerprints of ``keys`` (OpenSSH format); a key that does not decode
    is left out."""
    found = []
    for key in keys:
        try:
            found.append(host_key_fingerprint(key))
        except ValueError:
            continue
    return found


def check_fingerprint(value: object) -> str:
    """An OpenSSH SHA-256 fingerprint, ``SHA256:`` and 43 base64 characters (unpadded)."""
    text = _expect_str(value).strip()
    if not _FINGERPRINT_RE.fullmatch(text):
        raise RuleError(
            "Expected an SSH host key fingerprint as OpenSSH prints it: "
            "`SHA256:` followed by 43 base64 characters (`ssh-keygen -lf <key file>`)."
        )
    return text


#: Names no public CA issues a certificate for: the special-use names of RFC 6761 and
#: RFC 8375, mDNS (RFC 6762), the ICANN-reserved private TLD ``internal``, and IP
#: addresses. Caddy's own rule (``certmagic.SubjectQualifiesForPublicCert``) is the same.
_INTERNAL_SUFFIXES = (".localhost", ".local", ".internal", ".home.arpa")


def needs_internal_issuer(domain: str) -> bool:
    """Whether ``domain`` cannot get a publicly trusted certificate, so its proxy must use
    a private CA (Caddy's internal issuer): ``localhost``, ``*.localhost``, ``*.local``,
    ``*.internal``, ``*.home.arpa`` (and those names themselves), or an IP address.

    Case and one trailing dot are ignored.
    """
    name = domain.strip().lower().removesuffix(".")
    if name == "localhost" or any(
        name == suffix[1:] or name.endswith(suffix) for suffix in _INTERNAL_SUFFIXES
    ):
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


# Uncompressed EC points: 0x04, then X and Y of the curve's size.
_ECDSA_POINT_BYTES = {"nistp256": 65, "nistp384": 97, "nistp521": 133}
RSA_MIN_BITS = 1024


def _host_key_blob_problem(algorithm: str, encoded: str) -> str | None:
    """Why the base64 ``encoded`` is no ``algorithm`` public key, or None if it is one."""
    try:
        blob = binascii.a2b_base64(encoded, strict_mode=True)
    except binascii.Error:
        return "its base64 does not decode"
    fields: list[bytes] = []
    at = 0
    while at < len(blob):
        if at + 4 > len(blob):
            return "it is truncated"
        size = int.from_bytes(blob[at : at + 4], "big")
        at += 4
        if at + size > len(blob):
            return "it is truncated"
        fields.append(blob[at : at + size])
        at += size
    if not fields or fields[0] != algorithm.encode():
        return "it holds a key of another type"
    rest = fields[1:]
    if algorithm == "ssh-ed25519":
        return None if len(rest) == 1 and len(rest[0]) == 32 else "expected a 32-byte key"
    if algorithm == "ssh-rsa":
        if len(rest) != 2:
            return "expected an exponent and a modulus"
        exponent, modulus = (int.from_bytes(f, "big", signed=True) for f in rest)
        if exponent < 3 or modulus <= 0 or modulus.bit_length() < RSA_MIN_BITS:
            return f"expected an RSA key of at least {RSA_MIN_BITS} bits"
        return None
    curve = algorithm.removeprefix("ecdsa-sha2-")
    if len(rest) != 2 or rest[0] != curve.encode():
        return f"expected the curve {curve} and a point"
    point = rest[1]
    if len(point) != _ECDSA_POINT_BYTES[curve] or point[0] != 4:
        return f"expected an uncompressed point on {curve}"
    return None


def check_ssh_user(value: object) -> str:
    """A POSIX user name: lowercase letters, digits, `_` and `-`, at most 32 characters."""
    text = _expect_str(value)
    if _SSH_USER_RE.fullmatch(text) is None:
        raise RuleError("Expected a user name like `berth`: [a-z_][a-z0-9_-]{0,31}.")
    return text


#: A server's SSH port when it is added without one; its install script may replace it
#: with the port its sshd listens on (any other port the user gave stays).
DEFAULT_SSH_PORT = 22

#: How berth's key is authorized on a server: it can forward, it cannot run anything,
#: and it cannot listen on the server (``permitlisten`` allows only 127.0.0.1:1, which an
#: unprivileged user cannot bind: no ``-R``). ``permitopen`` is left out on purpose: with
#: OpenSSH (9.2 checked) any ``permitopen`` also refuses the stream-local forwards to the
#: Docker and Caddy sockets, and a socket path is not accepted there (docs/decisions/).
#: The one place this is written: the install script and the SSH adapter use it.
KEY_RESTRICTIONS = 'restrict,port-forwarding,permitlisten="127.0.0.1:1",command="/bin/false"'


def authorized_keys_line(public_key: str) -> str:
    """The ``authorized_keys`` line of ``public_key``, with ``KEY_RESTRICTIONS``."""
    return f"{KEY_RESTRICTIONS} {public_key}"


# --- deploy options ----------------------------------------------------------------------

_MEMORY_RE = re.compile(MEMORY_PATTERN)
_MEMORY_UNITS = {"b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
_HEALTH_PATH_RE = re.compile(HEALTH_PATH_PATTERN)
RESTART_POLICIES = ("unless-stopped", "always", "on-failure", "no")


def check_memory(value: object) -> int:
    """A memory limit in bytes: an integer, or digits with a unit ``b``, ``k``, ``m``, ``g``
    (``512m``, ``2g``; powers of 1024, as Docker reads them). At least 6 MiB."""
    if isinstance(value, str):
        if not _MEMORY_RE.fullmatch(value):
            raise RuleError(
                "Expected a number of bytes, or digits followed by b, k, m or g "
                "(for example 512m or 2g)."
            )
        value = int(value[:-1]) * _MEMORY_UNITS[value[-1].lower()]
    elif isinstance(value, bool) or not isinstance(value, int):
        raise RuleError(
            f"Expected a number of bytes or a string like 512m, got {json_type(value)}."
        )
    assert isinstance(value, int)
    if not MEMORY_MIN <= value <= MEMORY_MAX:
        raise RuleError("Must be at least 6 MiB (6m) and at most 1 PiB.")
    return value


def check_cpus(value: object) -> float:
    """A CPU limit: a number from 0.01 to 1024 (fractions of a CPU allowed)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RuleError(f"Expected a number from 0.01 to 1024, got {json_type(value)}.")
    try:
        cpus = float(value)
    except OverflowError:
        raise RuleError("Expected a number from 0.01 to 1024.") from None
    if not CPUS_MIN <= cpus <= CPUS_MAX:  # NaN fails too
        raise RuleError("Expected a number from 0.01 to 1024.")
    return cpus


#: How long a stop waits for the app to exit after SIGTERM before Docker kills it:
#: Docker's own default, and at most ten minutes (a stop request waits that long).
STOP_GRACE_DEFAULT = 10
STOP_GRACE_MAX = 600


def check_stop_grace(value: object) -> int:
    """Seconds a stop waits after SIGTERM: an integer from 0 (kill at once) to 600."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise RuleError(f"Expected an integer from 0 to {STOP_GRACE_MAX}, got {json_type(value)}.")
    if not 0 <= value <= STOP_GRACE_MAX:
        raise RuleError(f"Expected an integer from 0 to {STOP_GRACE_MAX}.")
    return value


def check_restart(value: object) -> str:
    """Docker's restart policy, one of ``unless-stopped``, ``always``, ``on-failure``, ``no``."""
    text = _expect_str(value)
    if text not in RESTART_POLICIES:
        raise RuleError("Must be one of unless-stopped, always, on-failure, no.")
    return text


def check_health_path(value: object) -> str:
    """An HTTP path (and query) starting with ``/``: printable URL characters only."""
    text = _bounded_str(value, HEALTH_PATH_MAX)
    if not _HEALTH_PATH_RE.fullmatch(text):
        raise RuleError(
            "Must start with / and use URL characters only (no spaces; percent-encode others), "
            "for example /healthz."
        )
    return text


def check_command(value: object) -> tuple[str, ...]:
    """A command as an argv array of strings (never one shell string): 1 to 100 arguments,
    each without NUL and at most 4096 characters, the first not empty."""
    if not isinstance(value, list):
        raise RuleError(
            f'Expected an array of strings (argv, for example ["node", "server.js"]), '
            f"got {json_type(value)}."
        )
    if not 1 <= len(value) <= COMMAND_MAX_ARGS:
        raise RuleError(f"Must have 1 to {COMMAND_MAX_ARGS} arguments.")
    for i, arg in enumerate(value):
        if not isinstance(arg, str):
            raise RuleError(f"Argument {i} must be a string, got {json_type(arg)}.")
        if "\x00" in arg or len(arg) > COMMAND_ARG_MAX:
            raise RuleError(f"Argument {i} must be at most {COMMAND_ARG_MAX} characters, no NUL.")
    if not value[0]:
        raise RuleError("The first argument (the program) must not be empty.")
    return tuple(value)


def check_registry_host(value: object) -> str:
    """A registry as an image reference names it: ``hostname[:port]``, lowercased.

    No scheme, path, user info or whitespace: what Docker would read as the first path
    component of ``<host>/<repository>:<tag>``. ``index.docker.io`` and
    ``registry-1.docker.io`` are Docker Hub, stored as ``docker.io``.
    """
    host = _host_and_port(value, "an image reference (registry.example.com:5000)")
    if not ("." in host or ":" in host or host == "localhost"):
        raise RuleError(
            f"Docker reads {host}/app:1 as a Docker Hub repository, not a registry: give a "
            "host with a '.' or a port, or localhost."
        )
    return DOCKER_HUB if host in _DOCKER_HUB_ALIASES else host


def check_git_host(value: object) -> str:
    """A Git host as a repository URL names it: ``hostname[:port]`` (the port only when
    the URL gives one), lowercased; no scheme, path, user info or whitespace."""
    return _host_and_port(value, "a repository URL (git.example.com, 127.0.0.1:3000)")


def _host_and_port(value: object, where: str) -> str:
    """``hostname[:port]``, lowercased; ``where`` says what names hosts so."""
    text = _bounded_str(value, REGISTRY_HOST_MAX, required=True)
    if "://" in text or "/" in text:
        raise RuleError(f"Expected hostname[:port] as in {where}, without a scheme or a path.")
    if not _REGISTRY_HOST_RE.fullmatch(text):
        raise RuleError(
            "Expected hostname[:port]: dot-separated labels of letters, digits or '-' "
            "(none starting or ending with '-'), then optionally ':' and a port."
        )
    name, _, port = text.partition(":")
    if len(name) > DOMAIN_MAX:
        raise RuleError(f"The hostname must be at most {DOMAIN_MAX} characters.")
    if port and not 1 <= int(port) <= 65535:
        raise RuleError("The port must be from 1 to 65535.")
    return text.lower()


def check_registry_username(value: object) -> str:
    """A registry user name: 1-255 characters, no ``:`` (HTTP basic auth), no control."""
    text = _bounded_str(value, REGISTRY_USERNAME_MAX, required=True)
    if ":" in text:
        raise RuleError("Must not contain ':' (registries use HTTP basic authentication).")
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in text) or text != text.strip():
        raise RuleError("Must not contain control characters or surrounding whitespace.")
    return text


def check_registry_password(value: object) -> str:
    """A registry password or access token: 1-8192 characters, no NUL, kept as given."""
    text = _bounded_str(value, REGISTRY_PASSWORD_MAX, required=True)
    if "\x00" in text:
        raise RuleError("Must not contain NUL.")
    return text


def registry_of(image: str) -> str:
    """The registry host of an image reference, read as Docker reads it.

    The first path component is a registry when it contains ``.`` or ``:`` or is
    ``localhost``; otherwise (``nginx:1.27``, ``org/app:2``) the image is Docker Hub's.
    Returned lowercased, Docker Hub's aliases as ``docker.io``.
    """
    first, slash, _ = image.partition("/")
    if not slash or not ("." in first or ":" in first or first == "localhost"):
        return DOCKER_HUB
    host = first.lower()
    return DOCKER_HUB if host in _DOCKER_HUB_ALIASES else host
