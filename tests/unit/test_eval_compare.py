"""Paired comparison of two evaluations: the bootstrap interval on known data, reading results
files (current and from before the greedy sample was drawn apart), and `cuset eval-compare`."""

from __future__ import annotations

import json

import pytest
from eval_support import BROKEN, PASS, WRONG, write_results
from typer.testing import CliRunner

from cuset_core.cli import app
from cuset_core.evaluation.compare import compare_runs, paired_bootstrap, read_run
from cuset_core.evaluation.config import EvalConfig


def test_identical_models_give_an_interval_around_zero():
    scores = [1.0, 0.0, 1.0, 1.0, 0.0, 0.5, 0.25, 0.0]
    assert paired_bootstrap(scores, scores) == (0.0, 0.0, 0.0)
    # equally good but on different problems: the differences average 0 and the interval straddles it
    a, b = [1.0, 0.0] * 10, [0.0, 1.0] * 10
    difference, low, high = paired_bootstrap(a, b)
    assert difference == 0.0 and low < 0.0 < high


def test_a_dominating_model_gives_an_interval_above_zero():
    a = [1.0] * 12 + [0.0] * 8
    b = [0.0] * 20
    b[0] = 1.0  # B solves one problem A also solves
    difference, low, high = paired_bootstrap(a, b)
    assert difference == pytest.approx(11 / 20)
    assert 0.0 < low < difference < high <= 1.0
    difference, low, high = paired_bootstrap(b, a)
    assert high < 0.0


