"""``cuset.reap`` (cpu queue; on the beat schedule and once when a worker starts): settle work
whose worker died (service/reaping.py decides how), and move what an older API left on the
``gpu`` queue."""

from __future__ import annotations

import logging
import time

from celery import shared_task
from celery.signals import worker_ready

from service.dispatch import TaskName, send_reap, send_tune
from service.reaping import reap_evals, reap_generations, reap_jobs
from worker.legacy_queue import move_legacy_messages
from worker.runtime import RuntimeTask, process_runtime

log = logging.getLogger(__name__)
STARTUP_BEATS = 2  # heartbeat periods a restarted worker waits before settling unbeaten jobs


@shared_task(name=TaskName.REAP, base=RuntimeTask, bind=True)
def reap(self: RuntimeTask, silent_since: float | None = None) -> None:
    """One pass over running jobs, generations and evals, and over the old ``gpu`` queue."""
    settings = self.runtime.settings
    for job_id in reap_jobs(settings, silent_since):
        send_tune(settings, job_id)
    failed = reap_generations(settings)
    if failed:
        log.warning("failed %d stuck generation(s)", failed)
    lost = reap_evals(settings)
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
