"""Ports and stops (issue 24): a deploy's ``hostPort`` and ``stopGraceSeconds`` on the
installation (desired) and each deployment (revision), an installation's
``stopping_until`` (a stop on request runs), and a webhook's ``format``.

``spec_host_port`` of an app without a domain was its ``port`` until now, and is filled
so. Columns are only added (``ALTER TABLE ... ADD COLUMN``): no table is rebuilt, so
SQLite keeps the ``server`` triggers.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from berth.adapters.sql.migrations.ddl import TIMESTAMP

revision = "0012"
down_revision = "0011"

_SPEC_TABLES = ("installation", "deployment")


def upgrade() -> None:
    for table in _SPEC_TABLES:
        op.add_column(table, sa.Column("spec_host_port", sa.Integer(), nullable=True))
        op.add_column(
            table,
            sa.Column(
                "stop_grace_seconds", sa.Integer(), server_default=sa.text("10"), nullable=False
            ),
        )
        op.execute(f"UPDATE {table} SET spec_host_port = port WHERE domain IS NULL")  # noqa: S608
    op.add_column("installation", sa.Column("stopping_until", TIMESTAMP, nullable=True))
    op.add_column(
        "webhook",
        sa.Column("format", sa.String(16), server_default="standard", nullable=False),
    )


def downgrade() -> None:
    with op.batch_alter_table("installation") as batch:
        batch.drop_column("stopping_until")
    with op.batch_alter_table("webhook") as batch:
        batch.drop_column("format")
    for table in reversed(_SPEC_TABLES):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("stop_grace_seconds")
            batch.drop_column("spec_host_port")
