"""Tier 2 end to end: small problems and candidates (right and broken) through the CPU runtime.

Each case builds a real extension with g++ (seconds with the cached precompiled preludes; the
first run of a machine builds them, ~2 min), so these tests are marked slow.
Broken candidates are the correct kernels of ``cpu_cases/`` with one mutation each.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from verify_cases import eventually

from cuset_core.verify import run as run_module
from cuset_core.verify.candidate import parse_candidate
from cuset_core.verify.cpu import run_cpu_tier
from cuset_core.verify.cpu.build import (
    built_with,
    compile_extension,
    prepare_preludes,
    toolchain,
    translation_unit,
)
from cuset_core.verify.execution.judge import BEYOND_BRIDGE
from cuset_core.verify.execution.reference_pool import ReferencePool
from cuset_core.verify.result import Tier, Verdict, VerifyResult
from cuset_core.verify.settings import SandboxLimits, VerifySettings

CASES = Path(__file__).parent / "cpu_cases"
# Loose limits: a build on the full prelude took over 120 s on a crowded host (14 s when idle).
SETTINGS = VerifySettings(tier=Tier.CPU, limits=SandboxLimits(wall_s=300, cpu_s=300))

pytestmark = pytest.mark.slow


def case(name: str) -> str:
    return (CASES / name).read_text()


def mutate(source: str, old: str, new: str) -> str:
    assert old in source, f"mutation target {old!r} not in the case"
    return source.replace(old, new)


def python_candidate(cuda: str, signature: str, args: str, forward: str | None = None, prelude: str = "") -> str:
    """A ``ModelNew`` answer that builds ``cuda`` with ``load_inline`` and calls ``run``."""
    body = forward or f"return ext.run({args})"
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
{prelude}
cuda_src = r"""
{cuda}
"""

ext = load_inline(name="case_ext", cpp_sources="torch::Tensor run({signature});",
                  cuda_sources=cuda_src, functions=["run"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, {args}):
        {body}
'''


# The module's candidates are one batch, as an eval's samples of a problem are: one reference run
# per problem and settings.
REFERENCES = ReferencePool()


def verify(problem: str, candidate: str, settings: VerifySettings = SETTINGS):
    return run_cpu_tier(case(problem), parse_candidate(candidate), settings, references=REFERENCES)


def add_candidate(cuda: str, **kwargs) -> str:
    return python_candidate(cuda, "torch::Tensor a, torch::Tensor b", "a, b", **kwargs)


def rowsum_candidate(cuda: str) -> str:
    return python_candidate(cuda, "torch::Tensor x", "x")


def test_right_kernel_passes_and_counts_its_launches():
    result = verify("add_problem.py", add_candidate(case("add_kernel.cu")))
    assert result.verdict is Verdict.PASS, result.reason + result.log
    assert result.tier is Tier.CPU
    assert result.trials == SETTINGS.seeds
    assert result.launches == {"add_kernel": SETTINGS.seeds}
    assert result.max_abs_diff == 0.0
    assert set(result.timings_s) >= {"build", "run"}


def with_cpp_frontend(source: str) -> str:
    """The case with its output passed through ``torch::nn::Identity``, from torch's C++ frontend."""
    return mutate(source, "return out;", "torch::nn::Identity identity;\n    return identity(out);")


def test_a_typical_extension_builds_on_the_torch_bridge(tmp_path):
    unit = translation_unit("bridge_ext", case("add_kernel.cu"), "", ["run"])
    bridge = prepare_preludes()[:1]
    library = compile_extension("bridge_ext", unit, tmp_path, bridge, toolchain())
    assert built_with(library) == "bridge"


def test_a_candidate_using_the_cpp_frontend_is_built_on_the_full_prelude_and_passes_in_one_process():
    one_process = SETTINGS.model_copy(update={"device_boundary": False})
    result = verify("add_problem.py", add_candidate(with_cpp_frontend(case("add_kernel.cu"))), one_process)
    assert result.verdict is Verdict.PASS, result.reason + result.log
    # Neither the bridge nor ATen's light headers hold torch::nn: only the full ones build it.
    assert set(result.built_with.values()) == {"full"}


def test_a_candidate_using_the_cpp_frontend_is_unsupported_behind_the_device_boundary():
    # ATen's tensors hold their data in the process that made them: behind the boundary only the
    # bridge's builds run, and the build side, not the candidate, says that ATen builds this one.
    assert SETTINGS.device_boundary
    result = verify("add_problem.py", add_candidate(with_cpp_frontend(case("add_kernel.cu"))))
    assert result.verdict is Verdict.UNSUPPORTED, result.reason + result.log
    assert result.unsupported_feature == BEYOND_BRIDGE
    assert "torch::nn" in result.reason and "bridge builds only" in result.reason, result.reason


