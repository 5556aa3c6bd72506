"""What decoding writes into a Generation row: the finished attempts of a batch
(``record_decoded``: usage and timings, then done or handed to verification), and a streamed
attempt as it grows (``PartialText``).

A streamed row, or one that stops at its first passing kernel, is decoded alone, one sample
after another (``decode_sequentially``); each finished sample goes to verification at once, and
decoding stops when a verified sample has already ended the request. Its partial text goes out
as it grows: with Redis, as text deltas on the row's pub/sub channel about every ``DELTA_S``
seconds (service/generation_events.py), and into the attempt's row (its ``text``) only every
``ROW_FLUSH_S`` seconds, so a follower that joins late can catch up from the database; without
Redis (the embedded SQLite mode, where the API polls) into the attempt's row every ``FLUSH_S``
seconds. An attempt stopped before it finished (its row ended, or another attempt passed first)
still counts the tokens it decoded (``record_stopped``).

Sample ``k`` of the drawn samples is sample ``k % n`` of prompt ``k // n``. Every write to the
attempts after the claim happens under the generation row's lock, since verify tasks settle them
concurrently (cancel, append repairs); a decoding flush writes its one attempt.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from db.generation_rows import load_samples, locked_generation, save_samples
from db.generations import GenerationRequest, GenerationSample, GenerationTimings, usage_of
from db.session import session_scope
from db.settings import Settings
from db.statuses import GENERATION_FINAL, GenerationStatus
from service.dispatch import send_verify_sample
from service.generation_claims import Claimed
from service.generation_events import GenerationEvent, events_url, publish
from service.generation_settle import decode_repairs, settle

log = logging.getLogger(__name__)

FLUSH_S = 0.1  # how often a streaming sample's partial text reaches the row when nothing is published
DELTA_S = 0.02  # how often a streaming sample's new text is published (with Redis)
ROW_FLUSH_S = 1.0  # how often it reaches the row then: for followers that join late
DECODED = {"text", "finish_reason", "prompt_tokens", "completion_tokens", "code"}  # what decoding writes

# Decodes one sample of a row from its prompt; the finished sample, or None when the row ended.
DecodeOne = Callable[[GenerationSample, list[dict] | str], GenerationSample | None]


def drawn_samples(request: GenerationRequest) -> list[GenerationSample]:
    """The request's drawn samples, not yet decoded: ``n`` per prompt, in prompt order."""
    return [
        GenerationSample(index=p * request.n + j, prompt_index=p)
        for p in range(len(request.prompts))
        for j in range(request.n)
    ]


class PartialText:
    """Sends the growing text of one streamed attempt to its followers (see the module docstring);
    ``offer`` answers False once the row has ended, ``finish`` writes the finished attempt."""

    def __init__(self, settings: Settings, row_id: str, sample: GenerationSample) -> None:
        self._settings, self.url, self._row_id, self._sample = settings, settings.resolved_database_url, row_id, sample
        # How often new text is offered (the decoder detokenizes only then), and reaches the row.
        self.tick_s, self._row_s = (DELTA_S, ROW_FLUSH_S) if events_url(settings) is not None else (FLUSH_S, FLUSH_S)
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


def decode_sequentially(settings: Settings, row: Claimed, decode_one: DecodeOne) -> None:
    """Decode the samples of a streamed or first-pass row one by one with ``decode_one``; each
    finished sample goes to verification at once. Stops early when the row has ended."""
    request, url = row.request, settings.resolved_database_url
    samples = drawn_samples(request)
    with session_scope(url) as session:  # the row is ours alone until its first sample is verified
        save_samples(session, row.id, samples)
    publish(settings, row.id, GenerationEvent(samples=samples, status=GenerationStatus.RUNNING))
    for sample in samples:
        done = decode_one(sample, request.prompts[sample.prompt_index])
        if done is None:
            return
        if row.verifying:
            verify_later(settings, row, [done.index])


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


def record_stopped(url: str, generation_id: str, index: int, prompt_tokens: int, decoded: int) -> None:
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


def verify_later(settings: Settings, row: Claimed, indexes: list[int]) -> None:
    for index in indexes:
        send_verify_sample(settings, row.id, index, gpu=row.request.verify == "gpu")


def record_decoded(
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
            if samples is not None:  # ended while its batch decoded (its client left): what was decoded
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
        verify_later(settings, row, [sample.index for sample in samples])
    decode_repairs(settings, row.id, steps.repairs)
