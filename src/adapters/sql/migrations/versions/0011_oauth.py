"""OAuth for remote MCP clients: the clients that registered themselves, the
authorizations users answer on the consent page, and the grants (refresh tokens) that
mint their named tokens."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from berth.adapters.sql.migrations.ddl import TIMESTAMP, UUID, cascade, index, primary_key, unique

revision = "0011"
down_revision = "0010"


def upgrade() -> None:
    op.create_table(
        "oauth_client",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("redirect_uris", sa.JSON(), nullable=False),
        sa.Column("metadata_sealed", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        primary_key("oauth_client"),
    )
    op.create_table(
        "oauth_authorization",
        sa.Column("id", UUID, nullable=False),
        sa.Column("client_id", sa.String(64), nullable=False),
        sa.Column("redirect_uri", sa.Text(), nullable=False),
        sa.Column("redirect_uri_explicit", sa.Boolean(), nullable=False),
        sa.Column("code_challenge", sa.String(128), nullable=False),
        sa.Column("state", sa.Text(), nullable=True),
        sa.Column("resource", sa.Text(), nullable=True),
        sa.Column("requested_scopes", sa.JSON(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("expires_at", TIMESTAMP, nullable=False),
        sa.Column("code_hash", sa.String(128), nullable=True),
        sa.Column("user_id", UUID, nullable=True),
        sa.Column("team_id", UUID, nullable=True),
        sa.Column("scopes", sa.JSON(), nullable=True),
        sa.Column("server_ids", sa.JSON(), nullable=True),
        primary_key("oauth_authorization"),
        cascade("oauth_authorization", "client_id", "oauth_client"),
        cascade("oauth_authorization", "user_id", "user_account"),
        cascade("oauth_authorization", "team_id", "team"),
        unique("oauth_authorization", "code_hash"),
    )
    index("oauth_authorization", "expires_at")
    op.create_table(
        "oauth_grant",
        sa.Column("id", UUID, nullable=False),
        sa.Column("refresh_hash", sa.String(128), nullable=False),
        sa.Column("client_id", sa.String(64), nullable=False),
        sa.Column("user_id", UUID, nullable=False),
        sa.Column("team_id", UUID, nullable=False),
        sa.Column("scopes", sa.JSON(), nullable=False),
        sa.Column("server_ids", sa.JSON(), nullable=True),
        sa.Column("resource", sa.Text(), nullable=True),
        sa.Column("token_id", UUID, nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("expires_at", TIMESTAMP, nullable=False),
        primary_key("oauth_grant"),
        cascade("oauth_grant", "client_id", "oauth_client"),
        cascade("oauth_grant", "user_id", "user_account"),
        cascade("oauth_grant", "team_id", "team"),
        unique("oauth_grant", "refresh_hash"),
    )
    index("oauth_grant", "expires_at")
    index("oauth_grant", "token_id")


def downgrade() -> None:
    op.drop_table("oauth_grant")
    op.drop_table("oauth_authorization")
    op.drop_table("oauth_client")
