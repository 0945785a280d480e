"""The deploy options' rules (memory, cpus, restart, healthPath, command), as properties."""

from __future__ import annotations

import math
from typing import Any
from uuid import uuid4

import pytest
from berth.core import types
from berth.core.commands import parse_deploy, parse_rollback
from berth.core.errors import InvalidInput
from berth.core.models import RestartPolicy
from berth.core.types import (
    Cpus,
    HealthPath,
    MemoryLimit,
    check_command,
    check_cpus,
    check_health_path,
    check_memory,
    check_restart,
)
from hypothesis import example, given
from hypothesis import strategies as st
from test_rules import converts, refuses

UNITS = {"b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def locations(raw: dict[str, Any]) -> list[str]:
    try:
        parse_deploy(raw)
    except InvalidInput as exc:
        return sorted(e.location for e in exc.errors)
    return []


BASE = {"server_id": str(uuid4()), "name": "app", "image": "app:1"}


class TestMemory:
    @given(st.integers(min_value=0, max_value=10**7), st.sampled_from("bkmgBKMG"))
    def test_unit_strings_are_powers_of_1024(self, digits: int, unit: str) -> None:
        """``<digits><unit>`` is digits times 1024^unit, accepted iff within 6 MiB-1 PiB."""
        expected = digits * UNITS[unit.lower()]
        text = f"{digits}{unit}"
        if types.MEMORY_MIN <= expected <= types.MEMORY_MAX:
            assert check_memory(text) == expected
        else:
            assert refuses(check_memory, text)

    @given(st.integers(min_value=-(2**64), max_value=2**64))
    def test_integers_are_bytes_within_bounds(self, value: int) -> None:
        """An integer is bytes, accepted iff from 6 MiB to 1 PiB."""
        accepted = not refuses(check_memory, value)
        assert accepted == (types.MEMORY_MIN <= value <= types.MEMORY_MAX)

    @given(
        st.one_of(
            st.text(max_size=12).filter(lambda t: not t[:-1].isdigit() or t[-1:] not in UNITS),
            st.floats(),
            st.booleans(),
            st.none(),
            st.lists(st.integers(), max_size=2),
        )
    )
    @example("512 m")
    @example("-5m")
    @example("5mb")
    @example("0x10m")
    @example("1.5g")
    def test_anything_else_is_refused(self, value: object) -> None:
        """Floats, booleans, spaces, signs, two-letter units, decimals: refused."""
        if isinstance(value, str) and value[:-1].isascii() and value[:-1].isdigit():
            return  # a well-formed string, covered above
        assert refuses(check_memory, value)

    @given(st.one_of(st.integers(), st.text(max_size=12)))
    def test_the_alias_never_refuses_what_the_check_accepts(self, value: object) -> None:
        """check_memory accepts → msgspec accepts MemoryLimit (what OpenAPI shows)."""
        if refuses(check_memory, value):
            return
        assert converts(value, MemoryLimit)


class TestCpus:
    @given(st.floats(allow_nan=True, allow_infinity=True))
    def test_floats_in_range_only(self, value: float) -> None:
        """0.01-1024 accepted; NaN, infinities and out of range refused."""
        accepted = not refuses(check_cpus, value)
        assert accepted == (math.isfinite(value) and 0.01 <= value <= 1024)
        if accepted:
            assert converts(value, Cpus)

    @given(st.one_of(st.booleans(), st.text(max_size=5), st.none()))
    def test_non_numbers_are_refused(self, value: object) -> None:
        """Booleans and strings ("0.5") are refused: the API is strict about types."""
        assert refuses(check_cpus, value)

    def test_huge_integer_is_refused_not_an_overflow(self) -> None:
        """An integer beyond a float's range is a rule error, not a crash."""
        assert refuses(check_cpus, 10**400)


class TestRestartHealthCommand:
    @given(st.text(max_size=20))
    def test_restart_is_a_closed_set(self, value: str) -> None:
        """Only Docker's four policies are accepted."""
        accepted = not refuses(check_restart, value)
        assert accepted == (value in {p.value for p in RestartPolicy})

    @given(st.text(max_size=60))
    @example("/healthz?full=1")
    @example("/health check")
    @example("/a\r\nX-Injected: 1")
    @example("healthz")
    def test_health_path_is_a_slash_then_url_characters(self, value: str) -> None:
        """Accepted paths start with / and hold no space, control or non-ASCII character
        (nothing that could split an HTTP request line); the alias agrees."""
        if refuses(check_health_path, value):
            return
        assert value.startswith("/")
        assert value.isascii()
        assert not any(c.isspace() or ord(c) < 32 for c in value)
        assert converts(value, HealthPath)

    @given(st.lists(st.text(max_size=30), min_size=1, max_size=8))
    def test_command_words_round_trip(self, words: list[str]) -> None:
        """An argv array is kept word for word (quotes, $, ;, newlines), never joined."""
        if not words[0] or any("\x00" in w for w in words):
            assert refuses(check_command, words)
            return
        assert check_command(words) == tuple(words)

    @given(st.one_of(st.text(max_size=30), st.none(), st.integers(), st.just([])))
    def test_command_must_be_a_non_empty_array(self, value: object) -> None:
        """A shell string, an empty array and other types are refused."""
        assert refuses(check_command, value)

    def test_command_limits(self) -> None:
        """At most 100 words, each at most 4096 characters, and no non-string word."""
        assert refuses(check_command, ["x"] * 101)
        assert refuses(check_command, ["x", "y" * 4097])
        assert refuses(check_command, ["x", 1])
        assert check_command(["x"] * 100) == ("x",) * 100


class TestParseDeploy:
    def test_every_bad_option_is_named_at_once(self) -> None:
        """Five bad options are five errors, each at its own path; nothing else."""
        raw = BASE | {
            "memory": "lots",
            "cpus": -1,
            "restart": "sometimes",
            "health_path": "x",
            "command": "node server.js",
        }
        assert locations(raw) == ["command", "cpus", "health_path", "memory", "restart"]

    def test_options_reach_the_command(self) -> None:
        """Valid options are parsed into the command; absent ones are defaults."""
        cmd = parse_deploy(
            BASE | {"memory": "1g", "cpus": 2, "restart": "no", "command": ["a", "b c"]}
        )
        assert (cmd.memory, cmd.cpus, cmd.restart, cmd.command) == (
            1024**3,
            2.0,
            RestartPolicy.NO,
            ("a", "b c"),
        )
        plain = parse_deploy(BASE)
        assert (plain.memory, plain.cpus, plain.restart, plain.health_path, plain.command) == (
            None,
            None,
            RestartPolicy.UNLESS_STOPPED,
            None,
            None,
        )

    def test_nulls_mean_absent(self) -> None:
        """``null`` for an option is the default, as for domain."""
        cmd = parse_deploy(BASE | dict.fromkeys(("memory", "cpus", "restart", "command"), None))
        assert cmd.restart is RestartPolicy.UNLESS_STOPPED
        assert cmd.memory is None


class TestParseRollback:
    def test_no_body_means_the_previous_revision(self) -> None:
        """No body (``None``) and ``{}`` both leave the revision to the default."""
        installation = uuid4()
        assert parse_rollback(None, installation).deployment_id is None
        assert parse_rollback({}, installation).deployment_id is None

    @pytest.mark.parametrize(
        ("raw", "where"),
        [
            ({"deployment_id": "nope"}, ["deployment_id"]),
            ({"deployment_id": 5, "x": 1}, ["deployment_id", "x"]),
            ([], [""]),
            ("id", [""]),
        ],
    )
    def test_bad_bodies_are_named(self, raw: object, where: list[str]) -> None:
        """A malformed id, an unknown field, a body that is not an object: all named."""
        with pytest.raises(InvalidInput) as exc:
            parse_rollback(raw, uuid4())
        assert sorted(e.location for e in exc.value.errors) == where


class TestHostPortAndStopGrace:
    @given(st.one_of(st.integers(min_value=-(2**40), max_value=2**40), st.none()))
    def test_host_port_is_the_published_port_without_a_domain(self, value: int | None) -> None:
        """``host_port`` 1-65535 publishes ``port`` on it (absent: ``port`` itself);
        anything else is a 422 at ``host_port``."""
        raw = {**BASE, "port": 8080, "host_port": value}
        if value is not None and not 1 <= value <= 65535:
            assert locations(raw) == ["host_port"]
            return
        cmd = parse_deploy(raw)
        assert cmd.published_port == (8080 if value is None else value)
        assert cmd.port_field == ("port" if value is None else "host_port")

    def test_a_host_port_with_a_domain_is_refused(self) -> None:
        """A domain app publishes no host port of its own: both given is a 422."""
        raw = {**BASE, "domain": "shop.example.com", "host_port": 8080}
        assert locations(raw) == ["host_port"]
        cmd = parse_deploy({**BASE, "domain": "shop.example.com"})
        assert cmd.published_port is None

    @given(st.one_of(st.integers(min_value=-(2**40), max_value=2**40), st.floats(), st.text()))
    @example(0)
    @example(600)
    @example(601)
    @example(True)
    def test_stop_grace_is_whole_seconds_up_to_ten_minutes(self, value: object) -> None:
        """``stop_grace_seconds`` is an integer 0-600 (default 10); else a 422 there."""
        raw = {**BASE, "stop_grace_seconds": value}
        ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 600
        assert locations(raw) == ([] if ok else ["stop_grace_seconds"])
        if ok:
            assert parse_deploy(raw).stop_grace_seconds == value
        assert parse_deploy(BASE).stop_grace_seconds == types.STOP_GRACE_DEFAULT == 10
