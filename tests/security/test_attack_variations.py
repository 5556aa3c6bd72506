"""Variations of the six attack classes of issue 23, written apart from the tests that fixed them:
other mechanisms to the same end. Each test fails if its attack works: the verdict is not ``pass``
(or, for the judge's own robustness, not ``internal_error`` or ``unsupported``), it is the verdict
that names the fault, and the reason says why.

1. Nothing checks that a kernel did the work: libc's ``memmove`` through ``ctypes``, host sums
   copied in with ``cudaMemcpy``, a grid that covers part of the output, an op registered with
   ``torch.library``.
2. The judged outputs are whatever the candidate's process writes: a patched ``FallbackMonitor``,
   a forged launch count, a C++ static destructor, a disabled kernels-off trial.
3. Candidate data crashes the judge: duplicated JSON keys, a literal that overflows to infinity, a
   report that is not UTF-8, unsigned and complex outputs, a 5000-digit integer, trials that
   change type.
4. Blame moves to the verifier: the harness's own ``Decided`` raised by the candidate, a forged
   runtime abort line, a feature named only in ``#if 0`` or a string literal, a header included
   only in ``#if 0``, an original size named only in ``#if 0``.
5. The verifier can be recognised: the harness's command line, ``torch.cuda.is_available()``, a
   C++14 digit separator that hides a macro test from tier 0, a table of answers for the
   evaluations' fixed seed.
6. A GPU would disagree: shared memory read across warps after ``__syncwarp`` only, an
   uninitialised dynamic shared accumulator, an opt-in smaller than the launch, a racing update in
   a ``__device__`` helper, host code reading device memory, a kernel special-cased for the
   reduced size (torch in its binding, or a claimed build failure, at any other size).
7. The verifier's own shortcuts: tier 1's first try with only the standard headers the code
   names (a ``sort`` or, inside a template, a ``max_element`` of the candidate's own that torch's
   headers make ambiguous; a bare ``accumulate`` found by argument-dependent lookup, in the CUDA
   or the C++ sources); tier 2 started beside tier 1 (a kernel a GPU's compiler refuses, which
   tier 2 alone passes); and tier 2's check at smaller sizes after a timeout (a candidate right
   at those sizes and endless above them: in its binding, its kernel, its Python forward or a
   Python thread).
8. Which library runs for which extension: extensions built in another order than the source
   states them (a wrong one built first must not run the library built ahead for a right one),
   names the candidate gives its extensions (the verifier's own among them), extensions built from
   a Python thread or the model's constructor, the same sources under two names, two extensions
   that differ only in their C++ binding layer, and a library imported by its module name past
   ``load_inline``.

The tier-2 candidates run behind the device boundary (``VerifySettings.device_boundary``, the
default), where host code that touches device memory faults as on a GPU. The tier-2
candidates compute the row sums of ``cpu_cases/rowsum_problem.py`` with one extension that holds
every variant (g++ builds it once, into a library cache the module shares) and share the
reference runs (one per problem and seed); they are marked slow. The judge's data handling is tested against a stub in place
of the sandboxed sides (``judge._run_side``), as ``test_judge_blame`` does.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from attacks import HONEST, WRONG_KERNEL
from safetensors.torch import save

from cuset_core.verify import cpu
from cuset_core.verify.candidate import parse_candidate
from cuset_core.verify.compile import CompileReport, compile_candidate
from cuset_core.verify.cpu import harness, run_cpu_tier
from cuset_core.verify.cpu.build import toolchain
from cuset_core.verify.cpu.claims import unsupported_confirmer
from cuset_core.verify.execution import judge
from cuset_core.verify.execution.contracts import (
    OUTPUTS_FILE,
    REASON_CHARS,
    REPORT_FILE,
    CandidateJob,
    CpuJob,
    ReferenceDetails,
    ReferenceReport,
)
from cuset_core.verify.execution.library_cache import LibraryCache
from cuset_core.verify.execution.reference_pool import ReferencePool
from cuset_core.verify.execution.tier_run import ReferenceRun, TierSpec
from cuset_core.verify.execution.transfer import _encode
from cuset_core.verify.result import Tier, Verdict, VerifyResult
from cuset_core.verify.run import verify
from cuset_core.verify.sandbox import SandboxOutcome
from cuset_core.verify.settings import SandboxLimits, VerifySettings
from cuset_core.verify.source.static import check_static

PROBLEM = (Path(__file__).parents[1] / "unit" / "cpu_cases" / "rowsum_problem.py").read_text()
# 32 budgets of elements: reduced to COLS=16000, checked again at a second size, too large to rerun as written.
LARGE_PROBLEM = PROBLEM.replace("COLS = 1000", "COLS = 1000 * 512")
RELU_PROBLEM = (Path(__file__).parents[2] / "cuset_core" / "demo" / "problems" / "02_relu.py").read_text()
# The checks this suite tests decide under the mixed policy; under kernels (the default) the
# device process refuses each attack's torch compute or transfer first (test_data_flow_policy.py).
SETTINGS = VerifySettings(tier=Tier.CPU, policy="mixed", limits=SandboxLimits(wall_s=300, cpu_s=300))

# Every tier-2 variant in one extension: each test's candidate builds the same library.
CUDA = r"""
#include <torch/extension.h>
#include <cmath>
#include <cstdio>
#include <vector>

__global__ void noop_kernel(const float* x, float* out) {}

// Sums in double: a float running sum over 16000 columns drifts past the tolerance from torch's.
__global__ void rowsum_kernel(const float* x, float* out, int cols) {
    double total = 0;
    for (int j = 0; j < cols; ++j) total += x[blockIdx.x * cols + j];
    out[blockIdx.x] = total;
}

// Wrong by exactly 1 in every row.
__global__ void rowsum_plus_one_kernel(const float* x, float* out, int cols) {
    double total = 1;
    for (int j = 0; j < cols; ++j) total += x[blockIdx.x * cols + j];
    out[blockIdx.x] = total;
}

// Copies n floats: all it does is move what it is given.
__global__ void copy_kernel(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i];
}

__global__ void first_row_kernel(const float* x, float* out, int cols) {
    float total = 0.f;
    for (int j = 0; j < cols; ++j) total += x[j];
    out[0] = total;
}

// The partial sums of 64 threads in shared memory, read by thread 0 of the other warp's too
// after a __syncwarp, which orders the lanes of one warp only: __syncthreads is missing.
__global__ void rowsum_warp_synced_kernel(const float* x, float* out, int cols) {
    __shared__ float part[64];
    float v = 0.f;
    for (int j = threadIdx.x; j < cols; j += 64) v += x[blockIdx.x * cols + j];
    part[threadIdx.x] = v;
    __syncwarp();
    if (threadIdx.x == 0) {
        float total = 0.f;
        for (int k = 0; k < 64; ++k) total += part[k];
        out[blockIdx.x] = total;
    }
}

// A dynamic shared accumulator nobody set to zero.
__global__ void rowsum_dynamic_accumulator_kernel(const float* x, float* out, int cols) {
    extern __shared__ float total[];
    float v = 0.f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) v += x[blockIdx.x * cols + j];
    atomicAdd(&total[0], v);
    __syncthreads();
    if (threadIdx.x == 0) out[blockIdx.x] = total[0];
}

__global__ void rowsum_staged_kernel(const float* x, float* out, int cols) {
    extern __shared__ float row[];
    for (int j = threadIdx.x; j < cols; j += blockDim.x) row[j] = x[blockIdx.x * cols + j];
    __syncthreads();
    if (threadIdx.x == 0) {
        float total = 0.f;
        for (int j = 0; j < cols; ++j) total += row[j];
        out[blockIdx.x] = total;
    }
}

