"""Every write that moves a fine-tuning job between statuses, and its event log (shared by the
API's jobs router and the job tasks: validate, tune, supervise, reap).

A job moves ``validating_files -> queued`` (``finish_validation``) ``-> running`` (``claim``)
and ends ``succeeded``/``failed``/``cancelled`` (``finish_attempt``, ``fail_attempt``); a
running job that lost its worker goes back to ``queued`` (``requeue``, ``requeue_or_fail``);
``cancel`` stops one not yet running at once and asks a running one to stop.

An *attempt* is one claim of a job by a worker (``Job.attempts`` after the claim). Writes that
end or advance a running job are fenced on it, so a worker that lost its job (the reaper gave
it to another) can no longer change it. Every status change is one conditional UPDATE, so the
API and a worker moving the same job at the same moment cannot both win.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import Session

from db.errors import ErrorCode, ErrorInfo
from db.ids import new_id
from db.model_specs import model_spec_for
from db.models import Checkpoint, Eval, EventData, Job, JobEvent
from db.session import rows_changed
from db.settings import Settings
from db.statuses import JOB_FINAL, JOB_NOT_STARTED, JobStatus

MAX_ATTEMPTS = 3


def add_event(session: Session, job_id: str, message: str, level: str = "info", data: EventData | None = None) -> None:
    """Append one line to a job's event log (``seq`` keeps the order when times tie)."""
    last = select(func.coalesce(func.max(JobEvent.seq), 0)).where(JobEvent.job_id == job_id)
    seq = session.execute(last).scalar_one() + 1
    session.add(JobEvent(id=new_id("ftevent"), job_id=job_id, level=level, message=message, data=data, seq=seq))


def finish_validation(session: Session, job_id: str, notes: list[tuple[str, str]], error: ErrorInfo | None) -> bool:
    """Move a ``validating_files`` job to ``queued``, or to ``failed`` with ``error``, and log the
    file check's ``(level, message)`` notes; False when the job was no longer validating
    (cancelled meanwhile). The caller enqueues ``cuset.tune`` after committing a queued job."""
    status = JobStatus.FAILED if error else JobStatus.QUEUED
    moved = rows_changed(
        session,
        update(Job)
        .where(Job.id == job_id, Job.status == JobStatus.VALIDATING_FILES)
        .values(status=status, error=error, **({"finished_at": time.time()} if error else {})),
    )
    if not moved:
        return False
    for level, note in notes:
        add_event(session, job_id, note, level=level)
    if error:
        add_event(session, job_id, f"Validation failed: {error.message}", level="error")
    else:
        add_event(session, job_id, "Validated training file; job queued")
    return True


def claim(session: Session, settings: Settings, job_id: str) -> int | None:
    """Take a job for a new attempt: queued, or running with a heartbeat older than the timeout
    (its worker is gone) and attempts left. Returns this attempt's number, or None when the job
    is not ours to run (cancelled, finished, or another worker's)."""
    now = time.time()
    row = session.execute(
        update(Job)
        .where(
            Job.id == job_id,
            Job.cancel_requested.is_(False),
            or_(
                Job.status == JobStatus.QUEUED,
                (Job.status == JobStatus.RUNNING)
                & (Job.heartbeat_at < now - settings.heartbeat_timeout_s)
                & (Job.attempts < MAX_ATTEMPTS),
            ),
        )
        .values(
            status=JobStatus.RUNNING,
            attempts=Job.attempts + 1,
            started_at=now,
            heartbeat_at=now,
            output_dir=str(Path("jobs") / job_id / "out"),
        )
        .returning(Job.attempts)
    ).first()
    return row[0] if row else None


def beat(session: Session, job_id: str, attempt: int) -> tuple[bool, bool]:
    """Refresh a running attempt's heartbeat; ``(still ours, cancel requested)``."""
    owned = rows_changed(
        session,
        update(Job)
        .where(Job.id == job_id, Job.status == JobStatus.RUNNING, Job.attempts == attempt)
        .values(heartbeat_at=time.time()),
    )
    cancel = session.scalar(select(Job.cancel_requested).where(Job.id == job_id))
    return bool(owned), bool(cancel)


