"""Building from source, in the core: the rules of a deploy's ``build`` (every broken one at
once), the tag a build gives its image, the build log's batches and redaction, and the
pruning of an app's old built images."""

from __future__ import annotations

import asyncio
from uuid import UUID, uuid4

import pytest
from berth.core.builds import (
    BUILT_IMAGES_KEPT,
    build_tag,
    check_build_path,
    check_git_ref,
    check_git_url,
    parse_build,
)
from berth.core.commands import parse_deploy
from berth.core.errors import FieldError, InvalidInput
from berth.core.models import BuiltImage
from berth.core.types import RuleError
from berth.core.use_cases.building import BATCH_LINES, BuildLog, prune_built_images
from berth.core.webhooks import HTTP_URL_PATTERN, URL_MAX, user_info_of
from hypothesis import given
from hypothesis import strategies as st

_SEGMENT = st.from_regex(r"[A-Za-z0-9_@+-][A-Za-z0-9._@+-]{0,10}", fullmatch=True).filter(
    lambda s: s not in (".", "..")
)
_REF = st.from_regex(r"[A-Za-z0-9_+-][A-Za-z0-9_+-]{0,15}", fullmatch=True)


def _errors(raw: object) -> list[FieldError]:
    errors: list[FieldError] = []
    parse_build(raw, "build", errors)
    return errors


class TestBuildRules:
    def test_a_git_build_with_defaults(self) -> None:
        """``{"git": {"url"}}`` builds the default branch, context ``.``, ``Dockerfile``."""
        errors: list[FieldError] = []
        build = parse_build({"git": {"url": "https://git.example.com/a.git"}}, "build", errors)
        assert errors == []
        assert build is not None
        assert build.git is not None
        assert (build.git.ref, build.context, build.dockerfile) == (None, ".", "Dockerfile")

    def test_every_broken_rule_is_named_at_once(self) -> None:
        """Both sources, a bad URL, ref, id, context, dockerfile, target, build argument and
        an unknown field: one error each, at its path."""
        raw = {
            "git": {"url": "ssh://example.com/x", "ref": "a..b", "depth": 1},
            "source_id": "nope",
            "context": "/abs",
            "dockerfile": "../Dockerfile",
            "target": "-x",
            "args": {"1BAD": "v", "OK": "\x00"},
            "cache": True,
        }
        locations = sorted(e.location for e in _errors(raw))
        assert locations == sorted(
            [
                "build.cache",
                "build.source_id",  # both given
                "build.git.depth",
                "build.git.url",
                "build.git.ref",
                "build.source_id",  # not a UUID
                "build.context",
                "build.dockerfile",
                "build.target",
                "build.args.1BAD",
                "build.args.OK",
            ]
        )

    def test_a_build_needs_a_source(self) -> None:
        """Neither git nor sourceId is one error at ``build``."""
        assert [e.location for e in _errors({"context": "."})] == ["build"]

    def test_a_url_with_a_password_is_refused_and_not_echoed_as_is(self) -> None:
        """Credentials in the URL are refused: they belong in git-credentials."""
        errors = _errors({"git": {"url": "https://me:secret@example.com/x.git"}})
        assert [e.location for e in errors] == ["build.git.url"]
        assert "git-credentials" in errors[0].message
        assert errors[0].value == "https://***@example.com/x.git"

    @given(st.from_regex(HTTP_URL_PATTERN, fullmatch=True).filter(lambda u: len(u) <= URL_MAX))
    def test_the_documented_pattern_and_the_rule_agree_on_user_info(self, url: str) -> None:
        """A URL the OpenAPI document's pattern allows is never refused for user info:
        the pattern keeps ``@`` out of the authority, and an ``@`` after it (a query's,
        ``https://host?@x``) is no user's (schemathesis sent one, berth refused it)."""
        assert user_info_of(url) is None

    def test_an_at_sign_in_the_query_is_no_user_info(self) -> None:
        """Only an ``@`` before the authority's end (``/``, ``?`` or ``#``) is a user's."""
        assert check_git_url("https://git.example.com?@x") == "https://git.example.com?@x"
        with pytest.raises(RuleError, match="user or password"):
            check_git_url("https://me@git.example.com?x")

    @given(st.text(min_size=1, max_size=20).filter(lambda t: "@" not in t and "/" not in t))
    def test_a_refused_url_never_echoes_its_user_info(self, secret: str) -> None:
        """Whatever sits before the host's ``@`` is never echoed in the error."""
        errors = _errors({"git": {"url": f"ssh://{secret}@example.com/x.git"}})
        assert [e.location for e in errors] == ["build.git.url"]
        assert errors[0].value == "ssh://***@example.com/x.git"

    @given(st.lists(_SEGMENT, min_size=1, max_size=4))
    def test_relative_paths_are_kept_normalized(self, segments: list[str]) -> None:
        """A relative path without ``..`` is accepted, ``./`` and slashes normalized."""
        path = "/".join(segments)
        assert check_build_path(f"./{path}/") == path

    @given(st.lists(_SEGMENT, max_size=3), st.lists(_SEGMENT, max_size=3))
    def test_a_dotdot_segment_is_always_refused(self, before: list[str], after: list[str]) -> None:
        """``..`` anywhere in a context or Dockerfile path is refused."""
        with pytest.raises(RuleError):
            check_build_path("/".join([*before, "..", *after]))

    @given(st.lists(_REF, min_size=1, max_size=3))
    def test_branch_names_are_refs(self, parts: list[str]) -> None:
        """``feature/x-1``-like names are refs; a leading ``-`` never is (an option)."""
        ref = "/".join(parts)
        if ref.startswith("-"):
            with pytest.raises(RuleError):
                check_git_ref(ref)
        else:
            assert check_git_ref(ref) == ref


