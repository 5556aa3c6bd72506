"""Follow a training subprocess: copy its progress JSONL into the database as it grows, beat the
job's heartbeat, and pass a cancel request on (CANCEL file + SIGTERM).

Lines (cuset_core/training/progress_lines.py): a ``StepLine`` -> a JobMetric row and the job's
step/total_steps/trained_tokens/eta_s; an ``EventLine`` -> a JobEvent; a ``CheckpointLine`` -> a
Checkpoint row (path relative to the artifact root); an ``EvalLine`` -> eval_loss on that step's
metrics; ``DoneLine`` and ``ErrorLine`` end the run and are returned to the caller.
"""

from __future__ import annotations

import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from cuset_core.training.progress_lines import (
    CheckpointLine,
    DoneLine,
    ErrorLine,
    EvalLine,
    EventLine,
    ProgressLine,
    RoundLine,
    StageLine,
    StepLine,
    parse_line,
)
from db.ids import new_id
from db.job_rows import add_event, beat
from db.models import Checkpoint, Job, JobMetric
from db.session import session_scope
from db.settings import Settings

POLL_S = 0.25  # how often the progress file and the process are looked at


class ProgressFollower:
    """Complete lines appended to a JSONL file since ``offset`` (bytes); a partial last line
    waits for its newline."""

    def __init__(self, path: Path, offset: int = 0):
        self.path, self.offset = path, offset

    def read(self) -> list[ProgressLine]:
        if not self.path.is_file():
            return []
        with self.path.open("rb") as handle:
            handle.seek(self.offset)
            chunk = handle.read()
        end = chunk.rfind(b"\n") + 1
        self.offset += end
        # A torn line (the writer was killed mid-write) carries nothing usable.
        return [line for raw in chunk[:end].splitlines() if (line := parse_line(raw)) is not None]


@dataclass
class RunReport:
    """What a supervised run ended with."""

    returncode: int | None = None
    done: DoneLine | None = None
    error: str | None = None
    cancel_sent: bool = False
    wall_clock_hit: bool = False  # stopped because it ran past ``settings.job_max_wall_s``
    lost: bool = False  # the job was taken from this attempt (reaped); nothing more was written
    last_step: int = 0
    last_metrics: dict[str, Any] = field(default_factory=dict)


