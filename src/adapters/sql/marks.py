"""The ``data`` and ``access`` marks' triggers (SQLite): what tells the read cache that a
commit changed something a cached read may read.

Every table but ``HOUSEKEEPING`` gets three triggers that count its changes in
``store_mark.data``, and each table of ``ACCESS`` three more that count them in
``store_mark.access`` (see ``cache.py``). They are not a revision's: every migration run
ends with :func:`ensure_data_triggers`, which gives any table without them its triggers
-- a table a later revision adds, or one SQLite's ``batch_alter_table`` rebuilt (a rebuild
drops a table's triggers). So no revision has to remember them.
"""

from __future__ import annotations

from sqlalchemy import Connection, text

__all__ = [
    "ACCESS",
    "HOUSEKEEPING",
    "MARKS",
    "SERVER_TRIGGERS",
    "drop_data_triggers",
    "ensure_data_triggers",
]

#: Tables whose changes never drop the read cache: no cached read reads them. Written
#: often by the machinery (a worker's beat every 2 s, a refused call's audit entry, a
#: delivery attempt, a monitor pass's snapshot), they would otherwise empty it each time.
HOUSEKEEPING = frozenset(
    {
        "alembic_version",
        "audit_entry",
        "container_snapshot",
        "rate_limit",
        "store_mark",
        "web_session",
        "webhook_delivery",
        "worker",
    }
)

#: The tables a token's look-up reads (``SqlTokenRepository.find``,
#: ``SqlAccessTokenRepository.find``): only their changes drop a cached look-up.
ACCESS = frozenset({"access_token", "api_token", "team_member", "user_account"})

#: On SQLite, triggers on ``server`` count the commits that change a server (the read
#: cache's ``fleet`` mark, revision 0009): each trigger's name and statement.
_FLEET_BUMP = "UPDATE store_mark SET version = version + 1 WHERE name = 'fleet';"
SERVER_TRIGGERS = {
    f"tr_server_fleet_{when.lower()}": (
        f"CREATE TRIGGER tr_server_fleet_{when.lower()} AFTER {when} ON server "
        f"BEGIN {_FLEET_BUMP} END"
    )
    for when in ("INSERT", "UPDATE", "DELETE")
}

#: The marks revision 0009 made (``data`` and ``access`` come with their triggers).
MARKS = ("fleet", "resumed", "probe")

#: Each mark, the tables it counts (``None``: all but ``HOUSEKEEPING``), and its count.
_MARKS = (
    ("data", None, "UPDATE store_mark SET version = version + 1 WHERE name = 'data';"),
    ("access", ACCESS, "UPDATE store_mark SET version = version + 1 WHERE name = 'access';"),
)
_NEW_MARK = text("INSERT OR IGNORE INTO store_mark (name, version) VALUES (:name, 0)")


def ensure_data_triggers(connection: Connection) -> None:
    """On SQLite with a ``store_mark`` table (revision 0009 on): the ``data`` mark and the
    triggers of every table that lacks them. Idempotent; nothing elsewhere."""
    if connection.dialect.name != "sqlite":
        return
    tables = {
        str(name)
        for (name,) in connection.execute(
            text("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        )
    }
    if "store_mark" not in tables:  # below revision 0009: no mark to count in
        drop_data_triggers(connection)
        return
    for mark, counted, bump in _MARKS:
        connection.execute(_NEW_MARK, {"name": mark})
        for table in sorted(tables - HOUSEKEEPING if counted is None else tables & counted):
            for when in ("INSERT", "UPDATE", "DELETE"):
                name = f"tr_{table}_{mark}_{when.lower()}"
                trigger = f'{name} AFTER {when} ON "{table}" BEGIN {bump} END'
                connection.execute(text(f"CREATE TRIGGER IF NOT EXISTS {trigger}"))


def drop_data_triggers(connection: Connection) -> None:
    """Drop every ``data`` and ``access`` trigger (SQLite): before ``store_mark`` goes
    (downgrading 0009)."""
    if connection.dialect.name != "sqlite":
        return
    names = connection.execute(
        text(
            "SELECT name FROM sqlite_master WHERE type = 'trigger'"
            " AND (name GLOB 'tr_*_data_*' OR name GLOB 'tr_*_access_*')"
        )
    )
    for (name,) in names.all():
        connection.execute(text(f"DROP TRIGGER IF EXISTS {name}"))
