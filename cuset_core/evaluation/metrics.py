"""Evaluation metrics: the unbiased pass@k estimator, per-problem rows and the aggregate.

Two blocks, never mixed (DESIGN.md §3, "Functional metrics decide"):
- greedy: one greedy sample per problem, drawn apart; ``compile@1``, ``cpu_correct@1`` (and
  ``correct@1``, ``fast_<p>`` on a GPU) are the share of problems whose greedy sample passed.
- sampled: n i.i.d. samples per problem, all at the same temperature; ``compile@k`` etc. are
  the unbiased pass@k of Chen et al. (2021), averaged over problems.

Per-problem scores (``greedy_scores``, ``sampled_scores``) are what the aggregate averages
and what a paired comparison of two models resamples (:mod:`.compare`).

A sample "passes tier T" when T ran on it and concluded ``pass`` (``VerifyResult.tier_verdicts``).
So ``compile@k`` counts samples that nvcc compiled, ``cpu_correct@k`` those that matched the
reference on the CPU runtime under the verifier's data-flow policy (``kernels`` by default: only
the candidate's kernels computed) and ``correct@k`` those that matched on a GPU; the rows and the
aggregate also count ``mixed_correct``, the samples that pass the CPU tier under ``mixed`` (torch
compute allowed, KernelBench's rule), which a ``kernels`` run learns from the same check; a sample the CPU
tier could not judge (``unsupported``) is not CPU-correct even when the GPU tier passed it, and
a tier that was skipped (no nvcc) passes nothing. Results from before ``tier_verdicts`` existed
fall back to the deciding tier: T passed when a later tier decided (tiers run cheapest first
and stop at the first failure), or T decided and the verdict is ``pass``.

``fast_p`` (GPU only) at KernelBench's thresholds p = 0, 0.5, 0.8, 1, 1.5, 2: a sample is fast_p
when it is correct *and* its speedup over eager PyTorch is greater than p (so fast_0 is the
correct share). Three places report it:
- the ``kernelbench`` block: KernelBench's own definition (its ``benchmark_eval_analysis``): one
  sample per problem, the one KernelBench scores (its ``sample_id`` 0: here the greedy sample
  when one was drawn, else the first i.i.d. one), fast_p = the share of problems whose sample is
  fast_p, beside the geometric mean of the speedups of the correct ones; and the same against
  the torch.compile baseline where tier 3 timed it. This is the figure comparable with
  KernelBench's leaderboard, whatever the number of samples;
- the greedy block's ``fast_<p>``: the same over the greedy samples;
- the pass@k block's ``fast_p``: the share of a problem's i.i.d. samples that are fast_p, averaged
  over problems (equal to KernelBench's only with one sample per problem).
A correct sample without a timing counts as not fast and is left out of the geometric mean.
``unsupported`` samples (a feature the CPU runtime cannot model, or no GPU) never pass; they
are counted under their verdict so a reader can discount them.

With repair rounds (``cuset eval --repair-rounds R``) a failing sample is sent back to the model
with its verifier error, up to R times; a sample and its repairs form a *chain*. The ``repaired``
figures count chains: a chain passes a tier when any of its attempts did (so R repairs never
lower a figure), its verdict is its last attempt's, and it counts in ``n`` when its first attempt
was judged, so the plain and the repaired pass@k share their denominator.

``internal_error`` samples (a fault of the verifier or the machine, not of the model) are left
out of every denominator: ``n`` counts the samples that were judged, and ``internal_errors``
reports the others apart.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, Field

from cuset_core.verify.result import Tier, Verdict, VerifyResult

FAST_P_THRESHOLDS = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)  # KernelBench's
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


def fast_p(speedups: Sequence[float | None], p: float) -> float:
    """KernelBench's fast_p over problems: the share of ``speedups`` greater than ``p``.

    One entry per problem: the speedup (baseline time / kernel time, both per call) of its scored
    sample when that sample is correct, None when it is not (or was not timed). 0 for no problems.
    """
    if not speedups:
        return 0.0
    return sum(s is not None and s > p for s in speedups) / len(speedups)


def geometric_mean_speedup(speedups: Sequence[float | None]) -> float | None:
    """Geometric mean of the speedups of correct samples (None entries: incorrect, skipped); None
    when there is none. KernelBench's "geometric mean of speedup for correct samples"."""
    values = [s for s in speedups if s is not None]
    return statistics.geometric_mean(values) if values else None


