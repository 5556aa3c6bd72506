"""What the execution tiers (2: CPU runtime, 3: GPU) share: the judge and its two sandboxed sides.

Trust boundary (DESIGN.md §4): the candidate is hostile, so a verdict is never read from
anything it wrote. Each tier runs two sandboxed processes of its harness module, one after the
other, each in a folder of its own:

1. ``reference``: loads the problem, draws the inputs of every trial (under a seed the judge drew
   for this run, :func:`with_input_seed`; every second trial wide, :func:`trial_outputs`), runs ``Model`` and writes
   ``inputs.safetensors`` (what the candidate gets: init inputs, trial inputs, the reference's
   weights for a ``.cu`` candidate) and ``reference.safetensors`` (the expected outputs). Its
   folder is removed, after the judge read both files, before the candidate starts.
2. ``candidate``: gets only ``inputs.safetensors`` and its own code (never ``problem.py``; the
   reference ``Model`` is not importable there), runs ``ModelNew`` and writes
   ``outputs.safetensors`` plus ``report.json`` (launch counts, failures it noticed).
3. The judge (this module, in the verifier's process) reads those files with ``O_NOFOLLOW`` as
   regular files under a size cap, compares the tensors with the KernelBench tolerances and
   decides. The candidate's report (a typed, bounded :class:`CandidateReport`) can only make a
   verdict worse: a ``pass`` comes from the judge's own comparison or not at all, its text is
   quoted as the candidate's (:func:`quoted`), an ``unsupported`` claim stands only where the
   verifier's own analysis confirms it, and anything the candidate's files make the judge
   raise is the candidate's ``runtime_error``.
   Where the tier can disable the candidate's kernels (tier 2), the candidate side also runs
   trial 1 once more with its kernels disabled; when the verdict is ``pass``, an output of that
   run that still matches the reference did not come from its device code
   (:func:`kernels_did_the_work`).

Data crosses processes as safetensors (data only, never pickle); non-tensor values (init
arguments, scalars) travel as JSON in the file's metadata.

The judge hands each side a ``job.json``: a :class:`CpuJob` or :class:`GpuJob` (both
:class:`HarnessJob`), written with ``model_dump_json`` and read back with ``model_validate_json``.
Each side answers with a ``report.json`` (its :class:`Outcome`), which the judge reads as the
type it expects of that side (:func:`read_report`): :class:`ReferenceReport`,
:class:`BuildReport` or the candidate's bounded :class:`CandidateReport`.

Parent (judge) side: :func:`judge`. Harness side: :func:`read_job`, :class:`Outcome`,
:class:`Decided`, :func:`candidate_factory`, :func:`save_values`, :func:`load_values`,
:func:`write_report`, :class:`FallbackMonitor`.
The harnesses import this module inside the sandbox, so it imports only the standard library
and light parts of ``cuset_core.verify`` at the top; torch is imported where it is used.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import re
import secrets
import shutil
import stat
import struct
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

import cuset_core
from cuset_core.verify.library_cache import LibraryCache
from cuset_core.verify.result import Tier, Verdict, VerifyResult
from cuset_core.verify.sandbox import (
    SandboxOutcome,
    StartedSandbox,
    describe,
    run_sandboxed,
    start_sandboxed,
    unpack_files,
)
from cuset_core.verify.settings import SandboxLimits, VerifySettings

if TYPE_CHECKING:
    from torch.utils._python_dispatch import TorchDispatchMode

    from cuset_core.verify.candidate import Candidate
    from cuset_core.verify.reference_pool import ReferencePool

INIT_SEED = 42  # KernelBench seeds weight initialisation with 42
LOG_CHARS = 4000
REASON_CHARS = 600
INPUTS_FILE = "inputs.safetensors"
REFERENCE_FILE = "reference.safetensors"
OUTPUTS_FILE = "outputs.safetensors"
KERNELS_OFF_FILE = "kernels_off.safetensors"  # tier 2: trial 1's outputs with the kernels disabled
REPORT_FILE = "report.json"
# Tier 2's second size: the candidate side's outputs and report at the second reduction.
SECOND_OUTPUTS_FILE = "second_outputs.safetensors"
SECOND_REPORT_FILE = "second_report.json"
SECOND_KERNELS_OFF_FILE = "second_kernels_off.safetensors"
REPORT_CAP_BYTES = 64 * 1024
REFERENCE_CAP_BYTES = 8 << 30  # the reference is the problem's own code: bounded, not trusted
HEADER_CAP_BYTES = 1 << 20  # safetensors JSON header
LIBRARY_CAP_BYTES = 512 << 20  # an extension the build side compiled
_RUNTIME_MESSAGE = "cuset runtime:"  # how the CPU runtime starts the line explaining an abort
SEED_LIMIT = 2**31  # drawn input seeds lie below it, like the settings' explicit ones
WIDE_SCALE = 4.0  # the wide trials' floating-point inputs are the problem's own times this
QUOTE_CHARS = 400  # candidate text quoted in a verdict's reason


# ---------------------------------------------------------------- the job of a side


class _Contract(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CandidateJob(_Contract):
    """What the reference side hands the candidate side (through the judge) in its report's
    ``details["candidate_job"]``."""

    overrides: dict[str, int] = Field(default_factory=dict, description="tier 2: reduced problem sizes, by name")
    constants: dict[str, int] = Field(default_factory=dict, description="tier 2: the problem's int constants")
    reference_aliases: bool = Field(False, description="tier 3: the reference returns views of its inputs")
    second_overrides: dict[str, int] = Field(
        default_factory=dict,
        description="tier 2: the second, smaller reduction the candidate also runs at, by name (empty: one size)",
    )


class HarnessJob(_Contract):
    """The ``job.json`` of one side, the fields of every tier; each tier's job adds its own."""

    kind: str = Field(description="python | cu, the candidate's kind")
    seeds: int = Field(description="correctness trials")
    input_seed: int | None = Field(
        None,
        description="reference side: seed of trial 0's inputs (trial i draws with input_seed + i); the judge "
        "draws it when the settings fix none; None on the candidate side, which gets the inputs only",
    )
    candidate: str | None = Field(None, description="candidate side: its file in the work folder")
    handed: CandidateJob = Field(default_factory=CandidateJob, description="candidate side: the reference's hand-over")

    def candidate_file(self) -> str:
        """The candidate side's file name; only the candidate side's job has one."""
        if self.candidate is None:
            raise ValueError("this job.json names no candidate file: it is not the candidate side's")
        return self.candidate


