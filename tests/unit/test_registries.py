"""Private registries in the core: the host rule, Docker's reading of an image's registry,
the use cases over the fakes (through the bus), and the pull step that uses them."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import pytest
from berth.core.errors import RuntimeFailure
from berth.core.models import DeploymentState, PullProgress, RegistryAuth, User
from berth.core.types import RuleError, check_registry_host, registry_of
from berth.core.use_cases.pulling import describe_progress, explain_pull_failure
from hypothesis import given
from hypothesis import strategies as st
from test_run_deployment import Rig

HOST = "registry.example.com:5000"
IMAGE = f"{HOST}/team/app:1.4"
AUTH = RegistryAuth(host=HOST, username="bot", password="s3cret-token")

labels = st.from_regex(r"[a-z0-9](?:[a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)
hostnames = st.lists(labels, min_size=2, max_size=4).map(".".join)
ports = st.integers(1, 65535)
hosts = st.one_of(hostnames, st.tuples(hostnames, ports).map(lambda hp: f"{hp[0]}:{hp[1]}"))
paths = st.lists(st.from_regex(r"[a-z0-9]{1,8}", fullmatch=True), min_size=1, max_size=3)


class TestHostRule:
    """``check_registry_host``: ``hostname[:port]`` as an image reference names it."""

    @given(hosts)
    def test_every_registry_host_is_accepted_and_lowercased(self, host: str) -> None:
        """A valid host is accepted, lowercased, whatever its case."""
        assert check_registry_host(host.upper()) == host

    @given(hosts, st.sampled_from(["https://", "http://", " ", "user@", "/"]))
    def test_schemes_paths_whitespace_and_user_info_are_refused(self, host: str, junk: str) -> None:
        """Anything but the bare host (a scheme, a path, whitespace, user info) is refused."""
        for text in (junk + host, host + junk, host + "/v2/"):
            with pytest.raises(RuleError):
                check_registry_host(text)

    @pytest.mark.parametrize("host", ["x.io:0", "x.io:65536", "x.io:", "myregistry", "", 5000])
    def test_bad_ports_bare_names_and_non_strings_are_refused(self, host: object) -> None:
        """Port 0 or over 65535, a name Docker would read as a Hub user, a non-string."""
        with pytest.raises(RuleError):
            check_registry_host(host)

    @pytest.mark.parametrize("alias", ["index.docker.io", "registry-1.docker.io", "Docker.IO"])
    def test_docker_hub_aliases_are_docker_io(self, alias: str) -> None:
        """Docker Hub's names are one host: ``docker.io``."""
        assert check_registry_host(alias) == "docker.io"


class TestImageRegistry:
    """``registry_of``: the first component is a registry if it has '.' or ':' or is localhost."""

    @given(hosts, paths, st.from_regex(r"[a-z0-9]{1,8}", fullmatch=True))
    def test_a_host_first_is_the_registry(self, host: str, path: list[str], tag: str) -> None:
        """``host/path:tag`` is pulled from ``host``, the same string the host rule keeps."""
        image = f"{host}/{'/'.join(path)}:{tag}"
        assert registry_of(image) == check_registry_host(host)

    @pytest.mark.parametrize(
        ("image", "registry"),
        [
            ("nginx:1.27", "docker.io"),
            ("library/nginx:1.27", "docker.io"),
            ("org/team/app:2", "docker.io"),
            ("localhost/app:1", "localhost"),
            ("localhost:5000/app:1", "localhost:5000"),
            ("127.0.0.1:5000/app:1", "127.0.0.1:5000"),
            ("GHCR.io/org/app:1", "ghcr.io"),
            ("index.docker.io/library/nginx:1", "docker.io"),
        ],
    )
    def test_as_docker_reads_it(self, image: str, registry: str) -> None:
        """Docker's rule, including Hub images without a registry."""
        assert registry_of(image) == registry


@pytest.fixture
def rig() -> Rig:
    return Rig()


