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

With a ``share`` (``fleet_share.FleetShare``: a worker's), a pass watches only the
servers whose lease the worker holds, and none while its lease ran out; at the end of a
pass it tells the store which statuses it stood by (``Fleet.stood_by``: what keeps them
from reading ``checking``).

When most servers fail in one pass (``CORRELATED_SHARE`` of at least ``CORRELATED_MIN``),
the fault is the network (or the SSH port everywhere), not the servers: they are not
backed off one by one. Until the fault ends only ``PROBE_SAMPLE`` of them are tried per
pass; as soon as one answers, every one of them is checked again in a pass started at
once, so the fleet recovers together, within a pass of the end.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

import structlog

from ..errors import HostKeyMismatch, RuntimeFailure, ServerUnreachable, StoreUnavailable
from ..models import Container, RunState, Server, ServerFacts, ServerObservation, ServerStatus
from ..outages import ThrottledWarning
from ..ports import Clock, Fleet, ServerConnection, ServerGateway
from ..types import fingerprints
from ..watch import PassView
from .fleet_share import FleetShare
from .routes import RouteTable
from .watch import ContainerEvents, WatchContainers, listed_state

__all__ = [
    "CORRELATED_MIN",
    "CORRELATED_SHARE",
    "DROP_AFTER_TIMEOUTS",
    "FACTS_EVERY",
    "HOST_KEY_MISMATCH",
    "PROBE_SAMPLE",
    "PROXY_EVERY_PASSES",
    "RECONCILE_EVERY",
    "SEEN_EVERY",
    "STORE_CONCURRENCY",
    "Backoff",
    "MonitorServers",
    "mismatch_detail",
    "status_fresh_for",
]

log = structlog.get_logger()

#: How an offline server's detail starts when its host key is not the pinned one.
HOST_KEY_MISMATCH = "Host key mismatch"

#: ``last_seen_at`` (and an unchanged container snapshot) is written at most this often.
SEEN_EVERY = timedelta(seconds=60)

#: Each server's apps as recorded are compared with its container list this often (what
#: a pass's diff cannot see: an app deployed and gone between two passes).
RECONCILE_EVERY = timedelta(seconds=20)

#: Docker's facts are asked again this long after the last time (and on a new connection).
FACTS_EVERY = timedelta(minutes=10)

#: After this many checks in a row whose Docker calls did not answer in time, the
#: pooled connection is dropped (the next check reconnects).
DROP_AFTER_TIMEOUTS = 3

#: Observations written in one transaction at most; a pass writes when it has this many.
BATCH = 200

#: The monitor's checks use the store (an app's records, a server's routes) this many at
#: a time: the rest of the store's connections stay free for the deployments and the API
#: (64 checks at once had taken SQLite's 60, and a deployment's lease renewal waited).
STORE_CONCURRENCY = 8

#: Each server's proxy is checked every this many passes (staggered across servers), and
#: on each new connection: a proxy that restarted is healed within that many passes.
PROXY_EVERY_PASSES = 6

#: A pass in which at least this many servers, and this share of those it checked, could
#: not be reached found a fault of the network, not of the servers.
CORRELATED_MIN = 8
CORRELATED_SHARE = 0.5
#: Servers tried per pass while such a fault lasts.
PROBE_SAMPLE = 8

#: The longest a pass may take (the fleet's goal); past it statuses may read ``checking``.
PASS_GOAL = timedelta(seconds=10)

_not_holding = ThrottledWarning("monitor_lease_lapsed")


def status_fresh_for(monitor_seconds: float) -> timedelta:
    """How long a status stands after its watcher last stood by it: the time between the
    ends of two passes (the interval and a pass at its longest), with a pass to spare.
    Older, it reads ``checking`` (``Server.shown``): no worker is watching it now."""
    return 2 * (timedelta(seconds=monitor_seconds) + PASS_GOAL)


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
    # Each installation's containers as the last refreshed check listed them (id, state).
    apps: dict[UUID, frozenset[tuple[str, str]]] | None = None
    recheck: bool = False  # an installation awaits recovery: refresh them all next pass
    reconciled_at: datetime | None = None  # the apps' records last compared with the list
    proxy_turn: int = 0  # which of every ``PROXY_EVERY_PASSES`` passes checks the proxy
    checked: bool = False  # checked at least once since this worker took it


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
    bounds Docker's answers once connected, and the proxy check. ``store_concurrency``
    bounds the checks using the store at once (``STORE_CONCURRENCY``); waiting for that
    turn is not counted as the server's slowness.

    ``share``: the worker's share of the fleet (only its servers are watched); a server
    it gives back is forgotten, its pooled connection closed unless ``in_use`` says a
    deployment of this process uses it.

    ``watch``: the apps under watch (``berth.core.use_cases.watch``): after each check,
    the installations whose containers changed since the last pass (all of them the first
    time, and those awaiting recovery) are refreshed; with ``events``, each online
    server's Docker event stream is held open too, and closed when it goes offline or
    is forgotten.
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
        store_concurrency: int = STORE_CONCURRENCY,
        spread: float = 0.0,
        backoff: Backoff | None = None,
        watch: WatchContainers | None = None,
        events: ContainerEvents | None = None,
        rng: random.Random | None = None,
        share: FleetShare | None = None,
        in_use: Callable[[UUID], bool] | None = None,
    ) -> None:
        self._fleet = fleet
        self._gateway = gateway
        self._clock = clock
        self._timeout = timeout
        self._connect_timeout = timeout if connect_timeout is None else connect_timeout
        self._routes = routes
        self._slots = asyncio.Semaphore(max(1, concurrency))
        self._concurrency = max(1, concurrency)
        self._store = asyncio.Semaphore(max(1, store_concurrency))
        self._spread = spread
        self._backoff = backoff or Backoff()
        self._rng = rng or random.Random()
        self._proxy_problems: dict[UUID, str] = {}
        self._watched: dict[UUID, _Watched] = {}
        self._pending: list[ServerObservation] = []
        self._written = 0  # observations written in the pass under way
        self._passes = 0
        self._share = share
        self._in_use = in_use
        self._watch = watch
        self._events = events
        self._held: set[UUID] = set()  # the servers of the pass under way still held
        self._checking: set[UUID] = set()  # servers whose check is under way
        self._reached: list[UUID] = []  # of the pass under way: servers that answered
        self._unreached: list[UUID] = []  # ... and those that could not be reached
        self._outage = False  # most servers failed at once: a fault of the network
        self._sample: set[UUID] = set()  # the failing servers tried in this pass
        # The routes and watch targets of the pass under way, read at its start (``None``
        # outside a pass, or when the store could not answer: each check reads its own).
        self._view: PassView | None = None

    @property
    def checking(self) -> frozenset[UUID]:
        """The servers whose check is under way (a share gives none of them back)."""
        return frozenset(self._checking)

    @property
    def outage(self) -> bool:
        """Whether the last pass found most servers unreachable at once."""
        return self._outage

    async def __call__(self) -> None:
        """One pass; when it sees the end of a fault of the network, another at once."""
        if await self._pass():
            await self._pass()

    async def recheck(self, server_ids: Collection[UUID]) -> None:
        """Check these servers now, not the fleet (a deployment on each just ended: its
        container list is news). Only servers a pass already checked and still held here,
        and not backing off; written as a pass writes. A thousand servers' pass per
        deployment's end would keep the event loop from the deployments still running."""
        share = self._share
        if share is not None and not share.holding():
            return
        wanted = {
            sid
            for sid in server_ids
            if sid in self._held and (w := self._watched.get(sid)) is not None and not w.failures
        }
        if not wanted:
            return
        servers = await self._fleet.servers(None if share is None else share.worker_id)
        due = [s for s in servers if s.id in wanted and self._watched[s.id].target == _target(s)]
        outcomes = await asyncio.gather(
            *(self._slot(server, 0.0) for server in due), return_exceptions=True
        )
        await self._flush()
        log.debug("monitor_recheck", checked=len(due))
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    async def _pass(self) -> bool:
        share = self._share
        if share is not None and not share.holding():
            _not_holding.warn(worker_id=share.worker_id)
            return False
        servers = await self._fleet.servers(None if share is None else share.worker_id)
        now = self._clock.now()
        self._passes += 1
        await self._forget_gone(servers)
        self._held = {server.id for server in servers}
        self._sample = self._sample_of_failing() if self._outage else set()
        due = [server for server in servers if self._due(server, now)]
        spread = self._spread if len(due) > self._concurrency else 0.0
        count = len(due)
        started = asyncio.get_running_loop().time()
        self._written = 0
        self._reached, self._unreached = [], []
        self._view = await self._pass_view(due)
        try:
            outcomes = await asyncio.gather(
                *(
                    self._slot(server, spread * (i + self._rng.random()) / count)
                    for i, server in enumerate(due)
                ),
                return_exceptions=True,
            )
        finally:
            self._view = None
        await self._flush()
        recovered = self._after_pass()
        if share is not None and share.holding():
            stood = [sid for sid in self._held if (w := self._watched.get(sid)) and w.checked]
            await self._fleet.stood_by(share.worker_id, stood, now)
        log.debug(
            "monitor_pass",
            servers=len(servers),
            checked=count,
            written=self._written,
            seconds=round(asyncio.get_running_loop().time() - started, 3),
            outage=self._outage,
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return recovered

    async def _pass_view(self, due: list[Server]) -> PassView | None:
        """The routes and watch targets of the servers due, in one read: a pass that
        reconnects every server (a restart, the end of an outage) compares each with the
        store's view, and one read per server and kind had made it eight times as long
        as a steady pass. ``None`` when nothing needs it, or the store cannot answer now
        (each check then reads its own, and meets the outage there)."""
        if not due or (self._routes is None and self._watch is None):
            return None
        try:
            return await self._fleet.pass_view([server.id for server in due])
        except StoreUnavailable:
            return None

    def _sample_of_failing(self) -> set[UUID]:
        failing = sorted(sid for sid, w in self._watched.items() if w.failures)
        return set(self._rng.sample(failing, min(PROBE_SAMPLE, len(failing))))

    def _after_pass(self) -> bool:
        """Tell a fault of the network from faults of servers; whether one just ended
        (every server it held back is due again: the caller passes again at once)."""
        failed, answered = len(self._unreached), len(self._reached)
        if not self._outage:
            if failed >= CORRELATED_MIN and failed >= CORRELATED_SHARE * (failed + answered):
                self._outage = True
                log.warning("fleet_unreachable", unreachable=failed, reachable=answered)
                self._hold_back(self._unreached)
            return False
        if any(sid in self._sample for sid in self._reached):
            self._outage = False
            again = [sid for sid, w in self._watched.items() if w.failures]
            for sid in again:
                self._watched[sid].retry_at = None
            log.info("fleet_reachable_again", servers=len(again))
            return bool(again)
        self._hold_back(self._unreached)
        return False

    def _hold_back(self, server_ids: list[UUID]) -> None:
        """Servers failing with the network: no backoff of their own (the sample decides)."""
        for sid in server_ids:
            watched = self._watched.get(sid)
            if watched is not None:
                watched.failures, watched.retry_at = 1, None

    # -- which servers, when ------------------------------------------------------------

    def _due(self, server: Server, now: datetime) -> bool:
        """Whether ``server`` is checked in this pass: the one place that decides."""
        watched = self._watched.get(server.id)
        if watched is None or watched.target != _target(server):
            turn = self._rng.randrange(PROXY_EVERY_PASSES)
            self._watched[server.id] = _Watched(target=_target(server), proxy_turn=turn)
            return True
        if self._outage and watched.failures:
            return server.id in self._sample
        return watched.retry_at is None or now >= watched.retry_at

    async def _forget_gone(self, servers: list[Server]) -> None:
        present = {server.id for server in servers}
        await self.forget([sid for sid in self._watched if sid not in present])

    async def forget(self, server_ids: Collection[UUID]) -> None:
        """Stop watching these servers (removed, or given back to another worker): what was
        known of them goes, and so does the pooled connection unless a deployment of this
        process uses it (``in_use``)."""
        for server_id in server_ids:
            self._held.discard(server_id)
            if self._events is not None:
                await self._events.stop(server_id, forget=True)
            watched = self._watched.pop(server_id, None)
            self._proxy_problems.pop(server_id, None)
            if watched is None or self._share is None:
                continue
            if self._in_use is None or not self._in_use(server_id):
                await self._gateway.disconnect(server_id)

    async def _slot(self, server: Server, delay: float) -> None:
        if delay > 0:
            await asyncio.sleep(delay)
        async with self._slots:
            if server.id not in self._held:  # given back meanwhile: another worker's now
                return
            self._checking.add(server.id)
            try:
                await self._check(server)
            finally:
                self._checking.discard(server.id)
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
            await self._refresh_apps(server, watched, conn, containers)
        except HostKeyMismatch as exc:
            await self._mismatch(server, exc)
        except (ServerUnreachable, RuntimeFailure, TimeoutError) as exc:
            detail = getattr(exc, "detail", None) or "No answer in time."
            slow = conn is not None and isinstance(exc, TimeoutError)
            watched.timeouts = watched.timeouts + 1 if slow else 0
            # A connection that answered slowly stays (a handshake costs more than a wait);
            # one that could not be opened, or that stayed silent too often, is dropped.
            drop = conn is None or watched.timeouts >= DROP_AFTER_TIMEOUTS
            self._unreached.append(server.id)
            await self._failed(server, ServerStatus.OFFLINE, f"Unreachable: {detail}", drop=drop)
        else:
            self._reached.append(server.id)
            if self._events is not None:
                self._events.ensure(server.id, conn.docker)
            self._online(server, watched, conn, facts, containers)
            await self._converge(server, conn)
        watched.checked = True

    async def _refresh_apps(
        self,
        server: Server,
        watched: _Watched,
        conn: ServerConnection,
        containers: tuple[Container, ...],
    ) -> None:
        """Refresh the apps whose containers changed since the last pass (every app the
        first time, or when one awaits recovery)."""
        if self._watch is None:
            return
        apps: dict[UUID, set[tuple[str, str]]] = {}
        for container in containers:
            if container.installation_id is not None:
                state = listed_state(container.state).value
                apps.setdefault(container.installation_id, set()).add((container.id, state))
        now = {app: frozenset(seen) for app, seen in apps.items()}
        before, at = watched.apps, self._clock.now()
        only: set[UUID] | None = None
        listed: dict[UUID, frozenset[tuple[str, str]]] | None = None
        if watched.reconciled_at is None or at - watched.reconciled_at >= RECONCILE_EVERY:
            listed, watched.reconciled_at = now, at  # every app whose record disagrees
        elif before is None or watched.recheck:
            pass  # every app
        else:
            only = {app for app in before.keys() | now.keys() if before.get(app) != now.get(app)}
            if not only:
                return
        known = None if self._view is None else self._view.targets.get(server.id, [])
        async with self._store, asyncio.timeout(self._timeout):
            refreshed = await self._watch.refresh(server.id, conn.docker, only, listed, known)
        watched.recheck = refreshed.waiting
        for app, seen in refreshed.seen.items():
            # Inspected after the list: where the two differ, what the inspect saw stands
            # (the next pass refreshes the app if its list differs from that).
            if seen.state is RunState.MISSING:
                now.pop(app, None)
            elif (seen.container_id, seen.state) not in now.get(app, frozenset()):
                now[app] = frozenset({(seen.container_id or "", seen.state.value)})
        watched.apps = now

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
        if self._events is not None:
            await self._events.stop(server.id)  # opened again once it answers
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
        watched.containers = watched.snapshot_at = watched.apps = None

    async def _drop(self, server: Server) -> None:
        """Close the server's pooled connection: the next check opens a new one."""
        watched = self._watched[server.id]
        watched.connection = watched.proxy_on = None
        watched.timeouts = 0
        if self._events is not None:
            await self._events.stop(server.id)
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
        known = None if self._view is None else self._view.routes.get(server.id, [])
        try:
            reapplied = False
            async with asyncio.timeout(self._timeout):
                settled = known is not None and await self._routes.serves(conn.proxy, known)
            if not settled:  # read afresh, under the server's lock, and loaded if need be
                async with self._store, asyncio.timeout(self._timeout):
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
