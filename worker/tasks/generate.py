"""``cuset.generate``: decode one Generation row, together with queued rows it can share a batch
with; ``cuset.generate_repair``: decode one repair attempt of a verified row.

The row is claimed atomically (queued -> running), so a redelivered message, or the task of a row
another task already decoded in its batch, finds nothing to do. A row that is neither streamed
nor stopped at its first pass takes up to ``generation_batch_max - 1`` other queued, batchable,
unseeded rows with the same model and decoding settings and decodes them in one
``sampling.generate`` call; it waits up to ``generation_batch_wait_s`` for them, since requests
sent together reach the queue some milliseconds apart. A streamed row, or one that stops at its
first passing kernel, is decoded alone, one sample after another; each finished sample goes to
verification at once, and decoding stops when a verified sample has already ended the request.
Its partial text goes out as it grows (``_Partial``): with Redis, as text deltas on the row's
pub/sub channel about every ``DELTA_S`` seconds (service/generation_events.py), and into the
attempt's row (its ``text``) only every ``ROW_FLUSH_S`` seconds, so a follower that joins late can
catch up from the database; without Redis (the embedded SQLite mode, where the API polls) into
the attempt's row every ``FLUSH_S`` seconds.

Every row's decoding is capped at ``max_generation_s`` seconds from its claim (a repair's from its
start): the attempts still decoding then end with finish_reason ``length``. A batch asks the
database every ``ENDED_CHECK_S`` whether its rows are still wanted: the samples of a row that ended
meanwhile (a non-streamed request whose client left, a timeout) stop decoding there, while the
rest of the batch goes on; a streamed or sequential row learns it at its next flush.

A repair attempt (appended by the verify task, see service/generation_settle.py) is decoded from a follow-up
turn: the problem, the failed answer and the verifier's error. The row stays ``verifying`` while
its repairs are decoded and verified.

A row whose model an engine serves (``request.engine``, see db/engine_routes.py) is decoded there,
no model loaded here: each sample is one streamed request to the engine, which batches concurrent
requests itself, so the row is never batched with others; its samples go as concurrent requests,
or one after another when the row is sequential. Verification stays in this service.

The row's ``request`` and its attempts are db.generations' ``GenerationRequest`` and
``GenerationSample`` (one ``GenerationSampleRow`` each). Sample ``k`` of the drawn samples is
sample ``k % n`` of prompt ``k // n``. Every write to the attempts after the claim happens under
the generation row's lock, since verify tasks settle them concurrently (cancel, append repairs);
a decoding flush writes its one attempt.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, closing
from dataclasses import dataclass

import httpx
from celery import shared_task
from sqlalchemy import select, update

from cuset_core.analysis.extract import answer_code, closing_fence_end
from cuset_core.generation.endpoint import DEFAULT_TIMEOUT_S, EndpointError, stream_answer
from cuset_core.generation.prompts import render_prompt, repair_messages
from cuset_core.generation.sampling import (
    GeneratedText,
    stream_decode,
)
from cuset_core.generation.sampling import (
    generate as generate_batch,
)
from db.engine_routes import EngineRoute
from db.errors import ErrorCode
from db.generation_rows import generation_request, load_samples, locked_generation, save_samples
from db.generations import GenerationRequest, GenerationSample, GenerationTimings, usage_of
from db.models import Generation
from db.session import session_scope
from db.settings import Settings
from db.statuses import GENERATION_FINAL, GenerationKind, GenerationStatus
from service.dispatch import TaskName, send_verify_sample
from service.generation_events import GenerationEvent, fail_generations, publish, publishing
from service.generation_settle import decode_repairs, settle
from worker.model_cache import ModelCache
from worker.runtime import RuntimeTask

log = logging.getLogger(__name__)

FLUSH_S = 0.1  # how often a streaming sample's partial text reaches the row when nothing is published
DELTA_S = 0.02  # how often a streaming sample's new text is published (with Redis)
ROW_FLUSH_S = 1.0  # how often it reaches the row then: for followers that join late
BATCH_POLL_S = 0.02  # how often the queue is looked at again while a batch gathers
BATCH_KEYS = ("spec", "form", "n", "temperature", "top_p", "max_tokens", "stop")
DECODED = {"text", "finish_reason", "prompt_tokens", "completion_tokens", "code"}  # what decoding writes
ENGINE_CONNECT_S = 10.0
MAX_ENGINE_REQUESTS = 16  # a row's samples in flight at once to an engine
ENDED_CHECK_S = 0.5  # how often a batch being decoded asks whether its rows are still wanted

# Decodes one sample of a row from its prompt; the finished sample, or None when the row ended.
DecodeOne = Callable[[GenerationSample, list[dict] | str], GenerationSample | None]


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


@shared_task(name=TaskName.GENERATE, base=RuntimeTask, bind=True)
def generate(self: RuntimeTask, generation_id: str) -> None:
    """Decode the row ``generation_id`` (and batch mates); record samples, usage and timings and
    send samples to verification."""
    settings = self.runtime.settings
    url = settings.resolved_database_url
    with session_scope(url) as session:
        lead = _claim(session, generation_id, settings)
    if lead is None:
        return  # decoded in another task's batch, redelivered, or given up by the API
    started = time.time()
    if lead.request.engine is not None:
        _generate_with_engine(settings, lead, lead.request.engine, started)
        return
    with ExitStack() as in_use:
        loaded = _load(in_use, settings, self.runtime.loaded_models(), lead)
        if loaded is None:
            return
        model, tokenizer = loaded
        sequential = lead.request.sequential
        mates = [] if sequential else _gather_batch(url, lead, settings.generation_batch_max - 1, settings)
        rows = [lead, *mates]
        try:
            if sequential:
                _decode_sequentially(
                    settings, lead, lambda sample, prompt: _decode_one(settings, model, tokenizer, lead, sample, prompt)
                )
                results: list[list[GenerationSample] | None] = [None]  # already in the row
            else:
                results = _decode_batch(model, tokenizer, rows, url)
        except Exception as exc:  # noqa: BLE001 - a decoding failure fails the rows, never the worker
            log.exception("decoding %s failed", [row.id for row in rows])
            fail_generations(
                settings, [row.id for row in rows], ErrorCode.DECODE_FAILED, f"{type(exc).__name__}: {exc}"
            )
            return
    decoded = time.time()
    for row, samples in zip(rows, results):
        _record(settings, row, samples, started, decoded, batch_size=len(rows))


def _load(in_use: ExitStack, settings: Settings, models: ModelCache, row: Claimed) -> tuple | None:
    """The row's model and tokenizer from ``models``, in use until ``in_use`` closes; None when
    it cannot be loaded (the row is then failed with the reason)."""
    try:
        return in_use.enter_context(models.use(row.request.spec, row.model))
    except Exception as exc:  # noqa: BLE001 - any load failure is the request's failure
        log.exception("loading model %s failed", row.request.spec)
        fail_generations(
            settings, [row.id], ErrorCode.MODEL_LOAD_FAILED, f"could not load model {row.request.spec!r}: {exc}"
        )
        return None


def _generate_with_engine(settings: Settings, row: Claimed, engine: EngineRoute, started: float) -> None:
    """Decode ``row`` through its engine and record it as the in-process path does."""
    try:
        with _engine_client(engine) as client:
            if row.request.sequential:
                _decode_sequentially(
                    settings, row, lambda sample, prompt: _engine_decode_one(settings, client, row, sample, prompt)
                )
                samples = None  # already in the row
            else:
                samples = _engine_samples(client, row)
    except Exception as exc:  # noqa: BLE001 - an engine failure fails the row, never the worker
        log.exception("decoding %s at %s failed", row.id, engine.url)
        fail_generations(settings, [row.id], ErrorCode.DECODE_FAILED, f"{type(exc).__name__}: {exc}")
        return
    _record(settings, row, samples, started, time.time(), batch_size=1)


def _engine_client(engine: EngineRoute) -> httpx.Client:
    # The read timeout bounds the wait for each streamed chunk, not the whole answer.
    return httpx.Client(headers=engine.headers(), timeout=httpx.Timeout(DEFAULT_TIMEOUT_S, connect=ENGINE_CONNECT_S))


def _engine_samples(client: httpx.Client, row: Claimed) -> list[GenerationSample]:
    """Every sample of ``row`` from its engine, as concurrent requests (the engine batches them)."""
    request = row.request
    samples = _drawn_samples(request)
    with ThreadPoolExecutor(max_workers=min(len(samples), MAX_ENGINE_REQUESTS)) as pool:
        return list(pool.map(lambda s: _engine_answer(client, row, s, request.prompts[s.prompt_index], None), samples))


def _drawn_samples(request: GenerationRequest) -> list[GenerationSample]:
    """The request's drawn samples, not yet decoded: ``n`` per prompt, in prompt order."""
    return [
        GenerationSample(index=p * request.n + j, prompt_index=p)
        for p in range(len(request.prompts))
        for j in range(request.n)
    ]


