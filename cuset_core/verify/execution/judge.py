"""The judge of the execution tiers (2: CPU runtime, 3: GPU): it runs two sandboxed sides and decides.

Trust boundary (DESIGN.md §4): the candidate is hostile, so a verdict is never read from
anything it wrote. Each tier runs two sandboxed processes of its harness module
(:mod:`cuset_core.verify.execution.harness_side`), one after the other, each in a folder of its own:

1. ``reference``: loads the problem, draws the inputs of every trial (under a seed the judge drew
   for this run, :func:`~cuset_core.verify.execution.contracts.with_input_seed`; every second trial wide,
   :func:`~cuset_core.verify.execution.harness_side.trial_outputs`), runs ``Model`` and writes
   ``inputs.safetensors`` (what the candidate gets: init inputs, trial inputs, the reference's
   weights for a ``.cu`` candidate) and ``reference.safetensors`` (the expected outputs). Its
   folder is removed, after the judge read both files, before the candidate starts.
2. ``candidate``: gets only ``inputs.safetensors`` and its own code (never ``problem.py``; the
   reference ``Model`` is not importable there), runs ``ModelNew`` and writes
   ``outputs.safetensors`` plus ``report.json`` (launch counts, failures it noticed).
3. The judge (this module, in the verifier's process) reads those files with ``O_NOFOLLOW`` as
   regular files under a size cap (:mod:`cuset_core.verify.execution.transfer`), compares the tensors with
   the KernelBench tolerances and decides. The candidate's report (a typed, bounded
   :class:`~cuset_core.verify.execution.contracts.CandidateReport`) can only make a verdict worse: a
   ``pass`` comes from the judge's own comparison or not at all, its text is quoted as the
   candidate's (:func:`quoted`), an ``unsupported`` claim stands only where the verifier's own
   analysis confirms it, and anything the candidate's files make the judge raise is the
   candidate's ``runtime_error``.
   Where the tier can disable the candidate's kernels (tier 2), the candidate side also runs
   trial 1 once more with its kernels disabled; when the verdict is ``pass``, an output of that
   run that still matches the reference did not come from its device code
   (:func:`kernels_did_the_work`).

Entry point: :func:`judge`.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import cuset_core
from cuset_core.verify.execution.contracts import (
    HEADER_CAP_BYTES,
    INPUTS_FILE,
    KERNELS_OFF_FILE,
    LIBRARY_CAP_BYTES,
    OUTPUTS_FILE,
    REFERENCE_CAP_BYTES,
    REFERENCE_FILE,
    SECOND_KERNELS_OFF_FILE,
    SECOND_OUTPUTS_FILE,
    SECOND_REPORT_FILE,
    TORCH_MADE_CAP_BYTES,
    BuildReport,
    CandidateReport,
    HarnessJob,
    Outcome,
    PrebuiltLibrary,
    ReferenceDetails,
    ReferenceReport,
    clip,
    host_off_file,
    named_sizes,
    tail,
    torch_made_file,
    with_input_seed,
)
from cuset_core.verify.execution.tier_run import PlannedLibrary, ReferenceRun, StartedSide, TierSpec, start_side
from cuset_core.verify.execution.transfer import UntrustedFileError, load_values, read_report, read_untrusted
from cuset_core.verify.policy import Policy, policy_reason
from cuset_core.verify.result import Tier, Verdict, VerifyResult
from cuset_core.verify.sandbox import SandboxOutcome, describe, run_sandboxed
from cuset_core.verify.settings import VerifySettings

if TYPE_CHECKING:
    from cuset_core.verify.candidate import Candidate
    from cuset_core.verify.execution.reference_pool import ReferencePool

_RUNTIME_MESSAGE = "cuset runtime:"  # how the CPU runtime starts the line explaining an abort
QUOTE_CHARS = 400  # candidate text quoted in a verdict's reason
BEYOND_BRIDGE = "torch C++ API beyond the bridge"  # the unsupported feature of an ATen-only extension


def quoted(text: str, what: str = "message") -> str:
    """Candidate text inside a verdict's reason, marked as the candidate's and cut to size, so that
    it never reads as the verifier's own words."""
    return f'(candidate\'s {what}: "{clip(text, QUOTE_CHARS)}")'


@functools.cache
def _comparable_dtypes() -> frozenset[Any]:
    """The dtypes a candidate's output may have: those the judge's arithmetic handles (float8,
    wide unsigned and quantized types are a value mismatch, never a crash of the judge)."""
    import torch

    names = ("float64", "float32", "float16", "bfloat16", "complex64", "complex128")
    return frozenset(getattr(torch, name) for name in (*names, "int64", "int32", "int16", "int8", "uint8", "bool"))