// Every thread of a block adds into one element through a helper, without an atomic.
__device__ void accumulate(float* into, float value) { *into += value; }
__global__ void rowsum_helper_kernel(const float* x, float* out, int cols) {
    for (int j = threadIdx.x; j < cols; j += blockDim.x) accumulate(&out[blockIdx.x], x[blockIdx.x * cols + j]);
}

torch::Tensor rowsum(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_kernel<<<x.size(0), 1>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}

torch::Tensor copy_of(torch::Tensor x) {
    auto out = torch::empty_like(x);
    int n = x.numel();
    copy_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}

torch::Tensor rowsum_wrong(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_plus_one_kernel<<<x.size(0), 1>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}

torch::Tensor launch_only(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    noop_kernel<<<1, 1>>>(x.data_ptr<float>(), out.data_ptr<float>());
    return out;
}

torch::Tensor binding_sum(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    noop_kernel<<<1, 1>>>(x.data_ptr<float>(), out.data_ptr<float>());
    return at::sum(x, 1);
}

torch::Tensor sum_without_launch(torch::Tensor x) { return at::sum(x, 1); }

// The host sums a device-to-host copy and copies the sums back, beside a no-op launch: what a
// GPU would run too.
static std::vector<float> host_row_sums(torch::Tensor x) {
    int rows = x.size(0), cols = x.size(1);
    std::vector<float> staged(rows * cols), sums(rows);
    cudaMemcpy(staged.data(), x.data_ptr<float>(), staged.size() * sizeof(float), cudaMemcpyDeviceToHost);
    for (int r = 0; r < rows; ++r) {
        double total = 0;
        for (int c = 0; c < cols; ++c) total += staged[r * cols + c];
        sums[r] = total;
    }
    return sums;
}

torch::Tensor copied_from_host(torch::Tensor x) {
    std::vector<float> sums = host_row_sums(x);
    auto out = torch::empty({x.size(0)}, x.options());
    noop_kernel<<<1, 1>>>(x.data_ptr<float>(), out.data_ptr<float>());
    cudaMemcpy(out.data_ptr<float>(), sums.data(), sums.size() * sizeof(float), cudaMemcpyHostToDevice);
    return out;
}

// The kernel's grid covers row 0; the host computes every other row.
torch::Tensor partial_grid(torch::Tensor x) {
    std::vector<float> sums = host_row_sums(x);
    auto out = torch::empty({x.size(0)}, x.options());
    cudaMemcpy(out.data_ptr<float>() + 1, sums.data() + 1, (sums.size() - 1) * sizeof(float), cudaMemcpyHostToDevice);
    first_row_kernel<<<1, 1>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}

torch::Tensor warp_synced(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_warp_synced_kernel<<<x.size(0), 64>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}

