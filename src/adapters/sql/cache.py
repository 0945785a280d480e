"""A read cache for the hot lookups, exact: any commit anywhere empties it.

Every request authenticates its token, and the busiest reads (a server, the
installations on it) change rarely. ``ReadCache`` keeps their results keyed by
what identifies them -- always including the owner where the read takes one,
so the ownership rule holds through the cache -- and tags them with the
database's *data version* read just before the query ran. A lookup reads the
version again (microseconds); if any connection in any process has committed
since, the version differs and the whole cache is dropped before anything is
served. So a result is only ever served while no commit has happened since it
was read: a revoked token is refused at once, even when ``berth token
regenerate`` ran in another process, and a deploy through another unit of work
shows at once.

Results read after a unit of work's own, uncommitted writes are neither served
from nor stored in the cache (see ``Transaction.cached``).

Where the dialect has no such version (PostgreSQL, in-memory SQLite) there is
no cache: ``read_cache`` returns ``None`` and every read goes to the database.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable

from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from . import dialect

__all__ = ["MISSING", "ReadCache", "read_cache"]

#: What ``ReadCache.lookup`` finds for a key it does not hold.
MISSING: object = object()

#: At most this much is cached (a token or a server weighs 1, a list its length + 1).
MAX_WEIGHT = 5_000


class ReadCache:
    """Immutable results by key, all valid for one data version of the database."""

    def __init__(
        self, version: Callable[[], dialect.DataVersion | None], max_weight: int = MAX_WEIGHT
    ) -> None:
        self._version_of_db = version
        self._max_weight = max_weight
        self._version: dialect.DataVersion | None = None
        self._entries: dict[Hashable, tuple[object, int]] = {}
        self._weight = 0

    def lookup(self, key: Hashable) -> tuple[object, dialect.DataVersion | None]:
        """The cached value (or ``MISSING``), and the version to ``store`` a fresh read under.

        Call it *before* reading the database: a commit that lands between the two
        then makes the next lookup see another version, and drop what was stored.
        """
        version = self._version_of_db()
        if version is None or version != self._version:
            self._clear()
            self._version = version
            return MISSING, version
        found = self._entries.get(key)
        return (MISSING if found is None else found[0]), version

    def store(
        self, key: Hashable, version: dialect.DataVersion | None, value: object, weight: int = 1
    ) -> None:
        """Keep ``value``, read after ``lookup`` returned ``version``; the oldest go first."""
        if version is None or version != self._version or weight > self._max_weight:
            return
        previous = self._entries.pop(key, None)
        if previous is not None:
            self._weight -= previous[1]
        while self._entries and self._weight + weight > self._max_weight:
            oldest = next(iter(self._entries))
            self._weight -= self._entries.pop(oldest)[1]
        self._entries[key] = (value, weight)
        self._weight += weight

    def _clear(self) -> None:
        if self._entries:
            self._entries = {}
            self._weight = 0


_caches: weakref.WeakKeyDictionary[Engine, ReadCache | None] = weakref.WeakKeyDictionary()


def read_cache(engine: AsyncEngine) -> ReadCache | None:
    """The read cache of ``engine`` (one per engine), or ``None`` where there is none."""
    sync_engine = engine.sync_engine
    if sync_engine in _caches:
        return _caches[sync_engine]
    probe = dialect.data_version_reader(engine)
    cache = ReadCache(probe) if probe is not None else None
    _caches[sync_engine] = cache
    return cache