@pytest.fixture
def bob(make_user: Callable[[], Awaitable[User]]) -> Awaitable[User]:
    return make_user()


def test_the_password_is_not_in_the_pulls_credentials_repr() -> None:
    """The credentials a pull sends, printed, never show the password (the use cases of
    both kinds of saved credentials: ``test_host_credentials``)."""
    for shown in (repr(AUTH), str(AUTH), repr([AUTH])):
        assert "s3cret-token" not in shown


class TestPull:
    """Step pull with a registry: credentials, progress, and the cause of a failure."""

    async def test_pulls_with_the_jobs_credentials(self, rig: Rig) -> None:
        """The image's registry's credentials go to the runtime; an event names the user."""
        job = msgspec.structs.replace(rig.job(image=IMAGE), registry_auth=AUTH)
        assert await rig.run(job) is DeploymentState.SUCCEEDED
        assert rig.runtime.pull_auths == [AUTH]
        assert any("credentials saved for user bot" in m for m in rig.jobs.events)
        assert all("s3cret-token" not in m for m in rig.jobs.events)

    async def test_credentials_of_another_host_are_not_sent(self, rig: Rig) -> None:
        """Credentials for another registry than the image's stay home."""
        job = msgspec.structs.replace(rig.job(image="ghcr.io/org/app:1"), registry_auth=AUTH)
        await rig.run(job)
        assert rig.runtime.pull_auths == [None]

    async def test_progress_is_reported_at_a_bounded_rate(self, rig: Rig) -> None:
        """Many progress reports become at most one event per interval, plus the last."""
        rig.timeouts = msgspec.structs.replace(rig.timeouts, pull=5.0)
        rig.runtime.pull_progress = [
            PullProgress(layers=3, layers_done=i // 100, bytes_done=i * 1000, bytes_total=300_000)
            for i in range(300)
        ]
        rig.runtime.pull_step_seconds = 0.001
        interval = rig.progress_seconds = 0.05
        job = rig.job(image=IMAGE)
        started = time.monotonic()
        assert await rig.run(job) is DeploymentState.SUCCEEDED
        elapsed = time.monotonic() - started
        progress = [m for m in rig.jobs.events if m.startswith("Pulling: ")]
        assert progress, rig.jobs.events
        assert len(progress) <= elapsed / interval + 1  # the rule, however slow the machine
        assert len(progress) < len(rig.runtime.pull_progress)  # (was < 30: 35 under load)
        assert f"Pulled {IMAGE}: 3 layers, 0.3 MB downloaded." in rig.jobs.events

    @pytest.mark.parametrize(
        ("kind", "starts"),
        [
            ("image-not-found", "not found: "),
            ("registry-unauthorized", "unauthorized: "),
            ("registry-unreachable", "registry unreachable: "),
            ("runtime-failure", "Pulling"),
        ],
    )
    async def test_a_failed_pull_names_its_cause(self, rig: Rig, kind: str, starts: str) -> None:
        """The error says which cause it was first, then quotes Docker."""
        rig.runtime.failures["pull"] = f"Pulling {IMAGE} failed: docker says no"
        rig.runtime.failure_kinds["pull"] = kind
        assert await rig.run(rig.job(image=IMAGE)) is DeploymentState.FAILED
        _, error = rig.outcome
        assert error is not None
        assert error.startswith(f"pull: {starts}"), error
        assert "docker says no" in error
        assert "create" not in rig.runtime.ops()

    def test_an_unreachable_registry_says_to_check_the_image_name(self) -> None:
        """A registry that did not answer (a mistyped image's DNS error, issue 28): the
        message says what to check in words before Docker's."""
        failure = RuntimeFailure("dial tcp: lookup registry-1.docker.io: no such host")
        failure = RuntimeFailure(failure.detail, kind="registry-unreachable")
        said = explain_pull_failure("ngnix:1.27", None, failure)
        assert said.startswith("registry unreachable: docker.io did not answer")
        assert "Check the image's name and tag" in said
        assert said.index("Check") < said.index("no such host")

    def test_unauthorized_without_credentials_says_how_to_save_them(self) -> None:
        """No credentials saved: the message names the command that saves them."""
        failure = RuntimeFailure("denied", kind="registry-unauthorized")
        assert f"berth registries add {HOST}" in explain_pull_failure(IMAGE, None, failure)
        assert "(user bot)" in explain_pull_failure(IMAGE, "bot", failure)

    def test_progress_reads_as_layers_and_megabytes(self) -> None:
        """Layers done of seen, and megabytes once sizes are known."""
        assert describe_progress(PullProgress(layers=5, layers_done=2)) == (
            "Pulling: 2 of 5 layers done."
        )
        shown = describe_progress(
            PullProgress(layers=5, layers_done=2, bytes_done=12_300_000, bytes_total=40_100_000)
        )
        assert shown == "Pulling: 2 of 5 layers done, 12.3 of 40.1 MB."


class TestAuthHeader:
    """The docker adapter's ``X-Registry-Auth``: base64url JSON, anonymous when none."""

    def test_header_carries_the_credentials(self) -> None:
        """username, password and serveraddress, base64url-encoded JSON."""
        from berth.adapters.docker.runtime import _auth_header

        decoded = json.loads(base64.urlsafe_b64decode(_auth_header(AUTH)))
        assert decoded == {"username": "bot", "password": "s3cret-token", "serveraddress": HOST}
        hub = RegistryAuth(host="docker.io", username="u", password="p")
        assert json.loads(base64.urlsafe_b64decode(_auth_header(hub)))["serveraddress"] == (
            "https://index.docker.io/v1/"
        )
        assert json.loads(base64.urlsafe_b64decode(_auth_header(None))) == {}

    @pytest.mark.parametrize(
        ("docker_says", "kind"),
        [
            ("unauthorized: authentication required", "registry-unauthorized"),
            (
                'Head "http://127.0.0.1:5000/v2/a/manifests/1": no basic auth credentials',
                "registry-unauthorized",
            ),
            (
                "pull access denied for x, repository does not exist or may require 'docker login'",
                "registry-unauthorized",
            ),
            (
                "manifest for 127.0.0.1:5000/a:nope not found: manifest unknown: manifest unknown",
                "image-not-found",
            ),
            (
                'Get "http://127.0.0.1:5000/v2/": dial tcp 127.0.0.1:5000: '
                "connect: connection refused",
                "registry-unreachable",
            ),
            (
                "Get https://registry-1.docker.io/v2/: dial tcp: "
                "lookup registry-1.docker.io: no such host",
                "registry-unreachable",
            ),
            ("write /var/lib/docker/tmp: no space left on device", "runtime-failure"),
        ],
    )
    def test_dockers_words_map_to_a_cause(self, docker_says: str, kind: str) -> None:
        """Docker's messages (as seen from a real registry) map to the three causes."""
        from berth.adapters.docker.runtime import _pull_failure

        assert _pull_failure(docker_says) == kind

    def test_tally_counts_layers_and_bytes(self) -> None:
        """Layers seen and done, and bytes downloaded, from Docker's progress messages."""
        from berth.adapters.docker.runtime import _PullTally

        tally = _PullTally()
        messages: list[dict[str, Any]] = [
            {"status": "Pulling from team/app", "id": "1.4"},
            {"status": "Already exists", "id": "a"},
            {"status": "Pulling fs layer", "id": "b"},
            {"status": "Downloading", "id": "b", "progressDetail": {"current": 500, "total": 2000}},
            {"status": "Download complete", "id": "b"},
            {"status": "Pull complete", "id": "b"},
            {"status": "Digest: sha256:00"},
        ]
        about_layers = [tally.add(m) for m in messages]
        assert about_layers == [False, True, True, True, True, True, False]
        assert tally.progress() == PullProgress(
            layers=2, layers_done=2, bytes_done=2000, bytes_total=2000
        )