def compare_outputs(
    reference: list[Any], candidate: list[Any], tolerance: Callable[[str], tuple[float, float]]
) -> Outcome:
    """A ``pass`` outcome with the worst differences when every output matches; else the first
    ``shape_mismatch``/``value_mismatch``. ``tolerance`` gives (atol, rtol) for the reference
    output's dtype name ("float32", "float16", ...: ``VerifySettings.tolerance``)."""
    import torch

    if len(reference) != len(candidate):
        return Outcome(Verdict.SHAPE_MISMATCH, f"expected {len(reference)} outputs, got {len(candidate)}")
    worst_max, worst_mean = 0.0, 0.0
    for index, (ref, new) in enumerate(zip(reference, candidate)):
        if not isinstance(ref, torch.Tensor):
            if isinstance(new, torch.Tensor) or new != ref:
                got = quoted(repr(new), "value") if isinstance(new, (str, bytes)) else clip(repr(new), 80)
                return Outcome(Verdict.VALUE_MISMATCH, f"output {index}: expected {clip(repr(ref), 80)}, got {got}")
            continue
        if not isinstance(new, torch.Tensor):
            return Outcome(Verdict.SHAPE_MISMATCH, f"output {index} is {type(new).__name__}, not a tensor")
        if tuple(ref.shape) != tuple(new.shape):
            return Outcome(
                Verdict.SHAPE_MISMATCH, f"output {index}: expected shape {tuple(ref.shape)}, got {tuple(new.shape)}"
            )
        # Same dtype, as KernelBench's torch.allclose demands: a float32 problem answered in bfloat16
        # (or float64) is another computation, however close its values come.
        if new.dtype != ref.dtype or new.dtype not in _comparable_dtypes():
            return Outcome(Verdict.VALUE_MISMATCH, f"output {index}: expected dtype {ref.dtype}, got {new.dtype}")
        diff = (ref.detach().double() - new.detach().double()).abs()
        max_diff = float(diff.max()) if diff.numel() else 0.0
        mean_diff = float(diff.mean()) if diff.numel() else 0.0
        worst_max, worst_mean = max(worst_max, max_diff), max(worst_mean, mean_diff)
        atol, rtol = tolerance(str(ref.dtype).removeprefix("torch."))
        if not torch.allclose(new.detach(), ref.detach(), atol=atol, rtol=rtol):
            return Outcome(
                Verdict.VALUE_MISMATCH,
                f"output {index}: max abs diff {max_diff:.3g} exceeds atol {atol:g} / rtol {rtol:g}",
                max_abs_diff=max_diff if math.isfinite(max_diff) else None,
                mean_abs_diff=mean_diff if math.isfinite(mean_diff) else None,
            )
    return Outcome(Verdict.PASS, max_abs_diff=worst_max, mean_abs_diff=worst_mean)


def looks_cached(ref_first: list[Any], ref_second: list[Any], new_first: list[Any], new_second: list[Any]) -> bool:
    """True when the reference output changed between two input sets but the candidate's did not."""
    import torch

    def equal(x: Any, y: Any) -> bool:
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            # torch.equal promotes across dtypes and cannot promote some (float8): compare like with like
            return x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y)
        return bool(x == y)

    def same(a: list[Any], b: list[Any]) -> bool:
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))

    return not same(ref_first, ref_second) and same(new_first, new_second)


def harness_env(**extra: str) -> dict[str, str]:
    """Environment of a harness process: ``cuset_core`` importable, no bytecode written, plus ``extra``."""
    return {
        "PYTHONPATH": str(Path(cuset_core.__file__).resolve().parent.parent),
        "PYTHONDONTWRITEBYTECODE": "1",
        **extra,
    }


def _result(spec: TierSpec, verdict: Verdict, reason: str, **fields: Any) -> VerifyResult:
    return VerifyResult(verdict=verdict, tier=spec.tier, tiers_run=[spec.tier], reason=clip(reason), **fields)


def _run_side(spec: TierSpec, side: str, folder: Path, job: HarnessJob) -> SandboxOutcome:
    (folder / "job.json").write_text(job.model_dump_json())
    return run_sandboxed(
        [sys.executable, "-m", spec.module, side, str(folder / "job.json")],
        workdir=folder,
        limits=spec.limits,
        env=spec.env(folder),
        readable=spec.readable,
        cancel=spec.cancel,
    )


def _start_side(spec: TierSpec, side: str, root: Path) -> StartedSide | contextlib.nullcontext[None]:
    """One side's harness started before its files exist, where ``spec.early_start``: taken from
    ``spec.warm`` when it holds one ready, else started now in its folder under ``root``. It imports torch
    meanwhile and waits for them (``run_side --late``; :func:`_finish_side` hands them over). A
    fresh process per side and candidate, as always."""
    if not spec.early_start:
        return contextlib.nullcontext()
    warm = spec.warm.take(spec, side) if spec.warm is not None else None
    return warm if warm is not None else start_side(spec, side, root / SIDE_FOLDERS[side])


def _finish_side(spec: TierSpec, started: StartedSide, job: HarnessJob) -> SandboxOutcome:
    """Hand ``job`` and the files of its folder to a side started early, and wait for it."""
    (started.folder / "job.json").write_text(job.model_dump_json())
    return started.finish(spec.cancel)


def _without_report(spec: TierSpec, side: str, outcome: SandboxOutcome) -> VerifyResult:
    """The verdict when a side left no report: killed by a limit, or crashed (the runtime says why).
    The reference is the problem's code: its failures never count against the candidate."""
    log = tail(outcome.stderr or outcome.stdout)
    harness = f"{spec.tier.value.upper()} {side} process"
    timed_out = outcome.timed_out or outcome.limit_hit in ("wall", "cpu")
    if side == "reference" and timed_out:
        return _result(
            spec,
            Verdict.UNSUPPORTED,
            f"{harness} {describe(outcome)}: the problem is too slow for this tier",
            log=log,
            unsupported_feature="reference too slow",
        )
    if timed_out:
        return _result(spec, Verdict.TIMEOUT, f"{harness} {describe(outcome)}", log=log)
    if side == "reference":
        return _result(spec, Verdict.INTERNAL_ERROR, f"{harness} {describe(outcome)} without a report", log=log)
    # The runtime's line explaining an abort is printed in the candidate's process: quoted as its own.
    runtime_line = next((line for line in log.splitlines() if line.startswith(_RUNTIME_MESSAGE)), None)
    reason = f"{harness} {describe(outcome)} without a result"
    return _result(spec, Verdict.RUNTIME_ERROR, f"{reason} {quoted(runtime_line)}" if runtime_line else reason, log=log)


