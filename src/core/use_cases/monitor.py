"""Keep every server's status, facts and container snapshot current, and its reverse
proxy's configuration equal to the routes berth holds for it.

Built for a fleet of a thousand servers from one process:

* at most ``concurrency`` checks run at once; when more servers are due than that,
  their starts are spread (with jitter) over ``spread`` seconds;
* a server that keeps failing is retried less and less often (``backoff``), so dead
  servers do not eat the pass;
* connecting and Docker's answers have their own timeouts; a slow answer keeps the
  pooled connection (only ``DROP_AFTER_TIMEOUTS`` slow answers in a row drop it);
* only what changed is written, batched (``Fleet.record``): a status or its reason,
  facts, ``last_seen_at`` at most every ``SEEN_EVERY``, and the container snapshot when
  the list changed (or is older than ``SEEN_EVERY``). A pass where nothing changed
  writes nothing;
* Docker's facts (version, OS, CPUs) are asked on each new connection and then every
  ``FACTS_EVERY``, not at every pass; the proxy's configuration on each new connection
  and then every ``PROXY_EVERY_PASSES`` passes.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

import structlog

from ..errors import HostKeyMismatch, RuntimeFailure, ServerUnreachable
from ..models import Container, Server, ServerFacts, ServerObservation, ServerStatus
from ..ports import Clock, Fleet, ServerConnection, ServerGateway
from ..types import fingerprints
from .routes import RouteTable

__all__ = [
    "DROP_AFTER_TIMEOUTS",
    "FACTS_EVERY",
    "HOST_KEY_MISMATCH",
    "PROXY_EVERY_PASSES",
    "SEEN_EVERY",
    "Backoff",
    "MonitorServers",
    "mismatch_detail",
]

log = structlog.get_logger()

#: How an offline server's detail starts when its host key is not the pinned one.
HOST_KEY_MISMATCH = "Host key mismatch"

#: ``last_seen_at`` (and an unchanged container snapshot) is written at most this often.
SEEN_EVERY = timedelta(seconds=60)

#: Docker's facts are asked again this long after the last time (and on a new connection).
FACTS_EVERY = timedelta(minutes=10)

#: After this many checks in a row whose Docker calls did not answer in time, the
#: pooled connection is dropped (the next check reconnects).
DROP_AFTER_TIMEOUTS = 3

#: Observations written in one transaction at most; a pass writes when it has this many.
BATCH = 200

#: Each server's proxy is checked every this many passes (staggered across servers), and
#: on each new connection: a proxy that restarted is healed within that many passes.
PROXY_EVERY_PASSES = 6


@dataclass(frozen=True)
class Backoff:
    """When a server that keeps failing is checked again.

    The first failure is retried at the next pass; after ``n ≥ 2`` failures in a row the
    server is skipped for ``first · 2^(n-2)`` (at most ``longest``), ±``jitter``.
    """

    first: timedelta = timedelta(seconds=10)
    longest: timedelta = timedelta(minutes=5)
    jitter: float = 0.2

    def delay(self, failures: int, rng: random.Random) -> timedelta:
        if failures < 2:
            return timedelta(0)
        doublings: int = min(failures - 2, 30)
        base = min(self.first * (1 << doublings), self.longest)
        return base * (1 + self.jitter * (2 * rng.random() - 1))


@dataclass
class _Watched:
    """What the monitor remembers of one server between passes (not stored)."""

    target: tuple[str | None, int, str, tuple[str, ...]]
    failures: int = 0
    retry_at: datetime | None = None
    timeouts: int = 0
    connection: ServerConnection | None = None  # the one facts were last asked on
    facts_at: datetime | None = None
    containers: tuple[Container, ...] | None = None  # the snapshot last written
    snapshot_at: datetime | None = None
    proxy_on: ServerConnection | None = None  # the connection the proxy was last checked on
    proxy_turn: int = 0  # which of every ``PROXY_EVERY_PASSES`` passes checks the proxy


def _target(server: Server) -> tuple[str | None, int, str, tuple[str, ...]]:
    """What berth connects to: a change (a new address, port, user, or re-pinned host
    keys) makes the server due at once, whatever its backoff."""
    return (server.address, server.ssh_port, server.ssh_user, server.host_keys)


def _same_list(a: tuple[Container, ...], b: tuple[Container, ...]) -> bool:
    """Equal but for Docker's human ``status`` text ("Up 3 minutes"), which ages."""
    strip = [(c.id, c.name, c.image, c.state, c.created_at, c.ports, c.installation_id) for c in a]
    return strip == [
        (c.id, c.name, c.image, c.state, c.created_at, c.ports, c.installation_id) for c in b
    ]


def mismatch_detail(pinned: tuple[str, ...], offered: str | None, why: str) -> str:
    """The status detail of a server whose host key changed: both fingerprints, and how
    to accept the new key."""
    old = ", ".join(fingerprints(pinned)) or "none"
    if offered is None:
        return f"{HOST_KEY_MISMATCH}: refusing to connect ({why}). Pinned: {old}."
    new = ", ".join(fingerprints((offered,))) or "unreadable"
    return (
        f"{HOST_KEY_MISMATCH}: the server offered {new}; pinned: {old}. berth will not "
        "connect until the new key is confirmed (POST …/host-keys, `berth servers repin`, "
        "or the server's page)."
    )


