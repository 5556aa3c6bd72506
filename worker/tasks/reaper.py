"""``cuset.reap`` (cpu queue; on the beat schedule and once when a worker starts): settle work
whose worker died. A running job silent for longer than ``heartbeat_timeout_s`` is requeued to
resume from its last checkpoint (up to MAX_ATTEMPTS attempts) or failed with ``worker_lost``;
a running eval whose generation's heartbeat stopped is failed (it starts over if resubmitted); a generation
still decoding or verifying after ``generation_timeout_s`` is failed."""

from __future__ import annotations

import logging
import time

from celery import shared_task
from celery.signals import worker_ready
from sqlalchemy import select, update

from db.errors import ErrorCode, ErrorInfo
from db.models import Eval, Generation, Job
from db.session import session_scope
from db.statuses import EvalStatus, GenerationStatus, JobStatus
from service.dispatch import TaskName, send_reap, send_tune
from service.jobs import add_event, finish_attempt, requeue_or_fail
from worker.legacy_queue import move_legacy_messages
from worker.runtime import RuntimeTask, process_runtime

log = logging.getLogger(__name__)
STARTUP_BEATS = 2  # heartbeat periods a restarted worker waits before settling unbeaten jobs


def _reap_jobs(settings, silent_since: float | None = None) -> list[str]:
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


def _reap_generations(settings) -> int:
    cutoff = time.time() - settings.generation_timeout_s
    error = ErrorInfo(
        code=ErrorCode.TIMEOUT, message="The generation did not finish in time; its worker may have been lost."
    )
    with session_scope(settings.resolved_database_url) as session:
        return session.execute(
            update(Generation)
            .where(
                Generation.status.in_((GenerationStatus.RUNNING, GenerationStatus.VERIFYING)),
                Generation.created_at < cutoff,
            )
            .values(status=GenerationStatus.FAILED, error=error, finished_at=time.time())
        ).rowcount


def _reap_evals(settings) -> int:
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
        return session.execute(
            update(Eval)
            .where(Eval.id.in_(generating), Eval.status == EvalStatus.RUNNING)
            .values(status=EvalStatus.FAILED, error=error, finished_at=time.time())
        ).rowcount


@shared_task(name=TaskName.REAP, base=RuntimeTask, bind=True)
def reap(self: RuntimeTask, silent_since: float | None = None) -> None:
    """One pass over running jobs, generations and evals, and over the old ``gpu`` queue."""
    settings = self.runtime.settings
    for job_id in _reap_jobs(settings, silent_since):
        send_tune(settings, job_id)
    failed = _reap_generations(settings)
    if failed:
        log.warning("failed %d stuck generation(s)", failed)
    lost = _reap_evals(settings)
    if lost:
        log.warning("failed %d eval(s) whose worker was lost", lost)
    move_legacy_messages(self.app)


@worker_ready.connect
def _reap_on_start(sender=None, **_kwargs) -> None:
    """A restarted worker settles what its predecessor left behind without waiting for beat: a
    pass now, and one after ``STARTUP_BEATS`` heartbeat periods for the jobs left ``running``
    that no worker has beaten for since this one started (its predecessor was killed in the
    middle of a run), rather than the whole ``heartbeat_timeout_s``."""
    runtime = process_runtime()
    if runtime is not None:
        settings = runtime.settings
        send_reap(settings)
        wait_s = STARTUP_BEATS * settings.heartbeat_interval_s + 1.0
        send_reap(settings, silent_since=time.time(), countdown=wait_s)
