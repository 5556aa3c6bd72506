"""Write an evaluation's results: ``results.json`` (everything) and ``results.md`` (tables)."""

from __future__ import annotations

import json
from pathlib import Path

from cuset_core.evaluation.runner import EvalReport

RESULTS_JSON = "results.json"
RESULTS_MD = "results.md"


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render_markdown(report: EvalReport) -> str:
    """Markdown summary: run settings, metrics, failures by verdict, one row per problem."""
    config, agg = report.config, report.aggregate
    source = f"model `{config.model}`" if config.model else f"answers `{config.answers}`"
    lines = [
        "# Evaluation results",
        "",
        f"{source} on `{config.problems}`: {agg.problems} problems, {agg.samples} samples, "
        f"tier `{agg.tier.value}`"
        + (f", K={config.samples}, temperature {config.temperature}, prompt `{config.prompt_style}`"
           if config.model else "")
        + f", {report.elapsed_s:.1f} s.",
        "",
        "| metric | value |",
        "|---|---|",
    ]
    lines += [f"| {name} | {value:.3f} |" for name, value in agg.metrics.items()]
    lines += [f"| fast_{p} | {value:.3f} |" for p, value in agg.fast_p.items()]
    lines += ["", "| verdict | samples |", "|---|---|"]
    lines += [f"| {verdict} | {count} |" for verdict, count in agg.verdicts.items()]
    lines += [
        "",
        "| problem | n | compiled | cpu_correct | correct | best speedup | verdicts |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in report.problems:
        verdicts = ", ".join(f"{v} {c}" for v, c in row.verdicts.items()) or "-"
        lines.append(
            f"| {row.id} | {row.n} | {row.compiled} | {row.cpu_correct} | {row.correct} | "
            f"{_fmt(row.best_speedup, 2)} | {verdicts} |"
        )
    return "\n".join(lines) + "\n"


def write_results(report: EvalReport, out_dir: Path) -> tuple[Path, Path]:
    """Write ``results.json`` and ``results.md`` into ``out_dir`` (created); return both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / RESULTS_JSON, out_dir / RESULTS_MD
    json_path.write_text(json.dumps(report.model_dump(mode="json"), indent=1) + "\n")
    md_path.write_text(render_markdown(report))
    return json_path, md_path