class PrebuildExtension(_Contract):
    """An extension of a Python candidate that the build side compiles before the candidate runs."""

    name: str
    cuda: str
    cpp: str
    functions: list[str] | None = None


class PrebuiltLibrary(_Contract):
    """A library the build side compiled, handed to the candidate side (``file`` in its folder)."""

    module: str
    digest: str = Field(description="sha256 (hex) of the translation unit")
    file: str


class CpuJob(HarnessJob):
    """Tier 2's ``job.json``: size reduction, the g++ toolchain and the extensions to prebuild."""

    reduce_sizes: bool
    max_elements: int
    second_max_elements: int | None = Field(
        None,
        description="reference side: the element budget of a second, smaller reduction to run too (the "
        "candidate then runs at both sizes in the same process); None: one size",
    )
    preludes: list[str] = Field(description="folders of the precompiled runtime preludes, in the order to try them")
    runtime_library: str = Field(
        "", description="the trusted runtime library (guarded allocator, trial switches) the candidate side loads first"
    )
    include_dirs: list[str]
    library_dirs: list[str]
    prebuild: list[PrebuildExtension] = Field(default_factory=list)
    prebuilt: list[PrebuiltLibrary] = Field(default_factory=list, description="candidate side: from the build side")


class GpuJob(HarnessJob):
    """Tier 3's ``job.json``: timed calls per side, the torch.compile baseline, the candidate's kernels
    and the device memory cap (MiB)."""

    timing_trials: int
    compile_baseline: bool = False
    kernel_names: list[str] = Field(default_factory=list)
    gpu_memory_mb: int


JobT = TypeVar("JobT", bound=HarnessJob)


# ---------------------------------------------------------------- what the trusted sides report


class TimingStats(_Contract):
    """Per-call times of a timed model (tier 3), in milliseconds; ``n`` calls."""

    mean: float
    median: float
    std: float
    min: float
    max: float
    n: int


class ReferenceDetails(_Contract):
    """What the reference side tells the judge besides its verdict (its report's ``details``)."""

    candidate_job: CandidateJob = Field(default_factory=CandidateJob, description="handed to the candidate side")
    wide_trials: list[int] = Field(default_factory=list, description="0-based trials whose inputs were scaled")
    second_wide_trials: list[int] = Field(default_factory=list, description="tier 2: the same at the second size")
    note: str = Field("", description="tier 2: how the sizes were reduced, said with a pass")
    original_fits: bool = Field(False, description="tier 2: the original sizes fit a rerun at them")
    original_elements: int | None = Field(None, description="tier 2: elements at the original sizes, if measured")
    timing: TimingStats | None = Field(None, description="tier 3: the eager reference's per-call times")
    compile_timing: TimingStats | None = Field(None, description="tier 3: the reference under torch.compile")
    compile_error: str | None = Field(None, description="tier 3: why there is no torch.compile baseline")


class BuildDetails(_Contract):
    """What the build side compiled beside the reference (its report's ``details``)."""

    built: list[PrebuiltLibrary] = Field(default_factory=list)


DetailsT = TypeVar("DetailsT", ReferenceDetails, BuildDetails)


class _SideReport(BaseModel):
    """A trusted side's ``report.json`` as the judge reads it: the fields it acts on, typed; a
    report that does not fit is the verifier's own fault (the file is still read under a cap)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    verdict: Verdict
    reason: str = ""
    log: str = ""
    unsupported_feature: str | None = None
    reference_ms: float | None = None
    timings_s: dict[str, float] = Field(default_factory=dict)


class ReferenceReport(_SideReport):
    """The reference side's report."""

    details: ReferenceDetails = Field(default_factory=ReferenceDetails)


class BuildReport(_SideReport):
    """The build side's report."""

    details: BuildDetails = Field(default_factory=BuildDetails)


def trial_seeds(job: HarnessJob) -> list[int]:
    """The input seed of each correctness trial of a side's job: ``input_seed`` + 0, 1, ..."""
    if job.input_seed is None:
        raise ValueError("this job.json names no input seed: only the reference side's has one")
    return [job.input_seed + trial for trial in range(job.seeds)]


def with_input_seed(job: JobT) -> JobT:
    """``job`` with its input seed: the one the caller fixed (to reproduce a run), else a fresh one
    drawn here, so that no table of answers for known inputs can pass."""
    if job.input_seed is not None:
        return job
    return job.model_copy(update={"input_seed": secrets.randbelow(SEED_LIMIT - job.seeds)})


def wide_trial(trial: int) -> bool:
    """Whether trial ``trial`` (0-based) draws wide inputs: every second trial, from the second on.

    Trial 0 keeps the problem's own distribution (KernelBench's inputs); the wide ones scale its
    floating-point inputs by ``WIDE_SCALE``, so a kernel that clamps or saturates inside the
    usual range of ``randn`` fails."""
    return trial % 2 == 1


def trial_outputs(
    inputs: list[Any], run: Callable[[list[Any]], list[Any]], wide: bool
) -> tuple[list[Any], list[Any], bool]:
    """The inputs, reference outputs and whether they are wide, for one trial drawn as ``inputs``.

    ``run`` computes the reference's outputs. A wide trial scales the floating-point tensors of
    ``inputs`` by ``WIDE_SCALE`` and keeps them when the reference runs on them and its outputs
    stay finite; else (a log, a power, fp16 overflow, a range check) the plain inputs are used,
    so the wide distribution never turns a problem's own numerics against a candidate."""
    if wide:
        scaled = [_scaled(value) for value in inputs]
        try:
            outputs = run(scaled)
        except Exception:  # noqa: BLE001 - the problem's own limits: this trial keeps the plain inputs
            outputs = None
        if outputs is not None and all_finite(outputs):
            return scaled, outputs, True
    return inputs, run(inputs), False


