"""`cuset kernelbench check PATH`: every problem of a KernelBench checkout's levels, its reference run
as tier 2 runs it, and a report naming the problems tier 2 cannot verify with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cuset_core.cli import app
from cuset_core.evaluation.inputs import EvalInputError
from cuset_core.evaluation.kernelbench_check import ProblemCheck, level_folders, problem_files, write_report
from cuset_core.verify.result import Verdict

RELU = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


batch_size = 4096
dim = 393216 * 1


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
"""

UNREDUCIBLE = RELU.replace("torch.rand(batch_size, dim)", "torch.rand(*[4096, 393216])")


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A KernelBench checkout in today's layout: KernelBench/level1/<n>_<name>.py."""
    level1 = tmp_path / "KernelBench" / "KernelBench" / "level1"
    level1.mkdir(parents=True)
    (level1 / "19_ReLU.py").write_text(RELU)
    (level1 / "2_Unreducible.py").write_text(UNREDUCIBLE)
    (level1 / "notes.py").write_text("# not a problem: no number\n")
    return tmp_path / "KernelBench"


def test_the_levels_are_found_from_the_checkout_its_kernelbench_folder_or_a_level_folder(checkout):
    level1 = checkout / "KernelBench" / "level1"
    assert level_folders(checkout) == level_folders(checkout / "KernelBench") == {1: level1}
    assert level_folders(level1) == {1: level1}
    assert [path.name for path in problem_files(level1)] == ["2_Unreducible.py", "19_ReLU.py"]
    with pytest.raises(EvalInputError, match="no KernelBench problem folder \\(level2\\)"):
        level_folders(checkout, [2])


def test_the_report_counts_each_level_and_gives_the_reason_of_every_problem_it_cannot_verify(tmp_path):
    checks = [
        ProblemCheck(level=1, problem="19_ReLU", verdict=Verdict.PASS, reason="the reference runs", seconds=3.0),
        ProblemCheck(level=1, problem="2_U", verdict=Verdict.UNSUPPORTED, reason="too | large", seconds=1.0),
    ]
    data, markdown = write_report(checks, tmp_path)
    assert [row["problem"] for row in json.loads(data.read_text())] == ["19_ReLU", "2_U"]
    text = markdown.read_text()
    assert "| 1 | 2 | 1 | 1 | 0 |" in text
    assert "| 1 | 2_U | unsupported | too \\| large |" in text and "19_ReLU |" not in text


def test_a_missing_checkout_is_a_usage_error(tmp_path):
    outcome = CliRunner().invoke(app, ["kernelbench", "check", str(tmp_path / "nowhere")])
    assert outcome.exit_code == 2
    assert "no KernelBench problem folder" in outcome.output


@pytest.mark.slow
def test_todays_sizes_are_reduced_and_an_unreducible_problem_is_unsupported_with_its_reason(checkout, tmp_path):
    outcome = CliRunner().invoke(app, ["kernelbench", "check", str(checkout), "--out", str(tmp_path / "report")])
    assert outcome.exit_code == 0, outcome.output
    assert "1 of 2 problems verifiable at tier 2" in outcome.output
    checks = {row["problem"]: row for row in json.loads((tmp_path / "report" / "kernelbench_check.json").read_text())}
    assert checks["19_ReLU"]["verdict"] == "pass"
    assert "sizes reduced: " in checks["19_ReLU"]["reason"] and "dim=393216->" in checks["19_ReLU"]["reason"]
    assert checks["2_Unreducible"]["verdict"] == "unsupported"
    assert checks["2_Unreducible"]["unsupported_feature"] == "problem too large for tier 2"


EINOPS = RELU.replace("import torch.nn as nn\n", "import torch.nn as nn\nfrom einops import rearrange\n").replace(
    "return torch.relu(x)", 'return rearrange(torch.relu(x), "b d -> d b")'
)


def test_a_problem_that_imports_einops_is_verifiable_as_todays_mamba2_problems_are(tmp_path):
    level3 = tmp_path / "KernelBench" / "KernelBench" / "level3"
    level3.mkdir(parents=True)
    (level3 / "48_Rearranged.py").write_text(EINOPS)
    outcome = CliRunner().invoke(
        app, ["kernelbench", "check", str(tmp_path / "KernelBench"), "--levels", "3", "--out", str(tmp_path / "report")]
    )
    assert outcome.exit_code == 0, outcome.output
    [check] = json.loads((tmp_path / "report" / "kernelbench_check.json").read_text())
    assert (check["problem"], check["verdict"]) == ("48_Rearranged", "pass"), check["reason"]
