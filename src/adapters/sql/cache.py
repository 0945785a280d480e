"""A read cache for the hot lookups, exact: any commit anywhere empties it.

Every request authenticates its token, and the busiest reads (a server, the
installations on it) change rarely. ``ReadCache`` keeps their results keyed by
what identifies them -- always including the owner where the read takes one,
so the ownership rule holds through the cache -- and tags them with the
database's *data version* read just before the query ran. A transaction's first
lookup reads the version again (microseconds); if any connection in any process
has committed since, the version differs and the whole cache is dropped before
anything is served. So a result is only ever served while no commit has happened
since it was read -- up to the start of the transaction that asks: a revoked
token is refused at once, even when ``berth token regenerate`` ran in another
process, and a deploy through another unit of work shows at once. The other
lookups of that transaction take the version it read while no lookup has seen a
later one (``lookup``'s ``seen``): a request pays one look at the version per unit
of work instead of one per read.

Results read after a unit of work's own, uncommitted writes are neither served
from nor stored in the cache (see ``Transaction.cached``).

Cached by what changed. Three marks in ``store_mark``, each a count kept by triggers
(SQLite only), say what a commit changed:

* ``data`` counts the commits that changed anything a cached read may read: triggers on
  every table but the housekeeping ones (``migrations.ddl.HOUSEKEEPING``: workers' beats,
  rate limits, the audit log, webhook deliveries, sessions, container snapshots; a cached
  read never reads those). A commit that changed only those -- a worker's beat every
  2 s, a refused call's audit entry -- keeps the cache: a busy API is not made to read
  its hot lists again at every heartbeat.
* ``fleet`` counts the commits that changed a server. A result that reads only the
  ``server`` table (a server, the servers list) is stored under ``mark="fleet"``: a
  commit that changed no server (a deployment's step, a token's use) leaves it in place.
* ``access`` counts the commits that changed what a token's look-up reads
  (``marks.ACCESS``: accounts, tokens, team members). A token's look-up is stored under
  ``mark="access"``: while twenty deployments commit their steps, each request is still
  authenticated from memory (it went to the database at every request, 0.1-0.6 s each
  on a busy machine: ``fleet_bench``'s list during deploys).

Where the dialect has no such version (PostgreSQL, in-memory SQLite) there is
no cache: ``read_cache`` returns ``None`` and every read goes to the database.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Hashable
from typing import Literal

from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from . import dialect

__all__ = ["MISSING", "Mark", "ReadCache", "Version", "read_cache"]

#: What ``ReadCache.lookup`` finds for a key it does not hold.
MISSING: object = object()

#: The ``data``, ``fleet`` and ``access`` marks (``None``: unknown, e.g. an older schema).
Marks = tuple["int | None", "int | None", "int | None"]

#: Which mark a cached result is kept by: what the read reads.
Mark = Literal["data", "fleet", "access"]
_MARK_INDEX: dict[Mark, int] = {"data": 0, "fleet": 1, "access": 2}

#: What a fresh read is stored under: the data version and the marks.
Version = tuple["dialect.DataVersion | None", Marks]

_NO_MARKS: Marks = (None, None, None)

#: At most this much is cached (a token or a server weighs 1, a list its length + 1).
MAX_WEIGHT = 5_000


class ReadCache:
    """Immutable results by key, all valid for one data version of the database."""

    def __init__(
        self,
        version: Callable[[], dialect.DataVersion | None],
        max_weight: int = MAX_WEIGHT,
        marks: Callable[[], Marks] | None = None,
    ) -> None:
        self._version_of_db = version
        self._marks_of_db = marks
        self._max_weight = max_weight
        self._version: dialect.DataVersion | None = None
        self._marks: Marks = _NO_MARKS
        # key -> (value, weight, the index of its mark in ``Marks``, that mark's count when
        # it was read: None drops it at the next commit)
        self._entries: dict[Hashable, tuple[object, int, int, int | None]] = {}
        self._weight = 0
        # (key, version) -> the read of it under way: concurrent misses wait for that one
        self.loading: dict[tuple[Hashable, Version], asyncio.Future[object]] = {}

    def lookup(self, key: Hashable, seen: Version | None = None) -> tuple[object, Version]:
        """The cached value (or ``MISSING``), and the version to ``store`` a fresh read under.

        Call it *before* reading the database: a commit that lands between the two
        then makes the next lookup see another version, and drop what was stored.

        ``seen``: what an earlier lookup of the same transaction returned. While it is
        still the cache's version (no lookup has seen a later commit since), the database
        is not asked again: a transaction's cached reads are all of the moment of its
        first, as one database read transaction's would be. An older one is asked again.
        """
        if seen is not None and seen[0] is not None and seen[0] == self._version:
            found = self._entries.get(key)
            return (MISSING if found is None else found[0]), seen
        version = self._version_of_db()
        if version is None or version != self._version:
            self._version = version
            known = version is not None and self._marks_of_db is not None
            self._marks = self._marks_of_db() if known and self._marks_of_db else _NO_MARKS
            self._keep_unchanged(self._marks)
        found = self._entries.get(key)
        return (MISSING if found is None else found[0]), (version, self._marks)

    def store(
        self,
        key: Hashable,
        version: Version,
        value: object,
        weight: int = 1,
        *,
        mark: Mark = "data",
    ) -> None:
        """Keep ``value``, read after ``lookup`` returned ``version``; the oldest go first.
        ``mark``: what the read reads, whose commits drop it (``fleet``: only servers;
        ``access``: only ``marks.ACCESS``; ``data``: anything)."""
        data_version, marks = version
        if data_version is None or data_version != self._version or weight > self._max_weight:
            return
        kind = _MARK_INDEX[mark]
        previous = self._entries.pop(key, None)
        if previous is not None:
            self._weight -= previous[1]
        while self._entries and self._weight + weight > self._max_weight:
            oldest = next(iter(self._entries))
            self._weight -= self._entries.pop(oldest)[1]
        self._entries[key] = (value, weight, kind, marks[kind])
        self._weight += weight

    def _keep_unchanged(self, marks: Marks) -> None:
        """After a commit: keep only what was read at the current mark of its kind
        (nothing it reads changed since); an unknown mark keeps nothing of its kind."""
        if not self._entries:
            return
        kept = {
            key: entry
            for key, entry in self._entries.items()
            if entry[3] is not None and entry[3] == marks[entry[2]]
        }
        self._entries = kept
        self._weight = sum(entry[1] for entry in kept.values())


_caches: weakref.WeakKeyDictionary[Engine, ReadCache | None] = weakref.WeakKeyDictionary()


def read_cache(engine: AsyncEngine) -> ReadCache | None:
    """The read cache of ``engine`` (one per engine), or ``None`` where there is none."""
    sync_engine = engine.sync_engine
    if sync_engine in _caches:
        return _caches[sync_engine]
    probe = dialect.data_version_reader(engine)
    marks = getattr(probe, "marks", None)
    cache = ReadCache(probe, marks=marks) if probe is not None else None
    _caches[sync_engine] = cache
    return cache