def finish_attempt(session: Session, job_id: str, attempt: int, status: JobStatus, **values: Any) -> bool:
    """Move a job this attempt runs to a final (or queued) ``status``; False when the attempt
    no longer owns the job."""
    final = {"finished_at": time.time()} if status in JOB_FINAL else {}
    return bool(
        rows_changed(
            session,
            update(Job)
            .where(Job.id == job_id, Job.status == JobStatus.RUNNING, Job.attempts == attempt)
            .values(status=status, eta_s=None, estimated_finish=None, **final, **values),
        )
    )


def fail_attempt(session: Session, job_id: str, attempt: int, code: ErrorCode, message: str, summary: str = "") -> bool:
    """Fail a job this attempt runs with error ``{code, message}`` and log ``Job failed: <summary>``
    (the message when no summary is given); False when the attempt no longer owns the job."""
    error = ErrorInfo(code=code, message=message)
    if not finish_attempt(session, job_id, attempt, JobStatus.FAILED, error=error):
        return False
    add_event(session, job_id, f"Job failed: {summary or message}", level="error")
    return True


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


def resume_point(session: Session, settings: Settings, job_id: str, attempt: int) -> Checkpoint | None:
    """The checkpoint another attempt would resume from: None when the job has none or this
    was its last allowed attempt (MAX_ATTEMPTS)."""
    return latest_checkpoint(session, settings, job_id) if attempt < MAX_ATTEMPTS else None


def requeue(session: Session, job_id: str, attempt: int, event: str) -> bool:
    """Put a job this attempt runs back to ``queued`` (to resume from its checkpoint) and log
    ``event`` as a warning; False when the attempt no longer owns the job. The caller enqueues
    ``cuset.tune`` after committing."""
    if not finish_attempt(session, job_id, attempt, JobStatus.QUEUED, heartbeat_at=None):
        return False
    add_event(session, job_id, event, level="warning")
    return True


def requeue_or_fail(session: Session, settings: Settings, job: Job, reason: str, code: ErrorCode) -> bool:
    """Give a running job that lost its worker another attempt (when it has a checkpoint to
    resume from and attempts left) or fail it with ``code``. True when requeued: the caller
    enqueues ``cuset.tune`` after committing."""
    checkpoint = resume_point(session, settings, job.id, job.attempts)
    if checkpoint is not None:
        return requeue(session, job.id, job.attempts, f"requeued after {reason}; resuming from step {checkpoint.step}")
    out_of_attempts = latest_checkpoint(session, settings, job.id) is not None
    detail = f"{job.attempts} attempts used" if out_of_attempts else "no checkpoint to resume from"
    fail_attempt(session, job.id, job.attempts, code, f"The job stopped: {reason} ({detail}).", f"{reason} ({detail})")
    return False


def cancel(session: Session, job_id: str) -> bool:
    """Cancel a job: one not yet running ends ``cancelled`` at once (True); a running one gets
    ``cancel_requested`` and its worker stops it after a checkpoint (False). The caller checks
    the job is not final first."""
    # Conditional updates: a worker may be moving the job along at the same moment.
    stopped = rows_changed(
        session,
        update(Job)
        .where(Job.id == job_id, Job.status.in_(JOB_NOT_STARTED))
        .values(status=JobStatus.CANCELLED, cancel_requested=True, finished_at=time.time()),
    )
    if stopped:
        add_event(session, job_id, "Job cancelled")
        return True
    session.execute(update(Job).where(Job.id == job_id, Job.status == JobStatus.RUNNING).values(cancel_requested=True))
    add_event(session, job_id, "Cancellation requested; stopping")
    return False


def model_spec(session: Session, settings: Settings, row: Job | Eval) -> str:
    """The cuset_core model spec of a row's ``model`` (a job's base or an eval's model): a
    configured base model, or the adapter folder of the owner's succeeded job that produced it."""
    spec = model_spec_for(session, settings, row.owner, row.model)
    if spec is None:
        raise LookupError(f"model {row.model!r} is no longer available")
    return spec
