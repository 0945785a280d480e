"""Push to deploy and private Git repositories: ``deploy_hook`` (an installation's hook,
its secret sealed) and ``git_credential`` (a team's credentials per Git host, the
password sealed). New tables: nothing is rebuilt."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from berth.adapters.sql.migrations.ddl import TIMESTAMP, UUID, cascade, index, primary_key, unique

revision = "0015"
down_revision = "0014"


def upgrade() -> None:
    op.create_table(
        "git_credential",
        sa.Column("id", UUID, nullable=False),
        sa.Column("owner_id", UUID, nullable=False),
        sa.Column("host", sa.String(259), nullable=False),
        sa.Column("username", sa.String(255), nullable=False),
        sa.Column("password_sealed", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        primary_key("git_credential"),
        cascade("git_credential", "owner_id", "team"),
        unique("git_credential", "owner_id", "host"),
    )
    op.create_table(
        "deploy_hook",
        sa.Column("id", UUID, nullable=False),
        sa.Column("owner_id", UUID, nullable=False),
        sa.Column("installation_id", UUID, nullable=False),
        sa.Column("created_by", UUID, nullable=False),
        sa.Column("secret_sealed", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        primary_key("deploy_hook"),
        cascade("deploy_hook", "owner_id", "team"),
        cascade("deploy_hook", "installation_id", "installation"),
        cascade("deploy_hook", "created_by", "user_account"),
        unique("deploy_hook", "installation_id"),
    )
    index("deploy_hook", "owner_id")


def downgrade() -> None:
    op.drop_table("deploy_hook")
    op.drop_table("git_credential")
