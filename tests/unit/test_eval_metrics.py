"""pass@k and the aggregation of verification results into evaluation metrics."""

from __future__ import annotations

from math import comb

import pytest

from cuset_core.evaluation.metrics import (
    aggregate,
    chain_counts,
    fast_p,
    geometric_mean_speedup,
    greedy_scores,
    pass_at_k,
    passed_tier,
    problem_row,
    repaired_counts,
    sampled_scores,
)
from cuset_core.verify.result import Tier, Verdict, VerifyResult


def result(verdict: str, tier: str, speedup: float | None = None, compile_speedup: float | None = None) -> VerifyResult:
    """A result as cached before ``tier_verdicts`` existed: only the deciding tier is known."""
    return VerifyResult(verdict=Verdict(verdict), tier=Tier(tier), speedup=speedup, compile_speedup=compile_speedup)


def tiered(**verdicts: str) -> VerifyResult:
    """A result with what each tier that ran concluded; the last one decided."""
    last = list(verdicts)[-1]
    return VerifyResult(
        verdict=Verdict(verdicts[last]),
        tier=Tier(last),
        tier_verdicts={Tier(t): Verdict(v) for t, v in verdicts.items()},
    )


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (10, 0, 1, 0.0),
        (10, 3, 1, 0.3),
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (10, 10, 5, 1.0),
        (4, 1, 4, 1.0),
        (2, 1, 5, 1.0),  # k > n is clamped to n
        (0, 0, 1, 0.0),
    ],
)
def test_pass_at_k_known_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_matches_the_binomial_formula():
    for n in range(1, 12):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1.0 - comb(n - c, k) / comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)


def test_pass_at_k_rejects_impossible_counts():
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 0)


def test_without_tier_verdicts_a_sample_passes_a_tier_when_a_later_tier_decided_or_it_passed_there():
    assert passed_tier(result("value_mismatch", "cpu"), Tier.COMPILE)
    assert not passed_tier(result("value_mismatch", "cpu"), Tier.CPU)
    assert passed_tier(result("pass", "cpu"), Tier.CPU)
    assert not passed_tier(result("compile_error", "compile"), Tier.COMPILE)
    assert not passed_tier(result("unsupported", "cpu"), Tier.CPU)
    assert not passed_tier(result("pass", "cpu"), Tier.GPU)


def test_a_sample_passes_exactly_the_tiers_that_concluded_pass():
    unsupported_on_cpu = tiered(static="pass", compile="pass", cpu="unsupported", gpu="pass")
    assert [passed_tier(unsupported_on_cpu, t) for t in Tier] == [True, True, False, True]
    no_nvcc = tiered(static="pass", compile="unsupported", cpu="pass")  # tier 1 could not run: nothing compiled
    assert [passed_tier(no_nvcc, t) for t in Tier] == [True, False, True, False]
    wrong_on_gpu = tiered(static="pass", compile="pass", cpu="pass", gpu="value_mismatch")
    assert [passed_tier(wrong_on_gpu, t) for t in Tier] == [True, True, True, False]
    rejected = tiered(static="static_reject")
    assert [passed_tier(rejected, t) for t in Tier] == [False, False, False, False]


def test_a_sample_unsupported_on_the_cpu_is_gpu_correct_but_not_cpu_correct():
    row = problem_row(
        "p1",
        [
            tiered(static="pass", compile="pass", cpu="unsupported", gpu="pass"),
            tiered(static="pass", compile="pass", cpu="pass", gpu="pass"),
            tiered(static="pass", compile="compile_error"),
        ],
    )
    assert (row.n, row.compiled, row.cpu_correct, row.correct) == (3, 2, 1, 2)


def test_problem_rows_count_tiers_verdicts_and_speed():
    row = problem_row(
        "p1",
        [
            result("pass", "gpu", speedup=2.0),
            result("pass", "gpu", speedup=1.2),
            result("value_mismatch", "gpu"),
            result("compile_error", "compile"),
        ],
    )
    assert (row.n, row.compiled, row.cpu_correct, row.correct) == (4, 3, 3, 2)
    assert row.fast == {"0.0": 2, "0.5": 2, "0.8": 2, "1.0": 2, "1.5": 1, "2.0": 0}
    assert row.best_speedup == 2.0
    assert row.verdicts == {"compile_error": 1, "pass": 2, "value_mismatch": 1}


