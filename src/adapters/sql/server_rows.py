"""The servers list read again after a commit, converting only the servers that changed.

A fleet's list is 1,000 rows, and the monitor changes some of them at every pass (a
``lastSeenAt``, a status, and ``checked_at`` of each server it stood by): each such
commit sends the next ``GET /servers`` back to the database (``cache.py``). Converting
1,000 rows into core servers cost about four times what reading them did, and the
wire form of each was built again from the new objects.

``ServerRows`` reads the rows as the database holds them (text and numbers, no type
conversion) and keeps, per server, the row a ``Server`` was last made of: an unchanged
row gives back the very same ``Server`` object (so the HTTP layer's wire form of it is
reused too, ``schemas.servers_out``), a row whose only change is ``checked_at`` a copy
of it with the new one, and only a changed row is converted. The answer is the one
``_server_to_core`` gives for each row: the kept row is compared whole, owner included.

The rows come as **one** row (``rows_statement``): a JSON array of each server's values,
built by SQLite. A driver's thread hands a result over a row at a time and takes the GIL
back for each; while deployments keep other threads busy (the Docker client's pool),
each of those 1,000 hand-overs waited its turn, and a list read again took 0.1-0.8 s
instead of 8 ms (``fleet_bench``: the list's p95 during 20 deploys).
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Sequence
from typing import Any, cast

import msgspec
from berth.core.models import Server
from sqlalchemy import Select, String, func, select, type_coerce
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ColumnElement

from .rows import _SERVER_COLUMNS, _server_to_core

__all__ = ["RAW_SERVER_COLUMNS", "ServerRows", "rows_statement", "server_rows"]

#: The columns of a server as ``_server_to_core`` reads them, as the database holds them.
RAW_SERVER_COLUMNS: list[ColumnElement[Any]] = [
    type_coerce(column, String).label(column.name) for column in _SERVER_COLUMNS
]
_NAMES = [column.name for column in _SERVER_COLUMNS]
_CHECKED = _NAMES.index("checked_at")
#: The list's order (``created_at``, then ``id``), as positions in a raw row.
_ORDER = (_NAMES.index("created_at"), _NAMES.index("id"))
_Row = namedtuple("_Row", _NAMES)  # type: ignore[misc]

#: Servers remembered at most (a fleet's worth and more); past it, they are forgotten.
MAX_SERVERS = 20_000

Processor = Callable[[Any], Any] | None


class ServerRows:
    """Servers by their rows as read raw (``RAW_SERVER_COLUMNS``), for one engine."""

    def __init__(self, dialect: Dialect) -> None:
        self._processors: list[Processor] = [
            column.type.dialect_impl(dialect).result_processor(dialect, None)
            for column in _SERVER_COLUMNS
        ]
        # server id (raw) -> (its row without checked_at, checked_at raw, the Server)
        self._servers: dict[Any, tuple[tuple[Any, ...], Any, Server]] = {}

    def servers_of(self, document: str) -> tuple[Server, ...]:
        """The ``Server`` of each row that ``rows_statement`` gave, oldest first.

        Sorted here, by the raw text SQLite sorts by (``created_at``, ``id``): the order
        of an aggregate's input is not promised."""
        rows = msgspec.json.decode(document, type=list[tuple[Any, ...]])
        rows.sort(key=lambda row: (row[_ORDER[0]], row[_ORDER[1]]))
        return self.servers(rows)

    def servers(self, rows: Sequence[Sequence[Any]]) -> tuple[Server, ...]:
        """The ``Server`` of each raw row, in order: the kept one where the row is the same."""
        found: list[Server] = []
        kept = self._servers
        for raw in rows:
            row = tuple(raw)
            rest = row[:_CHECKED] + row[_CHECKED + 1 :]
            entry = kept.get(row[0])
            if entry is not None and entry[0] == rest:
                if entry[1] == row[_CHECKED]:
                    found.append(entry[2])
                    continue
                server = msgspec.structs.replace(
                    entry[2], checked_at=self._convert(_CHECKED, row[_CHECKED])
                )
            else:
                converted = _Row(*(self._convert(i, value) for i, value in enumerate(row)))
                server = _server_to_core(cast(Any, converted))  # a row by its column names
            if len(kept) >= MAX_SERVERS and row[0] not in kept:
                kept.clear()
            kept[row[0]] = (rest, row[_CHECKED], server)
            found.append(server)
        return tuple(found)

    def _convert(self, index: int, value: Any) -> Any:
        process = self._processors[index]
        return value if process is None or value is None else process(value)


def rows_statement(*where: ColumnElement[bool]) -> Select[tuple[str]]:
    """The raw rows (``RAW_SERVER_COLUMNS``) of the servers ``where`` selects, as one
    JSON array of arrays in one row (SQLite; ``ServerRows.servers_of`` reads it). Each
    value is as stored: text (dates, ids, JSON documents) stays text, numbers numbers."""
    raw = select(*RAW_SERVER_COLUMNS).where(*where).subquery()
    return select(func.json_group_array(func.json_array(*raw.c)))


_by_dialect: dict[str, ServerRows] = {}


def server_rows(dialect: Dialect) -> ServerRows:
    """The process's ``ServerRows`` for ``dialect``. One serves every database of that
    dialect: a server is kept by its id (a UUID) and given back only for the same whole
    row, so a row of another database can only ever find its own."""
    found = _by_dialect.get(dialect.name)
    if found is None:
        found = _by_dialect[dialect.name] = ServerRows(dialect)
    return found
