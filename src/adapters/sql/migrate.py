"""Bring a database to the current schema with Alembic, configured in code (no alembic.ini)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from alembic import command
from alembic.config import Config
from berth.core.ports import SecretBox

from . import dialect

__all__ = ["MIGRATIONS_DIR", "alembic_config", "migrate"]

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


def alembic_config(url: str, box: SecretBox | None = None) -> Config:
    """An Alembic ``Config`` for berth's migrations against ``url`` (an async driver URL).

    ``box`` is what a migration that seals values kept in the clear until then seals
    them with (``config.attributes["box"]``). Useful beyond :func:`migrate` for other
    Alembic commands, e.g. ``alembic.command.current(alembic_config(url))``.
    """
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # Passed as an attribute, not an ini option: URLs may contain '%' (configparser).
    config.attributes["url"] = url
    if box is not None:
        config.attributes["box"] = box
    return config


def migrate(url: str, box: SecretBox | None = None) -> None:
    """Upgrade the database at ``url`` to the latest schema, creating it if needed.

    ``box`` seals what a migration seals (webhook URLs, revision 0008): needed only
    when there is something to seal; without it such a migration stops, changing nothing.

    Idempotent: on an up-to-date database it changes nothing. Safe when several
    processes start at once against the same database: the first one migrates
    while the others wait for it, then find nothing to do. Blocks until done;
    callable from a thread that runs an event loop (it then migrates in another
    thread, as Alembic drives its own loop).
    """
    dialect.ensure_database_dir(url)
    config = alembic_config(url, box)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        command.upgrade(config, "head")
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="berth-migrate") as pool:
        pool.submit(command.upgrade, config, "head").result()
