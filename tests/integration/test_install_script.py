"""The install script (``GET /api/deploy``), end to end and for real.

A real ``berth serve``; servers created through the API; the script fetched over HTTP
and run exactly as a new user runs it (``curl -fsSL …/api/deploy | sh -s -- --token …``,
as root). The stand-in for a fresh server is this machine itself: no systemd runs here,
so the script runs with ``BERTH_SKIP_SERVICES=1`` (Caddy started in the background) and
``BERTH_SSHD_CONFIG`` naming a dedicated sshd on a free port that reads
``~berth/.ssh/authorized_keys`` like a server's own. The script writes the real
``/etc/berth``, ``/run/berth`` and ``/var/lib/berth``; at the end ``--uninstall`` must
leave the machine as it found it (the user ``berth`` existed before: the test infra
makes it, so the script keeps it).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import berth.entrypoints.install as install_package
import httpx
import pytest
from berth.core.types import KEY_RESTRICTIONS
from deploy_support import (
    FAST_ENV,
    RUN,
    containers_of,
    deploy,
    deployed,
    get_app,
    host_port,
    inspect_named,
    remove_containers,
    server_of,
    wait_until,
)
from harness import Api, BerthProcess, new_server, problem
from infra import RUN_LABEL, Sshd, docker_client, install_script_sshd_block
from install_support import (
    ALPINE,
    STATE_FILE,
    WATCHED,
    Run,
    expire_enrollment,
    install_lock,
    run_script,
    run_watching_ps,
    snapshot,
    uninstall_leftovers,
)

pytestmark = pytest.mark.integration

TEMPLATE = Path(install_package.__file__).parent / "install.sh"
RESTRICTIONS = KEY_RESTRICTIONS
APP_TAG = f"inst-{RUN}-"


class Machine:
    """This machine as the server: berth, the sshd berth reaches it through, one user."""

    def __init__(self, berth: BerthProcess, sshd: Sshd, api: Api, pristine: dict[str, Any]):
        self.berth = berth
        self.sshd = sshd
        self.api = api
        self.pristine = pristine  # the snapshot before any run of the script
        self.env = {"BERTH_SKIP_SERVICES": "1", "BERTH_SSHD_CONFIG": str(sshd.config_path)}

    def new_server(self) -> dict[str, Any]:
        """A server at this machine's sshd, created through the API (pending)."""
        return new_server(self.api, enrolled=False, address="127.0.0.1", sshPort=self.sshd.port)

    def command(self, server: dict[str, Any], *args: str) -> str:
        """The server's install command exactly as berth gives it (the sshd's port is
        not 22: it carries ``--ssh-port``), with ``args`` after it."""
        line: str = server["installCommand"]
        expected = (
            f"curl -fsSL {self.berth.url}/api/deploy | "
            f"BERTH_ENROLL_TOKEN={server['enrollmentToken']} sh "
            f"-s -- --ssh-port {server['sshPort']}"
        )
        assert line == expected
        return " ".join([line, *args])

    def run(self, server: dict[str, Any], *args: str, **env: str) -> Run:
        return run_script(self.command(server, "--wait", "60", *args), env={**self.env, **env})

    def env_without_sudo(self) -> dict[str, str]:
        """The environment, with a PATH where no ``sudo`` is found (a root-only Debian)."""
        bare = self.berth.data_dir / "path-without-sudo"
        if not bare.exists():
            bare.mkdir()
            for directory in os.environ["PATH"].split(os.pathsep):
                for tool in Path(directory).glob("*") if Path(directory).is_dir() else ():
                    link = bare / tool.name
                    if tool.name != "sudo" and not link.exists():
                        link.symlink_to(tool)
        env = {**self.env, "PATH": str(bare)}
        assert shutil.which("sudo", path=env["PATH"]) is None
        return env


