"""``cuset.verify_sample`` (cpu queue: tiers static, compile, cpu) and ``cuset.verify_gpu`` (infer
queue: tier gpu): verify one sample of a ``/v1/generate`` row against its problem.

Samples of one row are verified concurrently, each writing its result into the row's ``samples``
JSON; the write happens under a row lock so one result never overwrites another. The row turns
succeeded when every sample has its result.
"""

from __future__ import annotations

import time

from celery import shared_task
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from cuset_core.verify.result import Tier
from cuset_core.verify.run import verify
from cuset_core.verify.settings import VerifySettings
from db.models import Generation
from db.session import session_scope
from db.settings import Settings, get_settings


@shared_task(name="cuset.verify_sample")
def verify_sample(generation_id: str, index: int) -> None:
    _verify(generation_id, index)


@shared_task(name="cuset.verify_gpu")
def verify_gpu(generation_id: str, index: int) -> None:
    _verify(generation_id, index)


def service_verify_settings(settings: Settings, verify_settings: VerifySettings) -> VerifySettings:
    """``verify_settings`` with what the service keeps on disk hidden from candidates."""
    hidden = tuple(str(path) for path in settings.sandbox_hidden_paths())
    return verify_settings.model_copy(update={"limits": verify_settings.limits.model_copy(update={"hidden": hidden})})


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


def _verify(generation_id: str, index: int) -> None:
    settings = get_settings()
    url = settings.resolved_database_url
    with session_scope(url) as session:
        row = session.get(Generation, generation_id)
        if row is None or row.status != "verifying" or row.samples[index].get("verification") is not None:
            return  # finished, failed, or a redelivered message for a sample already verified
        problem, answer, tier = row.request["problem"], row.samples[index]["text"], row.request["verify"]
    checks = service_verify_settings(settings, VerifySettings(tier=Tier(tier)))
    result = verify(problem, answer, checks, cache_dir=settings.verify_cache_dir)
    with session_scope(url) as session:
        row = locked_generation(session, generation_id)
        if row is None or row.status != "verifying":
            return
        samples = [dict(s) for s in row.samples]
        samples[index]["verification"] = result.model_dump(mode="json")
        row.samples = samples
        if all(s.get("verification") is not None for s in samples):
            now = time.time()
            timings = dict(row.timings or {})
            timings["verify_s"] = round(now - timings.get("decoded_at", now), 4)
            timings["total_s"] = round(now - row.created_at, 4)
            row.timings, row.status, row.finished_at = timings, "succeeded", now