def test_aggregate_at_the_cpu_tier_reports_compile_and_cpu_pass_at_k_only():
    rows = [
        problem_row("a", [result("pass", "cpu"), result("value_mismatch", "cpu")]),
        problem_row("b", [result("compile_error", "compile"), result("unsupported", "cpu")]),
    ]
    agg = aggregate(rows, Tier.CPU, [1, 2])
    assert agg.greedy is None
    assert agg.sampled.metrics == {
        "compile@1": pytest.approx((1.0 + 0.5) / 2),
        "compile@2": 1.0,
        "cpu_correct@1": pytest.approx(0.25),
        "cpu_correct@2": 0.5,
    }
    assert agg.sampled.fast_p == {}
    assert agg.verdicts == {"compile_error": 1, "pass": 1, "unsupported": 1, "value_mismatch": 1}
    assert (agg.problems, agg.samples, agg.sampled.samples) == (2, 4, 4)


def test_aggregate_at_the_gpu_tier_adds_correct_and_fast_p():
    rows = [
        problem_row("a", [result("pass", "gpu", 2.0), result("pass", "gpu", 0.9)]),
        problem_row("b", [result("value_mismatch", "gpu"), result("pass", "gpu", 1.2)]),
    ]
    agg = aggregate(rows, Tier.GPU, [1, 2])
    assert agg.sampled.metrics["correct@1"] == pytest.approx(0.75)
    assert agg.sampled.metrics["correct@2"] == 1.0
    # a: 2.0 and 0.9 (each correct), b: one correct at 1.2 of two -> per problem shares, averaged
    assert agg.sampled.fast_p == {
        "0.0": pytest.approx((1.0 + 0.5) / 2),
        "0.5": pytest.approx((1.0 + 0.5) / 2),
        "0.8": pytest.approx((1.0 + 0.5) / 2),
        "1.0": pytest.approx((0.5 + 0.5) / 2),
        "1.5": pytest.approx(0.25),
        "2.0": 0.0,
    }


def test_the_greedy_sample_is_scored_apart_and_never_enters_pass_at_k():
    # Problem a: the greedy answer compiles, both i.i.d. samples fail; b: the other way round.
    rows = [
        problem_row("a", [result("compile_error", "compile")] * 2, greedy=result("value_mismatch", "cpu")),
        problem_row(
            "b", [result("pass", "cpu"), result("compile_error", "compile")], greedy=result("compile_error", "compile")
        ),
    ]
    agg = aggregate(rows, Tier.CPU, [1, 2])
    assert agg.greedy.problems == 2
    assert agg.greedy.metrics == {"compile@1": 0.5, "cpu_correct@1": 0.0}
    assert agg.greedy.verdicts == {"compile_error": 1, "value_mismatch": 1}
    # pass@k sees only the i.i.d. samples: a 0/2 compiled, b 1/2 compiled and cpu-correct
    assert agg.sampled.metrics == {"compile@1": 0.25, "compile@2": 0.5, "cpu_correct@1": 0.25, "cpu_correct@2": 0.5}
    assert agg.sampled.verdicts == {"compile_error": 3, "pass": 1}
    assert (agg.samples, agg.verdicts) == (6, {"compile_error": 4, "pass": 1, "value_mismatch": 1})
    assert (rows[0].n, rows[0].greedy.n, rows[0].greedy.compiled) == (2, 1, 1)


def test_a_greedy_only_run_has_no_pass_at_k_block():
    rows = [problem_row("a", [], greedy=result("pass", "gpu", 1.7)), problem_row("b", [], greedy=result("pass", "cpu"))]
    agg = aggregate(rows, Tier.GPU, [])
    assert agg.sampled is None
    assert agg.greedy.metrics == {
        "compile@1": 1.0,
        "cpu_correct@1": 1.0,
        "correct@1": 0.5,
        "fast_0.0": 0.5,
        "fast_0.5": 0.5,
        "fast_0.8": 0.5,
        "fast_1.0": 0.5,
        "fast_1.5": 0.5,
        "fast_2.0": 0.0,
    }


