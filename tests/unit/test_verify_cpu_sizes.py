"""Tier 2's size reduction never blames the candidate (issue 13, part 6).

A problem whose reduced sizes break the reference (a LayerNorm whose ``normalized_shape`` is a
literal) and a kernel that hard-codes the sizes (``#define N 4096``) are checked at their
original sizes when those fit, and are ``unsupported`` with the reason when they do not; never a
``runtime_error``. Builds real extensions with g++, so marked slow.
"""

from __future__ import annotations

import pytest

from cuset_core.verify.candidate import parse_candidate
from cuset_core.verify.cpu import run_cpu_tier
from cuset_core.verify.cpu.sizes import ORIGINAL_SIZE_FACTOR
from cuset_core.verify.execution.reference_pool import ReferencePool
from cuset_core.verify.result import Tier, Verdict
from cuset_core.verify.settings import SandboxLimits, VerifySettings

pytestmark = pytest.mark.slow

ORIGINAL = 4096  # elements of each problem below at its original sizes
FITS = VerifySettings(tier=Tier.CPU, max_elements=1024, limits=SandboxLimits(wall_s=300, cpu_s=300))
TOO_BIG = FITS.model_copy(update={"max_elements": ORIGINAL // ORIGINAL_SIZE_FACTOR - 1})

LAYERNORM_PROBLEM = """
import torch
import torch.nn as nn

batch_size = 8
dim = 512


class Model(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape, elementwise_affine=False)

    def forward(self, x):
        return self.ln(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [(512,)]  # a literal: shrinking ``dim`` breaks the reference
"""

LAYERNORM_CANDIDATE = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>

__global__ void layernorm_rows(const float* x, float* y, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* row = x + (long)r * cols;
    float mean = 0.0f, var = 0.0f;
    for (int c = 0; c < cols; ++c) mean += row[c];
    mean /= cols;
    for (int c = 0; c < cols; ++c) var += (row[c] - mean) * (row[c] - mean);
    float inv = rsqrtf(var / cols + 1e-5f);
    for (int c = 0; c < cols; ++c) y[(long)r * cols + c] = (row[c] - mean) * inv;
}

torch::Tensor layernorm(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int cols = x.size(-1);
    int rows = x.numel() / cols;
    layernorm_rows<<<(rows + 63) / 64, 64>>>(x.data_ptr<float>(), y.data_ptr<float>(), rows, cols);
    return y;
}
"""

ext = load_inline(name="ln_ext", cpp_sources="torch::Tensor layernorm(torch::Tensor x);",
                  cuda_sources=cuda_src, functions=["layernorm"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()

    def forward(self, x):
        return ext.layernorm(x.contiguous())
'''

RELU_PROBLEM = """
import torch
import torch.nn as nn

n_elements = 4096


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(n_elements)]


def get_init_inputs():
    return []
"""

DEFINE_SIZED_CANDIDATE = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#define N 4096

__global__ void relu_fixed(const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) y[i] = fmaxf(x[i], 0.0f);
}

torch::Tensor relu(torch::Tensor x) {
    auto y = torch::empty({N}, x.options());
    relu_fixed<<<N / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>());
    return y;
}
"""

ext = load_inline(name="relu_fixed_ext", cpp_sources="torch::Tensor relu(torch::Tensor x);",
                  cuda_sources=cuda_src, functions=["relu"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x)
'''


# The module's candidates are one batch, as an eval's samples are: one reference run per problem
# and settings (a reference side is a sandboxed process that imports torch, seconds of CPU).
REFERENCES = ReferencePool()


def tier2(problem: str, candidate: str, settings: VerifySettings):
    return run_cpu_tier(problem, parse_candidate(candidate), settings, references=REFERENCES)


def test_a_reduction_that_breaks_the_reference_runs_the_original_sizes():
    result = tier2(LAYERNORM_PROBLEM, LAYERNORM_CANDIDATE, FITS)
    assert result.verdict is Verdict.PASS, result.reason + result.log
    assert "the reduced problem broke the reference" in result.reason and "original sizes used" in result.reason


def test_a_reduction_that_breaks_the_reference_is_unsupported_when_the_original_is_too_big():
    result = tier2(LAYERNORM_PROBLEM, LAYERNORM_CANDIDATE, TOO_BIG)
    assert (result.verdict, result.unsupported_feature) == (Verdict.UNSUPPORTED, "original problem sizes")
    assert result.reason.startswith(
        "the reduced problem breaks the reference (reference forward failed: Given normalized_shape=[512]"
    )
    assert result.reason.endswith("its original sizes are too large for tier 2")


def test_a_kernel_with_hard_coded_sizes_is_judged_at_the_original_sizes():
    result = tier2(RELU_PROBLEM, DEFINE_SIZED_CANDIDATE, FITS)
    assert result.verdict is Verdict.PASS, result.reason + result.log
    assert result.reason.startswith("at the original sizes: 5 trials within tolerance; at reduced sizes: ")


def test_a_kernel_with_hard_coded_sizes_is_unsupported_when_the_original_is_too_big():
    result = tier2(RELU_PROBLEM, DEFINE_SIZED_CANDIDATE, TOO_BIG)
    assert (result.verdict, result.unsupported_feature) == (Verdict.UNSUPPORTED, "hard-coded problem sizes")
    assert result.reason.startswith("the candidate hard-codes the problem's sizes (n_elements=4096)")


def test_planning_sizes_loads_no_torch_dynamo_and_plans_as_it_would_with_it():
    # torch's Python references import torch._dynamo on their first meta-device call (about a
    # second per reference side); the plan must not need it, nor differ without it.
    import json
    import subprocess
    import sys
    from pathlib import Path

    probe = (
        "import json, sys\n"
        "from cuset_core.demo import demo_problems\n"
        "from cuset_core.verify.cpu.harness import size_overrides\n"
        "codes = [p.problem_code for p in demo_problems()][:8]\n"
        "without = [size_overrides(code, 1 << 12) for code in codes]\n"
        "loaded = 'torch._dynamo' in sys.modules\n"
        "import torch._dynamo\n"
        "print(json.dumps([loaded, without, [size_overrides(code, 1 << 12) for code in codes]]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    loaded, without, with_dynamo = json.loads(done.stdout.splitlines()[-1])
    assert not loaded
    assert without == with_dynamo and any(without)  # some demo problems do shrink to 4,096 elements


# ---------------------------------------------------------------- a timeout at the reduced sizes

BIG_RELU_PROBLEM = RELU_PROBLEM.replace("n_elements = 4096", "n_elements = 1 << 20")
QUICK = VerifySettings(tier=Tier.CPU, max_elements=1 << 16, limits=SandboxLimits(wall_s=120, cpu_s=4))


def relu_candidate(body: str) -> str:
    """A relu answer whose kernel runs ``body`` (with ``x``, ``y``, ``i`` and ``n``) per thread."""
    return f'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>

__global__ void relu_each(const float* x, float* y, long n) {{
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
{body}
}}

torch::Tensor relu(torch::Tensor x) {{
    auto y = torch::empty_like(x);
    long n = x.numel();
    relu_each<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}}
"""

ext = load_inline(name="relu_each_ext", cpp_sources="torch::Tensor relu(torch::Tensor x);",
                  cuda_sources=cuda_src, functions=["relu"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x)
'''


@pytest.mark.slow
def test_a_right_kernel_too_slow_at_the_reduced_sizes_is_a_timeout_that_says_it_passes_at_smaller_ones():
    # Every thread reads the whole input (a count of NaNs, always 0): right, and quadratic in the
    # data, as kernels that give each output element a block of threads are in fibers. Past the
    # 4 CPU-s limit at 65,536 elements; at 1,024 it takes a fraction of a second. The judge cannot
    # tell it from a kernel that never ends above 1,024 elements, so the timeout stands.
    slow = "    float nans = 0.0f;\n    for (long j = 0; j < n; ++j) nans += x[j] != x[j];\n    y[i] = fmaxf(x[i], 0.0f) + nans;"
    result = run_cpu_tier(BIG_RELU_PROBLEM, parse_candidate(relu_candidate(slow)), QUICK)
    assert result.verdict is Verdict.TIMEOUT, result.reason
    assert "; at the smaller sizes n_elements=1024 it passes (5 trials within tolerance" in result.reason
    assert result.reason.endswith("so the timeout stands")
    assert any(name.startswith("smaller_") for name in result.timings_s)


@pytest.mark.slow
def test_a_kernel_that_never_ends_times_out_at_the_smaller_sizes_too():
    endless = "    for (;;) y[i] += 1.0f;"
    result = run_cpu_tier(BIG_RELU_PROBLEM, parse_candidate(relu_candidate(endless)), QUICK)
    assert result.verdict is Verdict.TIMEOUT
    assert result.reason.startswith("at the smaller sizes n_elements=1024: ")
    assert "it timed out at the reduced sizes" in result.reason


def rowsum_elements(overrides: dict[str, int], rows: int = 64, cols: int = 131072) -> int:
    """Elements of a rowsum problem's input, as ``measure`` gives them."""
    return overrides.get("ROWS", rows) * overrides.get("COLS", cols)


def test_the_whole_size_plan_keeps_the_most_shrunk_dimension_and_shrinks_the_others_to_one():
    from cuset_core.verify.cpu.sizes import plan_reduction, whole_size_plan

    constants = {"ROWS": 64, "COLS": 131072}
    first = plan_reduction(constants, rowsum_elements, 1 << 18)
    assert first == {"COLS": 4096}  # 64 rows of 4,096: a kernel right up to 8,192 columns passes here
    # One row of 131,072 columns fits half the budget: every column a GPU would sum is summed.
    assert whole_size_plan(constants, first, rowsum_elements, 1 << 17) == {"ROWS": 1}


def test_no_whole_size_plan_when_nothing_shrank_or_none_fits():
    from cuset_core.verify.cpu.sizes import whole_size_plan

    assert whole_size_plan({"ROWS": 64, "COLS": 1000}, {}, rowsum_elements, 1 << 17) is None
    # A dimension too large alone for the budget: the halved budget's sizes are the second size.
    huge = {"ROWS": 64, "COLS": 1 << 20}
    assert whole_size_plan(huge, {"COLS": 4096}, lambda o: rowsum_elements(o, cols=1 << 20), 1 << 17) is None


WIDE_ROWSUM_PROBLEM = """import torch
import torch.nn as nn

ROWS = 64
COLS = 131072


class Model(nn.Module):
    def forward(self, x):
        return x.sum(dim=1)


def get_inputs():
    return [torch.randn(ROWS, COLS, device="cuda")]


def get_init_inputs():
    return []
"""

RIGHT_UP_TO_8192_COLUMNS = r'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda = r"""
#include <torch/extension.h>
__global__ void rowsum_kernel(const float* x, float* out, int cols) {
    double total = 0;
    int seen = cols < 8192 ? cols : 8192;  // right only where the columns fit a buffer of 8,192
    for (int j = 0; j < seen; ++j) total += x[blockIdx.x * cols + j];
    out[blockIdx.x] = total;
}
torch::Tensor rowsum(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_kernel<<<x.size(0), 1>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
"""
ext = load_inline(name="capped_ext", cpp_sources="torch::Tensor rowsum(torch::Tensor x);", cuda_sources=cuda,
                  functions=["rowsum"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.rowsum(x)
'''


@pytest.mark.slow
def test_a_kernel_right_only_up_to_a_reduced_dimension_fails_at_its_whole_size():
    settings = VerifySettings(tier=Tier.CPU, limits=SandboxLimits(wall_s=300, cpu_s=300))
    result = run_cpu_tier(WIDE_ROWSUM_PROBLEM, parse_candidate(RIGHT_UP_TO_8192_COLUMNS), settings)
    assert result.verdict is Verdict.VALUE_MISMATCH, (result.verdict, result.reason, result.log[-1500:])
    assert result.reason.startswith("at the sizes ROWS=1:"), result.reason
