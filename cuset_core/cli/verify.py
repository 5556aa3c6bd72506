"""`cuset verify PROBLEM CANDIDATE`: run the verification tiers on one candidate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from cuset_core.verify.result import Tier, VerifyResult
from cuset_core.verify.run import verify as run_verify
from cuset_core.verify.settings import VerifySettings

PROBLEM_HELP = "KernelBench problem: Python with Model, get_inputs, get_init_inputs."
CANDIDATE_HELP = "A model's raw answer, a Python file with ModelNew + load_inline, or a .cu extension."
TIER_HELP = "Last tier to run: static, compile (nvcc), cpu (CUDA-on-CPU runtime) or gpu."


def register(app: typer.Typer) -> None:
    """Add the `verify` command to the `cuset` app."""
    app.command("verify")(verify)


def verify(
    problem: Path = typer.Argument(..., help=PROBLEM_HELP),
    candidate: Path = typer.Argument(..., help=CANDIDATE_HELP),
    tier: Tier = typer.Option(Tier.CPU.value, "--tier", help=TIER_HELP),
    arch: str = typer.Option("sm_90", "--arch", help="nvcc target of the compile tier, e.g. sm_80."),
    strict: bool = typer.Option(False, "--strict", help="Compile against the real torch headers (slow)."),
    policy: str = typer.Option(
        "kernels",
        "--policy",
        help="Tier 2's data-flow policy: kernels (only the candidate's kernels compute during forward) or mixed "
        "(torch may compute on the device too, KernelBench's rule).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as one JSON object."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Neither read nor write the result cache."),
) -> None:
    """Verify CANDIDATE against PROBLEM. Exits 0 on pass, 1 on any other verdict, 2 on bad usage."""
    problem_code = _read(problem, "PROBLEM")
    answer = _read(candidate, "CANDIDATE")
    try:
        settings = VerifySettings(tier=tier, arch=arch, strict_headers=strict, policy=policy)
    except ValidationError as exc:
        error = exc.errors()[0]
        _usage_error(f"--{error['loc'][0]}: {error['msg']} (got {error['input']!r})")
    result = _verify_with_progress(problem_code, answer, settings, not no_cache, Console(stderr=True))
    if as_json:
        typer.echo(json.dumps(result.model_dump(mode="json"), indent=2))
    else:
        _print_human(result, candidate)
    raise typer.Exit(0 if result.passed else 1)


def _verify_with_progress(
    problem_code: str, answer: str, settings: VerifySettings, use_cache: bool, console: Console
) -> VerifyResult:
    """The verdict, with a bar on stderr over the tiers up to ``settings.tier`` (tier 2 takes
    seconds to a minute) naming the tier that runs and the time so far."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    # Only on a terminal: a log or a pipe gets the verdict alone.
    with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task("verifying", total=settings.tier.rank + 1)

        def started(tier: Tier) -> None:
            bar.update(task, completed=tier.rank, description=f"tier {tier.value}")

        return run_verify(problem_code, answer, settings, use_cache=use_cache, on_tier=started)


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        _usage_error(f"{what} {path}: cannot read it ({exc.__class__.__name__}: {exc})")


def _usage_error(message: str) -> NoReturn:
    typer.echo(f"Error: {message}", err=True)
    raise typer.Exit(2)


def _print_human(result: VerifyResult, candidate: Path) -> None:
    console = Console(highlight=False)
    colour = "green" if result.passed else "red"
    cached = " (cached)" if result.cached else ""
    console.print(f"[bold {colour}]{result.verdict.value}[/] at tier {result.tier.value}{cached}: {result.reason}")
    if result.unsupported_feature:
        console.print(f"unsupported feature: {result.unsupported_feature}")
    for d in result.diagnostics:
        where = f"{candidate}:{d.line}" + (f":{d.column}" if d.column else "") if d.line else f"{candidate}"
        console.print(f"{where}: {d.severity}: {d.message}", markup=False)
    if result.max_abs_diff is not None:
        console.print(
            f"max abs diff {result.max_abs_diff:.3g}, mean abs diff {result.mean_abs_diff or 0:.3g}, "
            f"{result.trials} trials"
        )
    if result.sizes_run:
        console.print(sizes_line(result), markup=False)
    if result.launches:
        console.print("launches: " + ", ".join(f"{k} x{v}" for k, v in result.launches.items()), markup=False)
    if result.policy:
        would = {True: " (passes under mixed)", False: " (fails under mixed too)", None: ""}[result.mixed_pass]
        console.print(f"policy: {result.policy}{would}", markup=False)
    if result.speedup is not None:
        console.print(
            f"{result.runtime_ms:.3f} ms vs eager {result.reference_ms:.3f} ms: speedup {result.speedup:.2f}x"
        )
    if result.resources:
        console.print(_resource_table(result))
    timings = ", ".join(f"{stage} {seconds:.2f} s" for stage, seconds in result.timings_s.items())
    console.print(f"tiers run: {', '.join(t.value for t in result.tiers_run)}; {timings}")
    if result.log and not result.passed:
        console.print("log (tail):", markup=False)
        console.print(result.log[-2000:], markup=False)


def sizes_line(result: VerifyResult) -> str:
    """``sizes run: dim=4096 (of 131072): inputs (16, 4096); ...; original sizes not run``: each size
    tier 2's trials ran at, its inputs' shapes (each distinct set once), and whether the original ran."""
    runs = []
    for run in result.sizes_run:
        named = ", ".join(f"{name}={run.sizes[name]} (of {original})" for name, original in run.shrunk.items())
        shapes = {" ".join(str(tuple(shape)) for shape in trial): None for trial in run.input_shapes}
        runs.append(f"{named or 'original sizes'}: inputs {'; '.join(shapes) or 'none'}")
    ran = "original sizes run" if result.original_sizes_run else "original sizes not run"
    return f"sizes run: {' | '.join(runs)}; {ran}"


def _resource_table(result: VerifyResult) -> Table:
    table = Table("kernel", "regs", "smem B", "cmem B", "stack B", "spill st/ld B")
    table.columns[0].min_width = min(40, max(len(_short_kernel_name(r.kernel)) for r in result.resources))
    for r in result.resources:
        numbers = (r.registers, r.shared_bytes, r.constant_bytes, r.stack_bytes)
        spills = f"{r.spill_store_bytes}/{r.spill_load_bytes}"
        table.add_row(_short_kernel_name(r.kernel), *map(str, numbers), spills)
    return table


def _short_kernel_name(demangled: str) -> str:
    """``void scale<float>(float*, int)`` -> ``scale<float>``: the table has no room for signatures."""
    head = demangled.split("(")[0]
    return head.removeprefix("void ").strip() or demangled
