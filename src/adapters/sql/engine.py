"""The async engine berth stores its data through, and where the default database lives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
from sqlalchemy import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from . import dialect

__all__ = ["CONNECT_TIMEOUT", "DATABASE_FILE", "SQLITE_POOL", "create_engine", "sqlite_url"]

DATABASE_FILE = "berth.db"

#: Seconds to wait for a new PostgreSQL connection before the store counts as unreachable.
CONNECT_TIMEOUT = 5

#: The pool of a SQLite file database. Readers never wait for SQLite's writer (WAL), but a
#: transaction waiting for the process's write lock holds its connection: room for many
#: such writers (a worker runs 32 deployments) with connections to spare for the readers.
#: Forty of them kept once opened: a connection over the pool's size is closed as soon as
#: it is given back, and opening one starts a thread and runs the settings' statements --
#: with twenty kept, twenty deployments at once opened and closed dozens a second
#: (``fleet_bench``); each one kept holds about a megabyte.
SQLITE_POOL = {"pool_size": 40, "max_overflow": 20}

_json_encoder = msgspec.json.Encoder()


def _json_dumps(value: Any) -> str:
    return _json_encoder.encode(value).decode("utf-8")


def create_engine(url: str, **options: Any) -> AsyncEngine:
    """An async engine for ``url`` (``sqlite+aiosqlite://…`` or ``postgresql+asyncpg://…``).

    Every SQLite connection it opens runs in WAL mode with ``synchronous=NORMAL``,
    enforced foreign keys and a 5 s busy timeout; a SQLite file is pooled as
    ``SQLITE_POOL`` says. A PostgreSQL server that does not
    accept a connection within ``CONNECT_TIMEOUT`` seconds counts as unreachable
    (asyncpg would wait 60 s). JSON columns are encoded with msgspec. ``options`` go
    to :func:`sqlalchemy.ext.asyncio.create_async_engine` (``poolclass``, ``echo``, …).
    No connection is opened until first use.
    """
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql":
        options.setdefault("connect_args", {"timeout": CONNECT_TIMEOUT})
    elif "poolclass" not in options and parsed.database not in (None, "", ":memory:"):
        for name, value in SQLITE_POOL.items():
            options.setdefault(name, value)
    options.setdefault("json_serializer", _json_dumps)
    options.setdefault("json_deserializer", msgspec.json.decode)
    engine = create_async_engine(url, **options)
    dialect.install_connection_settings(engine)
    return engine


def sqlite_url(data_dir: Path) -> str:
    """The URL of the default database: ``berth.db`` in ``data_dir`` (made absolute)."""
    return f"sqlite+aiosqlite:///{(Path(data_dir) / DATABASE_FILE).absolute()}"
