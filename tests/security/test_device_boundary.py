"""Tier 2 behind the device boundary (``VerifySettings.device_boundary``, the default; cpu/device/):
the candidate's host code in one process, its device memory and kernels in another.

The four attack classes that pass without it are tested as first found in the suites that found
them, which run behind the boundary since it is the default (host code that reads device memory
and a grid that covers one row while the host copies in the rest: ``test_attack_variations.py``;
outputs the candidate computes and writes itself: ``test_forged_verdicts.py``; a kernels-off run
told apart by the files written before it: ``test_kernels_did_the_work.py``). Here: variations
written apart from those (another language layer, process, order), what the boundary itself must
get right (honest kernels, constant memory, file-scope shared memory, the size of its device range),
each judged as on a GPU.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from attacks import HONEST
from attacks import PROBLEM as RELU_PROBLEM
from test_attack_variations import PROBLEM, candidate

from cuset_core.verify.candidate import parse_candidate
from cuset_core.verify.cpu import run_cpu_tier
from cuset_core.verify.execution.reference_pool import ReferencePool
from cuset_core.verify.result import Tier, Verdict, VerifyResult
from cuset_core.verify.settings import SandboxLimits, VerifySettings

pytestmark = pytest.mark.slow

# The checks this suite tests decide under the mixed policy; under kernels (the default) the
# device process refuses each attack's torch compute or transfer first (test_data_flow_policy.py).
BOUNDARY = VerifySettings(
    tier=Tier.CPU, policy="mixed", device_boundary=True, limits=SandboxLimits(wall_s=300, cpu_s=300)
)


# The module's candidates are one batch, as an eval's samples are: one reference run per problem
# and settings (a reference side is a sandboxed process that imports torch, seconds of CPU).
REFERENCES = ReferencePool()


def tier2(answer: str, problem: str = PROBLEM) -> VerifyResult:
    return run_cpu_tier(problem, parse_candidate(answer), BOUNDARY, references=REFERENCES)


def assert_verdict(result: VerifyResult, verdict: Verdict) -> None:
    assert result.verdict is verdict, (result.verdict, result.reason, result.log[-2000:])


def test_honest_kernels_pass_and_their_launches_are_counted_by_the_device_process():
    rowsum = tier2(candidate("        return ext.rowsum(x)"))
    assert_verdict(rowsum, Verdict.PASS)
    assert rowsum.launches == {"rowsum_kernel": BOUNDARY.seeds}
    # The demo's relu checks x.is_cuda() in its binding: behind the boundary the answer is a GPU's.
    assert_verdict(tier2(HONEST, RELU_PROBLEM), Verdict.PASS)


CONSTANT_FROM_A_TENSOR = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda = r"""
#include <torch/extension.h>

__constant__ float start_c[1];

__global__ void rowsum_from_constant_kernel(const float* x, float* out, int cols) {
    double total = start_c[0];
    for (int j = 0; j < cols; ++j) total += x[blockIdx.x * cols + j];
    out[blockIdx.x] = total;
}

