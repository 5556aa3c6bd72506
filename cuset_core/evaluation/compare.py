"""Two evaluations of the same problems, compared: a paired bootstrap interval per metric.

Each metric has one score per problem (:func:`.metrics.greedy_scores`, :func:`.metrics.sampled_scores`:
0/1 for the greedy sample, the unbiased pass@k of the i.i.d. samples). The difference A - B is
averaged over problems; its interval comes from resampling problems with replacement, the same
draw for both models (paired), so problem difficulty, which dominates the spread, cancels.
A side may hold several runs (the seeds of one method): a problem's score is then the mean of
its scores over those runs, so the interval covers seeds and problems but resamples problems only.

Results files are read as ``cuset eval`` writes them; files written before the greedy sample was
drawn apart (``config.greedy_first``: sample 0 greedy) are read with sample 0 as the greedy
sample and the rest as the i.i.d. samples.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field

from cuset_core.evaluation.metrics import ProblemRow, greedy_scores, problem_row, sampled_scores
from cuset_core.evaluation.report import RESULTS_JSON
from cuset_core.verify.result import Tier, VerifyResult

GREEDY, SAMPLED = "greedy", "sampled"


class CompareInputError(ValueError):
    """The two results cannot be compared (unreadable, different problems); one line says why."""


class EvalRun(BaseModel):
    """What a comparison needs of one evaluation: its rows rebuilt from its samples."""

    name: str
    tier: Tier
    k_values: list[int]
    rows: list[ProblemRow]


class Interval(BaseModel):
    """A - B for one metric over the problems both runs scored."""

    metric: str = Field(description='"greedy:compile@1", "sampled:compile@4", ...')
    problems: int
    a: float = Field(description="A's mean score")
    b: float = Field(description="B's mean score")
    difference: float = Field(description="mean over problems of A - B")
    low: float
    high: float


class Comparison(BaseModel):
    """Every metric both runs can report, with a paired bootstrap interval of A - B."""

    a: str
    b: str
    tier: Tier
    confidence: float
    resamples: int
    seed: int
    intervals: list[Interval]
    skipped: list[str] = Field(default_factory=list, description="metrics left out, with the reason")
    not_compared: list[str] = Field(
        default_factory=list,
        description="metrics one side reports that the comparison could not use: verified past the lowest tier "
        "of the runs (cpu_correct@1 of a cpu-tier run against a compile-tier one), or absent from the other side",
    )


def paired_bootstrap(
    a: list[float], b: list[float], *, resamples: int = 10_000, seed: int = 0, confidence: float = 0.95
) -> tuple[float, float, float]:
    """Mean of ``a[j] - b[j]`` over problems j and its percentile bootstrap interval.

    ``a`` and ``b`` hold one score per problem, in the same problem order. Each of the
    ``resamples`` draws picks len(a) problems with replacement (seeded, so reproducible) and
    averages their differences; the interval is the central ``confidence`` share of those means.
    Returns (difference, low, high).
    """
    if len(a) != len(b) or not a:
        raise ValueError(f"need two equally long, non-empty score lists, got {len(a)} and {len(b)}")
    if resamples < 1 or not 0.0 < confidence < 1.0:
        raise ValueError(f"need resamples >= 1 and 0 < confidence < 1, got {resamples} and {confidence}")
    differences = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    chunk = max(1, 2_000_000 // len(differences))  # bounds the index matrix to ~16 MB
    for start in range(0, resamples, chunk):
        stop = min(start + chunk, resamples)
        picks = rng.integers(0, len(differences), size=(stop - start, len(differences)))
        means[start:stop] = differences[picks].mean(axis=1)
    tail = (1.0 - confidence) / 2
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(differences.mean()), float(low), float(high)


def read_run(path: Path) -> EvalRun:
    """An evaluation's rows, rebuilt from the samples of its ``results.json`` (or a folder holding one)."""
    file = path / RESULTS_JSON if path.is_dir() else path
    try:
        data = json.loads(file.read_text())
        config, aggregate = data["config"], data["aggregate"]
        legacy_greedy = bool(config.get("greedy_first")) and config.get("model") is not None
        by_problem: dict[str, tuple[list[VerifyResult], list[VerifyResult]]] = {
            str(row["id"]): ([], []) for row in data["problems"]
        }
        for sample in data["samples"]:
            greedy = sample.get("greedy", legacy_greedy and sample["index"] == 0)
            by_problem[str(sample["problem_id"])][0 if greedy else 1].append(
                VerifyResult.model_validate(sample["result"])
            )
        tier = Tier(aggregate["tier"])
    except FileNotFoundError:
        raise CompareInputError(f"{path}: no {RESULTS_JSON} found") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CompareInputError(f"{file}: not a `cuset eval` results file ({type(exc).__name__}: {exc})") from None
    rows = [problem_row(pid, sampled, greedy[0] if greedy else None) for pid, (greedy, sampled) in by_problem.items()]
    return EvalRun(name=str(path), tier=tier, k_values=aggregate.get("k_values", []), rows=rows)


