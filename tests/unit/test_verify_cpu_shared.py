"""Tier 2 on real answers of the shared KernelBench SFT set (they passed KernelBench on a GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuset_core.generation.prompts import reference_from_question
from cuset_core.verify.candidate import parse_candidate
from cuset_core.verify.cpu import run_cpu_tier
from cuset_core.verify.result import Verdict
from cuset_core.verify.settings import SandboxLimits, VerifySettings

pytestmark = [pytest.mark.shared_data, pytest.mark.slow]

# KernelBench's input seed, as an evaluation fixes it: at the second size a matmul sums K=4,096
# products in float32, and an output that lands near zero differs from the reference by about
# fp32's 1e-4 tolerance, so 6 of 24 random seeds refused problem 2's correct answer (a known false
# refusal, docs/verification.md "Trial inputs and sizes"). Seed 1000 passes.
SETTINGS = VerifySettings(limits=SandboxLimits(wall_s=300, cpu_s=300), input_seed=1000)


def first_answer(shared_data: Path, level: int, problem: int) -> tuple[str, str]:
    """(problem code, answer) of the first answer with a ``__global__`` kernel for a problem."""
    import pyarrow.parquet as pq

    rows = pq.read_table(shared_data / "kernelbench_sft_train.parquet").to_pylist()
    row = next(r for r in rows if r["level"] == level and r["problem"] == str(problem) and "__global__" in r["answer"])
    return reference_from_question(row["question"]), row["answer"]


@pytest.mark.parametrize("problem", [2, 3])
def test_correct_matmul_answers_pass_on_reduced_sizes(shared_data, problem):
    problem_code, answer = first_answer(shared_data, 1, problem)
    result = run_cpu_tier(problem_code, parse_candidate(answer), SETTINGS)
    assert result.verdict is Verdict.PASS, result.reason + result.log
    assert "sizes reduced" in result.reason


def test_answer_whose_kernel_is_never_called_is_caught(shared_data):
    # Level 1 problem 1's first answer builds the a + b example kernel but returns torch.matmul.
    problem_code, answer = first_answer(shared_data, 1, 1)
    result = run_cpu_tier(problem_code, parse_candidate(answer), SETTINGS)
    assert result.verdict is Verdict.STATIC_REJECT
    assert result.reason.startswith("policy kernels: trial 1: aten::mm computed on device data"), result.reason
