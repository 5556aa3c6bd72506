"""`cuset keys create|list|revoke`: manage the service's API keys in its database."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table
from sqlalchemy import inspect, make_url

from api.cli import DataDirOption, service_settings
from db import keys
from db.migrate import upgrade
from db.models import ApiKey
from db.session import engine_for, session_scope
from db.settings import Settings

keys_app = typer.Typer(
    help="Create, list and revoke API keys (stored hashed; a key is shown once).", no_args_is_help=True
)


def _database_url(settings: Settings) -> str:
    """The database, made and migrated when missing (``create``: a fresh embedded data dir has none)."""
    url = settings.resolved_database_url
    upgrade(url)
    return url


def _existing_database_url(settings: Settings) -> str | None:
    """The database when it holds the service's keys table; None (and nothing made) when the
    service has no database yet, so that reading never creates one."""
    url = settings.resolved_database_url
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and (not parsed.database or not Path(parsed.database).is_file()):
        return None
    engine = engine_for(url)
    return url if inspect(engine).has_table(ApiKey.__tablename__) else None


def _no_database(settings: Settings) -> str:
    return (
        f"no API keys: the service has no database yet ({settings.resolved_database_url}); "
        "`cuset serve` or `cuset keys create` makes it"
    )


def _utc(timestamp: float) -> str:
    """A stored Unix time as ``2026-01-31 14:05 UTC``."""
    return datetime.fromtimestamp(timestamp, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


@keys_app.command("create")
def create(
    name: str = typer.Option(..., "--name", help="a label for the key"),
    owner: str | None = typer.Option(None, help="whose data the key reaches (default: the name)"),
    data_dir: DataDirOption = None,
) -> None:
    """Create a key and print it once; only its hash is stored."""
    with session_scope(_database_url(service_settings(data_dir))) as session:
        new = keys.create_key(session, name, owner)
    typer.echo(new.secret)
    typer.echo(f"key {new.row.id} for owner '{new.row.owner}': store it now, it is not shown again.", err=True)


@keys_app.command("list")
def list_keys(data_dir: DataDirOption = None) -> None:
    """Every key: id, owner, name, display prefix, created, and active or revoked (when), in UTC."""
    settings = service_settings(data_dir)
    url = _existing_database_url(settings)
    if url is None:
        typer.echo(_no_database(settings), err=True)
        return
    with session_scope(url) as session:
        rows = keys.list_keys(session)
    table = Table("id", "owner", "name", "prefix", "created", "state")
    for row in rows:
        state = f"revoked {_utc(row.revoked_at)}" if row.revoked_at else "active"
        table.add_row(row.id, row.owner, row.name, row.prefix + "…", _utc(row.created_at), state)
    Console().print(table)


@keys_app.command("revoke")
def revoke(
    key: str = typer.Argument(..., help="the key's id or display prefix"), data_dir: DataDirOption = None
) -> None:
    """Revoke a key: requests with it get 401 from now on (within a few seconds)."""
    settings = service_settings(data_dir)
    url = _existing_database_url(settings)
    if url is None:
        typer.echo(_no_database(settings), err=True)
        raise typer.Exit(1)
    with session_scope(url) as session:
        row = keys.revoke_key(session, key)
    if row is None:
        typer.echo(f"no active key with id or prefix '{key}'", err=True)
        raise typer.Exit(1)
    typer.echo(f"revoked {row.id} ({row.name})")


def register(app: typer.Typer) -> None:
    """Add `cuset keys` to the CLI."""
    app.add_typer(keys_app, name="keys")