def passed_tier(result: VerifyResult, tier: Tier) -> bool:
    """Whether ``tier`` passed this sample (see the module docstring)."""
    if result.tier_verdicts:
        return result.tier_verdicts.get(tier) is Verdict.PASS
    if result.tier.rank > tier.rank:
        return True
    return result.tier is tier and result.verdict is Verdict.PASS


def passed_mixed(result: VerifyResult) -> bool:
    """Whether the CPU tier passed this sample under the ``mixed`` policy: it passed (under whichever
    policy decided), or ``kernels`` refused it for torch compute or a transfer alone (``mixed_pass``)."""
    return passed_tier(result, Tier.CPU) or result.mixed_pass is True


class SampleCounts(BaseModel):
    """Counts over a set of samples of one problem, by tier passed, verdict and speed."""

    n: int = Field(description="samples judged (internal errors excluded): the pass@k denominator")
    internal_errors: int = Field(0, description="samples the verifier failed on, left out of n")
    compiled: int = 0
    cpu_correct: int = 0
    mixed_correct: int = Field(
        0,
        description="samples the CPU tier passes under the mixed policy (torch compute allowed): cpu_correct and more",
    )
    correct: int = 0
    fast: dict[str, int] = Field(default_factory=dict, description="p -> correct samples with speedup > p")
    best_speedup: float | None = Field(None, description="best speedup among GPU-correct samples")
    verdicts: dict[str, int] = Field(default_factory=dict, description="verdict -> samples")


class ScoredSample(BaseModel):
    """The sample KernelBench scores for a problem (its ``sample_id`` 0): the greedy sample when
    one was drawn, else the first i.i.d. one; fast_p of this one problem."""

    greedy: bool = Field(description="the greedy sample (else the first i.i.d. one)")
    correct: bool = Field(description="passed the GPU tier")
    speedup: float | None = Field(None, description="over eager PyTorch; None unless correct and timed")
    compile_speedup: float | None = Field(None, description="over torch.compile; None unless correct and timed")
    fast: dict[str, bool] = Field(default_factory=dict, description="p -> correct and speedup > p (eager)")


class RepairedCounts(BaseModel):
    """One problem's counts over chains (a sample, then its repairs): within ``rounds`` repairs."""

    rounds: int = Field(description="R: repairs a failing sample could get")
    repairs: int = Field(description="repair attempts made for this problem's samples")
    sampled: SampleCounts = Field(description="over the i.i.d. samples' chains (the pass@k pool)")
    greedy: SampleCounts | None = Field(None, description="over the greedy sample's chain; None without one")


class ProblemRow(SampleCounts):
    """One problem: counts over its i.i.d. samples (the pass@k pool; ``n`` may be 0) and, apart,
    over its greedy sample (``greedy.n`` is 1; None when none was drawn); ``scored``: the sample
    KernelBench scores (None when there is none, or the verifier failed on it); ``repaired``: the
    same counts within R repairs (None when the run made no repair rounds). The plain counts
    never include a repair."""

    id: str
    greedy: SampleCounts | None = None
    scored: ScoredSample | None = None
    repaired: RepairedCounts | None = None


class GreedyBlock(BaseModel):
    """Greedy metrics: the share of problems whose greedy sample passed each tier."""

    problems: int = Field(description="problems with a greedy sample")
    metrics: dict[str, float] = Field(default_factory=dict, description='e.g. "compile@1" -> 0.5')
    verdicts: dict[str, int] = Field(default_factory=dict, description="verdict -> greedy samples")


class SampledBlock(BaseModel):
    """pass@k metrics from i.i.d. samples (no greedy sample among them)."""

    problems: int = Field(description="problems with at least one i.i.d. sample")
    samples: int = Field(description="i.i.d. samples counted")
    k_values: list[int]
    metrics: dict[str, float] = Field(default_factory=dict, description='e.g. "compile@4" -> 0.5')
    fast_p: dict[str, float] = Field(default_factory=dict, description='"1.0" -> share (GPU tier)')
    verdicts: dict[str, int] = Field(default_factory=dict, description="verdict -> i.i.d. samples")


