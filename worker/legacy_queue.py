"""Messages an older release left on the ``gpu`` queue, moved to the queue their task has now.

Before ``train`` and ``infer`` split it, tuning and generation shared one ``gpu`` queue. After
an upgrade, messages already waiting there (a queued tuning job, a generation) would wait for
ever, since no worker consumes ``gpu`` any more. Every worker moves them once when it starts,
and the reaper moves them on each pass (an API of the older release may still be sending
during a rolling upgrade). Celery's own ``celery.contrib.migrate.move`` does the moving:
each message is republished unchanged to its new queue, then acknowledged on the old one.
"""

from __future__ import annotations

import logging

from celery import Celery
from celery.contrib.migrate import move
from kombu import Queue

from service.dispatch import LEGACY_GPU_QUEUE, ROUTES, TaskName

log = logging.getLogger(__name__)


def destination(task_name: str | None) -> str | None:
    """The queue a message of ``task_name`` belongs on now (None: a task this release lacks)."""
    try:
        return ROUTES[TaskName(task_name)] if task_name else None
    except ValueError:
        return None


def waiting(app: Celery) -> int:
    """Messages on the legacy queue. A plain declare (which leaves an empty queue declared, as
    the move itself would): kombu's Redis transport answers a passive one "not found" under a
    key prefix."""
    with app.connection_for_write() as connection:
        return connection.default_channel.queue_declare(queue=LEGACY_GPU_QUEUE).message_count


def move_legacy_messages(app: Celery, timeout_s: float = 1.0) -> int:
    """Move every message on the legacy ``gpu`` queue to its task's queue; returns how many.

    A message of an unknown task stays where it is (unacknowledged, so the broker keeps it).
    An empty queue costs one round trip: the move (which waits ``timeout_s`` for messages)
    only runs when there is something to move."""
    if not waiting(app):
        return 0

    def new_queue(_body, message) -> Queue | None:
        queue = destination(message.headers.get("task"))
        return app.amqp.queues[queue] if queue else None

    moved: list[str] = []
    # ``move`` returns the consumer's count of messages seen; its callback sees only those moved.
    move(new_queue, app=app, source=[LEGACY_GPU_QUEUE], timeout=timeout_s, callback=lambda *_: moved.append("m"))
    if moved:
        log.warning("moved %d message(s) from the old %r queue to train/infer/cpu", len(moved), LEGACY_GPU_QUEUE)
    return len(moved)