def _from_report(spec: TierSpec, report: ReferenceReport, allowed: set[Verdict], otherwise: Verdict) -> VerifyResult:
    """A failure verdict the reference side reported (the problem's code, not the candidate's),
    restricted to ``allowed`` verdicts (else ``otherwise``) and cut to size."""
    feature = report.unsupported_feature
    return _result(
        spec,
        report.verdict if report.verdict in allowed else otherwise,
        report.reason,
        log=tail(report.log),
        unsupported_feature=clip(feature, 200) if feature is not None else None,
    )


# What the judge says of each failure the candidate side may claim; the claim's own text follows,
# quoted as the candidate's.
_CLAIMED = {
    "runtime_error": (Verdict.RUNTIME_ERROR, "the candidate failed at run time"),
    "compile_error": (Verdict.COMPILE_ERROR, "the candidate's extension did not build"),
    "static_reject": (Verdict.STATIC_REJECT, "the candidate's outputs did not come from its kernels"),
}


def _claimed_failure(spec: TierSpec, report: CandidateReport) -> VerifyResult:
    """The verdict for a failure the candidate side reported about itself.

    Its text is quoted, never taken as the verifier's words; an ``unsupported`` claim stands
    only as the feature the judge's own analysis finds (``TierSpec.confirm_unsupported``), else
    it is the candidate's ``runtime_error``."""
    said = quoted(report.reason) if report.reason else "(no message)"
    if report.verdict == "unsupported":
        feature = spec.confirm_unsupported(report.unsupported_feature)
        if feature is not None:
            return _result(spec, Verdict.UNSUPPORTED, f"uses {feature}", log=report.log, unsupported_feature=feature)
        verdict, reason = Verdict.RUNTIME_ERROR, "the candidate claimed a feature the verifier does not find in it"
    else:
        verdict, reason = _CLAIMED[report.verdict]
    return _result(spec, verdict, f"{reason} {said}", log=report.log, launches=dict(report.launches))


def run_reference(spec: TierSpec, root: Path, problem_code: str, job: HarnessJob) -> ReferenceRun | VerifyResult:
    """Run the reference side; its data, or the result that ends verification (its folder is gone
    either way). ``SandboxCancelled`` when ``spec.cancel`` is set while it runs."""
    with _start_side(spec, "reference", root) as started:
        folder = root / "reference" if started is None else started.folder
        folder.mkdir(exist_ok=True)
        try:
            (folder / "problem.py").write_text(problem_code)
            if started is None:
                outcome = _run_side(spec, "reference", folder, job)
            else:
                outcome = _finish_side(spec, started, job)
            return _reference_outcome(spec, folder, outcome, job)
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def _reference_outcome(
    spec: TierSpec, folder: Path, outcome: SandboxOutcome, job: HarnessJob
) -> ReferenceRun | VerifyResult:
    """What the judge keeps of a reference side that ended with ``outcome`` in ``folder``."""
    try:
        report = read_report(folder, ReferenceReport)
        if report is None:
            return _without_report(spec, "reference", outcome)
        if report.verdict is not Verdict.PASS:
            allowed = {Verdict.INTERNAL_ERROR, Verdict.UNSUPPORTED}
            return _from_report(spec, report, allowed, Verdict.INTERNAL_ERROR)
        inputs = read_untrusted(folder, INPUTS_FILE, REFERENCE_CAP_BYTES)
        expected = read_untrusted(folder, REFERENCE_FILE, REFERENCE_CAP_BYTES)
        if inputs is None or expected is None:
            return _result(spec, Verdict.INTERNAL_ERROR, "the reference side reported success without its files")
        values = load_values(expected)
        return ReferenceRun(inputs, values["trials"], report, job.input_seed, values.get("second_trials", []))
    except UntrustedFileError as exc:
        return _result(spec, Verdict.INTERNAL_ERROR, f"the reference side's output is unusable: {exc}")


# Each side's folder under a check's root; the candidate's is named as any program's work folder.
SIDE_FOLDERS = {"reference": "reference", "build": "build", "candidate": "work"}


def _candidate_folder(root: Path, started: StartedSide | None) -> Path:
    """The candidate side's work folder: its harness's, when it was started early."""
    return root / SIDE_FOLDERS["candidate"] if started is None else started.folder


_NO_REPORT = CandidateReport(verdict="runtime_error")  # what the judge keeps when the candidate left no valid report


