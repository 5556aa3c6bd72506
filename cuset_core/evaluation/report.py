"""Write an evaluation's results: ``results.json`` (everything) and ``results.md`` (tables)."""

from __future__ import annotations

import json
from pathlib import Path

from cuset_core.evaluation.metrics import METRIC_TIERS
from cuset_core.evaluation.runner import EvalReport
from cuset_core.verify.result import Tier

RESULTS_JSON = "results.json"
RESULTS_MD = "results.md"


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render_markdown(report: EvalReport) -> str:
    """Markdown summary: run settings, metrics, failures by verdict, one row per problem.

    Per-problem columns stop at the tier the run reached (no "correct" column below GPU).
    """
    config, agg = report.config, report.aggregate
    source = f"model `{config.model}`" if config.model else f"answers `{config.answers}`"
    lines = [
        "# Evaluation results",
        "",
        f"{source} on `{config.problems}`: {agg.problems} problems, {agg.samples} samples, "
        f"tier `{agg.tier.value}`"
        + (f", K={config.samples}, temperature {config.temperature}, prompt `{config.prompt_style}`"
           if config.model else "")
        + f", {report.elapsed_s:.1f} s."
        + (f" {agg.internal_errors} samples hit a verifier fault (`internal_error`) and are left out of every "
           "metric." if agg.internal_errors else ""),
        "",
        "| metric | value |",
        "|---|---|",
    ]
    lines += [f"| {name} | {value:.3f} |" for name, value in agg.metrics.items()]
    lines += [f"| fast_{p} | {value:.3f} |" for p, value in agg.fast_p.items()]
    lines += ["", "| verdict | samples |", "|---|---|"]
    lines += [f"| {verdict} | {count} |" for verdict, count in agg.verdicts.items()]
    columns = [(name, field) for name, (tier, field) in METRIC_TIERS.items() if tier.rank <= agg.tier.rank]
    gpu = agg.tier is Tier.GPU
    header = ["problem", "n", *(field for _, field in columns), *(["best speedup"] if gpu else []), "verdicts"]
    lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in report.problems:
        cells = [row.id, str(row.n), *(str(getattr(row, field)) for _, field in columns)]
        if gpu:
            cells.append(_fmt(row.best_speedup, 2))
        cells.append(", ".join(f"{v} {c}" for v, c in row.verdicts.items()) or "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_results(report: EvalReport, out_dir: Path) -> tuple[Path, Path]:
    """Write ``results.json`` and ``results.md`` into ``out_dir`` (created); return both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / RESULTS_JSON, out_dir / RESULTS_MD
    json_path.write_text(json.dumps(report.model_dump(mode="json"), indent=1) + "\n")
    md_path.write_text(render_markdown(report))
    return json_path, md_path
