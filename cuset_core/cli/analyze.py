"""`cuset analyze`: the sensitive spans and regions of one answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from cuset_core.cli.exits import EXIT_USAGE

ANSWER_SUFFIXES = (".py", ".cu", ".cuh", ".md", ".txt")


def fail(message: str) -> typer.Exit:
    """Print one error line to stderr and return the Exit to raise."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(EXIT_USAGE)


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
            str(region.id),
            str(region.start),
            str(region.end),
            region.kind,
            region.category.value,
            ",".join(map(str, region.span_indices)),
            _shown(answer[region.start : region.end]),
        )
    console.print(spans)
    console.print(regions)


def register(app: typer.Typer) -> None:
    """Add the `analyze` command to the `cuset` app."""
    app.command("analyze")(analyze)


def _shown(text: str, limit: int = 120) -> Text:
    """Code as plain text (square brackets are not markup), newlines shown as ⏎."""
    flat = text.replace("\n", "⏎")
    return Text(flat if len(flat) <= limit else flat[: limit - 1] + "…")
