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
a table of answers pass (``contracts.with_input_seed``).

A run in flight is shared too: a candidate that needs a reference another thread is running waits
for that run instead of starting a second (the verification pipeline starts tier 2 while tier 1
compiles, :class:`cuset_core.verify.run.EarlyTier`, and an eval verifies samples of one
problem side by side). A run that fails or is cancelled leaves its waiters to run their own.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future

from cuset_core.verify.execution.contracts import HarnessJob, with_input_seed
from cuset_core.verify.execution.tier_run import ReferenceRun, TierSpec
from cuset_core.verify.result import Verdict, VerifyResult

# The job fields that only the candidate side or the build side reads: a reference run serves
# every candidate whatever they hold.
_CANDIDATE_FIELDS = {"candidate", "handed", "prebuild", "prebuilt"}


Outcome = ReferenceRun | VerifyResult


class ReferencePool:
    """The reference runs of one batch, by (tier, problem, job): at most ``capacity`` kept, the
    least recently used dropped first. Thread-safe; a thread that misses a key another thread is
    running waits for that run."""

    def __init__(self, capacity: int = 16) -> None:
        self.capacity = capacity
        self.runs = 0  # reference sides actually run, for the caller's figures
        self._kept: OrderedDict[str, Outcome] = OrderedDict()
        self._running: dict[str, Future[Outcome | None]] = {}
        self._lock = threading.Lock()

    def in_flight(self) -> int:
        """How many reference runs are running now (started, not yet ended)."""
        with self._lock:
            return len(self._running)

    def reference(
        self,
        spec: TierSpec,
        problem_code: str,
        job: HarnessJob,
        run: Callable[[HarnessJob], Outcome],
    ) -> tuple[Outcome, bool]:
        """The reference of ``problem_code`` under ``job`` for ``spec``'s tier, and whether it ran
        now: the one kept, else ``run(job)`` with a secret input seed drawn here (or the one
        ``job`` fixes), kept.

        A reference the verifier cannot use (``unsupported``: too large, not reducible) is kept too:
        every candidate of the batch would meet the same refusal, and it is the problem's. Any
        other failure (``internal_error``, a timeout under load) is not: the next candidate runs
        the reference again, as it would without a pool, so one glitch does not fail the batch.
        Whatever ``run`` raises (``SandboxCancelled`` included) reaches this caller only; a thread
        waiting for the run then runs its own."""
        key = reference_key(spec, problem_code, job)
        while True:
            with self._lock:
                if key in self._kept:
                    self._kept.move_to_end(key)
                    return self._kept[key], False
                flight = self._running.get(key)
                if flight is None:
                    mine: Future[Outcome | None] = Future()
                    self._running[key] = mine
                    break
            flight.result()  # that run ended: its outcome is kept now, or it left none to share
        return self._run(key, job, run, mine), True

    def _run(
        self, key: str, job: HarnessJob, run: Callable[[HarnessJob], Outcome], flight: Future[Outcome | None]
    ) -> Outcome:
        """Run the reference of ``key`` here, keep what may be kept, and tell the threads waiting."""
        try:
            outcome = run(with_input_seed(job))
        except BaseException:
            self._land(key, None, flight)
            raise
        self._land(key, outcome, flight)
        return outcome

    def _land(self, key: str, outcome: Outcome | None, flight: Future[Outcome | None]) -> None:
        with self._lock:
            del self._running[key]
            if outcome is not None:
                self.runs += 1
                if isinstance(outcome, ReferenceRun) or outcome.verdict is Verdict.UNSUPPORTED:
                    self._kept[key] = outcome
                while len(self._kept) > self.capacity:
                    self._kept.popitem(last=False)
        flight.set_result(outcome)


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