def run_candidate(
    spec: TierSpec,
    root: Path,
    candidate: Candidate,
    reference: ReferenceRun,
    job: HarnessJob,
    settings: VerifySettings,
    started: StartedSide | None = None,
) -> tuple[VerifyResult, CandidateReport]:
    """Run the candidate side on the reference's inputs (in ``started``, the candidate's harness
    started early, when given); the judged result and its (untrusted, typed) report, an empty one
    where it left none the judge accepts."""
    folder = _candidate_folder(root, started)
    folder.mkdir(exist_ok=True)  # the judge may have put prebuilt libraries there
    candidate_file = "candidate.cu" if candidate.kind == "cu" else "candidate.py"
    (folder / candidate_file).write_text(candidate.code)
    (folder / INPUTS_FILE).write_bytes(reference.inputs)
    # The candidate gets the inputs, never the seed they were drawn with.
    job = job.model_copy(update={"candidate": candidate_file, "input_seed": None})
    outcome = _run_side(spec, "candidate", folder, job) if started is None else _finish_side(spec, started, job)
    try:
        return judge_candidate_data(spec, folder, outcome, reference, settings)
    except UntrustedFileError as exc:
        return _result(spec, Verdict.RUNTIME_ERROR, f"the candidate's output is rejected: {exc}"), _NO_REPORT
    except Exception as exc:  # noqa: BLE001 - whatever the candidate's data breaks in the judge is its verdict
        reason = f"the candidate's output could not be judged ({type(exc).__name__})"
        return _result(spec, Verdict.RUNTIME_ERROR, reason, log=tail(traceback.format_exc())), _NO_REPORT


def judge_candidate_data(
    spec: TierSpec, folder: Path, outcome: SandboxOutcome, reference: ReferenceRun, settings: VerifySettings
) -> tuple[VerifyResult, CandidateReport]:
    """The verdict on what the candidate side left in ``folder`` (its process ended as ``outcome``).

    Everything read here is the candidate's: it may raise ``UntrustedFileError`` or anything a
    hostile file makes the decoding or comparison raise, and the caller makes that the
    candidate's ``runtime_error``."""
    report = read_report(folder, CandidateReport)
    if report is None:
        return _without_report(spec, "candidate", outcome), _NO_REPORT
    result = _judged_values(spec, folder, outcome, reference, settings, report)
    if spec.kernels_off:
        result = by_policy(spec, result, report, settings.policy if settings.device_boundary else "mixed")
    return result, report


def _judged_values(
    spec: TierSpec,
    folder: Path,
    outcome: SandboxOutcome,
    reference: ReferenceRun,
    settings: VerifySettings,
    report: CandidateReport,
) -> VerifyResult:
    """The verdict on the values the candidate side left, before any policy: its own failure, or
    the comparison, the kernels-did-the-work checks and the second size."""
    if report.verdict != "pass":  # it can only reject itself; "pass" is the judge's word
        return _claimed_failure(spec, report)
    data = read_untrusted(folder, OUTPUTS_FILE, 2 * _expected_bytes(reference) + (1 << 20))
    if data is None:
        launches = dict(report.launches)
        return _result(spec, Verdict.RUNTIME_ERROR, "the candidate side left no outputs", launches=launches)
    produced = load_values(data).get("trials")
    result = compare_trials(spec, reference, produced, report, settings)
    if result.verdict is Verdict.PASS and spec.kernels_off:
        result = kernels_did_the_work(spec, folder, reference, settings, result)
    if result.verdict is Verdict.PASS and (second := reference.at_second_size()) is not None:
        result = at_the_second_size(spec, folder, outcome, reference, second, settings, result)
        # The second size's trials were judged: the verdict ran both sizes.
        return result.model_copy(update={"sizes_run": reference.report.details.sizes_run[:2]})
    return result


def by_policy(spec: TierSpec, result: VerifyResult, report: CandidateReport, policy: Policy) -> VerifyResult:
    """``result`` (every check of the values done) decided by ``policy``. Device data that reached
    the host once the trials began (``report.transfers``) fails under both policies, torch compute
    during a forward (``report.computes``) under ``kernels``: ``static_reject`` naming the first such
    operation, whatever the values, saying whether ``mixed`` would pass. A pass says its policy and
    torch's operators."""
    torch_ops = dict(report.torch_ops)
    forbidden = [*report.transfers, *(report.computes if policy == "kernels" else [])]
    if forbidden:
        return _result(
            spec,
            Verdict.STATIC_REJECT,
            policy_reason(policy, forbidden),
            launches=dict(result.launches),
            trials=result.trials,
            policy=policy,
            torch_ops=torch_ops,
            mixed_pass=result.passed and not report.transfers,
            timings_s=result.timings_s,
            sizes_run=result.sizes_run,
        )
    if result.passed and policy == "mixed" and torch_ops:
        listed = ", ".join(f"{name} x{count}" for name, count in sorted(torch_ops.items()))
        reason = clip(f"{result.reason}; policy mixed: torch computed {listed}")
        return result.model_copy(update={"policy": policy, "torch_ops": torch_ops, "reason": reason})
    return result.model_copy(update={"policy": policy, "torch_ops": torch_ops})


