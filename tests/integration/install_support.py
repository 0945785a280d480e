"""Helpers for the install script's tests: run it as a new user would, see what it changed.

The stand-in for a fresh server is this machine itself (root, no systemd): the script
writes the real ``/etc/berth``, ``/run/berth``, ``/var/lib/berth`` and ``~berth/.ssh``,
and a dedicated sshd reads ``~berth/.ssh/authorized_keys``. :func:`install_lock`
serializes the test runs that do so; :func:`uninstall_leftovers` removes what a run
that died left behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pwd
import stat
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from harness import BerthProcess
from infra import machine_lock

__all__ = [
    "ALPINE",
    "MACHINE_PATHS",
    "STATE_FILE",
    "WATCHED",
    "Run",
    "expire_enrollment",
    "install_lock",
    "run_script",
    "run_watching_ps",
    "snapshot",
    "uninstall_leftovers",
]

STATE_FILE = Path("/var/lib/berth/install-state")
# Everything the script may add, besides users and groups (``/etc/passwd``, ``/etc/group``).
MACHINE_PATHS = (
    "/etc/berth",
    "/run/berth",
    "/var/lib/berth",
    "/etc/systemd/system/caddy.service.d",
    "/etc/tmpfiles.d/berth.conf",
    "/var/log/berth-caddy.log",
    "/etc/sysctl.d/90-berth-caddy.conf",
)
#: More paths the script may change here: the test sshd's drop-in directory, where the
#: script adds its sshd block (added by the fixture that starts that sshd).
WATCHED: list[str] = []
ALPINE = (
    'NAME="Alpine Linux"\nID=alpine\nVERSION_ID=3.20.3\n'
    'PRETTY_NAME="Alpine Linux v3.20"\nHOME_URL="https://alpinelinux.org/"\n'
)


def install_lock(timeout: float = 600.0) -> contextlib.AbstractContextManager[None]:
    """Hold the machine for one test module at a time (other runs wait, then fail)."""
    return machine_lock("install-script-tests", timeout)


@dataclass(frozen=True)
class Run:
    """One run of the script: exit status, output, and how long it took."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def run_watching_ps(
    command: str, *, env: Mapping[str, str] | None = None, timeout: float = 180.0
) -> tuple[Run, set[bytes]]:
    """:func:`run_script`, and every process command line (``/proc/*/cmdline``, what ``ps``
    shows) seen on this machine while it ran, read over and over. ``command`` goes to
    ``sh`` on its standard input, as typed into a shell: not as an argument."""
    started = time.monotonic()
    seen: set[bytes] = set()
    out: dict[str, bytes] = {}
    with subprocess.Popen(
        ["sh"],
        env={**os.environ, **(env or {})},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        assert process.stdin is not None
        process.stdin.write(f"{command}\n".encode())
        process.stdin.close()

        def drain(name: str, stream: Any) -> None:
            out[name] = stream.read()

        readers = [
            threading.Thread(target=drain, args=(name, stream))
            for name, stream in (("stdout", process.stdout), ("stderr", process.stderr))
        ]
        for reader in readers:
            reader.start()
        while process.poll() is None:
            if time.monotonic() - started > timeout:
                process.kill()
            for pid in os.listdir("/proc"):
                if pid.isdigit():
                    seen.add(_cmdline(pid))
            time.sleep(0.005)
        for reader in readers:
            reader.join()
    return (
        Run(
            process.returncode,
            out.get("stdout", b"").decode(),
            out.get("stderr", b"").decode(),
            time.monotonic() - started,
        ),
        seen,
    )


def run_script(
    command: str, *, env: Mapping[str, str] | None = None, timeout: float = 180.0
) -> Run:
    """Run ``command`` with ``sh -c`` (a pipeline like ``curl … | sh -s -- …``), as root."""
    started = time.monotonic()
    done = subprocess.run(
        ["sh", "-c", command],
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return Run(done.returncode, done.stdout, done.stderr, time.monotonic() - started)


# What Caddy itself writes while it runs (its log, its autosaved configuration): there,
# only that the file is there counts, not its contents.
_CADDY_WRITES = ("/var/log/berth-caddy.log", "/var/lib/berth/caddy/")


def _entry(path: Path) -> tuple[Any, ...]:
    info = path.lstat()
    digest, mtime = "", None
    if stat.S_ISREG(info.st_mode) and not str(path).startswith(_CADDY_WRITES):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        # mtime too: a run that rewrites a file with the same bytes did change something.
        mtime = info.st_mtime_ns
    return (stat.filemode(info.st_mode), info.st_uid, info.st_gid, digest, mtime)


def _tree(root: Path) -> dict[str, tuple[Any, ...]]:
    found: dict[str, tuple[Any, ...]] = {}
    if not root.exists() and not root.is_symlink():
        return found
    found[str(root)] = _entry(root)
    if root.is_dir() and not root.is_symlink():
        for path in sorted(root.rglob("*")):
            with contextlib.suppress(FileNotFoundError):
                found[str(path)] = _entry(path)
    return found


def _user_line(database: str, name: str) -> str | None:
    done = subprocess.run(["getent", database, name], capture_output=True, text=True, check=False)
    return done.stdout.strip() or None


def snapshot(extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """What the script could change on this machine: its files (with modes, owners,
    contents and file mtimes), user ``berth`` (passwd, shadow, group, groups, home's
    ``.ssh``), and the processes running Caddy with berth's configuration."""
    files: dict[str, tuple[Any, ...]] = {}
    for path in (*MACHINE_PATHS, *WATCHED, *extra):
        files.update(_tree(Path(path)))
    with contextlib.suppress(KeyError):
        files.update(_tree(Path(pwd.getpwnam("berth").pw_dir) / ".ssh"))
    caddies = sorted(
        pid
        for pid in os.listdir("/proc")
        if pid.isdigit() and b"/etc/berth/caddy.json" in _cmdline(pid)
    )
    groups = subprocess.run(["id", "-nG", "berth"], capture_output=True, text=True, check=False)
    return {
        "files": files,
        "passwd": _user_line("passwd", "berth"),
        "shadow": _user_line("shadow", "berth"),
        "group": _user_line("group", "berth"),
        "docker_group": _user_line("group", "docker"),
        "groups": groups.stdout.split(),
        "caddy_processes": caddies,
    }


def _cmdline(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def expire_enrollment(berth: BerthProcess, server_id: str) -> None:
    """Make the server's enrollment token expire a second ago (a write to berth's SQLite
    while it runs, as another process would make; berth's read cache sees the commit)."""
    from uuid import UUID

    from berth.adapters.sql.engine import DATABASE_FILE
    from berth.adapters.sql.tables import ServerRow
    from sqlalchemy import create_engine, update

    engine = create_engine(f"sqlite:///{berth.data_dir / DATABASE_FILE}")
    try:
        with engine.begin() as conn:
            table: Any = ServerRow.__table__
            conn.execute(
                update(table)
                .where(table.c.id == UUID(server_id))
                .values(enrollment_expires_at=datetime.now(UTC) - timedelta(seconds=1))
            )
    finally:
        engine.dispose()


def uninstall_leftovers(script: Path) -> None:
    """If a state file is there (a run that died), ``--uninstall`` with ``script``."""
    if STATE_FILE.exists():
        done = run_script(f"sh {script} --uninstall", env={"BERTH_SKIP_SERVICES": "1"})
        assert done.returncode == 0, done.output
