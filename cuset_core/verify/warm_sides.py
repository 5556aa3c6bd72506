"""Harness processes started before the checks that will use them.

Each side of a tier-2 check spends about a second importing torch before it can run anything,
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
import queue
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from cuset_core.verify.contracts import LATE_FILES
from cuset_core.verify.sandbox import SandboxOutcome, StartedSandbox, start_sandboxed

if TYPE_CHECKING:
    from cuset_core.verify.tier_run import TierSpec

log = logging.getLogger(__name__)


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