class MonitorServers:
    """One pass over the fleet: reach each due server, record online/offline with facts.

    With ``routes``, each online server's proxy is also checked: when its live
    configuration differs from the server's routes (the proxy restarted, or was edited
    by hand), the routes are loaded again (logged ``proxy_reapplied``). A proxy that
    cannot be reached or refuses is logged once per change of reason, never raised.

    ``connect_timeout`` bounds reaching the server (the SSH handshake); ``timeout``
    bounds Docker's answers once connected, and the proxy check.
    """

    def __init__(
        self,
        fleet: Fleet,
        gateway: ServerGateway,
        clock: Clock,
        *,
        timeout: float = 10.0,
        connect_timeout: float | None = None,
        routes: RouteTable | None = None,
        concurrency: int = 64,
        spread: float = 0.0,
        backoff: Backoff | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._fleet = fleet
        self._gateway = gateway
        self._clock = clock
        self._timeout = timeout
        self._connect_timeout = timeout if connect_timeout is None else connect_timeout
        self._routes = routes
        self._slots = asyncio.Semaphore(max(1, concurrency))
        self._concurrency = max(1, concurrency)
        self._spread = spread
        self._backoff = backoff or Backoff()
        self._rng = rng or random.Random()
        self._proxy_problems: dict[UUID, str] = {}
        self._watched: dict[UUID, _Watched] = {}
        self._pending: list[ServerObservation] = []
        self._written = 0  # observations written in the pass under way
        self._passes = 0

    async def __call__(self) -> None:
        servers = await self._fleet.servers()
        now = self._clock.now()
        self._passes += 1
        self._forget_gone(servers)
        due = [server for server in servers if self._due(server, now)]
        spread = self._spread if len(due) > self._concurrency else 0.0
        count = len(due)
        started = asyncio.get_running_loop().time()
        self._written = 0
        outcomes = await asyncio.gather(
            *(
                self._slot(server, spread * (i + self._rng.random()) / count)
                for i, server in enumerate(due)
            ),
            return_exceptions=True,
        )
        await self._flush()
        log.debug(
            "monitor_pass",
            servers=len(servers),
            checked=count,
            written=self._written,
            seconds=round(asyncio.get_running_loop().time() - started, 3),
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    # -- which servers, when ------------------------------------------------------------

    def _due(self, server: Server, now: datetime) -> bool:
        """Whether ``server`` is checked in this pass: the one place that decides."""
        watched = self._watched.get(server.id)
        if watched is None or watched.target != _target(server):
            turn = self._rng.randrange(PROXY_EVERY_PASSES)
            self._watched[server.id] = _Watched(target=_target(server), proxy_turn=turn)
            return True
        return watched.retry_at is None or now >= watched.retry_at

    def _forget_gone(self, servers: list[Server]) -> None:
        present = {server.id for server in servers}
        for server_id in [sid for sid in self._watched if sid not in present]:
            del self._watched[server_id]
            self._proxy_problems.pop(server_id, None)

    async def _slot(self, server: Server, delay: float) -> None:
        if delay > 0:
            await asyncio.sleep(delay)
        async with self._slots:
            await self._check(server)
        if len(self._pending) >= BATCH:
            await self._flush()

    # -- one server ---------------------------------------------------------------------

    async def _check(self, server: Server) -> None:
        watched = self._watched[server.id]
        conn: ServerConnection | None = None
        facts: ServerFacts | None = None
        try:
            async with asyncio.timeout(self._connect_timeout):
                conn = await self._gateway.connect(server)
            async with asyncio.timeout(self._timeout):
                if self._facts_due(watched, conn):
                    facts = await conn.docker.facts()
                containers = tuple(await conn.docker.list_containers())
        except HostKeyMismatch as exc:
            await self._mismatch(server, exc)
        except (ServerUnreachable, RuntimeFailure, TimeoutError) as exc:
            detail = getattr(exc, "detail", None) or "No answer in time."
            slow = conn is not None and isinstance(exc, TimeoutError)
            watched.timeouts = watched.timeouts + 1 if slow else 0
            # A connection that answered slowly stays (a handshake costs more than a wait);
            # one that could not be opened, or that stayed silent too often, is dropped.
            drop = conn is None or watched.timeouts >= DROP_AFTER_TIMEOUTS
            await self._failed(server, ServerStatus.OFFLINE, f"Unreachable: {detail}", drop=drop)
        else:
            self._online(server, watched, conn, facts, containers)
            await self._converge(server, conn)

    def _facts_due(self, watched: _Watched, conn: ServerConnection) -> bool:
        if watched.connection is not conn or watched.facts_at is None:
            return True
        return self._clock.now() - watched.facts_at >= FACTS_EVERY

    def _online(
        self,
        server: Server,
        watched: _Watched,
        conn: ServerConnection,
        facts: ServerFacts | None,
        containers: tuple[Container, ...],
    ) -> None:
        now = self._clock.now()
        watched.failures = watched.timeouts = 0
        watched.retry_at = None
        if facts is not None:
            watched.connection, watched.facts_at = conn, now
        changed = server.status is not ServerStatus.ONLINE or server.status_detail is not None
        seen = server.last_seen_at is None or now - server.last_seen_at >= SEEN_EVERY
        snapshot = (
            watched.containers is None
            or watched.snapshot_at is None
            or not _same_list(watched.containers, containers)
            or now - watched.snapshot_at >= SEEN_EVERY
        )
        new_facts = facts if facts is not None and facts != server.facts else None
        if snapshot:
            watched.containers, watched.snapshot_at = containers, now
        if changed or seen or snapshot or new_facts is not None:
            self._pending.append(
                ServerObservation(
                    server_id=server.id,
                    at=now,
                    status=ServerStatus.ONLINE if changed else None,
                    seen=changed or seen,
                    facts=new_facts,
                    containers=containers if snapshot else None,
                )
            )
        if server.status is not ServerStatus.ONLINE:
            log.info("server_online", server_id=str(server.id))

    async def _failed(
        self, server: Server, status: ServerStatus, detail: str, *, drop: bool
    ) -> None:
        """Record a failed check: the status (written only if it changed), the backoff,
        and the connection dropped if ``drop``."""
        self._back_off(server)
        if drop:
            await self._drop(server)
        if server.status is not status or server.status_detail != detail:
            self._pending.append(
                ServerObservation(
                    server_id=server.id, at=self._clock.now(), status=status, detail=detail
                )
            )
            log.info("server_offline", server_id=str(server.id), detail=detail)

    def _back_off(self, server: Server) -> None:
        """One more failure in a row: the server's next check waits (``Backoff``)."""
        watched = self._watched[server.id]
        watched.failures += 1
        delay = self._backoff.delay(watched.failures, self._rng)
        watched.retry_at = self._clock.now() + delay if delay else None
        watched.containers = watched.snapshot_at = None

    async def _drop(self, server: Server) -> None:
        """Close the server's pooled connection: the next check opens a new one."""
        watched = self._watched[server.id]
        watched.connection = watched.proxy_on = None
        watched.timeouts = 0
        await self._gateway.disconnect(server.id)

    async def _flush(self) -> None:
        while self._pending:
            batch, self._pending = self._pending[:BATCH], self._pending[BATCH:]
            try:
                await self._fleet.record(batch)
                self._written += len(batch)
            except BaseException:
                # Not written: the next pass sees the old status and writes it again; the
                # snapshots are marked unwritten so that they are too.
                for observation in batch:
                    watched = self._watched.get(observation.server_id)
                    if watched is not None and observation.containers is not None:
                        watched.containers = watched.snapshot_at = None
                raise

    async def _converge(self, server: Server, conn: ServerConnection) -> None:
        """Load the server's routes again if its proxy's configuration drifted (checked on
        a new connection, then every ``PROXY_EVERY_PASSES`` passes)."""
        if self._routes is None:
            return
        watched = self._watched[server.id]
        turn = self._passes % PROXY_EVERY_PASSES == watched.proxy_turn
        if watched.proxy_on is conn and not turn:
            return
        watched.proxy_on = conn
        try:
            async with asyncio.timeout(self._timeout):
                reapplied = await self._routes.converge(server.id, conn.proxy)
        except (ServerUnreachable, RuntimeFailure, TimeoutError) as exc:
            detail = getattr(exc, "detail", None) or "No answer in time."
            if self._proxy_problems.get(server.id) != detail:
                self._proxy_problems[server.id] = detail
                log.warning("proxy_not_converged", server_id=str(server.id), detail=detail)
            return
        if self._proxy_problems.pop(server.id, None) is not None:
            log.info("proxy_reachable", server_id=str(server.id))
        if reapplied:
            log.info("proxy_reapplied", server_id=str(server.id))

    async def _mismatch(self, server: Server, exc: HostKeyMismatch) -> None:
        """The server offered another host key: ``host_key_mismatch``, with the pinned
        and offered fingerprints in the detail, until the user re-pins. Written at once,
        not batched: it is rare, and the user is waiting to confirm the key."""
        self._back_off(server)
        await self._drop(server)
        if exc.offered_key is not None:
            # Re-pinned while this check ran: the next pass connects with the new keys.
            now_pinned = await self._fleet.credentials(server.id)
            offered = " ".join(exc.offered_key.split()[:2])
            if now_pinned is not None and offered in now_pinned.host_keys:
                self._watched[server.id].retry_at = None
                return
        detail = mismatch_detail(server.host_keys, exc.offered_key, exc.detail)
        seen = ServerObservation(
            server_id=server.id,
            at=self._clock.now(),
            status=ServerStatus.HOST_KEY_MISMATCH,
            detail=detail,
            offered_host_key=exc.offered_key,
        )
        await self._fleet.record([seen])
        if server.status is not ServerStatus.HOST_KEY_MISMATCH or server.status_detail != detail:
            log.warning("server_host_key_mismatch", server_id=str(server.id), detail=detail)
