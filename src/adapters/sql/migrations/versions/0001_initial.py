"""Initial schema: users and tokens, servers, installations, deployments and their events,
container snapshots.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from berth.adapters.sql.migrations.ddl import (
    TIMESTAMP,
    UUID,
    cascade,
    index,
    owned,
    primary_key,
    unique,
)

revision = "0001"
down_revision = None

BIGINT_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "user_account",
        sa.Column("id", UUID, nullable=False),
        sa.Column("email", sa.String(254), nullable=False),
        sa.Column("password_hash", sa.String(255), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        primary_key("user_account"),
        unique("user_account", "email"),
    )

    op.create_table(
        "api_token",
        sa.Column("user_id", UUID, nullable=False),
        sa.Column("token_hash", sa.String(128), nullable=False),
        sa.Column("prefix", sa.String(32), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("last_used_at", TIMESTAMP, nullable=True),
        primary_key("api_token", "user_id"),
        cascade("api_token", "user_id", "user_account"),
    )
    index("api_token", "token_hash", unique=True)

    op.create_table(
        "server",
        *owned("server"),
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
        unique("server", "enrollment_token_hash"),
    )
    index("server", "owner_id")

    op.create_table(
        "installation",
        *owned("installation"),
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
        cascade("installation", "server_id", "server"),
        # NULL domains / host ports are distinct: many installations may have none.
        unique("installation", "server_id", "container_name"),
        unique("installation", "server_id", "domain"),
        unique("installation", "server_id", "host_port"),
    )

    op.create_table(
        "deployment",
        *owned("deployment"),
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
        cascade("deployment", "installation_id", "installation"),
        cascade("deployment", "server_id", "server"),
        unique("deployment", "owner_id", "idempotency_key"),
    )
    index("deployment", "state", "created_at")
    index("deployment", "installation_id", "created_at", "id")
    index("deployment", "installation_id", "state")

    op.create_table(
        "deployment_event",
        sa.Column("id", BIGINT_ID, autoincrement=True, nullable=False),
        sa.Column("deployment_id", UUID, nullable=False),
        sa.Column("at", TIMESTAMP, nullable=False),
        sa.Column("step", sa.String(64), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        primary_key("deployment_event"),
        cascade("deployment_event", "deployment_id", "deployment"),
    )
    index("deployment_event", "deployment_id")

    op.create_table(
        "container_snapshot",
        sa.Column("server_id", UUID, nullable=False),
        sa.Column("owner_id", UUID, nullable=False),
        sa.Column("observed_at", TIMESTAMP, nullable=False),
        sa.Column("containers", sa.JSON(), nullable=False),
        primary_key("container_snapshot", "server_id"),
        cascade("container_snapshot", "server_id", "server"),
        cascade("container_snapshot", "owner_id", "user_account"),
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
