"""Database writes shared by the job tasks (validate, tune, reap): events, the fenced end of an
attempt, requeueing, and where a job's model and artifacts are.

An *attempt* is one claim of a job by a worker (``Job.attempts`` after the claim). Writes that
end or advance a running job are fenced on it, so a worker that lost its job (the reaper gave
it to another) can no longer change it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from db.ids import new_id
from db.model_specs import model_spec_for
from db.models import Checkpoint, Eval, Job, JobEvent
from db.settings import Settings

MAX_ATTEMPTS = 3


def add_event(
    session: Session, job_id: str, message: str, level: str = "info", data: dict[str, Any] | None = None
) -> None:
    """Append one line to a job's event log (``seq`` keeps the order when times tie)."""
    seq = session.scalar(select(func.coalesce(func.max(JobEvent.seq), 0)).where(JobEvent.job_id == job_id)) + 1
    session.add(JobEvent(id=new_id("ftevent"), job_id=job_id, level=level, message=message, data=data, seq=seq))


def finish_attempt(session: Session, job_id: str, attempt: int, status: str, **values: Any) -> bool:
    """Move a job this attempt runs to a final (or queued) ``status``; False when the attempt
    no longer owns the job."""
    final = {"finished_at": time.time()} if status in ("succeeded", "failed", "cancelled") else {}
    return bool(
        session.execute(
            update(Job)
            .where(Job.id == job_id, Job.status == "running", Job.attempts == attempt)
            .values(status=status, eta_s=None, **final, **values)
        ).rowcount
    )


def job_dir(settings: Settings, job_id: str) -> Path:
    """The job's artifact folder: job.json, training logs, ``out/`` (checkpoints, adapter)."""
    return settings.artifacts / "jobs" / job_id


def latest_checkpoint(session: Session, settings: Settings, job_id: str) -> Checkpoint | None:
    """The newest recorded checkpoint whose folder still exists (old ones get rotated away)."""
    for checkpoint in session.scalars(
        select(Checkpoint).where(Checkpoint.job_id == job_id).order_by(Checkpoint.step.desc())
    ):
        if (settings.artifacts / checkpoint.path).is_dir():
            return checkpoint
    return None


def requeue_or_fail(session: Session, settings: Settings, job: Job, reason: str, code: str) -> bool:
    """Give a running job that lost its worker another attempt (when it has a checkpoint to
    resume from and attempts left) or fail it with ``code``. True when requeued: the caller
    enqueues ``cuset.tune`` after committing."""
    checkpoint = latest_checkpoint(session, settings, job.id)
    if checkpoint is not None and job.attempts < MAX_ATTEMPTS:
        if finish_attempt(session, job.id, job.attempts, "queued", heartbeat_at=None):
            add_event(
                session, job.id, f"requeued after {reason}; resuming from step {checkpoint.step}", level="warning"
            )
            return True
        return False
    detail = "no checkpoint to resume from" if checkpoint is None else f"{job.attempts} attempts used"
    error = {"code": code, "message": f"The job stopped: {reason} ({detail}).", "param": None}
    if finish_attempt(session, job.id, job.attempts, "failed", error=error):
        add_event(session, job.id, f"Job failed: {reason} ({detail})", level="error")
    return False


def model_spec(session: Session, settings: Settings, row: Job | Eval) -> str:
    """The cuset_core model spec of a row's ``model`` (a job's base or an eval's model): a
    configured base model, or the adapter folder of the owner's succeeded job that produced it."""
    spec = model_spec_for(session, settings, row.owner, row.model)
    if spec is None:
        raise LookupError(f"model {row.model!r} is no longer available")
    return spec
