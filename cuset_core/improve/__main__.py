"""``python -m cuset_core.improve CONFIG.json``: run (or resume) one self-training run as the
service's workers do, writing progress lines (cuset_core/training/progress_lines.py) to
``out_dir/progress.jsonl``: events per stage, ``StageLine`` s as a round's sampling and verifying
advance, a ``RoundLine`` and a ``CheckpointLine`` (the round's adapter) as each round finishes, then ``DoneLine`` naming the last round's adapter, or ``ErrorLine``.

SIGTERM stops the run where it is (the tuning stage stops at its next optimizer step); every stage
finished before is kept, so running the same config again resumes. Exit codes as
``python -m cuset_core.training``: 0 done or stopped, 1 failed, 2 unusable config.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import traceback
from pathlib import Path

from pydantic import ValidationError

from cuset_core.evaluation.inputs import EvalInputError
from cuset_core.improve.loop import (
    PROGRESS_FILE,
    SelfTrainingConfig,
    SelfTrainingError,
    SelfTrainingStopped,
    run_self_training,
)
from cuset_core.models import ModelNotFoundError
from cuset_core.training.callbacks import ProgressWriter
from cuset_core.training.config import ConfigError, format_validation_error
from cuset_core.training.progress_lines import CheckpointLine, DoneLine, RoundLine, RoundReport, StageLine
from cuset_core.training.run import EXIT_BAD_CONFIG, EXIT_FAILED, EXIT_OK


def _stop(signum: int, frame: object) -> None:
    raise SelfTrainingStopped("stopped by a signal")


class RoundLines:
    """Turns each finished round into its progress lines; the ETA is this attempt's mean round time
    times the rounds left."""

    def __init__(self, writer: ProgressWriter, rounds: int):
        self.writer, self.rounds = writer, rounds
        self.started, self.finished = time.monotonic(), 0

    def __call__(self, report: RoundReport) -> None:
        self.finished += 1
        per_round = (time.monotonic() - self.started) / self.finished
        left = self.rounds - report.round
        self.writer.write(RoundLine(**report.model_dump(), rounds=self.rounds, eta_s=round(per_round * left, 1)))
        if report.tuned_model is not None:
            self.writer.write(CheckpointLine(step=report.round, path=report.tuned_model))


class StageLines:
    """Turns a round's stage progress into ``StageLine`` s: the first advance of a stage, then each
    further tenth of it, and its end (about a dozen lines per stage, whatever the pool's size)."""

    def __init__(self, writer: ProgressWriter, rounds: int):
        self.writer, self.rounds = writer, rounds
        self.written: dict[tuple[int, str], int] = {}  # (round, stage) -> the tenths already written

    def __call__(self, round_: int, stage: str, done: int, total: int) -> None:
        tenths = 10 * done // max(total, 1)
        last = self.written.get((round_, stage))
        if last is not None and tenths <= last and done < total:
            return
        self.written[(round_, stage)] = tenths
        self.writer.write(StageLine(round=round_, rounds=self.rounds, stage=stage, done=done, total=total))


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m cuset_core.improve", description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path, help="a SelfTrainingConfig (JSON)")
    options = parser.parse_args(argv)
    try:
        config = SelfTrainingConfig.model_validate_json(options.config.read_text())
    except OSError as exc:
        print(f"error: config file unreadable: {options.config}: {exc}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    except ValidationError as exc:
        print(f"error: {options.config}: {format_validation_error(exc)}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    writer = ProgressWriter(config.out_dir / PROGRESS_FILE, stream=sys.stderr, enabled=True)
    signal.signal(signal.SIGTERM, _stop)
    try:
        report = run_self_training(
            config,
            progress=False,
            say=writer.event,
            on_round=RoundLines(writer, config.rounds),
            on_stage=StageLines(writer, config.rounds),
        )
    except SelfTrainingStopped as exc:
        writer.event(f"{exc}; the rounds and stages finished so far are kept", level="warning")
        # Verifications still running in the pool's threads would hold a normal exit until they end;
        # their sandboxes die with this process.
        os._exit(EXIT_OK)
    except (SelfTrainingError, EvalInputError, ModelNotFoundError, ConfigError) as exc:
        writer.error(str(exc))
        return EXIT_BAD_CONFIG
    except Exception as exc:  # noqa: BLE001 - the run's last word must reach the progress file
        traceback.print_exc(file=sys.stderr)
        writer.error(f"{type(exc).__name__}: {exc}")
        return EXIT_FAILED
    final = report.final_model
    writer.write(
        DoneLine(
            output_dir=final or str(config.out_dir),
            adapter_path=final if final is not None and config.lora is not None else None,
            steps=len(report.rounds),
            train_tokens=sum(r.trained_tokens for r in report.rounds),
        )
    )
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
