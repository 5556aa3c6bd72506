"""Tier 2: run a candidate's CUDA kernels on the CPU with the CuSeT CUDA-on-CPU runtime.

The runtime (``runtime/cuda_cpu.h``) runs each CUDA thread as a user-space fiber and the
blocks of a grid in turn; ``rewrite`` turns launches and shared-memory declarations into
runtime calls; ``build`` compiles the extension with g++ against the CPU torch wheel starting from
cached precompiled preludes; ``harness`` runs reference and candidate in the sandbox.
It is a filter, not an oracle: real concurrency, races and timing are not modelled, and
features the runtime cannot model are reported as ``unsupported`` with the feature named.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from cuset_core.verify.candidate import Candidate
from cuset_core.verify.compile.ptx import confirmed_feature
from cuset_core.verify.cpu.build import (
    BuildError,
    Toolchain,
    extension_module_name,
    kernel_short_name,
    prelude_named,
    prepare_preludes,
    runtime_library,
    toolchain,
    translation_unit,
    unit_digest,
)
from cuset_core.verify.cpu.claims import unsupported_confirmer
from cuset_core.verify.cpu.device.containment import kernel_filter
from cuset_core.verify.cpu.rewrite import unsupported_feature
from cuset_core.verify.cpu.sizes import hardcoded_sizes, scaled_limits, size_bearing_code
from cuset_core.verify.execution.contracts import (
    CpuJob,
    PrebuildExtension,
    ReferenceDetails,
    clip,
    named_sizes,
    tail,
)
from cuset_core.verify.execution.judge import harness_env, judge
from cuset_core.verify.execution.library_cache import LibraryCache, library_key
from cuset_core.verify.execution.reference_pool import ReferencePool
from cuset_core.verify.execution.tier_run import PlannedLibrary, TierSpec, WarmSides
from cuset_core.verify.result import Diagnostic, KernelResources, Tier, Verdict, VerifyResult
from cuset_core.verify.sandbox import SandboxCancelled
from cuset_core.verify.settings import SandboxLimits, VerifySettings
from cuset_core.verify.source.narrow_index import narrow_index
from cuset_core.verify.source.preprocessor import joined_code

HARNESS_MODULE = "cuset_core.verify.cpu.harness"
# Failures that reduced sizes can cause in a correct kernel that hard-codes the original ones.
_SIZE_SENSITIVE = {Verdict.RUNTIME_ERROR, Verdict.VALUE_MISMATCH, Verdict.SHAPE_MISMATCH}
# A candidate that timed out at the reduced sizes runs once more at this many times fewer elements,
# with this share of the time limits (at least SMALLER_MIN_S seconds): tier 2 runs every GPU thread
# as a fiber, so a kernel that launches a block per output element (conv kernels often do) is
# slow here in proportion to its data. A failure there is the verdict; a pass there only names
# the likely cause in the timeout's reason (see _at_smaller_sizes).
SMALLER_BY = 64
SMALLER_TIME_SHARE = 0.25
SMALLER_MIN_S = 10

__all__ = ["run_cpu_tier"]


def _result(verdict: Verdict, reason: str, **fields: Any) -> VerifyResult:
    return VerifyResult(verdict=verdict, tier=Tier.CPU, tiers_run=[Tier.CPU], reason=reason, **fields)


def _prebuild(candidate: Candidate) -> list[PrebuildExtension]:
    """The extensions the build side compiles before the candidate runs: a ``.cu`` candidate's
    source, or a Python candidate's statically known ``load_inline`` calls, each sources once (an
    extension's library is named by its sources)."""
    if candidate.kind == "cu":
        return [PrebuildExtension(cuda=candidate.code, cpp="", functions=None)]
    distinct = {
        extension_module_name(ext.cuda, ext.cpp, ext.functions): PrebuildExtension(
            cuda=ext.cuda, cpp=ext.cpp, functions=list(ext.functions or []) or None
        )
        for ext in candidate.sources.extensions
    }
    return list(distinct.values())


