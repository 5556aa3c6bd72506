"""A training run's progress lines, copied into the database as they come (``Recorder``), and
what the run ended with (``RunReport``); worker/supervise.py follows the process and hands the
lines over.

Lines (cuset_core/training/progress_lines.py): a ``StepLine`` -> a JobMetric row and the job's
step/total_steps/trained_tokens/eta_s; an ``EventLine`` -> a JobEvent; a ``CheckpointLine`` -> a
Checkpoint row (path relative to the artifact root); an ``EvalLine`` -> eval_loss on that step's
metrics; a ``RoundLine`` -> a self-training round's metrics; ``DoneLine`` and ``ErrorLine`` end
the run and go into the report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from cuset_core.training.progress_lines import (
    CheckpointLine,
    DoneLine,
    ErrorLine,
    EvalLine,
    EventLine,
    Metrics,
    ProgressLine,
    RoundLine,
    StageLine,
    StepLine,
)
from db.ids import new_id
from db.models import Checkpoint, Job, JobMetric
from db.settings import Settings
from service.jobs import add_event


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
    last_metrics: Metrics = field(default_factory=dict)


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
