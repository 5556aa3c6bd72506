"""Issue 47, items 3, 5 and 6: one program, ``unsupported`` from the compiled program only, and
attribution by construction. Each test fails if its attack works: a wrong kernel whose verdict is
``pass``, ``unsupported`` or ``internal_error``.

3. Two programs: ``#ifdef`` on a macro nvcc's device pass defines and tier 2 does not (a CUDA
   header guard, a libstdc++ version macro) selects a wrong kernel under nvcc and a right one on
   the CPU. Tier 0 refuses a conditional on any macro the candidate does not define, outside
   ``macros.ALLOWLIST``; the allowlist's derivation (nvcc's device-pass macros against tier 2's)
   is a test that runs nvcc when it is there.
5. Blame moves to the verifier by text alone: ``x86 asm`` in host code, an identifier holding
   ``cooperative_groups``, a variable named like a cuRAND call, the candidate's own ``namespace
   thrust``. ``unsupported`` now needs the PTX to show the feature (``ptx.confirmed_feature``).
6. A 6 KB expression makes Python's parser raise ``RecursionError``: the candidate's
   ``static_reject``, since the canary (the demo ReLU solution) passes the same analysis.

Tier 0 and 1 tests need no tier 2 and are fast; the PTX tests need nvcc.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from attacks import HONEST, WRONG_KERNEL

from cuset_core.verify import canary, run
from cuset_core.verify.candidate import parse_candidate
from cuset_core.verify.compile import TORCH_NVCC_FLAGS
from cuset_core.verify.cpu import unsupported_before_running
from cuset_core.verify.cpu.build import CXX_FLAGS, DEVICE_PASS_MACROS
from cuset_core.verify.result import Tier, Verdict
from cuset_core.verify.run import verify
from cuset_core.verify.settings import VerifySettings
from cuset_core.verify.source.macros import ALLOWLIST, find_fingerprint, header_macros
from cuset_core.verify.source.static import check_static

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
PROBLEM = (Path(__file__).parents[1] / "unit" / "cpu_cases" / "rowsum_problem.py").read_text()
WRONG = HONEST.replace(*WRONG_KERNEL)
STATIC = VerifySettings(tier=Tier.STATIC)
FAILS = {Verdict.PASS, Verdict.UNSUPPORTED, Verdict.INTERNAL_ERROR}


def rowsum(device: str, host: str = "", top: str = "") -> str:
    """A rowsum candidate (``cpu_cases/rowsum_problem.py``) whose kernel body is ``device``."""
    return f"""```python
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r\"\"\"
#include <torch/extension.h>
{top}
__global__ void rowsum_kernel(const float* x, float* out, int cols) {{
    int r = blockIdx.x;
    float s = 0.f;
{device}
    out[r] = s;
}}
torch::Tensor rowsum(torch::Tensor x) {{
    auto out = torch::empty({{x.size(0)}}, x.options());
{host}
    rowsum_kernel<<<x.size(0), 1>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}}
\"\"\"
ext = load_inline(name="rowsum_ext", cpp_sources="torch::Tensor rowsum(torch::Tensor x);",
                  cuda_sources=cuda_src, functions=["rowsum"])

class ModelNew(nn.Module):
    def forward(self, x):
        return ext.rowsum(x)
```"""


RIGHT_LOOP = "    for (int j = 0; j < cols; ++j) s += x[r * cols + j];"
WRONG_LOOP = "    for (int j = 1; j < cols; ++j) s += x[r * cols + j];"  # skips a column


def two_programs(test: str) -> str:
    """Wrong under nvcc (where ``test`` holds), right where it does not."""
    return rowsum(f"#{test}\n{WRONG_LOOP}\n#else\n{RIGHT_LOOP}\n#endif")


def rejected_at_tier_0(answer: str, name: str) -> None:
    result = check_static(parse_candidate(answer))
    assert result is not None and result.verdict is Verdict.STATIC_REJECT, result
    assert name in result.reason and result.reason.startswith("line ")


# ---------------------------------------------------------------- 3. two programs


@pytest.mark.parametrize(
    ("test", "name"),
    [
        ("ifdef __CUDA_RUNTIME_H__", "__CUDA_RUNTIME_H__"),  # the issue's: a CUDA header guard
        ("if defined(_GLIBCXX_RELEASE) && _GLIBCXX_RELEASE >= 11", "_GLIBCXX_RELEASE"),  # a libstdc++ version
        ("ifdef __CUDA_FP16_H__", "__CUDA_FP16_H__"),  # variation: another CUDA header's guard
        ("if __GNUC__ >= 5", "__GNUC__"),  # variation: the host compiler's version
        ("ifdef CUB_VERSION", "CUB_VERSION"),  # variation: a macro of CUDA's bundled libraries
        ("ifndef NDEBUG\n#define NDEBUG_X 0\n#endif\n#ifdef NDEBUG", "NDEBUG"),  # variation: a flag
    ],
)
def test_a_conditional_on_a_macro_the_candidate_does_not_define_is_refused_with_its_line(test, name):
    rejected_at_tier_0(two_programs(test), name)


def test_a_header_guard_written_as_the_candidates_own_include_guard_is_refused():
    answer = rowsum(
        f"{RIGHT_LOOP}", top="#ifndef __CUDA_RUNTIME_H__\n#define __CUDA_RUNTIME_H__\n__device__ int k;\n#endif"
    )
    rejected_at_tier_0(answer, "__CUDA_RUNTIME_H__")


def test_a_fallback_definition_does_not_make_a_header_macro_the_candidates():
    answer = two_programs("if _GLIBCXX_RELEASE > 11").replace(
        "#include <torch/extension.h>",
        "#include <torch/extension.h>\n#ifndef _GLIBCXX_RELEASE\n#define _GLIBCXX_RELEASE 0\n#endif",
    )
    rejected_at_tier_0(answer, "_GLIBCXX_RELEASE")


@pytest.mark.parametrize(
    "top",
    [
        "#ifndef ROWSUM_CUH\n#define ROWSUM_CUH\n__device__ int k;\n#endif",  # its own include guard
        "#ifndef M_PI\n#define M_PI 3.14159265358979323846\n#endif",  # a fallback definition
        "#define BLOCK 256\n#if BLOCK > 128\n#define WIDE 1\n#endif\n#ifdef WIDE\n#endif",  # its own macros
        "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800\n#endif\n#ifdef __CUDACC__\n#endif",  # allowlisted
        "#if CUDART_VERSION >= 11000 && __cplusplus >= 201703L\n#endif\n#ifndef USE_ROCM\n#endif",
    ],
)
def test_honest_conditional_compilation_still_passes_tier_0(top):
    assert check_static(parse_candidate(rowsum(RIGHT_LOOP, top=top))) is None


def _macros(listing: str) -> dict[str, str]:
    found = {}
    for line in listing.splitlines():
        match = re.match(r"#define (\w+)(\([^)]*\))?(?: (.*))?$", line)
        if match:
            found[match.group(1)] = (match.group(2) or "") + (match.group(3) or "")
    return found


@needs_nvcc
def test_the_allowlist_is_derived_from_nvccs_device_pass_and_tier_2(tmp_path):
    """Every macro nvcc's device pass defines (with load_inline's prelude) is either on the
    allowlist, defined identically by tier 2 (its g++ flags and ``DEVICE_PASS_MACROS``), or refused
    in a conditional; an allowlisted name nvcc does not define, tier 2 does not define either."""
    stubs = Path(run.__file__).parent / "stubs"
    (tmp_path / "p.cu").write_text(
        "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n#include <cuda_fp16.h>\n"
        "#include <cuda_bf16.h>\n#include <vector>\n#include <algorithm>\n#include <cmath>\n#include <cfloat>\n"
    )
    nvcc = subprocess.run(
        [NVCC, "-E", "-Xcompiler", "-dM", "-arch=sm_90", "-std=c++20", *TORCH_NVCC_FLAGS[:4],
         f"-I{stubs / 'light'}", f"-I{stubs / 'common'}", "p.cu"],
        cwd=tmp_path, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    device = _macros(nvcc)
    assert device.get("__CUDA_ARCH__") == "900"
    gxx = subprocess.run(
        ["g++", *CXX_FLAGS, "-dM", "-E", "-x", "c++", "/dev/null"], capture_output=True, text=True, check=True
    ).stdout
    tier_2 = {**_macros(gxx), **dict(DEVICE_PASS_MACROS)}
    for name in ALLOWLIST:
        assert device.get(name) == tier_2.get(name), name
    neither = [
        name for name in device
        if name not in ALLOWLIST and find_fingerprint(f"#ifdef {name}\n#endif\n") is None
        and find_fingerprint(f"#if defined({name})\n#endif\n") is None
    ]  # fmt: skip
    assert neither == []
    # The shipped list of header macros (own include guards are told from them) is nvcc's.
    missing = {name for name in device if not name.lower().startswith("cuset")} - header_macros()
    assert not missing, sorted(missing)[:20]


# ---------------------------------------------------------------- 5. unsupported by text alone

TEXT_ONLY = {
    "host x86 asm": rowsum(
        RIGHT_LOOP.replace("j = 0", "j = 1"),
        host='    unsigned lo, hi; asm volatile("rdtsc" : "=a"(lo), "=d"(hi)); (void)lo; (void)hi;',
    ),
    "cooperative_groups identifier": rowsum(
        WRONG_LOOP + "\n    int cooperative_groups_used = 0; s += cooperative_groups_used;"
    ),
    "cuRAND-like variable": rowsum(WRONG_LOOP + "\n    float curand_uniform_seed = 0.f; s += curand_uniform_seed;"),
    "own namespace thrust": rowsum(
        WRONG_LOOP + "\n    s += thrust::zero();", top="namespace thrust { __device__ float zero() { return 0.f; } }"
    ),
    # variations: a header named in a comment, an asm statement in a host helper, wmma in a string
    "cooperative_groups in a comment": rowsum(WRONG_LOOP + "  // cooperative_groups::sync would be nicer"),
    "asm in a host helper": rowsum(
        WRONG_LOOP,
        top='static inline void pause_cpu() { __asm__ __volatile__("pause"); }',
        host="    pause_cpu();",
    ),
    "wmma in a string": rowsum(WRONG_LOOP, host='    const char* note = "wmma::mma_sync"; (void)note;'),
}


@needs_nvcc
@pytest.mark.parametrize("name", sorted(TEXT_ONLY))
def test_text_alone_does_not_make_a_wrong_kernel_unsupported(name):
    candidate = parse_candidate(TEXT_ONLY[name])
    assert check_static(candidate) is None
    assert unsupported_before_running(candidate, VerifySettings()) is None


REAL_USES = {
    "tensor cores (wmma/mma)": rowsum(
        RIGHT_LOOP + "\n    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc; wmma::fill_fragment(acc, 0.f);"
        "\n    wmma::store_matrix_sync(out, acc, 16, wmma::mem_row_major);",
        top="#include <mma.h>\nusing namespace nvcuda;",
    ),
    "inline PTX (asm)": rowsum(RIGHT_LOOP + '\n    asm volatile("add.f32 %0, %0, 0f00000000;" : "+f"(s));'),
    "cooperative groups": rowsum(
        RIGHT_LOOP + "\n    cooperative_groups::this_thread_block().sync();", top="#include <cooperative_groups.h>"
    ),
}


@needs_nvcc
@pytest.mark.parametrize("feature", sorted(REAL_USES))
def test_a_feature_the_compiled_program_holds_is_still_unsupported(feature):
    assert unsupported_before_running(parse_candidate(REAL_USES[feature]), VerifySettings()) == feature


# ---------------------------------------------------------------- 6. attribution

DEEP = "_deep = " + "+".join(["1"] * 3000)  # about 6 KB


@pytest.mark.parametrize(
    "answer",
    [
        WRONG.replace("import torch\n", f"import torch\n{DEEP}\n", 1),  # the issue's
        WRONG.replace("import torch\n", "import torch\n_deep = " + "-" * 6000 + "1\n", 1),  # variations
        WRONG.replace("import torch\n", "import torch\n_deep = " + "not " * 3000 + "1\n", 1),
    ],
)
def test_an_analysis_that_raises_on_the_candidate_is_the_candidates_verdict(answer):
    result = verify(PROBLEM, answer, STATIC, use_cache=False)
    assert result.verdict is Verdict.STATIC_REJECT, result
    assert "could not be analysed" in result.reason  # RecursionError, or MemoryError from the parser


@pytest.mark.parametrize("error", [MemoryError, RecursionError, ValueError])
def test_any_exception_type_in_tier_0_is_the_candidates_unless_the_canary_fails(monkeypatch, error):
    def raising(candidate):
        if "relu_kernel" in candidate.code and "+ 1.0f" in candidate.code:
            raise error("candidate material")
        return None

    monkeypatch.setattr(run, "check_static", raising)
    assert verify(PROBLEM, WRONG, STATIC, use_cache=False).verdict is Verdict.STATIC_REJECT
    monkeypatch.setattr(run, "static_canary_fails", lambda: True)  # the verifier itself is broken
    assert verify(PROBLEM, WRONG, STATIC, use_cache=False).verdict is Verdict.INTERNAL_ERROR


def test_the_canary_passes_tier_0():
    assert canary.static_canary_fails() is False


@needs_nvcc
def test_an_exception_in_tier_1_is_the_candidates_compile_error(monkeypatch):
    def raising(candidate, settings, workdir):
        raise RecursionError("candidate material")

    monkeypatch.setattr(run, "compile_candidate", raising)
    monkeypatch.setattr(run, "compile_canary_fails", lambda settings: False)
    result = verify(PROBLEM, WRONG, VerifySettings(tier=Tier.COMPILE), use_cache=False)
    assert result.verdict is Verdict.COMPILE_ERROR and "RecursionError" in result.reason
    monkeypatch.setattr(run, "compile_canary_fails", lambda settings: True)
    assert verify(PROBLEM, WRONG, VerifySettings(tier=Tier.COMPILE), use_cache=False).verdict is Verdict.INTERNAL_ERROR


@needs_nvcc
def test_the_canary_compiles_at_tier_1():
    assert canary.compile_canary_fails(VerifySettings(tier=Tier.COMPILE)) is False
