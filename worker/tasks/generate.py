"""``cuset.generate``: decode one Generation row, together with queued rows it can share a batch
with; or, given an attempt index, decode one repair attempt of a verified row.

The row is claimed atomically (queued -> running), so a redelivered message, or the task of a row
another task already decoded in its batch, finds nothing to do. A row that is neither streamed
nor stopped at its first pass takes up to ``generation_batch_max - 1`` other queued, batchable,
unseeded rows with the same model and decoding settings and decodes them in one
``sampling.generate`` call; it waits up to ``generation_batch_wait_s`` for them, since requests
sent together reach the queue some milliseconds apart. A streamed row, or one that stops at its first passing kernel, is
decoded alone, one sample after another; each finished sample goes to verification at once, and
decoding stops when a verified sample has already ended the request. Its partial text goes out
as it grows: with Redis, as text deltas on the row's pub/sub channel about every ``DELTA_S``
seconds (db/generation_events.py), and into ``samples[i].text`` only every ``ROW_FLUSH_S``
seconds, so a follower that joins late can catch up from the row; without Redis (the embedded
SQLite mode, where the API polls the row) into the row every ``FLUSH_S`` seconds.

A repair attempt (appended by the verify task, see db/generations.py) is decoded from a follow-up
turn: the problem, the failed answer and the verifier's error. The row stays ``verifying`` while
its repairs are decoded and verified.

The row's ``request`` and ``samples`` are db.generations' ``GenerationRequest`` and
``GenerationSample``. Sample ``k`` of the drawn samples is sample ``k % n`` of prompt ``k // n``.
Every write to ``samples`` after the claim happens under the row lock, since verify tasks write
into the same JSON concurrently.
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from dataclasses import dataclass

import torch
from celery import shared_task
from sqlalchemy import select, update
from transformers import StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from cuset_core.generation.extract import answer_code
from cuset_core.generation.prompts import repair_messages
from cuset_core.generation.sampling import (
    GeneratedText,
    completion_from_tokens,
    decoding_kwargs,
    render_prompt,
    seeded,
    stop_token_ids,
)
from cuset_core.generation.sampling import (
    generate as generate_batch,
)
from db.dispatch import enqueue
from db.generation_events import GenerationEvent, publish, publishing
from db.generations import (
    GenerationRequest,
    GenerationSample,
    decode_repairs,
    dump_samples,
    locked_generation,
    read_samples,
    settle,
    usage_of,
)
from db.models import Generation
from db.session import session_scope
from db.settings import Settings, get_settings
from db.statuses import GENERATION_FINAL, GenerationStatus
from worker.device_share import hold
from worker.model_cache import models

log = logging.getLogger(__name__)

FLUSH_S = 0.1  # how often a streaming sample's partial text reaches the row when nothing is published
DELTA_S = 0.02  # how often a streaming sample's new text is published (with Redis)
ROW_FLUSH_S = 1.0  # how often it reaches the row then: for followers that join late
BATCH_POLL_S = 0.02  # how often the queue is looked at again while a batch gathers
BATCH_KEYS = ("spec", "form", "n", "temperature", "top_p", "max_tokens", "stop")
DECODED = {"text", "finish_reason", "prompt_tokens", "completion_tokens", "code"}  # what decoding writes


@dataclass(frozen=True)
class Claimed:
    """What the task needs of a claimed row (plain data: it outlives the session)."""

    id: str
    model: str
    kind: str
    request: GenerationRequest
    created_at: float

    @property
    def verifying(self) -> bool:
        return self.kind == "generate" and self.request.verify != "none"


@shared_task(name="cuset.generate")
def generate(generation_id: str, attempt: int | None = None) -> None:
    """Decode the row ``generation_id`` (and batch mates), or its repair attempt ``attempt``;
    record samples, usage and timings and send samples to verification."""
    if attempt is not None:
        _repair(generation_id, attempt)
        return
    settings = get_settings()
    url = settings.resolved_database_url
    with session_scope(url) as session:
        lead = _claim(session, generation_id)
    if lead is None:
        return  # decoded in another task's batch, redelivered, or given up by the API
    started = time.time()
    hold(settings, models)
    with ExitStack() as in_use:
        try:
            model, tokenizer = in_use.enter_context(models.use(lead.request.spec, lead.model))
        except Exception as exc:  # noqa: BLE001 - any load failure is the request's failure
            log.exception("loading model %s failed", lead.request.spec)
            _fail(settings, [lead.id], "model_load_failed", f"could not load model {lead.request.spec!r}: {exc}")
            return
        sequential = lead.request.sequential
        mates = [] if sequential else _gather_batch(url, lead, settings.generation_batch_max - 1, settings)
        rows = [lead, *mates]
        try:
            if sequential:
                _decode_sequentially(settings, model, tokenizer, lead)
                results: list[list[GenerationSample] | None] = [None]  # already in the row
            else:
                results = _decode_batch(model, tokenizer, rows)
        except Exception as exc:  # noqa: BLE001 - a decoding failure fails the rows, never the worker
            log.exception("decoding %s failed", [row.id for row in rows])
            _fail(settings, [row.id for row in rows], "decode_failed", f"{type(exc).__name__}: {exc}")
            return
    decoded = time.time()
    for row, samples in zip(rows, results):
        _record(settings, row, samples, started, decoded, batch_size=len(rows))


def _claim(session, generation_id: str) -> Claimed | None:
    """Mark the row running if it is still queued; None when someone else has it."""
    claimed = session.execute(
        update(Generation)
        .where(Generation.id == generation_id, Generation.status == GenerationStatus.QUEUED)
        .values(status=GenerationStatus.RUNNING)
    ).rowcount
    if claimed != 1:
        return None
    row = session.get(Generation, generation_id)
    return Claimed(row.id, row.model, row.kind, GenerationRequest.model_validate(row.request), row.created_at)


def _batchable(request: GenerationRequest) -> bool:
    # A seed asks for reproducible samples, which sharing a batch (padding, RNG draws) would break.
    return not request.sequential and request.seed is None


def _batch_key(request: GenerationRequest) -> dict:
    return request.model_dump(include=set(BATCH_KEYS))


def _gather_batch(url: str, lead: Claimed, limit: int, settings: Settings) -> list[Claimed]:
    """Claim up to ``limit`` batch mates of ``lead``; while the batch has room, keep looking
    (every ``BATCH_POLL_S``) until ``generation_batch_wait_s`` pass without a new one."""
    if limit < 1 or not _batchable(lead.request):
        return []
    mates = _claim_batch(url, lead, limit)
    deadline = time.monotonic() + settings.generation_batch_wait_s
    while len(mates) < limit and time.monotonic() < deadline:
        time.sleep(BATCH_POLL_S)
        more = _claim_batch(url, lead, limit - len(mates))
        if more:
            mates += more
            deadline = time.monotonic() + settings.generation_batch_wait_s
    return mates


def _claim_batch(url: str, lead: Claimed, limit: int) -> list[Claimed]:
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
        requests = [(row, GenerationRequest.model_validate(row.request)) for row in candidates]
        mates = [row for row, request in requests if _batchable(request) and _batch_key(request) == key]
        claimed = [c for row in mates[:limit] if (c := _claim(session, row.id)) is not None]
    return claimed


class _RawTemplate:
    """The tokenizer with an identity chat template: ``sampling.generate`` then continues raw text."""

    def __init__(self, tokenizer) -> None:
        self._tokenizer = tokenizer

    def __getattr__(self, name: str):
        return getattr(self._tokenizer, name)

    def __call__(self, *args, **kwargs):
        return self._tokenizer(*args, **kwargs)

    def apply_chat_template(self, messages: list[dict], **_ignored) -> str:
        return messages[0]["content"]


def _decode_batch(model, tokenizer, rows: list[Claimed]) -> list[list[GenerationSample]]:
    """Samples of every row, decoded in one batch (the rows share form and decoding settings)."""
    request = rows[0].request
    raw = request.form == "raw"
    conversations = [[{"role": "user", "content": p}] if raw else p for row in rows for p in row.request.prompts]
    outputs = generate_batch(
        model,
        _RawTemplate(tokenizer) if raw else tokenizer,
        conversations,
        n=request.n,
        temperature=request.temperature,
        top_p=request.top_p,
        max_new_tokens=request.max_tokens,
        seed=request.seed,
    )
    results, position = [], 0
    for row in rows:
        per_prompt = outputs[position : position + len(row.request.prompts)]
        position += len(row.request.prompts)
        results.append(
            [
                _finished(row, GenerationSample(index=p * row.request.n + j, prompt_index=p), generated)
                for p, samples in enumerate(per_prompt)
                for j, generated in enumerate(samples)
            ]
        )
    return results


def _finished(row: Claimed, sample: GenerationSample, generated: GeneratedText) -> GenerationSample:
    """``sample`` with its decoded answer: stop strings applied, code extracted for /v1/generate."""
    text, stopped = _cut_at_stop(generated.text, row.request.stop)
    return sample.model_copy(
        update={
            "text": text,
            "finish_reason": "stop" if stopped else generated.finish_reason,
            "prompt_tokens": generated.prompt_tokens,
            "completion_tokens": generated.completion_tokens,
            "code": answer_code(text).code if row.kind == "generate" else None,
        }
    )


def _cut_at_stop(text: str, stops: list[str]) -> tuple[str, bool]:
    """``text`` up to the first stop string (excluded), and whether one was found."""
    cuts = [i for i in (text.find(s) for s in stops) if i >= 0]
    return (text[: min(cuts)], True) if cuts else (text, False)


class _TokenStreamer(BaseStreamer):
    """Collects generated token ids and hands the list so far to ``on_tokens``."""

    def __init__(self, on_tokens) -> None:
        self.tokens: list[int] = []
        self._on_tokens = on_tokens
        self._prompt_seen = False

    def put(self, value) -> None:
        if not self._prompt_seen:  # generate() first passes the prompt ids
            self._prompt_seen = True
            return
        self.tokens.extend(value.reshape(-1).tolist())
        self._on_tokens(self.tokens)

    def end(self) -> None:
        pass


class _Ended(StoppingCriteria):
    """Stops decoding once the row has ended (another attempt passed first, or it failed)."""

    def __init__(self) -> None:
        self.ended = False

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.BoolTensor:
        return torch.full((input_ids.shape[0],), self.ended, dtype=torch.bool, device=input_ids.device)


def _decode_one(
    settings: Settings, model, tokenizer, row: Claimed, sample: GenerationSample, prompt
) -> GenerationSample | None:
    """Decode ``sample`` of ``row`` from ``prompt`` (a message list, or a text for raw rows), its
    partial text sent to followers as it grows (see the module docstring); the finished sample,
    or None when the row ended meanwhile."""
    request, url = row.request, settings.resolved_database_url
    stops = request.stop
    stop_ids = stop_token_ids(model, tokenizer)
    device = next(model.parameters()).device
    kwargs = decoding_kwargs(request.temperature, request.top_p, request.max_tokens)
    holdback = max((len(s) for s in stops), default=1) - 1  # a partial stop string is not sent yet
    text = prompt if request.form == "raw" else render_prompt(tokenizer, prompt)
    encoded = tokenizer([text], return_tensors="pt", add_special_tokens=False).to(device)
    ended = _Ended()
    tick_s, row_s = (DELTA_S, ROW_FLUSH_S) if publishing(settings) else (FLUSH_S, FLUSH_S)
    sent = ""  # the partial text followers have: published deltas and the row's copy both end here
    last_tick = last_row = time.monotonic()

    def flush_partial(tokens: list[int]) -> None:
        nonlocal sent, last_tick, last_row
        now = time.monotonic()
        if ended.ended or now - last_tick < tick_s:
            return
        last_tick = now
        partial = completion_from_tokens(tokens, 0, stop_ids, tokenizer).text.rstrip("\ufffd")  # no half characters
        partial, stopped = _cut_at_stop(partial, stops)
        shown = partial if stopped else partial[: len(partial) - holdback]
        if len(shown) > len(sent) and shown.startswith(sent):
            publish(settings, row.id, GenerationEvent(index=sample.index, offset=len(sent), delta=shown[len(sent) :]))
            sent = shown
        if now - last_row >= row_s:
            last_row = now
            ended.ended = _write_sample(url, row.id, sample.model_copy(update={"text": sent})) is None
            publish(settings, row.id, GenerationEvent(row=True))

    seed = None if request.seed is None else request.seed + sample.index % request.n
    streamer = _TokenStreamer(flush_partial)
    with torch.no_grad(), seeded(seed, device):
        model.generate(
            **encoded,
            **kwargs,
            streamer=streamer,
            stopping_criteria=StoppingCriteriaList([ended]),
            pad_token_id=tokenizer.pad_token_id,
        )
    if ended.ended:
        return None
    done = _finished(
        row, sample, completion_from_tokens(streamer.tokens, encoded["input_ids"].shape[1], stop_ids, tokenizer)
    )
    stored = _write_sample(url, row.id, done)
    if stored is None:
        return None
    publish(settings, row.id, GenerationEvent(samples=[stored]))
    return done


def _decode_sequentially(settings: Settings, model, tokenizer, row: Claimed) -> None:
    """Decode the samples of a streamed or first-pass row one by one; each finished sample goes
    to verification at once. Stops early when the row has ended."""
    request, url = row.request, settings.resolved_database_url
    samples = [
        GenerationSample(index=p * request.n + j, prompt_index=p)
        for p in range(len(request.prompts))
        for j in range(request.n)
    ]
    with session_scope(url) as session:  # the row is ours alone until its first sample is verified
        session.execute(update(Generation).where(Generation.id == row.id).values(samples=dump_samples(samples)))
    publish(settings, row.id, GenerationEvent(samples=samples, status=GenerationStatus.RUNNING))
    for sample in samples:
        done = _decode_one(settings, model, tokenizer, row, sample, request.prompts[sample.prompt_index])
        if done is None:
            return
        if row.verifying:
            _verify_later(settings, row, [done.index])


def _write_sample(url: str, generation_id: str, sample: GenerationSample) -> GenerationSample | None:
    """Write the decoded fields of ``sample`` into the row, under its lock; the attempt as now
    stored, or None when the row has ended or the attempt was cancelled meanwhile (the sample is
    then not written)."""
    with session_scope(url) as session:
        row = locked_generation(session, generation_id)
        if row is None or row.status in GENERATION_FINAL:
            return None
        samples = read_samples(row.samples)
        if samples[sample.index].cancelled:
            return None
        samples[sample.index] = samples[sample.index].model_copy(update=sample.model_dump(include=DECODED))
        row.samples = dump_samples(samples)
        row.usage = usage_of(samples)
        return samples[sample.index]


def _verify_later(settings: Settings, row: Claimed, indexes: list[int]) -> None:
    task = "cuset.verify_gpu" if row.request.verify == "gpu" else "cuset.verify_sample"
    for index in indexes:
        enqueue(settings, task, row.id, index)


def _record(
    settings: Settings,
    row: Claimed,
    samples: list[GenerationSample] | None,
    started: float,
    decoded: float,
    batch_size: int,
) -> None:
    """Finish decoding a row (``samples`` from a batch; None when they were written one by one):
    store usage and timings, then finish it or hand its samples to verification."""
    timings = {
        "queue_s": round(started - row.created_at, 4),
        "generate_s": round(decoded - started, 4),
        "batch_size": batch_size,
        "decoded_at": decoded,
    }
    batched = samples is not None
    with session_scope(settings.resolved_database_url) as session:
        stored = locked_generation(session, row.id)
        if stored is None or stored.status == GenerationStatus.FAILED:
            return
        stored.timings = timings | (stored.timings or {})
        if samples is None:
            samples = read_samples(stored.samples)
        else:
            stored.samples = dump_samples(samples)
        stored.usage = usage_of(samples)
        if stored.status in GENERATION_FINAL:
            return  # a verified sample ended the request while later ones were decoded
        steps = None
        if not row.verifying:
            stored.status, stored.finished_at = GenerationStatus.SUCCEEDED, decoded
            stored.timings = stored.timings | {"total_s": round(decoded - row.created_at, 4)}
        else:
            stored.status = GenerationStatus.VERIFYING
            steps = settle(stored, row.request, samples, decoded)
        status = stored.status
    publish(settings, row.id, GenerationEvent(samples=samples if batched else [], status=status))
    if steps is None:
        return
    if not row.request.sequential:
        _verify_later(settings, row, [sample.index for sample in samples])
    decode_repairs(settings, row.id, steps.repairs)


def _repair(generation_id: str, index: int) -> None:
    """Decode repair attempt ``index``: the failed attempt it repairs and its error as a follow-up
    turn; then verify it. Nothing to do when the row ended or the attempt is done or cancelled."""
    settings = get_settings()
    url = settings.resolved_database_url
    with session_scope(url) as session:
        stored = session.get(Generation, generation_id)
        if stored is None or stored.status in GENERATION_FINAL or stored.status == GenerationStatus.QUEUED:
            return
        row = Claimed(
            stored.id, stored.model, stored.kind, GenerationRequest.model_validate(stored.request), stored.created_at
        )
        samples = read_samples(stored.samples)
    attempt = samples[index] if index < len(samples) else None
    if attempt is None or attempt.repair_of is None or attempt.finish_reason is not None or attempt.cancelled:
        return  # a redelivered message, or the request moved on
    failed = samples[attempt.repair_of]
    messages = repair_messages(row.request.prompts[attempt.prompt_index], failed.text, failed.verification)
    with ExitStack() as in_use:
        try:
            model, tokenizer = in_use.enter_context(models.use(row.request.spec, row.model))
        except Exception as exc:  # noqa: BLE001 - any load failure is the request's failure
            log.exception("loading model %s failed", row.request.spec)
            _fail(settings, [row.id], "model_load_failed", f"could not load model {row.request.spec!r}: {exc}")
            return
        try:
            done = _decode_one(settings, model, tokenizer, row, attempt, messages)
        except Exception as exc:  # noqa: BLE001 - a decoding failure fails the row, never the worker
            log.exception("decoding repair %d of %s failed", index, row.id)
            _fail(settings, [row.id], "decode_failed", f"{type(exc).__name__}: {exc}")
            return
    if done is not None:
        _verify_later(settings, row, [done.index])


def _fail(settings: Settings, ids: list[str], code: str, message: str) -> None:
    with session_scope(settings.resolved_database_url) as session:
        session.execute(
            update(Generation)
            .where(
                Generation.id.in_(ids),
                Generation.status.in_((GenerationStatus.QUEUED, GenerationStatus.RUNNING, GenerationStatus.VERIFYING)),
            )
            .values(status=GenerationStatus.FAILED, error={"code": code, "message": message}, finished_at=time.time())
        )
    for generation_id in ids:
        publish(settings, generation_id, GenerationEvent(status=GenerationStatus.FAILED))
