"""Alembic migrations: the only source of the database schema."""