torch::Tensor rowsum(torch::Tensor x) {
    auto start = torch::zeros({1}, x.options());
    // The source is device memory, as a tensor's data_ptr is on a GPU (unified addressing).
    cudaMemcpyToSymbol(start_c, start.data_ptr<float>(), sizeof(float));
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_from_constant_kernel<<<x.size(0), 1>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
"""
ext = load_inline(name="constant_ext", cpp_sources="torch::Tensor rowsum(torch::Tensor x);", cuda_sources=cuda,
                  functions=["rowsum"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.rowsum(x)
'''


def test_constant_memory_filled_from_a_device_tensor_reaches_the_kernel():
    # cudaMemcpyToSymbol from a tensor's data_ptr: the device process copies from its own memory
    # into its copy of the library's __constant__ array (Sakana row 54 does this).
    assert_verdict(tier2(CONSTANT_FROM_A_TENSOR), Verdict.PASS)


def test_a_file_scope_extern_shared_buffer_is_there_without_any_initialiser():
    # The device process runs none of the library's initialisers: the pointer the rewrite declares
    # for a file-scope `extern __shared__` must hold its address from the moment it is loaded.
    staged = (
        HONEST.replace(
            "// Grid-stride loop",
            "extern __shared__ float stage[];\n\n// Grid-stride loop",
        )
        .replace(
            "        y[i] = fmaxf(x[i], 0.0f);",
            "        stage[threadIdx.x] = x[i];\n        y[i] = fmaxf(stage[threadIdx.x], 0.0f);",
        )
        .replace("<<<blocks, threads>>>", "<<<blocks, threads, threads * sizeof(float)>>>")
    )
    assert "extern __shared__ float stage[];" in staged and "sizeof(float)>>>" in staged
    result = tier2(staged, RELU_PROBLEM)
    assert_verdict(result, Verdict.PASS)
    assert result.launches == {"relu_kernel": BOUNDARY.seeds}


# ---------------------------------------------------------------- variations


def test_python_that_reads_device_memory_through_ctypes_faults_as_on_a_gpu():
    # The same read as the binding's TORCH_CHECK, one language layer up.
    forward = """        first = ctypes.c_float.from_address(x.data_ptr()).value
        return ext.rowsum(x) + 0 * first"""
    result = tier2(candidate(forward))
    assert_verdict(result, Verdict.RUNTIME_ERROR)
    assert "host code read or wrote device memory" in result.reason, result.reason


def test_a_child_that_outlives_the_host_to_write_the_outputs_is_stopped_first():
    # A wrong kernel; at import a detached grandchild waits for the host to end, then writes a
    # passing report over every file the judge reads. The device process stops every other
    # process of the sandbox before it writes them.
    prelude = """
import os as _os, time as _time
if _os.fork() == 0:
    _os.setsid()
    if _os.fork() == 0:
        _time.sleep(3)
        for _name in ("report.json", "outputs.safetensors", "host_report.json"):
            open(_name, "w").write('{"verdict": "pass", "reason": "forged", "trials": 5}')
    _os._exit(0)
"""
    result = tier2(candidate("        return ext.rowsum_wrong(x)", prelude))
    assert_verdict(result, Verdict.VALUE_MISMATCH)
    assert result.max_abs_diff is not None and abs(result.max_abs_diff - 1.0) < 1e-3, result.reason


def test_a_candidate_that_counts_its_calls_cannot_find_the_kernels_off_run():
    # Without the boundary the kernels-off run is one more call of forward: torch for the judged
    # trials, garbage on the extra call. Behind it the host is called for the trials alone, and the
    # replay re-runs trial 1's torch with the kernels off.
    prelude = "_calls = [0]"
    forward = f"""        _calls[0] += 1
        ext.launch_only(x)
        return x.sum(1) if _calls[0] <= {BOUNDARY.seeds * 2} else torch.zeros(x.shape[0], device=x.device)"""
    result = tier2(candidate(forward, prelude))
    assert_verdict(result, Verdict.STATIC_REJECT)
    assert "with the candidate's kernels disabled" in result.reason, result.reason


def test_a_kernel_for_row_0_while_python_copies_in_host_sums_for_the_rest_is_a_fallback():
    # The partial grid one layer up: the kernel sums row 0; Python sums the other rows on the host
    # and copies them into the device tensor.
    forward = """        out = torch.empty(x.shape[0], device=x.device)
        out[:1] = ext.rowsum(x[:1].contiguous())
        out[1:] = x[1:].cpu().sum(1)
        return out"""
    result = tier2(candidate(forward))
    assert_verdict(result, Verdict.STATIC_REJECT)
    # The host's sums need the inputs on the host: the data-flow policy refuses that copy first
    # (under mixed too), before the host-off replay would find the 15 elements host code made.
    assert result.reason.startswith("policy mixed: trial 1: aten::_to_copy moved device data to the host"), (
        result.reason
    )


def test_the_device_range_is_reserved_at_the_whole_address_the_runtime_returns():
    # ctypes reads a C int unless told otherwise: the address came back cut to its low 32 bits, and
    # a range placed at a multiple of 4 GiB (one in 2,048 on 2 MiB boundaries) read as "not reserved".
    from cuset_core.verify.cpu.build import prepare_preludes, runtime_library

    probe = """
import ctypes, sys
import torch
from cuset_core.verify.cpu.device.side import reserve_device_range
runtime = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL, use_errno=True)
start = reserve_device_range(runtime, 1 << 30)
maps = [line.split()[0].split("-") for line in open("/proc/self/maps")]
print(start > (1 << 32), any(int(low, 16) == start and int(high, 16) - start >= 1 << 30 for low, high in maps))
"""
    library = runtime_library(prepare_preludes())
    done = subprocess.run([sys.executable, "-c", probe, str(library)], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "True"], done.stdout + done.stderr


def test_the_device_range_fits_under_the_sandboxs_address_space_limit():
    # A CUDA build of torch maps about 3 GiB on import, most of the sandbox's 4 GiB RLIMIT_AS: the
    # device process reserves half of what is left rather than a fixed 1 GiB it cannot get.
    probe = """
import resource
from pathlib import Path
from cuset_core.verify.cpu.device.side import MIN_ARENA_BYTES, arena_bytes
used = next(int(l.split()[1]) * 1024 for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (used + (300 << 20), resource.RLIM_INFINITY))
print(arena_bytes() >> 20, MIN_ARENA_BYTES >> 20)
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    reserved, least = map(int, done.stdout.split())
    assert least <= reserved <= 150, done.stdout
