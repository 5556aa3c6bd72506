"""Today's KernelBench writes its sizes as expressions and tuples (``N = 2048 * 2``, ``M = 16384 * 2``,
``bias_shape = (out_channels, 1, 1)``, ``dim = 393216``): tier 2 reduces them, and a problem it
cannot reduce is ``unsupported`` with the reason before its reference runs (issue 24, part 1)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from cuset_core.paths import CorePaths
from cuset_core.verify.candidate import parse_candidate
from cuset_core.verify.cpu import run_cpu_tier
from cuset_core.verify.cpu.sizes import (
    ORIGINAL_SIZE_FACTOR,
    TIME_SCALE_CAP,
    int_constants,
    plan_reduction,
    scaled_limits,
    with_constants,
)
from cuset_core.verify.execution.library_cache import LibraryCache
from cuset_core.verify.result import Tier, Verdict
from cuset_core.verify.settings import SandboxLimits, VerifySettings

DEMO = Path(__file__).resolve().parents[2] / "cuset_core" / "demo"
SETTINGS = VerifySettings(tier=Tier.CPU, limits=SandboxLimits(wall_s=300, cpu_s=300))

TODAYS_SIZES = """
batch_size = 4096
dim = 393216
N = 2048 * 2
M = 16384 * 2
K = N // 4
shift = 1 << 12
out_channels = 16
bias_shape = (out_channels, 1, 1)
input_shape = (3, 224, 224)
ratio = 0.5
flag = True
"""


def test_expressions_and_tuple_elements_of_int_literals_are_sizes_and_derived_ones_are_not():
    assert int_constants(ast.parse(TODAYS_SIZES)) == {
        "batch_size": 4096,
        "dim": 393216,
        "N": 4096,
        "M": 32768,
        "shift": 4096,
        "out_channels": 16,
        "bias_shape[1]": 1,  # literals beside a name: sizes too, though too small ever to shrink
        "bias_shape[2]": 1,
        "input_shape[0]": 3,
        "input_shape[1]": 224,
        "input_shape[2]": 224,
    }


def test_overridden_sizes_are_written_as_literals_and_derived_sizes_follow_them():
    tree = with_constants(ast.parse(TODAYS_SIZES), {"N": 256, "input_shape[1]": 56, "out_channels": 8})
    namespace: dict = {}
    exec(compile(tree, "problem.py", "exec"), namespace)
    assert (namespace["N"], namespace["K"]) == (256, 64)
    assert namespace["input_shape"] == (3, 56, 224)
    assert namespace["bias_shape"] == (8, 1, 1)
    assert (namespace["M"], namespace["ratio"], namespace["flag"]) == (32768, 0.5, True)


def test_chained_and_unpacked_assignments_are_sizes_too():
    source = "height = width = 256\nD, H, W = 16, 32, 2 * 16\n"
    assert int_constants(ast.parse(source)) == {"height": 256, "width": 256, "D": 16, "H": 32, "W": 32}
    namespace: dict = {}
    exec(
        compile(with_constants(ast.parse(source), {"height": 64, "width": 64, "H": 8, "W": 8}), "p.py", "exec"),
        namespace,
    )
    assert [namespace[name] for name in ("height", "width", "D", "H", "W")] == [64, 64, 16, 8, 8]


def test_a_halving_that_breaks_the_problem_is_undone_and_the_others_go_on():
    """``num_groups = 512`` must divide ``hidden_size``: halving hidden_size below it raises; the
    plan keeps the last size that worked and shrinks the others."""
    sizes = {"batch_size": 1024, "hidden_size": 8192, "num_groups": 512}

    def elements(overrides: dict[str, int]) -> int:
        now = sizes | overrides
        if now["hidden_size"] % now["num_groups"]:
            raise ValueError("num_groups must divide hidden_size")
        return now["batch_size"] * now["hidden_size"]

    plan = plan_reduction(sizes, elements, 1 << 16)
    assert elements(plan) <= 1 << 16
    assert plan["hidden_size"] % plan.get("num_groups", 512) == 0


@pytest.mark.parametrize("expression", ["2 ** 70", "1 << 100", "10 / 2", "float(8)", "n * 2", "True"])
def test_what_is_not_an_int_size_is_left_alone(expression):
    assert int_constants(ast.parse(f"x = {expression}\n")) == {}


def test_sizes_of_one_value_shrink_together():
    """``width = 224`` and ``input_shape = (3, 224, 224)`` name one dimension: halving only one of
    them would break the problem."""
    sizes = int_constants(ast.parse("width = 224\ninput_shape = (3, 224, 224)\nbatch = 64\n"))

    def elements(overrides: dict[str, int]) -> int:
        now = sizes | overrides
        return now["batch"] * now["input_shape[1]"] * now["input_shape[2]"]

    plan = plan_reduction(sizes, elements, 1 << 16)
    assert plan["width"] == plan["input_shape[1]"] == plan["input_shape[2]"]
    assert elements(plan) <= 1 << 16


SQUARE_MATMUL_TODAY = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


N = 2048 * 2


def get_inputs():
    return [torch.rand(N, N), torch.rand(N, N)]


def get_init_inputs():
    return []
"""

