"""`cuset data validate`, `cuset data split` and `cuset data pool`: check a dataset, split it by
group, write a problem pool."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.table import Table

from cuset_core.cli.exits import EXIT_INPUT, EXIT_USAGE
from cuset_core.data import (
    DataFileMissingError,
    LoadOptions,
    LoadResult,
    Record,
    group_of,
    load_records,
    split_by_group,
)
from cuset_core.generation.prompts import PromptStyle

FILE_HELP = "JSONL (chat messages, prompt/completion, question/answer) or parquet table."
STYLE_HELP = "kernelbench keeps prompts as given; compact rebuilds them from the problem code."
KEEP_HELP = "Keep answers without a __global__ kernel (reported as warnings)."


def register(app: typer.Typer) -> None:
    """Add the `data` command group to the `cuset` app."""
    data_app = typer.Typer(help="Validate and split training datasets.", no_args_is_help=True)
    data_app.command("validate")(validate)
    data_app.command("split")(split)
    data_app.command("pool")(pool)
    data_app.command("demo")(demo)
    app.add_typer(data_app, name="data")


def validate(
    file: Path = typer.Argument(..., help=FILE_HELP),
    prompt_style: PromptStyle = typer.Option("kernelbench", "--prompt-style", help=STYLE_HELP),
    keep_non_kernel: bool = typer.Option(False, "--keep-non-kernel", help=KEEP_HELP),
    max_tokens: int | None = typer.Option(
        None, "--max-tokens", min=1, help="Drop records longer than this (needs --model)."
    ),
    model: str = typer.Option("smollm2-135m", "--model", help="Tokenizer for --max-tokens."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead."),
    show: int = typer.Option(50, "--show", min=0, help="Issues listed in the table."),
    problems: bool = typer.Option(
        False,
        "--problems",
        help='FILE is a problem-only dataset: JSONL rows {"id", "problem"} or a folder of KernelBench .py problems.',
    ),
) -> None:
    """Check every row; print a summary and the issues. Exits 1 if any row has an error."""
    if problems:
        _validate_problems(file, as_json)
    result = _load(file, prompt_style, keep_non_kernel, max_tokens, model)
    if as_json:
        typer.echo(
            json.dumps(_summary(result) | {"issues": [issue.model_dump(mode="json") for issue in result.issues]})
        )
    else:
        console = Console()
        console.print(_summary_line(file, result))
        if result.issues and show:
            console.print(_issue_table(result, show))
    raise typer.Exit(1 if result.errors else 0)


def split(
    file: Path = typer.Argument(..., help=FILE_HELP),
    out: Path = typer.Option(..., "--out", help="Folder for train.jsonl, val.jsonl, split.json."),
    val_fraction: float = typer.Option(0.15, "--val-fraction", min=0.0, max=0.99),
    seed: int = typer.Option(0, "--seed"),
    prompt_style: PromptStyle = typer.Option("kernelbench", "--prompt-style", help=STYLE_HELP),
    keep_non_kernel: bool = typer.Option(False, "--keep-non-kernel", help=KEEP_HELP),
) -> None:
    """Split the valid records by group into train/val chat-format JSONL files."""
    result = _load(file, prompt_style, keep_non_kernel, None, "")
    if not result.records:
        _fail(f"{file}: no valid records to split ({len(result.errors)} errors; run `cuset data validate` for details)")
    train, val = split_by_group(result.records, val_fraction, seed)
    out.mkdir(parents=True, exist_ok=True)
    _write_jsonl(out / "train.jsonl", train)
    _write_jsonl(out / "val.jsonl", val)
    manifest = {
        "source": file.name,
        "val_fraction": val_fraction,
        "seed": seed,
        "prompt_style": prompt_style,
        "dropped": result.total - len(result.records),
        "train": _side(train),
        "val": _side(val),
    }
    (out / "split.json").write_text(json.dumps(manifest, indent=2) + "\n")
    typer.echo(
        f"train: {len(train)} records in {manifest['train']['n_groups']} groups; "
        f"val: {len(val)} records in {manifest['val']['n_groups']} groups; "
        f"dropped {manifest['dropped']} of {result.total} rows -> {out}"
    )


def _validate_problems(source: Path, as_json: bool) -> NoReturn:
    """Every problem of a problem-only dataset checked (class Model, get_inputs, get_init_inputs)."""
    from cuset_core.evaluation.inputs import EvalInputError
    from cuset_core.evaluation.problem_check import problem_issues
    from cuset_core.evaluation.problems import load_problems

    try:
        problems = load_problems(str(source))
    except EvalInputError as exc:
        _fail(str(exc))
    issues = [(p.id, issue) for p in problems for issue in problem_issues(p.code)]
    if as_json:
        rows = [{"id": pid, "line": issue.line, "message": issue.message} for pid, issue in issues]
        typer.echo(json.dumps({"problems": len(problems), "invalid": len({pid for pid, _ in issues}), "issues": rows}))
    else:
        bad = len({pid for pid, _ in issues})
        typer.echo(f"{source}: {len(problems)} problems, {len(problems) - bad} valid, {bad} with errors")
        for pid, issue in issues:
            typer.echo(f"  {pid}: {issue}")
    raise typer.Exit(1 if issues else 0)


def pool(
    out: Path = typer.Option(..., "--out", help='JSONL file of {"id", "problem"} rows (a problem-only dataset).'),
    count: int = typer.Option(96, "--count", min=1, max=2000, help="Problems to draw."),
    seed: int = typer.Option(0, "--seed", help="The same seed gives the same pool."),
) -> None:
    """Write distinct elementwise problems in KernelBench's format, none of them an operation the
    elementwise experiment holds out (cuset_core/data/elementwise_pool.py)."""
    from cuset_core.data.elementwise_pool import elementwise_pool

    problems = elementwise_pool(count, seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps({"id": p.id, "problem": p.problem}) + "\n" for p in problems))
    typer.echo(f"wrote {len(problems)} problems to {out}")


def demo(
    out: Path = typer.Option(..., "--out", help="JSONL file of chat records, one per demo problem."),
    include_held_out: bool = typer.Option(
        False, "--include-held-out", help="Also the held-out problems (leave them out to evaluate on them)."
    ),
) -> None:
    """Write the bundled demo dataset (the problems and their verified solutions) as a training file."""
    from cuset_core.demo import HELD_OUT, write_demo_dataset

    out.parent.mkdir(parents=True, exist_ok=True)
    written = write_demo_dataset(out, held_out=() if include_held_out else HELD_OUT)
    left_out = "" if include_held_out else f" (held out: {', '.join(HELD_OUT)})"
    typer.echo(f"wrote {written} records to {out}{left_out}")


def _load(file: Path, prompt_style: str, keep_non_kernel: bool, max_tokens: int | None, model: str) -> LoadResult:
    from cuset_core.models import ModelNotFoundError

    options = LoadOptions(prompt_style=prompt_style, require_kernel=not keep_non_kernel, max_tokens=max_tokens)
    tokenizer = None
    try:
        if max_tokens is not None:
            from cuset_core.models import load_tokenizer

            tokenizer = load_tokenizer(model)
        return load_records(file, options, tokenizer)
    except ModelNotFoundError as error:
        _fail(f"--model: {error}", EXIT_USAGE)
    except DataFileMissingError as error:
        _fail(str(error), EXIT_USAGE)
    except ValueError as error:  # DataFileError: a file this command cannot read as a dataset
        _fail(str(error))


def _fail(message: str, code: int = EXIT_INPUT) -> NoReturn:
    """One ``error:`` line on stderr, then exit with ``code`` (the CLI's exit codes: ``cuset --help``)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _summary(result: LoadResult) -> dict:
    return {
        "total": result.total,
        "kept": len(result.records),
        "errors": len(result.errors),
        "warnings": len(result.warnings),
        "counts": result.counts(),
    }


def _summary_line(file: Path, result: LoadResult) -> str:
    counts = ", ".join(f"{code} {n}" for code, n in result.counts().items()) or "no issues"
    return (
        f"{file.name}: {result.total} rows, {len(result.records)} kept, "
        f"{len(result.errors)} errors, {len(result.warnings)} warnings ({counts})"
    )


def _issue_table(result: LoadResult, show: int) -> Table:
    title = f"first {show} of {len(result.issues)} issues" if len(result.issues) > show else None
    table = Table(title=title)
    for column in ("line", "field", "code", "severity", "message"):
        table.add_column(column)
    for issue in result.issues[:show]:
        table.add_row(str(issue.line), issue.field, issue.code.value, issue.severity, issue.message)
    return table


def _side(records: list[Record]) -> dict:
    groups = sorted({group_of(record) for record in records})
    return {"n_records": len(records), "n_groups": len(groups), "groups": groups}


def _write_jsonl(path: Path, records: list[Record]) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record.to_chat_row(), ensure_ascii=False) + "\n")
