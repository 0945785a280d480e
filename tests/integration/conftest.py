"""Fixtures that start the real thing: ``berth serve`` on temp data dirs; and how the
suite runs in parallel (pytest-xdist, ``nox -s integration``)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from berth.adapters.secrets import KeyBox
from berth.adapters.sql import SqlUnitOfWorkFactory
from harness import Api, BerthProcess
from scheduling import LongestFirst, register_unit_seconds
from sql_support import KEY, engine_on
from sqlalchemy.ext.asyncio import AsyncEngine

# -- Running in parallel (pytest-xdist) -------------------------------------------------
#
# `nox -s integration` runs the suite with `-n auto --dist loadfile`: a module runs whole
# on one worker (its module fixtures are built once, its tests keep their order); a
# worker that needs work gets the longest module left (`scheduling.LongestFirst`, by the
# seconds each took when measured). Each worker is a test run of its own
# as `infra` defines one: its own `RUN` id, its own session fixtures (sshd, berth,
# registry, Docker cleanup), temp dirs and free ports; workers share only what runs on
# one machine share (the Docker Engine, the echo images, the machine locks). `-n 0` runs
# the suite in one process, as plain pytest does.

#: Workers for ``-n auto``. The suite mostly waits (on Docker, sshd, Caddy, Chromium,
#: berth's own loops): more workers than CPUs overlap those waits; more than this only
#: adds load on a 2-core machine. ``PYTEST_XDIST_AUTO_NUM_WORKERS`` overrides it.
WORKERS_PER_CPU = 2
MAX_WORKERS = 3


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """The number of workers ``-n auto`` starts: ``WORKERS_PER_CPU`` per CPU this
    process may use, at most ``MAX_WORKERS``, unless the environment says."""
    given = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    if given:
        return int(given)
    return min(MAX_WORKERS, WORKERS_PER_CPU * len(os.sched_getaffinity(0)))


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` hands out the longest unit left first (``scheduling``)."""
    if config.getvalue("dist") != "loadfile":
        return None
    return LongestFirst(config, log)


def pytest_configure(config: pytest.Config) -> None:
    register_unit_seconds(config)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Remove the migrated databases that this process's test databases were copied from."""
    drop_migrated()


@pytest.fixture(scope="session")
def berth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BerthProcess]:
    """One shared ``berth serve`` for tests that only add their own users and data."""
    process = BerthProcess(tmp_path_factory.mktemp("berth-shared")).start()
    yield process
    process.stop()


@pytest.fixture
def fresh_berth(tmp_path: Path) -> Iterator[BerthProcess]:
    """A ``berth serve`` of this test's own (restart, rate limits, process signals)."""
    process = BerthProcess(tmp_path / "data")
    yield process
    process.stop()


@pytest.fixture
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    """An engine on the module's own ``db_url`` fixture (the SQL adapters' tests)."""
    async with engine_on(db_url) as engine:
        yield engine


@pytest.fixture
def box() -> KeyBox:
    """The key box of the run's :data:`sql_support.KEY`."""
    return KeyBox(KEY)


@pytest.fixture
def uow(engine: AsyncEngine, box: KeyBox) -> SqlUnitOfWorkFactory:
    """The SQL unit of work on ``engine``, sealing with ``box``."""
    return SqlUnitOfWorkFactory(engine, box)


# -- Real Docker and a real sshd (transport adapters) ---------------------------------

from deploy_support import TRANSPORTS, Stack, open_stack, remove_containers  # noqa: E402
from infra import (  # noqa: E402
    RUN,
    InfraUnavailable,
    Sshd,
    build_echo_image,
    drop_migrated,
    ensure_dockerd,
    serve_sshd,
    unavailable,
)


@pytest.fixture(scope="session")
def docker_ready() -> Iterator[None]:
    """A Docker Engine answers on the local socket (started here if needed). When the
    session ends, any container of this run still there goes (a module cut short)."""
    try:
        ensure_dockerd()
    except InfraUnavailable as exc:
        unavailable(str(exc))
    yield
    remove_containers(RUN)


@pytest.fixture(scope="session")
def echo_image(docker_ready: None) -> str:
    """The tag of the static echo server image, version v1."""
    return build_echo_image("v1")


@pytest.fixture(scope="session")
def slow_image(echo_image: str) -> str:
    """The echo image whose container, given ``BERTH_TEST_DELAY``, answers that many
    seconds after it starts (the tag names its source: one without it is another tag)."""
    return echo_image


@pytest.fixture(scope="session")
def sshd(docker_ready: None) -> Iterator[Sshd]:
    """A throwaway OpenSSH server on 127.0.0.1 that lets in user ``berth`` (forward-only keys)."""
    yield from serve_sshd()


@pytest.fixture(scope="module")
def stack_env(request: pytest.FixtureRequest) -> dict[str, str] | None:
    """The settings a module's ``stack`` adds: its ``STACK_ENV``, if any. A module may
    define this fixture itself, e.g. parametrized to run its tests on two stacks."""
    env: dict[str, str] | None = getattr(request.module, "STACK_ENV", None)
    return env


@pytest.fixture(scope="module")
def stack(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    echo_image: str,
    sshd: Sshd,
    stack_env: dict[str, str] | None,
) -> Iterator[Stack]:
    """The module's own ``berth serve --local`` with fast loops (:func:`open_stack`):
    alice owns the local server and an SSH server, bob an SSH server; all online. What
    it names carries the module's name; ``stack_env`` adds settings."""
    tag = request.module.__name__.removeprefix("test_").replace("_", "-")
    with open_stack(tmp_path_factory.mktemp(tag), sshd, tag, stack_env) as opened:
        yield opened


@pytest.fixture(params=TRANSPORTS)
def target(request: pytest.FixtureRequest, stack: Stack) -> tuple[Api, str, str]:
    """``(api, server id, transport)`` of one of alice's servers: over SSH, or local."""
    transport: str = request.param
    return stack.alice.api, stack.alice.servers[transport], transport


# -- A private registry (docker-registry with htpasswd) ---------------------------------

from registry_support import registry  # noqa: E402, F401  (a fixture, by name)
