"""Revisions: deploy options and the image a deployment ran; installations keep their
history (removed, stopped, the revision serving now).

Name, domain and host port become unique only among installations that are not
removed (partial unique indexes); on SQLite that recreates the installation table,
which ``dialect.migration_lock`` does with foreign keys off, so no deployment is
cascaded away.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from berth.adapters.sql.migrations.ddl import TIMESTAMP, UUID

revision = "0004"
down_revision = "0003"

_NOT_REMOVED = sa.text("removed_at IS NULL")
_UNIQUE = (("container_name",), ("domain",), ("host_port",))


def _options() -> list[sa.Column[object]]:
    """The deploy options, on the installation (desired) and each deployment (revision)."""
    return [
        sa.Column("memory", sa.BigInteger(), nullable=True),
        sa.Column("cpus", sa.Double(), nullable=True),
        sa.Column("restart", sa.String(16), server_default="unless-stopped", nullable=False),
        sa.Column("health_path", sa.String(1024), nullable=True),
        sa.Column("command", sa.JSON(), nullable=True),
    ]


def upgrade() -> None:
    with op.batch_alter_table("installation", recreate="auto") as batch:
        for columns in _UNIQUE:
            batch.drop_constraint(f"uq_installation_server_id_{columns[0]}", type_="unique")
        for column in _options():
            batch.add_column(column)
        batch.add_column(sa.Column("current_deployment_id", UUID, nullable=True))
        batch.add_column(sa.Column("removed_at", TIMESTAMP, nullable=True))
        batch.add_column(sa.Column("stopped_at", TIMESTAMP, nullable=True))
    for columns in _UNIQUE:
        op.create_index(
            f"uq_installation_server_id_{columns[0]}",
            "installation",
            ["server_id", *columns],
            unique=True,
            sqlite_where=_NOT_REMOVED,
            postgresql_where=_NOT_REMOVED,
        )
    with op.batch_alter_table("deployment") as batch:
        for column in _options():
            batch.add_column(column)
        batch.add_column(sa.Column("image_id", sa.String(128), nullable=True))
        batch.add_column(sa.Column("rollback_of", UUID, nullable=True))
        batch.add_column(sa.Column("cancel_requested_at", TIMESTAMP, nullable=True))
    # The revision serving now: the newest succeeded deployment, where the newest finished
    # one succeeded (before this revision a failed redeploy left nothing serving).
    op.execute(
        """
        UPDATE installation SET current_deployment_id = (
            SELECT d.id FROM deployment d
            WHERE d.installation_id = installation.id AND d.state = 'succeeded'
            ORDER BY d.created_at DESC, d.id DESC LIMIT 1)
        WHERE (
            SELECT d.state FROM deployment d
            WHERE d.installation_id = installation.id
              AND d.state IN ('succeeded', 'failed', 'timed_out', 'canceled')
            ORDER BY d.created_at DESC, d.id DESC LIMIT 1) = 'succeeded'
        """
    )


def downgrade() -> None:
    with op.batch_alter_table("deployment") as batch:
        for name in ("cancel_requested_at", "rollback_of", "image_id"):
            batch.drop_column(name)
        for column in reversed(_options()):
            batch.drop_column(column.name)
    op.execute("DELETE FROM installation WHERE removed_at IS NOT NULL")
    for columns in _UNIQUE:
        op.drop_index(f"uq_installation_server_id_{columns[0]}", table_name="installation")
    with op.batch_alter_table("installation", recreate="auto") as batch:
        for name in ("stopped_at", "removed_at", "current_deployment_id"):
            batch.drop_column(name)
        for column in reversed(_options()):
            batch.drop_column(column.name)
        for columns in _UNIQUE:
            batch.create_unique_constraint(
                f"uq_installation_server_id_{columns[0]}", ["server_id", *columns]
            )
