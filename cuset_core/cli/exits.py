"""The exit codes of every ``cuset`` command (``cuset --help`` lists them)."""

EXIT_INPUT = 1  # the input has problems: rows with errors, a verdict other than pass, a failed run
EXIT_USAGE = 2  # bad usage or a missing file (typer's own usage errors exit 2 too)
