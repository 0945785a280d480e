"""Settings read from the environment, and what bootstrap derives from them."""

from __future__ import annotations

from pathlib import Path

import pytest
from berth.entrypoints.bootstrap import berth_paths
from berth.entrypoints.settings import Settings


class TestLocalOwner:
    def test_names_the_account_by_email(self) -> None:
        """``BERTH_LOCAL_OWNER`` is an email, kept as the store keeps emails."""
        settings = Settings.from_env({"BERTH_LOCAL_OWNER": " Ops@Example.com "})
        assert settings.local_owner == "ops@example.com"

    def test_default_is_the_first_account(self) -> None:
        """Unset (or empty), no account is named: the first one owns this machine."""
        assert Settings.from_env({}).local_owner is None
        assert Settings.from_env({"BERTH_LOCAL_OWNER": ""}).local_owner is None

    def test_a_bad_email_stops_the_start(self) -> None:
        """A value that is not an email stops berth before it starts, naming the setting."""
        with pytest.raises(SystemExit, match="BERTH_LOCAL_OWNER"):
            Settings.from_env({"BERTH_LOCAL_OWNER": "root"})


class TestBerthPaths:
    def test_the_data_dir_as_given_and_resolved(self, tmp_path: Path) -> None:
        """The data dir is guarded by its absolute path and by the one its symlinks lead to."""
        real = tmp_path / "real"
        real.mkdir()
        (tmp_path / "link").symlink_to(real)
        paths = berth_paths(Settings(data_dir=tmp_path / "link"))
        assert set(paths) == {str(tmp_path / "link"), str(real)}

    def test_a_sqlite_database_kept_elsewhere(self, tmp_path: Path) -> None:
        """A SQLite database outside the data dir is guarded too; PostgreSQL's is not here."""
        database = tmp_path / "db" / "berth.db"
        sqlite = Settings(
            data_dir=tmp_path / "data", database_url=f"sqlite+aiosqlite:///{database}"
        )
        assert str(database) in berth_paths(sqlite)
        postgres = Settings(data_dir=tmp_path / "data", database_url="postgresql+asyncpg://h/db")
        assert berth_paths(postgres) == (str(tmp_path / "data"),)
