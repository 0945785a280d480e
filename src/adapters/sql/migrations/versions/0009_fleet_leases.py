"""The fleet divided among workers: a ``worker`` table (each running worker and its
heartbeat), and on ``server`` the worker watching it (``watched_by``, its lease lasting
as long as that worker's heartbeat) and when that worker last stood by its status
(``checked_at``). ``store_mark`` holds named marks of the store: ``fleet`` counts the
commits that changed a server (on SQLite a trigger on ``server`` bumps it, for the read
cache), ``resumed`` when leases were last paused over a store outage, ``probe`` the
readiness check's write.

A later SQLite revision that rebuilds ``server`` (``batch_alter_table``) drops the
triggers: it must create them again (``ddl.create_server_triggers``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from berth.adapters.sql.marks import drop_data_triggers
from berth.adapters.sql.migrations.ddl import (
    TIMESTAMP,
    create_server_triggers,
    drop_server_triggers,
    index,
    primary_key,
)

revision = "0009"
down_revision = "0008"

_MARKS = ("fleet", "resumed", "probe")


def upgrade() -> None:
    op.create_table(
        "worker",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("started_at", TIMESTAMP, nullable=False),
        sa.Column("expires_at", TIMESTAMP, nullable=False),
        primary_key("worker"),
    )
    op.create_table(
        "store_mark",
        sa.Column("name", sa.String(32), nullable=False),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("at", TIMESTAMP, nullable=True),
        primary_key("store_mark", "name"),
    )
    marks = sa.table("store_mark", sa.column("name", sa.String(32)))
    op.bulk_insert(marks, [{"name": name} for name in _MARKS])
    op.add_column("server", sa.Column("watched_by", sa.String(64), nullable=True))
    op.add_column("server", sa.Column("checked_at", TIMESTAMP, nullable=True))
    index("server", "watched_by")
    create_server_triggers()


def downgrade() -> None:
    drop_data_triggers(op.get_bind())  # they count in store_mark, which goes
    drop_server_triggers()
    op.drop_index("ix_server_watched_by", "server")
    with op.batch_alter_table("server") as batch:
        batch.drop_column("checked_at")
        batch.drop_column("watched_by")
    op.drop_table("store_mark")
    op.drop_table("worker")
