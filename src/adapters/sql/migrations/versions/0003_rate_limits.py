"""Rate limits shared by every API replica: one GCRA state per key."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from berth.adapters.sql.migrations.ddl import primary_key

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    op.create_table(
        "rate_limit",
        sa.Column("key", sa.String(300), nullable=False),
        sa.Column("tat", sa.Double(), nullable=False),
        primary_key("rate_limit", "key"),
    )


def downgrade() -> None:
    op.drop_table("rate_limit")
