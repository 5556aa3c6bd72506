"""The `cuset` command line. Each module here registers the commands of one domain."""

import typer

from cuset_core.cli import analyze, data, demo, evaluate, train, verify

app = typer.Typer(
    name="cuset",
    help="CuSeT: CUDA-Sensitive Instruction Tuning for kernel-writing code LLMs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
for module in (data, analyze, train, verify, evaluate, demo):
    module.register(app)


def main() -> None:
    """Console-script entry point."""
    app()
