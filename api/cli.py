"""The service's commands in the `cuset` CLI (placeholder: filled by its owner)."""

import typer


def register(app: typer.Typer) -> None:
    """Add the service's commands to ``app``."""
