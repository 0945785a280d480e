"""Operating berth: restoring a backup (its rules, against a fake archive), and the
metered job queue that times steps and counts takeovers."""

from __future__ import annotations

import string
from datetime import datetime, timedelta
from pathlib import Path
from uuid import uuid4

import msgspec
import pytest
from berth.adapters.metrics import MeteredJobQueue, PrometheusMetrics
from berth.core.errors import Conflict, InvalidInput, NotFound
from berth.core.models import DeploymentEvent, DeploymentState, Ending, Job, StoreArchiveInfo
from berth.core.use_cases import BackUpStore, RestoreStore
from berth.entrypoints.http.metrics import bears
from fakes import EPOCH, FakeArchive, FakeBox
from hypothesis import assume, given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from test_run_deployment import a_job, a_server

FILE = Path("/backups/berth.db")


def _backup(box: FakeBox | None = None, version: str = "0002") -> FakeArchive:
    archive = FakeArchive()
    sample = (box or FakeBox()).seal(b"{}")
    archive.files[FILE] = StoreArchiveInfo(schema_version=version, users=1, sealed_sample=sample)
    return archive


class TestRestoreStore:
    async def test_a_backup_with_its_key_is_restored(self) -> None:
        """The right key, a known version, an empty data dir: the store is the backup."""
        archive = _backup()
        info = await RestoreStore(archive, FakeBox())(FILE)
        assert archive.store == info
        assert info.users == 1

    async def test_an_older_schema_is_restored(self) -> None:
        """A backup of an earlier schema version is fine (migrated at start)."""
        archive = _backup(version="0001")
        await RestoreStore(archive, FakeBox())(FILE)
        assert archive.store is not None

    @pytest.mark.parametrize(
        ("box", "field"), [(FakeBox(b"another"), "secret_key"), (None, "secret_key")]
    )
    async def test_a_wrong_or_missing_key_is_refused(self, box: FakeBox | None, field: str) -> None:
        """Another key, or none for a backup with sealed values: 422 on secret_key, nothing
        restored."""
        archive = _backup()
        with pytest.raises(InvalidInput) as raised:
            await RestoreStore(archive, box)(FILE)
        assert [e.location for e in raised.value.errors] == [field]
        assert archive.store is None

    async def test_a_backup_with_nothing_sealed_needs_no_key(self) -> None:
        """No sealed value in it: restored without a key."""
        archive = FakeArchive()
        archive.files[FILE] = StoreArchiveInfo(schema_version="0002")
        await RestoreStore(archive, None)(FILE)
        assert archive.store is not None

    @pytest.mark.parametrize("version", [None, "0003", "9999"])
    async def test_not_berth_or_an_unknown_version_is_refused(self, version: str | None) -> None:
        """Not a berth database, or a schema this berth does not know: refused on file."""
        archive = _backup(version="x")
        archive.files[FILE] = StoreArchiveInfo(schema_version=version)
        with pytest.raises(InvalidInput) as raised:
            await RestoreStore(archive, FakeBox())(FILE)
        assert [e.location for e in raised.value.errors] == ["file"]
        assert archive.store is None

    async def test_a_data_dir_with_a_store_is_refused_unless_forced(self) -> None:
        """A store already there: Conflict, unchanged; with force, replaced."""
        archive = _backup()
        before = StoreArchiveInfo(schema_version="0002", users=7)
        archive.store = before
        with pytest.raises(Conflict):
            await RestoreStore(archive, FakeBox())(FILE)
        assert archive.store is before
        await RestoreStore(archive, FakeBox())(FILE, force=True)
        assert archive.store == archive.files[FILE]

    async def test_a_missing_file_is_not_found(self) -> None:
        """No such backup: NotFound."""
        with pytest.raises(NotFound):
            await RestoreStore(FakeArchive(), FakeBox())(Path("/nope.db"))


class TestBackUpStore:
    async def test_backs_up_and_describes_the_copy(self) -> None:
        """The copy is described by what it holds; a second one to the same file: Conflict."""
        archive = FakeArchive(store=StoreArchiveInfo(schema_version="0002", users=3))
        info = await BackUpStore(archive)(FILE)
        assert info.users == 3
        with pytest.raises(Conflict):
            await BackUpStore(archive)(FILE)


