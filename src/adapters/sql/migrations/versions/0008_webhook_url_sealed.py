"""Webhook URLs sealed like the other secrets (a URL may carry a token): ``webhook.url``
becomes ``webhook.url_sealed``, and every URL already stored is sealed with berth's key
(the ``SecretBox`` in ``config.attributes["box"]``, see ``migrate``).

Without a box, a database holding webhooks is not migrated (the revision stops, and its
transaction takes back what it did); an empty one needs none.

The clear values are blanked before their column goes, and on SQLite the pages freed
are zeroed (``secure_delete``). PostgreSQL keeps old row versions on disk until they
are vacuumed: ``VACUUM FULL webhook`` after the upgrade rewrites the table without them.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import context, op
from berth.adapters.sql.migrations.ddl import UUID

revision = "0008"
down_revision = "0007"

_WEBHOOK = sa.table(
    "webhook",
    sa.column("id", UUID),
    sa.column("url", sa.String(2048)),
    sa.column("url_sealed", sa.LargeBinary()),
)


def _box() -> Any:
    box = context.config.attributes.get("box")
    if box is None:
        raise RuntimeError(
            "Webhook URLs are sealed from this version on, which needs berth's secret key: "
            "migrate through berth (berth serve, or any berth command on this data dir, "
            "with BERTH_SECRET_KEY if the key is not in the data dir)."
        )
    return box


def upgrade() -> None:
    with op.batch_alter_table("webhook") as batch:
        batch.add_column(sa.Column("url_sealed", sa.LargeBinary(), nullable=True))
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        bind.exec_driver_sql("PRAGMA secure_delete = ON")  # freed pages are zeroed
    rows = bind.execute(sa.select(_WEBHOOK.c.id, _WEBHOOK.c.url)).all()
    if rows:
        box = _box()
        for row in rows:
            bind.execute(
                sa.update(_WEBHOOK)
                .where(_WEBHOOK.c.id == row.id)
                .values(url_sealed=box.seal(row.url.encode()), url="")
            )
    with op.batch_alter_table("webhook") as batch:
        batch.alter_column("url_sealed", existing_type=sa.LargeBinary(), nullable=False)
        batch.drop_column("url")


def downgrade() -> None:
    with op.batch_alter_table("webhook") as batch:
        batch.add_column(sa.Column("url", sa.String(2048), nullable=True))
    bind = op.get_bind()
    rows = bind.execute(sa.select(_WEBHOOK.c.id, _WEBHOOK.c.url_sealed)).all()
    if rows:
        box = _box()
        for row in rows:
            bind.execute(
                sa.update(_WEBHOOK)
                .where(_WEBHOOK.c.id == row.id)
                .values(url=box.open(bytes(row.url_sealed)).decode())
            )
    with op.batch_alter_table("webhook") as batch:
        batch.alter_column("url", existing_type=sa.String(2048), nullable=False)
        batch.drop_column("url_sealed")
