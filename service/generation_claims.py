"""Which Generation rows a decoding task takes: the row it was sent for, claimed atomically
(``queued -> running``), so a redelivered message, or the task of a row another task already
decoded in its batch, finds nothing to do; and its batch mates.

A row that is neither streamed nor stopped at its first pass takes up to
``generation_batch_max - 1`` other queued, batchable, unseeded rows with the same model and
decoding settings (``gather_batch``), decoded in one ``sampling.generate`` call; it waits up to
``generation_batch_wait_s`` for them, since requests sent together reach the queue some
milliseconds apart. Every row's decoding is capped at ``max_generation_s`` seconds from its
claim (a repair's from its start): ``Claimed.deadline``.

A repair attempt (appended when a verified attempt failed, see service/generation_settle.py) is
decoded from a follow-up turn: the problem, the failed answer and the verifier's error
(``claim_repair``). The row stays ``verifying`` while its repairs are decoded and verified.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from cuset_core.generation.prompts import repair_messages
from db.generation_rows import generation_request, load_samples
from db.generations import GenerationRequest, GenerationSample, GenerationTimings
from db.models import Generation
from db.session import rows_changed, session_scope
from db.settings import Settings
from db.statuses import GENERATION_FINAL, GenerationKind, GenerationStatus

BATCH_POLL_S = 0.02  # how often the queue is looked at again while a batch gathers
BATCH_KEYS = ("spec", "form", "n", "temperature", "top_p", "max_tokens", "stop")


@dataclass(frozen=True)
class Claimed:
    """What the task needs of a claimed row (plain data: it outlives the session)."""

    id: str
    model: str
    kind: GenerationKind
    request: GenerationRequest
    created_at: float
    deadline: float = float("inf")  # time.monotonic() past which its decoding stops (max_generation_s)

    @property
    def verifying(self) -> bool:
        return self.kind == GenerationKind.GENERATE and self.request.verify != "none"

    @property
    def stops_at_fence(self) -> bool:
        """Whether decoding ends after the answer's first code block: ``/v1/generate`` asks for
        one block and scores only the first, so later tokens are wasted."""
        return self.kind == GenerationKind.GENERATE


def claim(session: Session, generation_id: str, settings: Settings) -> Claimed | None:
    """Mark the row running if it is still queued; None when someone else has it. Its decoding
    may take ``max_generation_s`` from now."""
    claimed = rows_changed(
        session,
        update(Generation)
        .where(Generation.id == generation_id, Generation.status == GenerationStatus.QUEUED)
        # started_at: a request that ends before its decoding does (the first passing attempt)
        # still gets its queue and generation times (db.generations.finish).
        .values(status=GenerationStatus.RUNNING, timings=GenerationTimings(started_at=time.time())),
    )
    if claimed != 1:
        return None
    row = session.get_one(Generation, generation_id)
    return Claimed(
        row.id,
        row.model,
        GenerationKind(row.kind),
        generation_request(row),
        row.created_at,
        time.monotonic() + settings.max_generation_s,
    )


def claim_repair(settings: Settings, generation_id: str, index: int) -> tuple[Claimed, GenerationSample, list] | None:
    """The row, its repair attempt ``index`` and the follow-up conversation to decode it from:
    the failed attempt it repairs and its error. None when the row ended, or the attempt is
    done or cancelled (a redelivered message, or the request moved on)."""
    with session_scope(settings.resolved_database_url) as session:
        stored = session.get(Generation, generation_id)
        if stored is None or stored.status in GENERATION_FINAL or stored.status == GenerationStatus.QUEUED:
            return None
        row = Claimed(
            stored.id,
            stored.model,
            GenerationKind(stored.kind),
            generation_request(stored),
            stored.created_at,
            time.monotonic() + settings.max_generation_s,
        )
        samples = load_samples(session, generation_id)
    attempt = samples[index] if index < len(samples) else None
    if attempt is None or attempt.repair_of is None or attempt.finish_reason is not None or attempt.cancelled:
        return None
    failed = samples[attempt.repair_of]
    if failed.verification is None:
        return None  # only a verified failure gets a repair (settle decides)
    return row, attempt, repair_messages(row.request.prompts[attempt.prompt_index], failed.text, failed.verification)


def _batchable(request: GenerationRequest) -> bool:
    # A seed asks for reproducible samples, which sharing a batch (padding, RNG draws) would break.
    return not request.sequential and request.seed is None


def _batch_key(request: GenerationRequest) -> dict:
    return request.model_dump(include=set(BATCH_KEYS))


def gather_batch(url: str, lead: Claimed, limit: int, settings: Settings) -> list[Claimed]:
    """Claim up to ``limit`` batch mates of ``lead``; while the batch has room, keep looking
    (every ``BATCH_POLL_S``) until ``generation_batch_wait_s`` pass without a new one."""
    if limit < 1 or not _batchable(lead.request):
        return []
    mates = _claim_batch(url, lead, limit, settings)
    deadline = time.monotonic() + settings.generation_batch_wait_s
    while len(mates) < limit and time.monotonic() < deadline:
        time.sleep(BATCH_POLL_S)
        more = _claim_batch(url, lead, limit - len(mates), settings)
        if more:
            mates += more
            deadline = time.monotonic() + settings.generation_batch_wait_s
    return mates


def _claim_batch(url: str, lead: Claimed, limit: int, settings: Settings) -> list[Claimed]:
    """Claim up to ``limit`` queued rows that can be decoded in one batch with ``lead``."""
    key = _batch_key(lead.request)
    with session_scope(url) as session:
        # SKIP LOCKED (Postgres): rows another task is claiming right now are left to it.
        candidates = session.scalars(
            select(Generation)
            .where(
                Generation.status == GenerationStatus.QUEUED, Generation.model == lead.model, Generation.id != lead.id
            )
            .order_by(Generation.created_at)
            .limit(4 * limit)
            .with_for_update(skip_locked=True)
        ).all()
        requests = [(row, row.request) for row in candidates if isinstance(row.request, GenerationRequest)]
        mates = [row for row, request in requests if _batchable(request) and _batch_key(request) == key]
        claimed = [c for row in mates[:limit] if (c := claim(session, row.id, settings)) is not None]
    return claimed


def ended_rows(url: str, ids: list[str]) -> set[str]:
    """Those of ``ids`` whose rows are final (nobody waits for their decoding any more)."""
    with session_scope(url) as session:
        return set(
            session.scalars(
                select(Generation.id).where(Generation.id.in_(ids), Generation.status.in_(GENERATION_FINAL))
            )
        )
