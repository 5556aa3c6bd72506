"""The schema comes only from Alembic migrations, and they agree with the SQLAlchemy models."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from db.migrate import upgrade
from db.models import Base
from db.session import engine_for


def _differences(engine) -> list:
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        return compare_metadata(context, Base.metadata)


def test_migrated_postgres_matches_the_models(database_url):
    assert _differences(engine_for(database_url)) == []


def test_migrations_build_the_same_schema_on_sqlite_and_downgrade_cleanly(tmp_path):
    url = f"sqlite:///{tmp_path / 'schema.sqlite'}"
    upgrade(url)
    engine = create_engine(url)
    assert _differences(engine) == []
    assert set(inspect(engine).get_table_names()) >= {t.name for t in Base.metadata.sorted_tables}

    from alembic import command

    from db.migrate import alembic_config

    command.downgrade(alembic_config(url), "base")
    assert set(inspect(create_engine(url)).get_table_names()) <= {"alembic_version"}
    upgrade(url)
    assert _differences(create_engine(url)) == []
