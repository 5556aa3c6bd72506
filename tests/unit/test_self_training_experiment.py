"""Issue 27's experiment driver: it keeps finished stages for later checkouts and restores them, verifies
kept passes again, and applies the ship rule written before the runs."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from cuset_core.evaluation.compare import EvalRun
from cuset_core.evaluation.metrics import ProblemRow, SampleCounts
from cuset_core.verify.result import Tier

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture()
def driver(monkeypatch, tmp_path):
    """scripts/run_self_training.py with its runs and results in ``tmp_path``."""
    monkeypatch.syspath_prepend(str(SCRIPTS))
    module = importlib.import_module("run_self_training")
    monkeypatch.setattr(module, "RUNS", tmp_path / "runs")
    monkeypatch.setattr(module, "RESULTS", tmp_path / "experiments")
    monkeypatch.setattr(module.common, "ROOT", tmp_path)
    yield module
    for name in ("run_self_training", "run_elementwise", "run_comparison"):
        sys.modules.pop(name, None)


def _finished_start_run(run_dir: Path) -> dict[str, torch.Tensor]:
    run_dir.mkdir(parents=True)
    weights = {"base_model.model.layers.0.q_proj.lora_A.weight": torch.randn(4, 8)}
    save_file(weights, run_dir / "adapter_model.safetensors")
    (run_dir / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "base_model_name_or_path": "/x"}))
    (run_dir / "cuset_base.json").write_text(json.dumps({"base_model": "smollm2-135m", "prompt_style": "compact"}))
    (run_dir / "job_base.json").write_text("{}\n")
    (run_dir / "progress.jsonl").write_text(json.dumps({"type": "done", "steps": 50}) + "\n")
    (run_dir / "checkpoint-50").mkdir()  # optimizer state: not kept
    return weights


def test_a_finished_start_run_is_kept_in_float16_and_restored_in_a_fresh_checkout(driver, monkeypatch, tmp_path):
    weights = _finished_start_run(driver.RUNS / "cuset-s0")

    driver.save_adapter(driver.RUNS / "cuset-s0", driver.RESULTS / "cuset" / "start")
    kept = driver.RESULTS / "cuset" / "start"
    assert sorted(path.name for path in kept.iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
        "cuset_base.json",
        "job_base.json",
        "progress.jsonl",
    ]
    assert load_file(kept / "adapter_model.safetensors")[next(iter(weights))].dtype is torch.float16
    assert json.loads((kept / "adapter_config.json").read_text())["base_model_name_or_path"] == "smollm2-135m"

    fresh = tmp_path / "fresh"
    monkeypatch.setattr(driver, "RUNS", fresh / "runs")
    driver.restore_adapter(driver.RESULTS / "cuset" / "start", driver.RUNS / "cuset-s0")
    assert driver.common.trained(fresh / "runs" / "cuset-s0"), "a later session does not train it again"
    # Nothing kept for this arm: nothing restored.
    driver.restore_adapter(driver.RESULTS / "sft" / "start", driver.RUNS / "sft-s0")
    assert not (fresh / "runs" / "sft-s0").exists()


def test_a_rounds_finished_adapter_is_kept_too(driver):
    _finished_start_run(driver.RUNS / "cuset" / "round_1" / "model")
    driver.save()
    kept = driver.RESULTS / "cuset" / "round_1" / "model"
    assert (kept / "adapter_model.safetensors").is_file() and driver.common.trained(kept)


def test_a_kept_tuning_without_its_weights_is_tuned_again_and_kept_whole(driver, tmp_path):
    # A checkout whose ignore rules dropped the weights holds only the progress log: restoring that
    # would give the loop a "finished" tuning with no model.
    kept = driver.RESULTS / "cuset" / "round_1" / "model"
    kept.mkdir(parents=True)
    (kept / "progress.jsonl").write_text(json.dumps({"type": "done"}) + "\n")
    fresh = tmp_path / "fresh" / "model"
    driver.restore_adapter(kept, fresh)
    assert not fresh.exists()

    _finished_start_run(driver.RUNS / "cuset" / "round_1" / "model")
    driver.save()
    assert (kept / "adapter_model.safetensors").is_file() and (kept / "adapter_config.json").is_file()
    driver.restore_adapter(kept, fresh)
    assert (fresh / "adapter_model.safetensors").is_file()


def test_an_unfinished_start_run_is_not_kept(driver):
    _finished_start_run(driver.RUNS / "sft-s0")
    (driver.RUNS / "sft-s0" / "progress.jsonl").write_text(json.dumps({"type": "step", "step": 3}) + "\n")
    driver.save_adapter(driver.RUNS / "sft-s0", driver.RESULTS / "sft" / "start")
    assert not (driver.RESULTS / "sft" / "start").exists()


def test_an_unfinished_sampling_stage_is_kept_and_restored_until_its_results_replace_it(driver, monkeypatch, tmp_path):
    round_1 = driver.RUNS / "cuset" / "round_1"
    (round_1 / "eval").mkdir(parents=True)
    (round_1 / "eval" / "checkpoint.jsonl").write_text('{"kind": "run"}\n{"kind": "drawn"}\n')

    driver.save()
    kept = driver.RESULTS / "cuset" / "round_1" / "eval" / "checkpoint.jsonl"
    assert kept.read_text() == (round_1 / "eval" / "checkpoint.jsonl").read_text()

    fresh = tmp_path / "fresh" / "round_1"
    driver.restore(kept.parent.parent, fresh)
    assert (fresh / "eval" / "checkpoint.jsonl").read_text() == kept.read_text(), "a later session goes on from it"

    (round_1 / "eval" / "checkpoint.jsonl").unlink()  # the loop removes it once the stage's results are written
    (round_1 / "eval" / "results.json").write_text("{}\n")
    driver.save()
    assert not kept.exists() and (kept.parent / "results.json").is_file()


def test_reverify_takes_each_rounds_passing_evaluation_answers_and_the_answers_it_kept(driver):
    round_1 = driver.RESULTS / "cuset" / "round_1"
    (round_1 / "eval_unseen").mkdir(parents=True)
    samples = [
        {"problem_id": "ew_unseen_a", "index": 0, "answer": "passing", "result": {"verdict": "pass"}},
        {"problem_id": "ew_unseen_a", "index": 1, "answer": "failing", "result": {"verdict": "compile_error"}},
    ]
    (round_1 / "eval_unseen" / "results.json").write_text(json.dumps({"samples": samples}))
    kept = {
        "messages": [{"role": "user", "content": "the problem"}, {"role": "assistant", "content": "kept answer"}],
        "cuset_origin": {"problem_id": "ew_000_pool", "round": 1, "index": 3, "fingerprint": "f"},
    }
    (round_1 / "kept_new.jsonl").write_text(json.dumps(kept) + "\n")

    assert driver._passed_answers("cuset", 1) == [
        ("eval_unseen #0", "ew_unseen_a", "passing"),
        ("kept #3", "ew_000_pool", "kept answer"),
    ]
    assert driver._passed_answers("sft", 1) == []


def _run(pass_counts: list[int]) -> EvalRun:
    """An evaluation at tier cpu: per problem, how many of its 4 samples passed."""
    rows = [
        ProblemRow(id=f"p{i}", n=4, compiled=4, cpu_correct=passed, greedy=SampleCounts(n=1, compiled=1))
        for i, passed in enumerate(pass_counts)
    ]
    return EvalRun(name="run", tier=Tier.CPU, k_values=[1, 4], rows=rows)


def test_the_ship_rule_ships_an_arm_only_when_it_beats_the_shipped_adapter_on_unseen_operations(driver):
    shipped = driver.Evaluated(unseen=_run([0] * 20), seen=_run([4, 0, 0, 0, 0]))
    better = driver.Evaluated(unseen=_run([4] * 15 + [0] * 5), seen=_run([4, 0, 0, 0, 0]))
    same = driver.Evaluated(unseen=_run([0] * 20), seen=_run([4, 0, 0, 0, 0]))

    arm, lines = driver.ship_decision({"cuset": same, "sft": better}, shipped)
    assert arm == "sft"
    assert "the highest is sft's" in lines[0] and "wholly above 0" in lines[1]
    assert lines[-1] == "**Decision: ship sft's round 3 adapter.**"

    # The best arm by pooled pass@4 ties the shipped adapter on the unseen operations: it stays.
    arm, lines = driver.ship_decision({"cuset": same, "sft": same}, shipped)
    assert arm is None and "the highest is cuset's" in lines[0] and "not wholly above 0" in lines[1]
    assert lines[-1] == "**Decision: the shipped adapter stays.**"

    # Better on the unseen operations, but more than 0.1 worse on the seen ones: it stays.
    forgets = driver.Evaluated(unseen=better.unseen, seen=_run([0] * 5))
    arm, lines = driver.ship_decision({"cuset": forgets}, shipped)
    assert arm is None and "more than 0.1 below" in lines[2]


def test_the_cpu_seconds_of_a_stages_processes_add_up_over_sessions(driver, tmp_path):
    spin = [sys.executable, "-c", "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"]
    folder = tmp_path / "experiments" / "cuset" / "round_1"
    for _ in range(2):  # two sessions, each working on the stage
        with driver.counted(folder, "improve"):
            assert driver.common.call(spin) == 0
    with driver.counted(folder, "eval_unseen"):
        pass  # found done: nothing started, nothing counted

    seconds = json.loads((folder / driver.CPU_FILE).read_text())
    assert list(seconds) == ["improve"] and 0.6 <= seconds["improve"] < 3
    assert driver.cpu_hours(folder) == seconds["improve"] / 3600
    assert driver.cpu_hours(tmp_path) is None
