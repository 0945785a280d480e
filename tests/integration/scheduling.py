"""How the integration suite's work is handed out to pytest-xdist's workers (``nox -s
integration``: ``-n auto --dist loadfile``).

xdist's ``loadfile`` keeps a module whole on one worker and hands out the modules with
the most tests first. Counting tests says little here: one module of 70 quick SQL tests
takes less time than one of 4 tests that each deploy, kill and restart berth. The suite
ends when its last worker does, so a long module handed out late keeps one worker busy
while the others have nothing left to do. :class:`LongestFirst` keeps ``loadfile``'s
units (a module; a class, for the modules in :data:`BY_CLASS`), and hands out the
longest unit left each time a worker needs work, by :data:`SECONDS` (measured) or, for
a unit not measured yet, its number of tests times :data:`SECONDS_PER_TEST`.

``BERTH_TEST_UNIT_SECONDS=<file>`` makes a run write the seconds each unit took (setup,
call and teardown of its tests, summed), as JSON, to refresh :data:`SECONDS`.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling
from xdist.workermanage import WorkerController

#: Modules whose classes share nothing a class could not build again: each class is a
#: unit of its own (its module fixtures are built on every worker that runs one), so one
#: long module is spread over several workers.
BY_CLASS: frozenset[str] = frozenset()

#: Seconds each unit took on one worker (``BERTH_TEST_UNIT_SECONDS``), the unit as
#: :func:`name_of` names it; those not listed are estimated. Measured 2026-11-28 in one
#: parallel run of the whole suite (3 workers, all passed) on this machine, quiet. The
#: order matters, not the figures.
SECONDS: dict[str, float] = {
    "test_dashboard.py": 199,
    "test_mcp.py": 167,
    "test_dashboard_a11y.py": 163,
    "test_openapi.py": 163,
    "test_teams_sql.py": 130,
    "test_watch.py": 113,
    "test_domains.py": 111,
    "test_scale_out.py": 98,
    "test_monitor_fleet.py": 86,
    "test_dashboard_app_page.py": 84,
    "test_deploy_e2e.py": 80,
    "test_store_outages.py": 79,
    "test_streams.py": 70,
    "test_operations.py": 68,
    "test_webhooks.py": 56,
    "test_revisions_e2e.py": 54,
    "test_sql_jobs.py": 50,
    "test_dashboard_teams.py": 47,
    "test_restart.py": 44,
    "test_usage.py": 42,
    "test_store_model_sql.py": 41,
    "test_sql_store.py": 41,
    "test_cli_client.py": 39,
    "test_install_script.py": 37,
    "test_dashboard_defects.py": 35,
    "test_first_account.py": 35,
    "test_mcp_oauth.py": 35,
    "test_deploy_failures.py": 34,
    "test_rate_limits.py": 34,
    "test_dashboard_live.py": 34,
    "test_ports.py": 33,
    "test_registries.py": 33,
    "test_outbound.py": 32,
    "test_push.py": 29,
    "test_host_paths.py": 29,
    "test_idempotency.py": 27,
    "test_library.py": 27,
    "test_tls.py": 27,
    "test_builds.py": 26,
    "test_revisions.py": 25,
    "test_dashboard_builds.py": 25,
    "test_port_holders.py": 24,
    "test_tokens.py": 22,
    "test_dashboard_phone.py": 22,
    "test_live_events.py": 21,
    "test_host_keys.py": 18,
    "test_transports.py": 17,
    "test_client.py": 16,
    "test_change_server.py": 15,
    "test_sql_dashboard.py": 14,
    "test_rate_limits_shared.py": 13,
    "test_logging.py": 13,
    "test_readme.py": 13,
    "test_newcomer.py": 12,
    "test_webhooks_sql.py": 11,
    "test_ssh_hardening.py": 10,
    "test_teams.py": 9,
    "test_sql_cache.py": 9,
    "test_errors.py": 8,
    "test_api_cost.py": 4,
    "test_webhook_sender.py": 4,
    "test_cross_tenant.py": 4,
    "test_enroll_api.py": 4,
    "test_deploy_caddy.py": 3,
    "test_lists.py": 3,
}

#: The estimate for a test of a unit not in :data:`SECONDS`.
SECONDS_PER_TEST = 3.0


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its module's path, or ``<path>::<Class>`` for a
    test in a class of a module in :data:`BY_CLASS`."""
    path, _, rest = nodeid.partition("::")
    if Path(path).name in BY_CLASS and "::" in rest:
        return f"{path}::{rest.partition('::')[0]}"
    return path


def name_of(unit: str) -> str:
    """How :data:`SECONDS` names ``unit``: its module's file name (``::<Class>``)."""
    path, sep, cls = unit.partition("::")
    return Path(path).name + sep + cls


def seconds_of(unit: str, tests: int) -> float:
    """The expected seconds of ``unit`` (of ``tests`` tests) on one worker."""
    return SECONDS.get(name_of(unit), tests * SECONDS_PER_TEST)


class LongestFirst(LoadScopeScheduling):
    """``loadfile``'s units (:func:`unit_of`), the longest left first."""

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)

    def _assign_work_unit(self, node: WorkerController) -> None:
        longest = max(self.workqueue, key=lambda u: seconds_of(u, len(self.workqueue[u])))
        self.workqueue.move_to_end(longest, last=False)  # the one the base class takes
        super()._assign_work_unit(node)


class UnitSeconds:
    """A plugin (on the process that reports, xdist's controller or a plain run) that sums
    the seconds of each unit's tests and writes them to ``path`` as JSON at the end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[name_of(unit_of(report.nodeid))] += report.duration

    def pytest_sessionfinish(self) -> None:
        ordered = dict(sorted(self.seconds.items(), key=lambda kv: -kv[1]))
        self.path.write_text(json.dumps({k: round(v) for k, v in ordered.items()}, indent=1))


def register_unit_seconds(config: pytest.Config) -> None:
    """Write each unit's seconds where ``BERTH_TEST_UNIT_SECONDS`` says (not on workers)."""
    where = os.environ.get("BERTH_TEST_UNIT_SECONDS")
    if where and not os.environ.get("PYTEST_XDIST_WORKER"):
        config.pluginmanager.register(UnitSeconds(Path(where)), "berth-unit-seconds")