class Recorder:
    """Writes progress lines of one job attempt to the database."""

    def __init__(self, settings: Settings, job_id: str, attempt: int):
        self.settings, self.job_id, self.attempt = settings, job_id, attempt

    def record(self, session: Session, lines: list[ProgressLine], report: RunReport) -> None:
        for line in lines:
            match line:
                case StepLine():
                    self._progress(session, line, report)
                case EventLine(topic="data"):
                    pass  # the validation step reported the data once
                case EventLine():
                    add_event(session, self.job_id, line.message, level=line.level)
                case CheckpointLine():
                    self._checkpoint(session, line, report)
                case EvalLine():
                    self._eval(session, line)
                case RoundLine():
                    self._round(session, line)
                case StageLine():
                    add_event(
                        session,
                        self.job_id,
                        f"Round {line.round}/{line.rounds}: {line.stage} {line.done}/{line.total} problems",
                        data={"round": line.round, "stage": line.stage, "done": line.done, "total": line.total},
                    )
                case DoneLine():
                    report.done = line
                case ErrorLine():
                    report.error = line.message
                    add_event(session, self.job_id, f"Error: {report.error}", level="error")

    def _progress(self, session: Session, line: StepLine, report: RunReport) -> None:
        step, values = line.step, line.metrics()
        session.merge(JobMetric(job_id=self.job_id, step=step, values=values, created_at=line.time))
        session.execute(
            update(Job)
            .where(Job.id == self.job_id, Job.attempts == self.attempt)
            .values(
                step=step,
                total_steps=line.max_steps,
                trained_tokens=line.trained_tokens,
                eta_s=line.eta_s,
                estimated_finish=None if line.eta_s is None else line.time + line.eta_s,
            )
        )
        summary = f"Step {step}/{line.max_steps}" + ("" if line.loss is None else f": training loss={line.loss:.4f}")
        add_event(
            session,
            self.job_id,
            summary,
            data={
                "step": step,
                "train_loss": line.loss,
                "total_steps": line.max_steps,
                "kept_ratio": line.kept_ratio,
                "learning_rate": line.learning_rate,
                "tokens_per_s": line.tokens_per_s,
            },
        )
        report.last_step, report.last_metrics = step, {"train_loss": line.loss, **values}

    def _round(self, session: Session, line: RoundLine) -> None:
        """A self-training job's progress is counted in rounds: each round's figures are its
        metrics row (``step`` = the round)."""
        session.merge(JobMetric(job_id=self.job_id, step=line.round, values=line.metrics(), created_at=line.time))
        session.execute(
            update(Job)
            .where(Job.id == self.job_id, Job.attempts == self.attempt)
            .values(
                step=line.round,
                total_steps=line.rounds,
                eta_s=line.eta_s,
                estimated_finish=None if line.eta_s is None else line.time + line.eta_s,
            )
        )
        add_event(
            session,
            self.job_id,
            f"Round {line.round}/{line.rounds}: {line.sampled} sampled, {line.compiled} compiled, "
            f"{line.passed} passed, {line.kept} kept ({line.kept_total} in all, {line.problems_solved} problems solved)",
            data={"round": line.round, **line.metrics(), "fed_by": line.fed_by},
        )

    def _checkpoint(self, session: Session, line: CheckpointLine, report: RunReport) -> None:
        step = line.step
        path = Path(line.path).resolve()
        relative = (
            str(path.relative_to(self.settings.artifacts))
            if path.is_relative_to(self.settings.artifacts)
            else str(path)
        )
        metrics = report.last_metrics if report.last_step == step else None
        existing = session.scalar(select(Checkpoint).where(Checkpoint.job_id == self.job_id, Checkpoint.step == step))
        if existing is None:
            session.add(Checkpoint(id=new_id("ftckpt"), job_id=self.job_id, step=step, path=relative, metrics=metrics))
        else:  # a resumed attempt saved the same step again
            existing.path, existing.metrics = relative, metrics
        add_event(session, self.job_id, f"Checkpoint saved at step {step}")

    def _eval(self, session: Session, line: EvalLine) -> None:
        step = line.step
        row = session.get(JobMetric, (self.job_id, step))
        if row is not None:
            row.values = {**row.values, "eval_loss": line.eval_loss}
        add_event(
            session,
            self.job_id,
            f"Step {step}: validation loss={line.eval_loss}",
            data={"step": step, "valid_loss": line.eval_loss},
        )


def stop(process: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGTERM (the run saves a checkpoint and exits), then SIGKILL after ``grace_s`` seconds."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def supervise(
    process: subprocess.Popen,
    follower: ProgressFollower,
    settings: Settings,
    job_id: str,
    attempt: int,
    cancel_file: Path,
) -> RunReport:
    """Follow ``process`` until it exits (or the job is taken from this attempt); never raises
    with the process still running."""
    report = RunReport()
    recorder = Recorder(settings, job_id, attempt)
    url = settings.resolved_database_url
    last_beat = 0.0
    deadline = time.monotonic() + settings.job_max_wall_s
    stop_by: float | None = None  # when a run asked to stop is stopped where it is
    try:
        while True:
            exited = process.poll() is not None
            lines = follower.read()
            if lines:
                with session_scope(url) as session:
                    recorder.record(session, lines, report)
            if exited:
                break
            if stop_by is not None and time.monotonic() >= stop_by:
                break  # its step did not end in time: stopped below, its last checkpoint kept
            if time.monotonic() - last_beat >= settings.heartbeat_interval_s:
                last_beat = time.monotonic()
                with session_scope(url) as session:
                    owned, cancel = beat(session, job_id, attempt)
                if not owned:
                    report.lost = True
                    stop(process)
                    break
                overdue = time.monotonic() >= deadline
                if (cancel or overdue) and not report.cancel_sent:
                    # The same clean stop either way: the trainer saves a checkpoint and exits.
                    cancel_file.parent.mkdir(parents=True, exist_ok=True)
                    cancel_file.touch()
                    process.send_signal(signal.SIGTERM)
                    report.cancel_sent = True
                    stop_by = time.monotonic() + settings.cancel_grace_s
                    report.wall_clock_hit = overdue and not cancel
            time.sleep(POLL_S)
    finally:
        stop(process, grace_s=0 if stop_by is not None else 30.0)
    if not report.lost and (lines := follower.read()):  # what it wrote in its last moments
        with session_scope(url) as session:
            recorder.record(session, lines, report)
    report.returncode = process.returncode
    return report
