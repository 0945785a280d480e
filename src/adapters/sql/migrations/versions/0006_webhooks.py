"""Webhooks: a user's endpoints (secret sealed) and the outbox of their deliveries.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25

Written by hand to match ``tables.py``; a test compares the two.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "webhook",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("owner_id", sa.Uuid(), nullable=False),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("secret_sealed", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(
            ["owner_id"],
            ["user_account.id"],
            name="fk_webhook_owner_id_user_account",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_webhook"),
    )
    op.create_index("ix_webhook_owner_id", "webhook", ["owner_id"])
    op.create_table(
        "webhook_delivery",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("webhook_id", sa.Uuid(), nullable=False),
        sa.Column("owner_id", sa.Uuid(), nullable=False),
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
        sa.ForeignKeyConstraint(
            ["webhook_id"],
            ["webhook.id"],
            name="fk_webhook_delivery_webhook_id_webhook",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["owner_id"],
            ["user_account.id"],
            name="fk_webhook_delivery_owner_id_user_account",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_delivery"),
    )
    op.create_index(
        "ix_webhook_delivery_state_next_attempt_at",
        "webhook_delivery",
        ["state", "next_attempt_at"],
    )
    op.create_index(
        "ix_webhook_delivery_webhook_id_created_at",
        "webhook_delivery",
        ["webhook_id", "created_at"],
    )


def downgrade() -> None:
    op.drop_table("webhook_delivery")
    op.drop_table("webhook")
