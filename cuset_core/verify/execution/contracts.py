"""What crosses between the judge and the sandboxed sides of the execution tiers (2: CPU runtime, 3: GPU).

The judge hands each side a ``job.json``: a :class:`CpuJob` or :class:`GpuJob` (both
:class:`HarnessJob`), written with ``model_dump_json`` and read back with ``model_validate_json``.
Each side answers with a ``report.json`` (its :class:`Outcome`), which the judge reads as the
type it expects of that side: :class:`ReferenceReport`, :class:`BuildReport` or the candidate's
bounded :class:`CandidateReport`. Both sides also agree here on the files' names and caps, the
trials' input seeds (:func:`with_input_seed`, every second trial wide: :func:`wide_trial`), how a
side stops at its first failure (:class:`Decided`) and how text is cut to size.

The harnesses import this module inside the sandbox, so it imports only the standard library,
pydantic and light parts of ``cuset_core.verify``.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from cuset_core.verify.policy import MAX_VIOLATIONS
from cuset_core.verify.result import SizesRun, Verdict

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
# Behind the device boundary: the kernels-off run again with the host's copies of that trial poisoned,
# and what torch computed on the device during that trial (kernels on), as the device process saw it.
HOST_OFF_SUFFIX = ".host_off"
TORCH_MADE_SUFFIX = ".torch_made"
TORCH_MADE_CAP_BYTES = 128 << 20  # the values the device process keeps of one trial's torch compute


def host_off_file(kernels_off_file: str) -> str:
    """The host-off twin of a kernels-off file (``kernels_off.host_off.safetensors``)."""
    return _twin(kernels_off_file, HOST_OFF_SUFFIX)


def torch_made_file(kernels_off_file: str) -> str:
    """The torch-made twin of a kernels-off file (``kernels_off.torch_made.safetensors``): each
    result of a torch compute operation on the device during the replayed trial, with its name."""
    return _twin(kernels_off_file, TORCH_MADE_SUFFIX)


def _twin(kernels_off_file: str, suffix: str) -> str:
    stem, dot, extension = kernels_off_file.rpartition(".")
    return f"{stem}{suffix}{dot}{extension}"


REPORT_CAP_BYTES = 64 * 1024
REFERENCE_CAP_BYTES = 8 << 30  # the reference is the problem's own code: bounded, not trusted
HEADER_CAP_BYTES = 1 << 20  # safetensors JSON header
LIBRARY_CAP_BYTES = 512 << 20  # an extension the build side compiled
SEED_LIMIT = 2**31  # drawn input seeds lie below it, like the settings' explicit ones
WIDE_SCALE = 4.0  # the wide trials' floating-point inputs are the problem's own times this
LATE_FILES = "--late"  # a harness started before its files (sandbox.start_sandboxed) reads them on stdin


# ---------------------------------------------------------------- the job of a side


class _Contract(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CandidateJob(_Contract):
    """What the reference side hands the candidate side (through the judge) in its report's
    ``details["candidate_job"]``."""

    overrides: dict[str, int] = Field(default_factory=dict, description="tier 2: reduced problem sizes, by name")
    constants: dict[str, int] = Field(default_factory=dict, description="tier 2: the problem's int constants")
    reference_aliases: bool = Field(False, description="the reference returns views of its inputs")
    reference_mutates: bool = Field(False, description="tier 2: the reference's forward writes into its inputs")
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
    device_boundary: bool = Field(
        False, description="candidate side: device memory and kernels in a process of their own (cpu/device/)"
    )
    kernel_filter: str = Field(
        "",
        description="candidate side, behind the device boundary: the seccomp program (BPF, hex) its kernels run"
        " under (cpu/device/containment.py)",
    )
    beyond_bridge_preludes: list[str] = Field(
        default_factory=list,
        description="build side, behind the device boundary: ATen's preludes, tried only when the bridge's "
        "fails, to tell the judge that the bridge lacks what an extension uses (such a build never runs)",
    )
    kernel_registers: dict[str, int] = Field(
        default_factory=dict,
        description="candidate side: registers per thread of each kernel (by name) from tier 1's ptxas report, "
        "which launches are checked against (registers x threads within 65,536)",
    )
    kernel_shared_bytes: dict[str, int] = Field(
        default_factory=dict,
        description="candidate side: static shared memory of each kernel (by name) from tier 1's ptxas report, "
        "checked beside a launch's dynamic shared memory (48 KiB, or 227 KiB with the opt-in)",
    )


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
    original_largest: int | None = Field(
        None,
        description="tier 2, sizes reduced: elements of the largest input, weight or output at the original sizes "
        "(what an index must reach there), if measured",
    )
    sizes_run: list[SizesRun] = Field(
        default_factory=list, description="tier 2: the sizes of the trials drawn, the first size's then the second's"
    )
    timing: TimingStats | None = Field(None, description="tier 3: the eager reference's per-call times")
    compile_timing: TimingStats | None = Field(None, description="tier 3: the reference under torch.compile")
    compile_error: str | None = Field(None, description="tier 3: why there is no torch.compile baseline")


class BuildDetails(_Contract):
    """What the build side compiled beside the reference (its report's ``details``)."""

    built: list[PrebuiltLibrary] = Field(default_factory=list)
    beyond_bridge: str | None = Field(
        None,
        max_length=400,
        description="behind the device boundary: why an extension builds on ATen's preludes only (none runs "
        "there, since their tensors hold their data in the candidate's process)",
    )


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
    # Tier 2 behind the device boundary (cuset_core.verify.policy): device data the run moved to the
    # host once trials began (both policies forbid it), torch compute during its forwards (``kernels``
    # forbids it), and torch's compute operators during forwards by name.
    transfers: list[str] = field(default_factory=list)
    computes: list[str] = field(default_factory=list)
    torch_ops: dict[str, int] = field(default_factory=dict)


class Decided(Exception):
    """Raised inside a harness protocol to stop at the first failure with its outcome."""

    def __init__(self, outcome: Outcome):
        super().__init__(outcome.reason)
        self.outcome = outcome


def tail(text: str) -> str:
    """The last ``LOG_CHARS`` characters of a log: where the explaining error usually is."""
    return text[-LOG_CHARS:]


def clip(text: Any, limit: int = REASON_CHARS) -> str:
    """``text`` as a string of at most ``limit`` characters (an ellipsis marks a cut)."""
    text = text if isinstance(text, str) else str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def named_sizes(overrides: dict[str, int]) -> str:
    """``DIM=8192, BATCH=16``: the reduced sizes of a run, for a reason."""
    return ", ".join(f"{name}={value}" for name, value in overrides.items()) or "as written"


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
    transfers: list[Annotated[str, AfterValidator(lambda text: clip(text, 300))]] = Field(
        default_factory=list, max_length=MAX_VIOLATIONS
    )
    computes: list[Annotated[str, AfterValidator(lambda text: clip(text, 300))]] = Field(
        default_factory=list, max_length=MAX_VIOLATIONS
    )
    torch_ops: dict[_ShortName, Annotated[int, Field(ge=0, le=2**53)]] = Field(default_factory=dict, max_length=256)
