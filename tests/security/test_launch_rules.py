"""A GPU's launch rules on the CPU tier (issue 47, item 4): launches a GPU refuses fail on tier 2
with the error CUDA gives, from tier 1's ptxas report of the same kernel where the rule needs it.

- threads per block within 1024, and within the kernel's ``__launch_bounds__``;
- registers per thread (ptxas) x threads per block within the 65,536 registers of a block;
- static (ptxas) + dynamic shared memory within 48 KiB, or 227 KiB after ``cudaFuncSetAttribute``.

Each attack is a program that is wrong on a GPU (the launch fails, the output is garbage) and
passed tier 2 before; each is a ``runtime_error`` naming CUDA's error. Honest controls pass. Every
candidate computes the row sums of ``cpu_cases/rowsum_problem.py`` (16 x 1000) with one block per
row. The end-to-end cases build an extension with g++, so they are marked slow.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cuset_core.verify.candidate import parse_candidate
from cuset_core.verify.compile import nvcc_path
from cuset_core.verify.cpu import kernel_limit_fields, run_cpu_tier
from cuset_core.verify.cpu.rewrite import rewrite_launch_bounds
from cuset_core.verify.execution.library_cache import LibraryCache
from cuset_core.verify.execution.reference_pool import ReferencePool
from cuset_core.verify.result import KernelResources, Tier, Verdict, VerifyResult
from cuset_core.verify.run import verify
from cuset_core.verify.settings import SandboxLimits, VerifySettings

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))
from verify_cases import fenced  # noqa: E402

PROBLEM = (Path(__file__).parents[1] / "unit" / "cpu_cases" / "rowsum_problem.py").read_text()
SETTINGS = VerifySettings(tier=Tier.CPU, limits=SandboxLimits(wall_s=300, cpu_s=300))

CUDA = r"""
#include <torch/extension.h>

// The block's threads sum strided elements of the row into partial[], thread 0 adds them up.
__device__ void block_rowsum(const float* x, float* out, int cols, float* partial) {
    int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int n = blockDim.x * blockDim.y * blockDim.z;
    float v = 0.f;
    for (int j = t; j < cols; j += n) v += x[blockIdx.x * cols + j];
    partial[t] = v;
    __syncthreads();
    if (t == 0) {
        float s = 0.f;
        for (int i = 0; i < n; ++i) s += partial[i];
        out[blockIdx.x] = s;
    }
}

__global__ void rowsum_plain(const float* x, float* out, int cols) {
    __shared__ float partial[1024];
    block_rowsum(x, out, cols, partial);
}

__global__ void __launch_bounds__(128) rowsum_bounded(const float* x, float* out, int cols) {
    __shared__ float partial[1024];
    block_rowsum(x, out, cols, partial);
}

#define BOUND_OF(n) ((n) / 2)
template <int BLOCK>
__global__ void __launch_bounds__(BOUND_OF(BLOCK), 2) rowsum_bounded_t(const float* x, float* out, int cols) {
    __shared__ float partial[1024];
    block_rowsum(x, out, cols, partial);
}

// Stages the row in 40 KiB of static shared memory; the partial sums go to dynamic shared memory.
__global__ void rowsum_static40(const float* x, float* out, int cols) {
    __shared__ float stage[10 * 1024];
    extern __shared__ float partial[];
    for (int j = threadIdx.x; j < cols; j += blockDim.x) stage[j] = x[blockIdx.x * cols + j];
    __syncthreads();
    float v = 0.f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) v += stage[j];
    partial[threadIdx.x] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.f;
        for (int i = 0; i < blockDim.x; ++i) s += partial[i];
        out[blockIdx.x] = s;
    }
}

// 48 KiB of static shared memory in two arrays (the most a kernel may declare), none left over.
__global__ void rowsum_static48(const float* x, float* out, int cols) {
    __shared__ float stage[6 * 1024];
    __shared__ float spare[6 * 1024];
    extern __shared__ float partial[];
    for (int j = threadIdx.x; j < cols; j += blockDim.x) { stage[j] = x[blockIdx.x * cols + j]; spare[j] = 0.f; }
    __syncthreads();
    float v = 0.f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) v += stage[j] + spare[j];
    partial[threadIdx.x] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.f;
        for (int i = 0; i < blockDim.x; ++i) s += partial[i];
        out[blockIdx.x] = s;
    }
}

