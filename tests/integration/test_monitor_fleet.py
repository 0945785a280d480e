"""The monitor of a fleet with the real parts: ``berth serve`` (its worker watching the
servers) and servers behind a real sshd.

* A fault of the network, not of the servers -- every server's sshd gone at once --
  is recovered from together, within a pass of its end, not as each server's backoff
  (10 s, 20 s, 40 s ...) lets it be checked again.
* After a restart a status no worker has verified lately reads ``checking`` (with the
  stored one as ``lastKnownStatus``) until the worker has checked the server again: the
  API never presents an old ``online`` as the truth.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from deploy_support import FAST_ENV, RUN, add_ssh_server, get_json, wait_until
from harness import Api, BerthProcess
from infra import Sshd

pytestmark = pytest.mark.integration

#: More servers than the monitor needs to tell a fault of the network (``CORRELATED_MIN``).
SERVERS = 10
#: Long enough that every server's own backoff reached 40 s (±20 %) before it ends: its
#: second failure waits 10 s, its third 20 s, its fourth 40 s.
OUTAGE = 40.0
#: Every server online again within this after sshd is back: a pass or two (0.5 s apart,
#: plus the handshakes), where the servers' backoff would take 16 s and more.
RECOVERY = 15.0
#: A status reads ``checking`` this long after its worker last stood by it, with
#: ``BERTH_MONITOR_SECONDS=0.5``: two passes' time, 2 * (0.5 s + the 10 s a pass may take).
STALE_AFTER = 21.0


def _statuses(api: Api) -> dict[str, tuple[str, str | None]]:
    """Each server's ``(status, lastKnownStatus)`` as the API reads them, by id."""
    listed = get_json(api, "/api/agent/servers")["servers"]
    return {s["id"]: (s["status"], s.get("lastKnownStatus")) for s in listed}


@contextlib.contextmanager
def _silent_listener(port: int) -> Iterator[None]:
    """Something on ``127.0.0.1:port`` that accepts connections and never says a word (a
    server whose sshd hangs): a client waits out its connect timeout."""
    held: list[socket.socket] = []
    server = socket.create_server(("127.0.0.1", port), reuse_port=False)
    server.settimeout(0.2)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                conn, _ = server.accept()
                held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()


@contextlib.contextmanager
def _berth_and_sshd(tmp_path: Path, user: str) -> Iterator[tuple[BerthProcess, Sshd, str]]:
    """An sshd of the test's own and a berth with fast loops, and the token of its one
    user (``user…``); both stopped at the end."""
    sshd = Sshd().start()
    berth = BerthProcess(tmp_path / "data", env=FAST_ENV)
    try:
        berth.start()
        [(_, token)] = berth.new_users(1, user)
        yield berth, sshd, token
    finally:
        berth.stop()
        sshd.stop()


class TestCorrelatedFailures:
    def test_a_fleet_wide_ssh_outage_recovers_within_a_pass_of_its_end(
        self, tmp_path: Path
    ) -> None:
        """Ten servers behind one sshd, all online; sshd stopped for 40 s (every check
        fails: each server's own backoff would have reached 40 s); once sshd is back,
        every server is online again within 15 s -- the servers probed together, not
        each when its backoff lets it."""
        with _berth_and_sshd(tmp_path, "outage") as (berth, sshd, token):
            with berth.api(token) as api:
                ids = [add_ssh_server(api, sshd, f"outage-{RUN}-{n}")["id"] for n in range(SERVERS)]
                online = dict.fromkeys(ids, ("online", None))
                wait_until(lambda: _statuses(api), lambda s: s == online, 60, "all online")

                sshd.halt()
                began = time.monotonic()
                offline = dict.fromkeys(ids, ("offline", None))
                wait_until(lambda: _statuses(api), lambda s: s == offline, 30, "all offline")
                time.sleep(max(0.0, OUTAGE - (time.monotonic() - began)))
                sshd.start()
                wait_until(
                    lambda: _statuses(api),
                    lambda s: s == online,
                    RECOVERY,
                    "every server online again after the outage",
                )
            events = [r.get("event") for r in berth.log_records()]
            assert "fleet_unreachable" in events
            assert "fleet_reachable_again" in events


class TestStaleStatusesAfterARestart:
    def test_a_status_nobody_verified_lately_reads_checking_until_checked(
        self, tmp_path: Path
    ) -> None:
        """A server online; berth stopped for longer than two passes, and meanwhile the
        server's sshd hangs (accepts, never answers); berth started again: until its check
        gives up (the 10 s connect timeout) the server reads ``checking`` with
        ``lastKnownStatus`` ``online`` -- never the stored ``online`` -- then ``offline``."""
        with _berth_and_sshd(tmp_path, "restart") as (berth, sshd, token):
            with berth.api(token) as api:
                server_id = add_ssh_server(api, sshd, f"restart-{RUN}")["id"]
                wait_until(
                    lambda: _statuses(api),
                    lambda s: s == {server_id: ("online", None)},
                    60,
                    "the server online",
                )
            berth.stop()
            stopped = time.monotonic()
            sshd.halt()
            with _silent_listener(sshd.port):
                time.sleep(max(0.0, STALE_AFTER + 1 - (time.monotonic() - stopped)))
                berth.start()
                seen: list[tuple[str, str | None]] = []
                with berth.api(token) as api:

                    def read() -> tuple[str, str | None]:
                        seen.append(_statuses(api)[server_id])
                        return seen[-1]

                    wait_until(read, lambda s: s == ("offline", None), 60, "offline, checked")
            assert seen[0] == ("checking", "online"), seen
            assert ("online", None) not in seen, seen
