"""Settling work whose worker died (the reaper's decisions; worker/tasks/reaper.py runs them on
beat's schedule and when a worker starts). A running job silent for longer than
``heartbeat_timeout_s`` is requeued to resume from its last checkpoint (up to MAX_ATTEMPTS
attempts) or failed with ``worker_lost``; a running eval whose generation's heartbeat stopped is
failed (it starts over if resubmitted); a generation still decoding or verifying after
``generation_timeout_s`` is failed."""

from __future__ import annotations

import logging
import time

from sqlalchemy import select, update

from db.errors import ErrorCode, ErrorInfo
from db.models import Eval, Generation, Job
from db.session import rows_changed, session_scope
from db.settings import Settings
from db.statuses import EvalStatus, GenerationStatus, JobStatus
from service.jobs import add_event, finish_attempt, requeue_or_fail

log = logging.getLogger(__name__)


def reap_jobs(settings: Settings, silent_since: float | None = None) -> list[str]:
    """Settle silent running jobs; returns the ids requeued (to enqueue after commit). A job is
    silent after ``heartbeat_timeout_s`` without a beat, or, given ``silent_since``, when it has
    not beaten since then (a restarted worker waits a few heartbeat periods before asking, so a
    live worker elsewhere has beaten meanwhile)."""
    requeued = []
    cutoff = time.time() - settings.heartbeat_timeout_s
    if silent_since is not None:
        cutoff = max(cutoff, silent_since)
    with session_scope(settings.resolved_database_url) as session:
        stale = session.scalars(
            select(Job)
            .where(Job.status == JobStatus.RUNNING, Job.heartbeat_at < cutoff)
            .with_for_update(skip_locked=True)
        ).all()
        for job in stale:
            if job.cancel_requested:
                # The user asked it to stop; the lost worker cannot finish that, so we do.
                if finish_attempt(session, job.id, job.attempts, JobStatus.CANCELLED):
                    add_event(session, job.id, "Job cancelled (its worker was lost)", level="warning")
            elif requeue_or_fail(session, settings, job, "worker loss", ErrorCode.WORKER_LOST):
                requeued.append(job.id)
            log.warning("reaped job %s (attempt %d)", job.id, job.attempts)
    return requeued


def reap_generations(settings: Settings) -> int:
    """Fail generations still decoding or verifying ``generation_timeout_s`` after they were
    created; how many."""
    cutoff = time.time() - settings.generation_timeout_s
    error = ErrorInfo(
        code=ErrorCode.TIMEOUT, message="The generation did not finish in time; its worker may have been lost."
    )
    with session_scope(settings.resolved_database_url) as session:
        return rows_changed(
            session,
            update(Generation)
            .where(
                Generation.status.in_((GenerationStatus.RUNNING, GenerationStatus.VERIFYING)),
                Generation.created_at < cutoff,
            )
            .values(status=GenerationStatus.FAILED, error=error, finished_at=time.time()),
        )


def reap_evals(settings: Settings) -> int:
    """Fail running evals whose generating worker went silent. Once every problem is generated,
    the eval's work is verification messages, which the broker redelivers if their worker dies
    (acks late); their heartbeat only says one is running, so those evals are left alone."""
    cutoff = time.time() - settings.heartbeat_timeout_s
    error = ErrorInfo(
        code=ErrorCode.WORKER_LOST, message="The worker running this eval stopped; create the eval again."
    )
    with session_scope(settings.resolved_database_url) as session:
        silent = session.scalars(
            select(Eval)
            .where(Eval.status == EvalStatus.RUNNING, Eval.heartbeat_at < cutoff)
            .with_for_update(skip_locked=True)
        ).all()
        generating = [e.id for e in silent if e.progress is None or e.progress.generated < e.progress.total]
        if not generating:
            return 0
        return rows_changed(
            session,
            update(Eval)
            .where(Eval.id.in_(generating), Eval.status == EvalStatus.RUNNING)
            .values(status=EvalStatus.FAILED, error=error, finished_at=time.time()),
        )
