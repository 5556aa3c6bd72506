"""What the judge knows of a tier and keeps of its reference run, shared with the reference pool.

How a tier runs its sides (:class:`TierSpec`, with the :class:`PlannedLibrary` entries its build
side compiles), and what the judge kept of the reference side (:class:`ReferenceRun`): the
candidate's inputs, the expected outputs and how each trial is compared. A
:class:`~cuset_core.verify.reference_pool.ReferencePool` keeps these runs for a batch; the judge
(:mod:`cuset_core.verify.judge`) makes and uses them.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cuset_core.verify.contracts import WIDE_SCALE, ReferenceReport
from cuset_core.verify.library_cache import LibraryCache
from cuset_core.verify.result import Tier
from cuset_core.verify.settings import SandboxLimits, VerifySettings
from cuset_core.verify.warm_sides import WarmSides


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
    # Set by whoever started the check when its verdict no longer needs this tier (tier 1, run at
    # the same time, rejected the candidate): every side still running is killed and the check
    # raises ``SandboxCancelled``.
    cancel: threading.Event | None = None
    # Sides started ahead of this check by whoever runs checks one after another (early_start only).
    warm: WarmSides | None = None
    # Fields of the candidate side's job known only late (tier 1's ptxas figures, when tier 1 runs
    # beside this tier): called once the reference and the build are done, before the candidate runs.
    late_candidate_fields: Callable[[], dict[str, Any]] | None = None


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
