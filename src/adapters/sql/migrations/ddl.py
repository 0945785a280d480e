"""Column types and constraints the revisions in ``versions/`` share.

Revisions never import ``tables.py``: each keeps the schema as it was at its revision.
So these helpers are frozen like the revisions that use them: a helper's output never
changes (a new shape gets a new helper). Names follow ``tables.NAMING_CONVENTION``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from berth.adapters.sql.marks import SERVER_TRIGGERS
from sqlalchemy.schema import SchemaItem

__all__ = [
    "TIMESTAMP",
    "UUID",
    "cascade",
    "create_server_triggers",
    "drop_server_triggers",
    "index",
    "owned",
    "primary_key",
    "unique",
]

UUID = sa.Uuid()
TIMESTAMP = sa.DateTime(timezone=True)


def primary_key(table: str, column: str = "id") -> sa.PrimaryKeyConstraint:
    """``pk_<table>`` on ``column``."""
    return sa.PrimaryKeyConstraint(column, name=f"pk_{table}")


def cascade(table: str, column: str, target: str) -> sa.ForeignKeyConstraint:
    """``table.column`` refers to ``target.id``; deleting that row deletes this one."""
    return sa.ForeignKeyConstraint(
        [column], [f"{target}.id"], name=f"fk_{table}_{column}_{target}", ondelete="CASCADE"
    )


def owned(table: str) -> tuple[SchemaItem, ...]:
    """What a table of a user's data starts with: its ``id`` (the primary key) and its
    ``owner_id``, whose user's deletion deletes the row."""
    return (
        sa.Column("id", UUID, nullable=False),
        sa.Column("owner_id", UUID, nullable=False),
        primary_key(table),
        cascade(table, "owner_id", "user_account"),
    )


def unique(table: str, *columns: str) -> sa.UniqueConstraint:
    """``uq_<table>_<columns>`` on ``columns``."""
    return sa.UniqueConstraint(*columns, name=f"uq_{table}_{'_'.join(columns)}")


def index(table: str, *columns: str, unique: bool = False) -> None:
    """Create ``ix_<table>_<columns>`` on ``columns``."""
    op.create_index(f"ix_{table}_{'_'.join(columns)}", table, list(columns), unique=unique)


def create_server_triggers() -> None:
    """(Re)create the triggers on ``server`` (SQLite only; PostgreSQL bumps in code):
    ``marks.SERVER_TRIGGERS``, 0009's. A revision that rebuilds ``server`` on SQLite
    (``batch_alter_table``) drops them: it creates them again afterwards."""
    if op.get_bind().dialect.name == "sqlite":
        for name, statement in SERVER_TRIGGERS.items():
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
            op.execute(statement)


def drop_server_triggers() -> None:
    """Drop the triggers on ``server`` (SQLite only)."""
    if op.get_bind().dialect.name == "sqlite":
        for name in SERVER_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
