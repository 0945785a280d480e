"""The ready-to-use files under ``deploy/``: they parse, and every berth command in them
is one berth's own command line accepts."""

from __future__ import annotations

import configparser
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from berth.entrypoints.cli.main import _parser

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return loaded


def _unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text())
    return parser


def test_the_compose_file_runs_replicas_and_workers_on_one_database() -> None:
    """compose.yaml: PostgreSQL, two API replicas without a worker, two workers, a proxy;
    every berth service has the same database URL and secret key."""
    services = _compose()["services"]
    assert set(services) == {"postgres", "api", "worker", "proxy"}
    api, worker = services["api"], services["worker"]
    assert api["deploy"]["replicas"] == 2
    assert worker["deploy"]["replicas"] == 2
    for service in (api, worker):
        _parser().parse_args(service["command"])  # berth accepts it
        assert "${BERTH_SECRET_KEY:?" in service["environment"]["BERTH_SECRET_KEY"]
    assert api["command"][:2] == ["serve", "--no-worker"]
    assert worker["command"][0] == "worker"
    assert api["environment"]["BERTH_DATABASE_URL"] == worker["environment"]["BERTH_DATABASE_URL"]
    assert api["environment"]["BERTH_DATABASE_URL"].startswith("postgresql+asyncpg://")
    for volume in services["proxy"]["volumes"]:
        assert (DEPLOY / volume.split(":")[0]).is_file()
    assert (DEPLOY / "Dockerfile").is_file()


@pytest.mark.parametrize("path", UNITS, ids=[p.name for p in UNITS])
def test_each_unit_runs_a_berth_command_berth_accepts(path: Path) -> None:
    """Each systemd unit's ExecStart is a berth command line berth's parser accepts, run
    as user berth with the environment file."""
    service = _unit(path)["Service"]
    argv = shlex.split(service["ExecStart"].replace("%i", "8081"))
    assert argv[0] == "/opt/berth/.venv/bin/berth"
    args = _parser().parse_args(argv[1:])
    assert args.command in ("serve", "worker")
    assert service["User"] == "berth"
    assert service["EnvironmentFile"].lstrip("-") == "/etc/berth/berth.env"
    assert service["KillSignal"] == "SIGTERM"


def test_scale_out_units_keep_the_worker_out_of_the_replicas() -> None:
    """berth-api@ serves without a worker; berth-worker@ runs one."""
    api = _unit(DEPLOY / "systemd" / "berth-api@.service")["Service"]["ExecStart"]
    assert "--no-worker" in api.split()
    assert " worker " in _unit(DEPLOY / "systemd" / "berth-worker@.service")["Service"]["ExecStart"]


def test_systemd_accepts_the_units(tmp_path: Path) -> None:
    """``systemd-analyze verify`` finds nothing wrong (with this venv's berth and the
    example environment file in place of the installed paths)."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    berth = Path(sys.executable).with_name("berth")
    for path in UNITS:
        text = path.read_text().replace("/opt/berth/.venv/bin/berth", str(berth))
        text = text.replace("/etc/berth/berth.env", str(DEPLOY / "berth.env.example"))
        (tmp_path / path.name).write_text(text)
    names = [p.name.replace("@.", "@1.") for p in UNITS]
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *names],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", done.stderr