def at_the_second_size(
    spec: TierSpec,
    folder: Path,
    outcome: SandboxOutcome,
    reference: ReferenceRun,
    second: ReferenceRun,
    settings: VerifySettings,
    passed: VerifyResult,
) -> VerifyResult:
    """``passed`` (the pass at the reduced sizes) when the candidate's trials at the second, smaller
    reduction pass too; else its failure there, which says both sizes.

    The reduced sizes follow from the problem's text, so a kernel could compute the right answer at
    those only. The candidate side runs the second size in the same process, after its report of
    the first; its second report and outputs are read like the first's, its kernels-off run too
    (:func:`kernels_did_the_work`: a kernel that runs at the first reduction only, with torch doing
    the work at any other size, is a fallback there). Whatever ends that run
    early (a crash, the time limit) is a failure at the second size: a candidate cannot keep its
    pass by stopping there."""
    handed = reference.report.details.candidate_job
    sizes = f"at the sizes {named_sizes(handed.second_overrides)}"
    report = read_report(folder, CandidateReport, SECOND_REPORT_FILE)
    if report is None:
        failed = _without_report(spec, "candidate", outcome)
    elif report.verdict != "pass":
        failed = _claimed_failure(spec, report)
    elif (data := read_untrusted(folder, SECOND_OUTPUTS_FILE, 2 * _expected_bytes(second) + (1 << 20))) is None:
        failed = _result(spec, Verdict.RUNTIME_ERROR, "the candidate side left no outputs")
    else:
        failed = compare_trials(spec, second, load_values(data).get("trials"), report, settings)
        if failed.verdict is Verdict.PASS and spec.kernels_off:
            failed = kernels_did_the_work(spec, folder, second, settings, failed, SECOND_KERNELS_OFF_FILE)
    timings = {f"second_size_{name}": seconds for name, seconds in (report.timings_s if report else {}).items()}
    if failed.verdict is Verdict.PASS:
        return passed.model_copy(update={"timings_s": {**passed.timings_s, **timings}})
    reason = f"{sizes}: {failed.reason}; it passed at the sizes {named_sizes(handed.overrides)}"
    return failed.model_copy(update={"reason": clip(reason), "timings_s": {**passed.timings_s, **timings}})


def _expected_bytes(reference: ReferenceRun) -> int:
    """Bytes of every expected output tensor of ``reference``: what a candidate's outputs need."""
    return sum(t.numel() * t.element_size() for trial in reference.expected for t in _tensor_values(trial))


def _tensor_values(values: list[Any]) -> list[Any]:
    import torch

    return [v for v in values if isinstance(v, torch.Tensor)]


def compare_trials(
    spec: TierSpec, reference: ReferenceRun, produced: Any, report: CandidateReport, settings: VerifySettings
) -> VerifyResult:
    """The judge's verdict: every trial's outputs against the reference's, then the checks that
    need several trials (outputs that ignore the inputs) and the launch count."""
    launches = dict(report.launches)
    if not isinstance(produced, list) or len(produced) != len(reference.expected):
        return _result(
            spec, Verdict.RUNTIME_ERROR, "the candidate side handed back a malformed set of trials", launches=launches
        )
    worst_max = worst_mean = 0.0
    for trial, (expected, new) in enumerate(zip(reference.expected, produced)):
        new = new if isinstance(new, list) else [new]
        if trial and looks_cached(reference.expected[trial - 1], expected, produced[trial - 1], new):
            return _result(
                spec,
                Verdict.RUNTIME_ERROR,
                "anti-hacking: the output did not change when the inputs did",
                trials=trial + 1,
                launches=launches,
            )
        compared = compare_outputs(expected, new, reference.tolerance(trial, settings))
        if compared.verdict is not Verdict.PASS:
            return _result(
                spec,
                compared.verdict,
                f"{reference.trial_label(trial)}: {compared.reason}",
                max_abs_diff=compared.max_abs_diff,
                mean_abs_diff=compared.mean_abs_diff,
                trials=trial + 1,
                launches=launches,
            )
        worst_max, worst_mean = (
            max(worst_max, compared.max_abs_diff or 0.0),
            max(worst_mean, compared.mean_abs_diff or 0.0),
        )
    trials = len(produced)
    if spec.tier is Tier.CPU and not launches:
        return _result(
            spec,
            Verdict.RUNTIME_ERROR,
            "no custom kernel ran: the outputs match but no kernel was launched",
            trials=trials,
        )
    fields = {"max_abs_diff": worst_max, "mean_abs_diff": worst_mean, "trials": trials, "launches": launches}
    return _result(spec, Verdict.PASS, f"{trials} trials within tolerance", **fields)


def kernels_did_the_work(
    spec: TierSpec,
    folder: Path,
    reference: ReferenceRun,
    settings: VerifySettings,
    passed: VerifyResult,
    name: str = KERNELS_OFF_FILE,
) -> VerifyResult:
    """``passed`` (the candidate's ``pass``), or ``static_reject`` when an output the candidate side
    left in ``name`` (``KERNELS_OFF_FILE``: a trial drawn after the run, run again with its kernels
    disabled, launches checked and counted, no block runs; ``SECOND_KERNELS_OFF_FILE`` the same at
    the second size) is still within tolerance of the reference: the device code did not compute it
    (host code, torch or numpy did, in any thread). Only outputs that need computing are checked
    (:func:`outputs_to_check`). A replay that left no file the judge can read (it raised, diverged,
    crashed or hung) fails closed: a pass cannot stand on a check that did not run."""
    replayed = _replayed_trial(folder, reference, name)
    if replayed is None:
        if not outputs_to_check(reference, settings, 0):
            return passed
        reason = "the kernels-off replay left no outputs the judge can read; a pass needs it"
        return _result(spec, Verdict.STATIC_REJECT, reason, launches=dict(passed.launches))
    trial, kernels_off = replayed
    checked = outputs_to_check(reference, settings, trial)
    label = reference.trial_label(trial)
    matched = _matching_without_kernels(kernels_off, reference, trial, checked, settings)
    if matched:
        outputs = ", ".join(map(str, matched))
        reason = (
            f"run-time fallback: {label}: output {outputs} matches the reference with the "
            "candidate's kernels disabled, so its device code did not compute it"
        )
        return _result(spec, Verdict.STATIC_REJECT, reason, launches=dict(passed.launches))
    host_off = _replayed_trial(folder, reference, host_off_file(name))
    host_made = _host_made(
        kernels_off, host_off[1] if host_off and host_off[0] == trial else None, reference, trial, checked, settings
    )
    if host_made:
        index, count = host_made[0]
        reason = (
            f"run-time fallback: {label}: {count} elements of output {index} match the "
            "reference with the candidate's kernels disabled and no longer once its host's copies to the device "
            "are poisoned too, so host code computed them"
        )
        return _result(spec, Verdict.STATIC_REJECT, reason, launches=dict(passed.launches))
    torch_made = _torch_made(folder, reference, torch_made_file(name), trial, checked, settings)
    if torch_made:
        index, operator = torch_made
        reason = (
            f"run-time fallback: {label}: output {index} stands, in place, in what torch "
            f"computed on the device with the candidate's kernels disabled ({clip(operator, 80)})"
        )
        return _result(spec, Verdict.STATIC_REJECT, reason, launches=dict(passed.launches))
    return passed


