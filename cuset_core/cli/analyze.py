"""`cuset analyze` (sensitive spans and regions of one answer) and `cuset confidence-report`."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated, get_args

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from cuset_core.generation.prompts import PromptStyle as PromptStyleName

EXIT_BAD_USAGE = 2
ANSWER_SUFFIXES = (".py", ".cu", ".cuh", ".md", ".txt")

PromptStyle = Enum("PromptStyle", {name: name for name in get_args(PromptStyleName)}, type=str)


def fail(message: str) -> typer.Exit:
    """Print one error line to stderr and return the Exit to raise."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(EXIT_BAD_USAGE)


def analyze(
    file: Annotated[Path, typer.Argument(help="An answer: .py (load_inline), .cu, or raw .md/.txt.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the stable JSON form.")] = False,
) -> None:
    """Print the CUDA-sensitive spans and regions of an answer."""
    from cuset_core.analysis.analyze import analyze_answer

    if not file.is_file():
        raise fail(f"FILE: not found: {file}")
    if file.suffix.lower() not in ANSWER_SUFFIXES:
        raise fail(f"FILE: expected one of {', '.join(ANSWER_SUFFIXES)}, got {file.name}")
    try:
        answer = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise fail(f"FILE: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    analysis = analyze_answer(answer)
    if as_json:
        typer.echo(json.dumps(analysis.to_json(), indent=2))
        return
    console = Console()
    console.print(
        f"[bold]{file.name}[/]: {analysis.language}, {analysis.cuda_chars} CUDA/C++ characters, "
        f"parse coverage {analysis.parse_coverage:.3f}, {len(analysis.spans)} spans, "
        f"{len(analysis.regions)} regions"
    )
    spans = Table("#", "start", "end", "category", "text", title="Sensitive spans")
    for index, span in enumerate(analysis.spans):
        spans.add_row(str(index), str(span.start), str(span.end), span.category.value, _shown(span.text))
    regions = Table("id", "start", "end", "kind", "category", "spans", "text", title="Regions")
    for region in analysis.regions:
        regions.add_row(
            str(region.id), str(region.start), str(region.end), region.kind, region.category.value,
            ",".join(map(str, region.span_indices)), _shown(answer[region.start : region.end]),
        )
    console.print(spans)
    console.print(regions)


def confidence_report(
    data: Annotated[Path, typer.Option(help="Records: chat or KernelBench JSONL/parquet.")],
    out: Annotated[Path, typer.Option(help="Folder for report.json, report.md and confidence.png.")],
    model: Annotated[str, typer.Option(help="smollm2-135m, a .gguf file or a model folder.")] = "smollm2-135m",
    limit: Annotated[int, typer.Option(min=1, help="Records to analyse (the first N kept).")] = 32,
    prompt_style: Annotated[PromptStyle, typer.Option(help="Prompt format.")] = PromptStyle.kernelbench,
    max_tokens: Annotated[int, typer.Option(min=8, help="Truncate records to this many tokens.")] = 4096,
) -> None:
    """Per-category confidence of a model on CUDA-sensitive tokens, and its least confident regions."""
    from cuset_core.analysis.confidence import ReportSettings, run_report, write_report
    from cuset_core.data import DataFileError, LoadOptions, load_records
    from cuset_core.models import ModelNotFoundError, inference_dtype, load_model, place_for_inference, resolve_model

    try:
        settings = ReportSettings(
            model=model, data=data, out=out, limit=limit, prompt_style=prompt_style.value,
            max_tokens=max_tokens,
        )
    except ValidationError as exc:
        error = exc.errors()[0]
        raise fail(f"{'.'.join(map(str, error['loc']))}: {error['msg']}") from None
    if not data.is_file():
        raise fail(f"--data: file not found: {data}")
    try:
        resolve_model(model)
    except ModelNotFoundError as exc:
        raise fail(f"--model: {exc}") from None
    try:
        loaded = load_records(data, LoadOptions(prompt_style=settings.prompt_style, require_kernel=True))
    except DataFileError as exc:
        raise fail(f"--data: {exc}") from None
    records = loaded.records[: settings.limit]
    if not records:
        codes = ", ".join(f"{code} x{count}" for code, count in loaded.counts().items()) or "none"
        raise fail(
            f"--data: no usable records with a CUDA kernel in {data} ({loaded.total} rows; issues: {codes})"
        )

    console = Console(stderr=True)
    console.print(f"loading {model} ...")
    network, tokenizer = load_model(model, inference_dtype())
    network = place_for_inference(network)
    with Progress(
        TextColumn("confidence"), BarColumn(), MofNCompleteColumn(), console=console, transient=True
    ) as progress:
        task = progress.add_task("records", total=len(records))
        summary = run_report(
            settings, network, tokenizer, records,
            progress=lambda done: progress.update(task, completed=done),
        )
    paths = write_report(summary, out)
    groups = summary["groups"]
    typer.echo(
        f"{summary['records']} records, {summary['tokens']['sensitive']} sensitive of "
        f"{summary['tokens']['supervised']} tokens; mean p sensitive "
        f"{_number(groups['sensitive']['mean_p'])}, "
        f"non-sensitive {_number(groups['non_sensitive']['mean_p'])}; "
        f"low-confidence regions {summary['regions']['low_confidence']}/{summary['regions']['count']}"
    )
    typer.echo("wrote " + ", ".join(str(path) for path in paths))


def register(app: typer.Typer) -> None:
    """Add this module's commands to the `cuset` app."""
    app.command("analyze")(analyze)
    app.command("confidence-report")(confidence_report)


def _shown(text: str, limit: int = 120) -> Text:
    """Code as plain text (square brackets are not markup), newlines shown as ⏎."""
    flat = text.replace("\n", "⏎")
    return Text(flat if len(flat) <= limit else flat[: limit - 1] + "…")


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"
