"""The issue-6 experiment scripts: runs differ only in their objective, and the sweep report
reads what the sweep writes."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def comparison():
    return load_script("run_comparison")


@pytest.fixture(scope="module")
def report():
    pytest.importorskip("matplotlib")
    return load_script("results_report")


def test_every_run_of_a_size_trains_the_same_way_except_the_objective(comparison):
    size = comparison.SIZES["small"]
    configs = [comparison.job_config(size, run, "smollm2-135m") for run in comparison.schedule(size)]
    same_seed = [c for c in configs if c["seed"] == 0]

    assert {c["method"]["type"] for c in same_seed} == set(comparison.METHODS)
    for config in same_seed:
        assert {k: v for k, v in config.items() if k != "method"} == {
            k: v for k, v in same_seed[0].items() if k != "method"
        }


def test_the_schedule_puts_sft_and_cuset_first_and_second_seeds_last(comparison):
    names = [run.name for run in comparison.schedule(comparison.SIZES["small"])]

    assert names[:2] == ["sft-s0", "cuset-s0"]
    assert names[7:9] == ["sft-s1", "cuset-s1"]
    assert len(names) == len(set(names)) == 14


def test_a_sweep_variant_changes_only_its_knobs(comparison):
    size = comparison.SIZES["small"]
    default = comparison.job_config(size, comparison.Run("cuset", 1), "smollm2-135m")
    variant_run = comparison.Run("cuset", 1, {"region_threshold": 0.5, "reweight_lambda": 3.0}, "thr0.5-lam3")
    variant = comparison.job_config(size, variant_run, "smollm2-135m")

    assert variant_run.name == "thr0.5-lam3-s1"
    assert variant["method"] == {"type": "cuset", "region_threshold": 0.5, "reweight_lambda": 3.0}
    assert {k: v for k, v in variant.items() if k != "method"} == {k: v for k, v in default.items() if k != "method"}


def test_every_sweep_variant_is_a_valid_method_config(comparison):
    from cuset_core.objectives import MethodConfig

    for knobs in comparison.SWEEP.values():
        MethodConfig(type="cuset", **knobs)


def judge_report(sensitive_p: float) -> dict:
    group = {"tokens": 10, "mean_p": sensitive_p, "share_high": 0.2, "share_low": 0.4}
    return {
        "records": 3,
        "thresholds": {"high": 0.9, "low": 0.5},
        "tokens": {"supervised": 40, "sensitive": 10, "sensitive_share": 0.25},
        "groups": {"sensitive": group, "non_sensitive": {**group, "mean_p": 0.7}, "indexing": group},
        "regions": {"low_confidence_share": 0.3},
    }


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_the_sweep_table_lists_base_then_the_baselines_then_the_variants(report, tmp_path):
    for name, p in (("mask0.6-s1", 0.61), ("cuset-s1", 0.60), ("base", 0.50), ("sft-s1", 0.59)):
        write_json(tmp_path / "sweep" / "judge" / name / "report.json", judge_report(p))
    write_json(tmp_path / "sweep" / "mask0.6-s1" / "job_base.json", {"method": {"type": "cuset", "mask_ratio": 0.6}})
    progress = [
        {"type": "progress", "step": s, "ce": 1.0, "kept_ratio": 0.5, "low_conf_region_share": 0.1, "weight_max": 1.2}
        for s in (1, 2)
    ]
    (tmp_path / "sweep" / "mask0.6-s1" / "progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in progress))

    lines = report.sweep_section(tmp_path)
    table = [line for line in lines if line.startswith("| ") and not line.startswith("| model")][:4]

    assert [row.split(" | ")[0] for row in table] == ["| base", "| sft-s1", "| cuset-s1", "| mask0.6-s1"]
    assert "cuset: mask_ratio=0.6 | 0.6100" in table[3]
    assert table[3].endswith("| 1.0000 | 0.500 | 0.100 | 1.200 |")


def test_the_sweep_section_says_when_the_sweep_has_not_run(report, tmp_path):
    assert "has not run yet" in report.sweep_section(tmp_path)[0]


def test_the_metrics_table_reads_evals_from_before_and_after_the_greedy_split(report):
    legacy = {"metrics": {"compile@1": 0.5, "compile@2": 0.75}, "verdicts": {"pass": 1}, "samples": 2}
    split = {
        "greedy": {"metrics": {"compile@1": 1.0}},
        "sampled": {"metrics": {"compile@1": 0.25, "compile@2": 0.5}},
        "verdicts": {"pass": 2},
        "samples": 3,
    }
    assert report.metrics_of(legacy) == {"compile@1": 0.5, "compile@2": 0.75}
    # pass@k keeps the plain names; the greedy sample's metrics are named apart
    assert report.metrics_of(split) == {"greedy compile@1": 1.0, "compile@1": 0.25, "compile@2": 0.5}
    runs = {
        "sft-s0": {"method": "sft", "seed": 0, "eval": {"aggregate": split}},
        "sft-s1": {"method": "sft", "seed": 1, "eval": {"aggregate": legacy}},
    }
    row = next(line for line in report.metrics_table(runs) if line.startswith("| sft |"))
    assert row.startswith("| sft | 0,1 | 0.375 ± 0.125 (n=2) | 0.625 ± 0.125 (n=2) |")


def test_an_experiment_eval_draws_the_greedy_sample_apart_and_k_minus_1_iid_ones(comparison, monkeypatch):
    commands = []
    monkeypatch.setattr(comparison, "call", lambda command, **_: commands.append(command) or 1)
    size = comparison.SIZES["small"]
    out = comparison.ROOT / "runs" / "never-written"
    assert not comparison.evaluate(size, "smollm2-135m", out, comparison.ROOT / "cuset_core" / "demo")
    command = commands[0]
    assert command[command.index("--samples") + 1] == str(size.samples - 1)
    assert "--no-greedy" not in command


def test_the_gate_reads_the_greedy_block_not_pass_at_k(tmp_path):
    elementwise = load_script("run_elementwise")
    results = tmp_path / "results.json"
    results.write_text(
        json.dumps(
            {"aggregate": {"greedy": {"metrics": {"compile@1": 0.5}}, "sampled": {"metrics": {"compile@1": 0.125}}}}
        )
    )
    assert elementwise.metric(results, "compile@1") == 0.5


def test_the_elementwise_split_holds_out_operations_not_rows():
    elementwise = load_script("run_elementwise")
    trained, held = elementwise.split_ops()
    assert not set(trained) & set(held) and len(held) == round(len(set(elementwise.KERNELBENCH_OPS.values())) / 3)
    assert held == sorted(held) and (trained, held) == elementwise.split_ops()  # seeded: the same every time
