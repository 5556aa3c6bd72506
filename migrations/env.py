"""Alembic environment: migrate the database named by the service settings (or by the
connection a caller passes in ``config.attributes["connection"]``)."""

from __future__ import annotations

from alembic import context

from db.models import Base
from db.session import engine_for
from db.settings import get_settings

config = context.config
target_metadata = Base.metadata


def _run(connection) -> None:
    # SQLite cannot ALTER most things in place; batch mode rebuilds tables instead.
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.get_main_option("sqlalchemy.url") or get_settings().resolved_database_url
    with engine_for(url).connect() as connection:
        _run(connection)
        connection.commit()


if context.is_offline_mode():
    raise SystemExit("offline (SQL script) migrations are not supported; run against a database")
run_migrations_online()