def test_per_problem_scores_are_what_the_aggregate_averages():
    row = problem_row(
        "a",
        [result("pass", "cpu"), result("compile_error", "compile"), result("pass", "cpu")],
        greedy=result("compile_error", "compile"),
    )
    assert greedy_scores(row, Tier.CPU) == {"compile@1": 0.0, "cpu_correct@1": 0.0}
    assert sampled_scores(row, Tier.COMPILE, [1, 2]) == {"compile@1": pytest.approx(2 / 3), "compile@2": 1.0}
    assert greedy_scores(problem_row("b", [result("pass", "cpu")]), Tier.CPU) == {}
    assert sampled_scores(problem_row("c", [], greedy=result("pass", "cpu")), Tier.CPU, [1]) == {}


def test_internal_errors_are_reported_apart_and_left_out_of_every_denominator():
    samples = [
        tiered(static="pass", compile="pass", cpu="pass"),
        tiered(static="pass", compile="pass", cpu="internal_error"),
        tiered(static="pass", compile="internal_error"),
    ]
    row = problem_row("p1", samples)
    assert (row.n, row.internal_errors, row.compiled, row.cpu_correct) == (1, 2, 1, 1)
    assert row.verdicts == {"internal_error": 2, "pass": 1}
    broken = problem_row("p2", [tiered(static="pass", compile="internal_error")])
    agg = aggregate([row, broken], Tier.CPU, [1])
    # one judged sample, which passed: the verifier's faults cost the model nothing
    assert agg.sampled.metrics == {"compile@1": 1.0, "cpu_correct@1": 1.0}
    assert (agg.samples, agg.internal_errors) == (1, 3)


def test_a_greedy_sample_the_verifier_failed_on_leaves_the_greedy_block_out():
    rows = [
        problem_row("a", [], greedy=tiered(static="pass", compile="internal_error")),
        problem_row("b", [], greedy=result("pass", "cpu")),
    ]
    agg = aggregate(rows, Tier.CPU, [])
    assert agg.greedy.problems == 1 and agg.greedy.metrics == {"compile@1": 1.0, "cpu_correct@1": 1.0}
    assert (agg.samples, agg.internal_errors) == (1, 1)


def test_fast_p_is_the_share_of_problems_correct_and_faster_than_p():
    # four problems: correct at 2.5x, 1.2x and 0.6x eager, one incorrect (None)
    speedups = [2.5, 1.2, 0.6, None]
    assert [fast_p(speedups, p) for p in (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)] == [0.75, 0.75, 0.5, 0.5, 0.25, 0.25]
    assert fast_p([1.0], 1.0) == 0.0  # strictly faster than p
    assert fast_p([], 1.0) == 0.0


def test_the_geometric_mean_speedup_covers_correct_samples_only():
    assert geometric_mean_speedup([2.0, 0.5, 4.0, None]) == pytest.approx(4 ** (1 / 3))  # (2 * 0.5 * 4) ** (1/3)
    assert geometric_mean_speedup([None, None]) is None


