"""camelCase at the HTTP edge only: ``wire.to_core``/``to_wire`` and ``parse_body``."""

from __future__ import annotations

import re
from typing import Any

import pytest
import strategies as s
from berth.core.commands import parse_create_server, parse_deploy, parse_enroll
from berth.core.errors import InvalidInput
from berth.entrypoints.http.schemas import CreateServerRequest, DeployRequest, EnrollRequest
from berth.entrypoints.http.wire import parse_body, to_core, to_wire
from hypothesis import given
from hypothesis import strategies as st

CAMEL = re.compile(r"^[a-z][A-Za-z0-9]*$")


class TestToCore:
    def test_wire_names_become_core_names(self) -> None:
        """``serverId`` becomes ``server_id``; env keys, which are the user's, are kept."""
        raw = {"serverId": "x", "env": {"serverId": "1", "A_B": "2"}, "name": "n"}
        core, errors = to_core(raw, DeployRequest, "body")
        assert core == {"server_id": "x", "env": {"serverId": "1", "A_B": "2"}, "name": "n"}
        assert errors == []

    def test_core_names_on_the_wire_are_unknown(self) -> None:
        """``server_id`` is not a wire name: as unknown as a typo, and never echoed."""
        core, errors = to_core({"server_id": "x", "sever": "y"}, DeployRequest, "body")
        assert core == {}
        assert [(e.location, e.message, e.value) for e in errors] == [
            ("body.server_id", "Unknown field.", None),
            ("body.sever", "Unknown field.", None),
        ]

    def test_whole_floats_in_integer_fields_are_integers(self) -> None:
        """``8080.0`` (JSON Schema's ``integer`` admits it) is ``8080`` wherever the field
        is an integer, nested ones too; a float field keeps its float, and a fraction is
        left for the core to refuse."""
        raw = {"port": 8080.0, "hostPort": 9000.0, "stopGraceSeconds": 5.0, "memory": 6291456.0}
        core, errors = to_core({**raw, "cpus": 1.0, "name": "n"}, DeployRequest, "body")
        assert errors == []
        assert core == {
            "port": 8080, "host_port": 9000, "stop_grace_seconds": 5, "memory": 6291456,
            "cpus": 1.0, "name": "n",
        }  # fmt: skip
        assert all(type(core[k]) is int for k in ("port", "host_port", "stop_grace_seconds"))
        assert type(core["cpus"]) is float
        enrolled, _ = to_core({"sshPort": 22.0, "facts": {"cpus": 4.0}}, EnrollRequest, "body")
        assert enrolled == {"ssh_port": 22, "facts": {"cpus": 4}}
        assert to_core({"port": 8080.5}, DeployRequest, "body")[0] == {"port": 8080.5}

    def test_null_where_the_schema_takes_none_is_refused(self) -> None:
        """``"restart": null`` (the schema's ``restart`` is not nullable) is an error at
        its field, not the default; a nullable field's null passes to the core."""
        raw = {"restart": None, "stopGraceSeconds": None, "domain": None, "name": "n"}
        core, errors = to_core(raw, DeployRequest, "body")
        assert core == {"domain": None, "name": "n"}
        assert [(e.location, e.value) for e in errors] == [
            ("body.restart", None),
            ("body.stopGraceSeconds", None),
        ]
        assert all("null" in e.message for e in errors)

    def test_nested_structs_are_renamed_too(self) -> None:
        """An enrollment's ``facts.dockerVersion`` is the core's ``facts.docker_version``."""
        raw = {"hostKeys": [], "facts": {"dockerVersion": "27", "kernel": "6"}}
        core, errors = to_core(raw, EnrollRequest, "body")
        assert core == {"host_keys": [], "facts": {"docker_version": "27"}}
        assert [e.location for e in errors] == ["body.facts.kernel"]

    @pytest.mark.parametrize("raw", [None, [], "x", 5])
    def test_a_non_object_is_left_to_the_core(self, raw: object) -> None:
        """Only objects are renamed; the core's parser says what else is wrong."""
        assert to_core(raw, DeployRequest, "body") == (raw, [])


class TestToWire:
    @pytest.mark.parametrize(
        ("path", "wire"),
        [
            ("", "body"),
            ("server_id", "body.serverId"),
            ("env.my_KEY", "body.env.my_KEY"),
            ("volumes[3]", "body.volumes[3]"),
            ("port", "body.port"),
        ],
    )
    def test_core_paths_are_api_locations(self, path: str, wire: str) -> None:
        """The first segment is renamed; what follows a plain field (a key, an index) is not."""
        assert to_wire(path, DeployRequest, "body") == wire

    def test_nested_paths(self) -> None:
        """A path into a nested Struct is renamed at each level."""
        assert to_wire("facts.memory_bytes", EnrollRequest, "body") == "body.facts.memoryBytes"
        assert to_wire("ssh_port", CreateServerRequest, "body") == "body.sshPort"

    @given(s.deploy_bodies())
    def test_round_trip_of_valid_bodies(self, body: dict[str, Any]) -> None:
        """A valid wire body parses through the edge into the command the core builds."""
        core, errors = to_core(body, DeployRequest, "body")
        assert errors == []
        assert parse_body(body, DeployRequest, parse_deploy) == parse_deploy(core)

    @given(
        st.dictionaries(
            st.sampled_from(["serverId", "name", "image", "port", "env", "x"]),
            st.one_of(s.non_strings, st.text(max_size=5)),
        )
    )
    def test_every_location_is_in_wire_words(self, body: dict[str, Any]) -> None:
        """Whatever is wrong, every location is ``body`` or ``body.<camelCase>…``."""
        try:
            parse_body(body, DeployRequest, parse_deploy)
        except InvalidInput as exc:
            for error in exc.errors:
                assert error.location == "body" or error.location.startswith("body.")
                head = re.split(r"[.\[]", error.location.removeprefix("body."), maxsplit=1)[0]
                assert error.location == "body" or CAMEL.match(head), error.location


class TestParseBody:
    def test_every_error_at_once_with_the_requests_own(self) -> None:
        """Unknown fields, the core's errors and the request's other errors, in one list."""
        from berth.core.errors import FieldError

        extra = [FieldError("query.wait", "Expected whole seconds.", "0")]
        with pytest.raises(InvalidInput) as caught:
            parse_body(
                {"name": "", "sshPort": "22", "bogus": 1},
                CreateServerRequest,
                parse_create_server,
                extra=extra,
            )
        assert [e.location for e in caught.value.errors] == [
            "body.bogus",
            "body.name",
            "body.sshPort",
            "query.wait",
        ]

    def test_errors_elsewhere_refuse_a_valid_body(self) -> None:
        """A valid body with a bad header or query is still refused, all errors listed."""
        from berth.core.errors import FieldError

        with pytest.raises(InvalidInput) as caught:
            parse_body(
                {"hostKeys": ["ssh-ed25519 AAAA"]},
                EnrollRequest,
                parse_enroll,
                extra=[FieldError("header.X", "No.", None)],
            )
        assert caught.value.errors[-1].location == "header.X"