# Sizes computed in a function: nothing at module level to shrink, 1.6 G elements.
UNREDUCIBLE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def shape():
    return (4096, 393216)


def get_inputs():
    return [torch.rand(*shape())]


def get_init_inputs():
    return []
"""


def tier2(problem: str, candidate: str):
    return run_cpu_tier(problem, parse_candidate(candidate), SETTINGS, LibraryCache(CorePaths().cpu_libraries))


@pytest.mark.slow
def test_a_correct_kernel_for_todays_square_matmul_passes_at_reduced_sizes():
    result = tier2(SQUARE_MATMUL_TODAY, (DEMO / "solutions" / "25_matmul_naive.py").read_text())
    assert result.verdict is Verdict.PASS, result.reason + result.log
    assert "sizes reduced: N=4096->" in result.reason


@pytest.mark.slow
def test_a_problem_too_large_to_reduce_is_unsupported_before_its_reference_runs():
    result = tier2(UNREDUCIBLE, (DEMO / "solutions" / "02_relu.py").read_text())
    assert (result.verdict, result.unsupported_feature) == (Verdict.UNSUPPORTED, "problem too large for tier 2")
    assert "1,610,612,736 elements" in result.reason and "none of its sizes can shrink" in result.reason
    assert result.timings_s.get("cpu_reference", 0) < 60


def test_limits_grow_with_the_data_of_a_run_past_the_budget_and_time_at_most_by_its_cap():
    limits = SandboxLimits(wall_s=100, cpu_s=100, memory_mb=4096, workdir_mb=256, file_size_mb=256)
    assert scaled_limits(limits, 1000, 1000) == limits  # within the budget
    assert scaled_limits(limits, None, 1000) == limits  # size unknown: the sandbox's limits decide

    grown = scaled_limits(limits, 8 * 2**20, 2**20)  # 8 budgets of float32 data: 32 MiB a tensor
    assert (grown.workdir_mb, grown.file_size_mb) == (8 * 256, 8 * 256)
    assert grown.memory_mb == 4096 + (8 * 256 - 256) + 128  # the grown tmpfs, then the tensors
    assert (grown.wall_s, grown.cpu_s) == (100 * TIME_SCALE_CAP, 100 * TIME_SCALE_CAP)

    huge = scaled_limits(limits, 1000 * 2**20, 2**20)
    assert huge.workdir_mb == ORIGINAL_SIZE_FACTOR * 256  # never past what original_fits allows


@pytest.mark.slow
def test_a_rerun_at_the_original_sizes_gets_a_work_folder_sized_for_their_data():
    # 16 budgets of data: the inputs and expected outputs of its trials (40 MiB) overflow the 8 MiB
    # work folder that the reduced run fits in; the verifier, not the candidate, would fail there.
    from test_verify_cpu_sizes import DEFINE_SIZED_CANDIDATE, RELU_PROBLEM

    n = 1 << 20
    problem = RELU_PROBLEM.replace("n_elements = 4096", f"n_elements = {n}")
    candidate = DEFINE_SIZED_CANDIDATE.replace("#define N 4096", f"#define N {n}")  # fails reduced
    small = SandboxLimits(wall_s=300, cpu_s=300, workdir_mb=8, file_size_mb=8)
    settings = VerifySettings(tier=Tier.CPU, max_elements=n // 16, limits=small)

    result = run_cpu_tier(problem, parse_candidate(candidate), settings)

    assert result.verdict is Verdict.PASS, (result.reason, result.log[-2000:])
    assert result.reason.startswith("at the original sizes: 5 trials within tolerance; at reduced sizes: ")
