"""When the database itself fails: the driver's and the pool's errors that mean "the store
cannot be reached, or cannot take writes, right now", as the core's ``StoreUnavailable``.

Everything the adapter runs goes through ``store_errors`` (``transaction.Transaction``
for the units of work, the job queue and the fleet; ``limits.SqlRateLimiter``), so
the translation is written once. What is not an outage -- a broken unique key, a bad
statement, a bug -- passes through unchanged.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from berth.core.errors import StoreUnavailable
from sqlalchemy import exc as sa

__all__ = ["RETRY_AFTER", "store_errors", "unavailable"]

#: Seconds a client is told to wait (``Retry-After``): a restart or fail-over of the
#: database, or a writer of another process holding SQLite's lock, takes about that.
RETRY_AFTER = 5

_UNREACHABLE = "The database is unreachable"

# SQLite's primary result codes (https://sqlite.org/rescode.html) that mean the store
# refuses the work for now, not that the statement is wrong.
_SQLITE = {
    5: "The database is locked by another writer (busy timeout passed)",  # BUSY
    6: "The database is locked by another writer (busy timeout passed)",  # LOCKED
    8: "The database file is read-only",  # READONLY
    10: "The database had a disk I/O error",  # IOERR
    13: "The database or its disk is full",  # FULL
    14: "The database file cannot be opened",  # CANTOPEN
}

# PostgreSQL SQLSTATE classes and codes (Appendix A): connection exceptions, operator
# intervention (shutdown, restart, recovery), insufficient resources, system errors.
_PG_CLASSES = {
    "08": _UNREACHABLE,
    "53": "The database is out of resources (disk full, memory, or connections)",
    "58": "The database had a system or I/O error",
}
_PG_CODES = {
    "57P01": "The database is shutting down",  # admin_shutdown
    "57P02": "The database is restarting",  # crash_shutdown
    "57P03": "The database is starting up or shutting down",  # cannot_connect_now
    "57P05": "The database closed an idle session",  # idle_session_timeout
    "25006": "The database is read-only (a standby)",  # read_only_sql_transaction
}


def _cause(orig: BaseException | None) -> str | None:
    """Why the driver error ``orig`` is an outage, or ``None`` when it is not one."""
    if isinstance(orig, sqlite3.Error):
        code = getattr(orig, "sqlite_errorcode", None)
        return _SQLITE.get(code & 0xFF) if isinstance(code, int) else None
    sqlstate = getattr(orig, "sqlstate", None)
    if isinstance(sqlstate, str) and len(sqlstate) == 5:
        return _PG_CODES.get(sqlstate) or _PG_CLASSES.get(sqlstate[:2])
    if isinstance(orig, OSError):  # TimeoutError included
        return _UNREACHABLE
    return None


def unavailable(exc: BaseException) -> StoreUnavailable | None:
    """``exc`` as ``StoreUnavailable`` if it means the database is out of reach or refuses
    writes for now; ``None`` for any other error (those are conflicts or bugs)."""
    cause: str | None = None
    if isinstance(exc, StoreUnavailable):
        return None
    if isinstance(exc, sa.TimeoutError):  # the pool: every connection is taken
        cause = "The database has no free connection (pool timeout)"
    elif isinstance(exc, sa.DBAPIError):
        if exc.connection_invalidated:
            cause = "The connection to the database was lost"
        else:
            cause = _cause(exc.orig)
            if cause is None and isinstance(exc, sa.InterfaceError):
                cause = _UNREACHABLE
    elif isinstance(exc, sa.DisconnectionError):
        cause = "The connection to the database was lost"
    elif isinstance(exc, OSError):  # TimeoutError included
        # Raised by the driver itself while connecting (refused, no route, DNS, timeout):
        # SQLAlchemy passes them on unwrapped.
        cause = _UNREACHABLE
    else:
        cause = _cause(exc)  # the driver's own error class, unwrapped
    if cause is None:
        return None
    return StoreUnavailable(f"{cause}; try again shortly.", retry_after=RETRY_AFTER)


@contextmanager
def store_errors() -> Iterator[None]:
    """Raise ``StoreUnavailable`` (``from`` the original) for an outage inside the block."""
    try:
        yield
    except Exception as exc:
        translated = unavailable(exc)
        if translated is None:
            raise
        raise translated from exc