def test_the_kernelbench_block_scores_the_greedy_sample_else_the_first_one_per_problem():
    rows = [
        # greedy drawn: it is the scored sample, whatever the i.i.d. ones did
        problem_row("a", [result("pass", "gpu", 9.0)], greedy=result("pass", "gpu", 2.0, compile_speedup=1.6)),
        # no greedy sample: the first i.i.d. one is scored (KernelBench's sample_id 0)
        problem_row("b", [result("pass", "gpu", 0.5, compile_speedup=0.25), result("pass", "gpu", 8.0)]),
        problem_row("c", [result("value_mismatch", "gpu"), result("pass", "gpu", 3.0)]),
        # the verifier failed on its scored sample: left out of the denominator
        problem_row("d", [tiered(static="pass", compile="pass", cpu="pass", gpu="internal_error")]),
    ]
    assert rows[1].scored.model_dump() == {
        "greedy": False,
        "correct": True,
        "speedup": 0.5,
        "compile_speedup": 0.25,
        "fast": {"0.0": True, "0.5": False, "0.8": False, "1.0": False, "1.5": False, "2.0": False},
    }
    assert rows[3].scored is None
    block = aggregate(rows, Tier.GPU, [1]).kernelbench
    assert (block.problems, block.greedy, block.correct) == (3, 1, 2)
    assert block.fast_p == {"0.0": 2 / 3, "0.5": 1 / 3, "0.8": 1 / 3, "1.0": 1 / 3, "1.5": 1 / 3, "2.0": 0.0}
    assert block.geo_mean_speedup == pytest.approx(1.0)  # sqrt(2.0 * 0.5)
    assert block.fast_p_compile == {"0.0": 2 / 3, "0.5": 1 / 3, "0.8": 1 / 3, "1.0": 1 / 3, "1.5": 1 / 3, "2.0": 0.0}
    assert block.geo_mean_compile_speedup == pytest.approx((1.6 * 0.25) ** 0.5)
    assert aggregate(rows, Tier.CPU, [1]).kernelbench is None  # no speedups below the GPU tier


def test_without_torch_compile_timings_the_block_has_no_compile_figures():
    block = aggregate([problem_row("a", [result("pass", "gpu", 1.5)])], Tier.GPU, [1]).kernelbench
    assert (block.fast_p["1.0"], block.fast_p_compile, block.geo_mean_compile_speedup) == (1.0, {}, None)


def test_rows_of_older_results_report_only_the_thresholds_they_counted():
    row = problem_row("a", [result("pass", "gpu", 1.2)], greedy=result("pass", "gpu", 1.2))
    old = row.model_copy(
        update={"fast": {"1.0": 1, "1.5": 0}, "greedy": row.greedy.model_copy(update={"fast": {"1.0": 1, "1.5": 0}})}
    )
    assert {k: v for k, v in greedy_scores(old, Tier.GPU).items() if k.startswith("fast_")} == {
        "fast_1.0": 1.0,
        "fast_1.5": 0.0,
    }
    assert {k: v for k, v in sampled_scores(old, Tier.GPU, [1]).items() if k.startswith("fast_")} == {
        "fast_1.0": 1.0,
        "fast_1.5": 0.0,
    }


def test_a_chain_passes_a_tier_when_any_attempt_did_and_keeps_its_last_verdict():
    fixed = [result("compile_error", "compile"), tiered(static="pass", compile="pass", cpu="value_mismatch")]
    still_failing = [result("no_code", "static"), result("compile_error", "compile")]
    counts = chain_counts([fixed, still_failing])
    assert (counts.n, counts.compiled, counts.cpu_correct) == (2, 1, 0)
    assert counts.verdicts == {"compile_error": 1, "value_mismatch": 1}


def test_a_chain_whose_first_attempt_hit_a_verifier_fault_stays_out_of_n():
    counts = chain_counts([[result("internal_error", "compile")], [result("compile_error", "compile")]])
    assert (counts.n, counts.internal_errors) == (1, 1)


def test_pass_at_k_within_repairs_sits_beside_the_plain_figure_on_the_same_denominator():
    failed, passed = result("compile_error", "compile"), result("pass", "compile")
    plain = problem_row("p", [failed, failed], greedy=failed)
    row = plain.model_copy(
        update={"repaired": repaired_counts(1, [[failed, passed], [failed, failed]], greedy=[failed, passed])}
    )
    agg = aggregate([row], Tier.COMPILE, [1, 2])
    assert agg.sampled.metrics == {"compile@1": 0.0, "compile@2": 0.0}
    assert agg.repaired.sampled.metrics == {"compile@1": 0.5, "compile@2": 1.0}
    assert agg.repaired.sampled.samples == agg.sampled.samples == 2
    assert (agg.greedy.metrics, agg.repaired.greedy.metrics) == ({"compile@1": 0.0}, {"compile@1": 1.0})
    assert (agg.repaired.rounds, agg.repaired.repairs) == (1, 3)


def test_a_run_without_repair_rounds_has_no_repaired_block():
    assert aggregate([problem_row("p", [result("pass", "compile")])], Tier.COMPILE, [1]).repaired is None
