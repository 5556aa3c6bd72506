"""The `cuset` command line. Each module here registers the commands of one domain."""

from importlib.metadata import entry_points

import typer

from cuset_core.cli import analyze, data, demo, evaluate, improve, install, kernelbench, train, verify

app = typer.Typer(
    name="cuset",
    help="CuSeT: CUDA-Sensitive Instruction Tuning for kernel-writing code LLMs.",
    epilog="Exit codes: 0 done (a verification passed); 1 the input has problems (rows with errors, a "
    "verdict other than pass, a failed run); 2 bad usage or a missing file.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
for module in (data, analyze, train, verify, evaluate, kernelbench, demo, improve, install):
    module.register(app)
# Packages built on the core (the service's `cuset serve`, `cuset keys`) add their commands
# through this entry point group, so cuset_core never imports them.
for plugin in entry_points(group="cuset.cli"):
    plugin.load()(app)


def main() -> None:
    """Console-script entry point."""
    import os
    import sys

    if not sys.stdout.isatty():
        # Help piped or captured is laid out for 80 columns (or a COLUMNS a parent process left) and
        # cuts option names and texts short; nothing wraps it there, so give it room.
        columns = os.environ.get("COLUMNS", "")
        os.environ["COLUMNS"] = str(max(int(columns) if columns.isdigit() else 0, 160))
    app()
