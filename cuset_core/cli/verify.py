"""`cuset` commands for verify (placeholder: filled by its owner)."""

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to the `cuset` app."""