def outputs_to_check(reference: ReferenceRun, settings: VerifySettings, trial: int) -> list[int]:
    """Indices of ``trial``'s expected outputs that only computation reaches, so that matching them
    without the kernels is a fallback: tensors that are not empty, not one value repeated within
    tolerance (zeros or a fill reach that without any kernel) and not within tolerance of the same
    output of another trial (an output that ignores the inputs). An output the judge cannot
    compare is left out: it is the problem's, so it is not checked rather than anyone blamed."""
    return [
        index
        for index, _ in enumerate(reference.expected[trial])
        if _needs_computing(reference, trial, index, settings)
    ]


def _needs_computing(reference: ReferenceRun, trial: int, index: int, settings: VerifySettings) -> bool:
    """Whether ``trial``'s expected output ``index`` is one that only computation reaches (see
    :func:`outputs_to_check`)."""
    import torch

    def same(expected: Any, other: Any) -> bool:
        return compare_outputs([expected], [other], settings.tolerance).verdict is Verdict.PASS

    expected = reference.expected[trial][index]
    if not isinstance(expected, torch.Tensor) or expected.numel() == 0:
        return False
    others = [run[index] for number, run in enumerate(reference.expected) if number != trial and index < len(run)]
    try:
        if same(expected, expected.reshape(-1)[0].expand_as(expected)):
            return False
        return not any(isinstance(o, torch.Tensor) and o.shape == expected.shape and same(expected, o) for o in others)
    except Exception:  # noqa: BLE001 - a reference output the judge cannot compare: no check, no blame
        return False


def _replayed_trial(folder: Path, reference: ReferenceRun, name: str) -> tuple[int, list[Any]] | None:
    """The replayed trial (0-based) and its outputs in the file ``name`` of ``folder`` (a kernels-off
    run), None when there is none the judge can read. The file is the candidate side's, read as its
    outputs are; whatever it holds that makes reading raise, or a trial the run did not have, is
    None too."""
    try:
        expected_bytes = max(
            sum(t.numel() * t.element_size() for t in _tensor_values(run)) for run in reference.expected
        )
        data = read_untrusted(folder, name, 2 * expected_bytes + (1 << 20))
        values = load_values(data) if data is not None else {}
    except Exception:  # noqa: BLE001 - the candidate's data: unreadable is no replay
        return None
    produced, trial = values.get("trials"), values.get("trial", 0)
    if not isinstance(produced, list) or len(produced) != 1:
        return None
    if not isinstance(trial, int) or isinstance(trial, bool) or not 0 <= trial < len(reference.expected):
        return None
    return trial, produced[0] if isinstance(produced[0], list) else [produced[0]]


def _matching_without_kernels(
    kernels_off: list[Any], reference: ReferenceRun, trial: int, checked: list[int], settings: VerifySettings
) -> list[int]:
    """Which of the ``checked`` outputs the kernels-off replay of ``trial`` left within tolerance of
    that trial's reference. Whatever the candidate's values make the comparison raise keeps the pass."""
    expected = reference.expected[trial]
    try:
        return [
            index
            for index in checked
            if index < len(kernels_off)
            and compare_outputs([expected[index]], [kernels_off[index]], settings.tolerance).verdict is Verdict.PASS
        ]
    except Exception:  # noqa: BLE001 - the candidate's data: unreadable means its kernels mattered
        return []


