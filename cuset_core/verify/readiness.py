"""Whether this machine's verifier can run tier 2 at all: its side started for real.

The isolation probe (``sandbox.isolation``) runs ``true`` in the sandbox: it says bubblewrap and
seccomp work, not that the verifier's own interpreter starts there. Where it does not (a venv
whose Python the sandbox cannot reach, a torch that does not import), every tier-2 side exits
before its report and every candidate, the project's own reference solution too, gets
``internal_error``: a broken verifier that reads like a model's failure. So the workers also
run what tier 2 runs, the verifier's interpreter importing torch and tier 2's harness in the
real sandbox under tier 2's environment, at start and again while they run, and ``/readyz``
says ``not ready`` with the reason when it fails (docs/deploy.md, "Fail closed").
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cuset_core.verify.result import Tier, Verdict, VerifyResult
from cuset_core.verify.sandbox import (
    IsolationUnavailable,
    SandboxSetupError,
    describe,
    run_sandboxed,
)
from cuset_core.verify.settings import SandboxLimits

# What tier 2's sides import first (cuset_core.verify.cpu.HARNESS_MODULE).
PROBE_CODE = "import torch, cuset_core.verify.cpu.harness"
PROBE_LIMITS = SandboxLimits(wall_s=120, cpu_s=120)
# A result is kept this long: a success for some minutes (a torch import costs seconds of CPU),
# a failure for one (an operator's fix shows up soon).
READY_TTL_S = 300.0
NOT_READY_TTL_S = 60.0


@dataclass(frozen=True)
class Readiness:
    """Whether tier 2's side runs here, and if not, why (``reason``)."""

    ready: bool
    reason: str = ""


def probe_tier2(python: str | None = None, readable: Sequence[Path] = ()) -> Readiness:
    """Run tier 2's side as tier 2 starts it: ``python`` (the verifier's own interpreter unless
    named) importing torch and the harness, in the sandbox, with the harness's environment;
    ``readable`` folders mounted besides (a test's venv). Not ready, with the exit status and the
    last line of its output, when it fails; a sandbox that refuses is not ready for that reason."""
    from cuset_core.verify.cpu import harness_environment

    python = python or sys.executable
    what = f"tier 2's side ({python} importing torch in the sandbox)"
    with tempfile.TemporaryDirectory(prefix="cuset-tier2-probe-") as folder:
        try:
            outcome = run_sandboxed(
                [python, "-c", PROBE_CODE],
                workdir=Path(folder),
                limits=PROBE_LIMITS,
                env=harness_environment(Path(folder)),
                readable=readable,
            )
        except (IsolationUnavailable, SandboxSetupError, OSError) as exc:
            return Readiness(False, f"{what} could not start: {_last_line(str(exc))}")
    if outcome.ok:
        return Readiness(True)
    return Readiness(False, f"{what} {describe(outcome)}: {_last_line(outcome.stderr or outcome.stdout)}")


def _last_line(text: str) -> str:
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "no message")[-500:]


_lock = threading.Lock()
_last: dict[str, tuple[float, Readiness]] = {}  # "state" -> (monotonic seconds, result)


def tier2_readiness() -> Readiness:
    """:func:`probe_tier2` of the verifier's interpreter, kept ``READY_TTL_S`` seconds when it
    succeeded and ``NOT_READY_TTL_S`` when it failed; one probe at a time per process."""
    with _lock:
        last = _last.get("state")
        now = time.monotonic()
        if last is not None and now - last[0] < (READY_TTL_S if last[1].ready else NOT_READY_TTL_S):
            return last[1]
        state = probe_tier2()
        _last["state"] = (time.monotonic(), state)
        return state


VERIFIER_FIX = (
    "fix the machine's verifier, not the model: docs/deploy.md, 'Verification sandbox' and 'Fail closed' "
    "(a venv whose Python the sandbox cannot reach, a torch that does not import there), or verify up to "
    "tier compile only"
)


class VerifierBroken(RuntimeError):
    """Tier 2 cannot run on this machine (its side does not start in the sandbox): every further
    sample would be ``internal_error``, so the caller stops at once instead of drawing them."""


def stop_if_broken(result: VerifyResult) -> None:
    """Raise :class:`VerifierBroken`, naming the cause and the fix, when ``result`` is tier 2's
    ``internal_error`` and tier 2's side does not start here (:func:`tier2_readiness`, the canary
    of the machine). A problem whose own reference fails is no such fault: the probe passes then."""
    if result.verdict is not Verdict.INTERNAL_ERROR or result.tier is not Tier.CPU:
        return
    state = tier2_readiness()
    if not state.ready:
        raise VerifierBroken(f"the verifier is broken on this machine: {state.reason}; {VERIFIER_FIX}")
