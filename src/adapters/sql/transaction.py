"""One database transaction, as the repositories of a unit of work (or the job queue and
the fleet, one per call) share it."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar, cast

import structlog
from berth.core.ports import CALL_LANE
from sqlalchemy import CursorResult
from sqlalchemy.engine import Dialect, Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql import Executable, Select

from . import dialect
from .cache import MISSING, Mark, ReadCache, Version
from .faults import store_errors

__all__ = ["LaneLock", "Transaction", "shared_write_lock", "transaction"]

Params = Mapping[str, Any] | Sequence[Mapping[str, Any]] | None

T = TypeVar("T")

log = structlog.get_logger()

#: A wait for the write lock, or a hold of it, this long or longer is logged (debug).
SLOW_LOCK_SECONDS = 0.5


class Transaction:
    """A connection in a transaction, with reads and writes told apart.

    The connection is taken from the engine's pool on the first statement, not
    before: a unit of work whose reads all come from the ``cache`` never takes one.

    Every statement, the connection's checkout, commit and close go through
    ``faults.store_errors``: a database that cannot be reached or cannot take writes
    raises the core's ``StoreUnavailable``, whichever use case asked.

    ``write_lock``, when given, is held from a transaction's first write (or its
    ``read_locked``) until it ends: SQLite lets one connection write at a time, and
    queueing this process's writers in order keeps them from starving each other on
    the busy timeout -- a deployment's writers first (``LaneLock``). Plain reads never
    wait for it.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        write_lock: LaneLock | None,
        cache: ReadCache | None = None,
    ) -> None:
        self._engine = engine
        self._write_lock = write_lock
        self._cache = cache
        self._conn: AsyncConnection | None = None
        self._closed = False
        self._writing = False
        self._wrote = False
        self._locked = False
        self._seen: Version | None = None  # the cache's version at this one's first lookup
        self._lock_at = 0.0  # when (``time.monotonic``) it took the write lock
        self._lane = CALL_LANE.get()  # whose transaction this is, for the log

    @property
    def dialect(self) -> Dialect:
        return self._engine.dialect

    async def read(self, stmt: Executable, params: Params = None) -> CursorResult[Any]:
        """Run a statement that changes nothing."""
        conn = await self._connection()
        with store_errors():
            return await conn.execute(stmt, params)

    async def write(self, stmt: Executable, params: Params = None) -> CursorResult[Any]:
        """Run a statement that inserts, updates or deletes."""
        conn = await self._connection()  # before the lock, as when connecting up front
        self._wrote = True
        await self._lock()
        with store_errors():
            return await conn.execute(stmt, params)

    async def read_locked(self, stmt: Select[Any], params: Mapping[str, Any]) -> CursorResult[Any]:
        """Run a read whose rows this transaction decides its writes on, locked until it ends.

        See ``dialect.read_locked``. On SQLite that takes the database's write lock (the
        process's ``write_lock`` first, as a write would), both held from here on, and
        every later read of this transaction bypasses the cache.
        """
        conn = await self._connection()
        await self._lock()
        self._locked = True
        with store_errors():
            return await dialect.read_locked(conn, stmt, params)

    async def cached(
        self,
        key: Hashable,
        load: Callable[[], Awaitable[T]],
        weight: Callable[[T], int] | None = None,
        *,
        mark: Mark = "data",
    ) -> T:
        """``await load()``, or what it returned before if nothing was committed since.

        ``load`` must only read, and return an immutable value; ``None`` is never
        cached. ``mark``: what it reads, whose commits drop it (``fleet``: the ``server``
        table only; ``access``: a token's look-up; see ``cache.py``). ``key`` must
        identify the read completely (owner included). Concurrent misses of one key at
        one version read once: the others wait for that read (a commit drops the cache; a
        busy API must not then send the same query once per request in flight). Once this
        transaction has written, its reads see its own uncommitted changes, so they
        neither come from nor go to the cache; nor do those of a transaction that has
        locked rows (``read_locked``): they decide what it writes. The data version is read at this
        transaction's first cached read, not again at each (``ReadCache.lookup``).
        """
        cache = self._cache
        if cache is None or self._wrote or self._locked:
            return await load()
        found, version = cache.lookup(key, self._seen)
        self._seen = version
        if found is not MISSING:
            return cast(T, found)
        slot = (key, version)
        under_way = cache.loading.get(slot)
        if under_way is not None:  # the same read at the same version: wait for its result
            shared = await asyncio.shield(under_way)
            return await load() if shared is MISSING else cast(T, shared)
        done: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        cache.loading[slot] = done
        value: object = MISSING  # what waiters get if this read fails: they read themselves
        try:
            loaded = await load()
            value = loaded
            if loaded is not None and not (self._wrote or self._locked):
                weighs = 1 if weight is None else weight(loaded)
                cache.store(key, version, loaded, weighs, mark=mark)
            return loaded
        finally:
            del cache.loading[slot]
            done.set_result(value)

    def peek(self, key: Hashable) -> object:
        """What the cache holds for ``key`` as of this transaction's reads, or ``MISSING``
        (nothing held, no cache, or this transaction's reads bypass it); never reads
        the database."""
        cache = self._cache
        if cache is None or self._wrote or self._locked:
            return MISSING
        found, self._seen = cache.lookup(key, self._seen)
        return found

    async def commit(self) -> None:
        try:
            if self._conn is not None:
                with store_errors():
                    await self._conn.commit()
        finally:
            self._release()

    async def close(self) -> None:
        """Roll back what was not committed and give the connection back to the pool --
        to the end, even if the task is cancelled meanwhile (the cancel follows)."""
        self._closed = True
        conn, self._conn = self._conn, None
        try:
            if conn is not None:
                # Closing rolls back what is open, once: the pool then skips its own reset.
                with store_errors():
                    await _to_the_end(conn.close())
        finally:
            self._release()

    async def _connection(self) -> AsyncConnection:
        conn = self._conn
        if conn is None:
            if self._closed:
                raise RuntimeError("This transaction has ended.")
            with store_errors():
                conn = await self._engine.connect()
                try:
                    await conn.begin()
                except BaseException:
                    await _to_the_end(conn.close())
                    raise
            self._conn = conn
        return conn

    async def _lock(self) -> None:
        """Take the process's write lock (``LaneLock``) for the rest of this transaction, if
        there is one and it is not held yet. A long wait, or a long hold (``_release``), is
        logged at debug level with its lane: where a deployment's claim or step waited,
        and behind whom (``fleet_bench --keep-logs``)."""
        if self._write_lock is None or self._writing:
            return
        began = time.monotonic()
        await self._write_lock.acquire()
        self._writing = True
        self._lock_at = time.monotonic()
        if self._lock_at - began >= SLOW_LOCK_SECONDS:
            log.debug(
                "store_write_lock_waited",
                lane=CALL_LANE.get(),
                seconds=round(self._lock_at - began, 3),
            )

    def _release(self) -> None:
        if self._writing and self._write_lock is not None:
            self._writing = False
            self._write_lock.release()
            held = time.monotonic() - self._lock_at
            if held >= SLOW_LOCK_SECONDS:
                log.debug("store_write_lock_held", lane=self._lane, seconds=round(held, 3))


