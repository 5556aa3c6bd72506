"""Progress lines (JSONL to a file and stdout), per-step objective metrics, and cancellation.

Line types: ``progress`` (one per logged step), ``eval``, ``event`` (level info/warning/error),
``checkpoint``, ``done`` and ``error``. Every line has ``type`` and ``time`` (Unix seconds).
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import TextIO

import torch
import torch.distributed as dist
from transformers import TrainerCallback

from cuset_core.models import write_base_spec
from cuset_core.objectives.state import ObjectiveState
from cuset_core.training.progress_lines import (
    OBJECTIVE_METRICS,
    CheckpointLine,
    ErrorLine,
    EvalLine,
    EventLevel,
    EventLine,
    ProgressLine,
    StepLine,
)

CANCEL_FILE = "CANCEL"
OBJECTIVE_STATE_FILE = "objective_state.json"


def is_main_process() -> bool:
    """Whether this process is rank 0 of a (possibly) distributed launch; decided from the
    launcher's environment, so it works before any process group exists."""
    return int(os.environ.get("RANK", "0")) == 0


def checkpoint_dir(args, state) -> Path:
    """The folder the Trainer saves the checkpoint of the current step in."""
    return Path(args.output_dir) / f"checkpoint-{state.global_step}"


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


class ProgressWriter:
    """Appends JSON lines to ``path`` and echoes them to ``stream``; silent on ranks other than 0."""

    def __init__(self, path: Path | None, stream: TextIO | None = None, enabled: bool | None = None):
        self.path = path
        self.stream = stream if stream is not None else sys.stdout
        self.enabled = is_main_process() if enabled is None else enabled
        if self.enabled and path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record: ProgressLine) -> None:
        """Write one line; non-finite floats become null so the line stays valid JSON."""
        if not self.enabled:
            return
        line = record.model_dump_json()
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(line + "\n")
        self.stream.write(line + "\n")
        self.stream.flush()

    def event(self, message: str, level: EventLevel = "info", topic: str | None = None) -> None:
        """A line for humans; ``topic`` lets a supervisor tell kinds apart (``"data"``: what loading
        a data file found, which the service has already reported when it validated the file)."""
        self.write(EventLine(level=level, message=message, topic=topic))

    def error(self, message: str) -> None:
        self.write(ErrorLine(message=message))


class MetricStash:
    """Objective metrics of the micro-batches since the last log, reduced over data-parallel ranks.

    Metrics are averaged over micro-batches, except names ending in ``_max`` (maximum). The
    trainer adds; the progress callback drains on every rank (the reduction is a collective).
    """

    def __init__(self) -> None:
        self._sums: dict[str, float] = {}
        self._maxima: dict[str, float] = {}
        self._count = 0
        self._device: torch.device | None = None

    def add(self, metrics: dict[str, float | torch.Tensor]) -> None:
        for name, value in metrics.items():
            if isinstance(value, torch.Tensor):
                self._device = value.device
                value = value.detach().float().item()
            if name.endswith("_max"):
                self._maxima[name] = max(self._maxima.get(name, -math.inf), float(value))
            else:
                self._sums[name] = self._sums.get(name, 0.0) + float(value)
        self._count += 1

    def drain(self) -> dict[str, float]:
        """The reduced metrics since the last drain, and a reset. Every rank must call it."""
        names_sum, names_max = sorted(self._sums), sorted(self._maxima)
        sums = torch.tensor([self._sums[n] for n in names_sum] + [float(self._count)], dtype=torch.float64)
        maxima = torch.tensor([self._maxima[n] for n in names_max], dtype=torch.float64)
        if _distributed():
            device = self._device or torch.device("cpu")
            sums, maxima = sums.to(device), maxima.to(device)
            dist.all_reduce(sums, op=dist.ReduceOp.SUM)
            if maxima.numel():
                dist.all_reduce(maxima, op=dist.ReduceOp.MAX)
            sums, maxima = sums.cpu(), maxima.cpu()
        count = max(sums[-1].item(), 1.0)
        reduced = {n: sums[i].item() / count for i, n in enumerate(names_sum)}
        reduced.update({n: maxima[i].item() for i, n in enumerate(names_max)})
        self._sums, self._maxima, self._count = {}, {}, 0
        return reduced