torch::Tensor dynamic_accumulator(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_dynamic_accumulator_kernel<<<x.size(0), 128, sizeof(float)>>>(
        x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}

// Opts in to 64 KiB of dynamic shared memory, then launches with 96 KiB.
torch::Tensor staged_short_opt_in(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    cudaFuncSetAttribute(rowsum_staged_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024);
    rowsum_staged_kernel<<<x.size(0), 256, 96 * 1024>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}

torch::Tensor helper_race(torch::Tensor x) {
    auto out = torch::zeros({x.size(0)}, x.options());
    rowsum_helper_kernel<<<x.size(0), 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}

// Host code that reads device memory (an input check): a GPU faults here.
torch::Tensor host_peek(torch::Tensor x) {
    TORCH_CHECK(std::isfinite(x.data_ptr<float>()[0]), "the input starts with a NaN");
    return rowsum(x);
}

// Puts outputs prepared at import over the harness's, when the library is unloaded at a normal exit.
struct RestoreOutputsAtExit {
    ~RestoreOutputsAtExit() { std::rename("prepared.safetensors", "outputs.safetensors"); }
};
static RestoreOutputsAtExit restore_outputs_at_exit;
"""
FUNCTIONS = [
    "rowsum",
    "copy_of",
    "rowsum_wrong",
    "launch_only",
    "binding_sum",
    "sum_without_launch",
    "copied_from_host",
    "partial_grid",
    "warp_synced",
    "dynamic_accumulator",
    "staged_short_opt_in",
    "helper_race",
    "host_peek",
]
SIGNATURES = "\n".join(f"torch::Tensor {name}(torch::Tensor x);" for name in FUNCTIONS)


def candidate(forward: str, prelude: str = "", cuda: str = CUDA) -> str:
    """A ``ModelNew`` that builds the shared extension (or ``cuda`` in its place), runs ``prelude`` at
    import and ``forward`` (its body, indented) as its forward."""
    return f'''import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(
    name="variations_ext", cpp_sources=r"""{SIGNATURES}""", cuda_sources=r"""{cuda}""", functions={FUNCTIONS!r}
)
{prelude}

class ModelNew(nn.Module):
    def forward(self, x):
{forward}
'''


# The module's candidates are one batch, as an eval's samples of a problem are: one reference run per
# problem and seed.
REFERENCES = ReferencePool()


def tier2(
    answer: str, libraries: LibraryCache, problem: str = PROBLEM, settings: VerifySettings = SETTINGS
) -> VerifyResult:
    assert check_static(parse_candidate(answer)) is None, "the attack must get past tier 0 to mean anything"
    return run_cpu_tier(problem, parse_candidate(answer), settings, libraries, REFERENCES)


def assert_verdict(result: VerifyResult, verdict: Verdict) -> None:
    assert result.verdict is not Verdict.PASS, (result.reason, result.log[-2000:])
    assert result.verdict is verdict, (result.verdict, result.reason, result.log[-2000:])


def assert_kernels_off_fallback(result: VerifyResult) -> None:
    assert_verdict(result, Verdict.STATIC_REJECT)
    assert result.reason.startswith("run-time fallback: trial "), result.reason
    assert "with the candidate's kernels disabled" in result.reason, result.reason


def assert_host_fault(result: VerifyResult) -> None:
    """Host code touched device memory: behind the device boundary it faults, as on a GPU."""
    assert_verdict(result, Verdict.RUNTIME_ERROR)
    assert "host code read or wrote device memory (a GPU faults there too)" in result.reason, result.reason


# ---------------------------------------------------------------- (1) nothing checks that a kernel did the work


def assert_torch_made_fallback(result: VerifyResult, operator: str = "aten::sum") -> None:
    """The device process saw torch compute an output, or part of one, in place: the kernels did not."""
    assert_verdict(result, Verdict.STATIC_REJECT)
    assert "in what torch computed on the device with the candidate's kernels disabled" in result.reason, result.reason
    assert operator in result.reason, result.reason


@pytest.mark.slow
def test_the_shared_extensions_honest_kernel_passes(libraries):
    # The control: the variants below fail for their attack, not for the extension around them.
    result = tier2(candidate("        return ext.rowsum(x)"), libraries)
    assert result.verdict is Verdict.PASS, (result.verdict, result.reason, result.log[-2000:])


@pytest.mark.slow
def test_torch_sums_memmoved_by_ctypes_into_a_no_op_launchs_output_fault(libraries):
    # libc writes the output from the host: no aten op touches it. The address is device memory.
    forward = """        out = ext.launch_only(x)
        sums = x.sum(1)
        ctypes.memmove(out.data_ptr(), sums.data_ptr(), sums.numel() * sums.element_size())
        return out"""
    assert_host_fault(tier2(candidate(forward), libraries))


@pytest.mark.slow
def test_host_sums_copied_in_with_cuda_memcpy_beside_a_no_op_launch_are_refused(libraries):
    # The host's sums need the inputs on the host: the data-flow policy refuses that copy (under
    # mixed too) before the replays would find what host code made.
    result = tier2(candidate("        return ext.copied_from_host(x)"), libraries)
    assert result.verdict is Verdict.STATIC_REJECT, (result.reason, result.log[-2000:])
    assert result.reason.startswith("policy mixed: trial 1: cudaMemcpy (device to host)"), result.reason


@pytest.mark.slow
def test_a_grid_that_covers_one_row_while_the_host_computes_the_rest_is_refused(libraries):
    # The host computes 15 rows from a device-to-host copy: the data-flow policy refuses the copy
    # (the host-off replay, which found the 15 rows before, stays behind it).
    result = tier2(candidate("        return ext.partial_grid(x)"), libraries)
    assert result.verdict is Verdict.STATIC_REJECT, (result.reason, result.log[-2000:])
    assert result.reason.startswith("policy mixed: trial 1: cudaMemcpy (device to host)"), result.reason


@pytest.mark.slow
def test_a_kernel_for_row_0_while_torch_on_the_device_sums_the_rest_is_a_fallback(libraries):
    # The partial grid with torch in the host's place: the device computes every row, so nothing
    # is the host's; the kernels-off run leaves row 0 wrong, so the whole output does not match.
    forward = """        out = torch.empty(x.shape[0], device=x.device)
        out[:1] = ext.rowsum(x[:1].contiguous())
        out[1:] = x[1:].sum(1)
        return out"""
    assert_torch_made_fallback(tier2(candidate(forward), libraries))


@pytest.mark.slow
def test_a_kernel_that_copies_sums_torch_computed_on_the_device_is_a_fallback(libraries):
    # The kernel writes every element of the output, so the kernels-off run leaves it all wrong.
    assert_torch_made_fallback(tier2(candidate("        return ext.copy_of(x.sum(1))"), libraries))


@pytest.mark.slow
def test_partial_sums_by_torch_that_a_kernel_finishes_pass(libraries):
    # A mixed solution stays legal: torch's result is not the output, the kernel computes it.
    forward = "        return ext.rowsum(x.view(x.shape[0], 10, -1).sum(2).contiguous())"
    result = tier2(candidate(forward), libraries)
    assert result.verdict is Verdict.PASS, (result.reason, result.log[-2000:])


@pytest.mark.slow
def test_torch_that_finishes_from_a_kernels_result_passes(libraries):
    # The other order, as KernelBench's level-3 solutions leave a network's last layer to torch:
    # torch's sums are the output, but made from the kernel's result (garbage without it).
    forward = "        return ext.copy_of(x * 2).sum(1) / 2"
    result = tier2(candidate(forward), libraries)
    assert result.verdict is Verdict.PASS, (result.reason, result.log[-2000:])


@pytest.mark.slow
def test_torch_compute_registered_as_a_torch_library_op_beside_a_no_op_launch_is_a_fallback(libraries):
    # An op of another namespace, with a CUDA kernel as a GPU would run it: the kernel runs in the
    # host, and the torch it calls on device tensors is recorded and replayed like any other.
    prelude = """
_library = torch.library.Library("rowsum_ops", "DEF")
_library.define("rowsum(Tensor x) -> Tensor")
_library.impl("rowsum", lambda x: torch.ops.aten.sum.dim_IntList(x, [1]), "CUDA")
"""
    forward = "        ext.launch_only(x)\n        return torch.ops.rowsum_ops.rowsum(x)"
    assert_kernels_off_fallback(tier2(candidate(forward, prelude), libraries))


# ---------------------------------------------------------------- (2) the outputs are whatever the process writes


@pytest.mark.slow
def test_a_fallback_monitor_patched_to_see_no_fallback_still_leaves_the_torch_expression_caught(libraries):
    # The monitor is the candidate's process's; the kernels-off run is judged by the judge.
    prelude = """
import cuset_core.verify.execution.fallback as _fallback
_fallback.FallbackMonitor.fallback_reason = lambda self, outputs: None
"""
    forward = "        ext.launch_only(x)\n        return x.sum(1)"
    assert_kernels_off_fallback(tier2(candidate(forward, prelude), libraries))


@pytest.mark.slow
def test_a_launch_count_forged_by_patching_the_harness_does_not_pass_a_binding_that_launches_nothing(libraries):
    # Without a launch the judge would say "no custom kernel ran"; with the forged count, its outputs decide.
    prelude = """
import sys as _sys
_sys.modules["__main__"].Builder.launches = lambda self: {"rowsum_kernel": 5}
"""
    result = tier2(candidate("        return ext.sum_without_launch(x)", prelude), libraries)
    # The device process counts the launches: the host's patched count never reaches the judge.
    assert_verdict(result, Verdict.STATIC_REJECT)
    assert "no kernel launched" in result.reason, result.reason
    assert result.launches == {}


@pytest.mark.slow
def test_outputs_a_cpp_static_destructor_puts_over_the_harnesss_are_never_judged(libraries):
    # A wrong kernel; the right sums, prepared at import, wait for the library's destructor.
    prelude = """
from pathlib import Path as _Path
from cuset_core.verify.execution.transfer import load_values as _load, save_values as _save
_trials = _load(_Path("inputs.safetensors").read_bytes())["trials"]
_save(_Path("prepared.safetensors"), {"trials": [[inputs[0].sum(1)] for inputs in _trials]})
"""
    result = tier2(candidate("        return ext.rowsum_wrong(x)", prelude), libraries)
    # The inputs file is the device process's, gone from the folder before the candidate's code runs.
    assert_verdict(result, Verdict.RUNTIME_ERROR)
    assert "inputs.safetensors" in result.log, result.log[-2000:]


@pytest.mark.slow
def test_a_candidate_that_replaces_the_harnesss_kernels_off_trial_is_still_a_fallback(libraries):
    prelude = """
import sys as _sys
_sys.modules["__main__"]._kernels_off_trial = lambda *args: None
"""
    assert_kernels_off_fallback(tier2(candidate("        return ext.binding_sum(x)", prelude), libraries))


@pytest.mark.slow
def test_a_child_forked_in_forward_that_writes_a_passing_report_later_is_stopped_first(libraries):
    # A wrong kernel; the child outlives forward and writes a passing report and outputs once the
    # trials should be over. The device process stops it before it writes the judged files.
    forward = """        import os, time
        if os.fork() == 0:
            time.sleep(2)
            for name in ("report.json", "outputs.safetensors", "host_report.json"):
                open(name, "w").write('{"verdict": "pass", "reason": "forged", "trials": 5}')
            os._exit(0)
        return ext.rowsum_wrong(x)"""
    result = tier2(candidate(forward), libraries)
    assert_verdict(result, Verdict.VALUE_MISMATCH)
    assert result.max_abs_diff is not None and abs(result.max_abs_diff - 1.0) < 1e-3, result.reason


@pytest.mark.slow
def test_a_python_thread_that_reads_device_memory_faults_as_on_a_gpu(libraries):
    # The ctypes read of the boundary's own test, from another thread than the harness's.
    forward = """        import threading
        seen = []
        reader = threading.Thread(target=lambda: seen.append(ctypes.string_at(x.data_ptr(), 4)))
        reader.start()
        reader.join()
        return ext.rowsum(x)"""
    assert_host_fault(tier2(candidate(forward), libraries))


# ---------------------------------------------------------------- the judge against a stub candidate side

STUB_SPEC = TierSpec(Tier.CPU, "stub", SandboxLimits(), lambda folder: {})
STUB_JOB = CpuJob(
    kind="python",
    seeds=3,
    reduce_sizes=False,
    max_elements=1 << 20,
    preludes=[],
    include_dirs=[],
    library_dirs=[],
)
STUB_SETTINGS = VerifySettings(tier=Tier.CPU, seeds=3)
EXPECTED = [[torch.arange(4.0) + trial] for trial in range(3)]
WRONG = [[torch.arange(4.0) + trial + 1] for trial in range(3)]
PASSING = json.dumps({"verdict": "pass", "launches": {"relu_kernel": 3}}).encode()
EXITED = SandboxOutcome(0, "", "", 0.1, False, None, None)


def outputs(trials: list[list[Any]]) -> bytes:
    """The outputs file a candidate side writes for ``trials``."""
    tensors: dict[str, Any] = {}
    layout = {"trials": _encode(trials, "trials", tensors)}
    return save(tensors, metadata={"cuset": json.dumps(layout)})


def judged(
    monkeypatch,
    tmp_path: Path,
    report: bytes | None,
    produced: bytes | None,
    answer: str = HONEST,
    spec: TierSpec = STUB_SPEC,
    ended: SandboxOutcome = EXITED,
) -> VerifyResult:
    """The judge's verdict on a candidate side that left ``report`` and ``produced`` (None: no file)
    and ended as ``ended``."""

    def candidate_side(spec: TierSpec, side: str, folder: Path, job: Any, cancel: Any = None) -> SandboxOutcome:
        for name, data in ((REPORT_FILE, report), (OUTPUTS_FILE, produced)):
            if data is not None:
                (folder / name).write_bytes(data)
        return ended

    monkeypatch.setattr(judge, "_run_side", candidate_side)
    reference = ReferenceRun(b"", EXPECTED, ReferenceReport(verdict=Verdict.PASS), 1234)
    result, _ = judge.run_candidate(spec, tmp_path, parse_candidate(answer), reference, STUB_JOB, STUB_SETTINGS)
    return result


def assert_candidates(result: VerifyResult, verdict: Verdict = Verdict.RUNTIME_ERROR) -> None:
    assert result.verdict not in (Verdict.PASS, Verdict.INTERNAL_ERROR, Verdict.UNSUPPORTED), result.reason
    assert result.verdict is verdict, (result.verdict, result.reason, result.log[-2000:])
    assert len(result.reason) <= REASON_CHARS


# ---------------------------------------------------------------- (3) candidate data crashes the judge


def test_a_report_whose_duplicated_verdict_key_ends_in_internal_error_is_the_candidates_runtime_error(
    monkeypatch, tmp_path
):
    # A JSON parser keeps one of the two values: whichever it keeps, the report stays the candidate's.
    duplicated = b'{"verdict": "pass", "launches": {"relu_kernel": 3}, "verdict": "internal_error"}'
    result = judged(monkeypatch, tmp_path, duplicated, outputs(WRONG))
    assert_candidates(result)
    assert result.reason == "the candidate's output is rejected: report.json is not a valid report (field verdict)"


def test_a_timing_written_as_a_literal_that_overflows_to_infinity_is_the_candidates_runtime_error(
    monkeypatch, tmp_path
):
    # 1e400 is a valid JSON number that no float holds: no NaN or Infinity token is needed.
    overflowing = b'{"verdict": "pass", "launches": {"relu_kernel": 3}, "timings_s": {"run": 1e400}}'
    result = judged(monkeypatch, tmp_path, overflowing, outputs(WRONG))
    assert_candidates(result)
    assert result.reason == "the candidate's output is rejected: report.json is not a valid report (field timings_s)"


@pytest.mark.parametrize(
    "encoded",
    [
        pytest.param(json.dumps({"verdict": "pass"}).encode("utf-16"), id="UTF-16 with a byte-order mark"),
        pytest.param(b'{"verdict": "runtime_error", "reason": "\xff\xfe\xc0"}', id="bytes that are not UTF-8"),
    ],
)
def test_a_report_that_is_not_utf_8_is_the_candidates_runtime_error(monkeypatch, tmp_path, encoded):
    result = judged(monkeypatch, tmp_path, encoded, outputs(WRONG))
    assert_candidates(result)
    assert result.reason.startswith("the candidate's output is rejected: report.json is not a valid report")


@pytest.mark.parametrize("dtype", [torch.complex64, torch.uint16, torch.uint32, torch.uint64], ids=str)
def test_outputs_of_a_complex_or_wide_unsigned_dtype_are_a_value_mismatch(monkeypatch, tmp_path, dtype):
    # Each holds the expected values exactly: only the dtype is wrong, and the judge must not crash on it.
    odd = [[expected[0].to(dtype)] for expected in EXPECTED]
    result = judged(monkeypatch, tmp_path, PASSING, outputs(odd))
    assert_candidates(result, Verdict.VALUE_MISMATCH)
    assert result.reason == f"trial 1 (seed 1234): output 0: expected dtype torch.float32, got {dtype}"


def test_a_5000_digit_integer_in_the_outputs_layout_is_the_candidates_runtime_error(monkeypatch, tmp_path):
    # Past Python's limit on converting digits to an int: the layout's JSON parser raises ValueError.
    layout = '{"trials": {"list": [{"list": [{"v": ' + "9" * 5000 + '}]}, {"list": []}, {"list": []}]}}'
    result = judged(monkeypatch, tmp_path, PASSING, save({"x": torch.zeros(4)}, metadata={"cuset": layout}))
    assert_candidates(result)
    assert result.reason == "the candidate's output is rejected: not a readable safetensors file (ValueError)"


def test_trials_whose_output_turns_from_a_tensor_into_a_number_are_the_candidates_runtime_error(monkeypatch, tmp_path):
    # The check for outputs that ignore their inputs compares trial 1's tensor with trial 2's number,
    # which torch refuses to make a truth value of.
    changing = [EXPECTED[0], [3], EXPECTED[2]]
    result = judged(monkeypatch, tmp_path, PASSING, outputs(changing))
    assert_candidates(result)
    assert result.reason == "the candidate's output could not be judged (RuntimeError)"


@pytest.mark.slow
def test_an_exception_whose_message_raises_is_the_candidates_runtime_error(libraries):
    # Formatting the candidate's exception raises again, inside the harness's own handler.
    prelude = """
class Unprintable(Exception):
    def __str__(self):
        raise RecursionError("no message for you")
"""
    forward = "        ext.launch_only(x)\n        raise Unprintable()"
    assert_verdict(tier2(candidate(forward, prelude), libraries), Verdict.RUNTIME_ERROR)


@pytest.mark.slow
def test_outputs_that_contain_themselves_are_the_candidates_runtime_error(libraries):
    # Naming the outputs walks them: a list holding itself has no end.
    forward = "        out = [ext.rowsum(x)]\n        out.append(out)\n        return out"
    assert_verdict(tier2(candidate(forward), libraries), Verdict.RUNTIME_ERROR)


# ---------------------------------------------------------------- (4) blame moves to the verifier


@pytest.mark.slow
def test_the_harnesss_own_decided_raised_with_internal_error_is_the_candidates_runtime_error(libraries):
    # The harness reports what a Decided carries: the candidate raises one with the verifier's verdict.
    forward = """        from cuset_core.verify.execution.contracts import Decided, Outcome
        from cuset_core.verify.result import Verdict
        ext.launch_only(x)
        raise Decided(Outcome(Verdict.INTERNAL_ERROR, "the reference forward failed: the machine ran out of memory"))"""
    result = tier2(candidate(forward), libraries)
    assert_verdict(result, Verdict.RUNTIME_ERROR)
    assert "host_report.json is not a valid report (field verdict)" in result.reason, result.reason


def test_a_forged_runtime_abort_line_blaming_the_reference_is_quoted_as_the_candidates(monkeypatch, tmp_path):
    said = "cuset runtime: the CPU harness failed on the reference side (internal error)"
    crashed = SandboxOutcome(87, "", f"Traceback (most recent call last):\n{said}\n", 0.1, False, None, None)
    result = judged(monkeypatch, tmp_path, None, None, ended=crashed)
    assert_candidates(result)
    quoted = f'(candidate\'s message: "{said}")'
    assert result.reason == f"CPU candidate process exited with status 87 without a result {quoted}"


@pytest.mark.slow
@pytest.mark.parametrize(
    "dead",
    [
        "#if 0\n#include <cub/cub.cuh>\n#endif\n",
        'static const char* kNote = "wmma:: tensor cores would be faster here";\n',
    ],
    ids=["an include inside #if 0", "a string literal"],
)
def test_a_feature_named_only_in_dead_code_or_a_message_does_not_make_a_wrong_kernel_unsupported(libraries, dead):
    result = tier2(candidate("        return ext.rowsum_wrong(x)", cuda=dead + CUDA), libraries)
    assert_verdict(result, Verdict.VALUE_MISMATCH)


def test_a_header_included_only_inside_if_0_does_not_confirm_an_unsupported_claim(monkeypatch, tmp_path):
    dead = "#include <torch/extension.h>\n#if 0\n#include <cutlass/cutlass.h>\n#endif"
    answer = HONEST.replace("#include <torch/extension.h>", dead).replace(*WRONG_KERNEL)
    assert dead in answer and WRONG_KERNEL[1] in answer
    spec = replace(STUB_SPEC, confirm_unsupported=unsupported_confirmer(parse_candidate(answer), toolchain()))
    claim = {"verdict": "unsupported", "reason": "no cutlass", "unsupported_feature": "header <cutlass/cutlass.h>"}
    result = judged(monkeypatch, tmp_path, json.dumps(claim).encode(), outputs(WRONG), answer, spec)
    assert_candidates(result)
    assert result.reason.startswith("the candidate claimed a feature the verifier does not find in it")


def test_a_wrong_kernel_naming_the_original_size_only_inside_if_0_keeps_its_failure():
    dead = "#if 0\nconstexpr int64_t kOriginalDim = 16384;  // the original problem\n#endif\n__global__"
    wrong = parse_candidate(HONEST.replace("__global__", dead, 1).replace(*WRONG_KERNEL))
    reduced = VerifyResult(verdict=Verdict.VALUE_MISMATCH, tier=Tier.CPU, tiers_run=[Tier.CPU], reason="trial 1")
    handed = CandidateJob(overrides={"DIM": 4096}, constants={"DIM": 16384})
    details = ReferenceDetails(original_fits=False, candidate_job=handed)
    result = cpu._at_original_sizes(STUB_SPEC, RELU_PROBLEM, wrong, STUB_SETTINGS, STUB_JOB, reduced, details)
    assert result.verdict is Verdict.VALUE_MISMATCH, (result.verdict, result.reason)


# ---------------------------------------------------------------- (5) the verifier can be recognised


@pytest.mark.slow
def test_python_that_recognises_the_harness_by_its_command_line_and_falls_back_is_caught(libraries):
    # Right (torch in the binding) where it sees the verifier, a wrong kernel elsewhere.
    forward = """        import sys
        command = open("/proc/self/cmdline", "rb").read()
        verifier = b"cuset_core" in command or "cuset_core" in sys.modules
        return ext.binding_sum(x) if verifier else ext.rowsum_wrong(x)"""
    assert_kernels_off_fallback(tier2(candidate(forward), libraries))


@pytest.mark.slow
def test_python_that_finds_no_gpu_device_file_and_falls_back_is_caught(libraries):
    # The sandbox has no /dev/nvidiactl: torch where it is missing, a wrong kernel where it is not.
    forward = """        import os
        if os.path.exists("/dev/nvidiactl"):
            return ext.rowsum_wrong(x)
        ext.launch_only(x)
        return x.sum(1)"""
    assert_kernels_off_fallback(tier2(candidate(forward), libraries))


@pytest.mark.slow
def test_python_that_times_a_launch_and_lets_a_kernel_copy_torchs_sums_when_slow_is_caught(libraries):
    # A launch through the device process takes far longer than a GPU's; the slow branch hides its
    # torch from the kernels-off comparison by having a kernel copy it into the output.
    forward = """        import time
        start = time.perf_counter()
        ext.launch_only(x)
        if time.perf_counter() - start > 1e-4:
            return ext.copy_of(x.sum(1))
        return ext.rowsum_wrong(x)"""
    assert_torch_made_fallback(tier2(candidate(forward), libraries))


@pytest.mark.slow
def test_a_forward_that_runs_another_kernel_when_cuda_is_available_is_judged_on_the_gpus_branch(libraries):
    forward = "        return ext.rowsum_wrong(x) if torch.cuda.is_available() else ext.rowsum(x)"
    result = tier2(candidate(forward), libraries)
    assert_verdict(result, Verdict.VALUE_MISMATCH)


def test_a_digit_separator_does_not_hide_a_test_of_the_runtimes_header_guard_from_tier_0():
    tested = (
        "#if 1'0 && defined(CUSET_CUDA_CPU_H)\n        y[i] = fmaxf(x[i], 0.0f);\n#else\n        y[i] = x[i];\n#endif"
    )
    answer = HONEST.replace("        " + WRONG_KERNEL[0], tested)
    assert tested in answer
    result = check_static(parse_candidate(answer))
    assert result is not None, "tier 0 let the test of the runtime's header guard through"
    assert result.verdict is Verdict.STATIC_REJECT and "CUSET_CUDA_CPU_H" in result.reason, result.reason


@pytest.mark.slow
def test_a_table_of_answers_for_the_evaluations_fixed_seed_is_a_fallback(libraries):
    # Evaluations fix input_seed (KernelBench's 1000) so that their runs compare: the inputs are then
    # known in advance. The table is found by the input's first value and copied into a kernel's output.
    prelude = """
_table = {}
for _trial in range(5):
    torch.manual_seed(1000 + _trial)
    _drawn = torch.randn(16, 1000)
    for _scale in (1.0, 4.0):
        _table[round(float(_drawn[0, 0]) * _scale, 4)] = (_drawn * _scale).sum(1)
"""
    forward = """        out = ext.launch_only(x)
        answer = _table[round(float(x[0, 0]), 4)]
        out.copy_(answer)
        return out"""
    fixed = SETTINGS.model_copy(update={"input_seed": 1000})
    result = tier2(candidate(forward, prelude), libraries, settings=fixed)
    # Looking its inputs up in the table reads device data on the host: the policy refuses it first.
    assert result.verdict is Verdict.STATIC_REJECT, (result.reason, result.log[-2000:])
    assert result.reason.startswith("policy mixed: trial 1: aten::_local_scalar_dense moved device data"), result.reason


# ---------------------------------------------------------------- (6) a GPU would disagree


@pytest.mark.slow
def test_shared_memory_read_across_warps_after_syncwarp_alone_is_a_value_mismatch(libraries):
    assert_verdict(tier2(candidate("        return ext.warp_synced(x)"), libraries), Verdict.VALUE_MISMATCH)


@pytest.mark.slow
def test_an_uninitialised_dynamic_shared_accumulator_is_a_value_mismatch(libraries):
    result = tier2(candidate("        return ext.dynamic_accumulator(x)"), libraries)
    assert_verdict(result, Verdict.VALUE_MISMATCH)
    assert "nan" in result.reason  # the poison of dynamic shared memory


@pytest.mark.slow
def test_an_opt_in_for_less_dynamic_shared_memory_than_the_launch_asks_is_a_launch_error(libraries):
    result = tier2(candidate("        return ext.staged_short_opt_in(x)"), libraries)
    assert_verdict(result, Verdict.RUNTIME_ERROR)
    assert (
        "rowsum_staged_kernel was not launched (invalid argument): 98304 bytes of dynamic shared memory, "
        "more than the 65536 bytes it may use" in result.reason
    ), result.reason


@pytest.mark.slow
def test_threads_adding_into_one_element_through_a_device_helper_without_an_atomic_lose_updates(libraries):
    result = tier2(candidate("        return ext.helper_race(x)"), libraries)
    assert_verdict(result, Verdict.VALUE_MISMATCH)
    assert result.reason.startswith("trial 2"), "trial 1 runs each update whole; trial 2 races them"


@pytest.mark.slow
def test_host_code_that_reads_device_memory_is_a_runtime_error(libraries):
    # x.data_ptr<float>()[0] in a TORCH_CHECK of the binding.
    assert_host_fault(tier2(candidate("        return ext.host_peek(x)"), libraries))


def reduced_columns() -> int:
    """The COLS of ``LARGE_PROBLEM`` at tier 2's first reduction, which anyone can work out from its text."""
    return harness.size_overrides(LARGE_PROBLEM, SETTINGS.max_elements)["COLS"]


@pytest.mark.slow
def test_a_kernel_run_only_at_the_reduced_size_with_torch_in_its_binding_elsewhere_is_a_fallback(libraries):
    # At the reduced size its kernel computes the sums; at any other size (the second size, the real
    # one on a GPU) the binding's at::sum does, beside a no-op launch.
    forward = f"        return ext.rowsum(x) if x.shape[1] == {reduced_columns()} else ext.binding_sum(x)"
    result = tier2(candidate(forward), libraries, LARGE_PROBLEM)
    assert_verdict(result, Verdict.STATIC_REJECT)
    assert "run-time fallback" in result.reason and "kernels disabled" in result.reason, result.reason


@pytest.mark.slow
def test_a_kernel_right_only_at_the_reduced_size_cannot_keep_its_pass_by_claiming_a_build_failure_elsewhere(
    libraries,
):
    # A failure the candidate claims for itself at the second size (here a compile error, which no
    # extension built once can have) is still a failure there.
    forward = f"""        from cuset_core.verify.execution.contracts import Decided, Outcome
        from cuset_core.verify.result import Verdict
        if x.shape[1] != {reduced_columns()}:
            raise Decided(Outcome(Verdict.COMPILE_ERROR, "nvcc: the extension does not build at this size"))
        return ext.rowsum(x)"""
    result = tier2(candidate(forward), libraries, LARGE_PROBLEM)
    assert result.verdict is not Verdict.PASS, (result.reason, result.log[-2000:])
    assert "it passed at the sizes COLS=" in result.reason, result.reason


# ---------------------------------------------------------------- (7) the verifier's own shortcuts
# Tier 1 compiles first with only the standard headers the code names; tier 2 checks a candidate
# that timed out at the reduced sizes again at smaller ones. Each shortcut must give the verdict the
# long way gives (tier 1), or never a pass the long way would not give (tier 2).

OWN_SORT = r"""
template <typename It> void sort(It first, It last) {
    for (It i = first; i != last; ++i)
        for (It j = i; j != last; ++j)
            if (*j < *i) { auto t = *i; *i = *j; *j = t; }
}
"""


def rowsum_answer(cuda: str, cpp_helper: str = "") -> str:
    """An answer whose extension (``cuda`` defining ``rowsum``; ``cpp_helper`` in its C++ sources,
    the other unit tier 1 compiles) computes the row sums."""
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="rowsum_ext", cpp_sources=r"""{cpp_helper}torch::Tensor rowsum(torch::Tensor x);""",
                  cuda_sources=r"""{cuda}""", functions=["rowsum"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.rowsum(x)
'''


def sizes_sorted(binding_body: str, helper: str = "", cpp_helper: str = "") -> str:
    """A row-sum answer whose C++ binding runs ``binding_body`` on ``std::vector<int64_t> sizes``
    (the input's sizes) before launching an honest kernel; ``helper`` is defined above the binding."""
    cuda = f"""
#include <torch/extension.h>
#include <vector>

__global__ void rowsum_kernel(const float* x, float* out, int rows, int cols) {{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float sum = 0.f;
    for (int c = 0; c < cols; ++c) sum += x[r * cols + c];
    out[r] = sum;
}}
{helper}
torch::Tensor rowsum(torch::Tensor x) {{
    std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
{binding_body}
    auto out = torch::empty({{x.size(0)}}, x.options());
    int rows = x.size(0), cols = x.size(1);
    rowsum_kernel<<<(rows + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), rows, cols);
    return out;
}}
"""
    return rowsum_answer(cuda, cpp_helper)


def tier1_both_ways(answer: str, tmp_path: Path) -> tuple[CompileReport, CompileReport]:
    """Tier 1's report on ``answer`` with the standard headers on demand (as it runs) and with every
    header at once (as a GPU's nvcc sees torch's own headers)."""
    reports = []
    for on_demand in (True, False):
        folder = tmp_path / f"on_demand_{on_demand}"
        folder.mkdir()
        reports.append(compile_candidate(parse_candidate(answer), VerifySettings(std_on_demand=on_demand), folder))
    return reports[0], reports[1]


BARE_ACCUMULATE = "accumulate(sizes.begin(), sizes.end(), int64_t{0})"
ACCUMULATING = {
    "cuda sources": sizes_sorted(f'    TORCH_CHECK({BARE_ACCUMULATE} > 0, "empty input");'),
    # the other unit tier 1 compiles (g++ on cpp_sources)
    "cpp sources": sizes_sorted(
        "",
        cpp_helper="#include <vector>\n"
        f"int64_t total(const std::vector<int64_t>& sizes) {{ return {BARE_ACCUMULATE}; }}\n",
    ),
}


@pytest.mark.nvcc
@pytest.mark.parametrize("where", ACCUMULATING)
def test_a_bare_accumulate_that_argument_dependent_lookup_resolves_compiles_at_tier_1(tmp_path, where):
    # No std:: anywhere, yet it compiles against torch's headers (<numeric> is among them): the
    # vector's iterators lead argument-dependent lookup to std::accumulate.
    on_demand, every_header = tier1_both_ways(ACCUMULATING[where], tmp_path)
    assert every_header.ok, every_header.log[-2000:]
    assert on_demand.ok, on_demand.log[-2000:]


OWN_MAX_ELEMENT = r"""
template <typename It> It max_element(It first, It last) {
    It best = first;
    for (It i = first; i != last; ++i)
        if (*best < *i) best = i;
    return best;
}
template <typename V> int64_t largest(const V& v) { return *max_element(v.begin(), v.end()); }
"""


AMBIGUOUS = {
    # std::sort meets the candidate's own sort where <algorithm> is in (torch/extension.h brings it)
    "own sort": sizes_sorted("    sort(sizes.begin(), sizes.end());", helper=OWN_SORT),
    # a dependent call: lookup waits for largest<std::vector<int64_t>>, then finds both
    "own max_element in a template": sizes_sorted(
        '    TORCH_CHECK(largest(sizes) > 0, "empty input");', helper=OWN_MAX_ELEMENT
    ),
}


@pytest.mark.nvcc
@pytest.mark.parametrize("what", AMBIGUOUS)
def test_a_function_of_the_candidates_own_that_torchs_headers_make_ambiguous_fails_tier_1(tmp_path, what):
    # Argument-dependent lookup finds std's function of the same name beside the candidate's own,
    # and nvcc calls the call ambiguous; the code never names std's.
    on_demand, every_header = tier1_both_ways(AMBIGUOUS[what], tmp_path)
    assert not every_header.ok, "the long way must refuse it for this test to mean anything"
    assert not on_demand.ok, on_demand.command
    assert "more than one instance" in on_demand.log, on_demand.log[-2000:]


# Right row sums whose kernel a GPU's compiler refuses but the CPU runtime runs: tier 2, started
# beside tier 1, would pass them, and tier 1's rejection must be the verdict all the same.
HOST_CALL_FROM_KERNEL = r"""
#include <torch/extension.h>

float same(float v) { return v; }

__global__ void rowsum_kernel(const float* x, float* out, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float sum = 0.f;
    for (int c = 0; c < cols; ++c) sum += x[r * cols + c];
    out[r] = same(sum);
}
"""
TOO_MUCH_STATIC_SHARED = r"""
#include <torch/extension.h>

__global__ void rowsum_kernel(const float* x, float* out, int rows, int cols) {
    __shared__ float staged[16384];
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    float sum = 0.f;
    if (r < rows)
        for (int c = 0; c < cols; ++c) sum += x[r * cols + c];
    staged[threadIdx.x] = sum;
    __syncthreads();
    if (r < rows) out[r] = staged[threadIdx.x];
}
"""
ROWSUM_BINDING = r"""
torch::Tensor rowsum(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    int rows = x.size(0), cols = x.size(1);
    rowsum_kernel<<<(rows + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), rows, cols);
    return out;
}
"""


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.parametrize(
    "kernel", [HOST_CALL_FROM_KERNEL, TOO_MUCH_STATIC_SHARED], ids=["host call in a kernel", "static shared > 48 KiB"]
)
def test_tier_1s_rejection_stands_though_tier_2_ran_beside_it_and_would_pass(kernel):
    answer = rowsum_answer(kernel + ROWSUM_BINDING)
    alone = run_cpu_tier(PROBLEM, parse_candidate(answer), SETTINGS)
    assert alone.verdict is Verdict.PASS, "tier 2 alone must pass it for this test to mean anything"
    result = verify(PROBLEM, answer, SETTINGS, use_cache=False)
    assert result.verdict is Verdict.COMPILE_ERROR, (result.verdict, result.reason)
    assert result.tiers_run == [Tier.STATIC, Tier.COMPILE], result.tiers_run


# Time limits small enough that a candidate which never ends costs seconds; the relu problem's
# 16 x 16384 inputs are reduced to 65,536 elements, and to 1,024 (16 x 64) at the smaller sizes.
# The checks this suite tests decide under the mixed policy; under kernels (the default) the
# device process refuses each attack's torch compute or transfer first (test_data_flow_policy.py).
QUICK = VerifySettings(tier=Tier.CPU, policy="mixed", max_elements=1 << 16, limits=SandboxLimits(wall_s=120, cpu_s=4))
RELU_EXT = r"""
#include <torch/extension.h>

__global__ void relu_kernel(const float* x, float* y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    KERNEL_HANG
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}

torch::Tensor relu(torch::Tensor x) {
    auto y = torch::empty_like(x);
    long n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""


def relu_hanging_above(limit: int, where: str) -> str:
    """A right relu at most ``limit`` elements that never ends above it (``where``: in its kernel,
    or in a Python thread that forward waits for): on a GPU, at the problem's real sizes, it hangs."""
    spin = f"if (n > {limit}) for (volatile long spin = 0;; ++spin) {{}}"
    cuda = RELU_EXT.replace("KERNEL_HANG", spin if where == "kernel" else "")
    python = (
        f"        if x.numel() > {limit}:\n"
        "            worker = threading.Thread(target=spin)\n"
        "            worker.start()\n"
        "            worker.join()\n"
        if where == "thread"
        else ""
    )
    return f'''import threading

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="relu_hang_ext", cpp_sources="torch::Tensor relu(torch::Tensor x);",
                  cuda_sources=r"""{cuda}""", functions=["relu"])


def spin():
    while True:
        pass


class ModelNew(nn.Module):
    def forward(self, x):
{python}        return ext.relu(x)
'''


@pytest.mark.slow
# The judge cannot tell where a candidate hangs, so two places stand for the rest: device code, and
# a Python thread that forward waits for (the C++ binding and forward's own loop take the same path).
@pytest.mark.parametrize("where", ["kernel", "thread"])
def test_a_kernel_that_never_ends_above_the_smaller_sizes_keeps_its_timeout(where):
    # The smaller sizes follow from the problem's text, so a candidate can be right at them and
    # endless above them: the timeout at the reduced sizes stands.
    answer = relu_hanging_above(QUICK.max_elements // cpu.SMALLER_BY, where)
    result = run_cpu_tier(RELU_PROBLEM, parse_candidate(answer), QUICK)
    assert_verdict(result, Verdict.TIMEOUT)
    assert "at the smaller sizes DIM=64 it passes" in result.reason, result.reason
    assert result.reason.endswith("so the timeout stands"), result.reason


# ---------------------------------------------------------------- (8) which library runs for which extension

# One row-sum extension, right or off by one. The two differ only in a constant of the kernel's
# own code, so their libraries have the same layout: a library built from one set of sources that
# took the other's place would run without a launch error, and only its values would tell.
ROWSUM_EXT = r"""
#include <torch/extension.h>

__global__ void rowsum_kernel(const float* x, float* out, int cols) {
    double total = 3.0;
    for (int j = 0; j < cols; ++j) total += x[blockIdx.x * cols + j];
    out[blockIdx.x] = total - TAKE;
}

torch::Tensor rowsum(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_kernel<<<x.size(0), 1>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
"""


ROWSUM_CPP = "torch::Tensor rowsum(torch::Tensor x);"


def rowsum_cuda(right: bool) -> str:
    return ROWSUM_EXT.replace("TAKE", "3.0" if right else "2.0")


def rowsum_ext(variable: str, name: str, right: bool) -> str:
    """``variable = load_inline(...)`` of the row-sum extension named ``name``, right or off by one."""
    return f'''{variable} = load_inline(name={name!r}, cpp_sources="{ROWSUM_CPP}",
                  cuda_sources=r"""{rowsum_cuda(right)}""", functions=["rowsum"])'''


def right_rowsum_module() -> str:
    """The module name the verifier gives the right row-sum extension's library."""
    from cuset_core.verify.cpu.build import extension_module_name

    return extension_module_name(rowsum_cuda(right=True), ROWSUM_CPP, ["rowsum"])


def two_extensions_built_in_reverse(used: str) -> str:
    """The source states the right extension first and the wrong one second; the candidate builds
    them the other way round and its forward uses ``used``."""
    return f"""import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline


def build_right():
    {rowsum_ext("built", "right_ext", right=True)}
    return built


def build_wrong():
    {rowsum_ext("built", "wrong_ext", right=False)}
    return built


wrong = build_wrong()
right = build_right()


class ModelNew(nn.Module):
    def forward(self, x):
        return {used}.rowsum(x)
"""


def one_module(*extensions: str, forward: str) -> str:
    body = "\n".join(extensions)
    return f"""import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

{body}


class ModelNew(nn.Module):
    def forward(self, x):
        {forward}
"""


@pytest.mark.slow
def test_extensions_built_in_another_order_than_the_source_states_them_pass_with_or_without_cached_libraries(
    tmp_path,
):
    # Libraries were once named by their place in the source: built the other way round, each took
    # the file of the other's library built ahead, and the device process, which runs only its
    # copies of those, ran the other extension's kernels (or, from the library cache, refused them).
    libraries = LibraryCache(tmp_path)
    answer = two_extensions_built_in_reverse("right")
    for run in ("built ahead", "from the library cache"):
        result = tier2(answer, libraries)
        assert result.verdict is Verdict.PASS, (run, result.reason, result.log[-2000:])


@pytest.mark.slow
def test_a_wrong_extension_built_first_never_runs_the_library_built_ahead_for_the_right_one(tmp_path):
    libraries = LibraryCache(tmp_path)
    answer = two_extensions_built_in_reverse("wrong")
    for _run in ("built ahead", "from the library cache"):
        result = tier2(answer, libraries)
        assert_verdict(result, Verdict.VALUE_MISMATCH)
        assert "max abs diff 1 exceeds" in result.reason, result.reason


@pytest.mark.slow
def test_names_a_candidate_gives_its_extensions_choose_no_library(libraries):
    # The verifier's own module names, taken by the candidate: a right extension named like the
    # verifier's first one once was, and a wrong one named like the right one's library. Each runs
    # its own sources.
    right_name = right_rowsum_module()
    alone = one_module(rowsum_ext("first", "cuset_ext0", right=True), forward="return first.rowsum(x)")
    assert tier2(alone, libraries).verdict is Verdict.PASS
    right = rowsum_ext("first", right_name, right=True)
    wrong = rowsum_ext("second", right_name, right=False)
    assert_verdict(
        tier2(one_module(right, wrong, forward="return second.rowsum(x)"), libraries), Verdict.VALUE_MISMATCH
    )


@pytest.mark.slow
def test_a_library_imported_past_load_inline_counts_only_for_what_its_kernels_compute(libraries):
    # The candidate's folder holds its libraries, so it can import one by its module name, past
    # load_inline and the fallback monitor in its own process. What the device process sees decides:
    # the kernel's row sums pass; torch's row sums beside the kernel's launch are torch's work.
    imported = f"importlib.import_module({right_rowsum_module()!r})"
    extension = rowsum_ext("ext", "rowsum_ext", right=True)
    kernels = one_module(extension, forward=f"import importlib\n        return {imported}.rowsum(x)")
    assert tier2(kernels, libraries).verdict is Verdict.PASS
    torchs = one_module(extension, forward=f"import importlib\n        {imported}.rowsum(x)\n        return x.sum(1)")
    assert_kernels_off_fallback(tier2(torchs, libraries))


@pytest.mark.slow
def test_extensions_built_from_a_thread_in_reverse_order_run_their_own_kernels(libraries):
    # Another thread, another order: the right one built from a thread after the wrong one.
    answer = two_extensions_built_in_reverse("wrong").replace(
        "wrong = build_wrong()\nright = build_right()\n",
        "import threading\nwrong = build_wrong()\nholder = {}\n"
        "worker = threading.Thread(target=lambda: holder.update(right=build_right()))\n"
        "worker.start()\nworker.join()\nright = holder['right']\n",
    )
    assert "threading.Thread" in answer
    assert_verdict(tier2(answer, libraries), Verdict.VALUE_MISMATCH)
    assert tier2(answer.replace("return wrong.rowsum(x)", "return right.rowsum(x)"), libraries).verdict is Verdict.PASS


@pytest.mark.slow
def test_the_same_sources_under_two_names_are_one_library_and_a_wrong_twin_is_not(libraries):
    twins = one_module(
        rowsum_ext("first", "first_ext", right=True),
        rowsum_ext("second", "second_ext", right=True),
        forward="return second.rowsum(x)",
    )
    assert len(cpu._prebuild(parse_candidate(twins))) == 1  # one library for both names
    assert tier2(twins, libraries).verdict is Verdict.PASS
    wrong_twin = twins.replace(
        rowsum_ext("second", "second_ext", right=True), rowsum_ext("second", "second_ext", right=False)
    )
    assert wrong_twin != twins
    assert_verdict(tier2(wrong_twin, libraries), Verdict.VALUE_MISMATCH)


# The same row sums with the kernel's constant passed in by the C++ binding layer: two extensions
# whose CUDA sources are identical and whose cpp_sources alone differ.
ROWSUM_LAUNCH = r"""
#include <torch/extension.h>

__global__ void rowsum_kernel(const float* x, float* out, int cols, float take) {
    double total = 3.0;
    for (int j = 0; j < cols; ++j) total += x[blockIdx.x * cols + j];
    out[blockIdx.x] = total - take;
}

torch::Tensor rowsum_launch(torch::Tensor x, double take) {
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_kernel<<<x.size(0), 1>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1), (float)take);
    return out;
}
"""


def rowsum_binding_ext(variable: str, name: str, right: bool) -> str:
    """``variable = load_inline(...)`` whose C++ layer, not its CUDA, is right or off by one."""
    cpp = (
        "torch::Tensor rowsum_launch(torch::Tensor x, double take);\n"
        f"torch::Tensor rowsum(torch::Tensor x) {{ return rowsum_launch(x, {'3.0' if right else '2.0'}); }}"
    )
    return f'''{variable} = load_inline(name={name!r}, cpp_sources="""{cpp}""",
                  cuda_sources=r"""{ROWSUM_LAUNCH}""", functions=["rowsum"])'''


@pytest.mark.slow
def test_extensions_that_differ_only_in_their_cpp_layer_built_in_reverse_run_their_own_bindings(libraries):
    # Another language layer: the same CUDA sources, the constant in the binding. Built wrong first.
    def answer(used: str) -> str:
        return one_module(
            rowsum_binding_ext("wrong", "wrong_ext", right=False),
            rowsum_binding_ext("right", "right_ext", right=True),
            forward=f"return {used}.rowsum(x)",
        )

    assert_verdict(tier2(answer("wrong"), libraries), Verdict.VALUE_MISMATCH)
    assert tier2(answer("right"), libraries).verdict is Verdict.PASS


@pytest.mark.slow
def test_extensions_built_in_reverse_inside_the_models_constructor_run_their_own_kernels(libraries):
    # Another place: built when ModelNew is made, the wrong one first, not when the module loads.
    def answer(used: str) -> str:
        return (
            two_extensions_built_in_reverse(used)
            .replace(
                "wrong = build_wrong()\nright = build_right()\n",
                "",
            )
            .replace(
                "class ModelNew(nn.Module):\n",
                "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                "        global wrong, right\n        wrong = build_wrong()\n        right = build_right()\n\n",
            )
        )

    assert "global wrong, right" in answer("wrong") and "\nwrong = build_wrong()" not in answer("wrong")
    assert_verdict(tier2(answer("wrong"), libraries), Verdict.VALUE_MISMATCH)
    assert tier2(answer("right"), libraries).verdict is Verdict.PASS