def _scaled(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value * WIDE_SCALE
    return value


def all_finite(values: list[Any]) -> bool:
    """Whether every floating-point tensor among ``values`` holds finite numbers only."""
    import torch

    return all(
        bool(torch.isfinite(value).all())
        for value in values
        if isinstance(value, torch.Tensor) and (value.is_floating_point() or value.is_complex())
    )


@dataclass
class Outcome:
    """What one side's harness found; on the candidate side it can only reject."""

    verdict: Verdict
    reason: str = ""
    log: str = ""
    unsupported_feature: str | None = None
    max_abs_diff: float | None = None
    mean_abs_diff: float | None = None
    trials: int = 0
    runtime_ms: float | None = None
    reference_ms: float | None = None
    speedup: float | None = None
    launches: dict[str, int] = field(default_factory=dict)
    timings_s: dict[str, float] = field(default_factory=dict)
    details: ReferenceDetails | BuildDetails | None = None  # the trusted sides' own facts
    built_with: dict[str, str] = field(default_factory=dict)  # extension module -> prelude (tier 2)


class Decided(Exception):
    """Raised inside a harness protocol to stop at the first failure with its outcome."""

    def __init__(self, outcome: Outcome):
        super().__init__(outcome.reason)
        self.outcome = outcome


class UntrustedFileError(ValueError):
    """A file from a sandboxed side is not what the judge accepts (link, FIFO, oversize, malformed)."""


def tail(text: str) -> str:
    """The last ``LOG_CHARS`` characters of a log: where the explaining error usually is."""
    return text[-LOG_CHARS:]


def clip(text: Any, limit: int = REASON_CHARS) -> str:
    """``text`` as a string of at most ``limit`` characters (an ellipsis marks a cut)."""
    text = text if isinstance(text, str) else str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def quoted(text: str, what: str = "message") -> str:
    """Candidate text inside a verdict's reason, marked as the candidate's and cut to size, so that
    it never reads as the verifier's own words."""
    return f'(candidate\'s {what}: "{clip(text, QUOTE_CHARS)}")'


# ---------------------------------------------------------------- the candidate's report, as the judge reads it

_ShortName = Annotated[str, AfterValidator(lambda text: clip(text, 120))]


class CandidateReport(BaseModel):
    """The fields of the candidate side's ``report.json`` the judge uses, each bounded; anything
    else in the file is ignored, and a file that does not fit is the candidate's ``runtime_error``.

    The verdict is one the candidate side may claim: ``pass`` (ignored: a pass is the judge's
    word), or a failure that can only make its verdict worse; an ``unsupported`` claim stands
    only where the judge's own analysis confirms it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    verdict: Literal["pass", "runtime_error", "compile_error", "static_reject", "unsupported"]
    reason: Annotated[str, AfterValidator(clip)] = ""
    log: Annotated[str, AfterValidator(tail)] = ""
    unsupported_feature: Annotated[str, AfterValidator(lambda text: clip(text, 200))] | None = None
    launches: dict[_ShortName, Annotated[int, Field(ge=0, le=2**53)]] = Field(default_factory=dict, max_length=256)
    timings_s: dict[_ShortName, Annotated[float, Field(ge=0, le=1e7, allow_inf_nan=False)]] = Field(
        default_factory=dict, max_length=32
    )
    runtime_ms: Annotated[float, Field(ge=0, le=1e9, allow_inf_nan=False)] | None = None
    built_with: dict[_ShortName, Literal["bridge", "light", "full"]] = Field(default_factory=dict, max_length=64)


# ---------------------------------------------------------------- data across processes


def _encode(value: Any, key: str, tensors: dict[str, Any]) -> Any:
    """JSON description of ``value``; its tensors go into ``tensors`` under keys from ``key``."""
    import torch

    if isinstance(value, torch.Tensor):
        tensors[key] = value.detach().to("cpu").contiguous().clone()
        return {"t": key}
    if isinstance(value, (tuple, list)):
        items = [_encode(item, f"{key}.{i}", tensors) for i, item in enumerate(value)]
        return {"tuple" if isinstance(value, tuple) else "list": items}
    if isinstance(value, dict):
        return {"dict": {str(k): _encode(item, f"{key}.{k}", tensors) for k, item in value.items()}}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"v": value}
    return {"repr": clip(repr(value), 200)}


def _decode(spec: Any, tensors: dict[str, Any]) -> Any:
    import torch

    if not isinstance(spec, dict) or len(spec) != 1:
        raise UntrustedFileError("malformed value description")
    ((kind, body),) = spec.items()
    if kind == "t":
        if not isinstance(body, str) or body not in tensors:
            raise UntrustedFileError("a tensor the layout names is missing")
        return tensors[body]
    if kind in ("tuple", "list") and isinstance(body, list):
        items = [_decode(item, tensors) for item in body]
        return tuple(items) if kind == "tuple" else items
    if kind == "dict" and isinstance(body, dict):
        return {k: _decode(item, tensors) for k, item in body.items()}
    if kind == "dtype" and isinstance(body, str) and isinstance(getattr(torch, body, None), torch.dtype):
        return getattr(torch, body)
    if kind == "v" and (body is None or isinstance(body, (bool, int, float, str))):
        return body
    if kind == "repr" and isinstance(body, str):
        return _Opaque(clip(body, 200))
    raise UntrustedFileError("malformed value description")


@dataclass(frozen=True)
class _Opaque:
    """A value that could not cross processes as data: only its ``repr`` did."""

    text: str


def save_values(path: Path, groups: dict[str, Any]) -> None:
    """Write named groups of values (tensors, numbers, nested lists/tuples) as one safetensors file."""
    from safetensors.torch import save_file

    tensors: dict[str, Any] = {}
    layout = {name: _encode(value, name, tensors) for name, value in groups.items()}
    partial = path.with_name(path.name + ".tmp")
    save_file(tensors, str(partial), metadata={"cuset": json.dumps(layout)})
    partial.replace(path)


def load_values(data: bytes) -> dict[str, Any]:
    """The groups of a :func:`save_values` file given as bytes; ``UntrustedFileError`` if malformed."""
    from safetensors.torch import load

    if len(data) < 8:
        raise UntrustedFileError("too short for a safetensors file")
    (header_len,) = struct.unpack("<Q", data[:8])
    if header_len > min(HEADER_CAP_BYTES, len(data) - 8):
        raise UntrustedFileError(f"safetensors header of {header_len} bytes")
    try:
        header = json.loads(data[8 : 8 + header_len])
        layout = json.loads(header["__metadata__"]["cuset"])
        tensors = load(data)
    except Exception as exc:  # noqa: BLE001 - any parse failure is a malformed file
        raise UntrustedFileError(f"not a readable safetensors file ({type(exc).__name__})") from exc
    if not isinstance(layout, dict):
        raise UntrustedFileError("malformed layout")
    return {name: _decode(spec, tensors) for name, spec in layout.items()}


def read_untrusted(folder: Path, name: str, cap: int) -> bytes | None:
    """The bytes of ``folder/name`` if it is a regular file of at most ``cap`` bytes; None if absent.

    Opened with ``O_NOFOLLOW`` relative to the folder (itself opened without following links)
    and ``O_NONBLOCK``, so a symlink, a FIFO or a device never makes the judge read something
    else or wait; ``UntrustedFileError`` says which rule the file broke.
    """
    try:
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise UntrustedFileError(f"{folder.name}/ cannot be opened as a folder: {exc.strerror}") from exc
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        what = "a symbolic link" if os.path.islink(folder / name) else exc.strerror
        raise UntrustedFileError(f"{name} is {what}, not a regular file") from exc
    finally:
        os.close(dir_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UntrustedFileError(f"{name} is not a regular file")
        if info.st_size > cap:
            raise UntrustedFileError(f"{name} holds {info.st_size} bytes, over the cap of {cap}")
        chunks, total = [], 0
        while chunk := os.read(fd, min(1 << 20, cap + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > cap:
                raise UntrustedFileError(f"{name} grew past the cap of {cap} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


ReportT = TypeVar("ReportT", CandidateReport, ReferenceReport, BuildReport)


def read_report(folder: Path, model: type[ReportT], name: str = REPORT_FILE) -> ReportT | None:
    """A side's ``report.json`` (or the report ``name``; capped) as ``model``; None when it left none.

    ``UntrustedFileError`` with a reason of the judge's own (never the file's text) when the
    file is not such a report: not a JSON object, not JSON, nested too deep, a field out of bounds."""
    data = read_untrusted(folder, name, REPORT_CAP_BYTES)
    if data is None:
        return None
    try:
        return model.model_validate_json(data)
    except ValidationError as exc:
        errors = exc.errors()
        if any(error["type"] == "model_type" and not error["loc"] for error in errors):
            raise UntrustedFileError(f"{name} is not a JSON object") from exc
        fields = {str(error["loc"][0]) for error in errors if error["loc"]} & set(model.model_fields)
        where = f" (field {', '.join(sorted(fields))})" if fields else ""
        raise UntrustedFileError(f"{name} is not a valid report{where}") from exc


# ---------------------------------------------------------------- harness side


def read_job(argv: list[str], job_type: type[JobT]) -> tuple[str, JobT, Path]:
    """The side (``reference``/``candidate``/``build``), job and work folder of a harness command
    line ``SIDE JOB_JSON``."""
    side, job_path = argv[0], Path(argv[1]).resolve()
    return side, job_type.model_validate_json(job_path.read_bytes()), job_path.parent


def write_report(workdir: Path, outcome: Outcome, name: str = REPORT_FILE) -> None:
    """Write ``outcome`` as the side's report (or the report ``name``), atomically (a killed
    harness leaves none)."""
    report = asdict(replace(outcome, details=None))
    report["reason"], report["log"] = clip(report["reason"]), tail(report["log"])
    report["details"] = outcome.details.model_dump(mode="json") if outcome.details is not None else {}
    partial = workdir / (name + ".tmp")
    partial.write_text(json.dumps(report, default=str))
    partial.replace(workdir / name)


LATE_FILES = "--late"  # a harness started before its files (sandbox.start_sandboxed) reads them on stdin


def run_side(
    side_main: Callable[[str, JobT, Path, dict[str, float]], Outcome],
    job_type: type[JobT],
    argv: list[str],
    harness: str,
    warm_up: Callable[[], None] = lambda: None,
) -> NoReturn:
    """Entry point of a harness: run one side, always leave a report unless killed, and exit.

    With ``--late`` first, the harness was started ahead of its files: it runs ``warm_up``
    (imports torch, say) while the judge prepares them, then unpacks the archive the judge sends
    on stdin into the job's folder. It exits with ``os._exit`` once the report is written:
    torch's interpreter shutdown costs half a second per side, and no exit hook of the
    candidate's runs after the outputs are final."""
    if argv[:1] == [LATE_FILES]:
        argv = argv[1:]
        warm_up()
        unpack_files(sys.stdin.buffer.read(), Path(argv[1]).resolve().parent)
    side, job, workdir = read_job(argv, job_type)
    timings: dict[str, float] = {}
    try:
        outcome = side_main(side, job, workdir, timings)
    except Decided as decided:
        outcome = decided.outcome
    except Exception:  # noqa: BLE001 - report, never crash without a result
        verdict = Verdict.INTERNAL_ERROR if side == "reference" else Verdict.RUNTIME_ERROR
        outcome = Outcome(verdict, f"the {harness} harness failed on the {side} side", log=tail(traceback.format_exc()))
    outcome.timings_s = {**timings, **outcome.timings_s}
    write_report(workdir, outcome)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def candidate_factory(
    kind: str,
    built: Any,
    init_inputs: list[Any],
    source: str,
    n_inputs: int,
    binding: tuple[Any, dict[str, Any]] | None = None,
    device: Any = None,
) -> Callable[[], Any]:
    """A function that constructs the module under test (seed before calling it), moved to
    ``device`` when one is given; it raises ``Decided`` (``runtime_error``) when that fails.

    ``built`` is the imported candidate module for a Python candidate (it must define
    ``ModelNew``), or the built extension for a ``.cu`` candidate, whose ``forward`` is bound to
    the reference's weights: ``binding`` is the reference's ``(ReferenceLayout, named tensors)``
    and ``source`` the ``.cu`` text the binding reads.
    """
    if kind == "cu":
        from cuset_core.verify.binding import BindingError, bind_extension

        if binding is None:
            raise ValueError("a .cu candidate needs the reference's binding")

        def construct() -> Any:
            layout, tensors = binding
            tensors = {name: t.clone() if device is None else t.to(device) for name, t in tensors.items()}
            try:
                return bind_extension(layout, tensors, init_inputs, n_inputs, source, built.forward)
            except BindingError as exc:
                raise Decided(Outcome(Verdict.RUNTIME_ERROR, f"cannot bind the .cu forward: {exc}")) from exc
    else:
        if not hasattr(built, "ModelNew"):
            raise Decided(Outcome(Verdict.RUNTIME_ERROR, "the candidate defines no ModelNew"))

        def construct() -> Any:
            return built.ModelNew(*init_inputs)

    def guarded() -> Any:
        try:
            model = construct()
            return model if device is None else model.to(device)
        except Decided:
            raise
        except Exception as exc:  # noqa: BLE001 - a constructor crash decides the verdict
            raise Decided(
                Outcome(Verdict.RUNTIME_ERROR, f"constructing ModelNew failed: {exc}", log=tail(traceback.format_exc()))
            ) from exc

    return guarded


