"""Tier 1 compiles with real nvcc, maps diagnostics to candidate lines and reads ptxas resources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from verify_cases import GOOD, fenced, line_of

from cuset_core.verify.candidate import parse_candidate
from cuset_core.verify.compile import compile_candidate, parse_resources, std_headers_named
from cuset_core.verify.result import KernelResources
from cuset_core.verify.settings import VerifySettings

SETTINGS = VerifySettings()

SHARED = GOOD.replace(
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;",
    "    __shared__ float tile[256];\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    tile[threadIdx.x] = i < n ? x[i] : 0.f;\n    __syncthreads();\n"
    "    if (i < n) y[i] = fmaxf(tile[255 - threadIdx.x], 0.f);",
)


def compile_text(text: str, tmp_path: Path, settings: VerifySettings = SETTINGS):
    return compile_candidate(parse_candidate(text), settings, tmp_path)


PTXAS = """\
ptxas info    : 0 bytes gmem, 16 bytes cmem[3]
ptxas info    : Compiling entry function '_Z5tiledPKfPfi' for 'sm_90'
ptxas info    : Function properties for _Z5tiledPKfPfi
    24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem, 380 bytes cmem[0]
ptxas info    : Compile time = 3.1 ms
ptxas info    : Compiling entry function '_Z4copyIfEvPT_' for 'sm_90'
ptxas info    : Function properties for _Z4copyIfEvPT_
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 6 registers, used 0 barriers
"""


def test_ptxas_resources_are_parsed_per_kernel_with_demangled_names():
    resources = parse_resources(PTXAS)
    assert resources == [
        KernelResources(
            kernel="tiled(float const*, float*, int)",
            registers=40,
            shared_bytes=2048,
            constant_bytes=380,
            stack_bytes=24,
            spill_store_bytes=8,
            spill_load_bytes=12,
        ),
        KernelResources(kernel="void copy<float>(float*)", registers=6),
    ]


@pytest.mark.nvcc
def test_a_correct_candidate_compiles_and_reports_its_kernel(tmp_path):
    report = compile_text(fenced(GOOD), tmp_path)
    assert report.ok, report.log
    assert report.diagnostics == []
    assert [r.kernel for r in report.resources] == ["relu_kernel(float const*, float*, int)"]
    assert report.resources[0].registers > 0
    assert "-arch=sm_90" in report.command and "-cubin" in report.command
    # It names no header beyond what the stand-in needs, so its first try compiled it.
    assert "-DCUSET_STD_ON_DEMAND" in report.command


def test_the_standard_headers_a_first_try_includes_are_those_the_code_names():
    code = "std::vector<int> v; std::sort(v.begin(), v.end()); std::cout << v.size(); std :: ostringstream s;"
    assert std_headers_named(code) == ["CUSET_STD_ALGORITHM", "CUSET_STD_IOSTREAM", "CUSET_STD_SSTREAM"]
    assert std_headers_named("torch::Tensor f(torch::Tensor x) { return x; }") == []
    dispatch = 'TORCH_CHECK(n > 0, "n: " + std::to_string(n)); AT_DISPATCH_FLOATING_TYPES_AND_HALF(t, "f", ...);'
    assert std_headers_named(dispatch) == ["CUSET_STD_STRING", "CUSET_STD_HALF"]
    assert std_headers_named('ctx->saved_data["alpha"] = alpha;') == ["CUSET_STD_UNORDERED_MAP"]
    # A bare call may resolve to std's by argument-dependent lookup; a member's or another
    # namespace's may not.
    assert std_headers_named("sort(v.begin(), v.end()); int s = accumulate (v.begin(), v.end(), 0);") == [
        "CUSET_STD_ALGORITHM",
        "CUSET_STD_NUMERIC",
    ]
    assert std_headers_named("auto m = t.max(); auto c = p->count(); thrust::sort(a, b);") == []
    # Unqualified names could come from any header: no first try.
    assert std_headers_named("using namespace std;\nvector<int> v;") is None


@pytest.mark.nvcc
def test_a_standard_name_the_first_try_does_not_know_is_compiled_again_with_every_header(tmp_path):
    # std::basic_ostringstream is <sstream>'s, which real torch/extension.h includes; the table
    # lists only its common aliases.
    cu = GOOD.replace(
        "torch::Tensor relu_cuda(",
        "size_t digits(int v) { std::basic_ostringstream<char> s; s << v; return s.str().size(); }\n"
        "torch::Tensor relu_cuda(",
        1,
    )
    assert cu != GOOD
    report = compile_text(fenced(cu), tmp_path)
    assert report.ok, report.log
    nvcc, gxx = report.command.splitlines()
    assert "-DCUSET_STD_ON_DEMAND" not in nvcc, "the CUDA unit's first try should have failed"
    assert "-DCUSET_STD_ON_DEMAND" in gxx, "the C++ unit does not use it: its first try stands"


@pytest.mark.nvcc
def test_shared_memory_of_a_kernel_is_reported(tmp_path):
    report = compile_text(fenced(SHARED), tmp_path)
    assert report.ok, report.log
    assert report.resources[0].shared_bytes == 256 * 4


@pytest.mark.nvcc
def test_a_compile_error_points_at_its_line_in_the_answer(tmp_path):
    text = fenced(GOOD.replace("if (i < n) y[i] = x[i]", "if (i < n) y[i] = undefined_name[i]"))
    report = compile_text(text, tmp_path)
    assert not report.ok
    # A typo is the candidate's under any headers: its first try's errors stand.
    assert "-DCUSET_STD_ON_DEMAND" in report.command
    errors = [d for d in report.diagnostics if d.severity == "error"]
    assert errors[0].message == 'identifier "undefined_name" is undefined'
    assert errors[0].line == line_of(text, "    if (i < n) y[i] = undefined_name")


@pytest.mark.nvcc
def test_a_function_listed_in_functions_but_never_declared_is_an_error_at_the_call(tmp_path):
    text = fenced(GOOD.replace('functions=["relu_cuda"]', 'functions=["relu_forward"]'))
    report = compile_text(text, tmp_path)
    assert not report.ok
    error = next(d for d in report.diagnostics if d.severity == "error")
    assert "relu_forward" in error.message
    assert error.line == line_of(text, "ext = load_inline")


@pytest.mark.nvcc
def test_too_much_shared_memory_is_a_ptxas_error_at_the_kernel(tmp_path):
    text = fenced(SHARED.replace("tile[256]", "tile[80000]"))
    report = compile_text(text, tmp_path)
    assert not report.ok
    error = next(d for d in report.diagnostics if d.severity == "error")
    assert error.message.startswith("ptxas: ")
    assert error.line == line_of(text, "__global__ void relu_kernel")


@pytest.mark.nvcc
def test_half_dispatch_streams_and_guards_compile_against_the_stand_in(tmp_path):
    cu = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
template <typename scalar_t>
__global__ void scale(const scalar_t* __restrict__ x, scalar_t* y, float s, int64_t n) {
    for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = static_cast<scalar_t>(static_cast<float>(x[i]) * s);
}
torch::Tensor forward(torch::Tensor x, double s) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "x must be a contiguous CUDA tensor");
    const at::cuda::OptionalCUDAGuard guard(device_of(x));
    auto y = torch::empty_like(x);
    auto stream = at::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES_AND_HALF(x.scalar_type(), "scale", ([&] {
        scale<scalar_t><<<std::min<int64_t>((x.numel() + 255) / 256, 1024), 256, 0, stream>>>(
            x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), static_cast<float>(s), x.numel());
    }));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    auto [values, indices] = torch::max(y.view({x.size(0), -1}), 1);
    return y.reshape(x.sizes()) + values.sum() * 0;
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "scale"); }
"""
    report = compile_text(f"```cpp\n{cu}```", tmp_path)
    assert report.ok, report.log
    assert len(report.resources) == 3  # float, double, Half


@pytest.mark.nvcc
@pytest.mark.slow
@pytest.mark.shared_data
def test_the_light_stand_in_compiles_gpu_correct_sakana_kernels(shared_data, tmp_path):
    rows = [json.loads(line) for line in (shared_data / "sakana_labelled_kernels.jsonl").open()]
    correct = [row for row in rows if row["Correct"]][:12]
    failures = []
    for index, row in enumerate(correct):
        workdir = tmp_path / str(index)
        workdir.mkdir()
        report = compile_text(row["CUDA_Code"], workdir)
        if not report.ok:
            failures.append((row["Op_Name"], report.diagnostics[:2]))
    assert failures == []
