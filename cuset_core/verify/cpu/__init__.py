"""Tier 2: run a candidate's CUDA kernels on the CPU with the CuSeT CUDA-on-CPU runtime.

The runtime (``runtime/cuda_cpu.h``) runs each CUDA thread as a user-space fiber and the
blocks of a grid in turn; ``rewrite`` turns launches and shared-memory declarations into
runtime calls; ``build`` compiles the extension with g++ against the CPU torch wheel using a
cached precompiled header; ``harness`` runs reference and candidate in the sandbox.
It is a filter, not an oracle: real concurrency, races and timing are not modelled, and
features the runtime cannot model are reported as ``unsupported`` with the feature named.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import cuset_core
from cuset_core.verify.candidate import Candidate
from cuset_core.verify.cpu.build import BuildError, prepare_pch
from cuset_core.verify.cpu.rewrite import unsupported_feature
from cuset_core.verify.result import Tier, Verdict, VerifyResult
from cuset_core.verify.sandbox import SandboxOutcome, describe, run_sandboxed
from cuset_core.verify.settings import VerifySettings

HARNESS_MODULE = "cuset_core.verify.cpu.harness"
RESULT_FILE = "result.json"
LOG_CHARS = 4000

__all__ = ["run_cpu_tier"]


def _result(verdict: Verdict, reason: str, **fields) -> VerifyResult:
    return VerifyResult(verdict=verdict, tier=Tier.CPU, tiers_run=[Tier.CPU], reason=reason, **fields)


def write_job(workdir: Path, problem_code: str, candidate: Candidate, settings: VerifySettings, pch_dir: Path) -> Path:
    """Write the problem, the candidate and the job description into ``workdir``."""
    (workdir / "problem.py").write_text(problem_code)
    candidate_file = "candidate.cu" if candidate.kind == "cu" else "candidate.py"
    (workdir / candidate_file).write_text(candidate.code)
    job = {
        "problem": "problem.py",
        "candidate": candidate_file,
        "kind": candidate.kind,
        "seeds": settings.seeds,
        "atol": settings.atol,
        "rtol": settings.rtol,
        "reduce_sizes": settings.reduce_sizes,
        "max_elements": settings.max_elements,
        "pch_dir": str(pch_dir),
        "result": RESULT_FILE,
    }
    path = workdir / "job.json"
    path.write_text(json.dumps(job))
    return path


def result_from_run(outcome: SandboxOutcome, result_path: Path) -> VerifyResult:
    """The tier-2 result: the harness's ``result.json``, or why the harness left none."""
    if result_path.is_file():
        data = json.loads(result_path.read_text())
        verdict = Verdict(data.pop("verdict"))
        for unused in ("runtime_ms", "reference_ms", "speedup"):
            data.pop(unused, None)
        feature = data["reason"].removeprefix("uses ") if verdict is Verdict.UNSUPPORTED else None
        return _result(verdict, data.pop("reason"), unsupported_feature=feature, **data)
    log = (outcome.stderr or outcome.stdout)[-LOG_CHARS:]
    if outcome.timed_out or outcome.limit_hit in ("wall", "cpu"):
        return _result(Verdict.TIMEOUT, f"CPU harness {describe(outcome)}", log=log)
    runtime_line = next((line for line in log.splitlines() if line.startswith("cuset runtime:")), None)
    reason = runtime_line or f"CPU harness {describe(outcome)} without a result"
    return _result(Verdict.RUNTIME_ERROR, reason, log=log)


def run_cpu_tier(problem_code: str, candidate: Candidate, settings: VerifySettings) -> VerifyResult:
    """Tier 2 for one candidate: build with g++, run on the CPU runtime, compare with the reference."""
    sources = candidate.sources
    feature = unsupported_feature(sources.cuda + "\n" + "\n".join(ext.cpp for ext in sources.extensions))
    if feature:
        return _result(Verdict.UNSUPPORTED, f"uses {feature}", unsupported_feature=feature)
    clock = time.perf_counter()
    try:
        pch_dir = prepare_pch()
    except BuildError as exc:
        return _result(Verdict.RUNTIME_ERROR, "the CPU runtime header does not build on this machine", log=str(exc)[-LOG_CHARS:])
    pch_s = time.perf_counter() - clock
    with tempfile.TemporaryDirectory(prefix="cuset-cpu-") as folder:
        workdir = Path(folder)
        job = write_job(workdir, problem_code, candidate, settings, pch_dir)
        env = {
            "PYTHONPATH": str(Path(cuset_core.__file__).resolve().parent.parent),
            "PYTHONDONTWRITEBYTECODE": "1",
            "OMP_NUM_THREADS": "1",
        }
        outcome = run_sandboxed([sys.executable, "-m", HARNESS_MODULE, str(job)], workdir=workdir,
                                limits=settings.limits, env=env)
        result = result_from_run(outcome, workdir / RESULT_FILE)
    result.timings_s.setdefault("cpu_total", outcome.wall_s)
    if pch_s > 1.0:
        result.timings_s["pch"] = pch_s
    return result
