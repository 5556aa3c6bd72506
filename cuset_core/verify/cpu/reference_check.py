"""Whether tier 2 can verify kernels for a problem at all: its reference side alone.

Tier 2 shrinks a problem's sizes and runs its reference on the CPU before any candidate is looked
at; a problem whose sizes cannot be reduced, whose reference breaks at reduced sizes with
original ones too large, or whose reference is too slow here, makes every kernel for it
``unsupported``. :func:`check_reference` finds that out once per problem, in seconds, without a
candidate: the same sandboxed reference side a verification runs.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from cuset_core.verify.cpu import cpu_job, reference_spec
from cuset_core.verify.cpu.build import BuildError, prepare_preludes, toolchain
from cuset_core.verify.execution.contracts import with_input_seed
from cuset_core.verify.execution.judge import run_reference
from cuset_core.verify.execution.tier_run import ReferenceRun
from cuset_core.verify.result import Tier, Verdict, VerifyResult
from cuset_core.verify.settings import VerifySettings


def check_reference(problem_code: str, settings: VerifySettings) -> VerifyResult:
    """The problem's reference side of tier 2: ``pass`` (the reason says which sizes were reduced),
    ``unsupported`` (why no kernel for it can be verified on a CPU) or ``internal_error`` (the
    problem's own code fails, or the machine lacks what tier 2 needs)."""
    started = time.monotonic()
    try:
        preludes = prepare_preludes()
    except BuildError:
        return _result(Verdict.INTERNAL_ERROR, "the CPU runtime header does not build on this machine", started)
    chain = toolchain()
    spec = reference_spec(settings, preludes)
    job = with_input_seed(cpu_job("python", settings, preludes, chain))
    with tempfile.TemporaryDirectory(prefix="cuset-cpu-check-") as folder:
        outcome = run_reference(spec, Path(folder), problem_code, job)
    if isinstance(outcome, ReferenceRun):
        note = outcome.report.details.note
        reason = "the reference runs at tier 2" + (f"; {note}" if note else "")
        return _result(Verdict.PASS, reason, started)
    return outcome.model_copy(update={"timings_s": {"cpu_reference": round(time.monotonic() - started, 3)}})


def _result(verdict: Verdict, reason: str, started: float) -> VerifyResult:
    return VerifyResult(
        verdict=verdict,
        tier=Tier.CPU,
        tiers_run=[Tier.CPU],
        reason=reason,
        timings_s={"cpu_reference": round(time.monotonic() - started, 3)},
    )
