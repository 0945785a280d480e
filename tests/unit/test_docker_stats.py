"""The Docker adapter's reading of a stats sample and of ``/system/df``, on samples shaped
as the Engine sends them (cgroup v1 and v2, a stopped container, counters reset)."""

from __future__ import annotations

from typing import Any

from berth.adapters.docker.runtime import _disk_usage, _stats
from berth.core.models import ContainerStats, DiskUsage
from hypothesis import given
from hypothesis import strategies as st


def _sample(
    used: int, used_before: int, system: int, system_before: int, online: int = 2, **memory: Any
) -> dict[str, Any]:
    return {
        "cpu_stats": {
            "cpu_usage": {"total_usage": used},
            "system_cpu_usage": system,
            "online_cpus": online,
        },
        "precpu_stats": {
            "cpu_usage": {"total_usage": used_before},
            "system_cpu_usage": system_before,
        },
        "memory_stats": memory,
        "pids_stats": {"current": 3},
    }


class TestStats:
    def test_cgroup_v2_as_docker_stats_shows_it(self) -> None:
        """A quarter of the host's CPU time on 2 CPUs is 50 %; memory minus inactive_file."""
        data = _sample(
            1_250_000,
            1_000_000,
            11_000_000,
            10_000_000,
            usage=60_000_000,
            limit=536_870_912,
            stats={"inactive_file": 10_000_000},
        )
        assert _stats(data) == ContainerStats(
            running=True, cpu_percent=50.0, memory_bytes=50_000_000, memory_limit_bytes=536_870_912
        )

    def test_cgroup_v1_cache_and_percpu_count(self) -> None:
        """No online_cpus: the per-CPU list counts them; v1 names total_inactive_file."""
        data = _sample(300, 200, 1200, 1000, usage=4096, stats={"total_inactive_file": 1024})
        del data["cpu_stats"]["online_cpus"]
        data["cpu_stats"]["cpu_usage"]["percpu_usage"] = [150, 150, 0, 0]
        stats = _stats(data)
        assert stats.cpu_percent == 200.0
        assert stats.memory_bytes == 3072

    def test_a_stopped_container_has_no_figures(self) -> None:
        data = {
            "read": "0001-01-01T00:00:00Z",
            "cpu_stats": {"cpu_usage": {"total_usage": 0}, "throttling_data": {}},
            "precpu_stats": {"cpu_usage": {"total_usage": 0}, "throttling_data": {}},
            "memory_stats": {},
            "pids_stats": {},
        }
        assert _stats(data) == ContainerStats(running=False)

    def test_a_first_sample_or_reset_counters_give_no_cpu(self) -> None:
        assert _stats(_sample(100, 0, 1000, 0)).cpu_percent is not None
        assert _stats(_sample(100, 200, 1000, 900)).cpu_percent is None  # counters went back
        assert _stats(_sample(100, 50, 1000, 1000)).cpu_percent is None  # no time passed

    @given(
        before=st.integers(0, 10**15),
        used=st.integers(0, 10**12),
        system_before=st.integers(0, 10**15),
        elapsed=st.integers(1, 10**12),
        online=st.integers(1, 256),
        data=st.data(),
    )
    def test_cpu_is_never_beyond_every_cpu_busy(
        self,
        before: int,
        used: int,
        system_before: int,
        elapsed: int,
        online: int,
        data: st.DataObject,
    ) -> None:
        """The container's CPU time is part of the host's: 0 ≤ cpu ≤ 100 per CPU."""
        spent = data.draw(st.integers(0, min(used, elapsed)))
        sample = _sample(before + spent, before, system_before + elapsed, system_before, online)
        cpu = _stats(sample).cpu_percent
        assert cpu is not None
        assert 0 <= cpu <= online * 100

    @given(usage=st.integers(0, 2**40), cache=st.integers(0, 2**40))
    def test_memory_is_never_negative(self, usage: int, cache: int) -> None:
        stats = _stats(_sample(0, 0, 0, 0, usage=usage, stats={"inactive_file": cache}))
        assert stats.memory_bytes == max(usage - cache, 0)


class TestDiskUsage:
    def test_layers_once_sums_and_unmeasured_volumes(self) -> None:
        data = {
            "LayersSize": 700,
            "Images": [{"Size": 500, "SharedSize": 300}, {"Size": 500, "SharedSize": 300}],
            "Containers": [{"SizeRw": 10}, {"SizeRw": None}, {}],
            "Volumes": [{"UsageData": {"Size": 40}}, {"UsageData": {"Size": -1}}],
            "BuildCache": [{"Size": 5, "Shared": False}, {"Size": 99, "Shared": True}],
        }
        usage = _disk_usage(data)
        assert usage == DiskUsage(
            images=2,
            images_bytes=700,
            containers=3,
            containers_bytes=10,
            volumes=2,
            volumes_bytes=40,
            build_cache_bytes=5,
        )
        assert usage.total_bytes == 755

    def test_an_empty_engine(self) -> None:
        usage = _disk_usage({"LayersSize": 0, "Images": None, "Containers": None})
        assert usage.total_bytes == 0
        assert usage.images == 0