def test_the_bootstrap_is_seeded_and_its_interval_widens_with_coverage():
    a, b = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0], [0.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    assert paired_bootstrap(a, b, seed=3) == paired_bootstrap(a, b, seed=3)
    _, low_90, high_90 = paired_bootstrap(a, b, confidence=0.90)
    _, low_99, high_99 = paired_bootstrap(a, b, confidence=0.99)
    assert low_99 <= low_90 and high_90 <= high_99


def test_the_bootstrap_refuses_unpaired_scores():
    with pytest.raises(ValueError, match="equally long"):
        paired_bootstrap([1.0, 0.0], [1.0])
    with pytest.raises(ValueError, match="non-empty"):
        paired_bootstrap([], [])


def test_runs_are_compared_per_metric_on_the_same_problems(tmp_path):
    good = {f"p{i}": (PASS, [PASS, WRONG]) for i in range(8)}
    bad = {f"p{i}": (BROKEN, [BROKEN, BROKEN]) for i in range(8)}
    a, b = (
        read_run(write_results(tmp_path / "a" / "results.json", good)),
        read_run(write_results(tmp_path / "b" / "results.json", bad)),
    )
    comparison = compare_runs([a], [b], resamples=2000)
    by_metric = {item.metric: item for item in comparison.intervals}
    assert list(by_metric) == [
        "greedy:compile@1",
        "greedy:cpu_correct@1",
        "sampled:compile@1",
        "sampled:compile@2",
        "sampled:cpu_correct@1",
        "sampled:cpu_correct@2",
    ]
    greedy = by_metric["greedy:cpu_correct@1"]
    assert (greedy.problems, greedy.a, greedy.b, greedy.difference, greedy.low, greedy.high) == (
        8,
        1.0,
        0.0,
        1.0,
        1.0,
        1.0,
    )
    assert by_metric["sampled:cpu_correct@1"].difference == pytest.approx(0.5)
    assert by_metric["sampled:cpu_correct@2"].difference == pytest.approx(1.0)


def test_results_from_before_the_greedy_split_read_sample_0_as_the_greedy_one(tmp_path):
    legacy = {
        "config": {"model": "m", "problems": "p", "samples": 2, "greedy_first": True, "tier": "cpu"},
        "aggregate": {"tier": "cpu", "k_values": [1, 2], "metrics": {"compile@1": 0.5}},
        "problems": [{"id": "p1"}],
        "samples": [
            {"problem_id": "p1", "index": 0, "answer": "...", "result": PASS.model_dump(mode="json")},
            {"problem_id": "p1", "index": 1, "answer": "...", "result": BROKEN.model_dump(mode="json")},
        ],
    }
    path = tmp_path / "results.json"
    path.write_text(json.dumps(legacy))
    run = read_run(tmp_path)
    row = run.rows[0]
    assert (row.greedy.n, row.greedy.cpu_correct, row.n, row.compiled) == (1, 1, 1, 0)
    assert EvalConfig.model_validate(legacy["config"]).samples == 1  # 1 greedy + 1 i.i.d.
    # only one i.i.d. sample per problem: pass@2 cannot be estimated and is skipped, not clamped
    comparison = compare_runs([run], [run])
    assert [item.metric for item in comparison.intervals if item.metric.startswith("sampled")] == [
        "sampled:compile@1",
        "sampled:cpu_correct@1",
    ]
    assert comparison.skipped == ["sampled:*@2: a problem has fewer than 2 i.i.d. samples"]


def test_the_seeds_of_a_side_are_averaged_per_problem(tmp_path):
    # seed 0 solves p0 and p1 greedily, seed 1 only p0: per problem 1.0, 0.5, 0.0, 0.0 against B's zeros
    seed0 = {
        "p0": (PASS, [PASS, PASS]),
        "p1": (PASS, [PASS, BROKEN]),
        "p2": (BROKEN, [BROKEN] * 2),
        "p3": (BROKEN, [BROKEN] * 2),
    }
    seed1 = {**seed0, "p1": (BROKEN, [BROKEN] * 2)}
    zeros = {pid: (BROKEN, [BROKEN] * 2) for pid in seed0}
    a = [read_run(write_results(tmp_path / f"a{i}.json", scored)) for i, scored in enumerate((seed0, seed1))]
    comparison = compare_runs(a, [read_run(write_results(tmp_path / "b.json", zeros))], resamples=1000)
    greedy = next(item for item in comparison.intervals if item.metric == "greedy:cpu_correct@1")
    assert (greedy.problems, greedy.a, greedy.b, greedy.difference) == (4, 0.375, 0.0, 0.375)
    assert comparison.a == f"{tmp_path / 'a0.json'} + {tmp_path / 'a1.json'}"


def test_eval_compare_prints_the_table_and_writes_it(tmp_path):
    a = write_results(tmp_path / "a" / "results.json", {f"p{i}": (PASS, [PASS, PASS]) for i in range(4)})
    b = write_results(tmp_path / "b" / "results.json", {f"p{i}": (PASS, [PASS, PASS]) for i in range(4)})
    out = tmp_path / "cmp"
    outcome = CliRunner().invoke(
        app, ["eval-compare", str(a), f"{b.parent},{b}", "--resamples", "500", "--out", str(out)]
    )
    assert outcome.exit_code == 0, outcome.output
    assert "| greedy:cpu_correct@1 | 4 | 1.000 | 1.000 | +0.000 | [+0.000, +0.000] |" in outcome.output
    saved = json.loads((out / "comparison.json").read_text())
    assert (saved["resamples"], saved["seed"], saved["confidence"]) == (500, 0, 0.95)
    assert (out / "comparison.md").read_text() in outcome.output


def test_eval_compare_refuses_runs_over_different_problems(tmp_path):
    a = write_results(tmp_path / "a" / "results.json", {"p1": (PASS, [PASS, PASS])})
    b = write_results(tmp_path / "b" / "results.json", {"p2": (PASS, [PASS, PASS])})
    outcome = CliRunner().invoke(app, ["eval-compare", str(a), str(b)])
    assert outcome.exit_code == 2
    assert outcome.output.strip() == f"error: the runs cover different problems: only in {a} ['p1'], only in {b} ['p2']"
    missing = CliRunner().invoke(app, ["eval-compare", str(tmp_path / "none"), str(b)])
    assert (missing.exit_code, missing.output.strip()) == (2, f"error: {tmp_path / 'none'}: no results.json found")


def test_a_comparison_across_tiers_names_the_metrics_it_could_not_compare(tmp_path):
    """A cpu-tier run against a compile-tier one is compared at compile; cpu_correct is not
    dropped without a word: it is named, with the reason, in the result and its markdown."""
    from cuset_core.evaluation.compare import render_comparison
    from cuset_core.verify.result import Tier

    scored = {f"p{i}": (PASS, [PASS, WRONG]) for i in range(4)}
    cpu = read_run(write_results(tmp_path / "cpu" / "results.json", scored))
    compile_only = read_run(write_results(tmp_path / "compile" / "results.json", scored)).model_copy(
        update={"tier": Tier.COMPILE}
    )

    comparison = compare_runs([cpu], [compile_only], resamples=200)

    assert comparison.tier is Tier.COMPILE
    assert [i.metric for i in comparison.intervals] == ["greedy:compile@1", "sampled:compile@1", "sampled:compile@2"]
    assert comparison.not_compared == ["greedy:cpu_correct@1", "sampled:cpu_correct@1", "sampled:cpu_correct@2"]
    reason = next(r for r in comparison.skipped if r.startswith("greedy:cpu_correct@1"))
    assert "verified to tier cpu" in reason and "only to tier compile" in reason
    assert "Not compared (in one run only): greedy:cpu_correct@1" in render_comparison(comparison)


def test_a_metric_only_one_side_has_is_named_not_dropped(tmp_path):
    with_greedy = read_run(write_results(tmp_path / "a" / "results.json", {"p0": (PASS, [PASS, WRONG])}))
    without = read_run(write_results(tmp_path / "b" / "results.json", {"p0": (None, [PASS, WRONG])}))

    comparison = compare_runs([with_greedy], [without], resamples=100)

    assert "greedy:compile@1" in comparison.not_compared
    assert any(r.startswith("greedy:compile@1: not compared: only A has it") for r in comparison.skipped)
    assert all(i.metric.startswith("sampled:") for i in comparison.intervals)
