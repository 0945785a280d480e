"""Host-key re-pinning and TLS checks: the key a server offered instead of a pinned
one (and a status long enough for ``host_key_mismatch``), and each installation's
HTTPS state as its last deployment's check through the proxy found it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from berth.adapters.sql.migrations.ddl import TIMESTAMP

revision = "0007"
down_revision = "0006"


def upgrade() -> None:
    with op.batch_alter_table("server") as batch:
        batch.alter_column(
            "status", existing_type=sa.String(16), type_=sa.String(32), existing_nullable=False
        )
        batch.add_column(sa.Column("offered_host_key", sa.Text(), nullable=True))
    with op.batch_alter_table("installation") as batch:
        batch.add_column(sa.Column("tls_state", sa.String(16), nullable=True))
        batch.add_column(sa.Column("tls_issuer", sa.String(16), nullable=True))
        batch.add_column(sa.Column("tls_reason", sa.Text(), nullable=True))
        batch.add_column(sa.Column("tls_checked_at", TIMESTAMP, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("installation") as batch:
        for name in ("tls_checked_at", "tls_reason", "tls_issuer", "tls_state"):
            batch.drop_column(name)
    op.execute("UPDATE server SET status = 'offline' WHERE status = 'host_key_mismatch'")
    with op.batch_alter_table("server") as batch:
        batch.drop_column("offered_host_key")
        batch.alter_column(
            "status", existing_type=sa.String(32), type_=sa.String(16), existing_nullable=False
        )
