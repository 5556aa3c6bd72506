"""Tier 0 rejects kernel sources that test names tiers 1 and 2 define differently (``macros``),
tier 2 defines what nvcc's device pass defines (``build.DEVICE_PASS_MACROS``), and the verifier's
scans of kernel sources read only the code the compiler compiles (``preprocessor``): no comment,
literal or group the preprocessor skips."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from verify_cases import fenced, line_of

from cuset_core.verify.candidate import parse_candidate
from cuset_core.verify.compile import TORCH_NVCC_FLAGS
from cuset_core.verify.cpu.build import DEVICE_PASS_MACROS, translation_unit
from cuset_core.verify.cpu.rewrite import unsupported_feature
from cuset_core.verify.cpu.sizes import hardcoded_sizes, size_bearing_code
from cuset_core.verify.result import Verdict
from cuset_core.verify.source.macros import find_fingerprint
from cuset_core.verify.source.preprocessor import compiled_code, joined_code, strip_comments
from cuset_core.verify.source.static import check_static


@pytest.mark.parametrize(
    "source",
    [
        "#ifdef __CUDA_ARCH__\n#define FAST 1\n#endif\n#if __CUDA_ARCH__ >= 800\n#endif",
        "#ifndef FUSED_KERNEL_H\n#define FUSED_KERNEL_H\n#endif",
        "#ifndef _FUSED_KERNEL_H_\n#define _FUSED_KERNEL_H_\n#endif",
        "#ifndef M_PI\n#define M_PI 3.14159265358979f\n#endif",
        "#if defined(__CUDACC__) && CUDART_VERSION >= 11000 && __CUDACC_VER_MAJOR__ >= 11\n#endif",
        '// #ifdef CUSET_CUDA_CPU_H\nconst char* note = "CUSET_CUDA_CPU_H";',
        "__device__ __noinline__ float f(float x) { return C10_CUDA_CHECK_OK(x); }",
    ],
)
def test_legitimate_conditional_compilation_is_not_a_fingerprint(source):
    assert find_fingerprint(source) is None


@pytest.mark.parametrize(
    ("source", "name"),
    [
        ("#ifdef CUSET_CUDA_CPU_H\n#endif", "CUSET_CUDA_CPU_H"),
        ("#if defined(CUSET_TORCH_LIGHT_H)\n#endif", "CUSET_TORCH_LIGHT_H"),
        ("int on_cpu = cuset_last_error() == 0;", "cuset_last_error"),
        ("int optimised = __OPTIMIZE__;", "__OPTIMIZE__"),
        ("#if __has_include(<cuda_cpu.h>)\n#endif", "__has_include"),
        ("#ifndef CUDART_PI_F\n#define CUDART_PI_F 3.0f\n#endif", "CUDART_PI_F"),
        ("#define ON_CPU defined(C10_CUDA_CHECK)\n#if ON_CPU\n#endif", "C10_CUDA_CHECK"),
        ("#if 1 && \\\n    defined(_SYS_MMAN_H)\n#endif", "_SYS_MMAN_H"),
        ("#ifdef _GLIBCXX_THREAD\n#endif", "_GLIBCXX_THREAD"),
        ("#elifdef __cpp_lib_jthread\n", "__cpp_lib_jthread"),
    ],
)
def test_a_name_only_one_tier_defines_is_a_fingerprint(source, name):
    found = find_fingerprint(source)
    assert found is not None and found.name == name
    assert source[found.offset :].startswith(name)


def test_a_cu_candidate_testing_the_runtime_is_rejected_with_its_line():
    cu = (
        "#include <torch/extension.h>\n__global__ void k(float* y) {\n#ifndef CUSET_CUDA_CPU_H\n  y[0] = 1.f;\n"
        "#endif\n}\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}\n"
    )
    answer = fenced(cu).replace("```python", "```cuda")
    result = check_static(parse_candidate(answer))
    assert result is not None and result.verdict is Verdict.STATIC_REJECT
    assert result.reason.startswith(f"line {line_of(answer, '#ifndef CUSET_CUDA_CPU_H')}: uses CUSET_CUDA_CPU_H")


def test_only_the_cuda_sources_see_the_device_pass_macros():
    unit = translation_unit("ext", "__global__ void k() {}", "int host();", ["host"])
    cuda_start, cpp_start = unit.index('#line 1 "cuda_sources"'), unit.index('#line 1 "cpp_sources"')
    assert "#define __CUDA_ARCH__ 900" in unit[:cuda_start]
    assert "#undef __CUDA_ARCH__" in unit[cuda_start:cpp_start]
    assert "#define" not in unit[cpp_start:]


def test_the_device_pass_macros_include_torchs_nvcc_defines():
    torch_defines = {flag[2:] for flag in TORCH_NVCC_FLAGS if flag.startswith("-D")}
    assert torch_defines <= {name for name, _ in DEVICE_PASS_MACROS}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_the_device_pass_macros_are_what_nvcc_defines_for_sm_90(tmp_path):
    (tmp_path / "k.cu").write_text("__global__ void k() {}\n")
    dryrun = subprocess.run(
        ["nvcc", "-dryrun", "-cubin", "-arch=sm_90", "k.cu"], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    device_pass = next(line for line in dryrun.stderr.splitlines() if "-D__CUDA_ARCH__=" in line)
    nvcc = {name: value or "1" for name, value in re.findall(r"-D(\w+)(?:=(\w+))?", device_pass)}
    assert nvcc.items() <= dict(DEVICE_PASS_MACROS).items()


# ---------------------------------------------------------------- the code the compiler compiles


def test_a_digit_separator_is_not_a_character_literal():
    source = "#if 1'0 && defined(CUSET_CUDA_CPU_H)\n  y = x;\n#endif\nint n = 16'384; // 'not code\n"
    assert "defined(CUSET_CUDA_CPU_H)" in joined_code(source).text
    assert "'not code" not in joined_code(source).text
    found = find_fingerprint(source)
    assert found is not None and source[found.offset :].startswith("CUSET_CUDA_CPU_H")
    assert strip_comments("int n = 1'000; // wmma::\n") == "int n = 1'000;" + " " * 10 + "\n"


def test_a_character_literal_and_a_string_still_hide_what_they_hold():
    code = joined_code("char q = '\"'; const char* s = \"// CUSET_X\"; char c = 'a';").text
    assert "CUSET" not in code and "'" not in code and '"' not in code


def test_a_name_split_by_a_backslash_newline_is_read_whole_on_its_first_line():
    source = "int a;\n#ifdef _SYS_MM\\\nAN_H\n#endif\n"
    found = find_fingerprint(source)
    assert found is not None and found.name == "_SYS_MMAN_H"
    assert source.count("\n", 0, found.offset) == 1


def test_a_digraph_directive_is_a_directive():
    found = find_fingerprint("%:ifdef _GLIBCXX_THREAD\n%:endif\n")
    assert found is not None and found.name == "_GLIBCXX_THREAD"
    assert "cub" not in compiled_code("%:if 0\n#include <cub/cub.cuh>\n%:endif\n")


@pytest.mark.parametrize(
    "dead",
    [
        "#if 0\n#include <cub/cub.cuh>\n#endif",
        "#if false\nwmma::fragment<wmma::matrix_a, 16, 16, 16, half> a;\n#endif",
        "#if (0)\n#include <cub/cub.cuh>\n#endif",
        "#if 1\nint x;\n#else\n#include <cub/cub.cuh>\n#endif",
        "#if 0\nint x;\n#elif 1 - 1\n#include <cub/cub.cuh>\n#else\nint y;\n#endif",
        "#if 0\n#if 1\n#include <cub/cub.cuh>\n#endif\n#endif",
        "#ifdef USE_CUB\n#include <cub/cub.cuh>\n#endif",
        "#if defined(USE_CUB) && USE_CUB\n#include <cub/cub.cuh>\n#endif",
        "#define USE_CUB 0\n#if USE_CUB\n#include <cub/cub.cuh>\n#endif",
        "#define A 1 ? 0 : 1\n#if A + 1\n#include <cub/cub.cuh>\n#endif",
        "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 700\n#include <cub/cub.cuh>\n#endif",
        "#ifdef __CUDACC_RTC__\n#include <cub/cub.cuh>\n#endif",
        "#i\\\nf 0\n#include <cub/cub.cuh>\n#endif",
        "#if 0 // a comment \\\n   1\n#include <cub/cub.cuh>\n#endif",
    ],
)
def test_a_feature_only_in_a_group_the_preprocessor_skips_is_not_unsupported(dead):
    assert unsupported_feature(f"#include <torch/extension.h>\n{dead}\n__global__ void k() {{}}\n") is None


@pytest.mark.parametrize(
    "text",
    [
        'static const char* kNote = "wmma:: would be faster";',
        'static const char* kNote = R"x(a "quoted" )" wmma::\n#include <cub/cub.cuh>\n)x";',
        'static const char* kNote = R"x(a )\\\nx" wmma:: )x";',
        'static const char* kNote = "continued \\\ncub::DeviceReduce";',
        "// a comment continued \\\n#include <cub/cub.cuh>",
        "char quote = '\"'; // \" wmma::",
    ],
)
def test_a_feature_only_in_a_literal_or_comment_is_not_unsupported(text):
    assert unsupported_feature(f"{text}\n__global__ void k() {{}}\n") is None


@pytest.mark.parametrize(
    ("text", "feature"),
    [
        ("#if __CUDA_ARCH__ >= 800\n#include <mma.h>\n#endif", "tensor cores (wmma/mma)"),
        (
            "#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 700)\nwmma::fragment<wmma::accumulator, 16, 16, 16, float> c;\n#endif",
            "tensor cores (wmma/mma)",
        ),
        ("#ifndef __CUDA_ARCH__\n#include <thrust/device_vector.h>\n#endif", "thrust"),  # nvcc's host pass
        ("#ifdef __CUDACC__\n#include <cub/cub.cuh>\n#endif", "cub"),
        ("#if CUDART_VERSION >= 11000 && __CUDACC_VER_MAJOR__ >= 11\n#include <cub/cub.cuh>\n#endif", "cub"),
        ("#ifndef FUSED_KERNEL_H\n#define FUSED_KERNEL_H\n#include <cub/cub.cuh>\n#endif", "cub"),
        ("#ifndef _FUSED_KERNEL_H_\n#define _FUSED_KERNEL_H_\n#include <cub/cub.cuh>\n#endif", "cub"),
        ("#pragma once\n#include <cub/cub.cuh>", "cub"),
        ("#ifndef USE_PLAIN\n#include <cub/cub.cuh>\n#endif", "cub"),
        ("#ifdef USE_ROCM\n#include <hipcub/hipcub.hpp>\n#else\n#include <cub/cub.cuh>\n#endif", "cub"),
        ("#define USE_CUB 1\n#if USE_CUB\n#include <cub/cub.cuh>\n#endif", "cub"),
        ("#if 1'0 > 9\n#include <cub/cub.cuh>\n#endif", "cub"),
        ('asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));', "inline PTX (asm)"),
        ('TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");\n#include "cuda_fp8.h"', "fp8/fp4 types"),
    ],
)
def test_a_feature_the_compiler_compiles_is_still_unsupported(text, feature):
    assert unsupported_feature(f"#include <torch/extension.h>\n{text}\n__global__ void k() {{}}\n") == feature


@pytest.mark.parametrize(
    "condition",
    [
        "#ifndef M_PI",  # <cmath> defines it, on a GPU and in tier 2 alike
        "#ifdef _OPENMP",
        "#if TORCH_VERSION_MAJOR >= 2",
        "#if __cplusplus >= 201703L",
        "#if -1 < 0u",  # unsigned: C's conversions, which the scan does not model
        "#if MY_CHECK(1)",
    ],
)
def test_a_group_whose_condition_a_header_may_decide_makes_nothing_unsupported(condition):
    for branch in (
        f"{condition}\n#include <cub/cub.cuh>\n#endif",
        f"{condition}\n#else\n#include <cub/cub.cuh>\n#endif",
    ):
        assert unsupported_feature(branch) is None, branch


def test_cpp_sources_are_read_without_nvccs_macros():
    guarded = "#ifdef __CUDACC__\n#include <cub/cub.cuh>\n#endif\n"
    assert unsupported_feature(guarded, cuda=False) is None
    assert unsupported_feature(guarded.replace("ifdef", "ifndef"), cuda=False) == "cub"


def test_the_compiled_code_keeps_the_sources_length_and_lines():
    source = '#if 0\nint a = 1;\n#endif\nconst char* s = "x\\\ny"; int b = 2\'0; // c \\\nd\n#def\\\nine N 4\n'
    code = compiled_code(source)
    assert len(code) == len(source) and code.count("\n") == source.count("\n")
    assert "int a" not in code and "int b = 2'0;" in code and "#define N 4" in code and '"' not in code


def test_a_size_in_a_skipped_group_does_not_count_and_one_with_a_digit_separator_does():
    constants, overrides = {"DIM": 16384}, {"DIM": 4096}
    dead = "#if 0\nconstexpr int kDim = 16384;\n#endif\n"
    assert hardcoded_sizes(size_bearing_code(dead, "cu", []), constants, overrides) == []
    separated = "constexpr int kDim = 16'384;\n"
    assert hardcoded_sizes(size_bearing_code(separated, "cu", []), constants, overrides) == ["DIM=16384"]
