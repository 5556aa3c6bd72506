"""The verification pipeline: tier 0 (static) -> 1 (compile) -> 2 (CPU) -> 3 (GPU), each tier
run only when the cheaper ones did not reject the candidate, up to ``settings.tier``.

A tier that cannot judge (tier 2 ``unsupported``) lets the next one run. The result of the last
tier that ran decides, carrying the timings, diagnostics and resources of the ones before it, and
``tier_verdicts``: what every tier that ran concluded (a skipped tier has no entry).
Problems with the candidate are verdicts, never exceptions: an exception of any type while tier 0
analyses or tier 1 compiles the candidate's material is the candidate's ``static_reject`` or
``compile_error``, unless the verifier's canary (``canary``: the project's known-good candidate
through the same path and settings, run then) fails too. A failure of the verifier or the machine
itself (the canary failing, a missing tool, a header that does not build here) is
``internal_error`` with the traceback in ``log``, and is never cached. Every result's reason and
log are cut to a fixed size, whatever a tier put there.
"""

from __future__ import annotations

import functools
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cuset_core.paths import CorePaths
from cuset_core.verify.cache import VerifyCache, cache_key
from cuset_core.verify.canary import compile_canary_fails, static_canary_fails
from cuset_core.verify.candidate import Candidate, parse_candidate
from cuset_core.verify.compile import CompileReport, compile_candidate, nvcc_path
from cuset_core.verify.execution.library_cache import LibraryCache
from cuset_core.verify.execution.reference_pool import ReferencePool
from cuset_core.verify.execution.tier_run import WarmSides
from cuset_core.verify.result import Diagnostic, Tier, Verdict, VerifyResult
from cuset_core.verify.sandbox import refusal
from cuset_core.verify.settings import VerifySettings
from cuset_core.verify.source.static import check_static, static_warnings

LOG_CHARS = 8000
REASON_CHARS = 1000
_CONTINUE = {Verdict.PASS, Verdict.UNSUPPORTED}

TierRunner = Callable[[str, Candidate, VerifySettings], VerifyResult]


def verify(
    problem_code: str,
    answer: str,
    settings: VerifySettings = VerifySettings(),
    cache_dir: Path | None = None,
    use_cache: bool = True,
    references: ReferencePool | None = None,
    on_tier: Callable[[Tier], None] | None = None,
    warm: WarmSides | None = None,
) -> VerifyResult:
    """Verify ``answer`` (a raw model answer, a ``ModelNew`` file or a ``.cu`` extension)
    against the KernelBench problem ``problem_code``, up to ``settings.tier``.

    Results are cached in ``cache_dir`` (default ``CorePaths().verify_results``) unless
    ``use_cache`` is False; a cached result comes back with ``cached=True``. Tier 2 also keeps
    the extensions it compiled (:mod:`cuset_core.verify.execution.library_cache`) unless ``use_cache`` is False.
    Candidates verified with the same ``references`` (one batch: an eval's samples of a problem)
    share the reference runs of tiers 2 and 3 (:mod:`cuset_core.verify.execution.reference_pool`); with
    ``warm`` (held by a caller that verifies one candidate after another), tier 2 takes its sides
    ready-made (:mod:`cuset_core.verify.execution.tier_run`).
    ``on_tier`` is told each tier as it starts (a progress display); a cached result tells none.
    """
    paths = CorePaths()
    cache = VerifyCache(cache_dir or paths.verify_results) if use_cache else None
    libraries = LibraryCache(paths.cpu_libraries) if use_cache else None
    key = cache_key(problem_code, answer, settings.tier, settings)
    if cache is not None and (hit := cache.get(key)) is not None:
        return hit
    start = time.monotonic()
    try:
        shared = Shared(libraries, references, warm)
        result, internal = _pipeline(problem_code, answer, settings, shared, on_tier or _quiet)
    except Exception:  # noqa: BLE001 - a verifier bug must not crash the caller
        empty = VerifyResult(verdict=Verdict.INTERNAL_ERROR, tier=Tier.STATIC)
        result = _internal_error(Tier.STATIC, empty, "internal error in tier static", traceback.format_exc())
        internal = True
    timings = {**result.timings_s, "total": round(time.monotonic() - start, 4)}
    result = result.model_copy(
        update={"timings_s": timings, "reason": result.reason[:REASON_CHARS], "log": result.log[-LOG_CHARS:]}
    )
    if cache is not None and not internal and result.verdict is not Verdict.INTERNAL_ERROR:
        cache.put(key, result)
    return result


