"""Private registries: a user's credentials per registry host, the password sealed."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from berth.adapters.sql.migrations.ddl import TIMESTAMP, owned, unique

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    op.create_table(
        "registry",
        *owned("registry"),
        sa.Column("host", sa.String(259), nullable=False),
        sa.Column("username", sa.String(255), nullable=False),
        sa.Column("password_sealed", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        unique("registry", "owner_id", "host"),
    )


def downgrade() -> None:
    op.drop_table("registry")