def _engine_decode_one(
    settings: Settings, client: httpx.Client, row: Claimed, sample: GenerationSample, prompt: list[dict] | str
) -> GenerationSample | None:
    """``_decode_one`` through the engine: partial text sent to followers as it streams in."""
    partial = _Partial(settings, row.id, sample)
    done = _engine_answer(client, row, sample, prompt, partial.offer)
    return None if done is None else partial.finish(done)


def _engine_answer(
    client: httpx.Client,
    row: Claimed,
    sample: GenerationSample,
    prompt: list[dict] | str,
    on_partial: Callable[[str], bool] | None,
) -> GenerationSample | None:
    """Decode ``sample`` from ``prompt`` at the row's engine; ``on_partial`` (if given) gets the
    text so far about every ``FLUSH_S`` seconds and returns False to stop (the stream is then
    closed, which stops the engine too, and None returned)."""
    request = row.request
    seed = None if request.seed is None else request.seed + sample.index % request.n
    text, finish, prompt_tokens, completion_tokens = "", None, 0, 0
    last_flush = time.monotonic()
    stream = stream_answer(
        client,
        request.engine.endpoint(),
        prompt,
        temperature=request.temperature,
        top_p=request.top_p,
        max_tokens=request.max_tokens,
        seed=seed,
        stop=request.stop,
    )
    with closing(stream):  # leaving early closes the connection, which stops the engine
        for delta in stream:
            text += delta.text
            finish = delta.finish_reason or finish
            prompt_tokens = delta.prompt_tokens or prompt_tokens
            completion_tokens = delta.completion_tokens or completion_tokens
            # Checked here, not sent as an OpenAI ``stop`` string: a stop string cannot tell the
            # closing fence from an opening one. The usage chunk then never comes: the counts
            # are those the engine sent so far.
            fence_end = closing_fence_end(text) if row.stops_at_fence and "\n" in delta.text else None
            if fence_end is not None:
                text, finish = text[:fence_end], "stop"
                break
            if time.monotonic() >= row.deadline:  # max_generation_s: closing the stream stops the engine
                finish = "length"
                break
            if on_partial is not None and time.monotonic() - last_flush >= FLUSH_S:
                if not on_partial(_shown(text, request.stop)):
                    return None
                last_flush = time.monotonic()
    if finish not in ("stop", "length"):
        raise EndpointError(f"model: the engine's answer ended without a finish_reason (got {finish!r})")
    return _finished(row, sample, GeneratedText(text, prompt_tokens, completion_tokens, finish))


