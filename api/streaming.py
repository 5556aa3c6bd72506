"""Wait on a Generation row, or follow it as it changes, by polling Postgres (the source of
truth; the API never reads a Celery result). Polls start 10 ms apart and back off to 100 ms,
so a short request is answered within milliseconds of its row finishing. Database reads run in
the thread pool, never on the event loop.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import update
from starlette.concurrency import run_in_threadpool

from api.errors import APIError
from db.models import Generation
from db.session import session_factory
from db.settings import Settings
from db.statuses import GENERATION_FINAL, GenerationStatus

FIRST_POLL_S = 0.01
MAX_POLL_S = 0.1
BACKOFF = 1.5


@dataclass(frozen=True)
class Snapshot:
    """A Generation row as read at one moment (plain data, safe to use off the session)."""

    id: str
    model: str
    status: str
    samples: list[dict[str, Any]]
    usage: dict[str, Any] | None
    timings: dict[str, Any] | None
    error: dict[str, Any] | None
    created_at: float

    @property
    def final(self) -> bool:
        return self.status in GENERATION_FINAL


def _read(url: str, generation_id: str) -> Snapshot:
    with session_factory(url)() as session:
        row = session.get(Generation, generation_id)
        return Snapshot(
            row.id, row.model, row.status, row.samples or [], row.usage, row.timings, row.error, row.created_at
        )


def _give_up(url: str, generation_id: str, seconds: float) -> None:
    """Fail a row nobody started, so no worker decodes a request nobody waits for."""
    with session_factory(url)() as session, session.begin():
        session.execute(
            update(Generation)
            .where(Generation.id == generation_id, Generation.status == GenerationStatus.QUEUED)
            .values(
                status=GenerationStatus.FAILED,
                finished_at=time.time(),
                error={"code": "generation_timeout", "message": f"not started within {seconds:g} s"},
            )
        )


def timeout_error(seconds: float) -> APIError:
    return APIError(504, f"The generation did not finish within {seconds:g} s.", code="generation_timeout")


def failure_error(snapshot: Snapshot) -> APIError:
    """The 500 a failed generation answers with; the message carries the worker's reason."""
    reason = (snapshot.error or {}).get("message", "unknown error")
    return APIError(500, f"Generation failed: {reason}", code="generation_failed")


async def follow(settings: Settings, generation_id: str) -> AsyncIterator[Snapshot]:
    """Snapshots of the row each time it changes, the last one final; raises the timeout
    APIError after ``settings.generation_timeout_s``."""
    url = settings.resolved_database_url
    deadline = time.monotonic() + settings.generation_timeout_s
    delay, last = FIRST_POLL_S, None
    while True:
        snapshot = await run_in_threadpool(_read, url, generation_id)
        fingerprint = (snapshot.status, json.dumps(snapshot.samples, sort_keys=True))
        if fingerprint != last:
            last = fingerprint
            yield snapshot
        if snapshot.final:
            return
        if time.monotonic() > deadline:
            await run_in_threadpool(_give_up, url, generation_id, settings.generation_timeout_s)
            raise timeout_error(settings.generation_timeout_s)
        await asyncio.sleep(delay)
        delay = min(delay * BACKOFF, MAX_POLL_S)


async def wait_final(settings: Settings, generation_id: str) -> Snapshot:
    """The row once it has succeeded; the failure or timeout APIError otherwise."""
    async for snapshot in follow(settings, generation_id):
        if snapshot.final:
            if snapshot.status == GenerationStatus.FAILED:
                raise failure_error(snapshot)
            return snapshot
    raise AssertionError("follow() ends with a final snapshot")


def sse(data: Any, event: str | None = None) -> str:
    """One server-sent event; ``data`` is JSON-encoded unless it is already a string."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return (f"event: {event}\n" if event else "") + f"data: {payload}\n\n"


DONE = sse("[DONE]")
