"""Write an evaluation's results: ``results.json`` (everything) and ``results.md`` (tables), and
for KernelBench problems the same samples in KernelBench's own runs layout."""

from __future__ import annotations

import json
import re
from pathlib import Path

from cuset_core.evaluation.kernelbench_runs import kernelbench_number
from cuset_core.evaluation.metrics import METRIC_TIERS, Aggregate, KernelBenchBlock, RepairedBlock, passed_tier
from cuset_core.evaluation.runner import EvalReport
from cuset_core.evaluation.scoring import SampleRecord
from cuset_core.verify.candidate import parse_candidate
from cuset_core.verify.result import Tier

RESULTS_JSON = "results.json"
RESULTS_MD = "results.md"
KERNELBENCH_RUN = "kernelbench_run"
_LEVEL = re.compile(r"level[_-]?(\d+)", re.IGNORECASE)


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
        f"tier `{agg.tier.value}`{drawn}, {report.elapsed_s:.1f} s. {_verification(report)}"
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
        lines += [f"| fast_{p} (mean over samples) | {value:.3f} |" for p, value in agg.sampled.fast_p.items()]
    if agg.kernelbench is not None:
        lines += ["", *_kernelbench_lines(agg.kernelbench)]
    if agg.repaired is not None:
        lines += ["", *_repaired_lines(agg, agg.repaired)]
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
        *(["best speedup", "scored speedup"] if gpu else []),
        "verdicts (i.i.d.)",
    ]
    lines += ["", "## Problems", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in report.problems:
        greedy = ", ".join(row.greedy.verdicts) if row.greedy else "-"
        cells = [row.id, greedy, str(row.n), *(str(getattr(row, field)) for _, field in columns)]
        if gpu:
            cells += [_fmt(row.best_speedup, 2), _fmt(row.scored.speedup if row.scored else None, 2)]
        cells.append(", ".join(f"{v} {c}" for v, c in row.verdicts.items()) or "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _repaired_lines(agg: Aggregate, repaired: RepairedBlock) -> list[str]:
    """The repair section: each metric plain and within R repairs, side by side."""
    lines = [
        f"## Within {repaired.rounds} repairs: a failing sample sent back with its verifier error",
        "",
        f"{repaired.repairs} repair attempts. A sample passes within {repaired.rounds} repairs when it or one "
        "of its repairs passed; the denominators are the plain ones.",
        "",
        "| block | metric | plain | within repairs |",
        "|---|---|---|---|",
    ]
    for block, plain, within in (("greedy", agg.greedy, repaired.greedy), ("pass@k", agg.sampled, repaired.sampled)):
        if within is not None:
            lines += [
                f"| {block} | {name} | {_fmt(plain.metrics.get(name) if plain else None)} | {value:.3f} |"
                for name, value in within.metrics.items()
            ]
    return lines


def _verification(report: EvalReport) -> str:
    """One sentence: the verification knobs that decide correctness (and speed)."""
    config = report.config
    settings = config.verify_settings()
    tolerance = f"tolerance profile `{config.tolerance_profile}`"
    if config.atol is not None or config.rtol is not None:
        tolerance += f" with atol {settings.tolerance('float32')[0]:g}, rtol {settings.tolerance('float32')[1]:g}"
    compile_baseline = ", torch.compile baseline timed" if config.compile_baseline else ""
    return (
        f"Verification: {config.trials} correctness trials (input seeds {config.input_seed}.."
        f"{config.input_seed + config.trials - 1}), {tolerance}, nvcc `{config.arch}`{compile_baseline}."
    )


def _kernelbench_lines(block: KernelBenchBlock) -> list[str]:
    """The KernelBench section: fast_p over eager (and torch.compile) and the geometric means."""
    scored = "greedy" if block.greedy == block.problems else "first i.i.d." if not block.greedy else "greedy or first"
    header = "| p | fast_p (eager) |" + (" fast_p (torch.compile) |" if block.fast_p_compile else "")
    lines = [
        "## KernelBench: fast_p over one scored sample per problem",
        "",
        f"The {scored} sample of each of {block.problems} problems ({block.correct} correct); a problem is "
        "fast_p when its sample is correct and more than p times faster than the baseline.",
        "",
        header,
        "|---|---|" + ("---|" if block.fast_p_compile else ""),
    ]
    for p, value in block.fast_p.items():
        compiled = f" {block.fast_p_compile[p]:.3f} |" if block.fast_p_compile else ""
        lines.append(f"| {p} | {value:.3f} |{compiled}")
    lines += ["", f"Geometric-mean speedup over eager of the correct samples: {_fmt(block.geo_mean_speedup, 2)}."]
    if block.fast_p_compile:
        lines.append(f"Over torch.compile: {_fmt(block.geo_mean_compile_speedup, 2)}.")
    return lines


def write_results(report: EvalReport, out_dir: Path) -> tuple[Path, Path]:
    """Write ``results.json`` and ``results.md`` into ``out_dir`` (created); return both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / RESULTS_JSON, out_dir / RESULTS_MD
    json_path.write_text(json.dumps(report.model_dump(mode="json"), indent=1) + "\n")
    md_path.write_text(render_markdown(report))
    return json_path, md_path


def kernelbench_level(problems: str) -> int | None:
    """The KernelBench level a problem set names (``.../KernelBench/level1``), else None."""
    match = _LEVEL.search(Path(problems).name) or _LEVEL.search(problems)
    return int(match.group(1)) if match else None


def write_kernelbench_run(report: EvalReport, folder: Path) -> Path | None:
    """``report``'s samples as a KernelBench run (``write_run_layout``); the folder, or None when
    the set is not a KernelBench level (no level in its path)."""
    level = kernelbench_level(report.config.problems)
    if level is None:
        return None
    return write_run_layout(report.samples, level, report.config.tier, folder)


def write_run_layout(samples: list[SampleRecord], level: int, tier: Tier, folder: Path) -> Path:
    """The drawn samples (repairs left out) as KernelBench writes a run: one
    ``level_<L>_problem_<P>_sample_<S>_kernel.py`` per sample (the code taken out of the answer) and
    ``eval_results.json`` (per problem id, a list of ``sample_id``, ``compiled``, ``correctness``,
    ``metadata``, ``runtime`` in ms or -1, ``runtime_stats``), so KernelBench's analysis scripts
    read it. ``correctness`` is ``tier`` passed (the CPU tier's verdict below ``gpu``). Samples of
    a problem whose id starts with no number (KernelBench's problem id) are left out."""
    folder.mkdir(parents=True, exist_ok=True)
    results: dict[int, list[dict]] = {}
    for record in samples:
        number = kernelbench_number(record.problem_id)
        if number is None or record.round:
            continue
        code = parse_candidate(record.answer).code if record.answer.strip() else ""
        (folder / f"level_{level}_problem_{number}_sample_{record.index}_kernel.py").write_text(code)
        result = record.result
        results.setdefault(number, []).append(
            {
                "sample_id": record.index,
                "compiled": passed_tier(result, Tier.COMPILE),
                "correctness": passed_tier(result, tier),
                "metadata": {
                    "cuset_problem_id": record.problem_id,
                    "cuset_tier": tier.value,
                    "verdict": result.verdict.value,
                    "reason": result.reason,
                },
                "runtime": result.runtime_ms if result.runtime_ms is not None else -1.0,
                "runtime_stats": {},
            }
        )
    ordered = {str(number): results[number] for number in sorted(results)}
    (folder / "eval_results.json").write_text(json.dumps(ordered, indent=4) + "\n")
    return folder
