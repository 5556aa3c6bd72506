"""Tier 2: run a candidate's CUDA kernels on the CPU with the CuSeT CUDA-on-CPU runtime.

The runtime (``runtime/cuda_cpu.h``) runs each CUDA thread as a user-space fiber and the
blocks of a grid in turn; ``rewrite`` turns launches and shared-memory declarations into
runtime calls; ``build`` compiles the extension with g++ against the CPU torch wheel starting from
cached precompiled preludes; ``harness`` runs reference and candidate in the sandbox.
It is a filter, not an oracle: real concurrency, races and timing are not modelled, and
features the runtime cannot model are reported as ``unsupported`` with the feature named.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from cuset_core.verify.candidate import Candidate
from cuset_core.verify.cpu.build import BuildError, prepare_preludes, toolchain
from cuset_core.verify.cpu.rewrite import unsupported_feature
from cuset_core.verify.protocol import harness_env, run_harness, tail, write_job
from cuset_core.verify.result import Tier, Verdict, VerifyResult
from cuset_core.verify.settings import VerifySettings

HARNESS_MODULE = "cuset_core.verify.cpu.harness"

__all__ = ["run_cpu_tier"]


def _result(verdict: Verdict, reason: str, **fields) -> VerifyResult:
    return VerifyResult(verdict=verdict, tier=Tier.CPU, tiers_run=[Tier.CPU], reason=reason, **fields)


def _prebuild(candidate: Candidate) -> list[dict]:
    """The extensions the harness can start compiling before the candidate runs (Python only)."""
    if candidate.kind != "python":
        return []
    return [
        {"name": ext.name, "cuda": ext.cuda, "cpp": ext.cpp, "functions": list(ext.functions or []) or None}
        for ext in candidate.sources.extensions
    ]


def run_cpu_tier(problem_code: str, candidate: Candidate, settings: VerifySettings) -> VerifyResult:
    """Tier 2 for one candidate: build with g++, run on the CPU runtime, compare with the reference."""
    sources = candidate.sources
    feature = unsupported_feature(sources.cuda + "\n" + "\n".join(ext.cpp for ext in sources.extensions))
    if feature:
        return _result(Verdict.UNSUPPORTED, f"uses {feature}", unsupported_feature=feature)
    clock = time.perf_counter()
    try:
        preludes = prepare_preludes()
    except BuildError as exc:
        return _result(Verdict.RUNTIME_ERROR, "the CPU runtime header does not build on this machine",
                       log=tail(str(exc)))
    pch_s = time.perf_counter() - clock
    with tempfile.TemporaryDirectory(prefix="cuset-cpu-") as folder:
        chain = toolchain()
        job = write_job(Path(folder), problem_code, candidate, settings, reduce_sizes=settings.reduce_sizes,
                        max_elements=settings.max_elements, preludes=[str(prelude) for prelude in preludes],
                        include_dirs=list(chain.include_dirs), library_dirs=list(chain.library_dirs),
                        prebuild=_prebuild(candidate))
        result = run_harness(HARNESS_MODULE, job, Tier.CPU, settings.limits, harness_env(OMP_NUM_THREADS="1"))
    if pch_s > 1.0:
        result.timings_s["pch"] = pch_s
    return result
