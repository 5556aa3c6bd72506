"""Task names, queues, the Celery app and the typed senders both sides share: the API and the
workers send through ``send_*``, and the worker (worker/) registers each task under its
``TaskName``. It lives in service/, which api/ and worker/ both depend on.

Postgres is the source of truth; a message only says "look at row X". Tasks are acked late with
prefetch 1, so a worker that dies mid-task leaves its message to be redelivered, and the reaper
(worker/tasks/reaper.py) settles the database row either way.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from enum import StrEnum
from functools import lru_cache

from celery import Celery, group
from kombu import Queue
from sqlalchemy.exc import IntegrityError, OperationalError

from db.settings import Settings

TRAIN_QUEUE = "train"
INFER_QUEUE = "infer"
CPU_QUEUE = "cpu"
QUEUES = (TRAIN_QUEUE, INFER_QUEUE, CPU_QUEUE)
# The one queue of GPU work before train/infer split it. Messages an older API left there are
# moved to their task's queue (worker/legacy_queue.py); nothing sends to it any more.
LEGACY_GPU_QUEUE = "gpu"


class TaskName(StrEnum):
    """Every task the worker registers; the senders below and the task definitions both use it."""

    TUNE = "cuset.tune"
    GENERATE = "cuset.generate"
    GENERATE_REPAIR = "cuset.generate_repair"
    VERIFY_SAMPLE = "cuset.verify_sample"
    VERIFY_GPU = "cuset.verify_gpu"
    CONFIDENCE = "cuset.confidence"
    EVAL = "cuset.eval"
    EVAL_VERIFY = "cuset.eval_verify"
    EVAL_VERIFY_GPU = "cuset.eval_verify_gpu"
    EVAL_REPAIR = "cuset.eval_repair"
    VALIDATE_JOB_FILES = "cuset.validate_job_files"
    REAP = "cuset.reap"


# Task -> queue. Training has a queue of its own so that a run that takes days never holds up
# decoding; infer is the rest of the GPU work (decoding, confidence, tier 3); cpu is file
# validation, tiers 0-2 and bookkeeping.
ROUTES: dict[TaskName, str] = {
    TaskName.TUNE: TRAIN_QUEUE,
    TaskName.GENERATE: INFER_QUEUE,
    TaskName.GENERATE_REPAIR: INFER_QUEUE,
    TaskName.VERIFY_GPU: INFER_QUEUE,
    TaskName.CONFIDENCE: INFER_QUEUE,
    TaskName.EVAL: INFER_QUEUE,
    TaskName.EVAL_VERIFY_GPU: INFER_QUEUE,
    TaskName.EVAL_REPAIR: INFER_QUEUE,
    TaskName.VALIDATE_JOB_FILES: CPU_QUEUE,
    TaskName.VERIFY_SAMPLE: CPU_QUEUE,
    TaskName.EVAL_VERIFY: CPU_QUEUE,
    TaskName.REAP: CPU_QUEUE,
}


def make_celery(settings: Settings) -> Celery:
    """A Celery app on the configured broker with the project's queues and routes."""
    app = Celery("cuset", broker=settings.resolved_broker_url)
    app.conf.update(
        task_queues=[Queue(name) for name in QUEUES],
        task_default_queue=CPU_QUEUE,
        task_routes={task.value: {"queue": queue} for task, queue in ROUTES.items()},
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,  # results live in the database, never in a result backend
        broker_transport_options=_transport_options(settings),
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        beat_schedule={"reap": {"task": TaskName.REAP.value, "schedule": settings.reaper_interval_s}},
    )
    return app


_DECLARE_ATTEMPTS = 5  # collisions of callers started together; each lost one leaves less to create


def prepare_broker(settings: Settings) -> None:
    """On the embedded (SQLite) broker, declare every queue, the legacy one too, from this one
    process; other brokers need nothing.

    Call it before starting processes that share that broker: kombu's SQLAlchemy transport
    creates its tables and each queue's row on first use, and two processes doing that at once
    collide (``table kombu_queue already exists``, which Celery retries, or ``UNIQUE constraint
    failed: kombu_queue.name``, which ends a worker as unrecoverable). Declared first, every
    later use only reads them. Callers that run at once themselves (two ``cuset worker``
    started together) collide here the same way; the one that loses declares again, on a fresh
    connection, and then only reads what the other created."""
    if not settings.resolved_broker_url.startswith("sqla+"):
        return
    for attempt in range(_DECLARE_ATTEMPTS):
        try:
            with producer_for(settings).connection_for_write() as connection:
                channel = connection.default_channel
                for name in (*QUEUES, LEGACY_GPU_QUEUE):
                    channel.queue_declare(queue=name)
            return
        except (IntegrityError, OperationalError):
            if attempt == _DECLARE_ATTEMPTS - 1:
                raise
            time.sleep(0.1)


