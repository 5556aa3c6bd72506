"""Tier 3: run a candidate on a real GPU with the KernelBench protocol and anti-hacking checks.

The protocol itself lives in :mod:`cuset_core.verify.gpu.harness`, whose two sides (reference,
then candidate) the judge of :mod:`cuset_core.verify.execution.judge` runs in the sandbox (own process
and work folder each) with limits relaxed for a GPU job: a real
``load_inline``/nvcc build takes tens of seconds, the CUDA driver reserves a large virtual
address space, and the build spawns compiler processes.

On a machine without a CUDA GPU the tier is not run: the result is ``unsupported`` with
``unsupported_feature="gpu"`` and the reason "no CUDA GPU on this machine", so callers and
metrics treat it like any other feature this machine cannot model (never a pass or fail).
"""

from __future__ import annotations

import os
from pathlib import Path

from cuset_core.verify.candidate import Candidate, kernel_names
from cuset_core.verify.execution.contracts import GpuJob
from cuset_core.verify.execution.judge import harness_env, judge
from cuset_core.verify.execution.reference_pool import ReferencePool
from cuset_core.verify.execution.tier_run import TierSpec
from cuset_core.verify.result import Tier, Verdict, VerifyResult
from cuset_core.verify.settings import SandboxLimits, VerifySettings

HARNESS_MODULE = "cuset_core.verify.gpu.harness"
NO_GPU_REASON = "no CUDA GPU on this machine"

# Floors for a GPU job's sandbox; a caller's larger limits are kept.
_MIN_WALL_S = 900.0
_MIN_CPU_S = 1800
_MIN_MEMORY_MB = 16 << 10  # host memory of the build (cicc, ptxas) and of torch with a CUDA context
_ADDRESS_SPACE_MB = 1 << 30  # the CUDA driver maps device + host memory into the address space
_MIN_PROCESSES = 512
# Variables the build and the CUDA runtime need from the parent environment.
_PASSED_ENV = ("CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "TORCH_CUDA_ARCH_LIST")


def gpu_available() -> bool:
    """Whether this process sees a CUDA GPU (False with the CPU-only torch wheel)."""
    import torch

    return torch.cuda.is_available()


def gpu_limits(limits: SandboxLimits) -> SandboxLimits:
    """``limits`` raised to what a real extension build and a CUDA context need.

    The memory cap that holds is ``memory_mb`` of host memory for all the job's processes
    together (the sandbox's memory cgroup); the per-process address space cannot be capped,
    because the CUDA driver reserves device and host memory in it (docs/deploy.md)."""
    return limits.model_copy(
        update={
            "wall_s": max(limits.wall_s, _MIN_WALL_S),
            "cpu_s": max(limits.cpu_s, _MIN_CPU_S),
            "memory_mb": max(limits.memory_mb, _MIN_MEMORY_MB),
            "address_space_mb": _ADDRESS_SPACE_MB,
            "max_processes": max(limits.max_processes, _MIN_PROCESSES),
        }
    )


def gpu_job(candidate: Candidate, settings: VerifySettings) -> GpuJob:
    """Both sides' ``job.json``: the trials, timed calls per side, whether the reference side also
    times torch.compile, the candidate's kernel names and the device memory cap."""
    cuda = candidate.sources.cuda + "\n" + "\n".join(ext.cpp for ext in candidate.sources.extensions)
    return GpuJob(
        kind=candidate.kind,
        seeds=settings.seeds,
        input_seed=settings.input_seed,
        timing_trials=settings.timing_trials,
        compile_baseline=settings.compile_baseline,
        kernel_names=kernel_names(cuda),
        gpu_memory_mb=settings.limits.gpu_memory_mb,
    )


def gpu_env(workdir: Path) -> dict[str, str]:
    """Environment for the harness: the CUDA variables of this process and where to build (the
    candidate's extension; inductor's and Triton's caches for the torch.compile baseline), all
    inside the side's own work folder, the one place the sandbox lets it write."""
    passed = {name: os.environ[name] for name in _PASSED_ENV if name in os.environ}
    return harness_env(
        **passed,
        TORCH_EXTENSIONS_DIR=str(workdir / "torch_extensions"),
        TORCHINDUCTOR_CACHE_DIR=str(workdir / "inductor"),
        TRITON_CACHE_DIR=str(workdir / "triton"),
    )


def run_gpu_tier(
    problem_code: str, candidate: Candidate, settings: VerifySettings, references: ReferencePool | None = None
) -> VerifyResult:
    """Tier 3 for one candidate; ``unsupported`` (feature "gpu") on a machine without a GPU."""
    if not gpu_available():
        return VerifyResult(
            verdict=Verdict.UNSUPPORTED,
            tier=Tier.GPU,
            tiers_run=[Tier.GPU],
            unsupported_feature="gpu",
            reason=NO_GPU_REASON,
        )
    spec = TierSpec(Tier.GPU, HARNESS_MODULE, gpu_limits(settings.limits), gpu_env, early_start=True)
    result, _ = judge(spec, problem_code, candidate, settings, gpu_job(candidate, settings), references)
    return result
