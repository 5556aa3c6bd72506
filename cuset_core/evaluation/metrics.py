"""Evaluation metrics: the unbiased pass@k estimator, per-problem rows and the aggregate.

A sample "passes tier T" when T ran on it and concluded ``pass`` (``VerifyResult.tier_verdicts``).
So ``compile@k`` counts samples that nvcc compiled, ``cpu_correct@k`` those that matched the
reference on the CPU runtime and ``correct@k`` those that matched on a GPU; a sample the CPU
tier could not judge (``unsupported``) is not CPU-correct even when the GPU tier passed it, and
a tier that was skipped (no nvcc) passes nothing. Results from before ``tier_verdicts`` existed
fall back to the deciding tier: T passed when a later tier decided (tiers run cheapest first
and stop at the first failure), or T decided and the verdict is ``pass``.

``fast_p`` (GPU only) is KernelBench's: the share of samples that are correct *and* faster
than eager PyTorch by more than ``p``, averaged per problem, then over problems.
``unsupported`` samples (a feature the CPU runtime cannot model, or no GPU) never pass; they
are counted under their verdict so a reader can discount them.

``internal_error`` samples (a fault of the verifier or the machine, not of the model) are left
out of every denominator: ``n`` counts the samples that were judged, and ``internal_errors``
reports the others apart.
"""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel, Field

from cuset_core.verify.result import Tier, Verdict, VerifyResult

FAST_P_THRESHOLDS = (1.0, 1.5)
# metric name prefix -> (the tier a sample must pass, the ProblemRow field counting such samples)
METRIC_TIERS = {
    "compile": (Tier.COMPILE, "compiled"),
    "cpu_correct": (Tier.CPU, "cpu_correct"),
    "correct": (Tier.GPU, "correct"),
}


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): 1 - C(n-c, k) / C(n, k).

    ``n`` samples of which ``c`` are correct. ``k`` larger than ``n`` is clamped to ``n``
    (so with fewer samples than asked the estimate is pass@n); ``n == 0`` gives 0.
    Computed as a running product, which stays exact-ish for large ``n``.
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if n == 0:
        return 0.0
    k = min(k, n)
    if n - c < k:
        return 1.0
    failure = 1.0
    for i in range(n - c + 1, n + 1):
        failure *= 1.0 - k / i
    return 1.0 - failure


def passed_tier(result: VerifyResult, tier: Tier) -> bool:
    """Whether ``tier`` passed this sample (see the module docstring)."""
    if result.tier_verdicts:
        return result.tier_verdicts.get(tier) is Verdict.PASS
    if result.tier.rank > tier.rank:
        return True
    return result.tier is tier and result.verdict is Verdict.PASS


class ProblemRow(BaseModel):
    """One problem's counts over its samples."""

    id: str
    n: int = Field(description="samples judged (internal errors excluded): the pass@k denominator")
    internal_errors: int = Field(0, description="samples the verifier failed on, left out of n")
    compiled: int = 0
    cpu_correct: int = 0
    correct: int = 0
    fast: dict[str, int] = Field(default_factory=dict, description="p -> correct samples with speedup > p")
    best_speedup: float | None = Field(None, description="best speedup among GPU-correct samples")
    verdicts: dict[str, int] = Field(default_factory=dict, description="verdict -> samples")


class Aggregate(BaseModel):
    """Metrics over the whole problem set."""

    problems: int
    samples: int = Field(description="samples judged (internal errors excluded)")
    internal_errors: int = Field(0, description="samples the verifier failed on, left out of every metric")
    tier: Tier
    k_values: list[int]
    metrics: dict[str, float] = Field(default_factory=dict, description='e.g. "compile@1" -> 0.5')
    fast_p: dict[str, float] = Field(default_factory=dict, description='"1.0" -> share (GPU tier)')
    verdicts: dict[str, int] = Field(default_factory=dict, description="verdict -> samples")


def problem_row(problem_id: str, results: list[VerifyResult]) -> ProblemRow:
    """Count one problem's samples by tier passed, verdict and speed; internal errors apart."""
    verdicts = dict(sorted(Counter(r.verdict.value for r in results).items()))
    internal = [r for r in results if r.verdict is Verdict.INTERNAL_ERROR]
    results = [r for r in results if r.verdict is not Verdict.INTERNAL_ERROR]
    correct = [r for r in results if passed_tier(r, Tier.GPU)]
    speedups = [r.speedup for r in correct if r.speedup is not None]
    return ProblemRow(
        id=problem_id,
        n=len(results),
        internal_errors=len(internal),
        compiled=sum(passed_tier(r, Tier.COMPILE) for r in results),
        cpu_correct=sum(passed_tier(r, Tier.CPU) for r in results),
        correct=len(correct),
        fast={str(p): sum(s > p for s in speedups) for p in FAST_P_THRESHOLDS},
        best_speedup=max(speedups) if speedups else None,
        verdicts=verdicts,
    )


def aggregate(rows: list[ProblemRow], tier: Tier, k_values: list[int]) -> Aggregate:
    """Mean pass@k per metric over problems, for the metrics the tier reached, plus fast_p."""
    metrics: dict[str, float] = {}
    for name, (metric_tier, count_field) in METRIC_TIERS.items():
        if metric_tier.rank > tier.rank:
            continue
        for k in k_values:
            # a problem whose every sample hit a verifier fault was not judged: it is no zero
            values = [pass_at_k(row.n, getattr(row, count_field), k) for row in rows if row.n]
            metrics[f"{name}@{k}"] = sum(values) / len(values) if values else 0.0
    fast_p: dict[str, float] = {}
    if tier is Tier.GPU:
        for p in FAST_P_THRESHOLDS:
            shares = [row.fast.get(str(p), 0) / row.n for row in rows if row.n]
            fast_p[str(p)] = sum(shares) / len(shares) if shares else 0.0
    verdicts: Counter[str] = Counter()
    for row in rows:
        verdicts.update(row.verdicts)
    return Aggregate(
        problems=len(rows),
        samples=sum(row.n for row in rows),
        internal_errors=sum(row.internal_errors for row in rows),
        tier=tier,
        k_values=k_values,
        metrics=metrics,
        fast_p=fast_p,
        verdicts=dict(sorted(verdicts.items())),
    )