def compare_runs(
    a: list[EvalRun], b: list[EvalRun], *, resamples: int = 10_000, seed: int = 0, confidence: float = 0.95
) -> Comparison:
    """A paired bootstrap interval of A - B for every greedy and pass@k metric both sides have.

    ``a`` and ``b`` each hold one run or several (seeds of one method, averaged per problem).
    Every run must cover the same problems. Metrics stop at the lowest tier of all runs; pass@k
    is kept for the k that every problem's i.i.d. samples allow in every run. A metric one run
    reports that cannot be compared (past the lowest tier, or missing on the other side) is
    named in ``not_compared`` and its reason in ``skipped``.
    """
    runs = [*a, *b]
    if not a or not b:
        raise CompareInputError("need at least one run on each side")
    ids = [sorted(row.id for row in run.rows) for run in runs]
    for run, run_ids in zip(runs[1:], ids[1:]):
        if set(run_ids) != set(ids[0]):
            only_first, only_this = sorted(set(ids[0]) - set(run_ids)), sorted(set(run_ids) - set(ids[0]))
            raise CompareInputError(
                f"the runs cover different problems: only in {runs[0].name} {only_first[:5]}, "
                f"only in {run.name} {only_this[:5]}" + (" ..." if len(only_first) > 5 or len(only_this) > 5 else "")
            )
    tier = min((run.tier for run in runs), key=lambda t: t.rank)
    asked = sorted({k for run in runs for k in run.k_values})
    fewest = min((row.n for run in runs for row in run.rows), default=0)
    k_values = [k for k in asked if k <= fewest]
    skipped = [f"{SAMPLED}:*@{k}: a problem has fewer than {k} i.i.d. samples" for k in asked if k > fewest]
    scores_a, scores_b = _side_scores(a, tier, k_values), _side_scores(b, tier, k_values)
    per_metric: dict[str, tuple[list[float], list[float]]] = {}
    for problem in ids[0]:
        for name in scores_a[problem].keys() & scores_b[problem].keys():
            values = per_metric.setdefault(name, ([], []))
            values[0].append(scores_a[problem][name])
            values[1].append(scores_b[problem][name])
    not_compared, reasons = _not_compared(a, b, tier, k_values, set(per_metric))
    skipped += reasons
    intervals = []
    for metric in sorted(per_metric, key=lambda m: (not m.startswith(GREEDY), m)):
        values_a, values_b = per_metric[metric]
        difference, low, high = paired_bootstrap(
            values_a, values_b, resamples=resamples, seed=seed, confidence=confidence
        )
        intervals.append(
            Interval(
                metric=metric,
                problems=len(values_a),
                a=float(np.mean(values_a)),
                b=float(np.mean(values_b)),
                difference=difference,
                low=low,
                high=high,
            )
        )
    return Comparison(
        a=" + ".join(run.name for run in a),
        b=" + ".join(run.name for run in b),
        tier=tier,
        confidence=confidence,
        resamples=resamples,
        seed=seed,
        intervals=intervals,
        skipped=skipped,
        not_compared=not_compared,
    )


def _metric_names(run: EvalRun, tier: Tier, k_values: list[int]) -> set[str]:
    return {name for scores in _side_scores([run], tier, k_values).values() for name in scores}


def _metric_order(metric: str) -> tuple[bool, str]:
    return (not metric.startswith(GREEDY), metric)


def _not_compared(
    a: list[EvalRun], b: list[EvalRun], tier: Tier, k_values: list[int], compared: set[str]
) -> tuple[list[str], list[str]]:
    """The metrics a run reports (at its own tier) that no interval covers, and one reason each:
    never dropped without a word."""
    reasons: dict[str, str] = {}
    for label, side, other_label in (("A", a, "B"), ("B", b, "A")):
        for run in side:
            at_common = _metric_names(run, tier, k_values)
            for metric in sorted(_metric_names(run, run.tier, k_values) - compared, key=_metric_order):
                if metric in reasons:
                    continue
                if metric not in at_common:
                    lower = [r.name for r in (*a, *b) if r.tier.rank < run.tier.rank]
                    reasons[metric] = (
                        f"{metric}: not compared: {label} ({run.name}) was verified to tier {run.tier.value}, "
                        f"but {', '.join(lower)} only to tier {tier.value}; the comparison stops at the lowest tier"
                    )
                else:
                    reasons[metric] = f"{metric}: not compared: only {label} has it ({other_label} has no such score)"
    order = sorted(reasons, key=_metric_order)
    return order, [reasons[metric] for metric in order]


def _side_scores(runs: list[EvalRun], tier: Tier, k_values: list[int]) -> dict[str, dict[str, float]]:
    """problem id -> "block:metric" -> score, the mean over ``runs`` that have it."""
    collected: dict[str, dict[str, list[float]]] = {}
    for run in runs:
        for row in run.rows:
            scores = collected.setdefault(row.id, {})
            for block, values in ((GREEDY, greedy_scores(row, tier)), (SAMPLED, sampled_scores(row, tier, k_values))):
                for name, value in values.items():
                    scores.setdefault(f"{block}:{name}", []).append(value)
    return {pid: {name: float(np.mean(v)) for name, v in scores.items()} for pid, scores in collected.items()}


def render_comparison(comparison: Comparison) -> str:
    """Markdown: one row per metric with both means, the difference and its interval."""
    percent = f"{100 * comparison.confidence:g}%"
    lines = [
        "# Paired comparison",
        "",
        f"A = `{comparison.a}`, B = `{comparison.b}`, tier `{comparison.tier.value}`. A - B averaged over "
        f"problems; {percent} interval from a paired bootstrap over problems ({comparison.resamples} resamples, "
        f"seed {comparison.seed}). An interval that excludes 0 says A and B differ on these problems.",
        "",
        f"| metric | problems | A | B | A - B | {percent} interval |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for item in comparison.intervals:
        lines.append(
            f"| {item.metric} | {item.problems} | {item.a:.3f} | {item.b:.3f} | {item.difference:+.3f} | "
            f"[{item.low:+.3f}, {item.high:+.3f}] |"
        )
    if comparison.not_compared:
        lines += ["", f"Not compared (in one run only): {', '.join(comparison.not_compared)}."]
    if comparison.skipped:
        lines += ["", *(f"- skipped {reason}" for reason in comparison.skipped)]
    return "\n".join(lines) + "\n"
