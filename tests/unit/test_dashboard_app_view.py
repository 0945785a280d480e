"""What an app's page shows: what each revision changed, its duration, a failed
deployment's captured output and the port it names, a log line's time."""

from __future__ import annotations

from datetime import timedelta
from uuid import uuid4

import builders
import msgspec
from berth.core.models import (
    BuildSpec,
    Deployment,
    DeploymentEvent,
    DeploymentSpec,
    DeploymentState,
    GitSource,
    RestartPolicy,
)
from berth.core.redaction import redact_line
from berth.entrypoints.http.dashboard.app_view import (
    changes,
    duration,
    log_line,
    port_hint,
    revisions,
)
from fakes import EPOCH
from hypothesis import given
from hypothesis import strategies as st

SPEC = DeploymentSpec(
    image="shop:1", port=8080, domain=None, env_keys=("A", "B"), volumes=("data:/data",)
)


def deployment(
    spec: DeploymentSpec = SPEC,
    state: DeploymentState = DeploymentState.SUCCEEDED,
    events: tuple[DeploymentEvent, ...] = (),
    seconds: int = 12,
) -> Deployment:
    return builders.a_deployment(
        spec=spec,
        state=state,
        created_at=EPOCH,
        started_at=EPOCH,
        finished_at=EPOCH + timedelta(seconds=seconds) if state.is_final else None,
        events=events,
    )


def spec(**changed: object) -> DeploymentSpec:
    fields = {f: getattr(SPEC, f) for f in SPEC.__struct_fields__}
    return DeploymentSpec(**(fields | changed))  # type: ignore[arg-type]


class TestChanges:
    def test_first_deployment(self) -> None:
        """A revision with none before it is the first deployment."""
        assert changes(SPEC, None) == ["First deployment."]

    def test_each_changed_setting_is_named(self) -> None:
        """Image, port, domain, env names, volumes and options each say before → after."""
        new = spec(
            image="shop:2",
            port=9090,
            domain="shop.example.com",
            env_keys=("B", "C"),
            volumes=(),
            memory=256 * 1024 * 1024,
            restart=RestartPolicy.ALWAYS,
        )
        assert changes(new, SPEC) == [
            "Image: shop:1 → shop:2",
            "Port: 8080 → 9090",
            "Domain: none → shop.example.com",
            "Env added: C",
            "Env removed: A",
            "Volumes removed: data:/data",
            "Memory: no limit → 256 MiB",
            "Restart: unless-stopped → always",
        ]

    def test_nothing_changed(self) -> None:
        """The same spec again says no setting changed."""
        assert changes(SPEC, SPEC) == ["No setting changed (env values are not compared)."]

    @given(
        st.integers(1, 65535),
        st.integers(1, 65535),
        st.lists(st.sampled_from("ABCDEF"), unique=True),
        st.lists(st.sampled_from("ABCDEF"), unique=True),
    )
    def test_a_setting_is_named_iff_it_changed(
        self, port: int, other: int, keys: list[str], others: list[str]
    ) -> None:
        """The port is named exactly when it changed; each env name added or removed
        is named, and nothing is said of an unchanged spec."""
        old, new = spec(port=port, env_keys=tuple(keys)), spec(port=other, env_keys=tuple(others))
        said = changes(new, old)
        assert any(s.startswith("Port:") for s in said) == (port != other)
        for key in set(keys) ^ set(others):
            assert any(key in s for s in said if s.startswith("Env"))
        assert changes(old, old) == ["No setting changed (env values are not compared)."]


