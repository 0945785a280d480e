"""Apps under watch: ``installation_watch`` holds what each installation's container was
last seen doing (state, exit code and time, restart count, start time) and since when it
was told down (``berth.core.watch``). A new table: nothing is rebuilt."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from berth.adapters.sql.migrations.ddl import TIMESTAMP, UUID, cascade, primary_key

revision = "0014"
down_revision = "0013"


def upgrade() -> None:
    op.create_table(
        "installation_watch",
        sa.Column("installation_id", UUID, nullable=False),
        sa.Column("owner_id", UUID, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("container_id", sa.String(128), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("exited_at", TIMESTAMP, nullable=True),
        sa.Column("restart_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("started_at", TIMESTAMP, nullable=True),
        sa.Column("observed_at", TIMESTAMP, nullable=False),
        sa.Column("down_since", TIMESTAMP, nullable=True),
        primary_key("installation_watch", "installation_id"),
        cascade("installation_watch", "installation_id", "installation"),
        cascade("installation_watch", "owner_id", "team"),
    )


def downgrade() -> None:
    op.drop_table("installation_watch")
