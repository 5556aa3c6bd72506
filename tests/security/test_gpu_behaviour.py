"""GPU behaviour tier 2 reproduces, so that honest bugs a GPU would expose do not pass (issue 23):
uninitialised memory holds poison, launches a GPU refuses fail, and tier 2 runs the device code
tier 1 compiled.

Every candidate computes the row sums of ``cpu_cases/rowsum_problem.py``. The end-to-end cases
build an extension with g++ (seconds each with the cached preludes), so they are marked slow.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cuset_core.verify.candidate import parse_candidate
from cuset_core.verify.cpu import run_cpu_tier
from cuset_core.verify.execution.reference_pool import ReferencePool
from cuset_core.verify.result import Tier, Verdict, VerifyResult
from cuset_core.verify.run import verify
from cuset_core.verify.settings import SandboxLimits, VerifySettings

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))
from verify_cases import fenced, line_of  # noqa: E402

PROBLEM = (Path(__file__).parents[1] / "unit" / "cpu_cases" / "rowsum_problem.py").read_text()
SETTINGS = VerifySettings(tier=Tier.CPU, limits=SandboxLimits(wall_s=300, cpu_s=300))

ATOMIC_ROWSUM = """
#include <torch/extension.h>
__global__ void rowsum_atomic(const float* x, float* out, int rows, int cols) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows * cols) atomicAdd(&out[i / cols], x[i]);
}
torch::Tensor run(torch::Tensor x) {
    auto out = torch::ALLOCATE({x.size(0)}, x.options());
    int n = x.numel();
    rowsum_atomic<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(0), x.size(1));
    return out;
}
"""

SHARED_ACCUMULATOR = """
#include <torch/extension.h>
__global__ void rowsum_shared(const float* x, float* out, int cols) {
    __shared__ float total;
    if (threadIdx.x == 0) total = 0.f;
    __syncthreads();
    float v = 0.f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) v += x[blockIdx.x * cols + j];
    atomicAdd(&total, v);
    __syncthreads();
    if (threadIdx.x == 0) out[blockIdx.x] = total;
}
torch::Tensor run(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_shared<<<x.size(0), 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
"""

# Each block stages its row in 96 KiB of dynamic shared memory: more than the 48 KiB a kernel
# gets without cudaFuncSetAttribute.
BIG_SHARED = """
#include <torch/extension.h>
constexpr int kSharedBytes = 96 * 1024;
__global__ void rowsum_staged(const float* x, float* out, int cols) {
    extern __shared__ float row[];
    for (int j = threadIdx.x; j < cols; j += blockDim.x) row[j] = x[blockIdx.x * cols + j];
    __syncthreads();
    if (threadIdx.x == 0) {
        float total = 0.f;
        for (int j = 0; j < cols; ++j) total += row[j];
        out[blockIdx.x] = total;
    }
}
torch::Tensor run(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    OPT_IN
    rowsum_staged<<<x.size(0), 256, kSharedBytes>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
"""
OPT_IN = "cudaFuncSetAttribute(rowsum_staged, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes);"

# The host computes the sums; the kernel is launched on an empty grid and its error swallowed.
EMPTY_GRID = """
#include <torch/extension.h>
#include <vector>
__global__ void rowsum_kernel(const float* x, float* out, int cols) {}
torch::Tensor run(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    std::vector<float> in(x.numel()), sums(x.size(0));
    cudaMemcpy(in.data(), x.data_ptr<float>(), in.size() * sizeof(float), cudaMemcpyDeviceToHost);
    for (int r = 0; r < x.size(0); ++r) {
        double total = 0;
        for (int c = 0; c < x.size(1); ++c) total += in[r * x.size(1) + c];
        sums[r] = total;
    }
    cudaMemcpy(out.data_ptr<float>(), sums.data(), sums.size() * sizeof(float), cudaMemcpyHostToDevice);
    rowsum_kernel<<<0, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    cudaGetLastError();
    return out;
}
"""

# Right on the CPU runtime, wrong (every sum doubled) under nvcc.
IFDEF_ON_THE_RUNTIME = """
#include <torch/extension.h>
__global__ void rowsum_kernel(const float* x, float* out, int cols) {
    float total = 0.f;
    for (int j = 0; j < cols; ++j) total += x[blockIdx.x * cols + j];
#ifdef CUSET_CUDA_CPU_H
    out[blockIdx.x] = total;
#else
    out[blockIdx.x] = 2.f * total;
#endif
}
torch::Tensor run(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_kernel<<<x.size(0), 1>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
"""


def candidate(
    cuda: str, forward: str = "return ext.run(x)", signature: str = "torch::Tensor run(torch::Tensor x);"
) -> str:
    """A ``ModelNew`` that builds ``cuda`` with ``load_inline`` and runs ``forward``."""
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""{cuda}"""

ext = load_inline(name="rowsum_ext", cpp_sources="{signature}", cuda_sources=cuda_src, functions=["run"])


class ModelNew(nn.Module):
    def forward(self, x):
        {forward}
'''


# The module's candidates are one batch, as an eval's samples of a problem are: one reference run.
REFERENCES = ReferencePool()


def tier2(answer: str) -> VerifyResult:
    return run_cpu_tier(PROBLEM, parse_candidate(answer), SETTINGS, references=REFERENCES)


def assert_verdict(result: VerifyResult, verdict: Verdict) -> None:
    assert result.verdict is verdict, (result.verdict, result.reason, result.log[-2000:])


@pytest.mark.slow
def test_atomic_add_into_an_uninitialised_torch_empty_is_a_value_mismatch():
    result = tier2(candidate(ATOMIC_ROWSUM.replace("ALLOCATE", "empty")))
    assert_verdict(result, Verdict.VALUE_MISMATCH)
    assert "nan" in result.reason  # the poison: 0xFF bytes are a NaN


@pytest.mark.slow
def test_the_same_kernel_into_torch_zeros_passes():
    result = tier2(candidate(ATOMIC_ROWSUM.replace("ALLOCATE", "zeros")))
    assert_verdict(result, Verdict.PASS)
    assert result.launches == {"rowsum_atomic": SETTINGS.seeds}


@pytest.mark.slow
def test_atomic_add_into_an_uninitialised_python_torch_empty_is_a_value_mismatch():
    cuda = ATOMIC_ROWSUM.replace(
        "torch::Tensor run(torch::Tensor x) {\n    auto out = torch::ALLOCATE({x.size(0)}, x.options());",
        "torch::Tensor run(torch::Tensor x, torch::Tensor out) {",
    )
    forward = 'out = torch.empty(x.shape[0], device="cuda")\n        return ext.run(x, out)'
    result = tier2(candidate(cuda, forward, "torch::Tensor run(torch::Tensor x, torch::Tensor out);"))
    assert_verdict(result, Verdict.VALUE_MISMATCH)
    assert "nan" in result.reason


@pytest.mark.slow
def test_reading_uninitialised_shared_memory_sees_poison():
    result = tier2(candidate(SHARED_ACCUMULATOR.replace("if (threadIdx.x == 0) total = 0.f;", "")))
    assert_verdict(result, Verdict.VALUE_MISMATCH)
    assert "nan" in result.reason


@pytest.mark.slow
def test_96_kib_of_dynamic_shared_memory_without_the_opt_in_is_a_launch_error():
    result = tier2(candidate(BIG_SHARED.replace("OPT_IN", "")))
    assert_verdict(result, Verdict.RUNTIME_ERROR)
    assert "rowsum_staged was not launched (invalid argument): 98304 bytes of dynamic shared memory" in result.reason
    assert "cudaFuncSetAttribute" in result.reason
    assert result.launches == {}


@pytest.mark.slow
def test_96_kib_of_dynamic_shared_memory_with_the_opt_in_passes():
    result = tier2(candidate(BIG_SHARED.replace("OPT_IN", OPT_IN)))
    assert_verdict(result, Verdict.PASS)
    assert result.launches == {"rowsum_staged": SETTINGS.seeds}


@pytest.mark.slow
def test_an_empty_grid_launch_with_a_host_side_result_is_not_a_pass():
    # The host sums the rows and copies them in; the launch over an empty grid launches nothing.
    result = tier2(candidate(EMPTY_GRID))
    assert_verdict(result, Verdict.STATIC_REJECT)
    # The host's sums need a copy to the host: the data-flow policy refuses it first.
    assert result.reason.startswith("policy kernels: trial 1: cudaMemcpy (device to host)"), result.reason
    assert result.launches == {}


def test_an_ifdef_on_the_runtime_header_guard_is_rejected_with_its_line():
    answer = fenced(candidate(IFDEF_ON_THE_RUNTIME))
    result = verify(PROBLEM, answer, SETTINGS)
    line = line_of(answer, "#ifdef CUSET_CUDA_CPU_H")
    assert_verdict(result, Verdict.STATIC_REJECT)
    assert result.tier is Tier.STATIC
    assert result.reason.startswith(f"line {line}: uses CUSET_CUDA_CPU_H")
    assert result.diagnostics[0].line == line