class _Queue:
    """Just enough of a JobQueue for the meter: claims hand out ``attempts``."""

    def __init__(self, attempts: int) -> None:
        self.attempts = attempts

    async def claim(self, worker_id: str, now: datetime, lease_until: datetime, **_: object) -> Job:
        job = a_job(a_server())
        deployment = msgspec.structs.replace(job.deployment, attempts=self.attempts)
        return msgspec.structs.replace(job, deployment=deployment)

    async def progress(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        return None

    async def finish(self, *args, **kwargs) -> bool:  # type: ignore[no-untyped-def]
        return True


def _samples(metrics: PrometheusMetrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    from prometheus_client import generate_latest

    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


class TestMeteredJobQueue:
    async def test_each_step_is_timed_until_the_next_or_the_end(self) -> None:
        """Entering pull, then create (an event between), then health with the end's own
        events, then the end: one observation each for pull, create and health."""
        metrics = PrometheusMetrics()
        queue = MeteredJobQueue(_Queue(1), metrics)  # type: ignore[arg-type]
        deployment = uuid4()

        def events(step: str) -> list[DeploymentEvent]:
            return [DeploymentEvent(at=EPOCH, step=step, message="m")]

        await queue.progress(deployment, "w", events("pull"), step="pull")
        await queue.progress(deployment, "w", events("pull"))
        await queue.progress(deployment, "w", events("create"), step="create")
        ending = Ending(
            state=DeploymentState.SUCCEEDED,
            at=EPOCH,
            error=None,
            message="done",
            events=tuple(events("health")),
            step="health",
        )
        await queue.finish(deployment, "w", ending)
        seen = _samples(metrics)
        name = "berth_deployment_step_duration_seconds_count"
        for step in ("pull", "create", "health"):
            assert seen[(name, frozenset({("step", step)}))] == 1
        assert (name, frozenset({("step", "retire")})) not in seen

    async def test_a_claim_of_a_later_attempt_is_a_takeover(self) -> None:
        """A claim handing out attempt 2 counts one takeover; attempt 1 counts none."""
        metrics = PrometheusMetrics()
        await MeteredJobQueue(_Queue(1), metrics).claim("w", EPOCH, EPOCH)  # type: ignore[arg-type]
        assert _samples(metrics)[("berth_lease_takeovers_total", frozenset())] == 0
        await MeteredJobQueue(_Queue(2), metrics).claim("w", EPOCH, EPOCH)  # type: ignore[arg-type]
        assert _samples(metrics)[("berth_lease_takeovers_total", frozenset())] == 1

    def test_store_counts_render_with_every_state(self) -> None:
        """The store's counts come out as gauges, with the oldest queued one's age."""
        from berth.core.models import ServerStatus, StoreCounts

        counts = StoreCounts(
            deployments=dict.fromkeys(DeploymentState, 0) | {DeploymentState.FAILED: 3},
            servers=dict.fromkeys(ServerStatus, 0) | {ServerStatus.ONLINE: 2},
            queued=4,
            oldest_queued_at=EPOCH,
        )
        text = PrometheusMetrics().render(counts, EPOCH + timedelta(seconds=90)).decode()
        seen = {
            (s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }
        assert seen[("berth_deployments_finished", frozenset({("state", "failed")}))] == 3
        assert seen[("berth_deployments_finished", frozenset({("state", "succeeded")}))] == 0
        assert ("berth_deployments_finished", frozenset({("state", "queued")})) not in seen
        assert seen[("berth_servers", frozenset({("status", "online")}))] == 2
        assert seen[("berth_queue_depth", frozenset())] == 4
        assert seen[("berth_queue_oldest_age_seconds", frozenset())] == 90


class TestMetricsToken:
    @given(token=st.text(alphabet=string.ascii_letters + string.digits + "-_", min_size=1))
    def test_the_token_as_bearer_is_accepted(self, token: str) -> None:
        """``Bearer <token>`` (any case of the scheme) is accepted."""
        assert bears(f"Bearer {token}", token)
        assert bears(f"bearer {token}", token)

    @given(
        token=st.text(alphabet=string.ascii_letters + string.digits, min_size=1),
        header=st.text(),
    )
    def test_anything_else_is_refused(self, token: str, header: str) -> None:
        """A header that is not ``Bearer <token>`` (another token, another scheme, the bare
        token, a prefix of it) is refused."""
        assume(header.partition(" ")[2].strip() != token)
        assert not bears(header, token)
        assert not bears(token, token)
        assert not bears(f"Basic {token}", token)
        assert not bears(f"Bearer {token[:-1]}", token)