class ProgressCallback(TrainerCallback):
    """Writes a ``progress`` line per log (with the stash's objective metrics, tokens/s and ETA),
    ``eval`` lines, and a ``checkpoint`` line per save."""

    def __init__(self, writer: ProgressWriter, stash: MetricStash):
        self.writer = writer
        self.stash = stash
        self._start_time = time.monotonic()
        self._start_step = 0
        self._start_tokens = 0

    def on_train_begin(self, args, state, control, **kwargs):
        self._start_time = time.monotonic()
        self._start_step = state.global_step
        self._start_tokens = state.num_input_tokens_seen
        self.writer.event(f"training from step {state.global_step} to {state.max_steps}")

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if "loss" not in logs:
            return
        metrics = self.stash.drain()
        elapsed = max(time.monotonic() - self._start_time, 1e-9)
        steps_done = state.global_step - self._start_step
        tokens = state.num_input_tokens_seen
        eta = (state.max_steps - state.global_step) * elapsed / steps_done if steps_done > 0 else None
        self.writer.write(
            StepLine(
                step=state.global_step,
                max_steps=state.max_steps,
                epoch=round(state.epoch or 0.0, 4),
                loss=logs["loss"],
                **{name: metrics.get(name) for name in OBJECTIVE_METRICS},
                learning_rate=logs.get("learning_rate"),
                grad_norm=logs.get("grad_norm"),
                tokens_per_s=round((tokens - self._start_tokens) / elapsed, 2),
                trained_tokens=int(tokens),
                eta_s=round(eta, 1) if eta is not None else None,
            )
        )

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if metrics and "eval_loss" in metrics:
            self.writer.write(EvalLine(step=state.global_step, eval_loss=metrics["eval_loss"]))

    def on_save(self, args, state, control, **kwargs):
        path = checkpoint_dir(args, state)
        self.writer.write(CheckpointLine(step=state.global_step, path=str(path)))


class BaseSpecCallback(TrainerCallback):
    """Records the base model and prompt style in every checkpoint, as the run does beside its
    final adapter, so a checkpoint is a model too: served, evaluated or tuned further by its name."""

    def __init__(self, base_spec: str, prompt_style: str):
        self.base_spec, self.prompt_style = base_spec, prompt_style

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            write_base_spec(checkpoint_dir(args, state), self.base_spec, self.prompt_style)


class ObjectiveStateCallback(TrainerCallback):
    """Saves the objective's EMAs (tau_lo, weight normaliser) with every checkpoint, so a resumed
    run continues them instead of starting over; ``load`` reads them back."""

    def __init__(self, state: ObjectiveState):
        self.state = state

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            path = checkpoint_dir(args, state) / OBJECTIVE_STATE_FILE
            path.write_text(json.dumps(self.state.state_dict()))

    def load(self, checkpoint: Path) -> bool:
        """Restore the EMAs saved in ``checkpoint``; False when it holds none (an older run)."""
        path = Path(checkpoint) / OBJECTIVE_STATE_FILE
        if not path.is_file():
            return False
        self.state.load_state_dict(json.loads(path.read_text()))
        return True


class StepInterrupted(BaseException):
    """A stop (SIGTERM) in the middle of an optimizer step: the weights and the optimizer are still
    those of the last completed step, only that step's gradients are lost. A BaseException, as
    KeyboardInterrupt is: raised wherever the run is, nothing on the way may take it for an error."""


class SigtermCallback(TrainerCallback):
    """Cooperative cancellation: SIGTERM, or a ``CANCEL`` file in the output folder, stops the run
    with a checkpoint. ``cancelled`` says whether it fired.

    A ``CANCEL`` file, or a signal between steps, makes the next optimizer step end with a
    checkpoint and a stop. A signal during a step's forward and backward passes raises
    ``StepInterrupted`` at once (``run`` then saves the last completed step), so a cancel keeps a
    checkpoint however long a step takes: waiting for the step's end outlasted the supervisor's
    grace on a CPU, which then killed the run with none. The optimizer's own update is never
    interrupted, and several data-parallel ranks always stop together at a step's end.
    """

    def __init__(self, cancel_file: Path):
        self.cancel_file = cancel_file
        self.cancelled = False
        self._signalled = False
        self._in_passes = False  # inside a step's forward and backward passes
        self._previous_handler = signal.signal(signal.SIGTERM, self._on_signal)

    def close(self) -> None:
        """Give SIGTERM back to the handler that was installed before."""
        signal.signal(signal.SIGTERM, self._previous_handler)

    def _on_signal(self, signum, frame) -> None:
        self._signalled = True
        if self._in_passes:
            self._interrupt()

    def _interrupt(self) -> None:
        self._in_passes = False
        self.cancelled = True
        raise StepInterrupted("stopped by SIGTERM during a step")

    def _requested(self, device: torch.device) -> bool:
        wanted = self._signalled or self.cancel_file.exists()
        if not _distributed():
            return wanted
        flag = torch.tensor([1.0 if wanted else 0.0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def on_step_begin(self, args, state, control, **kwargs):
        if _distributed():
            return control
        if self._signalled and state.global_step > 0:
            self._interrupt()  # a signal that came during an evaluation or a save: stop before more work
        self._in_passes = True
        return control

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self._in_passes = False
        return control

    def on_step_end(self, args, state, control, **kwargs):
        self._in_passes = False
        if self._requested(args.device):
            self.cancelled = True
            control.should_save = True
            control.should_training_stop = True
        return control
