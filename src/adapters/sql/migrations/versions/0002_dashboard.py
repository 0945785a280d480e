"""Dashboard: web sessions, sign-up invitations, and an index for a server's deployments."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from berth.adapters.sql.migrations.ddl import TIMESTAMP, UUID, cascade, index, primary_key

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    index("deployment", "server_id", "created_at")

    op.create_table(
        "web_session",
        sa.Column("id_hash", sa.String(64), nullable=False),
        sa.Column("user_id", UUID, nullable=False),
        sa.Column("csrf_token", sa.String(64), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("last_seen_at", TIMESTAMP, nullable=False),
        sa.Column("expires_at", TIMESTAMP, nullable=False),
        primary_key("web_session", "id_hash"),
        cascade("web_session", "user_id", "user_account"),
    )
    index("web_session", "user_id")
    index("web_session", "expires_at")

    op.create_table(
        "invite",
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("email", sa.String(254), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("expires_at", TIMESTAMP, nullable=False),
        sa.Column("used_at", TIMESTAMP, nullable=True),
        primary_key("invite", "token_hash"),
    )


def downgrade() -> None:
    op.drop_table("invite")
    op.drop_index("ix_web_session_expires_at", table_name="web_session")
    op.drop_index("ix_web_session_user_id", table_name="web_session")
    op.drop_table("web_session")
    op.drop_index("ix_deployment_server_id_created_at", table_name="deployment")
