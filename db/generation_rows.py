"""A Generation's rows as the workers and the API change them: its attempts (``load_samples``,
``save_samples``), the row locked for a change (``locked_generation``), and a verified request
moved on (``settle``: store, cancel, append repairs, ``finish``; ``decode_repairs`` after the
commit). The types they read and write are in ``db.generations``."""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from db.dispatch import send_generate_repair
from db.generations import GenerationRequest, GenerationSample, GenerationTimings, NextSteps, next_steps, usage_of
from db.models import Generation, GenerationSampleRow
from db.settings import Settings
from db.statuses import GenerationStatus

_SAMPLE_FIELDS = tuple(GenerationSample.model_fields)


def load_samples(session: Session, generation_id: str) -> list[GenerationSample]:
    """Every attempt of the generation, by index (``GenerationSampleRow`` rows)."""
    rows = session.scalars(
        select(GenerationSampleRow)
        .where(GenerationSampleRow.generation_id == generation_id)
        .order_by(GenerationSampleRow.index)
        .execution_options(populate_existing=True)
    )
    return [GenerationSample.model_validate(row, from_attributes=True) for row in rows]


def save_samples(session: Session, generation_id: str, samples: list[GenerationSample]) -> None:
    """Write ``samples`` (some or all attempts) into their rows, adding the rows that are new."""
    if not samples:
        return
    stored = {
        row.index: row
        for row in session.scalars(
            select(GenerationSampleRow).where(
                GenerationSampleRow.generation_id == generation_id,
                GenerationSampleRow.index.in_([sample.index for sample in samples]),
            )
        )
    }
    for sample in samples:
        row = stored.get(sample.index)
        if row is None:
            row = GenerationSampleRow(generation_id=generation_id, index=sample.index)
            session.add(row)
        for name in _SAMPLE_FIELDS:
            setattr(row, name, getattr(sample, name))


def generation_request(row: Generation) -> GenerationRequest:
    """The request of an inference row (every kind but ``confidence``)."""
    if not isinstance(row.request, GenerationRequest):
        raise TypeError(f"generation {row.id} is a {row.kind} request, not an inference one")
    return row.request


def locked_generation(session: Session, generation_id: str) -> Generation | None:
    """The row, locked for the rest of the transaction (``SELECT ... FOR UPDATE``)."""
    if session.get_bind().dialect.name == "sqlite":
        # SQLite has no row locks: a no-op write takes the database's write lock first, so the
        # read below sees every committed update and nobody writes until this transaction ends.
        session.execute(update(Generation).where(Generation.id == generation_id).values(status=Generation.status))
    return session.scalars(
        select(Generation)
        .where(Generation.id == generation_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one_or_none()


def finish(row: Generation, now: float, samples: list[GenerationSample] | None = None) -> None:
    """Mark a verified request succeeded, with its queue, generation, verification and total time.

    A request the first passing attempt ends while later attempts are still to be decoded has no
    ``decoded_at``: its verification time is then the attempts' own verification times, and its
    generation time the rest of the time since decoding started."""
    timings = row.timings or GenerationTimings()
    if timings.decoded_at is not None:
        timings = timings.model_copy(update={"verify_s": round(now - timings.decoded_at, 4)})
    elif timings.started_at is not None:
        verified = [s.verification for s in samples or [] if s.verification is not None]
        verify_s = sum(result.timings_s.get("total", 0.0) for result in verified)
        timings = timings.model_copy(
            update={
                "queue_s": round(timings.started_at - row.created_at, 4),
                "verify_s": round(verify_s, 4),
                "generate_s": round(max(0.0, now - timings.started_at - verify_s), 4),
            }
        )
    timings = timings.model_copy(update={"total_s": round(now - row.created_at, 4)})
    row.timings, row.status, row.finished_at = timings, GenerationStatus.SUCCEEDED, now


def settle(
    session: Session, row: Generation, request: GenerationRequest, samples: list[GenerationSample], now: float
) -> NextSteps:
    """Apply ``next_steps`` to the locked ``row`` holding ``samples`` (changed by the caller, who
    names them all in ``samples``): store them, cancel, append repair attempts, finish. The caller
    enqueues the repairs' decoding after the transaction commits. A row still ``running`` is still
    decoding its drawn samples."""
    steps = next_steps(request, samples, decoding=row.status == GenerationStatus.RUNNING)
    for index in steps.cancel:
        samples[index].cancelled = True
    samples.extend(steps.repairs)
    save_samples(session, row.id, samples)
    row.usage = usage_of(samples)
    if steps.finished:
        finish(row, now, samples)
    return steps


def decode_repairs(settings: Settings, generation_id: str, repairs: list[GenerationSample]) -> None:
    """Send the repair attempts ``settle`` appended to ``cuset.generate_repair`` (after the commit)."""
    for repair in repairs:
        send_generate_repair(settings, generation_id, repair.index)