class KernelBenchBlock(BaseModel):
    """KernelBench's figures (GPU tier): over one scored sample per problem (``ScoredSample``)."""

    problems: int = Field(description="problems with a judged scored sample: the fast_p denominator")
    greedy: int = Field(description="of which the scored sample is the greedy one (else the first i.i.d.)")
    correct: int
    fast_p: dict[str, float] = Field(description='"1.0" -> share of problems correct and > 1.0x eager')
    geo_mean_speedup: float | None = Field(description="over eager, geometric mean over correct timed samples")
    fast_p_compile: dict[str, float] = Field(
        default_factory=dict, description="the same against torch.compile; {} when no sample was timed against it"
    )
    geo_mean_compile_speedup: float | None = None


class RepairedBlock(BaseModel):
    """The greedy and pass@k blocks again, counting each sample with its repairs (``RepairedCounts``)."""

    rounds: int = Field(description="R: repairs a failing sample could get")
    repairs: int = Field(description="repair attempts made over the whole set")
    greedy: GreedyBlock | None = None
    sampled: SampledBlock | None = None


class Aggregate(BaseModel):
    """Metrics over the whole problem set: the greedy block and the pass@k block, each None when
    the run drew no such sample; ``repaired``: both within R repairs (None without repair rounds)."""

    problems: int
    samples: int = Field(description="samples judged, greedy and i.i.d. (internal errors excluded)")
    internal_errors: int = Field(0, description="samples the verifier failed on, left out of every metric")
    tier: Tier
    k_values: list[int] = Field(default_factory=list, description="the k of the sampled block's pass@k")
    greedy: GreedyBlock | None = None
    sampled: SampledBlock | None = None
    kernelbench: KernelBenchBlock | None = Field(None, description="GPU tier only")
    verdicts: dict[str, int] = Field(default_factory=dict, description="verdict -> samples, greedy and i.i.d.")
    cpu_correct: int = Field(0, description="samples, greedy and i.i.d., the CPU tier passed under its policy")
    mixed_correct: int = Field(
        0, description="samples, greedy and i.i.d., the CPU tier passes under the mixed policy (torch compute allowed)"
    )
    repaired: RepairedBlock | None = None


def sample_counts(results: list[VerifyResult]) -> SampleCounts:
    """Count ``results`` (the samples that count) by tier passed, verdict and speed; samples the
    verifier failed on (``internal_error``) are counted apart, never in ``n``."""
    return chain_counts([[result] for result in results])


def chain_counts(chains: list[list[VerifyResult]]) -> SampleCounts:
    """Count chains (a sample's result, then its repairs' in order) as the module docstring says:
    a chain passes a tier, is correct or fast when any attempt was; its verdict is the last
    attempt's; one whose first attempt hit a verifier fault is counted apart, never in ``n``."""
    verdicts = dict(sorted(Counter(chain[-1].verdict.value for chain in chains).items()))
    internal = [chain for chain in chains if chain[0].verdict is Verdict.INTERNAL_ERROR]
    chains = [chain for chain in chains if chain[0].verdict is not Verdict.INTERNAL_ERROR]
    correct = [[r for r in chain if passed_tier(r, Tier.GPU)] for chain in chains]
    speedups = [max(timed) for rs in correct if (timed := [r.speedup for r in rs if r.speedup is not None])]
    return SampleCounts(
        n=len(chains),
        internal_errors=len(internal),
        compiled=sum(any(passed_tier(r, Tier.COMPILE) for r in chain) for chain in chains),
        cpu_correct=sum(any(passed_tier(r, Tier.CPU) for r in chain) for chain in chains),
        mixed_correct=sum(any(passed_mixed(r) for r in chain) for chain in chains),
        correct=sum(bool(rs) for rs in correct),
        fast={str(p): sum(s > p for s in speedups) for p in FAST_P_THRESHOLDS},
        best_speedup=max(speedups) if speedups else None,
        verdicts=verdicts,
    )