@pytest.fixture(scope="module")
def machine(
    tmp_path_factory: pytest.TempPathFactory, echo_image: str, docker_ready: None
) -> Iterator[Machine]:
    """The machine, held by this module alone; berth with fast loops; a user."""
    with install_lock():
        uninstall_leftovers(TEMPLATE)
        # sshd as a server's own, before the script: its drop-in directory empty.
        sshd = Sshd(authorized_keys_file=".ssh/authorized_keys", berth_block=False).start()
        WATCHED.append(str(sshd.dropin_dir))
        process = BerthProcess(tmp_path_factory.mktemp("install"), env=dict(FAST_ENV)).start()
        try:
            _, token = process.new_users(1, "installer")[0]
            with process.api(token) as api:
                yield Machine(process, sshd, api, snapshot())
        finally:
            process.stop()
            uninstall_leftovers(TEMPLATE)
            sshd.stop()
            WATCHED.remove(str(sshd.dropin_dir))
            remove_containers(APP_TAG)


@pytest.fixture(scope="module")
def watched_install(machine: Machine) -> tuple[dict[str, Any], Run, set[bytes]]:
    """A server installed by its install command, run as root with no ``sudo`` on the
    PATH: ``(server as created, the run, every process command line seen meanwhile)``."""
    server = machine.new_server()
    run, seen = run_watching_ps(
        machine.command(server, "--wait", "60"), env=machine.env_without_sudo()
    )
    return server, run, seen


@pytest.fixture(scope="module")
def installed(
    watched_install: tuple[dict[str, Any], Run, set[bytes]],
) -> tuple[dict[str, Any], Run]:
    """A server installed by its install command: ``(server as created, the run)``."""
    server, run, _ = watched_install
    return server, run


@pytest.fixture(scope="module")
def app_port(machine: Machine, installed: tuple[dict[str, Any], Run]) -> int:
    """The host port of the echo app deployed through the API on the installed server."""
    server, run = installed
    assert run.returncode == 0, run.output
    port = host_port()
    deployed(deploy(machine.api, server["id"], f"{APP_TAG}echo", port), "succeeded")
    return port


# -- the script as served ---------------------------------------------------------------