def _planned(
    prebuild: list[PrebuildExtension], preludes: tuple[Path, ...], device_boundary: bool
) -> tuple[PlannedLibrary, ...]:
    """The libraries the build side will compile, keyed on the trusted side (see library_cache)."""
    planned = []
    for ext in prebuild:
        module = extension_module_name(ext.cuda, ext.cpp, ext.functions)
        digest = unit_digest(translation_unit(module, ext.cuda, ext.cpp, ext.functions, device_boundary))
        planned.append(PlannedLibrary(module, digest, library_key(digest, map(str, preludes))))
    return tuple(planned)


def usable_preludes(preludes: tuple[Path, ...], settings: VerifySettings) -> tuple[Path, ...]:
    """The preludes a build under ``settings`` tries, in order: no torch bridge unless enabled, and
    only the bridge behind the device boundary (an ATen tensor holds its data in the process that
    made it, so an extension built on ATen cannot hand device memory to the device process)."""
    if settings.device_boundary:
        return tuple(prelude for prelude in preludes if prelude_named(prelude).bridge)
    return tuple(prelude for prelude in preludes if settings.torch_bridge or not prelude_named(prelude).bridge)


def harness_environment(folder: Path) -> dict[str, str]:
    """The environment of every tier-2 side: one torch thread (the runtime runs fibers on one)."""
    return harness_env(OMP_NUM_THREADS="1")