def repaired_counts(
    rounds: int, sampled: list[list[VerifyResult]], greedy: list[VerifyResult] | None = None
) -> RepairedCounts:
    """One problem's ``RepairedCounts`` from the chains of its i.i.d. samples and its greedy one."""
    chains = [*sampled, *([greedy] if greedy else [])]
    return RepairedCounts(
        rounds=rounds,
        repairs=sum(len(chain) - 1 for chain in chains),
        sampled=chain_counts(sampled),
        greedy=None if greedy is None else chain_counts([greedy]),
    )


def problem_row(problem_id: str, sampled: list[VerifyResult], greedy: VerifyResult | None = None) -> ProblemRow:
    """One problem's row from its i.i.d. samples' results and its greedy sample's, if any."""
    first = greedy if greedy is not None else sampled[0] if sampled else None
    return ProblemRow(
        id=problem_id,
        **sample_counts(sampled).model_dump(),
        greedy=None if greedy is None else sample_counts([greedy]),
        scored=None if first is None else scored_sample(first, greedy=greedy is not None),
    )


def scored_sample(result: VerifyResult, *, greedy: bool) -> ScoredSample | None:
    """``result`` as the problem's KernelBench-scored sample; None when the verifier failed on it."""
    if result.verdict is Verdict.INTERNAL_ERROR:
        return None
    correct = passed_tier(result, Tier.GPU)
    speedup = result.speedup if correct else None
    return ScoredSample(
        greedy=greedy,
        correct=correct,
        speedup=speedup,
        compile_speedup=result.compile_speedup if correct else None,
        fast={str(p): speedup is not None and speedup > p for p in FAST_P_THRESHOLDS},
    )


def kernelbench_block(rows: list[ProblemRow]) -> KernelBenchBlock | None:
    """KernelBench's fast_p and geometric-mean speedup over the rows' scored samples; None without any."""
    scored = [row.scored for row in rows if row.scored is not None]
    if not scored:
        return None
    eager = [s.speedup for s in scored]
    compiled = [s.compile_speedup for s in scored]
    timed_against_compile = any(c is not None for c in compiled)
    return KernelBenchBlock(
        problems=len(scored),
        greedy=sum(s.greedy for s in scored),
        correct=sum(s.correct for s in scored),
        fast_p={str(p): fast_p(eager, p) for p in FAST_P_THRESHOLDS},
        geo_mean_speedup=geometric_mean_speedup(eager),
        fast_p_compile={str(p): fast_p(compiled, p) for p in FAST_P_THRESHOLDS} if timed_against_compile else {},
        geo_mean_compile_speedup=geometric_mean_speedup(compiled),
    )


def _reached(tier: Tier) -> list[tuple[str, str]]:
    """(metric name, count field) of the metrics a run verified up to ``tier`` can report."""
    return [(name, field) for name, (metric_tier, field) in METRIC_TIERS.items() if metric_tier.rank <= tier.rank]


def greedy_scores(row: ProblemRow, tier: Tier) -> dict[str, float]:
    """1.0 or 0.0 per greedy metric (``compile@1`` ..., ``fast_<p>`` on a GPU); {} without a
    greedy sample."""
    return _at_1(row.greedy, tier)


def _at_1(greedy: SampleCounts | None, tier: Tier) -> dict[str, float]:
    """1.0 or 0.0 per metric of one greedy sample's counts; {} without one."""
    if greedy is None or greedy.n == 0:
        return {}
    scores = {f"{name}@1": float(getattr(greedy, field) > 0) for name, field in _reached(tier)}
    if tier is Tier.GPU:
        scores.update({f"fast_{p}": float(count > 0) for p, count in _fast_counts(greedy).items()})
    return scores


def sampled_scores(row: SampleCounts, tier: Tier, k_values: list[int]) -> dict[str, float]:
    """pass@k per metric and k from the row's i.i.d. samples (or their chains) (``compile@4`` ...), plus
    ``fast_<p>`` (share of samples correct and faster than p) on a GPU; {} without samples."""
    if row.n == 0:
        return {}
    scores = {
        f"{name}@{k}": pass_at_k(row.n, getattr(row, field), k) for name, field in _reached(tier) for k in k_values
    }
    if tier is Tier.GPU:
        scores.update({f"fast_{p}": count / row.n for p, count in _fast_counts(row).items()})
    return scores