def test_served_script_passes_shellcheck(machine: Machine) -> None:
    """``shellcheck -s sh`` finds nothing in the script exactly as GET /api/deploy serves it."""
    response = httpx.get(f"{machine.berth.url}/api/deploy", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/x-shellscript")
    check = subprocess.run(
        ["shellcheck", "-s", "sh", "-"],
        input=response.text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_served_script_embeds_the_base_url_and_no_secret(machine: Machine) -> None:
    """The only value put in is berth's URL from the request; no token of any kind."""
    script = httpx.get(f"{machine.berth.url}/api/deploy", timeout=10).text
    assert f"\nBERTH_URL={machine.berth.url}\n" in script
    restrictions = shlex.quote(KEY_RESTRICTIONS)
    assert script == TEMPLATE.read_text().replace(
        "BERTH_URL=@BERTH_URL@\n", f"BERTH_URL={machine.berth.url}\n"
    ).replace("RESTRICTIONS=@KEY_RESTRICTIONS@\n", f"RESTRICTIONS={restrictions}\n")
    assert not re.search(r"berth_(?:enroll_|invite_)?[0-9A-Za-z]{49}", script)


def test_a_hostile_host_header_never_reaches_the_script(machine: Machine) -> None:
    """A Host header that is not a plain host[:port] is replaced by berth's listen address."""
    script = httpx.get(
        f"{machine.berth.url}/api/deploy",
        headers={"Host": "evil.example.com;$(id)"},
        timeout=10,
    ).text
    assert "$(id)" not in script
    assert f"\nBERTH_URL=http://127.0.0.1:{machine.berth.port}\n" in script


# -- refusing before changing anything ----------------------------------------------------


@pytest.mark.parametrize(
    ("os_release", "reason"),
    [
        (ALPINE, "Alpine Linux v3.20 is not supported"),
        ('ID=debian\nVERSION_ID="11"\nPRETTY_NAME="Debian GNU/Linux 11 (bullseye)"\n', "too old"),
        ('ID=fedora\nVERSION_ID=40\nPRETTY_NAME="Fedora Linux 40"\n', "is not supported"),
    ],
    ids=["alpine", "debian-11", "fedora"],
)
def test_unsupported_os_stops_before_changing_anything(
    machine: Machine, tmp_path: Path, os_release: str, reason: str
) -> None:
    """An OS it does not support: a clear message, exit 1, and the machine untouched."""
    fake = tmp_path / "os-release"
    fake.write_text(os_release)
    server = machine.new_server()
    before = snapshot()
    run = machine.run(server, BERTH_OS_RELEASE=str(fake))
    assert run.returncode == 1, run.output
    assert reason in run.stderr
    assert "Nothing was changed." in run.stderr
    assert snapshot() == before
    assert server_of(machine.api, server["id"])["status"] == "pending"


def test_dry_run_changes_nothing(machine: Machine) -> None:
    """--dry-run on the fresh machine prints the plan, exits 0 and changes nothing."""
    server = machine.new_server()
    before = snapshot()
    run = machine.run(server, "--dry-run")
    assert run.returncode == 0, run.output
    assert "dry run" in run.stdout
    assert "would write /etc/berth/caddy.json" in run.stdout
    assert "would register this server with berth" in run.stdout
    assert "would authorize berth's key" in run.stdout
    assert snapshot() == before == machine.pristine
    assert server_of(machine.api, server["id"])["status"] == "pending"


def test_not_root_it_runs_itself_with_sudo_token_on_stdin(machine: Machine, tmp_path: Path) -> None:
    """Run by a user (``id -u`` says 1000 here), the script fetches itself again and runs
    that copy with sudo (a stand-in that records its arguments and runs them), the token
    on standard input: the --dry-run plan comes out, and no command line held the token."""
    fakes = tmp_path / "bin"
    fakes.mkdir()
    (fakes / "id").write_text(
        '#!/bin/sh\nif [ "$*" = -u ]; then echo 1000; else exec /usr/bin/id "$@"; fi\n'
    )
    sudo_log = tmp_path / "sudo.log"
    (fakes / "sudo").write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$*" >>{sudo_log}\n'
        'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin exec "$@"\n'
    )
    for fake in ("id", "sudo"):
        (fakes / fake).chmod(0o755)
    server = machine.new_server()
    before = snapshot()
    env = {**machine.env, "PATH": f"{fakes}:{os.environ['PATH']}"}
    run, seen = run_watching_ps(machine.command(server, "--dry-run"), env=env)
    assert run.returncode == 0, run.output
    assert "not root: fetching this script again" in run.stdout
    assert "dry run: this is the plan" in run.stdout
    (call,) = sudo_log.read_text().splitlines()
    assert call.startswith("sh /")
    assert call.endswith(f"/install.sh --token-stdin --ssh-port {server['sshPort']} --dry-run")
    token = server["enrollmentToken"].encode()
    assert not [line for line in seen if token in line]
    assert snapshot() == before
    assert server_of(machine.api, server["id"])["status"] == "pending"


def test_a_mistyped_token_is_refused_at_once(machine: Machine) -> None:
    """A truncated token: exit 1 before berth is even asked."""
    run = run_script(
        f"curl -fsSL {machine.berth.url}/api/deploy | sh -s -- --token berth_enroll_abc",
        env=machine.env,
    )
    assert run.returncode == 1
    assert "truncated or mistyped" in run.stderr


@pytest.mark.parametrize(
    "base_url",
    [
        "http://203.0.113.7:9",
        "http://[2001:db8::7]:9",
        "http://10.255.255.1:9",
        "http://172.20.0.1:9",
    ],
)
def test_plain_http_to_another_machine_needs_insecure(machine: Machine, base_url: str) -> None:
    """http:// to anything but this machine (a private network too): exit 1 before any
    change, saying why and how (https, or --insecure); with --insecure it goes on, warned
    (and then finds no berth there)."""
    server = machine.new_server()
    before = snapshot()
    run = machine.run(server, "--base-url", base_url)
    assert run.returncode == 1, run.output
    assert "plain HTTP" in run.stderr
    assert "--insecure" in run.stderr
    assert "Nothing was changed." in run.stderr
    assert "cannot reach berth" not in run.stderr  # stopped before asking berth anything
    assert snapshot() == before
    insecure = machine.run(server, "--base-url", base_url, "--insecure")
    assert insecure.returncode == 1, insecure.output
    assert "going on as --insecure asks" in insecure.stderr
    # It asked berth there (nothing, or a proxy of this machine's, answers).
    assert re.search(
        r"cannot reach berth|berth answered HTTP \d+ to the token check", insecure.stderr
    )
    assert snapshot() == before


@pytest.mark.parametrize("base_url", ["http://localhost:9", "https://203.0.113.7:9"])
def test_plain_http_to_this_machine_or_https_needs_nothing(machine: Machine, base_url: str) -> None:
    """http:// to this machine, or https:// anywhere: no --insecure asked, no warning."""
    server = machine.new_server()
    run = machine.run(server, "--base-url", base_url)
    assert run.returncode == 1, run.output  # nothing answers there
    assert "plain HTTP" not in run.stderr
    assert "cannot reach berth" in run.stderr


def test_an_unreachable_berth_stops_before_changing_anything(machine: Machine) -> None:
    """berth not answering at the base URL: exit 1, a clear message, no change."""
    server = machine.new_server()
    before = snapshot()
    run = machine.run(server, "--base-url", "http://127.0.0.1:9")
    assert run.returncode == 1, run.output
    assert "cannot reach berth at http://127.0.0.1:9" in run.stderr
    assert snapshot() == before


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("AllowTcpForwarding no", "AllowTcpForwarding no: set it to local"),
        ("Match User berth\n  DisableForwarding yes", "DisableForwarding yes: set it to no"),
        ("AllowStreamLocalForwarding no", "AllowStreamLocalForwarding no: set it to local"),
        ("PermitOpen 127.0.0.1:80", "PermitOpen 127.0.0.1:80: set it to any"),
    ],
    ids=["no-tcp-forwarding", "disable-forwarding-for-berth", "no-stream-local", "permit-open"],
)
def test_a_hardened_sshd_stops_before_changing_anything(
    machine: Machine, setting: str, named: str
) -> None:
    """An sshd that refuses berth's forwards (also in a Match block for berth): exit 1
    naming the setting and what to set, before any change; the server stays pending."""
    keyword = setting.split()[0]
    run = _refused_by_sshd(
        machine,
        lambda lines: [
            *(line for line in lines if keyword == "Match" or line.split(" ")[0] != keyword),
            setting,
        ],
    )
    assert named in run.stderr
    assert "Match User berth" in run.stderr