def flatten_outputs(output: Any) -> list[Any]:
    """A forward's result as a flat list: a tensor becomes ``[tensor]``, tuples/lists unpack."""
    if isinstance(output, (tuple, list)):
        return [item for element in output for item in flatten_outputs(element)]
    return [output]


def clone_values(values: list[Any]) -> list[Any]:
    """``values`` with every tensor cloned: each side's call gets inputs of its own."""
    import torch

    return [v.clone() if isinstance(v, torch.Tensor) else v for v in values]


def call_forward(
    model: Any,
    inputs: list[Any],
    what: str,
    verdict: Verdict = Verdict.RUNTIME_ERROR,
    settle: Callable[[], None] = lambda: None,
) -> list[Any]:
    """``model(*inputs)`` flattened; a failure (raised by the call or by ``settle``, run after it:
    a device synchronisation) decides the verdict: ``verdict`` with "<what> forward failed"."""
    try:
        output = model(*inputs)
        settle()
    except Decided:
        raise
    except Exception as exc:  # noqa: BLE001 - a crash of either side decides the verdict
        raise Decided(
            Outcome(verdict, f"{what} forward failed: {first_line(exc)}", log=tail(traceback.format_exc()))
        ) from exc
    return flatten_outputs(output)


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (200 characters at most), or its type's name."""
    return str(exc).splitlines()[0][:200] if str(exc).strip() else type(exc).__name__