def _fast_counts(counts: SampleCounts) -> dict[str, int]:
    """p -> fast samples, for the thresholds the counts hold (rows of older results hold fewer)."""
    return {str(p): counts.fast[str(p)] for p in FAST_P_THRESHOLDS if str(p) in counts.fast}


def mean_scores(per_problem: list[dict[str, float]]) -> dict[str, float]:
    """Mean over problems of each score, in first-seen key order."""
    totals: dict[str, list[float]] = {}
    for scores in per_problem:
        for name, value in scores.items():
            totals.setdefault(name, []).append(value)
    return {name: sum(values) / len(values) for name, values in totals.items()}


def aggregate(rows: list[ProblemRow], tier: Tier, k_values: list[int]) -> Aggregate:
    """The greedy block, the pass@k block (for ``k_values``), at the GPU tier KernelBench's block
    and, when the rows were repaired, both blocks within the repairs, over ``rows``."""
    with_greedy = [row.greedy for row in rows if row.greedy is not None and row.greedy.n]
    with_samples = [row for row in rows if row.n]
    everything = [*with_samples, *with_greedy]
    return Aggregate(
        problems=len(rows),
        samples=sum(counts.n for counts in everything),
        internal_errors=sum(row.internal_errors for row in rows)
        + sum(row.greedy.internal_errors for row in rows if row.greedy is not None),
        tier=tier,
        k_values=k_values,
        greedy=greedy_block([row.greedy for row in rows], tier),
        sampled=sampled_block(rows, tier, k_values),
        kernelbench=kernelbench_block(rows) if tier is Tier.GPU else None,
        verdicts=_verdicts(everything),
        cpu_correct=sum(counts.cpu_correct for counts in everything),
        mixed_correct=sum(counts.mixed_correct for counts in everything),
        repaired=repaired_block(rows, tier, k_values),
    )


def greedy_block(counts: Sequence[SampleCounts | None], tier: Tier) -> GreedyBlock | None:
    """The greedy metrics over the problems' greedy counts (None: no greedy sample); None without any."""
    judged = [c for c in counts if c is not None and c.n]
    if not judged:
        return None
    return GreedyBlock(
        problems=len(judged), metrics=mean_scores([_at_1(c, tier) for c in judged]), verdicts=_verdicts(judged)
    )


def sampled_block(counts: Sequence[SampleCounts], tier: Tier, k_values: list[int]) -> SampledBlock | None:
    """pass@k (and fast_p on a GPU) over the problems' i.i.d. counts; None when none has a sample."""
    judged = [c for c in counts if c.n]
    if not judged:
        return None
    scores = mean_scores([sampled_scores(c, tier, k_values) for c in judged])
    return SampledBlock(
        problems=len(judged),
        samples=sum(c.n for c in judged),
        k_values=k_values,
        metrics={name: value for name, value in scores.items() if not name.startswith("fast_")},
        fast_p={name.removeprefix("fast_"): value for name, value in scores.items() if name.startswith("fast_")},
        verdicts=_verdicts(judged),
    )


def repaired_block(rows: list[ProblemRow], tier: Tier, k_values: list[int]) -> RepairedBlock | None:
    """Both blocks within the rows' repairs; None when no row was repaired (no repair rounds)."""
    repaired = [row.repaired for row in rows if row.repaired is not None]
    if not repaired:
        return None
    return RepairedBlock(
        rounds=max(r.rounds for r in repaired),
        repairs=sum(r.repairs for r in repaired),
        greedy=greedy_block([r.greedy for r in repaired], tier),
        sampled=sampled_block([r.sampled for r in repaired], tier, k_values),
    )


def _verdicts(counts: Iterable[SampleCounts]) -> dict[str, int]:
    """Verdict counts summed over ``SampleCounts``, sorted by verdict."""
    total: Counter[str] = Counter()
    for item in counts:
        total.update(item.verdicts)
    return dict(sorted(total.items()))
