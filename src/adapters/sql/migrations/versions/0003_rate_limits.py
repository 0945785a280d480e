"""Rate limits shared by every API replica: one GCRA state per key.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24

Written by hand to match ``tables.py``; a test compares the two.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rate_limit",
        sa.Column("key", sa.String(300), nullable=False),
        sa.Column("tat", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_rate_limit"),
    )


def downgrade() -> None:
    op.drop_table("rate_limit")