# ---------------------------------------------------------------- run-time fallback detection

# Ops that allocate, view, move or copy data: they do no work of the problem. Everything else
# that runs outside an extension call during ``forward`` is torch compute.
ALLOCATION_OPS = frozenset(
    {
        "empty",
        "empty_like",
        "empty_strided",
        "new_empty",
        "new_empty_strided",
        "zeros",
        "zeros_like",
        "new_zeros",
        "ones",
        "ones_like",
        "new_ones",
        "full",
        "full_like",
        "new_full",
        "scalar_tensor",
        "lift_fresh",
        "resize_",
        "set_",
        "zero_",
        "fill_",
    }
)
COPY_OPS = frozenset(
    {
        "clone",
        "_to_copy",
        "copy_",
        "contiguous",
        "lift_fresh_copy",
        "_copy_from",
        "_copy_from_and_resize",
        "to",
        "detach_",
        "_local_scalar_dense",
        "item",
    }
)
VIEW_OPS = frozenset(
    {
        "view",
        "_unsafe_view",
        "reshape",
        "as_strided",
        "t",
        "transpose",
        "permute",
        "expand",
        "expand_as",
        "squeeze",
        "unsqueeze",
        "slice",
        "select",
        "split",
        "split_with_sizes",
        "chunk",
        "unbind",
        "narrow",
        "detach",
        "alias",
        "flatten",
        "unflatten",
        "view_as",
        "_reshape_alias",
        "movedim",
        "squeeze_",
        "unsqueeze_",
        "t_",
        "transpose_",
        "is_same_size",
        "is_nonzero",
        "_has_compatible_shallow_copy_type",
        "sym_size",
        "sym_stride",
        "sym_numel",
        "sym_storage_offset",
        "dim",
        "size",
        "stride",
        "numel",
    }
)