def _claim(session, generation_id: str, settings: Settings) -> Claimed | None:
    """Mark the row running if it is still queued; None when someone else has it. Its decoding
    may take ``max_generation_s`` from now."""
    claimed = session.execute(
        update(Generation)
        .where(Generation.id == generation_id, Generation.status == GenerationStatus.QUEUED)
        # started_at: a request that ends before its decoding does (the first passing attempt)
        # still gets its queue and generation times (service.generation_settle.finish).
        .values(status=GenerationStatus.RUNNING, timings=GenerationTimings(started_at=time.time()))
    ).rowcount
    if claimed != 1:
        return None
    row = session.get(Generation, generation_id)
    return Claimed(
        row.id,
        row.model,
        GenerationKind(row.kind),
        generation_request(row),
        row.created_at,
        time.monotonic() + settings.max_generation_s,
    )


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
        claimed = [c for row in mates[:limit] if (c := _claim(session, row.id, settings)) is not None]
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


def _decode_batch(model, tokenizer, rows: list[Claimed], url: str) -> list[list[GenerationSample]]:
    """Samples of every row, decoded in one batch (the rows share form and decoding settings);
    the samples of a row that ends meanwhile stop decoding (their results are not recorded)."""
    request = rows[0].request
    raw = request.form == "raw"
    conversations = [[{"role": "user", "content": p}] if raw else p for row in rows for p in row.request.prompts]
    owners = [row.id for row in rows for _ in row.request.prompts]  # the row of each conversation

    def ended() -> list[bool]:
        gone = _ended_rows(url, [row.id for row in rows])
        if gone:
            log.info("stopping the decoding of %s: the rows ended", sorted(gone))
        return [owner in gone for owner in owners]

    outputs = generate_batch(
        model,
        _RawTemplate(tokenizer) if raw else tokenizer,
        conversations,
        n=request.n,
        temperature=request.temperature,
        top_p=request.top_p,
        max_new_tokens=request.max_tokens,
        seed=request.seed,
        stop_at_fence=[row.stops_at_fence for row in rows for _ in row.request.prompts],
        deadline=min(row.deadline for row in rows),
        ended=ended,
        check_every_s=ENDED_CHECK_S,
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


def _ended_rows(url: str, ids: list[str]) -> set[str]:
    """Those of ``ids`` whose rows are final (nobody waits for their decoding any more)."""
    with session_scope(url) as session:
        return set(
            session.scalars(
                select(Generation.id).where(Generation.id.in_(ids), Generation.status.in_(GENERATION_FINAL))
            )
        )


def _finished(row: Claimed, sample: GenerationSample, generated: GeneratedText) -> GenerationSample:
    """``sample`` with its decoded answer: stop strings applied, code extracted for /v1/generate."""
    text, stopped = _cut_at_stop(generated.text, row.request.stop)
    return sample.model_copy(
        update={
            "text": text,
            "finish_reason": "stop" if stopped else generated.finish_reason,
            "prompt_tokens": generated.prompt_tokens,
            "completion_tokens": generated.completion_tokens,
            "code": answer_code(text).code if row.kind == GenerationKind.GENERATE else None,
        }
    )


def _cut_at_stop(text: str, stops: list[str]) -> tuple[str, bool]:
    """``text`` up to the first stop string (excluded), and whether one was found."""
    cuts = [i for i in (text.find(s) for s in stops) if i >= 0]
    return (text[: min(cuts)], True) if cuts else (text, False)


def _shown(partial: str, stops: list[str]) -> str:
    """What of a partial answer may be shown: up to a stop string, and without a tail that could
    be the start of one (sent once the next tokens tell)."""
    cut, stopped = _cut_at_stop(partial, stops)
    holdback = max((len(s) for s in stops), default=1) - 1
    return cut if stopped else cut[: len(cut) - holdback]


class _Partial:
    """Sends the growing text of one streamed attempt to its followers (see the module docstring);
    ``offer`` answers False once the row has ended, ``finish`` writes the finished attempt."""

    def __init__(self, settings: Settings, row_id: str, sample: GenerationSample) -> None:
        self._settings, self.url, self._row_id, self._sample = settings, settings.resolved_database_url, row_id, sample
        # How often new text is offered (the decoder detokenizes only then), and reaches the row.
        self.tick_s, self._row_s = (DELTA_S, ROW_FLUSH_S) if publishing(settings) else (FLUSH_S, FLUSH_S)
        self._sent = ""  # the text followers have: published deltas and the row's copy both end here
        self._last_row = time.monotonic()

    def offer(self, shown: str) -> bool:
        """Send what ``shown`` adds to the text sent so far; False when the row has ended."""
        now = time.monotonic()
        if len(shown) > len(self._sent) and shown.startswith(self._sent):
            delta = GenerationEvent(index=self._sample.index, offset=len(self._sent), delta=shown[len(self._sent) :])
            publish(self._settings, self._row_id, delta)
            self._sent = shown
        if now - self._last_row < self._row_s:
            return True
        self._last_row = now
        alive = _write_sample(self.url, self._row_id, self._sample.model_copy(update={"text": self._sent}))
        publish(self._settings, self._row_id, GenerationEvent(row=True))
        return alive is not None

    def finish(self, done: GenerationSample) -> GenerationSample | None:
        """Write the finished attempt and tell followers; None when the row ended meanwhile."""
        stored = _write_sample(self.url, self._row_id, done)
        if stored is None:
            return None
        publish(self._settings, self._row_id, GenerationEvent(samples=[stored]))
        return done


def _decode_one(
    settings: Settings, model, tokenizer, row: Claimed, sample: GenerationSample, prompt
) -> GenerationSample | None:
    """Decode ``sample`` of ``row`` from ``prompt`` (a message list, or a text for raw rows), its
    partial text sent to followers as it grows; the finished sample, or None when the row ended
    meanwhile."""
    request = row.request
    partial = _Partial(settings, row.id, sample)
    generated = stream_decode(
        model,
        tokenizer,
        prompt if request.form == "raw" else render_prompt(tokenizer, prompt),
        on_text=lambda so_far: partial.offer(_shown(so_far, request.stop)),
        temperature=request.temperature,
        top_p=request.top_p,
        max_new_tokens=request.max_tokens,
        seed=None if request.seed is None else request.seed + sample.index % request.n,
        stop_at_fence=row.stops_at_fence,
        every_s=partial.tick_s,
        deadline=row.deadline,
        on_stopped=lambda prompt_tokens, decoded: _record_stopped(
            partial.url, row.id, sample.index, prompt_tokens, decoded
        ),
    )
    if generated is None:
        return None
    done = partial.finish(_finished(row, sample, generated))
    if done is None:  # decoded in full, but the row ended (or the attempt was cancelled) meanwhile
        _record_stopped(partial.url, row.id, sample.index, generated.prompt_tokens, generated.completion_tokens)
    return done


def _decode_sequentially(settings: Settings, row: Claimed, decode_one: DecodeOne) -> None:
    """Decode the samples of a streamed or first-pass row one by one with ``decode_one``; each
    finished sample goes to verification at once. Stops early when the row has ended."""
    request, url = row.request, settings.resolved_database_url
    samples = _drawn_samples(request)
    with session_scope(url) as session:  # the row is ours alone until its first sample is verified
        save_samples(session, row.id, samples)
    publish(settings, row.id, GenerationEvent(samples=samples, status=GenerationStatus.RUNNING))
    for sample in samples:
        done = decode_one(sample, request.prompts[sample.prompt_index])
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
        samples = load_samples(session, generation_id)
        if samples[sample.index].cancelled:
            return None
        samples[sample.index] = samples[sample.index].model_copy(update=sample.model_dump(include=DECODED))
        save_samples(session, generation_id, [samples[sample.index]])
        row.usage = usage_of(samples)
        return samples[sample.index]


def _record_stopped(url: str, generation_id: str, index: int, prompt_tokens: int, decoded: int) -> None:
    """Count the tokens attempt ``index`` decoded before it was stopped (its row ended, or another
    attempt passed first) in its usage and the row's, so usage says what was decoded; its text
    stays what its last flush wrote, and it stays unfinished."""
    with session_scope(url) as session:
        row = locked_generation(session, generation_id)
        if row is None:
            return
        samples = load_samples(session, generation_id)
        if index >= len(samples) or samples[index].finish_reason is not None:
            return
        samples[index] = samples[index].model_copy(
            update={"prompt_tokens": prompt_tokens, "completion_tokens": decoded}
        )
        save_samples(session, generation_id, [samples[index]])
        row.usage = usage_of(samples)
    log.info("attempt %d of %s stopped after %d tokens", index, generation_id, decoded)


def _verify_later(settings: Settings, row: Claimed, indexes: list[int]) -> None:
    for index in indexes:
        send_verify_sample(settings, row.id, index, gpu=row.request.verify == "gpu")


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
    timings = GenerationTimings(
        queue_s=round(started - row.created_at, 4),
        generate_s=round(decoded - started, 4),
        batch_size=batch_size,
        decoded_at=decoded,
    )
    batched = samples is not None
    with session_scope(settings.resolved_database_url) as session:
        stored = locked_generation(session, row.id)
        if stored is None:
            return
        if stored.status == GenerationStatus.FAILED:
            if batched:  # ended while its batch decoded (its client left): what was decoded before it stopped
                stored.timings = timings.but_earlier(stored.timings)
                stored.usage = usage_of(samples)
            return
        stored.timings = timings.but_earlier(stored.timings)
        if samples is None:
            samples = load_samples(session, row.id)
        else:
            save_samples(session, row.id, samples)
        stored.usage = usage_of(samples)
        if stored.status in GENERATION_FINAL:
            return  # a verified sample ended the request while later ones were decoded
        steps = None
        if not row.verifying:
            stored.status, stored.finished_at = GenerationStatus.SUCCEEDED, decoded
            stored.timings = stored.timings.model_copy(update={"total_s": round(decoded - row.created_at, 4)})
        else:
            stored.status = GenerationStatus.VERIFYING
            steps = settle(session, stored, row.request, samples, decoded)
        status = stored.status
    publish(settings, row.id, GenerationEvent(samples=samples if batched else [], status=status))
    if steps is None:
        return
    if not row.request.sequential:
        _verify_later(settings, row, [sample.index for sample in samples])
    decode_repairs(settings, row.id, steps.repairs)


@shared_task(name=TaskName.GENERATE_REPAIR, base=RuntimeTask, bind=True)
def generate_repair(self: RuntimeTask, generation_id: str, index: int) -> None:
    """Decode repair attempt ``index``: the failed attempt it repairs and its error as a follow-up
    turn; then verify it. Nothing to do when the row ended or the attempt is done or cancelled."""
    settings = self.runtime.settings
    url = settings.resolved_database_url
    with session_scope(url) as session:
        stored = session.get(Generation, generation_id)
        if stored is None or stored.status in GENERATION_FINAL or stored.status == GenerationStatus.QUEUED:
            return
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
        return  # a redelivered message, or the request moved on
    failed = samples[attempt.repair_of]
    messages = repair_messages(row.request.prompts[attempt.prompt_index], failed.text, failed.verification)
    with ExitStack() as in_use:
        engine = row.request.engine
        if engine is not None:
            client = in_use.enter_context(_engine_client(engine))
            decode_one: DecodeOne = lambda sample, prompt: _engine_decode_one(settings, client, row, sample, prompt)  # noqa: E731
        else:
            loaded = _load(in_use, settings, self.runtime.loaded_models(), row)
            if loaded is None:
                return
            model, tokenizer = loaded
            decode_one = lambda sample, prompt: _decode_one(settings, model, tokenizer, row, sample, prompt)  # noqa: E731
        try:
            done = decode_one(attempt, messages)
        except Exception as exc:  # noqa: BLE001 - a decoding failure fails the row, never the worker
            log.exception("decoding repair %d of %s failed", index, row.id)
            fail_generations(settings, [row.id], ErrorCode.DECODE_FAILED, f"{type(exc).__name__}: {exc}")
            return
    if done is not None:
        _verify_later(settings, row, [done.index])
