"""``cuset.tune`` (train queue): claim a queued job, launch the run service/job_runs.py plans for
it as a subprocess, follow it (worker/supervise.py) and have the service record how it ended.

The claim is one conditional UPDATE, so a redelivered message or a second worker cannot run a
job twice. Every way out of the task leaves the job in a non-running state, except a worker
killed outright; the reaper settles that one.
"""

from __future__ import annotations

import logging
import os
import subprocess

from celery import shared_task

from cuset_core.training.callbacks import CANCEL_FILE
from db.models import Job
from db.session import session_scope
from service.dispatch import TaskName, send_tune
from service.job_runs import RunPlan, fail_run, prepare_run, record_end
from service.jobs import claim, job_dir
from worker.heartbeat import heartbeat
from worker.runtime import RuntimeTask, WorkerRuntime
from worker.supervise import ProgressFollower, stop, supervise

log = logging.getLogger(__name__)


def _start(runtime: WorkerRuntime, job_id: str, attempt: int) -> tuple[subprocess.Popen, ProgressFollower, RunPlan]:
    """Write the config and launch the run's subprocess; its stderr goes to a log file."""
    plan = prepare_run(runtime.settings, job_id, attempt)
    # The device goes to the training run: the models kept on it for generation, by this process
    # or by the infer worker beside it, leave it first.
    runtime.free_device()
    offset = plan.progress.stat().st_size if plan.progress.is_file() else 0  # earlier attempts' lines are recorded
    with plan.log_path.open("wb") as stderr:
        process = subprocess.Popen(plan.command, stdout=subprocess.DEVNULL, stderr=stderr, stdin=subprocess.DEVNULL)
    _lower_priority(process.pid, runtime.settings.train_nice)
    return process, ProgressFollower(plan.progress, offset), plan


def _lower_priority(pid: int, nice: int) -> None:
    """Run the training process (and what it starts later: data loader workers, launcher ranks)
    at niceness ``nice`` or more, so it does not slow the API on a shared host. Never raises
    a priority: an operator who niced the worker further keeps that."""
    try:
        if nice > os.getpriority(os.PRIO_PROCESS, pid):
            os.setpriority(os.PRIO_PROCESS, pid, nice)
    except ProcessLookupError:
        pass  # it exited already; the supervisor reports how


@shared_task(name=TaskName.TUNE, base=RuntimeTask, bind=True)
def tune(self: RuntimeTask, job_id: str) -> None:
    """Run one attempt of a fine-tuning job, start to end."""
    settings = self.runtime.settings
    with session_scope(settings.resolved_database_url) as session:
        attempt = claim(session, settings, job_id)
    if attempt is None:
        log.info("job %s is not claimable; skipping", job_id)
        return
    process = None
    try:
        # Starting can wait minutes (a generation finishing before the device is freed, a base
        # model merged): the job must not look silent to the reaper meanwhile.
        with heartbeat(settings.resolved_database_url, Job, job_id, settings.heartbeat_interval_s):
            process, follower, plan = _start(self.runtime, job_id, attempt)
        report = supervise(
            process, follower, settings, job_id, attempt, job_dir(settings, job_id) / "out" / CANCEL_FILE
        )
        if report.lost:
            log.warning("job %s was taken from attempt %d", job_id, attempt)
            return
        requeued = record_end(settings, job_id, attempt, report, plan.log_path)
    except BaseException as exc:
        log.exception("job %s attempt %d failed", job_id, attempt)
        if process is not None:
            stop(process)
        fail_run(settings, job_id, attempt, exc)
        raise
    if requeued:
        send_tune(settings, job_id)