torch::Tensor plain_256(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_plain<<<x.size(0), 256, 0>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
torch::Tensor plain_1024(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_plain<<<x.size(0), 1024, 0>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
torch::Tensor plain_2048(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_plain<<<x.size(0), 2048, 0>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
torch::Tensor plain_32x64(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_plain<<<x.size(0), dim3(32, 64), 0>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
torch::Tensor plain_2x2x128(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_plain<<<x.size(0), dim3(2, 2, 128), 0>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
torch::Tensor plain_512(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_plain<<<x.size(0), 512, 0>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
torch::Tensor bounded_256(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_bounded<<<x.size(0), 256, 0>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
torch::Tensor bounded_16x16(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_bounded<<<x.size(0), dim3(16, 16), 0>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
torch::Tensor bounded_128(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_bounded<<<x.size(0), 128, 0>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
torch::Tensor bounded_t_128(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_bounded_t<128><<<x.size(0), 128, 0>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
torch::Tensor bounded_t_256(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_bounded_t<256><<<x.size(0), 128, 0>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
torch::Tensor static40_dynamic16(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_static40<<<x.size(0), 256, 16 * 1024>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
torch::Tensor static40_dynamic12(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_static40<<<x.size(0), 256, 12 * 1024>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
torch::Tensor static40_dynamic8(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_static40<<<x.size(0), 256, 8 * 1024>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
torch::Tensor static48_dynamic1(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_static48<<<x.size(0), 256, 1024>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
torch::Tensor static40_opt_in(torch::Tensor x) {
    cudaFuncSetAttribute(rowsum_static40, cudaFuncAttributeMaxDynamicSharedMemorySize, 16 * 1024);
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_static40<<<x.size(0), 256, 16 * 1024>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
"""
FUNCTIONS = [
    "plain_256",
    "plain_1024",
    "plain_2048",
    "plain_32x64",
    "plain_2x2x128",
    "plain_512",
    "bounded_256",
    "bounded_16x16",
    "bounded_128",
    "bounded_t_128",
    "bounded_t_256",
    "static40_dynamic16",
    "static40_dynamic12",
    "static40_dynamic8",
    "static48_dynamic1",
    "static40_opt_in",
]
SIGNATURES = "\n".join(f"torch::Tensor {name}(torch::Tensor x);" for name in FUNCTIONS)

# What tier 1's ptxas reports of these kernels on sm_90 (static shared memory is exact: the arrays;
# registers are small): the figures the CPU-only tests hand to tier 2 as tier 1 would.
PTXAS = {
    "void rowsum_plain(float const*, float*, int)": (16, 4096),
    "void rowsum_bounded(float const*, float*, int)": (16, 4096),
    "void rowsum_bounded_t<128>(float const*, float*, int)": (16, 4096),
    "void rowsum_bounded_t<256>(float const*, float*, int)": (16, 4096),
    "void rowsum_static40(float const*, float*, int)": (16, 40960),
    "void rowsum_static48(float const*, float*, int)": (16, 49152),
}


def candidate(function: str) -> str:
    """A ``ModelNew`` whose forward is the extension's ``function``."""
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="launch_rules_ext", cpp_sources=r"""{SIGNATURES}""", cuda_sources=r"""{CUDA}""",
                  functions={FUNCTIONS!r})


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.{function}(x)
'''


def ptxas(registers: dict[str, int] | None = None) -> list[KernelResources]:
    """Tier 1's report of the extension's kernels, with ``registers`` (by short name) in place of ptxas's."""
    registers = registers or {}
    report = []
    for kernel, (used, shared) in PTXAS.items():
        short = kernel.split("(")[0].split()[-1].split("<")[0]
        report.append(KernelResources(kernel=kernel, registers=registers.get(short, used), shared_bytes=shared))
    return report


REFERENCES = ReferencePool()


def tier2(function: str, libraries: LibraryCache, registers: dict[str, int] | None = None) -> VerifyResult:
    """Tier 2 of the candidate running ``function``, with tier 1's report handed over as the pipeline does."""
    report = ptxas(registers)
    return run_cpu_tier(
        PROBLEM, parse_candidate(candidate(function)), SETTINGS, libraries, REFERENCES, tier_1=lambda: report
    )


def assert_refused(result: VerifyResult, kernel: str, error: str, *details: str) -> None:
    assert result.verdict is Verdict.RUNTIME_ERROR, (result.verdict, result.reason, result.log[-2000:])
    assert f"kernel {kernel} was not launched ({error})" in result.reason, result.reason
    for detail in details:
        assert detail in result.reason, result.reason
    assert result.launches == {}, result.launches


def assert_passes(result: VerifyResult) -> None:
    assert result.verdict is Verdict.PASS, (result.verdict, result.reason, result.log[-2000:])


# ---------------------------------------------------------------- the rewrite (fast)


def test_the_rewrite_makes_a_kernel_with_launch_bounds_check_its_block_first():
    code = "template <int B>\n__global__ void __launch_bounds__(B * 2, 4) k(float* x)\n{\n  x[0] = 1;\n}\n"
    rewritten = rewrite_launch_bounds(code)
    assert "{ if (cuset::launch_bounded((B * 2))) return;\n  x[0] = 1;" in rewritten
    assert rewritten.count("\n") == code.count("\n")
    plain = "__global__ void k(float* x) { x[0] = 1; }\n__global__ __launch_bounds__(64) void d(int);"
    assert rewrite_launch_bounds(plain) == plain  # no bound; a declaration has no body


def test_tier_1_figures_go_to_the_job_by_the_name_launches_count():
    fields = kernel_limit_fields(
        [
            KernelResources(kernel="void ns::k<float, (int)4>(float const*, float*)", registers=40, shared_bytes=8),
            KernelResources(kernel="void ns::k<double, (int)4>(double const*, double*)", registers=72, shared_bytes=4),
            KernelResources(kernel="void plain(int)", registers=10),
        ]
    )
    assert fields == {"kernel_registers": {"k": 72, "plain": 10}, "kernel_shared_bytes": {"k": 8, "plain": 0}}


# ---------------------------------------------------------------- threads per block


@pytest.mark.slow
@pytest.mark.parametrize(
    ("function", "block"), [("plain_2048", "block 2048x1x1"), ("plain_32x64", "block 32x64x1"), ("plain_2x2x128", "")]
)
def test_more_than_1024_threads_per_block_is_an_invalid_configuration(libraries, function, block):
    result = tier2(function, libraries)
    assert_refused(result, "rowsum_plain", "invalid configuration argument", block)


# ---------------------------------------------------------------- __launch_bounds__


@pytest.mark.slow
@pytest.mark.parametrize(
    ("function", "kernel", "detail"),
    [
        ("bounded_256", "rowsum_bounded", "a block of 256 threads, more than its __launch_bounds__(128)"),
        ("bounded_16x16", "rowsum_bounded", "a block of 256 threads, more than its __launch_bounds__(128)"),
        ("bounded_t_128", "rowsum_bounded_t", "a block of 128 threads, more than its __launch_bounds__(64)"),
    ],
)
def test_a_block_larger_than_the_kernels_launch_bounds_is_refused(libraries, function, kernel, detail):
    result = tier2(function, libraries)
    assert_refused(result, kernel, "too many resources requested for launch", detail)


@pytest.mark.slow
@pytest.mark.parametrize("function", ["bounded_128", "bounded_t_256"])
def test_a_block_within_the_launch_bounds_passes(libraries, function):
    assert_passes(tier2(function, libraries))


# ---------------------------------------------------------------- registers x threads


@pytest.mark.slow
@pytest.mark.parametrize(
    ("function", "registers", "needed"),
    [("plain_1024", 128, "131072"), ("plain_1024", 80, "81920"), ("plain_512", 255, "131072")],
)
def test_more_registers_than_a_block_holds_is_too_many_resources(libraries, function, registers, needed):
    result = tier2(function, libraries, {"rowsum_plain": registers})
    assert_refused(
        result,
        "rowsum_plain",
        "too many resources requested for launch",
        f"{registers} registers per thread (tier 1's ptxas report)",
        f"need {needed} registers, more than the 65536",
    )


@pytest.mark.slow
def test_64_registers_times_1024_threads_fit_a_block(libraries):
    assert_passes(tier2("plain_1024", libraries, {"rowsum_plain": 64}))


# ---------------------------------------------------------------- static + dynamic shared memory


@pytest.mark.slow
@pytest.mark.parametrize(
    ("function", "kernel", "static", "dynamic"),
    [
        ("static40_dynamic16", "rowsum_static40", 40960, 16384),
        ("static40_dynamic12", "rowsum_static40", 40960, 12288),
        ("static48_dynamic1", "rowsum_static48", 49152, 1024),
    ],
)
def test_static_and_dynamic_shared_memory_over_48_kib_without_the_opt_in_is_refused(
    libraries, function, kernel, static, dynamic
):
    result = tier2(function, libraries)
    assert_refused(
        result,
        kernel,
        "invalid argument",
        f"{static} bytes of static shared memory (tier 1's ptxas report) and {dynamic} of dynamic",
        "more than the 49152 bytes",
    )


@pytest.mark.slow
@pytest.mark.parametrize("function", ["static40_opt_in", "static40_dynamic8"])
def test_shared_memory_within_the_limit_or_with_the_opt_in_passes(libraries, function):
    assert_passes(tier2(function, libraries))


@pytest.mark.slow
@pytest.mark.skipif(nvcc_path() is None, reason="tier 1 needs nvcc")
def test_the_pipeline_hands_tier_1s_ptxas_report_to_tier_2():
    # verify() runs tier 2 beside tier 1; the candidate waits for ptxas's 40960 bytes of static shared memory.
    settings = SETTINGS.model_copy(update={"overlap_tiers": True})
    result = verify(PROBLEM, fenced(candidate("static40_dynamic16")), settings, use_cache=False, references=REFERENCES)
    assert_refused(result, "rowsum_static40", "invalid argument", "40960 bytes of static shared memory")
    assert any("rowsum_static40" in r.kernel and r.shared_bytes == 40960 for r in result.resources), result.resources
    honest = verify(PROBLEM, fenced(candidate("static40_opt_in")), settings, use_cache=False, references=REFERENCES)
    assert_passes(honest)