def _quiet(tier: Tier) -> None:
    """The default ``on_tier``: nobody is watching."""


@dataclass(frozen=True)
class Shared:
    """What a check shares with the caller's other checks: extensions compiled before, the
    batch's reference runs, sides started ahead (each None where the caller holds none)."""

    libraries: LibraryCache | None = None
    references: ReferencePool | None = None
    warm: WarmSides | None = None


def _pipeline(
    problem_code: str,
    answer: str,
    settings: VerifySettings,
    shared: Shared,
    on_tier: Callable[[Tier], None],
) -> tuple[VerifyResult, bool]:
    """The verdict and whether it came from a failure of the verifier (not to be cached)."""
    on_tier(Tier.STATIC)
    started = time.monotonic()
    try:
        candidate = parse_candidate(answer)
        rejection = check_static(candidate)
        warnings = static_warnings(candidate) if rejection is None else []
    except Exception as exc:  # noqa: BLE001 - RecursionError, MemoryError...: see _analysis_failed
        return _analysis_failed(exc, traceback.format_exc(), time.monotonic() - started)
    static_s = time.monotonic() - started
    if rejection is not None:
        rejection = rejection.model_copy(update={"tier_verdicts": {Tier.STATIC: rejection.verdict}})
        return _with_timing(rejection, "static", static_s), False
    result = VerifyResult(
        verdict=Verdict.PASS, tier=Tier.STATIC, tiers_run=[Tier.STATIC], tier_verdicts={Tier.STATIC: Verdict.PASS},
        reason="static checks passed", diagnostics=warnings, timings_s={"static": round(static_s, 4)},
    )  # fmt: skip
    if settings.tier.rank >= Tier.COMPILE.rank and (refused := refusal()):
        # Fail closed: tiers 1-3 run the candidate's code (compilers included) in the sandbox.
        first = Tier.COMPILE if nvcc_path() is not None or settings.tier is Tier.COMPILE else Tier.CPU
        return _internal_error(first, result, refused, ""), True
    early: EarlyTier | None = None
    tier_1 = _tier_1_resources() if settings.tier.rank >= Tier.CPU.rank else None
    if settings.tier.rank >= Tier.CPU.rank and settings.overlap_tiers:
        # Tier 2 runs while tier 1 compiles; its candidate waits for tier 1's ptxas report (launch limits).
        early = _start_cpu_tier(problem_code, candidate, settings, shared, tier_1)
    try:
        return _from_tier_1(problem_code, candidate, settings, result, shared, on_tier, early, tier_1)
    finally:
        if tier_1 is not None:
            tier_1.set([])  # no-op once tier 1 reported
        if early is not None:
            early.cancel()  # done already, or tier 1 rejected the candidate


def _analysis_failed(exc: Exception, log: str, seconds: float) -> tuple[VerifyResult, bool]:
    """Tier 0's verdict when its analysis of the candidate's text raised ``exc``: the candidate's
    ``static_reject`` (a 6 KB ``1+1+...`` makes Python's parser raise ``RecursionError``), unless
    the verifier's canary fails through the same analysis right now (``internal_error``)."""
    if static_canary_fails():
        empty = VerifyResult(verdict=Verdict.INTERNAL_ERROR, tier=Tier.STATIC)
        return _internal_error(Tier.STATIC, empty, "internal error in tier static (the canary fails too)", log), True
    reason = f"the candidate's code could not be analysed ({type(exc).__name__}): tier 0 cannot read it"
    rejection = VerifyResult(
        verdict=Verdict.STATIC_REJECT, tier=Tier.STATIC, tiers_run=[Tier.STATIC],
        tier_verdicts={Tier.STATIC: Verdict.STATIC_REJECT}, reason=reason,
        diagnostics=[Diagnostic(severity="error", message=reason)], log=log[-LOG_CHARS:],
        timings_s={"static": round(seconds, 4)},
    )  # fmt: skip
    return rejection, False


