"""Teams own things, not users: teams, their members and invitations, named tokens, and
the audit log; every user gets a personal team and what they owned becomes its.

A personal team's id is its user's, so what a user owned (``owner_id`` on servers,
installations, deployments, snapshots, registries, webhooks and deliveries) is their
personal team's without a row changing: each ``owner_id`` now refers to ``team``
instead of ``user_account``. Rebuilding ``server`` on SQLite drops 0009's triggers, which
are created again.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from berth.adapters.sql.migrations.ddl import (
    TIMESTAMP,
    UUID,
    cascade,
    create_server_triggers,
    index,
    primary_key,
    unique,
)

revision = "0010"
down_revision = "0009"

#: The tables whose ``owner_id`` becomes a team's id.
OWNED = (
    "server",
    "installation",
    "deployment",
    "container_snapshot",
    "registry",
    "webhook",
    "webhook_delivery",
)


def upgrade() -> None:
    op.create_table(
        "team",
        sa.Column("id", UUID, nullable=False),
        sa.Column("name", sa.String(254), nullable=False),
        sa.Column("personal_of", UUID, nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        primary_key("team"),
        cascade("team", "personal_of", "user_account"),
        unique("team", "personal_of"),
    )
    op.create_table(
        "team_member",
        sa.Column("team_id", UUID, nullable=False),
        sa.Column("user_id", UUID, nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("joined_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("team_id", "user_id", name="pk_team_member"),
        cascade("team_member", "team_id", "team"),
        cascade("team_member", "user_id", "user_account"),
    )
    index("team_member", "user_id")
    op.create_table(
        "team_invitation",
        sa.Column("id", UUID, nullable=False),
        sa.Column("team_id", UUID, nullable=False),
        sa.Column("email", sa.String(254), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("expires_at", TIMESTAMP, nullable=False),
        sa.Column("invited_by", UUID, nullable=False),
        sa.Column("accepted_at", TIMESTAMP, nullable=True),
        primary_key("team_invitation"),
        cascade("team_invitation", "team_id", "team"),
        cascade("team_invitation", "invited_by", "user_account"),
        unique("team_invitation", "token_hash"),
    )
    index("team_invitation", "team_id")
    op.create_table(
        "access_token",
        sa.Column("id", UUID, nullable=False),
        sa.Column("user_id", UUID, nullable=False),
        sa.Column("team_id", UUID, nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("scopes", sa.JSON(), nullable=False),
        sa.Column("server_ids", sa.JSON(), nullable=True),
        sa.Column("token_hash", sa.String(128), nullable=False),
        sa.Column("prefix", sa.String(32), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("expires_at", TIMESTAMP, nullable=True),
        sa.Column("last_used_at", TIMESTAMP, nullable=True),
        primary_key("access_token"),
        cascade("access_token", "user_id", "user_account"),
        cascade("access_token", "team_id", "team"),
        unique("access_token", "token_hash"),
    )
    index("access_token", "user_id")
    index("access_token", "team_id", "user_id")
    op.create_table(
        "audit_entry",
        sa.Column("id", UUID, nullable=False),
        sa.Column("team_id", UUID, nullable=False),
        sa.Column("at", TIMESTAMP, nullable=False),
        sa.Column("actor_user_id", UUID, nullable=False),
        sa.Column("actor_email", sa.String(254), nullable=False),
        sa.Column("token_id", UUID, nullable=True),
        sa.Column("token_name", sa.String(100), nullable=True),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target_type", sa.String(32), nullable=False),
        sa.Column("target_id", sa.String(64), nullable=True),
        sa.Column("target_name", sa.String(300), nullable=True),
        sa.Column("client_address", sa.String(64), nullable=True),
        sa.Column("outcome", sa.String(8), nullable=False),
        sa.Column("detail", sa.String(300), nullable=True),
        primary_key("audit_entry"),
        cascade("audit_entry", "team_id", "team"),
    )
    index("audit_entry", "team_id", "at", "id")
    index("audit_entry", "at")

    # Every user's personal team (the user's id), with the user as its owner.
    op.execute(
        "INSERT INTO team (id, name, personal_of, created_at) "
        "SELECT id, email, id, created_at FROM user_account"
    )
    op.execute(
        "INSERT INTO team_member (team_id, user_id, role, joined_at) "
        "SELECT id, id, 'owner', created_at FROM user_account"
    )
    for table in OWNED:
        with op.batch_alter_table(table) as batch:
            batch.drop_constraint(f"fk_{table}_owner_id_user_account", type_="foreignkey")
            batch.create_foreign_key(
                f"fk_{table}_owner_id_team", "team", ["owner_id"], ["id"], ondelete="CASCADE"
            )
    create_server_triggers()  # rebuilding ``server`` on SQLite dropped 0009's


def downgrade() -> None:
    # Only what personal teams own can go back to its user; shared teams' things cannot.
    for table in OWNED:
        op.execute(
            f"DELETE FROM {table} WHERE owner_id NOT IN "  # noqa: S608 (fixed table names)
            "(SELECT id FROM team WHERE personal_of IS NOT NULL)"
        )
        with op.batch_alter_table(table) as batch:
            batch.drop_constraint(f"fk_{table}_owner_id_team", type_="foreignkey")
            batch.create_foreign_key(
                f"fk_{table}_owner_id_user_account",
                "user_account",
                ["owner_id"],
                ["id"],
                ondelete="CASCADE",
            )
    create_server_triggers()  # rebuilding ``server`` on SQLite dropped 0009's
    op.drop_table("audit_entry")
    op.drop_table("access_token")
    op.drop_table("team_invitation")
    op.drop_table("team_member")
    op.drop_table("team")
