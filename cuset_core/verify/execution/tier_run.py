"""How a tier runs its two sandboxed sides: what the judge knows of the tier, the sides started
ahead of a check, and what the judge keeps of the reference run.

How a tier runs its sides (:class:`TierSpec`, with the :class:`PlannedLibrary` entries its build
side compiles), and what the judge kept of the reference side (:class:`ReferenceRun`): the
candidate's inputs, the expected outputs and how each trial is compared. A
:class:`~cuset_core.verify.execution.reference_pool.ReferencePool` keeps these runs for a batch; the judge
(:mod:`cuset_core.verify.execution.judge`) makes and uses them.

Sides started ahead of the checks that will use them (:class:`WarmSides`): each side of a tier-2 check spends about a second importing torch before it can run anything,
and in a check started cold those imports compete for the cores with tier 1's nvcc and the build
side's g++. An owner that runs checks one after another (an eval, a self-training round, a
worker) holds a :class:`WarmSides`: a check takes each side it needs ready-made (the reference's,
the candidate's), and their replacements start once the check is over (started beside it, their
imports would slow the check down as much as they save the next one). So a check that follows
another at once gains little on a busy machine; one that comes after a pause (a worker's next
request, the next problem of an eval once its answers are generated) starts with its sides ready.

Why this is safe: a warm side is the process the check would start itself (same harness module,
limits, readable folders and environment; its wall-clock limit counts from the moment it gets its
files, as for any side started ahead of them), and all it has run is the harness's own start-up:
it imports torch and waits for its files on stdin (``harness_side.run_side --late``). It serves one
side of one check and is never reused. Nothing of one check reaches another: every side has its
own tmpfs work folder, and its files arrive with the hand-over. A side that ended while it waited
is dropped, never handed out.
"""

from __future__ import annotations

import logging
import math
import queue
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cuset_core.verify.execution.contracts import LATE_FILES, WIDE_SCALE, ReferenceReport
from cuset_core.verify.execution.library_cache import LibraryCache
from cuset_core.verify.result import Tier
from cuset_core.verify.sandbox import SandboxOutcome, StartedSandbox, start_sandboxed
from cuset_core.verify.settings import SandboxLimits, VerifySettings

log = logging.getLogger(__name__)


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


class StartedSide:
    """One side's harness, started ahead of its files in a work folder of its own; leaving a
    ``with`` block kills it unless it was finished, and removes the folder."""

    def __init__(self, folder: Path, sandbox: StartedSandbox) -> None:
        self.folder = folder
        self._sandbox = sandbox

    def alive(self) -> bool:
        """Whether the harness still waits for its files."""
        return self._sandbox.alive()

    def finish(self, cancel: threading.Event | None = None) -> SandboxOutcome:
        """Hand over what the folder holds now and wait for the side (``StartedSandbox.finish``)."""
        return self._sandbox.finish(cancel)

    def __enter__(self) -> StartedSide:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._sandbox.abandon()
        shutil.rmtree(self.folder, ignore_errors=True)


def start_side(spec: TierSpec, side: str, folder: Path) -> StartedSide:
    """Start ``side`` (``reference`` or ``candidate``) of ``spec``'s harness in ``folder``, ahead of
    its files: it imports its libraries and waits for them on stdin."""
    folder.mkdir(exist_ok=True)
    sandbox = start_sandboxed(
        [sys.executable, "-m", spec.module, LATE_FILES, side, str(folder / "job.json")],
        workdir=folder,
        limits=spec.limits,
        env=spec.env(folder),
        readable=spec.readable,
    )
    return StartedSide(folder, sandbox)


def side_kind(spec: TierSpec, side: str) -> tuple[str, ...]:
    """What a side's process is started with, besides its folder: sides agreeing on it are
    interchangeable."""
    return (
        spec.tier.value,
        spec.module,
        side,
        spec.limits.model_dump_json(),
        *map(str, spec.readable),
        repr(sorted(spec.env(Path()).items())),
    )


