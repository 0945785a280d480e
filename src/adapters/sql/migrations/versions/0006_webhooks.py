"""Webhooks: a user's endpoints (secret sealed) and the outbox of their deliveries."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from berth.adapters.sql.migrations.ddl import TIMESTAMP, UUID, cascade, index, owned, primary_key

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    op.create_table(
        "webhook",
        *owned("webhook"),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("secret_sealed", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
    )
    index("webhook", "owner_id")
    op.create_table(
        "webhook_delivery",
        sa.Column("id", UUID, nullable=False),
        sa.Column("webhook_id", UUID, nullable=False),
        sa.Column("owner_id", UUID, nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("next_attempt_at", TIMESTAMP, nullable=True),
        sa.Column("delivered_at", TIMESTAMP, nullable=True),
        sa.Column("lease_owner", sa.String(255), nullable=True),
        sa.Column("lease_expires_at", TIMESTAMP, nullable=True),
        sa.Column("log", sa.JSON(), nullable=False),
        cascade("webhook_delivery", "webhook_id", "webhook"),
        cascade("webhook_delivery", "owner_id", "user_account"),
        primary_key("webhook_delivery"),
    )
    index("webhook_delivery", "state", "next_attempt_at")
    index("webhook_delivery", "webhook_id", "created_at")


def downgrade() -> None:
    op.drop_table("webhook_delivery")
    op.drop_table("webhook")
