"""`cuset eval`: scoring given answers end to end, generating with a model, input errors, report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cuset_core.cli import app
from cuset_core.evaluation.metrics import aggregate, problem_row
from cuset_core.evaluation.report import render_markdown
from cuset_core.evaluation.runner import EvalConfig, EvalReport, SampleRecord, load_problems
from cuset_core.verify.result import Tier, Verdict, VerifyResult

DEMO = Path(__file__).resolve().parents[2] / "cuset_core" / "demo"


def fenced(code: str) -> str:
    return f"Here is the kernel.\n```python\n{code}```\n"


def broken_vector_add() -> str:
    """The demo solution with an undeclared identifier inside its kernel."""
    code = (DEMO / "solutions" / "01_vector_add.py").read_text()
    return fenced(code.replace("    if (i < n) {", "    if (i < n) { undeclared_name = 1;", 1))


@pytest.fixture
def problem_dir(tmp_path) -> Path:
    folder = tmp_path / "problems"
    folder.mkdir()
    for name in ("01_vector_add", "02_relu"):
        (folder / f"{name}.py").write_text((DEMO / "problems" / f"{name}.py").read_text())
    return folder


def run_cli(*args: str):
    return CliRunner().invoke(app, ["eval", *args])


@pytest.mark.nvcc
def test_scoring_one_right_and_one_wrong_answer_at_the_compile_tier(tmp_path, problem_dir):
    answers = tmp_path / "answers.jsonl"
    answers.write_text(
        json.dumps({"problem_id": "02_relu", "answer": fenced((DEMO / "solutions" / "02_relu.py").read_text())})
        + "\n" + json.dumps({"id": "01_vector_add", "samples": [broken_vector_add()]}) + "\n"
    )
    out = tmp_path / "out"
    outcome = run_cli("--answers", str(answers), "--problems", str(problem_dir), "--tier", "compile",
                      "--out", str(out), "--quiet", "--cache-dir", str(tmp_path / "cache"))
    assert outcome.exit_code == 0, outcome.output
    results = json.loads((out / "results.json").read_text())
    assert results["aggregate"]["metrics"] == {"compile@1": 0.5}
    assert results["aggregate"]["verdicts"] == {"compile_error": 1, "pass": 1}
    rows = {row["id"]: (row["n"], row["compiled"]) for row in results["problems"]}
    assert rows == {"01_vector_add": (1, 0), "02_relu": (1, 1)}
    assert [s["result"]["verdict"] for s in results["samples"]] == ["compile_error", "pass"]
    assert "| problem | n | compiled | verdicts |\n|---|---|---|---|\n" in (out / "results.md").read_text()
    assert "| 02_relu | 1 | 1 | pass 1 |" in (out / "results.md").read_text()


def test_generating_with_a_model_scores_every_sample(tmp_path, problem_dir, tiny_model_dir):
    out = tmp_path / "out"
    outcome = run_cli("--model", str(tiny_model_dir), "--problems", str(problem_dir), "--samples", "2",
                      "--tier", "static", "--max-new-tokens", "4", "--out", str(out), "--quiet", "--no-cache")
    assert outcome.exit_code == 0, outcome.output
    results = json.loads((out / "results.json").read_text())
    assert results["aggregate"]["samples"] == 4
    assert results["aggregate"]["k_values"] == [1, 2]
    assert [(s["problem_id"], s["index"]) for s in results["samples"]] == [
        ("01_vector_add", 0), ("01_vector_add", 1), ("02_relu", 0), ("02_relu", 1),
    ]
    assert all(s["completion_tokens"] <= 4 for s in results["samples"])


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"problem_id": "02_relu", "answer": "x"}\nnot json\n', "error: answers.jsonl line 2: not valid JSON"),
        ('{"problem_id": "02_relu"}\n', 'error: answers.jsonl line 1: expected {"problem_id", "answer": str}'),
        ('{"problem_id": "nope", "answer": "x"}\n', "error: answers.jsonl line 1: problem id 'nope' is not in"),
        ("\n", "error: answers.jsonl: no answers"),
    ],
)
def test_a_bad_answers_file_is_one_clear_line_and_exit_2(tmp_path, problem_dir, content, message):
    answers = tmp_path / "answers.jsonl"
    answers.write_text(content)
    outcome = run_cli("--answers", str(answers), "--problems", str(problem_dir), "--out", str(tmp_path / "o"))
    assert outcome.exit_code == 2
    assert outcome.output.startswith(message)
    assert len(outcome.output.strip().splitlines()) == 1


def test_model_and_answers_together_are_refused(tmp_path, problem_dir):
    outcome = run_cli("--model", "m", "--answers", "a.jsonl", "--problems", str(problem_dir), "--out", "o")
    assert (outcome.exit_code, outcome.output.strip()) == (
        2, "error: options: give exactly one of model (to generate answers) or answers (to score them)"
    )


def test_an_unknown_problem_set_is_refused(tmp_path):
    outcome = run_cli("--answers", "a.jsonl", "--problems", str(tmp_path / "missing"), "--out", "o")
    assert outcome.exit_code == 2
    assert outcome.output.startswith("error: problems: ")


def test_problems_load_from_jsonl_with_line_numbers(tmp_path):
    path = tmp_path / "set.jsonl"
    path.write_text('{"id": "a", "problem": "code a"}\n{"id": 7, "problem": "code b"}\n')
    assert [(p.id, p.code) for p in load_problems(str(path))] == [("a", "code a"), ("7", "code b")]
    path.write_text('{"id": "a", "problem": "x"}\n{"id": "a", "problem": "y"}\n')
    with pytest.raises(ValueError, match="line 2: duplicate id 'a'"):
        load_problems(str(path))


def test_the_markdown_report_has_metrics_verdicts_and_one_row_per_problem():
    results = {"a": [VerifyResult(verdict=Verdict.PASS, tier=Tier.GPU, speedup=1.75)],
               "b": [VerifyResult(verdict=Verdict.COMPILE_ERROR, tier=Tier.COMPILE)]}
    rows = [problem_row(pid, rs) for pid, rs in results.items()]
    report = EvalReport(
        config=EvalConfig(answers=Path("answers.jsonl"), problems="demo", tier=Tier.GPU),
        aggregate=aggregate(rows, Tier.GPU, [1]),
        problems=rows,
        samples=[SampleRecord(problem_id=pid, index=0, answer="...", result=rs[0]) for pid, rs in results.items()],
        elapsed_s=1.25,
    )
    assert render_markdown(report) == (
        "# Evaluation results\n\n"
        "answers `answers.jsonl` on `demo`: 2 problems, 2 samples, tier `gpu`, 1.2 s.\n\n"
        "| metric | value |\n|---|---|\n"
        "| compile@1 | 0.500 |\n| cpu_correct@1 | 0.500 |\n| correct@1 | 0.500 |\n"
        "| fast_1.0 | 0.500 |\n| fast_1.5 | 0.500 |\n\n"
        "| verdict | samples |\n|---|---|\n| compile_error | 1 |\n| pass | 1 |\n\n"
        "| problem | n | compiled | cpu_correct | correct | best speedup | verdicts |\n"
        "|---|---|---|---|---|---|---|\n"
        "| a | 1 | 1 | 1 | 1 | 1.75 | pass 1 |\n"
        "| b | 1 | 0 | 0 | 0 | - | compile_error 1 |\n"
    )
