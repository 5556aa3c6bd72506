"""Bring a database to the newest schema with Alembic (the API and ``cuset serve`` call this)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

import migrations


def alembic_config(database_url: str) -> Config:
    """Alembic's config for ``database_url``, found from the installed migrations package."""
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Apply every migration up to ``revision``."""
    command.upgrade(alembic_config(database_url), revision)