def _transport_options(settings: Settings) -> dict:
    """Broker options. kombu's SQLAlchemy transport (the embedded broker) hands every option to
    ``create_engine``, so it gets none; it has no visibility timeout to set anyway."""
    if settings.resolved_broker_url.startswith("sqla+"):
        return {}
    options: dict = {"visibility_timeout": settings.visibility_timeout_s}
    if settings.broker_key_prefix:
        options["global_keyprefix"] = settings.broker_key_prefix
    return options


@lru_cache(maxsize=4)
def _producer(broker_url: str, key_prefix: str, visibility_timeout_s: int) -> Celery:
    return make_celery(
        Settings(broker_url=broker_url, broker_key_prefix=key_prefix, visibility_timeout_s=visibility_timeout_s)
    )


def producer_for(settings: Settings) -> Celery:
    """The (cached) Celery app that sends messages for ``settings``' broker."""
    return _producer(settings.resolved_broker_url, settings.broker_key_prefix, settings.visibility_timeout_s)


def _send(settings: Settings, task: TaskName, *ids: str | int) -> None:
    producer_for(settings).send_task(task.value, args=list(ids))


# The senders: one per task, each message a row's id (and an index into that row), never the
# row's data. A task reads what it needs from the database, so a redelivered message or one that
# waited while the row changed acts on the row as it is now.


def send_validate_job_files(settings: Settings, job_id: str) -> None:
    """Check the files of job ``job_id`` (``validating_files``), then queue its training."""
    _send(settings, TaskName.VALIDATE_JOB_FILES, job_id)


def send_tune(settings: Settings, job_id: str) -> None:
    """Run one attempt of job ``job_id`` (``queued``)."""
    _send(settings, TaskName.TUNE, job_id)


def send_generate(settings: Settings, generation_id: str) -> None:
    """Decode the drawn samples of generation ``generation_id`` (``queued``)."""
    _send(settings, TaskName.GENERATE, generation_id)


def send_generate_repair(settings: Settings, generation_id: str, index: int) -> None:
    """Decode repair attempt ``index`` of generation ``generation_id`` (appended by settling)."""
    _send(settings, TaskName.GENERATE_REPAIR, generation_id, index)


def send_verify_sample(settings: Settings, generation_id: str, index: int, *, gpu: bool) -> None:
    """Verify attempt ``index`` of generation ``generation_id``: on the infer queue at tier gpu
    (its workers hold the GPUs), else on the cpu queue."""
    _send(settings, TaskName.VERIFY_GPU if gpu else TaskName.VERIFY_SAMPLE, generation_id, index)


def send_confidence(settings: Settings, generation_id: str) -> None:
    """Measure the token confidence generation ``generation_id`` (kind confidence) asks for."""
    _send(settings, TaskName.CONFIDENCE, generation_id)


def send_eval(settings: Settings, eval_id: str) -> None:
    """Generate every problem of eval ``eval_id`` (``queued``)."""
    _send(settings, TaskName.EVAL, eval_id)


def send_eval_verify(settings: Settings, eval_id: str, problem_ids: Iterable[str], *, gpu: bool) -> None:
    """Verify the stored attempts of each of ``problem_ids`` of eval ``eval_id``, one message per
    problem, as one Celery group (spread over every worker of the queue). No result backend: each
    task records its problem in the database and the last one settles the eval."""
    task = (TaskName.EVAL_VERIFY_GPU if gpu else TaskName.EVAL_VERIFY).value
    producer = producer_for(settings)
    group(producer.signature(task, args=[eval_id, problem_id]) for problem_id in problem_ids).apply_async()


def send_eval_repair(settings: Settings, eval_id: str, problem_id: str) -> None:
    """Decode the next round of repairs of problem ``problem_id`` of eval ``eval_id``."""
    _send(settings, TaskName.EVAL_REPAIR, eval_id, problem_id)


def send_reap(settings: Settings, silent_since: float | None = None, countdown: float | None = None) -> None:
    """Run one pass of the reaper now (it also runs on beat's schedule), or ``countdown`` seconds
    from now; ``silent_since`` (a wall-clock time) also settles running jobs that have not beaten
    since then, however recent their last beat (a restarted service's orphans)."""
    if silent_since is None and countdown is None:
        _send(settings, TaskName.REAP)
        return
    args = [] if silent_since is None else [silent_since]
    producer_for(settings).send_task(TaskName.REAP.value, args=args, countdown=countdown)
