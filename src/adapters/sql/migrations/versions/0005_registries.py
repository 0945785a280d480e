"""Private registries: a user's credentials per registry host, the password sealed.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25

Written by hand to match ``tables.py``; a test compares the two.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# Types as they were at this revision (migrations never import tables.py).
UUID = sa.Uuid()
TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "registry",
        sa.Column("id", UUID, nullable=False),
        sa.Column("owner_id", UUID, nullable=False),
        sa.Column("host", sa.String(259), nullable=False),
        sa.Column("username", sa.String(255), nullable=False),
        sa.Column("password_sealed", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_registry"),
        sa.ForeignKeyConstraint(
            ["owner_id"],
            ["user_account.id"],
            name="fk_registry_owner_id_user_account",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("owner_id", "host", name="uq_registry_owner_id_host"),
    )


def downgrade() -> None:
    op.drop_table("registry")
