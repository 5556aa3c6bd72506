"""Verified self-training: what a round keeps, the leakage check, and resumable rounds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cuset_core.cli import app
from cuset_core.demo import demo_problems
from cuset_core.evaluation.scoring import SampleRecord
from cuset_core.improve.keep import KeptSample, fingerprint, keep_passing, normalised
from cuset_core.improve.loop import SelfTrainingConfig, SelfTrainingError, check_no_leakage
from cuset_core.verify.result import Tier, Verdict, VerifyResult

DEMO = {p.id: p for p in demo_problems()}
RELU = DEMO["02_relu"].solution_code


def record(problem_id: str, index: int, answer: str, verdict: Verdict = Verdict.PASS) -> SampleRecord:
    tiers = {Tier.STATIC: Verdict.PASS, Tier.COMPILE: Verdict.PASS, Tier.CPU: verdict}
    return SampleRecord(
        problem_id=problem_id,
        index=index,
        answer=answer,
        result=VerifyResult(verdict=verdict, tier=Tier.CPU, tier_verdicts=tiers),
    )


def renamed(code: str) -> str:
    """The same kernel with other names, other comments and other spacing."""
    return (
        code.replace("relu_kernel", "my_relu").replace("relu_cuda", "apply_relu").replace("    ", "  ")
        + "\n// tuned by hand\n"
    )


def test_answers_that_differ_only_in_names_comments_and_spacing_are_one():
    assert normalised(RELU) == normalised(renamed(RELU))
    assert fingerprint(RELU) == fingerprint(renamed(RELU))
    assert fingerprint(RELU) != fingerprint(DEMO["06_sigmoid"].solution_code)


def test_a_round_keeps_new_passing_answers_up_to_the_limit_per_problem():
    sigmoid = DEMO["06_sigmoid"].solution_code
    records = [
        record("02_relu", 0, RELU),
        record("02_relu", 1, renamed(RELU)),  # a duplicate of sample 0
        record("02_relu", 2, RELU.replace("0.0f", "0.f"), Verdict.VALUE_MISMATCH),  # failed: never kept
        record("06_sigmoid", 0, sigmoid),
        record("06_sigmoid", 1, sigmoid.replace("1.0f", "1.f")),
    ]
    kept = keep_passing(records, Tier.CPU, 1, [], max_per_problem=1)
    assert [(k.problem_id, k.index, k.round) for k in kept] == [("02_relu", 0, 1), ("06_sigmoid", 0, 1)]
    # Next round: what earlier rounds kept counts against the limit and as a duplicate.
    again = keep_passing(records, Tier.CPU, 2, kept, max_per_problem=2)
    assert [(k.problem_id, k.index) for k in again] == [("06_sigmoid", 1)]


def test_a_pool_that_shares_a_problem_with_the_eval_set_is_refused(tmp_path):
    pool = tmp_path / "pool.jsonl"
    # A held-out demo problem, re-commented and re-indented, is still the same problem.
    softplus = "# my own copy\n" + DEMO["10_softplus"].problem_code.replace("    ", "  ")
    rows = [{"id": "mine", "problem": softplus}, {"id": "other", "problem": DEMO["02_relu"].problem_code}]
    pool.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = SelfTrainingConfig(model="m", problems=str(pool), out_dir=tmp_path / "out", eval_problems="demo:held-out")
    with pytest.raises(
        SelfTrainingError, match=r"1 problem\(s\) of the pool are in the eval set .*mine \(= 10_softplus\)"
    ):
        check_no_leakage(config)
    check_no_leakage(config.model_copy(update={"eval_problems": None}))
    outcome = CliRunner().invoke(
        app,
        [
            "improve",
            "--model",
            "m",
            "--problems",
            str(pool),
            "--out",
            str(tmp_path / "o"),
            "--eval-problems",
            "demo:held-out",
        ],
    )
    assert outcome.exit_code == 1 and "10_softplus" in outcome.output
    assert not (tmp_path / "o" / "round_1").exists()


def test_two_rounds_run_resume_and_report_on_the_tiny_model(tmp_path, tiny_model_dir):
    train = tmp_path / "train.jsonl"
    prompt = [{"role": "user", "content": "Write a CUDA kernel for relu."}]
    train.write_text(json.dumps({"messages": [*prompt, {"role": "assistant", "content": RELU}]}) + "\n")
    pool = tmp_path / "pool.jsonl"
    rows = [{"id": pid, "problem": DEMO[pid].problem_code} for pid in ("02_relu", "06_sigmoid")]
    pool.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "run"
    args = [
        "improve", "--model", str(tiny_model_dir), "--problems", str(pool), "--out", str(out), "--rounds", "2",
        "--samples", "2", "--tier", "static", "--train-file", str(train), "--max-steps", "1", "--max-tokens", "8",
        "--quiet",
    ]  # fmt: skip
    outcome = CliRunner().invoke(app, args)
    assert outcome.exit_code == 0, outcome.output
    report = json.loads((out / "report.json").read_text())
    assert [r["round"] for r in report["rounds"]] == [1, 2]
    first, second = report["rounds"]
    assert first["sampled"] == 4 and first["model"] == str(tiny_model_dir)
    assert first["trained"] and second["model"] == first["tuned_model"]  # round 2 samples round 1's adapter
    # Eight tokens pass nothing, so round 2 kept nothing new: it does not tune the same rows again.
    assert second["kept"] == 0 and not second["trained"] and second["tuned_model"] is None
    assert "round 2: nothing new kept, so no tuning" in outcome.output
    assert f"model {first['tuned_model']}" in outcome.output  # the run's model is round 1's adapter
    assert Path(first["tuned_model"], "adapter_config.json").is_file()
    assert set(first["seconds"]) == {"sample_verify", "train"}
    assert (out / "kept.jsonl").is_file()
    # The same command again resumes: every round is done, nothing is sampled or trained again.
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    assert "round 1: done before" in again.output and "round 2: done before" in again.output
    # In another checkout (results kept, adapters not) the missing adapter is tuned again.
    import shutil

    shutil.rmtree(first["tuned_model"])
    moved = CliRunner().invoke(app, args)
    assert moved.exit_code == 0, moved.output
    assert "round 1: its tuned model is missing here; tuning it again" in moved.output
    assert Path(first["tuned_model"], "adapter_config.json").is_file()
    # A round stopped after its sampling stage reports the time that stage took then, not ~0 s.
    (out / "round_1" / "round.json").unlink()
    resumed = CliRunner().invoke(app, args)
    assert resumed.exit_code == 0, resumed.output
    sampled_s = json.loads((out / "round_1" / "eval" / "results.json").read_text())["elapsed_s"]
    seconds = json.loads((out / "round_1" / "round.json").read_text())["seconds"]
    assert seconds["sample_verify"] == round(sampled_s, 3)


def test_kept_samples_are_a_training_file_and_resume_reads_them_back(tmp_path):
    from cuset_core.improve.loop import _write_kept, read_kept

    problems = {"02_relu": DEMO["02_relu"].problem_code}
    kept = [KeptSample("02_relu", 1, 3, RELU, fingerprint(RELU))]
    _write_kept(tmp_path / "kept_new.jsonl", kept, problems, "compact", with_origin=True)
    assert read_kept(tmp_path / "kept_new.jsonl") == kept
    row = json.loads((tmp_path / "kept_new.jsonl").read_text())
    assert [m["role"] for m in row["messages"]] == ["user", "assistant"] and row["messages"][1]["content"] == RELU


def test_a_rounds_stages_are_written_every_tenth_and_at_their_end(tmp_path):
    import io

    from cuset_core.improve.__main__ import StageLines
    from cuset_core.training.callbacks import ProgressWriter
    from cuset_core.training.progress_lines import StageLine, parse_line

    path = tmp_path / "progress.jsonl"
    lines = StageLines(ProgressWriter(path, stream=io.StringIO(), enabled=True), rounds=3)
    for stage in ("sampling", "verifying"):
        for done in range(1, 97):
            lines(2, stage, done, 96)
    written = [parse_line(raw) for raw in path.read_text().splitlines()]
    assert all(isinstance(line, StageLine) and line.round == 2 and line.rounds == 3 for line in written)
    for stage in ("sampling", "verifying"):
        done = [line.done for line in written if line.stage == stage]
        assert done[0] == 1 and done[-1] == 96  # the first advance and the end
        assert len(done) == 11  # the first, then the first problem of each further tenth
        assert [10 * d // 96 for d in done] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
