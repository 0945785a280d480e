"""The schema's patterns and the checks agree: a value the OpenAPI document's schema of a
field allows is one the check takes, and the other way round (issue 27, item 8), but for
what ``BEYOND_SCHEMA`` (tests/integration/test_openapi.py) leaves to the descriptions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from berth.core import builds, types, webhooks
from berth.entrypoints.http.schemas import BuildRequest, GitRequest
from hypothesis import example, given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

_DIGITS = st.from_regex(r"\A0{0,3}[0-9]{1,17}\Z")
_PATHISH = st.text(alphabet="ab./-_@+", max_size=12)


def _validator(kind: Any) -> Draft202012Validator:
    schema = msgspec.json.schema(kind)
    return Draft202012Validator(schema)


def _field(struct: type[msgspec.Struct], name: str) -> Draft202012Validator:
    _, components = msgspec.json.schema_components([struct])
    field = components[struct.__name__]["properties"][name]
    return Draft202012Validator({**field, "$defs": components})


def _takes(check: Callable[[object], object], value: object) -> bool:
    try:
        check(value)
    except (types.RuleError, ValueError):
        return False
    return True


@pytest.mark.parametrize(
    ("kind", "check", "values"),
    [
        pytest.param(
            types.MemoryLimit,
            types.check_memory,
            st.builds(lambda n, u: n + u, _DIGITS, st.sampled_from("bkmgBKMGx")),
            id="memory",
        ),
        pytest.param(
            types.RegistryHost,
            types.check_registry_host,
            st.builds(
                lambda name, port: name + port,
                st.sampled_from(
                    ["r.example.com", "localhost", "LOCALHOST", "reg", "a" * 250 + ".io"]
                ),
                st.sampled_from(["", ":"]) | _DIGITS.map(lambda d: ":" + d),
            ),
            id="registry-host",
        ),
        pytest.param(
            types.ImageRef,
            types.check_image,
            st.builds(
                lambda n, tag: "r.io:5000/" + "a" * n + ":" + tag,
                st.integers(230, 260),
                st.sampled_from(["1", "v1.2", "x" * 128]),
            ),
            id="image",
        ),
        pytest.param(
            types.Volume,
            types.check_volume,
            st.builds(lambda h, c: f"{h}:{c}", _PATHISH, _PATHISH.map(lambda p: "/" + p)),
            id="volume",  # a `..` segment too: the schema says it (schemathesis sent `/..`)
        ),
    ],
)
def test_a_string_the_schema_allows_is_one_the_check_takes(
    kind: Any, check: Callable[[object], object], values: st.SearchStrategy[str]
) -> None:
    """Strings near each rule's edges: the schema and the check agree on every one (a
    volume's guarded host paths are the check's alone)."""
    validator = _validator(kind)

    @given(values)
    def agree(value: str) -> None:
        allowed, taken = validator.is_valid(value), _takes(check, value)
        if kind is types.Volume and allowed and not taken:
            with pytest.raises(types.RuleError, match=r"is refused"):
                check(value)
            return
        assert allowed == taken, value

    agree()


@pytest.mark.parametrize(
    "value", ["/..:/x", "a/..:/x", "..:/x", "/x:/..", "/x:/a/../b:ro", "/srv:/a/..:rw"]
)
def test_a_volume_with_a_dotdot_segment_is_refused_by_both(value: str) -> None:
    """A ``..`` segment in either path: the schema refuses it as the check does
    (schemathesis sent ``/..:/x``, which the schema allowed and berth refused)."""
    assert not _validator(types.Volume).is_valid(value)
    assert not _takes(types.check_volume, value)


@pytest.mark.parametrize("value", ["/..a:/x", "/a..b:/x", "/srv:/...", ".:/data", "a.:/b.."])
def test_dots_that_are_no_dotdot_segment_are_taken_by_both(value: str) -> None:
    """``..`` inside a longer segment, or ``...``, is an ordinary name to both."""
    assert _validator(types.Volume).is_valid(value)
    assert _takes(types.check_volume, value)


@given(st.text(alphabet="ab./-+_lock", min_size=1, max_size=14))
@example("a.lock")
@example("-a")
@example("a/.b")
@example("a./b")
def test_a_git_ref(value: str) -> None:
    """``ref``'s schema is Git's ref rules as ``check_git_ref`` applies them."""
    assert _field(GitRequest, "ref").is_valid(value) == _takes(builds.check_git_ref, value)


@given(st.text(alphabet="ab./-", min_size=1, max_size=12))
@example("..")
@example("a/../b")
@example("/a")
@example("...")
@example("./")
def test_a_build_path(value: str) -> None:
    """``context`` and ``dockerfile`` are relative paths without a ``..`` segment."""
    for name in ("context", "dockerfile"):
        assert _field(BuildRequest, name).is_valid(value) == _takes(
            builds.check_build_path, value
        ), name


@given(
    st.builds(
        lambda scheme, auth, rest: scheme + auth + rest,
        st.sampled_from(["https://", "HTTP://", "ftp://", "https:/"]),
        st.sampled_from(["h.example", "u@h.example", "u:p@h.example", "h.example:8080", "[::1]"]),
        st.sampled_from(["", "/", "/a?b=1", "/a#f", "#", "?x@y"]),
    )
)
def test_a_webhook_url(value: str) -> None:
    """A URL the check takes is valid by the schema; one the schema allows is taken, or
    refused for its host or port only (``BEYOND_SCHEMA``)."""
    allowed = Draft202012Validator(
        {"type": "string", "pattern": webhooks.HTTP_URL_PATTERN}
    ).is_valid(value)
    taken = _takes(webhooks.check_webhook_url, value)
    assert not taken or allowed, value
    if allowed and not taken:
        with pytest.raises(types.RuleError, match=r"host|IP|port|URL"):
            webhooks.check_webhook_url(value)