async def _to_the_end(work: Awaitable[T]) -> T:
    """``await work``, carried to its end even if this task is cancelled meanwhile; the
    cancel is raised once it is done.

    For giving a connection back: cut short, the pool's reset of it (a rollback) fails,
    is logged as an error and the connection is thrown away -- when a lease keeper is
    stopped as its run ends, or a run as berth shuts down, on a busy machine often."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait({task})  # unlike ``await task``, a cancel here spares it
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        if not task.cancelled():
            task.exception()  # seen: its own error, if any, gives way to the cancel
        raise asyncio.CancelledError
    return task.result()


#: The lanes (``CALL_LANE``) whose writers go first at the write lock, in this order; every
#: other lane's come after them.
_FIRST_LANES = ("claim", "deploy", "queue", "journal")


class LaneLock:
    """An ``asyncio.Lock`` whose waiters go by lane (``CALL_LANE``): a worker's claim
    first, then the ``deploy`` lane (running deployments), then deployments being queued
    (``queue``), then the runs' events (``journal``: nothing waits for them but a
    reader), then the others. A claim starts every deployment
    waiting for a free slot: it never queues behind the writers that queue
    deployments nor behind the runs' events (twenty deploys at once had their claims
    wait behind each other's requests, 8-45 s on a loaded machine). A deployment's step,
    event or lease renewal never queues behind the monitor's writes of a thousand
    servers (nor a user's request). First come, first served within a lane; on release
    the lock goes straight to the next waiter. Claims and a deployment's transactions
    are few and short, so the others still get their turn."""

    def __init__(self) -> None:
        self._held = False
        self._queues: tuple[collections.deque[asyncio.Future[None]], ...] = tuple(
            collections.deque() for _ in range(len(_FIRST_LANES) + 1)
        )

    def locked(self) -> bool:
        return self._held

    def waiting(self) -> int:
        """How many wait for the lock, every lane."""
        return sum(len(queue) for queue in self._queues)

    async def acquire(self) -> bool:
        if not self._held:
            self._held = True
            return True
        lane = CALL_LANE.get()
        queue = self._queues[_FIRST_LANES.index(lane) if lane in _FIRST_LANES else -1]
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed over just as the wait was canceled: pass it on
            else:
                with contextlib.suppress(ValueError):
                    queue.remove(waiter)
            raise
        return True

    def release(self) -> None:
        if not self._held:
            raise RuntimeError("The lock is not held.")
        for queue in self._queues:
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    return
        self._held = False


_write_locks: weakref.WeakKeyDictionary[Engine, LaneLock] = weakref.WeakKeyDictionary()


def shared_write_lock(engine: AsyncEngine) -> LaneLock | None:
    """The lock every writer through ``engine`` queues on; ``None`` where writers run in parallel.

    One per engine, so the units of work, the job queue and the fleet of a process
    take turns at SQLite's single write lock instead of racing its busy timeout, a
    deployment's first. Like the engine's connections, use it from one event loop.
    """
    if not dialect.single_writer(engine):
        return None
    lock = _write_locks.get(engine.sync_engine)
    if lock is None:
        lock = _write_locks[engine.sync_engine] = LaneLock()
    return lock


@asynccontextmanager
async def transaction(engine: AsyncEngine) -> AsyncIterator[Transaction]:
    """A transaction on a pooled connection, committed if the block ends normally.

    Rolled back otherwise; the connection goes back to the pool either way.
    """
    tx = Transaction(engine, shared_write_lock(engine))
    try:
        yield tx
        await tx.commit()
    finally:
        await tx.close()
