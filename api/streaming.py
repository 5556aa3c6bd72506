"""Wait on a Generation row, or follow it as it changes. The row is the source of truth (the API
never reads a Celery result); how its changes reach the API depends on the deployment:

- with Redis, the workers publish what they change (text deltas, attempts, status) on the row's
  channel (service/generation_events.py). ``follow`` subscribes first, then reads the row once, and
  from then on applies events to its copy: a delta only where it continues the text it has
  (none is shown twice), one that starts past it waits until the row's next low-rate write
  (``row`` event) fills the gap. The row is read again for a final status, and every
  ``RESYNC_S`` seconds of silence in case an event was lost.
- in the embedded SQLite mode nothing is published, so the row is polled: 10 ms apart at first,
  backing off to 100 ms, so a short request is answered within milliseconds of its row finishing.

Database reads run in the thread pool, never on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
import redis.asyncio as aioredis
from sqlalchemy import update
from sse_starlette import ServerSentEvent
from starlette.concurrency import run_in_threadpool

from api import shutdown
from api.errors import APIError
from db.confidence_scores import AnswerScores
from db.errors import ErrorCode, ErrorInfo
from db.generation_rows import load_samples
from db.generations import GenerationSample, GenerationTimings, Usage
from db.models import Generation
from db.session import session_factory
from db.settings import Settings
from db.statuses import GENERATION_FINAL, GenerationStatus
from service.generation_events import GenerationEvent, channel, events_url

FIRST_POLL_S = 0.01
MAX_POLL_S = 0.1
BACKOFF = 1.5
RESYNC_S = 5.0  # silence on the channel after which the row is read again (a lost event)
SHUTDOWN_CHECK_S = 0.5  # how often a follower on the channel looks at the shutdown flag
# Statuses in the order a row moves through them; a follower never steps back.
STATUS_ORDER = {
    GenerationStatus.QUEUED: 0,
    GenerationStatus.RUNNING: 1,
    GenerationStatus.VERIFYING: 2,
    GenerationStatus.SUCCEEDED: 3,
    GenerationStatus.FAILED: 3,
}


@dataclass(frozen=True)
class Snapshot:
    """A Generation row as read at one moment (plain data, safe to use off the session)."""

    id: str
    model: str
    status: GenerationStatus
    samples: list[GenerationSample]
    usage: Usage | None
    timings: GenerationTimings | None
    error: ErrorInfo | None
    created_at: float
    confidence: AnswerScores | None = None  # a confidence request's answer

    @property
    def final(self) -> bool:
        return self.status in GENERATION_FINAL


def _read(url: str, generation_id: str) -> Snapshot:
    with session_factory(url)() as session:
        row = session.get_one(Generation, generation_id)
        samples = load_samples(session, generation_id)
        return Snapshot(
            row.id,
            row.model,
            GenerationStatus(row.status),
            samples,
            row.usage,
            row.timings,
            row.error,
            row.created_at,
            row.confidence,
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
                error=ErrorInfo(code=ErrorCode.GENERATION_TIMEOUT, message=f"not started within {seconds:g} s"),
            )
        )


CLIENT_LEFT = ErrorInfo(
    code=ErrorCode.CLIENT_GONE,
    message="stopped: the client disconnected (or stopped waiting) before the answer was complete",
)
SHUT_DOWN = ErrorInfo(
    code=ErrorCode.SHUTTING_DOWN, message="stopped: the service shut down before the answer was complete"
)


def _abandon(url: str, generation_id: str, error: ErrorInfo = CLIENT_LEFT) -> None:
    """End a row its follower left before it was final, so its decoding stops at its next flush
    and its verifications are skipped: nobody is waiting for them any more."""
    with session_factory(url)() as session, session.begin():
        session.execute(
            update(Generation)
            .where(Generation.id == generation_id, Generation.status.not_in(GENERATION_FINAL))
            .values(status=GenerationStatus.FAILED, finished_at=time.time(), error=error)
        )


def timeout_error(seconds: float) -> APIError:
    return APIError(504, f"The generation did not finish within {seconds:g} s.", code=ErrorCode.GENERATION_TIMEOUT)


def shutdown_error() -> APIError:
    return APIError(
        503,
        "The service is shutting down; the generation was stopped. Send it again later.",
        code=ErrorCode.SHUTTING_DOWN,
    )


def _check_shutdown() -> None:
    """Raise ``shutdown_error`` once the service is shutting down (api/shutdown.py)."""
    if shutdown.requested():
        raise shutdown_error()


def failure_error(snapshot: Snapshot) -> APIError:
    """The 500 a failed generation answers with; the message carries the worker's reason."""
    reason = snapshot.error.message if snapshot.error else "unknown error"
    return APIError(500, f"Generation failed: {reason}", code=ErrorCode.GENERATION_FAILED)