class FallbackMonitor:
    """Counts, during ``ModelNew.forward``, aten compute ops against custom-extension calls, and
    tracks which storages hold data a custom extension produced (its results, and tensors it
    wrote in place) and which hold torch compute built from them.

    An output whose storage was last produced by torch compute on data no extension touched
    (``x @ w``, ``x * 2``, the reference's own ops) is a fallback, whatever the code looks like.
    Views share their source's storage; copies and allocations carry over or reset the mark.
    It runs in the candidate's process, so it catches lazy and accidental fallbacks; the judge's
    comparison is what a hostile candidate cannot get around.
    """

    def __init__(self) -> None:
        self.extension_calls = 0
        self.compute_ops: dict[str, int] = {}
        self._depth = 0
        self._kernel_made: dict[int, bool] = {}
        self._mode: TorchDispatchMode | None = None

    # -- the extension side
    def wrap_extension(self, module: Any) -> Any:
        """A stand-in for an extension module whose functions count as kernel calls."""
        import types

        proxy = types.ModuleType(getattr(module, "__name__", "extension"))
        for name in dir(module):
            value = getattr(module, name)
            if callable(value) and not name.startswith("__") and not isinstance(value, type):
                value = self._wrap(value)
            try:
                setattr(proxy, name, value)
            except (AttributeError, TypeError):
                continue
        return proxy

    def _wrap(self, function: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.extension_calls += 1
            self._depth += 1
            try:
                arguments = list(_tensors_in((args, kwargs)))
                before = [t.clone() for t in arguments]
                result = function(*args, **kwargs)
                for original, snapshot in zip(arguments, before):
                    if not _same_bits(original, snapshot):  # written in place through data_ptr
                        self._mark(original, True)
                for produced in _tensors_in(result):
                    self._mark(produced, True)
                return result
            finally:
                self._depth -= 1

        call.__name__ = getattr(function, "__name__", "extension_function")
        call.__doc__ = getattr(function, "__doc__", None)
        return call

    # -- the torch side
    def _mark(self, tensor: Any, kernel_made: bool) -> None:
        key = _storage_key(tensor)
        if key is not None:
            self._kernel_made[key] = kernel_made

    def made_by_kernel(self, tensor: Any) -> bool:
        """Whether ``tensor``'s storage holds data a custom extension produced or derived from it."""
        key = _storage_key(tensor)
        return key is not None and self._kernel_made.get(key, False)

    def observe(self, name: str, inputs: list[Any], outputs: list[Any], in_place_target: Any) -> None:
        """Record one aten op run outside any extension call."""
        if name in VIEW_OPS:
            return
        if name in ALLOCATION_OPS:
            for tensor in outputs:
                self._mark(tensor, False)
            return
        derived = any(self.made_by_kernel(t) for t in inputs)
        if name == "copy_" and len(inputs) >= 2:
            derived = self.made_by_kernel(inputs[1])
        elif name not in COPY_OPS:
            self.compute_ops[name] = self.compute_ops.get(name, 0) + 1
        for tensor in [*outputs, *([in_place_target] if in_place_target is not None else [])]:
            self._mark(tensor, derived)

    def __enter__(self) -> FallbackMonitor:
        from torch.utils._python_dispatch import TorchDispatchMode

        monitor = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                if monitor._depth == 0 and getattr(func, "namespace", "aten") not in ("aten", "prims"):
                    monitor.extension_calls += 1  # an op the candidate registered (TORCH_LIBRARY)
                    written = [
                        value
                        for spec, value in zip(func._schema.arguments, args)
                        if spec.alias_info is not None and spec.alias_info.is_write
                    ]  # Tensor(a!)
                    for produced in [*_tensors_in(out), *_tensors_in(written)]:
                        monitor._mark(produced, True)
                elif monitor._depth == 0:
                    name = func.overloadpacket.__name__
                    target = args[0] if name.endswith("_") and args else None
                    monitor.observe(name, list(_tensors_in((args, kwargs))), list(_tensors_in(out)), target)
                return out

        self._mode = Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._mode is not None, "__exit__ without __enter__"
        self._mode.__exit__(*exc)

    def fallback_reason(self, outputs: list[Any]) -> str | None:
        """Why ``outputs`` came from torch compute instead of the kernels; None when they did not."""
        import torch

        ops = ", ".join(f"{name} x{count}" for name, count in sorted(self.compute_ops.items())) or "none"
        counts = f"{self.extension_calls} custom-extension calls, aten compute ops: {clip(ops, 200)}"
        if self.extension_calls == 0:
            return f"run-time fallback: forward never called a custom extension ({counts})"
        for index, output in enumerate(outputs):
            if isinstance(output, torch.Tensor) and not self.made_by_kernel(output):
                return (
                    f"run-time fallback: output {index} was computed by torch ops, not by the custom kernels ({counts})"
                )
        return None


def _tensors_in(value: Any) -> Iterator[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors_in(item)


def _storage_key(tensor: Any) -> int | None:
    try:
        storage = tensor.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None
    return storage.data_ptr() if storage.nbytes() else None


def _same_bits(a: Any, b: Any) -> bool:
    """Whether two tensors of one shape and dtype hold the same bytes (NaN equals NaN)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    try:
        import torch

        return bool(torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)))
    except RuntimeError:
        return bool(a.equal(b))


# ---------------------------------------------------------------- judge side


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


@dataclass(frozen=True)
class PlannedLibrary:
    """A library the judge expects the build side to compile: its module name, the sha256 of its
    translation unit (how the candidate side recognises it) and its key in the library cache,
    all computed on the trusted side from the candidate's sources."""

    module: str
    digest: str
    key: str


@dataclass(frozen=True)
class TierSpec:
    """How one tier runs its two sides: harness module, sandbox limits, environment per folder."""

    tier: Tier
    module: str
    limits: SandboxLimits
    env: Callable[[Path], dict[str, str]]
    build_side: bool = False  # a third side compiles the candidate while the reference runs
    planned: tuple[PlannedLibrary, ...] = ()  # what the build side compiles
    library_cache: LibraryCache | None = None  # when every planned library is here, no build side runs
    readable: tuple[Path, ...] = ()  # folders the sides read besides the toolchain (tier 2's preludes)
    # The verifier's own check of an unsupported feature the candidate side claims: the feature's
    # name when the judge's analysis of the candidate finds it, else None (the claim is refused).
    confirm_unsupported: Callable[[str | None], str | None] = lambda claimed: None
    # Whether the candidate side also runs trial 1 with its kernels disabled (tier 2's runtime
    # can), so that the judge checks the kernels did the work (kernels_did_the_work).
    kernels_off: bool = False
    # Whether the candidate's harness starts with the reference side and imports torch while it
    # runs (the real harnesses can; a test's stand-in for the sides cannot).
    early_start: bool = False


@dataclass
class ReferenceRun:
    """What the judge kept of the reference side: the candidate's inputs (bytes, as written),
    the expected outputs per trial, the reference's report and the seed of trial 0's inputs."""

    inputs: bytes
    expected: list[list[Any]]
    report: ReferenceReport
    input_seed: int | None = None
    # Tier 2: the expected outputs at the second, smaller reduction (none: one size only).
    second_expected: list[list[Any]] = field(default_factory=list)

    def at_second_size(self) -> ReferenceRun | None:
        """The run as the judge compares the second size's trials: their expected outputs, wide
        trials and seeds (they follow the first size's); None when there is no second size."""
        if not self.second_expected:
            return None
        details = self.report.details.model_copy(update={"wide_trials": self.report.details.second_wide_trials})
        seed = None if self.input_seed is None else self.input_seed + len(self.expected)
        return ReferenceRun(
            self.inputs, self.second_expected, self.report.model_copy(update={"details": details}), seed
        )

    def is_wide(self, trial: int) -> bool:
        """Whether the ``trial``-th (0-based) trial's inputs were scaled (:func:`trial_outputs`)."""
        return trial in self.report.details.wide_trials

    def tolerance(self, trial: int, settings: VerifySettings) -> Callable[[str], tuple[float, float]]:
        """(atol, rtol) by dtype for the ``trial``-th trial: the settings', with atol scaled on a wide
        trial by how much larger its expected outputs are than trial 1's (at least 1).

        KernelBench's atol is calibrated for outputs of ``randn``'s scale: a matmul of inputs four
        times as wide has outputs sixteen times as large and rounding errors to match, which an
        honest kernel summing in another order must not be blamed for; a clamped or saturated
        output is still off by far more."""
        if not self.is_wide(trial) or not self.expected:
            return settings.tolerance
        factor = max([1.0, *(_magnitude_ratio(new, old) for new, old in zip(self.expected[trial], self.expected[0]))])

        def scaled(dtype: str) -> tuple[float, float]:
            atol, rtol = settings.tolerance(dtype)
            return atol * factor, rtol

        return scaled

    def trial_label(self, trial: int) -> str:
        """``trial N (seed S[, wide inputs])`` for the ``trial``-th (0-based) trial, as reasons name it."""
        wide = self.is_wide(trial)
        seed = "" if self.input_seed is None else f"seed {self.input_seed + trial}"
        inputs = f"inputs x{WIDE_SCALE:g}" if wide else ""
        named = ", ".join(part for part in (seed, inputs) if part)
        return f"trial {trial + 1}" + (f" ({named})" if named else "")


def _magnitude_ratio(wide: Any, plain: Any) -> float:
    """max |wide| / max |plain| of two floating-point tensors of the reference (1 for anything else)."""
    import torch

    if not all(isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() for t in (wide, plain)):
        return 1.0
    largest = float(plain.detach().abs().max())
    ratio = float(wide.detach().abs().max()) / largest if largest > 0 else 1.0
    return ratio if math.isfinite(ratio) else 1.0


def _result(spec: TierSpec, verdict: Verdict, reason: str, **fields: Any) -> VerifyResult:
    return VerifyResult(verdict=verdict, tier=spec.tier, tiers_run=[spec.tier], reason=clip(reason), **fields)


def _run_side(
    spec: TierSpec, side: str, folder: Path, job: HarnessJob, cancel: threading.Event | None = None
) -> SandboxOutcome:
    (folder / "job.json").write_text(job.model_dump_json())
    return run_sandboxed(
        [sys.executable, "-m", spec.module, side, str(folder / "job.json")],
        workdir=folder,
        limits=spec.limits,
        env=spec.env(folder),
        readable=spec.readable,
        cancel=cancel,
    )


def _start_side(spec: TierSpec, side: str, folder: Path) -> StartedSandbox | contextlib.nullcontext[None]:
    """Start one side's harness before its files exist, where ``spec.early_start``: it imports
    torch meanwhile and waits for them (``run_side --late``; :func:`_finish_side` hands them
    over). A fresh process per side and candidate, as always."""
    folder.mkdir(exist_ok=True)
    if not spec.early_start:
        return contextlib.nullcontext()
    return start_sandboxed(
        [sys.executable, "-m", spec.module, LATE_FILES, side, str(folder / "job.json")],
        workdir=folder,
        limits=spec.limits,
        env=spec.env(folder),
        readable=spec.readable,
    )


def _finish_side(started: StartedSandbox, folder: Path, job: HarnessJob) -> SandboxOutcome:
    """Hand ``job`` and the files of ``folder`` to a side started early, and wait for it."""
    (folder / "job.json").write_text(job.model_dump_json())
    return started.finish()


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


def run_reference(
    spec: TierSpec, root: Path, problem_code: str, job: HarnessJob, cancel: threading.Event | None = None
) -> ReferenceRun | VerifyResult:
    """Run the reference side; its data, or the result that ends verification (its folder is gone
    either way). ``SandboxCancelled`` when ``cancel`` is set while it runs."""
    folder = root / "reference"
    folder.mkdir()
    try:
        (folder / "problem.py").write_text(problem_code)
        outcome = _run_side(spec, "reference", folder, job, cancel)
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
    finally:
        shutil.rmtree(folder, ignore_errors=True)


_NO_REPORT = CandidateReport(verdict="runtime_error")  # what the judge keeps when the candidate left no valid report


def run_candidate(
    spec: TierSpec,
    root: Path,
    candidate: Candidate,
    reference: ReferenceRun,
    job: HarnessJob,
    settings: VerifySettings,
    started: StartedSandbox | None = None,
) -> tuple[VerifyResult, CandidateReport]:
    """Run the candidate side on the reference's inputs (in ``started``, the candidate's harness
    started early, when given); the judged result and its (untrusted, typed) report, an empty one
    where it left none the judge accepts."""
    folder = root / "candidate"
    folder.mkdir(exist_ok=True)  # the judge may have put prebuilt libraries there
    candidate_file = "candidate.cu" if candidate.kind == "cu" else "candidate.py"
    (folder / candidate_file).write_text(candidate.code)
    (folder / INPUTS_FILE).write_bytes(reference.inputs)
    # The candidate gets the inputs, never the seed they were drawn with.
    job = job.model_copy(update={"candidate": candidate_file, "input_seed": None})
    outcome = _run_side(spec, "candidate", folder, job) if started is None else _finish_side(started, folder, job)
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
    if report.verdict != "pass":  # it can only reject itself; "pass" is the judge's word
        return _claimed_failure(spec, report), report
    data = read_untrusted(folder, OUTPUTS_FILE, 2 * _expected_bytes(reference) + (1 << 20))
    if data is None:
        launches = dict(report.launches)
        return _result(spec, Verdict.RUNTIME_ERROR, "the candidate side left no outputs", launches=launches), report
    produced = load_values(data).get("trials")
    result = compare_trials(spec, reference, produced, report, settings)
    if result.verdict is Verdict.PASS and spec.kernels_off:
        result = kernels_did_the_work(spec, folder, reference, settings, result)
    if result.verdict is Verdict.PASS and (second := reference.at_second_size()) is not None:
        result = at_the_second_size(spec, folder, outcome, reference, second, settings, result)
    return result, report


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


def named_sizes(overrides: dict[str, int]) -> str:
    """``DIM=8192, BATCH=16``: the reduced sizes of a run, for a reason."""
    return ", ".join(f"{name}={value}" for name, value in overrides.items()) or "as written"


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
    left in ``name`` (``KERNELS_OFF_FILE``: trial 1 run again with its kernels disabled, launches
    checked and counted, no block runs; ``SECOND_KERNELS_OFF_FILE`` the same at the second size) is
    still within tolerance of the reference: the device code did not compute it (host code, torch
    or numpy did, in any thread). Only outputs that need computing are checked
    (:func:`outputs_to_check`). No file (the run crashed, hung or failed), a mismatch or anything
    unreadable keeps the pass: the kernels mattered."""
    checked = outputs_to_check(reference, settings)
    matched = _matching_without_kernels(folder, reference, checked, settings, name) if checked else []
    if not matched:
        return passed
    outputs = ", ".join(map(str, matched))
    reason = (
        f"run-time fallback: {reference.trial_label(0)}: output {outputs} matches the reference with the "
        "candidate's kernels disabled, so its device code did not compute it"
    )
    return _result(spec, Verdict.STATIC_REJECT, reason, launches=dict(passed.launches))


def outputs_to_check(reference: ReferenceRun, settings: VerifySettings) -> list[int]:
    """Indices of trial 1's expected outputs that only computation reaches, so that matching them
    without the kernels is a fallback: tensors that are not empty, not one value repeated within
    tolerance (zeros or a fill reach that without any kernel) and not within tolerance of the same
    output of another trial (an output that ignores the inputs). An output the judge cannot
    compare is left out: it is the problem's, so it is not checked rather than anyone blamed."""
    return [index for index, _ in enumerate(reference.expected[0]) if _needs_computing(reference, index, settings)]


def _needs_computing(reference: ReferenceRun, index: int, settings: VerifySettings) -> bool:
    """Whether trial 1's expected output ``index`` is one that only computation reaches (see
    :func:`outputs_to_check`)."""
    import torch

    def same(expected: Any, other: Any) -> bool:
        return compare_outputs([expected], [other], settings.tolerance).verdict is Verdict.PASS

    expected = reference.expected[0][index]
    if not isinstance(expected, torch.Tensor) or expected.numel() == 0:
        return False
    others = [trial[index] for trial in reference.expected[1:] if index < len(trial)]
    try:
        if same(expected, expected.reshape(-1)[0].expand_as(expected)):
            return False
        return not any(isinstance(o, torch.Tensor) and o.shape == expected.shape and same(expected, o) for o in others)
    except Exception:  # noqa: BLE001 - a reference output the judge cannot compare: no check, no blame
        return False


def _matching_without_kernels(
    folder: Path, reference: ReferenceRun, checked: list[int], settings: VerifySettings, name: str
) -> list[int]:
    """Which of the ``checked`` outputs the kernels-off trial in ``folder`` left within tolerance of
    trial 1's reference; none when it left nothing the judge can read. The file is the
    candidate's, read as its outputs are; whatever it makes the judge raise keeps the pass (a
    candidate that breaks without its kernels needed them)."""
    expected = reference.expected[0]
    try:
        expected_bytes = sum(t.numel() * t.element_size() for t in _tensor_values(expected))
        data = read_untrusted(folder, name, 2 * expected_bytes + (1 << 20))
        produced = load_values(data).get("trials") if data is not None else None
        if not isinstance(produced, list) or len(produced) != 1:
            return []
        new = produced[0] if isinstance(produced[0], list) else [produced[0]]
        return [
            index
            for index in checked
            if index < len(new)
            and compare_outputs([expected[index]], [new[index]], settings.tolerance).verdict is Verdict.PASS
        ]
    except Exception:  # noqa: BLE001 - the candidate's data: unreadable means its kernels mattered
        return []


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
    result, details = _judge(spec, problem_code, candidate, settings, job, references)
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
        tempfile.TemporaryDirectory(prefix=f"cuset-{spec.tier.value}-") as folder,
        tempfile.TemporaryDirectory(prefix=f"cuset-{spec.tier.value}-build-") as build_folder,
        ThreadPoolExecutor(max_workers=1) as pool,
        # The candidate's harness imports torch while the reference and the build run.
        _start_side(spec, "candidate", Path(folder) / "candidate") as early,
    ):
        root = Path(folder)
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
            candidate_fields["prebuilt"] = _hand_over_cached(cached, root / "candidate")
        elif building is not None:
            building.result()
            candidate_fields["prebuilt"] = _hand_over_builds(spec, Path(build_folder), root / "candidate")
        result, report = run_candidate(
            spec, root, candidate, reference, job.model_copy(update=candidate_fields), settings, early
        )
    # What the reference cost this check: the wait for it (nothing for a run shared with earlier
    # candidates of the batch, the rest of a run started while tier 1 compiled).
    timings = {**report.timings_s, f"{spec.tier.value}_reference": round(waited, 3)}
    update: dict[str, Any] = {"timings_s": {**timings, **result.timings_s}, "built_with": dict(report.built_with)}
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


def _hand_over_builds(spec: TierSpec, build_folder: Path, candidate_folder: Path) -> list[PrebuiltLibrary]:
    """Copy the libraries the build side reported into the candidate's folder (created here);
    their entries for the candidate's job. Anything odd is left out: the candidate side rebuilds.
    A library the judge planned goes into the library cache under the judge's own key."""
    planned = {(library.module, library.digest): library for library in spec.planned}
    candidate_folder.mkdir(exist_ok=True)
    try:
        report = read_report(build_folder, BuildReport)
    except UntrustedFileError:
        return []
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
    return handed


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
