"""What the workers tell a streaming API about a Generation row, through Redis pub/sub.

The row stays the source of truth; events only carry what changed since, so the API streams
without reading the row over and over. One channel per generation
(``<broker_key_prefix>cuset:generation:<id>``). An event holds any of:

- a text delta of one attempt: ``index``, ``offset`` (where ``delta`` starts in the attempt's
  text, in characters) and ``delta``; a follower applies it only where it continues the text it
  has, so a repeated or overlapping delta is harmless and a missing one is noticed;
- ``samples``: whole attempts after a write that changed more than text (the list set out,
  an attempt finished, verified, cancelled, or a repair appended), as stored in the row;
- ``status``: the row's status after the change (a final one means: read the row, it is done);
- ``row``: the partial text was just written to the row (a follower that missed deltas reads
  the row then, and continues from the deltas it kept).

Every writer commits the row first and publishes after, so whatever a follower missed before
it subscribed is in the row it reads next. Publishing needs Redis (``Settings.resolved_redis_url``);
in the embedded SQLite mode nothing is published and the API polls the row instead.
"""

from __future__ import annotations

import logging
import time
from functools import lru_cache

import redis
from pydantic import BaseModel, Field
from sqlalchemy import update

from db.errors import ErrorCode, ErrorInfo
from db.generations import GenerationSample
from db.models import Generation
from db.session import session_scope
from db.settings import Settings
from db.statuses import GenerationStatus

log = logging.getLogger(__name__)


class GenerationEvent(BaseModel):
    """One message on a generation's channel (see the module docstring)."""

    index: int | None = Field(None, description="the attempt a text delta belongs to")
    offset: int = Field(0, ge=0, description="characters of the attempt's text before delta")
    delta: str = ""
    samples: list[GenerationSample] = Field(default_factory=list, description="attempts as now stored")
    status: GenerationStatus | None = None
    row: bool = Field(False, description="the partial text was just written to the row")


def channel(settings: Settings, generation_id: str) -> str:
    """The pub/sub channel of one generation (prefixed like every key of this service)."""
    return f"{settings.broker_key_prefix}cuset:generation:{generation_id}"


def events_url(settings: Settings) -> str | None:
    """The Redis that events are published on, where a follower may listen; None when Redis is
    not configured (nothing is published: followers read the row)."""
    return settings.resolved_redis_url


@lru_cache(maxsize=4)
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=2)


def publish(settings: Settings, generation_id: str, event: GenerationEvent) -> None:
    """Send ``event`` to the generation's followers; nothing without Redis. A failed publish is
    logged and dropped: followers notice the gap and read the row."""
    url = events_url(settings)
    if url is None:
        return
    try:
        _client(url).publish(channel(settings, generation_id), event.model_dump_json(exclude_defaults=True))
    except redis.RedisError:
        log.warning("publishing an event of %s failed; followers will read the row", generation_id, exc_info=True)


def fail_generations(settings: Settings, ids: list[str], code: ErrorCode, message: str) -> None:
    """End the rows ``ids`` that are still in flight as failed with ``code`` and ``message``."""
    with session_scope(settings.resolved_database_url) as session:
        session.execute(
            update(Generation)
            .where(
                Generation.id.in_(ids),
                Generation.status.in_((GenerationStatus.QUEUED, GenerationStatus.RUNNING, GenerationStatus.VERIFYING)),
            )
            .values(
                status=GenerationStatus.FAILED, error=ErrorInfo(code=code, message=message), finished_at=time.time()
            )
        )
    for generation_id in ids:
        publish(settings, generation_id, GenerationEvent(status=GenerationStatus.FAILED))
