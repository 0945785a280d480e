"""Building from source: what an app is built from (``build``, on installations and
deployments alike, as the rest of the spec) and the Git commit a deployment's image was
built from (``commit``)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"


def upgrade() -> None:
    with op.batch_alter_table("installation") as batch:
        batch.add_column(sa.Column("build", sa.JSON(), nullable=True))
    with op.batch_alter_table("deployment") as batch:
        batch.add_column(sa.Column("build", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("commit", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("deployment") as batch:
        batch.drop_column("commit")
        batch.drop_column("build")
    with op.batch_alter_table("installation") as batch:
        batch.drop_column("build")
