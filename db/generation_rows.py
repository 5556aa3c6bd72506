"""A Generation's rows as the workers and the API change them: its attempts (``load_samples``,
``save_samples``) and the row locked for a change (``locked_generation``). The types they read
and write are in ``db.generations``; what a verified request does next is
service/generation_settle.py's."""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from db.generations import GenerationRequest, GenerationSample
from db.models import Generation, GenerationSampleRow

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
