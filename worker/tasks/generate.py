"""``cuset.generate``: decode one Generation row, together with queued rows it can share a batch
with (service/generation_claims.py); ``cuset.generate_repair``: decode one repair attempt of a
verified row. The model decodes here (worker/local_decoding.py) or at the engine that serves it
(worker/engine_decoding.py); what the decoding writes, and what follows it (done, or
verification), is service/generation_records.py's.
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack

from celery import shared_task

from db.engine_routes import EngineRoute
from db.errors import ErrorCode
from db.generations import GenerationSample
from db.session import session_scope
from db.settings import Settings
from service.dispatch import TaskName
from service.generation_claims import Claimed, claim, claim_repair, gather_batch
from service.generation_events import fail_generations
from service.generation_records import DecodeOne, decode_sequentially, record_decoded, verify_later
from worker.engine_decoding import engine_client, engine_samples, engine_stream_sample
from worker.local_decoding import decode_batch, load_model_for, stream_sample
from worker.runtime import RuntimeTask

log = logging.getLogger(__name__)


@shared_task(name=TaskName.GENERATE, base=RuntimeTask, bind=True)
def generate(self: RuntimeTask, generation_id: str) -> None:
    """Decode the row ``generation_id`` (and batch mates); record samples, usage and timings and
    send samples to verification."""
    settings = self.runtime.settings
    url = settings.resolved_database_url
    with session_scope(url) as session:
        lead = claim(session, generation_id, settings)
    if lead is None:
        return  # decoded in another task's batch, redelivered, or given up by the API
    started = time.time()
    if lead.request.engine is not None:
        _generate_with_engine(settings, lead, lead.request.engine, started)
        return
    with ExitStack() as in_use:
        loaded = load_model_for(in_use, settings, self.runtime.loaded_models(), lead)
        if loaded is None:
            return
        model, tokenizer = loaded
        sequential = lead.request.sequential
        mates = [] if sequential else gather_batch(url, lead, settings.generation_batch_max - 1, settings)
        rows = [lead, *mates]
        try:
            if sequential:
                decode_sequentially(
                    settings,
                    lead,
                    lambda sample, prompt: stream_sample(settings, model, tokenizer, lead, sample, prompt),
                )
                results: list[list[GenerationSample] | None] = [None]  # already in the row
            else:
                results = list(decode_batch(model, tokenizer, rows, url))
        except Exception as exc:  # noqa: BLE001 - a decoding failure fails the rows, never the worker
            log.exception("decoding %s failed", [row.id for row in rows])
            fail_generations(
                settings, [row.id for row in rows], ErrorCode.DECODE_FAILED, f"{type(exc).__name__}: {exc}"
            )
            return
    decoded = time.time()
    for row, samples in zip(rows, results):
        record_decoded(settings, row, samples, started, decoded, batch_size=len(rows))


def _generate_with_engine(settings: Settings, row: Claimed, engine: EngineRoute, started: float) -> None:
    """Decode ``row`` through its engine and record it as the in-process path does."""
    try:
        with engine_client(engine) as client:
            if row.request.sequential:
                decode_sequentially(
                    settings, row, lambda sample, prompt: engine_stream_sample(settings, client, row, sample, prompt)
                )
                samples = None  # already in the row
            else:
                samples = engine_samples(client, row)
    except Exception as exc:  # noqa: BLE001 - an engine failure fails the row, never the worker
        log.exception("decoding %s at %s failed", row.id, engine.url)
        fail_generations(settings, [row.id], ErrorCode.DECODE_FAILED, f"{type(exc).__name__}: {exc}")
        return
    record_decoded(settings, row, samples, started, time.time(), batch_size=1)


@shared_task(name=TaskName.GENERATE_REPAIR, base=RuntimeTask, bind=True)
def generate_repair(self: RuntimeTask, generation_id: str, index: int) -> None:
    """Decode repair attempt ``index``: the failed attempt it repairs and its error as a follow-up
    turn; then verify it. Nothing to do when the row ended or the attempt is done or cancelled."""
    settings = self.runtime.settings
    due = claim_repair(settings, generation_id, index)
    if due is None:
        return  # a redelivered message, or the request moved on
    row, attempt, messages = due
    with ExitStack() as in_use:
        engine = row.request.engine
        if engine is not None:
            client = in_use.enter_context(engine_client(engine))
            decode_one: DecodeOne = lambda sample, prompt: engine_stream_sample(settings, client, row, sample, prompt)  # noqa: E731
        else:
            loaded = load_model_for(in_use, settings, self.runtime.loaded_models(), row)
            if loaded is None:
                return
            model, tokenizer = loaded
            decode_one = lambda sample, prompt: stream_sample(settings, model, tokenizer, row, sample, prompt)  # noqa: E731
        try:
            done = decode_one(attempt, messages)
        except Exception as exc:  # noqa: BLE001 - a decoding failure fails the row, never the worker
            log.exception("decoding repair %d of %s failed", index, row.id)
            fail_generations(settings, [row.id], ErrorCode.DECODE_FAILED, f"{type(exc).__name__}: {exc}")
            return
    if done is not None:
        verify_later(settings, row, [done.index])