async def follow(settings: Settings, generation_id: str) -> AsyncIterator[Snapshot]:
    """Snapshots of the row each time it changes, the last one final; raises the timeout
    APIError after ``settings.generation_timeout_s``. A follower that leaves before the final
    snapshot (a streaming client that disconnected, a timeout) ends the row: its decoding and
    verification stop. Once the service is shutting down it raises the 503 ``shutting_down``
    APIError within a second, and the row ends the same way."""
    redis_url = events_url(settings)
    changes = _poll(settings, generation_id) if redis_url is None else _listen(settings, redis_url, generation_id)
    final = False
    try:
        async for snapshot in changes:
            final = snapshot.final
            yield snapshot
    finally:
        if not final:
            # A client that disconnected cancels this generator; the shield lets the row be
            # ended anyway (under anyio every later await of a cancelled scope is cancelled too).
            error = SHUT_DOWN if shutdown.requested() else CLIENT_LEFT
            with anyio.CancelScope(shield=True):
                await run_in_threadpool(_abandon, settings.resolved_database_url, generation_id, error)


async def _poll(settings: Settings, generation_id: str) -> AsyncIterator[Snapshot]:
    """``follow`` by reading the row until it is final (nothing is published without Redis)."""
    url = settings.resolved_database_url
    deadline = time.monotonic() + settings.generation_timeout_s
    delay, last = FIRST_POLL_S, None
    while True:
        snapshot = await run_in_threadpool(_read, url, generation_id)
        fingerprint = (snapshot.status, snapshot.samples)
        if fingerprint != last:
            last = fingerprint
            yield snapshot
        if snapshot.final:
            return
        if time.monotonic() > deadline:
            await _time_out(settings, generation_id)
        _check_shutdown()
        await asyncio.sleep(delay)
        delay = min(delay * BACKOFF, MAX_POLL_S)


async def _time_out(settings: Settings, generation_id: str) -> None:
    await run_in_threadpool(_give_up, settings.resolved_database_url, generation_id, settings.generation_timeout_s)
    raise timeout_error(settings.generation_timeout_s)


async def _listen(settings: Settings, redis_url: str, generation_id: str) -> AsyncIterator[Snapshot]:
    """``follow`` from the row's pub/sub channel: subscribe, read the row, then apply events."""
    url = settings.resolved_database_url
    deadline = time.monotonic() + settings.generation_timeout_s
    client = aioredis.Redis.from_url(redis_url)
    pubsub = client.pubsub()
    try:
        await pubsub.subscribe(channel(settings, generation_id))
        view = Following(await run_in_threadpool(_read, url, generation_id))
        yield view.snapshot
        heard = time.monotonic()
        while not view.snapshot.final:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                await _time_out(settings, generation_id)
            _check_shutdown()
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=min(SHUTDOWN_CHECK_S, remaining))
            if message is None and time.monotonic() - heard < RESYNC_S:
                continue  # a subscribe confirmation (also answered with None), not silence
            heard = time.monotonic()
            event = None if message is None else GenerationEvent.model_validate_json(message["data"])
            if event is None or view.wants_row(event):
                changed = view.with_row(await run_in_threadpool(_read, url, generation_id))
            else:
                changed = view.with_event(event)
            if changed:
                yield view.snapshot
    finally:
        await pubsub.aclose()
        await client.aclose()


def merged_sample(have: GenerationSample | None, news: GenerationSample) -> GenerationSample:
    """An attempt as known from ``have`` and newer word ``news`` (the row or an event): a finished
    attempt's text is final; otherwise the longer text wins where it continues the shorter; a
    verdict or a cancellation, once known, stays."""
    if have is None:
        return news
    finished = have.finish_reason is not None and news.finish_reason is None
    decoded = have if finished else news
    longer = news.finish_reason is not None or (len(news.text) > len(have.text) and news.text.startswith(have.text))
    return news.model_copy(
        update={
            "text": news.text if longer and not finished else have.text,
            "finish_reason": decoded.finish_reason,
            "prompt_tokens": decoded.prompt_tokens,
            "completion_tokens": decoded.completion_tokens,
            "code": decoded.code,
            "verification": news.verification or have.verification,
            "cancelled": news.cancelled or have.cancelled,
        }
    )