def test_wrong_index_is_a_value_mismatch():
    wrong = mutate(case("add_kernel.cu"), "int i = blockIdx.x * blockDim.x + threadIdx.x;", "int i = threadIdx.x;")
    result = verify("add_problem.py", add_candidate(wrong))
    assert result.verdict is Verdict.VALUE_MISMATCH
    # Outputs no thread writes keep torch::empty's poison (NaN), as they would keep garbage on a GPU.
    assert "max abs diff nan" in result.reason


def test_missing_bounds_guard_faults_on_the_guard_page():
    # N = 1000 floats end exactly at a protected page; thread 1000 reads past it.
    unguarded = mutate(case("add_kernel.cu"), "if (i < n) out[i]", "out[i]")
    result = verify("add_problem.py", add_candidate(unguarded))
    assert result.verdict is Verdict.RUNTIME_ERROR
    assert "invalid memory access" in result.reason


def test_shared_memory_reduction_passes():
    result = verify("rowsum_problem.py", rowsum_candidate(case("rowsum_shared.cu")))
    assert result.verdict is Verdict.PASS, result.reason + result.log


def test_missing_syncthreads_is_exposed_by_the_fiber_order():
    # Thread 0 runs first and reads sdata[128] before thread 128 has written it: the
    # shared array still holds the 0xFF fill (NaN), so the row sums come out NaN.
    racy = mutate(case("rowsum_shared.cu"), "sdata[tid] = v;\n    __syncthreads();", "sdata[tid] = v;")
    result = verify("rowsum_problem.py", rowsum_candidate(racy))
    assert result.verdict is Verdict.VALUE_MISMATCH


def test_extern_shared_with_a_warp_synchronous_tail_passes():
    result = verify("rowsum_problem.py", rowsum_candidate(case("rowsum_extern_shared.cu")))
    assert result.verdict is Verdict.PASS, result.reason + result.log


def test_warp_shuffle_reduction_passes():
    result = verify("rowsum_problem.py", rowsum_candidate(case("rowsum_shuffle.cu")))
    assert result.verdict is Verdict.PASS, result.reason + result.log
    assert result.launches == {"rowsum_kernel": SETTINGS.seeds}


def test_warp_shuffle_with_a_bad_offset_is_a_value_mismatch():
    wrong = mutate(case("rowsum_shuffle.cu"), "int offset = 16;", "int offset = 8;")
    result = verify("rowsum_problem.py", rowsum_candidate(wrong))
    assert result.verdict is Verdict.VALUE_MISMATCH


def test_atomics_histogram_passes():
    candidate = python_candidate(case("histogram_atomics.cu"), "torch::Tensor x", "x")
    result = verify("histogram_problem.py", candidate)
    assert result.verdict is Verdict.PASS, result.reason + result.log


def test_an_extension_named_at_run_time_is_verified_not_an_internal_error():
    # The build side's prebuild once required a name it could read, and a candidate's
    # load_inline(some_variable, ...) turned its verdict into the verifier's internal_error.
    named_late = add_candidate(case("add_kernel.cu")).replace(
        'load_inline(name="case_ext", ', 'load_inline("case_" + str(len(cuda_src) % 2), '
    )
    assert 'load_inline("case_"' in named_late
    result = verify("add_problem.py", named_late)
    assert result.verdict is Verdict.PASS, result.reason + result.log


def test_kernel_that_never_runs_is_not_a_pass():
    torch_fallback = add_candidate(case("add_kernel.cu"), forward="return a + b")
    result = verify("add_problem.py", torch_fallback)
    assert result.verdict is Verdict.STATIC_REJECT
    # The data-flow policy refuses torch's add during forward before anything counts launches.
    assert result.reason.startswith("policy kernels: trial 1: aten::add.Tensor computed on device data"), result.reason
    assert result.launches == {}


def test_compile_error_is_reported_with_the_compiler_message():
    broken = mutate(case("add_kernel.cu"), "out[i] = a[i] + b[i];", "out[i] = a[i] + b[i]")
    result = verify("add_problem.py", add_candidate(broken))
    assert result.verdict is Verdict.COMPILE_ERROR
    assert "error" in result.reason


