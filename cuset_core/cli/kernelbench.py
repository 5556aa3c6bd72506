"""`cuset kernelbench check PATH`: which problems of a KernelBench checkout tier 2 can verify."""

from __future__ import annotations

from pathlib import Path

import typer

from cuset_core.verify.result import Verdict


def register(app: typer.Typer) -> None:
    """Add the `kernelbench` commands to the `cuset` app."""
    group = typer.Typer(help="Work with a KernelBench checkout.", no_args_is_help=True)
    group.command("check")(check)
    app.add_typer(group, name="kernelbench")


def check(
    path: Path = typer.Argument(..., help="A KernelBench checkout, its KernelBench/ folder or one levelN/ folder."),
    levels: str = typer.Option("1,2,3", "--levels", help="Comma-separated levels to check."),
    workers: int = typer.Option(2, "--workers", min=1, help="Problems checked at once (one sandbox each)."),
    out: Path = typer.Option(Path("kernelbench-check"), "--out", help="Folder of the report (JSON and Markdown)."),
    max_elements: int = typer.Option(1 << 18, "--max-elements", min=1, help="Tier 2's size budget (elements)."),
) -> None:
    """Run every problem's reference as tier 2 does (sizes reduced, in the sandbox) and report the
    problems whose kernels it cannot verify, with the reason. Exits 0 when every problem either
    runs or is unsupported on a CPU, 1 when a problem's own code fails, 2 on bad usage."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from cuset_core.evaluation.inputs import EvalInputError
    from cuset_core.evaluation.kernelbench_check import check_checkout, level_folders, problem_files, write_report
    from cuset_core.verify.result import Tier
    from cuset_core.verify.settings import VerifySettings

    try:
        wanted = [int(level) for level in levels.split(",") if level.strip()]
        total = sum(len(problem_files(folder)) for folder in level_folders(path, wanted).values())
    except (ValueError, EvalInputError) as exc:
        typer.echo(f"error: {exc}" if isinstance(exc, EvalInputError) else f"error: --levels: {levels!r}", err=True)
        raise typer.Exit(2) from None
    settings = VerifySettings(tier=Tier.CPU, max_elements=max_elements)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, transient=True) as progress:
        task = progress.add_task("problems", total=total)
        checks = check_checkout(
            path, settings, levels=wanted, workers=workers, done=lambda check: progress.advance(task)
        )
    data, markdown = write_report(checks, out)
    verifiable = sum(check.verdict is Verdict.PASS for check in checks)
    failing = [check for check in checks if check.verdict not in (Verdict.PASS, Verdict.UNSUPPORTED)]
    typer.echo(f"{verifiable} of {len(checks)} problems verifiable at tier 2; report: {markdown} ({data.name})")
    for check in checks:
        if check.verdict is not Verdict.PASS:
            typer.echo(f"  level {check.level} {check.problem}: {check.verdict.value}: {check.reason[:160]}")
    raise typer.Exit(1 if failing else 0)
