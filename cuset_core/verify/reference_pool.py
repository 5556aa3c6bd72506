"""Reference runs shared by the candidates of one batch of verifications.

An eval verifies k samples (and their repairs) of each problem, a self-training round K answers
per problem: without sharing, every candidate pays for its own reference side (a sandboxed
process that imports torch and runs the problem, seconds each) only to judge it on other inputs.
A :class:`ReferencePool` held by the caller for one batch runs the reference of each (problem,
tier, job) once, under an input seed it draws in secret, and judges every later candidate of that
problem on the same inputs.

Why this is safe: the seed is drawn here, on the trusted side, and never handed to a candidate
(the candidate side gets the inputs, never the seed); candidates cannot leave anything for each
other (every side has a fresh tmpfs work folder), so a candidate that saw the inputs cannot tell a
later one what they were; and the pool lives in the caller's memory for one batch only, so the
next batch draws new inputs. A pool is not a cache across batches: a fixed, public seed would let
a table of answers pass (``protocol.with_input_seed``).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable

from cuset_core.verify.protocol import HarnessJob, ReferenceRun, TierSpec, with_input_seed
from cuset_core.verify.result import Verdict, VerifyResult

# The job fields that only the candidate side or the build side reads: a reference run serves
# every candidate whatever they hold.
_CANDIDATE_FIELDS = {"candidate", "handed", "prebuild", "prebuilt"}


class ReferencePool:
    """The reference runs of one batch, by (tier, problem, job): at most ``capacity`` kept, the
    least recently used dropped first. Thread-safe; two threads that miss the same key at once
    both run the reference (each candidate is still judged on the inputs of the run it got)."""

    def __init__(self, capacity: int = 16) -> None:
        self.capacity = capacity
        self.runs = 0  # reference sides actually run, for the caller's figures
        self._kept: OrderedDict[str, ReferenceRun | VerifyResult] = OrderedDict()
        self._lock = threading.Lock()

    def reference(
        self,
        spec: TierSpec,
        problem_code: str,
        job: HarnessJob,
        run: Callable[[HarnessJob], ReferenceRun | VerifyResult],
    ) -> tuple[ReferenceRun | VerifyResult, bool]:
        """The reference of ``problem_code`` under ``job`` for ``spec``'s tier, and whether it ran
        now: the one kept, else ``run(job)`` with a secret input seed drawn here (or the one
        ``job`` fixes), kept.

        A reference the verifier cannot use (``unsupported``: too large, not reducible) is kept too:
        every candidate of the batch would meet the same refusal, and it is the problem's. Any
        other failure (``internal_error``, a timeout under load) is not: the next candidate runs
        the reference again, as it would without a pool, so one glitch does not fail the batch."""
        key = reference_key(spec, problem_code, job)
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                return self._kept[key], False
        outcome = run(with_input_seed(job))
        with self._lock:
            self.runs += 1
            if isinstance(outcome, ReferenceRun) or outcome.verdict is Verdict.UNSUPPORTED:
                self._kept[key] = outcome
            while len(self._kept) > self.capacity:
                self._kept.popitem(last=False)
        return outcome, True


def reference_key(spec: TierSpec, problem_code: str, job: HarnessJob) -> str:
    """sha256 (hex) of what decides a reference run: the tier, its harness and limits, the problem
    and the job's reference-side fields (a fixed input seed included: a different seed is a
    different run)."""
    digest = hashlib.sha256()
    for part in (
        spec.tier.value,
        spec.module,
        spec.limits.model_dump_json(),
        problem_code,
        job.model_dump_json(exclude=_CANDIDATE_FIELDS),
    ):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()