def test_kernel_that_never_ends_times_out():
    endless = mutate(case("add_kernel.cu"), "if (i < n) out[i] = a[i] + b[i];", "for (;;) out[0] += 1.0f;")
    # The CPU limit ends it (the harness's own start takes about 2 CPU seconds; the build runs in
    # processes of its own): the wall limit stays loose for a build on a loaded machine.
    settings = SETTINGS.model_copy(update={"limits": SandboxLimits(wall_s=120, cpu_s=4)})
    result = verify("add_problem.py", add_candidate(endless), settings)
    assert result.verdict is Verdict.TIMEOUT


def test_fork_bomb_in_candidate_python_is_contained():
    bomb = add_candidate(case("add_kernel.cu"), prelude="import os\nwhile True:\n    os.fork()\n")
    settings = SETTINGS.model_copy(update={"limits": SandboxLimits(wall_s=15, cpu_s=15, max_processes=32)})
    result = verify("add_problem.py", bomb, settings)
    assert result.verdict in (Verdict.RUNTIME_ERROR, Verdict.TIMEOUT)


# ---------------------------------------------------------------- tier 2 while tier 1 compiles


@pytest.mark.nvcc
def test_tier_2_runs_while_tier_1_compiles_and_its_verdict_follows_tier_1s(monkeypatch):
    pool, compile_tier, seen = ReferencePool(), run_module._compile_tier, []

    def compile_watching_the_reference(candidate, settings, before):
        seen.append(eventually(lambda: pool.in_flight() or pool.runs, 120))
        return compile_tier(candidate, settings, before)

    monkeypatch.setattr(run_module, "_compile_tier", compile_watching_the_reference)
    answer = add_candidate(case("add_kernel.cu"))
    result = run_module.verify(case("add_problem.py"), answer, SETTINGS, use_cache=False, references=pool)
    assert result.verdict is Verdict.PASS, result.reason + result.log
    assert seen == [True], "tier 2's reference side was running while tier 1 compiled"
    assert pool.runs == 1, "tier 2 judged on that run instead of starting another"
    assert result.tiers_run == [Tier.STATIC, Tier.COMPILE, Tier.CPU]


def test_a_candidate_tier_1_rejects_cancels_the_tier_2_started_for_it(monkeypatch):
    pool = ReferencePool()

    def rejecting_compile(candidate, settings, before):
        assert eventually(lambda: pool.in_flight() == 1, 120), "the reference side started"
        rejected = VerifyResult(verdict=Verdict.COMPILE_ERROR, tier=Tier.COMPILE, reason="line 3: no such type")
        return rejected, False

    monkeypatch.setattr(run_module, "_compile_tier", rejecting_compile)
    monkeypatch.setattr(run_module, "nvcc_path", lambda: "nvcc")
    answer = add_candidate(case("add_kernel.cu"))
    result = run_module.verify(case("add_problem.py"), answer, SETTINGS, use_cache=False, references=pool)
    assert result.verdict is Verdict.COMPILE_ERROR
    assert pool.in_flight() == 0, "verify returns once tier 2's sides are gone"
    assert pool.runs == 0, "it was stopped, not run to its end"


# ---------------------------------------------------------------- racing read-modify-writes

RACY_ROWSUM = """
#include <torch/extension.h>

__global__ void rowsum_kernel(const float* x, float* out, int cols) {
    for (int j = threadIdx.x; j < cols; j += blockDim.x) UPDATE;
}

torch::Tensor run(torch::Tensor x) {
    auto out = torch::zeros({x.size(0)}, x.options());
    rowsum_kernel<<<x.size(0), 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
"""


@pytest.mark.parametrize(
    ("update", "verdict"),
    [
        ("out[blockIdx.x] += x[blockIdx.x * cols + j]", Verdict.VALUE_MISMATCH),
        ("atomicAdd(&out[blockIdx.x], x[blockIdx.x * cols + j])", Verdict.PASS),
    ],
    ids=["without an atomic", "with atomicAdd"],
)
def test_threads_that_add_into_one_element_without_an_atomic_lose_updates(update, verdict):
    result = verify("rowsum_problem.py", rowsum_candidate(RACY_ROWSUM.replace("UPDATE", update)))
    assert result.verdict is verdict, result.reason + result.log
    if verdict is Verdict.VALUE_MISMATCH:
        assert result.reason.startswith("trial 2"), "trial 1 runs each update whole; trial 2 races them"


@pytest.mark.parametrize("update", ["local[x[i]]++;", "local[x[i]] += 1;"])
def test_a_histogram_counted_without_atomics_is_a_value_mismatch(update):
    racy = mutate(case("histogram_atomics.cu"), "atomicAdd(&local[x[i]], 1);", update)
    result = verify("histogram_problem.py", python_candidate(racy, "torch::Tensor x", "x"))
    assert result.verdict is Verdict.VALUE_MISMATCH, result.reason + result.log
