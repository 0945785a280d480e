"""Initial schema: users and tokens, servers, installations, deployments and their events,
container snapshots.

Revision ID: 0001
Revises:
Create Date: 2025-01-01

Written by hand to match ``tables.py``; a test compares the two.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# Types as they were at this revision (migrations never import tables.py).
UUID = sa.Uuid()
TIMESTAMP = sa.DateTime(timezone=True)
BIGINT_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "user_account",
        sa.Column("id", UUID, nullable=False),
        sa.Column("email", sa.String(254), nullable=False),
        sa.Column("password_hash", sa.String(255), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_user_account"),
        sa.UniqueConstraint("email", name="uq_user_account_email"),
    )

    op.create_table(
        "api_token",
        sa.Column("user_id", UUID, nullable=False),
        sa.Column("token_hash", sa.String(128), nullable=False),
        sa.Column("prefix", sa.String(32), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("last_used_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("user_id", name="pk_api_token"),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["user_account.id"],
            name="fk_api_token_user_id_user_account",
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_api_token_token_hash", "api_token", ["token_hash"], unique=True)

    op.create_table(
        "server",
        sa.Column("id", UUID, nullable=False),
        sa.Column("owner_id", UUID, nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("transport", sa.String(16), nullable=False),
        sa.Column("address", sa.String(253), nullable=True),
        sa.Column("ssh_port", sa.Integer(), nullable=False),
        sa.Column("ssh_user", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("status_detail", sa.Text(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("last_seen_at", TIMESTAMP, nullable=True),
        sa.Column("facts", sa.JSON(), nullable=False),
        sa.Column("enrollment_token_hash", sa.String(128), nullable=True),
        sa.Column("enrollment_expires_at", TIMESTAMP, nullable=True),
        # SSH: berth's key pair for this server (private half sealed), pinned host keys.
        sa.Column("private_key_sealed", sa.LargeBinary(), nullable=True),
        sa.Column("public_key", sa.Text(), nullable=True),
        sa.Column("host_keys", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_server"),
        sa.ForeignKeyConstraint(
            ["owner_id"],
            ["user_account.id"],
            name="fk_server_owner_id_user_account",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("enrollment_token_hash", name="uq_server_enrollment_token_hash"),
    )
    op.create_index("ix_server_owner_id", "server", ["owner_id"])

    op.create_table(
        "installation",
        sa.Column("id", UUID, nullable=False),
        sa.Column("owner_id", UUID, nullable=False),
        sa.Column("server_id", UUID, nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("container_name", sa.String(100), nullable=False),
        sa.Column("image", sa.String(512), nullable=False),
        sa.Column("port", sa.Integer(), nullable=False),
        sa.Column("domain", sa.String(253), nullable=True),
        sa.Column("host_port", sa.Integer(), nullable=True),
        sa.Column("env_keys", sa.JSON(), nullable=False),
        sa.Column("env_sealed", sa.LargeBinary(), nullable=False),
        sa.Column("volumes", sa.JSON(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_installation"),
        sa.ForeignKeyConstraint(
            ["owner_id"],
            ["user_account.id"],
            name="fk_installation_owner_id_user_account",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["server_id"],
            ["server.id"],
            name="fk_installation_server_id_server",
            ondelete="CASCADE",
        ),
        # NULL domains / host ports are distinct: many installations may have none.
        sa.UniqueConstraint(
            "server_id", "container_name", name="uq_installation_server_id_container_name"
        ),
        sa.UniqueConstraint("server_id", "domain", name="uq_installation_server_id_domain"),
        sa.UniqueConstraint("server_id", "host_port", name="uq_installation_server_id_host_port"),
    )

    op.create_table(
        "deployment",
        sa.Column("id", UUID, nullable=False),
        sa.Column("owner_id", UUID, nullable=False),
        sa.Column("installation_id", UUID, nullable=False),
        sa.Column("server_id", UUID, nullable=False),
        sa.Column("image", sa.String(512), nullable=False),
        sa.Column("port", sa.Integer(), nullable=False),
        sa.Column("domain", sa.String(253), nullable=True),
        sa.Column("env_keys", sa.JSON(), nullable=False),
        sa.Column("volumes", sa.JSON(), nullable=False),
        sa.Column("env_sealed", sa.LargeBinary(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("step", sa.String(64), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("started_at", TIMESTAMP, nullable=True),
        sa.Column("finished_at", TIMESTAMP, nullable=True),
        sa.Column("idempotency_key", sa.String(255), nullable=True),
        sa.Column("fingerprint", sa.String(128), nullable=True),
        # The worker's lease.
        sa.Column("lease_owner", sa.String(255), nullable=True),
        sa.Column("lease_expires_at", TIMESTAMP, nullable=True),
        sa.Column("deadline_at", TIMESTAMP, nullable=True),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_deployment"),
        sa.ForeignKeyConstraint(
            ["owner_id"],
            ["user_account.id"],
            name="fk_deployment_owner_id_user_account",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["installation_id"],
            ["installation.id"],
            name="fk_deployment_installation_id_installation",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["server_id"],
            ["server.id"],
            name="fk_deployment_server_id_server",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint(
            "owner_id", "idempotency_key", name="uq_deployment_owner_id_idempotency_key"
        ),
    )
    op.create_index("ix_deployment_state_created_at", "deployment", ["state", "created_at"])
    op.create_index(
        "ix_deployment_installation_id_created_at_id",
        "deployment",
        ["installation_id", "created_at", "id"],
    )
    op.create_index(
        "ix_deployment_installation_id_state", "deployment", ["installation_id", "state"]
    )

    op.create_table(
        "deployment_event",
        sa.Column("id", BIGINT_ID, autoincrement=True, nullable=False),
        sa.Column("deployment_id", UUID, nullable=False),
        sa.Column("at", TIMESTAMP, nullable=False),
        sa.Column("step", sa.String(64), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_deployment_event"),
        sa.ForeignKeyConstraint(
            ["deployment_id"],
            ["deployment.id"],
            name="fk_deployment_event_deployment_id_deployment",
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_deployment_event_deployment_id", "deployment_event", ["deployment_id"])

    op.create_table(
        "container_snapshot",
        sa.Column("server_id", UUID, nullable=False),
        sa.Column("owner_id", UUID, nullable=False),
        sa.Column("observed_at", TIMESTAMP, nullable=False),
        sa.Column("containers", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("server_id", name="pk_container_snapshot"),
        sa.ForeignKeyConstraint(
            ["server_id"],
            ["server.id"],
            name="fk_container_snapshot_server_id_server",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["owner_id"],
            ["user_account.id"],
            name="fk_container_snapshot_owner_id_user_account",
            ondelete="CASCADE",
        ),
    )


def downgrade() -> None:
    for table in (
        "container_snapshot",
        "deployment_event",
        "deployment",
        "installation",
        "server",
        "api_token",
        "user_account",
    ):
        op.drop_table(table)