class TestRevisions:
    def test_duration_and_current_and_rollback(self) -> None:
        """Each revision says what it changed from the next older one, how long it took;
        an earlier succeeded one (not the current) can be rolled back to."""
        old, new = deployment(), deployment(spec(port=9090), seconds=75)
        listed = revisions([new, old], None, new.id, EPOCH)
        assert [r.changes for r in listed] == [["Port: 8080 → 9090"], ["First deployment."]]
        assert [r.duration for r in listed] == ["1 min 15 s", "12 s"]
        assert [r.can_roll_back for r in listed] == [False, True]
        assert listed[0].current

    def test_running_deployment_duration_runs_to_now(self) -> None:
        """A deployment still running has been running until now."""
        running = deployment(state=DeploymentState.RUNNING)
        assert duration(running, EPOCH + timedelta(seconds=3)) == "3 s"

    def test_a_failed_deployments_output_and_port_hint(self) -> None:
        """The output a failed deployment captured is its ``log:`` events; when it names
        a port the app listens on other than the one deployed with, a hint says so."""
        events = (
            DeploymentEvent(at=EPOCH, step="health", message="Waiting for port 8080."),
            DeploymentEvent(at=EPOCH, step="health", message="log: echo v1: listening on 3000"),
        )
        failed = deployment(state=DeploymentState.FAILED, events=events)
        (shown,) = revisions([failed], None, None, EPOCH)
        assert shown.output == ["echo v1: listening on 3000"]
        assert [e.message for e in shown.steps] == ["Waiting for port 8080."]
        assert shown.hint is not None
        assert "listening on 3000" in shown.hint
        assert "deployed with port 8080" in shown.hint
        assert not shown.can_roll_back

    def test_a_builds_output_is_its_build_log(self) -> None:
        """A build's events (step ``build``) are its build log, a line each; its steps list
        the build once, by its first event, and the output lines not at all."""
        at = EPOCH
        events = (
            DeploymentEvent(at=at, step="connect", message="Connected."),
            DeploymentEvent(at=at, step="build", message="Building berth/shop:abc from x."),
            DeploymentEvent(at=at, step="build", message="Building commit 0123."),
            DeploymentEvent(at=at, step="build", message="Step 1/2 : FROM echo\n ---> 1f2e"),
            DeploymentEvent(at=at, step="build", message="Successfully built 1f2e"),
            DeploymentEvent(at=at, step="create", message="Creating the container."),
        )
        running = deployment(state=DeploymentState.RUNNING, events=events)
        (shown,) = revisions([running], None, None, EPOCH)
        assert shown.build_log == [
            "Building berth/shop:abc from x.",
            "Building commit 0123.",
            "Step 1/2 : FROM echo",
            " ---> 1f2e",
            "Successfully built 1f2e",
        ]
        assert [e.message for e in shown.steps] == [
            "Connected.",
            "Building berth/shop:abc from x.",
            "Creating the container.",
        ]
        (plain,) = revisions([deployment()], None, None, EPOCH)
        assert plain.build_log == []

    def test_a_new_commit_and_another_branch_are_named(self) -> None:
        """A build from another commit says so (short ids), and one from another ref too."""
        git = BuildSpec(git=GitSource(url="https://git.example.com/s.git", ref="main"))
        old = msgspec.structs.replace(
            deployment(spec(image="berth/shop:aaa", build=git)), commit="b" * 40
        )
        moved = BuildSpec(git=GitSource(url="https://git.example.com/s.git", ref="dev"))
        new = msgspec.structs.replace(
            deployment(spec(image="berth/shop:bbb", build=moved)), commit="a" * 40
        )
        newest, _ = revisions([new, old], None, new.id, EPOCH)
        assert newest.changes == [
            "Image: berth/shop:aaa → berth/shop:bbb",
            "Source: https://git.example.com/s.git at main → https://git.example.com/s.git at dev",
            f"Commit: {'b' * 12} → {'a' * 12}",
        ]
        again = msgspec.structs.replace(new, id=uuid4())
        latest, _, _ = revisions([again, new, old], None, again.id, EPOCH)
        assert latest.changes == ["No setting changed (env values are not compared)."]


class TestPortHint:
    def test_same_port_no_hint(self) -> None:
        """Output naming the deployed port says nothing."""
        assert port_hint(["Listening on :8080"], 8080) is None

    def test_addresses_and_words(self) -> None:
        """Ports in ``host:port`` addresses and after listen/port words are found."""
        assert port_hint(["Server running at http://0.0.0.0:5000/"], 8080)
        assert port_hint(["bound to port 4000"], 8080)
        assert port_hint(["listening on [::]:3001"], 8080)
        assert port_hint(["echo v1: listening on 3000"], 8080)
        assert port_hint(["PORT=5173"], 8080)

    def test_unrelated_numbers_are_not_ports(self) -> None:
        """Numbers that are not a listening port give no hint."""
        assert port_hint(["loaded 3000 records in 12 ms", "version 1.2.3"], 8080) is None
        assert port_hint(["running with 16 workers", "started 2024-01-01"], 8080) is None


class TestLogLine:
    def test_docker_time_is_split_off(self) -> None:
        """Docker's RFC 3339 nanosecond time becomes UTC seconds; the text follows."""
        line = log_line("2026-11-25T06:03:36.123456789Z echo v1: listening on 57845")
        assert line.at == "2026-11-25T06:03:36+00:00"
        assert line.text == "echo v1: listening on 57845"

    def test_search_marks_matching_lines(self) -> None:
        """A query marks the lines that contain it, ignoring case."""
        assert log_line("2026-11-25T06:03:36Z Hello", "hello").matches
        assert not log_line("2026-11-25T06:03:36Z Hello", "bye").matches

    def test_a_line_without_time_is_kept_whole(self) -> None:
        """A line without Docker's time is shown as it is."""
        assert log_line("plain").text == "plain"
        assert log_line("plain").at is None

    def test_redaction_never_eats_the_time(self) -> None:
        """A digits-only env value is redacted from the text, not from Docker's time."""
        redacted = redact_line("2026-11-25T06:03:36.123456789Z pin 123456", {"PIN": "123456"}, True)
        assert redacted == "2026-11-25T06:03:36.123456789Z pin [redacted]"