def _host_made(
    kernels_off: list[Any],
    host_off: list[Any] | None,
    reference: ReferenceRun,
    trial: int,
    checked: list[int],
    settings: VerifySettings,
) -> list[tuple[int, int]]:
    """``(output, elements)`` that host code computed, behind the device boundary: elements the
    kernels-off run left within tolerance of trial 1's reference that its twin with the host's
    copies to the device poisoned too (``host_off``, from ``host_off_file``) does not, where the
    reference holds more than one value there (a fill copied from the host is no computation). A
    kernel that computes part of an output while the host copies in the rest is caught here; the
    whole-output check sees only a mismatch. Nothing without the twin (no boundary) or when the
    values cannot be compared."""
    import torch

    if host_off is None:
        return []
    expected = reference.expected[trial]
    try:
        found = []
        for index in checked:
            if index >= min(len(kernels_off), len(host_off)):
                continue
            ref, without, poisoned = expected[index], kernels_off[index], host_off[index]
            if not all(isinstance(t, torch.Tensor) and t.shape == ref.shape for t in (without, poisoned)):
                continue
            atol, rtol = settings.tolerance(str(ref.dtype).removeprefix("torch."))
            target = ref.detach().double()

            def close(values: Any, target: Any = target, atol: float = atol, rtol: float = rtol) -> Any:
                return torch.isclose(values.detach().double(), target, atol=atol, rtol=rtol)

            made = close(without) & ~close(poisoned)
            if bool(made.any()) and target[made].unique().numel() > 1:
                found.append((index, int(made.sum())))
        return found
    except Exception:  # noqa: BLE001 - the candidate's data: unreadable means its kernels mattered
        return []


def _torch_made(
    folder: Path, reference: ReferenceRun, name: str, trial: int, checked: list[int], settings: VerifySettings
) -> tuple[int, str] | None:
    """``(output, operator)`` when a result of torch compute on the device in trial 1's kernels-off
    replay (the device process's ``name`` file, from ``torch_made_file``) is a checked output or
    part of one, or holds one, in place (:func:`in_place.part_of`): torch computed it without the
    kernels, which at most moved it. None without the file (no boundary), or when its values cannot
    be compared."""
    from cuset_core.verify.execution.in_place import part_of

    try:
        data = read_untrusted(folder, name, TORCH_MADE_CAP_BYTES + HEADER_CAP_BYTES + (1 << 20))
        made = load_values(data) if data is not None else {}
        names, values = made.get("names"), made.get("values")
        if not isinstance(names, list) or not isinstance(values, list) or len(names) != len(values):
            return None
        for index in checked:
            expected = reference.expected[trial][index]
            atol, rtol = settings.tolerance(str(expected.dtype).removeprefix("torch."))
            for operator, value in zip(names, values):
                if part_of(expected, value, atol, rtol) or part_of(value, expected, atol, rtol):
                    return index, str(operator)
    except Exception:  # noqa: BLE001 - the device side's data: unreadable keeps the pass, as a kernels-off file does
        return None
    return None


def judge(
    spec: TierSpec,
    problem_code: str,
    candidate: Candidate,
    settings: VerifySettings,
    job: HarnessJob,
    references: ReferencePool | None = None,
) -> tuple[VerifyResult, ReferenceDetails]:
    """Run the reference side, then the candidate side, and decide (see the module docstring).

    ``job`` is the tier's ``job.json`` of both sides; the candidate's also gets its file name and
    the reference's hand-over (``ReferenceDetails.candidate_job``). Returns the verdict and the
    reference's details (the defaults when the reference decided). The inputs are drawn under
    ``job.input_seed`` when it names one, else under a seed drawn here for this run alone, or, with
    ``references``, for the batch the pool serves (its reference run is shared).
    """
    started = time.monotonic()
    try:
        result, details = _judge(spec, problem_code, candidate, settings, job, references)
    finally:
        if spec.warm is not None:
            # Once the check is over: sides importing torch beside its candidate would slow it down.
            spec.warm.refill()
    result.timings_s.setdefault(f"{spec.tier.value}_total", round(time.monotonic() - started, 4))
    return result, details


def _judge(
    spec: TierSpec,
    problem_code: str,
    candidate: Candidate,
    settings: VerifySettings,
    job: HarnessJob,
    references: ReferencePool | None,
) -> tuple[VerifyResult, ReferenceDetails]:
    with (
        # Folders named as any program's: the candidate's working folder says nothing of the verifier.
        tempfile.TemporaryDirectory() as folder,
        tempfile.TemporaryDirectory() as build_folder,
        ThreadPoolExecutor(max_workers=1) as pool,
        # The candidate's harness imports torch while the reference and the build run.
        _start_side(spec, "candidate", Path(folder)) as early,
    ):
        root = Path(folder)
        handed_to = _candidate_folder(root, early)
        cached = _cached_libraries(spec)
        # Separate random folders: g++ on the candidate's sources cannot name the reference's.
        build = spec.build_side and cached is None
        building = pool.submit(_run_side, spec, "build", Path(build_folder), job) if build else None
        waited = time.monotonic()
        if references is None:
            reference = run_reference(spec, root, problem_code, with_input_seed(job))
        else:
            reference, _ = references.reference(
                spec, problem_code, job, lambda seeded: run_reference(spec, root, problem_code, seeded)
            )
        waited = time.monotonic() - waited
        if isinstance(reference, VerifyResult):
            # A pool hands the same failure to the whole batch.
            return reference.model_copy(deep=True), ReferenceDetails()
        details = reference.report.details
        candidate_fields: dict[str, Any] = {"handed": details.candidate_job}
        if cached is not None:
            candidate_fields["prebuilt"] = _hand_over_cached(cached, handed_to)
        elif building is not None:
            building.result()
            candidate_fields["prebuilt"], beyond_bridge = _hand_over_builds(spec, Path(build_folder), handed_to)
            if beyond_bridge is not None:
                reason = f"{beyond_bridge}; behind the device boundary the CPU tier runs bridge builds only"
                return _result(spec, Verdict.UNSUPPORTED, reason, unsupported_feature=BEYOND_BRIDGE), details
        if spec.late_candidate_fields is not None:
            candidate_fields.update(spec.late_candidate_fields())
        result, report = run_candidate(
            spec, root, candidate, reference, job.model_copy(update=candidate_fields), settings, early
        )
    # What the reference cost this check: the wait for it (nothing for a run shared with earlier
    # candidates of the batch, the rest of a run started while tier 1 compiled).
    timings = {**report.timings_s, f"{spec.tier.value}_reference": round(waited, 3)}
    update: dict[str, Any] = {
        "timings_s": {**timings, **result.timings_s},
        "built_with": dict(report.built_with),
        # The first size's trials always ran when the candidate did; the second only after a pass there.
        "sizes_run": result.sizes_run or details.sizes_run[:1],
    }
    if result.verdict is Verdict.PASS and details.note:
        update["reason"] = clip(f"{result.reason}; {details.note}")
    if spec.tier is Tier.GPU and result.verdict is Verdict.PASS:
        speed = _speed(reference.report, report.runtime_ms)
        if "speed_note" in speed:
            update["reason"] = clip(f"{update.get('reason', result.reason)}; {speed.pop('speed_note')}")
        update.update(speed)
    return result.model_copy(update=update), details