class TestDeployTakesImageOrBuild:
    def _deploy(self, **more: object) -> dict[str, object]:
        return {"server_id": str(uuid4()), "name": "shop", **more}

    def test_exactly_one_of_image_and_build(self) -> None:
        """Both is an error at ``build``, neither at ``image``; one of them deploys."""
        with pytest.raises(InvalidInput) as both:
            parse_deploy(self._deploy(image="a:1", build={"source_id": str(uuid4())}))
        assert [e.location for e in both.value.errors] == ["build"]
        with pytest.raises(InvalidInput) as neither:
            parse_deploy(self._deploy())
        assert [e.location for e in neither.value.errors] == ["image"]
        command = parse_deploy(self._deploy(build={"git": {"url": "http://127.0.0.1/x"}}))
        assert command.image is None
        assert command.build is not None

    def test_build_errors_join_the_other_fields(self) -> None:
        """A bad port and a bad build are named together."""
        with pytest.raises(InvalidInput) as refused:
            parse_deploy(self._deploy(port=0, build={"context": ".."}))
        assert {e.location for e in refused.value.errors} == {"port", "build", "build.context"}


def test_the_tag_names_the_app_and_the_deployment() -> None:
    """``berth/<containerName>:<first 12 hex digits of the deployment id>``."""
    deployment = UUID("1f2e3d4c-5b6a-4789-8a0b-c1d2e3f4a5b6")
    assert build_tag("shop", deployment) == "berth/shop:1f2e3d4c5b6a"


class TestBuildLog:
    def test_lines_come_in_one_batch_with_secrets_redacted(self) -> None:
        """Lines written since the last take come as one message; secrets never do."""
        log = BuildLog(["hunter22secret", "short"])
        log.add_secret("gitpassword1")
        log.write("Step 1/2 : FROM base")
        log.write("token=hunter22secret and gitpassword1; short stays")
        assert log.take() == ("Step 1/2 : FROM base\ntoken=[redacted] and [redacted]; short stays")
        assert log.take() is None

    def test_a_flood_is_cut_to_its_last_lines(self) -> None:
        """Past ``BATCH_LINES`` lines, a batch says how many it leaves out."""
        log = BuildLog()
        for i in range(BATCH_LINES + 7):
            log.write(f"line {i}")
        lines = (log.take() or "").split("\n")
        assert lines[0] == "(7 lines of output not shown)"
        assert lines[-1] == f"line {BATCH_LINES + 6}"


class _Images:
    """A runtime with built images: ``untag`` refuses the tags in ``in_use``."""

    def __init__(self, images: list[BuiltImage], in_use: set[str]) -> None:
        self.images = images
        self.in_use = in_use
        self.untagged: list[str] = []

    async def built_images(self, repository: str) -> list[BuiltImage]:
        assert repository == "berth/shop"
        return sorted(self.images, key=lambda i: i.created, reverse=True)

    async def untag(self, reference: str) -> bool:
        if reference in self.in_use:
            return False
        self.untagged.append(reference)
        return True


def test_only_the_newest_built_images_are_kept() -> None:
    """Tags of images beyond the newest ``BUILT_IMAGES_KEPT`` are removed, newest kept;
    a tag Docker refuses to remove (in use) is left and not counted."""
    images = [
        BuiltImage(id=f"sha256:{n}", tags=(f"berth/shop:{n:012x}",), created=n)
        for n in range(BUILT_IMAGES_KEPT + 3)
    ]
    runtime = _Images(images, in_use={"berth/shop:000000000000"})
    removed = asyncio.run(prune_built_images(runtime, "shop"))  # type: ignore[arg-type]
    assert removed == 2
    assert runtime.untagged == ["berth/shop:000000000002", "berth/shop:000000000001"]
