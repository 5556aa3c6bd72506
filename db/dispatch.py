"""Task names, queues and the Celery app both sides share: the API enqueues by name, the worker
(worker/) registers the tasks. It lives in db/ because api/ and worker/ depend only on db/.

Postgres is the source of truth; a message only says "look at row X". Tasks are acked late with
prefetch 1, so a worker that dies mid-task leaves its message to be redelivered, and the reaper
(worker/tasks/reaper.py) settles the database row either way.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

from celery import Celery, group
from kombu import Queue

from db.settings import Settings

TRAIN_QUEUE = "train"
INFER_QUEUE = "infer"
CPU_QUEUE = "cpu"
QUEUES = (TRAIN_QUEUE, INFER_QUEUE, CPU_QUEUE)
# The one queue of GPU work before train/infer split it. Messages an older API left there are
# moved to their task's queue (worker/legacy_queue.py); nothing sends to it any more.
LEGACY_GPU_QUEUE = "gpu"

# Task name -> queue. Training has a queue of its own so that a run that takes days never
# holds up decoding; infer is the rest of the GPU work (decoding, confidence, tier 3); cpu is
# file validation, tiers 0-2 and bookkeeping.
ROUTES: dict[str, str] = {
    "cuset.tune": TRAIN_QUEUE,
    "cuset.generate": INFER_QUEUE,
    "cuset.verify_gpu": INFER_QUEUE,
    "cuset.confidence": INFER_QUEUE,
    "cuset.eval": INFER_QUEUE,
    "cuset.eval_verify_gpu": INFER_QUEUE,
    "cuset.eval_repair": INFER_QUEUE,
    "cuset.validate_job_files": CPU_QUEUE,
    "cuset.verify_sample": CPU_QUEUE,
    "cuset.eval_verify": CPU_QUEUE,
    "cuset.reap": CPU_QUEUE,
}


def make_celery(settings: Settings) -> Celery:
    """A Celery app on the configured broker with the project's queues and routes."""
    app = Celery("cuset", broker=settings.resolved_broker_url)
    app.conf.update(
        task_queues=[Queue(name) for name in QUEUES],
        task_default_queue=CPU_QUEUE,
        task_routes={name: {"queue": queue} for name, queue in ROUTES.items()},
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,  # results live in the database, never in a result backend
        broker_transport_options=_transport_options(settings),
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        beat_schedule={"reap": {"task": "cuset.reap", "schedule": settings.reaper_interval_s}},
    )
    return app


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


def enqueue(settings: Settings, task: str, *args) -> None:
    """Send ``task`` (a name in ROUTES) with ``args`` to its queue."""
    if task not in ROUTES:
        raise KeyError(f"unknown task {task!r}")
    producer_for(settings).send_task(task, args=list(args))


def enqueue_group(settings: Settings, task: str, calls: Iterable[tuple]) -> None:
    """Send one ``task`` message per argument tuple of ``calls``, as one Celery group (spread
    over every worker of the task's queue). No result backend: each task records its result in
    the database, and the last one to finish settles the parent row."""
    if task not in ROUTES:
        raise KeyError(f"unknown task {task!r}")
    producer = producer_for(settings)
    group(producer.signature(task, args=list(args)) for args in calls).apply_async()