def test_a_port_given_to_berth_is_not_replaced_by_sshds(machine: Machine) -> None:
    """A server added with sshPort 2200 (sshd here listens on another): its command carries
    --ssh-port 2200; run without it, the script stops before any change, naming both."""
    server = new_server(machine.api, enrolled=False, address="127.0.0.1", sshPort=2200)
    assert server["installCommand"].endswith(" sh -s -- --ssh-port 2200")
    edited = server["installCommand"].replace(" -s -- --ssh-port 2200", " -s -- --wait 5")
    before = snapshot()
    run = run_script(edited, env=machine.env)
    assert run.returncode == 1, run.output
    assert "berth has this server at SSH port 2200" in run.stderr
    assert f"would register port {machine.sshd.port}" in run.stderr
    assert "Nothing was changed." in run.stderr
    assert snapshot() == before
    assert server_of(machine.api, server["id"])["status"] == "pending"


# -- installing -------------------------------------------------------------------------------


def test_install_brings_the_server_online_within_a_minute(
    machine: Machine, installed: tuple[dict[str, Any], Run]
) -> None:
    """One command: berth pinned the sshd's host key, reaches the server, and it is online."""
    server, run = installed
    assert run.returncode == 0, run.output
    assert "plain HTTP" not in run.output  # berth at 127.0.0.1
    assert run.seconds < 60
    assert f"server {server['id']} is online" in run.stdout
    found = server_of(machine.api, server["id"])
    assert found["status"] == "online"
    assert found["hostKeys"] == [machine.sshd.host_public_key]
    assert found["address"] == "127.0.0.1"
    assert found["sshPort"] == machine.sshd.port
    assert found["facts"]["dockerVersion"]
    # What it set up: the key, forward only; Caddy's admin socket for group berth.
    keys = Path("/home/berth/.ssh/authorized_keys").read_text().splitlines()
    assert keys == [f"{RESTRICTIONS} {server['publicKey']}"]
    assert Path("/etc/berth/caddy.json").read_text() == (
        '{"admin":{"listen":"unix//run/berth/caddy-admin.sock","origins":["caddy-admin"]}}\n'
    )
    listing = subprocess.run(
        ["stat", "-c", "%A %U:%G", "/run/berth", "/run/berth/caddy-admin.sock"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    assert listing[:2] == ["drwxr-s--- root:berth", "srwxrwx--- root:berth"]
    as_berth = subprocess.run(
        ["runuser", "-u", "berth", "--", "curl", "-fsS", "--unix-socket",
         "/run/berth/caddy-admin.sock", "-H", "Host: caddy-admin", "http://caddy-admin/config/"],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )  # fmt: skip
    assert as_berth.returncode == 0, as_berth.stderr
    state = STATE_FILE.read_text()
    assert f"server_id={server['id']}\n" in state
    assert "created_user=" not in state  # berth existed: it stays on --uninstall


def test_install_keeps_berths_key_from_listening(
    machine: Machine, installed: tuple[dict[str, Any], Run]
) -> None:
    """The script added its sshd block to sshd's drop-in directory, exactly the one it
    prints (and the transport tests' sshd carries), and sshd applies it to the user berth:
    forwards to local sockets and ports only, no listener."""
    _, run = installed
    assert run.returncode == 0, run.output
    added = machine.sshd.dropin_dir / "00-berth.conf"
    assert added.read_text() == install_script_sshd_block()
    assert f"sshd reloaded (pid {(machine.sshd.dir / 'sshd.pid').read_text().strip()})" in (
        run.stdout
    )
    for_berth = _sshd_settings(machine.sshd, "berth")
    assert for_berth["allowtcpforwarding"] == "local"
    assert for_berth["allowstreamlocalforwarding"] == "local"
    assert for_berth["permitlisten"] == "none"
    assert _sshd_settings(machine.sshd, "someone")["allowstreamlocalforwarding"] == "yes"


def test_an_sshd_without_a_drop_in_directory_stops_before_changing_anything(
    machine: Machine,
) -> None:
    """An sshd whose configuration includes no drop-in directory: exit 1, with the block
    to add by hand; nothing changed, the server still pending."""
    run = _refused_by_sshd(machine, lambda lines: lines[1:])  # without its Include line
    assert "includes no drop-in directory" in run.stderr
    assert "AllowStreamLocalForwarding local" in run.stderr


def test_the_one_liner_needs_no_sudo_as_root(
    watched_install: tuple[dict[str, Any], Run, set[bytes]],
) -> None:
    """Run as root where there is no sudo (a root-only Debian): it enrolls the server."""
    server, run, _ = watched_install
    assert "sudo" not in server["installCommand"]
    assert run.returncode == 0, run.output
    assert f"server {server['id']} is online" in run.stdout


def test_the_token_is_never_in_a_command_line(
    watched_install: tuple[dict[str, Any], Run, set[bytes]],
) -> None:
    """While the script ran, no process's arguments (what ps shows) held the token; the
    script's own process was seen (alive for the whole run), with its other arguments."""
    server, run, seen = watched_install
    assert run.returncode == 0, run.output
    token = server["enrollmentToken"].encode()
    assert [line for line in seen if token in line] == []
    script = [line for line in seen if line.startswith(b"sh\0-s\0--\0--ssh-port\0")]
    assert script, sorted(seen)[:50]


def test_a_deploy_through_the_api_succeeds_on_it(machine: Machine, app_port: int) -> None:
    """The enrolled server takes a deployment of the echo image, and the app answers."""
    assert get_app(app_port).text == "hello from v1\n"


def test_a_second_run_is_a_no_op(
    machine: Machine, installed: tuple[dict[str, Any], Run], app_port: int
) -> None:
    """The same command again (its token now used): exit 0, nothing changed, app untouched."""
    server, _ = installed
    (container,) = [c for c in _app_containers(machine, server) if c["State"]["Running"]]
    before = snapshot()
    run = machine.run(server)
    assert run.returncode == 0, run.output
    assert "nothing to change" in run.stdout
    assert snapshot() == before
    (again,) = [c for c in _app_containers(machine, server) if c["State"]["Running"]]
    assert again["Id"] == container["Id"]
    assert again["State"]["StartedAt"] == container["State"]["StartedAt"]
    dry = machine.run(server, "--dry-run")
    assert dry.returncode == 0, dry.output
    assert "would " not in dry.stdout.replace("would wait", "")
    assert snapshot() == before


def test_a_used_token_fails_clearly_and_changes_nothing(
    machine: Machine, installed: tuple[dict[str, Any], Run]
) -> None:
    """A token another machine already enrolled with: exit 1, refused (berth does not say
    which of unknown, used or expired), no change."""
    server = machine.new_server()
    enrolled = httpx.post(
        f"{machine.berth.url}/api/agent/servers/enroll",
        headers={"Authorization": f"Bearer {server['enrollmentToken']}"},
        json={"hostKeys": [_random_host_key()]},
        timeout=10,
    )
    assert enrolled.status_code == 200, enrolled.text
    before = snapshot()
    run = machine.run(server)
    assert run.returncode == 1, run.output
    assert "berth refused the enrollment token" in run.stderr
    assert "already used, or has expired" in run.stderr
    assert "Nothing was changed." in run.stderr
    assert snapshot() == before


def test_another_servers_token_is_refused_on_an_enrolled_machine(
    machine: Machine, installed: tuple[dict[str, Any], Run]
) -> None:
    """A machine enrolled as one server is not enrolled again as another; the token stays
    usable (pending)."""
    first, _ = installed
    server = machine.new_server()
    before = snapshot()
    run = machine.run(server)
    assert run.returncode == 1, run.output
    assert f"already enrolled as server {first['id']}" in run.stderr
    assert snapshot() == before
    assert server_of(machine.api, server["id"])["status"] == "pending"


def test_an_expired_token_fails_clearly_and_changes_nothing(
    machine: Machine, installed: tuple[dict[str, Any], Run]
) -> None:
    """A token past its hour: exit 1, "expired", no change; the server stays pending."""
    server = machine.new_server()
    expire_enrollment(machine.berth, server["id"])
    before = snapshot()
    run = machine.run(server)
    assert run.returncode == 1, run.output
    assert "already used, or has expired" in run.stderr
    assert snapshot() == before
    assert server_of(machine.api, server["id"])["status"] == "pending"


# -- uninstalling -----------------------------------------------------------------------------


def test_uninstall_leaves_running_apps_running(
    machine: Machine, installed: tuple[dict[str, Any], Run], app_port: int
) -> None:
    """--uninstall removes exactly what the script added; the app keeps running. berth is
    told: the server is removed, its connection gone (no sshd session of berth's left),
    and a deploy to it is refused at once."""
    server, _ = installed
    (container,) = [c for c in _app_containers(machine, server) if c["State"]["Running"]]
    assert server_of(machine.api, server["id"])["status"] == "online"
    assert _berth_sessions(machine)  # berth's pooled connection, as sshd runs it for user berth
    dry = run_script(f"sh {TEMPLATE} --uninstall --dry-run", env=machine.env)
    assert dry.returncode == 0, dry.output
    assert "would remove berth's key" in dry.stdout
    assert "would tell berth at" in dry.stdout
    assert server_of(machine.api, server["id"])["status"] == "online"
    run = run_script(f"sh {TEMPLATE} --uninstall", env=machine.env)
    assert run.returncode == 0, run.output
    assert "apps keep running" in run.stdout
    assert f"berth marked server {server['id']} removed" in run.stdout
    assert snapshot() == machine.pristine  # berth's files, key, sshd block and Caddy: gone
    assert not (machine.sshd.dropin_dir / "00-berth.conf").exists()
    assert _sshd_settings(machine.sshd, "berth")["allowstreamlocalforwarding"] == "yes"
    assert _berth_sessions(machine) == []
    found = server_of(machine.api, server["id"])
    assert found["status"] == "removed"
    assert found["statusDetail"].startswith("Uninstalled by its install script")
    refused = deploy(machine.api, server["id"], f"{APP_TAG}after", host_port(), wait=None)
    assert problem(refused, 409)["type"] == "urn:berth:problem:server-removed"
    time.sleep(1.5)  # three monitor passes: none brings it back
    assert server_of(machine.api, server["id"])["status"] == "removed"
    assert _berth_sessions(machine) == []
    (still,) = [c for c in _app_containers(machine, server) if c["State"]["Running"]]
    assert still["Id"] == container["Id"]
    assert still["State"]["StartedAt"] == container["State"]["StartedAt"]
    assert get_app(app_port).text == "hello from v1\n"
    assert subprocess.run(["id", "berth"], capture_output=True, check=False).returncode == 0
    again = run_script(f"sh {TEMPLATE} --uninstall", env=machine.env)
    assert again.returncode == 0
    assert "nothing to uninstall" in again.stdout


def test_uninstall_ends_berths_sessions_even_when_berth_cannot_be_told(
    machine: Machine,
) -> None:
    """berth unreachable at uninstall: a warning, the key gone and berth's sshd sessions
    ended all the same; berth then finds the server offline, never online again."""
    server = machine.new_server()
    run = machine.run(server)
    assert run.returncode == 0, run.output
    assert _berth_sessions(machine)
    gone = run_script(f"sh {TEMPLATE} --uninstall --base-url http://127.0.0.1:9", env=machine.env)
    assert gone.returncode == 0, gone.output
    assert "could not tell berth at http://127.0.0.1:9" in gone.stderr
    assert "end berth's SSH sessions" in gone.stdout
    assert _berth_sessions(machine) == []
    assert snapshot() == machine.pristine
    offline = wait_until(
        lambda: server_of(machine.api, server["id"]),
        lambda found: found["status"] == "offline",
        15,
        "server offline",
    )
    assert offline["statusDetail"]
    time.sleep(1.5)  # three monitor passes: the key is gone, it stays offline
    assert server_of(machine.api, server["id"])["status"] == "offline"


def test_purge_removes_only_this_servers_apps(machine: Machine, echo_image: str) -> None:
    """--uninstall --purge: the containers berth deployed as this server go, with their
    data; another server's, and berth's without a server label, stay with theirs."""
    server = machine.new_server()
    run = machine.run(server)
    assert run.returncode == 0, run.output
    _, installation = deployed(
        deploy(machine.api, server["id"], f"{APP_TAG}purged", host_port()), "succeeded"
    )
    (mine,) = containers_of(installation["id"])
    assert mine["Config"]["Labels"]["berth.server"] == server["id"]
    apps = Path("/var/lib/berth/apps")
    own_data = apps / mine["Name"].lstrip("/")
    own_data.mkdir(parents=True, exist_ok=True)
    client = docker_client()
    foreign = []
    try:
        for labels in (
            {"berth.managed": "true", "berth.server": str(uuid.uuid4()), RUN_LABEL: RUN},
            {"berth.managed": "true", RUN_LABEL: RUN},
        ):
            name = f"{APP_TAG}foreign-{uuid.uuid4().hex[:6]}"
            client.api.create_container(echo_image, name=name, labels=labels)
            foreign.append(name)
            (apps / name).mkdir(parents=True)
        purge = run_script(f"sh {TEMPLATE} --uninstall --purge", env=machine.env)
        assert purge.returncode == 0, purge.output
        assert f"remove server {server['id']}'s containers: {APP_TAG}purged" in purge.stdout
        assert containers_of(installation["id"]) == []
        assert not own_data.exists()
        for name in foreign:
            assert inspect_named(name) is not None, name
            assert (apps / name).is_dir()
        assert re.search(r"\b\d+ other container\(s\) of berth stay", purge.stdout)
    finally:
        client.close()
        remove_containers(f"{APP_TAG}foreign-")
        for name in foreign:
            shutil.rmtree(apps / name, ignore_errors=True)
        with contextlib.suppress(OSError):
            apps.rmdir()
            apps.parent.rmdir()
    assert server_of(machine.api, server["id"])["status"] == "removed"


# -- helpers ------------------------------------------------------------------------------------


def _refused_by_sshd(machine: Machine, edit: Callable[[list[str]], list[str]]) -> Run:
    """The install command of a new server run against an sshd (without berth's block)
    whose config lines ``edit`` changed: it must exit 1 before any change, the server
    still pending. The run, for what it said."""
    sshd = Sshd(authorized_keys_file=".ssh/authorized_keys", berth_block=False)
    lines = edit(sshd.config_path.read_text().splitlines())
    sshd.config_path.write_text("\n".join([*lines, ""]))
    sshd.start()
    try:
        server = machine.new_server()
        before = snapshot()
        run = machine.run(server, BERTH_SSHD_CONFIG=str(sshd.config_path))
        assert run.returncode == 1, run.output
        assert "Nothing was changed." in run.stderr
        assert snapshot() == before
        assert server_of(machine.api, server["id"])["status"] == "pending"
        return run
    finally:
        sshd.stop()


def _sshd_settings(sshd: Sshd, user: str) -> dict[str, str]:
    """What the sshd applies to a connection of ``user`` (``sshd -T -C``), keyword → value."""
    done = subprocess.run(
        [
            "/usr/sbin/sshd",
            "-T",
            "-f",
            str(sshd.config_path),
            "-C",
            f"user={user},host=x,addr=127.0.0.1",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)


def _berth_sessions(machine: Machine) -> list[str]:
    """The pids of user berth's sessions on the machine's sshd (its children's children:
    other tests' sshds have berth sessions of their own)."""
    master = (machine.sshd.dir / "sshd.pid").read_text().strip()
    found = subprocess.run(
        ["pgrep", "-u", "berth", "-x", "sshd(-sess.*)?"],
        capture_output=True,
        text=True,
        check=False,
    )
    mine = []
    for pid in found.stdout.split():
        parent = _ppid(pid)
        if master in (parent, _ppid(parent)):
            mine.append(pid)
    return mine


def _ppid(pid: str) -> str:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return ""
    return next((line.split()[1] for line in status.splitlines() if line.startswith("PPid:")), "")


def _app_containers(machine: Machine, server: dict[str, Any]) -> list[dict[str, Any]]:
    listing = machine.api.get("/api/agent/install", params={"serverId": server["id"]}).json()
    found: list[dict[str, Any]] = []
    for installation in listing["installations"]:
        found.extend(containers_of(installation["id"]))
    return found


def _random_host_key() -> str:
    import asyncssh

    key = asyncssh.generate_private_key("ssh-ed25519", comment=f"other-{uuid.uuid4().hex[:6]}")
    return key.export_public_key("openssh").decode().strip()