class WarmSides:
    """Sides started ahead of the checks that take them: at most ``per_side`` waiting for each
    kind of side (tier, harness, limits, ...: :func:`side_kind`) and ``2 * per_side`` in all.
    Thread-safe; a context manager that kills whatever still waits when it closes.

    ``per_side`` is how many checks the owner runs at once (an eval's verifying workers): more
    would only hold memory (a quarter of a GiB per side) that no check takes. The sides are
    started by a thread of the pool's own: a sandbox dies with the thread that started it
    (``bwrap --die-with-parent``), and a check's threads end with the check."""

    def __init__(self, per_side: int = 1) -> None:
        self.per_side = per_side
        self.taken = 0  # sides handed out ready, for the owner's figures
        self._waiting: list[tuple[tuple[str, ...], StartedSide]] = []  # (kind, side), oldest first
        self._owed: dict[tuple[str, ...], tuple[TierSpec, str, int]] = {}  # kind -> (spec, side, count)
        self._lock = threading.Lock()
        self._closed = False
        self._requests: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self._starter = threading.Thread(target=self._start_owed, name="cuset-warm-sides", daemon=True)
        self._starter.start()

    def take(self, spec: TierSpec, side: str) -> StartedSide | None:
        """A warm ``side`` for ``spec``, now the caller's (None when none is ready: the caller
        starts its own); either way a replacement is owed, started after the next :meth:`refill`."""
        kind = side_kind(spec, side)
        with self._lock:
            owed = self._owed.get(kind, (spec, side, 0))[2]
            self._owed[kind] = (spec, side, min(self.per_side, owed + 1))
            ended = [entry for entry in self._waiting if entry[0] == kind and not entry[1].alive()]
            found = next((entry for entry in self._waiting if entry[0] == kind and entry not in ended), None)
            for entry in [*ended, *([found] if found else [])]:
                self._waiting.remove(entry)
            if found is not None:
                self.taken += 1
        for _, dead in ended:
            dead.close()
        return found[1] if found is not None else None

    def refill(self) -> None:
        """Have the sides owed since the last refill started (a check calls it when it is over).
        Returns at once."""
        self._requests.put(True)

    def _start_owed(self) -> None:
        while self._requests.get():
            with self._lock:
                if self._closed:
                    return
                owed, self._owed = self._owed, {}
                counts = {kind: sum(entry[0] == kind for entry in self._waiting) for kind in owed}
            for kind, (spec, side, count) in owed.items():
                for _ in range(max(0, min(count, self.per_side - counts[kind]))):
                    self._start_one(kind, spec, side)

    def _start_one(self, kind: tuple[str, ...], spec: TierSpec, side: str) -> None:
        folder = Path(tempfile.mkdtemp())  # named as any program's: the candidate sees its folder
        try:
            ready = start_side(spec, side, folder)
        except Exception:  # noqa: BLE001 - a side not started ahead is started by its check
            log.warning("could not start a %s side ahead of its check", side, exc_info=True)
            shutil.rmtree(folder, ignore_errors=True)
            return
        with self._lock:
            if self._closed:
                dropped = [ready]
            else:
                self._waiting.append((kind, ready))
                # At most the reference's and the candidate's side for each check at once, the
                # oldest dropped first: sides of a kind that checks stopped asking for (other
                # settings) must not hold memory for good.
                excess = max(0, len(self._waiting) - 2 * self.per_side)
                dropped = [side for _, side in self._waiting[:excess]]
                del self._waiting[:excess]
        for unwanted in dropped:
            unwanted.close()

    def waiting(self) -> list[StartedSide]:
        """The started sides that wait for a check, oldest first."""
        with self._lock:
            return [side for _, side in self._waiting]

    def close(self) -> None:
        """Kill every side still waiting; nothing more is started."""
        with self._lock:
            self._closed = True
            sides = [side for _, side in self._waiting]
            self._waiting.clear()
        self._requests.put(False)
        self._starter.join()
        for side in sides:
            side.close()

    def __enter__(self) -> WarmSides:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