def with_delta(sample: GenerationSample, offset: int, delta: str) -> GenerationSample | None:
    """``sample`` with the text ``delta`` that starts at character ``offset`` of its text: unchanged
    when it adds nothing new (a repeat, or the attempt is finished), None when it starts past the
    text (a gap: deltas before it are missing)."""
    if sample.finish_reason is not None or offset + len(delta) <= len(sample.text):
        return sample
    if offset > len(sample.text):
        return None
    return sample.model_copy(update={"text": sample.text + delta[len(sample.text) - offset :]})


@dataclass
class Following:
    """A follower's copy of a row: the snapshot it last read, changed by events since, and the
    deltas it could not apply yet (they start past the text it has)."""

    snapshot: Snapshot
    waiting: list[GenerationEvent] = field(default_factory=list)

    def wants_row(self, event: GenerationEvent) -> bool:
        """Whether to read the row rather than apply ``event``: it is final (usage, timings and
        error are in the row), or it says the row holds text this follower is missing."""
        return event.status in GENERATION_FINAL or (event.row and bool(self.waiting))

    def with_row(self, row: Snapshot) -> bool:
        """Take in a fresh read of the row; whether anything changed. A final row is the whole
        truth (and a confidence row's samples are not attempts), so it is taken as it is."""
        before = self.snapshot
        if row.final:
            self.snapshot, self.waiting = row, []
            return self.snapshot != before
        samples = self._merged(row.samples)
        status = row.status if STATUS_ORDER[row.status] >= STATUS_ORDER[before.status] else before.status
        self.snapshot = replace(row, status=status, samples=samples)
        self._apply_waiting()
        return self.snapshot != before

    def with_event(self, event: GenerationEvent) -> bool:
        """Apply one event; whether anything changed."""
        before = self.snapshot
        samples = self._merged(event.samples)
        if event.index is not None:
            self.waiting.append(event)
        status = before.status
        if event.status is not None and STATUS_ORDER[event.status] > STATUS_ORDER[status]:
            status = event.status
        self.snapshot = replace(before, status=status, samples=samples)
        self._apply_waiting()
        return self.snapshot != before

    def _merged(self, news: list[GenerationSample]) -> list[GenerationSample]:
        samples = list(self.snapshot.samples)
        for sample in news:
            samples.extend(GenerationSample(index=i) for i in range(len(samples), sample.index + 1))
            samples[sample.index] = merged_sample(samples[sample.index], sample)
        return samples

    def _apply_waiting(self) -> None:
        """Apply every waiting delta that now continues its attempt's text (in text order, so
        one delta makes room for the next); keep those that start past it."""
        samples = list(self.snapshot.samples)
        left = []
        for event in sorted(self.waiting, key=lambda e: (e.index or 0, e.offset)):
            index = event.index
            if index is None:  # only text deltas wait, and each names its attempt
                continue
            applied = with_delta(samples[index], event.offset, event.delta) if index < len(samples) else None
            if applied is None:
                left.append(event)
            else:
                samples[index] = applied
        self.waiting = left
        self.snapshot = replace(self.snapshot, samples=samples)


async def wait_final(settings: Settings, generation_id: str) -> Snapshot:
    """The row once it has succeeded; the failure or timeout APIError otherwise."""
    async for snapshot in follow(settings, generation_id):
        if snapshot.final:
            if snapshot.status == GenerationStatus.FAILED:
                raise failure_error(snapshot)
            return snapshot
    raise AssertionError("follow() ends with a final snapshot")


DISCONNECT_CHECK_S = 1.0  # how often a non-streaming request asks whether its client is still there


async def wait_answer(settings: Settings, generation_id: str, disconnected: Callable[[], Awaitable[bool]]) -> Snapshot:
    """``wait_final`` for a non-streaming request, given up once ``disconnected`` says the client
    left (asked every ``DISCONNECT_CHECK_S``): leaving ends the row (``follow``), so nothing goes on
    decoding or verifying for nobody. Raises APIError ``client_gone`` then (nobody reads it)."""
    waiting = asyncio.ensure_future(wait_final(settings, generation_id))
    try:
        while True:
            done, _ = await asyncio.wait({waiting}, timeout=DISCONNECT_CHECK_S)
            if done:
                return waiting.result()
            if await disconnected():
                raise APIError(
                    499, "The client disconnected before the answer was complete.", code=ErrorCode.CLIENT_GONE
                )
    finally:
        if not waiting.done():
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiting


def sse(data: Any, event: str | None = None) -> ServerSentEvent:
    """One server-sent event; ``data`` is JSON-encoded unless it is already a string."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return ServerSentEvent(data=payload, event=event, sep="\n")


DONE = sse("[DONE]")
