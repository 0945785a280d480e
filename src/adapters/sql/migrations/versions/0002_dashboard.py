"""Dashboard: web sessions, sign-up invitations, and an index for a server's deployments.

Revision ID: 0002
Revises: 0001
Create Date: 2025-02-01

Written by hand to match ``tables.py``; a test compares the two.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# Types as they were at this revision (migrations never import tables.py).
UUID = sa.Uuid()
TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_index("ix_deployment_server_id_created_at", "deployment", ["server_id", "created_at"])

    op.create_table(
        "web_session",
        sa.Column("id_hash", sa.String(64), nullable=False),
        sa.Column("user_id", UUID, nullable=False),
        sa.Column("csrf_token", sa.String(64), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("last_seen_at", TIMESTAMP, nullable=False),
        sa.Column("expires_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id_hash", name="pk_web_session"),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["user_account.id"],
            name="fk_web_session_user_id_user_account",
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_web_session_user_id", "web_session", ["user_id"])
    op.create_index("ix_web_session_expires_at", "web_session", ["expires_at"])

    op.create_table(
        "invite",
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("email", sa.String(254), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("expires_at", TIMESTAMP, nullable=False),
        sa.Column("used_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("token_hash", name="pk_invite"),
    )


def downgrade() -> None:
    op.drop_table("invite")
    op.drop_index("ix_web_session_expires_at", table_name="web_session")
    op.drop_index("ix_web_session_user_id", table_name="web_session")
    op.drop_table("web_session")
    op.drop_index("ix_deployment_server_id_created_at", table_name="deployment")