def _from_tier_1(
    problem_code: str,
    candidate: Candidate,
    settings: VerifySettings,
    result: VerifyResult,
    shared: Shared,
    on_tier: Callable[[Tier], None],
    early: EarlyTier | None = None,
    tier_1: Any = None,
) -> tuple[VerifyResult, bool]:
    """Tiers 1 to ``settings.tier`` after tier 0 passed with ``result`` (tier 2 from ``early``,
    started beside tier 1, when given)."""
    machine_lacks_nvcc = False
    if settings.tier.rank >= Tier.COMPILE.rank:
        machine_lacks_nvcc = nvcc_path() is None
        on_tier(Tier.COMPILE)
        result, internal = _compile_tier(candidate, settings, result)
        if tier_1 is not None:
            tier_1.set(result.resources)
        if internal or result.verdict not in _CONTINUE:
            return result, internal or machine_lacks_nvcc

    def cpu_runner() -> TierRunner:
        if early is not None:
            return lambda *_: early.result()
        resources = list(result.resources)
        return functools.partial(
            _cpu_runner(), library_cache=shared.libraries, references=shared.references, warm=shared.warm,
            tier_1=lambda: resources,
        )  # fmt: skip

    def gpu_runner() -> TierRunner:
        return functools.partial(_gpu_runner(), references=shared.references)

    for tier, runner in ((Tier.CPU, cpu_runner), (Tier.GPU, gpu_runner)):
        if settings.tier.rank < tier.rank:
            break
        on_tier(tier)
        result, internal = _external_tier(tier, runner, problem_code, candidate, settings, result)
        if internal or result.verdict not in _CONTINUE:
            return result, internal or machine_lacks_nvcc
    # Not cached where tier 1 could not run: the same answer deserves tier 1 once nvcc is there.
    return result, machine_lacks_nvcc


def _compile_tier(candidate: Candidate, settings: VerifySettings, before: VerifyResult) -> tuple[VerifyResult, bool]:
    if nvcc_path() is None:
        # A machine without the CUDA toolkit says so and lets the CPU tier decide; never cached,
        # since it is the machine, not the candidate, that lacks something.
        reason = "tier 1 (compile) needs nvcc, which is not on PATH: install the CUDA toolkit"
        skipped = before.model_copy(
            update={
                "verdict": Verdict.UNSUPPORTED,
                "tier": Tier.COMPILE,
                "reason": reason,
                "unsupported_feature": "nvcc",
                "tiers_run": [*before.tiers_run, Tier.COMPILE],
                "tier_verdicts": {**before.tier_verdicts, Tier.COMPILE: Verdict.UNSUPPORTED},
                "diagnostics": [*before.diagnostics, Diagnostic(severity="note", message=reason)],
            }
        )
        return skipped, False
    try:
        with tempfile.TemporaryDirectory(prefix="cuset-compile-") as folder:
            report = compile_candidate(candidate, settings, Path(folder))
    except Exception as exc:  # noqa: BLE001 - the candidate's, unless the canary fails too
        log = traceback.format_exc()
        if compile_canary_fails(settings):
            return _internal_error(Tier.COMPILE, before, "internal error in tier 1 (the canary fails too)", log), True
        message = f"the candidate could not be compiled ({type(exc).__name__}): tier 1 failed on its sources"
        report = CompileReport(False, [Diagnostic(severity="error", message=message)], [], 0.0, "", log)
    return _compile_result(report, before), False


def _compile_result(report: CompileReport, before: VerifyResult) -> VerifyResult:
    errors = [d for d in report.diagnostics if d.severity == "error"]
    verdict = Verdict.PASS if report.ok else Verdict.TIMEOUT if report.timed_out else Verdict.COMPILE_ERROR
    if report.ok:
        reason = f"compiled ({len(report.resources)} kernels)"
    elif errors:
        first = errors[0]
        reason = f"line {first.line}: {first.message}" if first.line else first.message
    else:
        reason = "compilation failed"
    return VerifyResult(
        verdict=verdict,
        tier=Tier.COMPILE,
        tiers_run=[*before.tiers_run, Tier.COMPILE],
        tier_verdicts={**before.tier_verdicts, Tier.COMPILE: verdict},
        reason=reason,
        timings_s={**before.timings_s, "compile": round(report.seconds, 4)},
        diagnostics=[*before.diagnostics, *report.diagnostics],
        resources=report.resources,
        log="" if report.ok else report.log[:LOG_CHARS],  # the first errors explain the rest
    )


def _tier_1_resources() -> Any:
    """Tier 1's per-kernel resources as tier 2 waits for them (``cpu.Tier1Resources``)."""
    from cuset_core.verify.cpu import Tier1Resources

    return Tier1Resources()