def cpu_job(
    kind: str,
    settings: VerifySettings,
    preludes: tuple[Path, ...],
    chain: Toolchain,
    prebuild: list[PrebuildExtension] | None = None,
) -> CpuJob:
    """Tier 2's ``job.json`` for a candidate of ``kind`` under ``settings``, with the toolchain
    and the extensions to compile beside the reference (none for a reference-only check)."""
    return CpuJob(
        kind=kind,
        seeds=settings.seeds,
        input_seed=settings.input_seed,
        reduce_sizes=settings.reduce_sizes,
        max_elements=settings.max_elements,
        second_max_elements=max(1, settings.max_elements // 2) if settings.second_size else None,
        preludes=[str(prelude) for prelude in usable_preludes(preludes, settings)],
        runtime_library=str(runtime_library(preludes)),
        include_dirs=list(chain.include_dirs),
        library_dirs=list(chain.library_dirs),
        prebuild=prebuild or [],
        device_boundary=settings.device_boundary,
        kernel_filter=kernel_filter().hex() if settings.device_boundary else "",
        beyond_bridge_preludes=[
            str(prelude) for prelude in preludes if settings.device_boundary and not prelude_named(prelude).bridge
        ],
    )


# How long the candidate side waits for tier 1's ptxas report when tier 1 runs beside tier 2.
TIER_1_WAIT_S = 600.0


class Tier1Resources:
    """Tier 1's per-kernel resources as they become known: tier 2 runs beside tier 1 and needs them
    only when its candidate starts (after the reference and the build)."""

    def __init__(self, cancel: threading.Event | None = None) -> None:
        self._ready = threading.Event()
        self._cancel = cancel
        self._resources: list[KernelResources] = []

    def set(self, resources: list[KernelResources]) -> None:
        """Tier 1's report; only the first call counts."""
        if not self._ready.is_set():
            self._resources = list(resources)
            self._ready.set()

    def get(self) -> list[KernelResources]:
        """Tier 1's report, once it is there (none when tier 1 reported none, or the check was cancelled)."""
        deadline = time.monotonic() + TIER_1_WAIT_S
        while not self._ready.wait(0.05):
            if (self._cancel is not None and self._cancel.is_set()) or time.monotonic() > deadline:
                return []
        return self._resources


def kernel_limit_fields(resources: list[KernelResources]) -> dict[str, dict[str, int]]:
    """The candidate job's fields for tier 1's report: registers and static shared memory by the
    name launches use (instantiations of one template: the largest figures)."""
    registers: dict[str, int] = {}
    shared: dict[str, int] = {}
    for kernel in resources:
        name = kernel_short_name(kernel.kernel)
        if not name:
            continue
        registers[name] = max(registers.get(name, 0), kernel.registers)
        shared[name] = max(shared.get(name, 0), kernel.shared_bytes)
    return {"kernel_registers": registers, "kernel_shared_bytes": shared}


def tier_limits(settings: VerifySettings) -> SandboxLimits:
    """The sandbox limits of tier 2's sides: the settings', with half as much time again when each
    side also runs the second size (its trials hold half the elements of the first size's)."""
    limits = settings.limits
    if not settings.second_size:
        return limits
    return limits.model_copy(update={"wall_s": limits.wall_s * 1.5, "cpu_s": math.ceil(limits.cpu_s * 1.5)})


def reference_spec(settings: VerifySettings, preludes: tuple[Path, ...]) -> TierSpec:
    """Tier 2's spec for running a problem's reference side alone (no candidate to build or judge)."""
    return TierSpec(Tier.CPU, HARNESS_MODULE, tier_limits(settings), harness_environment, readable=preludes)


def unsupported_before_running(candidate: Candidate, settings: VerifySettings) -> str | None:
    """A feature tier 2 cannot run that the compiled program holds (``ptx.confirmed_feature``):
    the text scan of the sources (``rewrite.unsupported_feature``) says where to look, tier 1's
    compiler decides. Identifiers, comments, constants and dead code never make it ``unsupported``."""
    sources = candidate.sources
    hinted = unsupported_feature(sources.cuda) or next(
        filter(None, (unsupported_feature(ext.cpp, cuda=False) for ext in sources.extensions)), None
    )
    return confirmed_feature(candidate, settings, hinted)


def run_cpu_tier(
    problem_code: str,
    candidate: Candidate,
    settings: VerifySettings,
    library_cache: LibraryCache | None = None,
    references: ReferencePool | None = None,
    cancel: threading.Event | None = None,
    warm: WarmSides | None = None,
    tier_1: Callable[[], list[KernelResources]] | None = None,
) -> VerifyResult:
    """Tier 2 for one candidate: build with g++, run on the CPU runtime, compare with the reference.

    The candidate runs at the reduced sizes and, in the same process, at a second, smaller
    reduction (``VerifySettings.second_size``; :func:`judge.at_the_second_size`). A failure at
    reduced sizes is checked again at the original sizes when they fit; when they do not and the
    candidate hard-codes the original sizes, the verdict is ``unsupported``.
    With ``library_cache``, extensions compiled before from the same sources are not compiled again;
    with ``references``, the reference runs of the batch it serves are shared; with ``warm``, its
    sides come ready-made from the owner's :class:`WarmSides`. Setting ``cancel`` kills its sides
    (``SandboxCancelled``). ``tier_1`` gives tier 1's ptxas report of the candidate's kernels (waiting
    for it when tier 1 runs beside this tier): launches are checked against its registers and static
    shared memory as a GPU checks them.
    """
    sources = candidate.sources
    feature = unsupported_before_running(candidate, settings)
    if feature:
        return _result(Verdict.UNSUPPORTED, f"uses {feature}", unsupported_feature=feature)
    # Tier 2 compiles host and device code in one pass with __CUDA_ARCH__ defined, so a test of it
    # runs the device branch in host code too: a program a GPU build never runs (a comment or
    # string naming the macro tests nothing).
    if "__CUDA_ARCH__" in joined_code(sources.cuda).text:
        feature = "__CUDA_ARCH__"
        return _result(
            Verdict.UNSUPPORTED,
            "tests __CUDA_ARCH__: tier 2 compiles host and device code in one pass, so it cannot run the branch "
            "a GPU build's host pass takes",
            unsupported_feature=feature,
        )
    clock = time.perf_counter()
    try:
        preludes = prepare_preludes()
    except BuildError as exc:
        return _result(
            Verdict.INTERNAL_ERROR, "the CPU runtime header does not build on this machine", log=tail(str(exc))
        )
    pch_s = time.perf_counter() - clock
    if cancel is not None and cancel.is_set():  # tier 1 rejected the candidate meanwhile
        raise SandboxCancelled("tier 2 was cancelled before it started")
    chain = toolchain()
    prebuild = _prebuild(candidate)
    spec = TierSpec(
        Tier.CPU,
        HARNESS_MODULE,
        tier_limits(settings),
        harness_environment,
        build_side=bool(prebuild),
        planned=_planned(prebuild, usable_preludes(preludes, settings), settings.device_boundary),
        library_cache=library_cache,
        readable=preludes,
        confirm_unsupported=unsupported_confirmer(candidate, chain),
        kernels_off=True,
        early_start=True,
        cancel=cancel,
        warm=warm,
        late_candidate_fields=(lambda: kernel_limit_fields(tier_1())) if tier_1 is not None else None,
    )
    job = cpu_job(candidate.kind, settings, preludes, chain, prebuild)
    result, details = judge(spec, problem_code, candidate, settings, job, references)
    if result.verdict is Verdict.PASS and (narrow := narrow_index_refusal(candidate, details)) is not None:
        result = narrow.model_copy(update={"timings_s": result.timings_s, "sizes_run": result.sizes_run})
    elif result.verdict in _SIZE_SENSITIVE and details.candidate_job.overrides:
        result = _at_original_sizes(spec, problem_code, candidate, settings, job, result, details, references)
    elif result.verdict is Verdict.TIMEOUT and details.candidate_job.overrides and job.max_elements >= SMALLER_BY:
        result = _at_smaller_sizes(spec, problem_code, candidate, settings, job, result, references)
    if pch_s > 1.0:
        result.timings_s["pch"] = pch_s
    return result


def narrow_index_refusal(candidate: Candidate, details: ReferenceDetails) -> VerifyResult | None:
    """``static_reject`` with its line for index arithmetic in an integer type narrower than the
    problem's original sizes need (``narrow_index``), when tier 2 ran reduced sizes only: right at
    those, it would wrap at the original sizes a GPU runs. None when the original sizes ran, their
    largest tensor was not measured, or every index fits."""
    needed = details.original_largest
    if not details.candidate_job.overrides or needed is None:
        return None
    for ext in candidate.sources.extensions:
        found = narrow_index(ext.cuda, needed)
        if found is None:
            continue
        offset = ext.cuda_map.to_answer(found.offset)
        line = None if offset is None else candidate.text.count("\n", 0, offset) + 1
        where = f"line {line}: " if line is not None else ""
        reason = (
            f"{where}{found.type} {found.name} holds at most {found.largest:,}, but at the problem's original sizes an "
            f"index reaches {needed:,} elements (its largest tensor); tier 2 ran only the reduced sizes "
            f"{named_sizes(details.candidate_job.overrides)}, where it does not wrap, and a GPU runs the original ones"
        )
        diagnostic = Diagnostic(severity="error", message=reason, line=line)
        return _result(Verdict.STATIC_REJECT, clip(reason), diagnostics=[diagnostic])
    return None


def _rerun_spec(spec: TierSpec, limits: SandboxLimits) -> TierSpec:
    """``spec`` for a second check of the candidate under other ``limits``. Not on warm sides: they
    are started under the check's usual limits, and sides started ahead for these rarer ones
    would wait for checks that seldom come."""
    return replace(spec, limits=limits, warm=None)


def _at_smaller_sizes(
    spec: TierSpec,
    problem_code: str,
    candidate: Candidate,
    settings: VerifySettings,
    job: CpuJob,
    timed_out: VerifyResult,
    references: ReferencePool | None = None,
) -> VerifyResult:
    """The verdict for a candidate that timed out at the reduced sizes, after its check again,
    second size included, at ``SMALLER_BY`` times fewer elements under a share of the time limits.

    A failure there (a wrong value, a crash, another timeout) is the verdict, with both runs in
    its reason. A pass there leaves the timeout standing, its reason saying that the candidate
    passes at the smaller sizes: nothing the judge can trust tells a kernel that is slow on
    fibers at the reduced sizes from one that never ends above some size and is right below it
    (``if (n > 100000) for (;;);``), which a GPU would hang on at the real sizes."""
    smaller = job.max_elements // SMALLER_BY
    retry = job.model_copy(
        update={
            "max_elements": smaller,
            "second_max_elements": max(1, smaller // 2) if job.second_max_elements is not None else None,
        }
    )
    limits = spec.limits.model_copy(
        update={
            "wall_s": max(SMALLER_MIN_S, spec.limits.wall_s * SMALLER_TIME_SHARE),
            "cpu_s": max(SMALLER_MIN_S, math.ceil(spec.limits.cpu_s * SMALLER_TIME_SHARE)),
        }
    )
    result, details = judge(_rerun_spec(spec, limits), problem_code, candidate, settings, retry, references)
    sizes = named_sizes(details.candidate_job.overrides) if details.candidate_job.overrides else f"{smaller} elements"
    timings = {**timed_out.timings_s, **{f"smaller_{k}": v for k, v in result.timings_s.items()}}
    sizes_run = [*timed_out.sizes_run, *result.sizes_run]
    if result.verdict is Verdict.PASS:
        reason = (
            f"{timed_out.reason}; at the smaller sizes {sizes} it passes ({result.reason}), but tier 2 cannot tell a "
            "kernel that is slow on CPU fibers from one that never ends at larger sizes, so the timeout stands"
        )
        return timed_out.model_copy(update={"reason": clip(reason), "timings_s": timings, "sizes_run": sizes_run})
    reason = f"at the smaller sizes {sizes}: {result.reason}; it timed out at the reduced sizes ({timed_out.reason})"
    return result.model_copy(update={"reason": clip(reason), "timings_s": timings, "sizes_run": sizes_run})


def _at_original_sizes(
    spec: TierSpec,
    problem_code: str,
    candidate: Candidate,
    settings: VerifySettings,
    job: CpuJob,
    reduced: VerifyResult,
    details: ReferenceDetails,
    references: ReferencePool | None = None,
) -> VerifyResult:
    """The verdict for a candidate that failed at reduced sizes: the original sizes decide when
    they fit; else a candidate that hard-codes them is ``unsupported`` (never blamed)."""
    handed = details.candidate_job
    at_reduced = f"at reduced sizes: {reduced.verdict.value}: {reduced.reason}"
    if details.original_fits:
        at_original = job.model_copy(update={"reduce_sizes": False, "second_max_elements": None})
        limits = scaled_limits(spec.limits, details.original_elements, settings.max_elements)
        result, _ = judge(_rerun_spec(spec, limits), problem_code, candidate, settings, at_original, references)
        timings = {**result.timings_s, **{f"reduced_{k}": v for k, v in reduced.timings_s.items()}}
        return result.model_copy(
            update={
                "reason": clip(f"at the original sizes: {result.reason}; {at_reduced}"),
                "timings_s": timings,
                "sizes_run": [*reduced.sizes_run, *result.sizes_run],
            }
        )
    sources = [*(ext.cuda for ext in candidate.sources.extensions), *(ext.cpp for ext in candidate.sources.extensions)]
    code = size_bearing_code(candidate.code, candidate.kind, sources)
    hardcoded = hardcoded_sizes(code, handed.constants, handed.overrides)
    if not hardcoded:
        return reduced
    return reduced.model_copy(
        update={
            "verdict": Verdict.UNSUPPORTED,
            "unsupported_feature": "hard-coded problem sizes",
            "reason": clip(
                f"the candidate hard-codes the problem's sizes ({', '.join(hardcoded)}) and the original "
                f"sizes are too large for tier 2; {at_reduced}"
            ),
        }
    )
