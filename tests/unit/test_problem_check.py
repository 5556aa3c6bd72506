"""Problem-only datasets: every problem a KernelBench one, checked before anything runs it."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from cuset_core.cli import app
from cuset_core.demo import demo_problems
from cuset_core.evaluation.problem_check import ProblemIssue, problem_issues

VALID = demo_problems()[1].problem_code


def test_a_demo_problem_has_no_issues():
    assert problem_issues(VALID) == []


def test_each_missing_part_is_named():
    assert problem_issues(VALID.replace("class Model", "class Net")) == [
        ProblemIssue(0, "no top-level `class Model` (the reference nn.Module)")
    ]
    without_inputs = VALID.replace("def get_inputs", "def make_inputs")
    assert [str(issue) for issue in problem_issues(without_inputs)] == ["no top-level `def get_inputs()`"]
    [issue] = problem_issues(VALID.replace("def forward", "def run"))
    assert issue.message == "`class Model` has no `forward` method" and issue.line > 0


def test_a_syntax_error_gives_its_line():
    assert problem_issues("import torch\n\ndef get_inputs(:\n") == [ProblemIssue(3, "not valid Python: invalid syntax")]


def test_cuset_data_validate_problems_checks_a_jsonl_pool_and_a_folder(tmp_path):
    pool = tmp_path / "pool.jsonl"
    rows = [{"id": "good", "problem": VALID}, {"id": "bad", "problem": VALID.replace("def get_init_inputs", "def x")}]
    pool.write_text("".join(json.dumps(row) + "\n" for row in rows))
    outcome = CliRunner().invoke(app, ["data", "validate", "--problems", str(pool)])
    assert outcome.exit_code == 1
    assert "2 problems, 1 valid, 1 with errors" in outcome.output
    assert "bad: no top-level `def get_init_inputs()`" in outcome.output
    folder = tmp_path / "level1"
    folder.mkdir()
    (folder / "19_ReLU.py").write_text(VALID)
    outcome = CliRunner().invoke(app, ["data", "validate", "--problems", "--json", str(folder)])
    assert outcome.exit_code == 0 and json.loads(outcome.output) == {"problems": 1, "invalid": 0, "issues": []}


def test_a_path_that_is_no_problem_set_is_a_usage_error(tmp_path):
    outcome = CliRunner().invoke(app, ["data", "validate", "--problems", str(tmp_path / "missing.txt")])
    assert outcome.exit_code != 0 and "is not a folder of .py files" in outcome.output
