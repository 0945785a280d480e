"""Nox sessions for berth.

Sessions run in the already-prepared .venv (tools are invoked through this
interpreter, ``sys.executable``, whatever PATH says) (``scripts/dev`` creates it and puts
``.venv/bin`` first on PATH), so no per-session virtualenvs are built. Run them
via ``scripts/dev test [-s SESSION] [-- pytest args]``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent

nox.options.default_venv_backend = "none"
nox.options.sessions = ["lint", "docs", "typecheck", "unit", "integration"]
nox.options.reuse_existing_virtualenvs = True

SHELL_SCRIPTS = ["scripts/dev", "scripts/lock", ".ci/run", "src/entrypoints/install/install.sh"]
PYTEST_ARGS = ["-q", "-p", "no:cacheprovider"]


@nox.session
def lint(session: nox.Session) -> None:
    session.run(sys.executable, "-m", "ruff", "check", ".")
    session.run("shellcheck", *SHELL_SCRIPTS, external=True)


@nox.session
def docs(session: nox.Session) -> None:
    """The documentation site (``mkdocs.yml``, pages under ``docs/``), built with ``--strict``:
    a link to a missing page or anchor fails. The site goes to a scratch directory."""
    with tempfile.TemporaryDirectory(prefix="berth-docs-") as site:
        session.run(
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(ROOT / "mkdocs.yml"),
            "--site-dir",
            site,
            env={"NO_MKDOCS_2_WARNING": "1"},  # the theme's banner about its successor
        )


@nox.session
def typecheck(session: nox.Session) -> None:
    """``mypy --strict`` over all of ``src/``, imported as the package ``berth``.

    setuptools maps ``berth`` to ``src/``; mypy follows no such mapping, so it reads
    the tree through a symlink named ``berth`` in a scratch directory.
    """
    with tempfile.TemporaryDirectory(prefix="berth-mypy-") as scratch:
        (Path(scratch) / "berth").symlink_to(ROOT / "src", target_is_directory=True)
        session.run(
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "-p",
            "berth",
            env={"MYPYPATH": scratch},
        )


#: The unit suite on one worker per CPU (pytest-xdist): its tests are CPU-bound and share
#: nothing. Every parameter id is fixed (none generated), as each worker collects anew.
UNIT_ARGS = ["-n", "auto"]


@nox.session
def unit(session: nox.Session) -> None:
    session.run(
        sys.executable, "-m", "pytest", "tests/unit", *PYTEST_ARGS, *UNIT_ARGS, *session.posargs
    )


#: The integration suite in parallel (pytest-xdist): ``auto`` workers (as many as
#: ``tests/integration/conftest.py`` says), each module whole on one worker.
#: ``-- -n 0`` runs it in one process. The 30 slowest tests are named at the end (where
#: a run's time goes, to keep CI short). A test Chromium failed with ERR_NETWORK_CHANGED
#: (its network stack aborts a page load when the machine's interfaces change, as Docker
#: changes them for other tests' containers) runs once more; any other failure stands.
INTEGRATION_ARGS = [
    *("-n", "auto", "--dist", "loadfile", "--durations=30"),
    *("--reruns", "1", "--only-rerun", "ERR_NETWORK_CHANGED"),
]


@nox.session
def integration(session: nox.Session) -> None:
    session.run(
        sys.executable,
        "-m",
        "pytest",
        "tests/integration",
        *PYTEST_ARGS,
        *INTEGRATION_ARGS,
        *session.posargs,
    )


@nox.session
def bench(session: nox.Session) -> None:
    """``api_bench.py`` (gets the posargs; none: ``--rights``, the authorization checks'
    cost too), then the others with their defaults: deploys, live events (SSE latency),
    MCP ``deploy`` overhead, pulls from a registry, builds from Git and uploads, a fleet
    of 1,000 SSH servers, what berth's own processes cost to start."""
    api = session.posargs or ["--rights"]
    session.run(sys.executable, str(ROOT / "benchmarks" / "api_bench.py"), *api)
    for name in (
        "deploy_bench.py",
        "events_bench.py",
        "mcp_bench.py",
        "pull_bench.py",
        "build_bench.py",
        "fleet_bench.py",
        "start_bench.py",
    ):
        session.run(sys.executable, str(ROOT / "benchmarks" / name))
