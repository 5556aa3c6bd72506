"""Tier 0 rejects kernel sources that test names tiers 1 and 2 define differently (``macros``),
and tier 2 defines what nvcc's device pass defines (``build.DEVICE_PASS_MACROS``)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from verify_cases import fenced, line_of

from cuset_core.verify.candidate import parse_candidate
from cuset_core.verify.compile import TORCH_NVCC_FLAGS
from cuset_core.verify.cpu.build import DEVICE_PASS_MACROS, translation_unit
from cuset_core.verify.macros import find_fingerprint
from cuset_core.verify.result import Verdict
from cuset_core.verify.static import check_static


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