def _cpu_runner() -> Callable[..., VerifyResult]:
    from cuset_core.verify.cpu import run_cpu_tier

    return run_cpu_tier


# How long a cancelled early tier 2 may take to end: its sandboxes die within 50 ms of the cancel.
CANCEL_WAIT_S = 5.0


class EarlyTier:
    """Tier 2 of one candidate, started in a thread before tier 1 ends: nothing of tier 2 depends
    on tier 1 (it builds the candidate with g++ itself, and its reference depends on the problem
    alone). ``cancel()`` when tier 1 rejects the candidate kills its sides within 50 ms."""

    def __init__(self, run: Callable[[threading.Event], VerifyResult]) -> None:
        self._cancel = threading.Event()
        self._done: Future[VerifyResult] = Future()
        self._thread = threading.Thread(target=self._work, args=(run,), name="cuset-early-tier-2", daemon=True)
        self._thread.start()

    def _work(self, run: Callable[[threading.Event], VerifyResult]) -> None:
        try:
            self._done.set_result(run(self._cancel))
        except BaseException as exc:  # noqa: BLE001 - handed to whoever asks for the result
            self._done.set_exception(exc)

    def result(self) -> VerifyResult:
        """Tier 2's verdict once it is there (what the tier raised, raised here)."""
        return self._done.result()

    def cancel(self) -> None:
        """Kill whatever of the check still runs, and wait (a little) until its folders are gone.

        The wait is bounded: a thread still building tier 2's preludes on a new machine (minutes,
        once) finishes that in the background instead of holding tier 1's verdict."""
        self._cancel.set()
        self._thread.join(timeout=CANCEL_WAIT_S)


def _start_cpu_tier(
    problem_code: str,
    candidate: Candidate,
    settings: VerifySettings,
    shared: Shared,
    tier_1: Any = None,
) -> EarlyTier:
    def run(cancel: threading.Event) -> VerifyResult:
        return _cpu_runner()(
            problem_code,
            candidate,
            settings,
            library_cache=shared.libraries,
            references=shared.references,
            cancel=cancel,
            warm=shared.warm,
            tier_1=tier_1.get if tier_1 is not None else None,
        )

    return EarlyTier(run)


def _gpu_runner() -> Callable[..., VerifyResult]:
    from cuset_core.verify.gpu import run_gpu_tier

    return run_gpu_tier


def _external_tier(
    tier: Tier,
    runner: Callable[[], TierRunner],
    problem_code: str,
    candidate: Candidate,
    settings: VerifySettings,
    before: VerifyResult,
) -> tuple[VerifyResult, bool]:
    """Run tier 2 or 3 (implemented in their own packages) and merge in what came before."""
    started = time.monotonic()
    try:
        later = runner()(problem_code, candidate, settings)
    except Exception:  # noqa: BLE001 - a verifier bug must not crash the caller
        return _internal_error(tier, before, f"internal error in tier {tier.value}", traceback.format_exc()), True
    timings = {tier.value: round(time.monotonic() - started, 4), **later.timings_s}
    return _merge(before, later, timings), later.verdict is Verdict.INTERNAL_ERROR


def _merge(before: VerifyResult, later: VerifyResult, timings: dict[str, float]) -> VerifyResult:
    tiers = [*before.tiers_run, *(t for t in later.tiers_run or [later.tier] if t not in before.tiers_run)]
    return later.model_copy(
        update={
            "tiers_run": tiers,
            "tier_verdicts": {**before.tier_verdicts, later.tier: later.verdict},
            "timings_s": {**before.timings_s, **timings},
            "diagnostics": [*before.diagnostics, *later.diagnostics],
            "resources": later.resources or before.resources,
        }
    )


def _internal_error(tier: Tier, before: VerifyResult, reason: str, log: str) -> VerifyResult:
    return VerifyResult(
        verdict=Verdict.INTERNAL_ERROR,
        tier=tier,
        tiers_run=[*before.tiers_run, tier],
        tier_verdicts={**before.tier_verdicts, tier: Verdict.INTERNAL_ERROR},
        reason=reason,
        timings_s=before.timings_s,
        diagnostics=before.diagnostics,
        resources=before.resources,
        log=log[-LOG_CHARS:],
    )


def _with_timing(result: VerifyResult, stage: str, seconds: float) -> VerifyResult:
    return result.model_copy(update={"timings_s": {**result.timings_s, stage: round(seconds, 4)}})