def _cached_libraries(spec: TierSpec) -> list[tuple[PlannedLibrary, bytes]] | None:
    """Every planned library with its bytes from the library cache; None unless all are there."""
    if spec.library_cache is None or not spec.planned:
        return None
    found = [(planned, spec.library_cache.get(planned.key)) for planned in spec.planned]
    if any(data is None for _, data in found):
        return None
    return [(planned, data) for planned, data in found if data is not None]


def _hand_over_cached(cached: list[tuple[PlannedLibrary, bytes]], candidate_folder: Path) -> list[PrebuiltLibrary]:
    """Write cached libraries into the candidate's folder; their job entries."""
    candidate_folder.mkdir(exist_ok=True)
    handed = []
    for planned, data in cached:
        name = f"{planned.module}.so"
        (candidate_folder / name).write_bytes(data)
        handed.append(PrebuiltLibrary(module=planned.module, digest=planned.digest, file=name))
    return handed


def _hand_over_builds(
    spec: TierSpec, build_folder: Path, candidate_folder: Path
) -> tuple[list[PrebuiltLibrary], str | None]:
    """Copy the libraries the build side reported into the candidate's folder (created here);
    their entries for the candidate's job, and the build side's finding that an extension builds on
    ATen's preludes only (``BuildDetails.beyond_bridge``). Anything odd is left out: the candidate
    side rebuilds. A library the judge planned goes into the library cache under the judge's own key."""
    planned = {(library.module, library.digest): library for library in spec.planned}
    candidate_folder.mkdir(exist_ok=True)
    try:
        report = read_report(build_folder, BuildReport)
    except UntrustedFileError:
        return [], None
    handed: list[PrebuiltLibrary] = []
    for library in report.details.built if report is not None else []:
        if not re.fullmatch(r"[\w.-]+\.so", library.file):
            continue
        try:
            data = read_untrusted(build_folder, library.file, LIBRARY_CAP_BYTES)
        except UntrustedFileError:
            continue
        if data is not None:
            (candidate_folder / library.file).write_bytes(data)
            handed.append(library)
            expected = planned.get((library.module, library.digest))
            if expected is not None and spec.library_cache is not None:
                spec.library_cache.put(expected.key, data)
    return handed, report.details.beyond_bridge if report is not None else None


def _speed(reference: ReferenceReport, runtime_ms: float | None) -> dict[str, Any]:
    """Tier-3 timing fields from the reference's report and the candidate's (each side timed itself)."""
    compiled = reference.details.compile_timing
    speed = speed_fields(_float(reference.reference_ms), compiled.mean if compiled else None, runtime_ms)
    if reference.details.compile_error is not None:
        failed = f"no torch.compile baseline: {clip(reference.details.compile_error, 200)}"
        speed["speed_note"] = f"{speed['speed_note']}; {failed}" if "speed_note" in speed else failed
    return speed


def speed_fields(reference_ms: float | None, compile_ms: float | None, runtime_ms: float | None) -> dict[str, Any]:
    """``VerifyResult`` timing fields from mean milliseconds per call: the eager reference's, the
    reference under torch.compile (None: not timed) and the candidate's (informative only, never
    part of the verdict). ``speedup`` = reference_ms / runtime_ms and ``compile_speedup`` =
    compile_ms / runtime_ms, each left out where a time is missing; ``speed_note`` says it in words."""
    fields: dict[str, Any] = {"reference_ms": reference_ms, "compile_ms": compile_ms, "runtime_ms": runtime_ms}
    if not runtime_ms:
        return fields
    notes = []
    if reference_ms:
        fields["speedup"] = reference_ms / runtime_ms
        notes.append(f"{runtime_ms:.4f} ms vs eager {reference_ms:.4f} ms (speedup {fields['speedup']:.2f}x)")
    if compile_ms:
        fields["compile_speedup"] = compile_ms / runtime_ms
        notes.append(f"vs torch.compile {compile_ms:.4f} ms ({fields['compile_speedup']:.2f}x)")
    if notes:
        fields["speed_note"] = ", ".join(notes)
    return fields


def _float(value: Any) -> float | None:
    """``value`` as a finite float; None for anything else (text, NaN, an int too large for a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None
