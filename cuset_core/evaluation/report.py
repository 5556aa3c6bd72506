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
    """Markdown summary: run settings, the greedy block, the pass@k block, verdicts of each,
    one row per problem. Columns stop at the tier the run reached (no "correct" below GPU)."""
    config, agg = report.config, report.aggregate
    source = f"model `{config.model}`" if config.model else f"answers `{config.answers}`"
    drawn = ""
    if config.model:
        drawn = (
            f", {'a greedy sample + ' if config.greedy else ''}{config.samples} i.i.d. samples per problem "
            f"at temperature {config.temperature} (top-p {config.top_p}), prompt `{config.prompt_style}`"
        )
    lines = [
        "# Evaluation results",
        "",
        f"{source} on `{config.problems}`: {agg.problems} problems, {agg.samples} samples, "
        f"tier `{agg.tier.value}`{drawn}, {report.elapsed_s:.1f} s."
        + (
            f" {agg.internal_errors} samples hit a verifier fault (`internal_error`) and are left out of every metric."
            if agg.internal_errors
            else ""
        ),
        "",
        "## Greedy: one greedy sample per problem, drawn apart",
        "",
    ]
    if agg.greedy is None:
        lines.append("No greedy sample was scored.")
    else:
        lines += [
            f"Share of {agg.greedy.problems} problems whose greedy sample passed.",
            "",
            "| metric | value |",
            "|---|---|",
        ]
        lines += [f"| {name} | {value:.3f} |" for name, value in agg.greedy.metrics.items()]
    lines += ["", "## pass@k: i.i.d. samples at one temperature (unbiased estimator, Chen et al. 2021)", ""]
    if agg.sampled is None:
        lines.append("No i.i.d. sample was scored.")
    else:
        lines += [
            f"{agg.sampled.samples} samples over {agg.sampled.problems} problems, k = "
            f"{', '.join(map(str, agg.sampled.k_values))}; no greedy sample among them.",
            "",
            "| metric | value |",
            "|---|---|",
        ]
        lines += [f"| {name} | {value:.3f} |" for name, value in agg.sampled.metrics.items()]
        lines += [f"| fast_{p} | {value:.3f} |" for p, value in agg.sampled.fast_p.items()]
    greedy_verdicts = agg.greedy.verdicts if agg.greedy else {}
    sampled_verdicts = agg.sampled.verdicts if agg.sampled else {}
    lines += ["", "## Verdicts", "", "| verdict | greedy | i.i.d. |", "|---|---|---|"]
    lines += [
        f"| {verdict} | {greedy_verdicts.get(verdict, 0)} | {sampled_verdicts.get(verdict, 0)} |"
        for verdict in agg.verdicts
    ]
    columns = [(name, field) for name, (tier, field) in METRIC_TIERS.items() if tier.rank <= agg.tier.rank]
    gpu = agg.tier is Tier.GPU
    header = [
        "problem",
        "greedy",
        "n",
        *(field for _, field in columns),
        *(["best speedup"] if gpu else []),
        "verdicts (i.i.d.)",
    ]
    lines += ["", "## Problems", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in report.problems:
        greedy = ", ".join(row.greedy.verdicts) if row.greedy else "-"
        cells = [row.id, greedy, str(row.n), *(str(getattr(row, field)) for _, field in columns)]
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
