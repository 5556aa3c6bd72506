"""Decoding a Generation row with a model this worker holds (its ``ModelCache``): a batch of rows
in one ``sampling.generate`` call (``decode_batch``), or one streamed attempt (``stream_sample``).

A batch asks the database every ``ENDED_CHECK_S`` whether its rows are still wanted: the samples
of a row that ended meanwhile (a non-streamed request whose client left, a timeout) stop
decoding there, while the rest of the batch goes on; a streamed row learns it at its next flush.
Decoding ends after the answer's first code block for ``/v1/generate``, and at the row's
deadline (``max_generation_s``) with finish_reason ``length``.
"""

from __future__ import annotations

import logging
from contextlib import ExitStack

from cuset_core.generation.prompts import render_prompt
from cuset_core.generation.sampling import generate as generate_batch
from cuset_core.generation.sampling import stream_decode
from db.errors import ErrorCode
from db.generations import GenerationSample
from db.settings import Settings
from service.answer_text import finished_sample, shown
from service.generation_claims import Claimed, ended_rows
from service.generation_events import fail_generations
from service.generation_records import PartialText, record_stopped
from worker.model_cache import ModelCache

log = logging.getLogger(__name__)

ENDED_CHECK_S = 0.5  # how often a batch being decoded asks whether its rows are still wanted


def load_model_for(in_use: ExitStack, settings: Settings, models: ModelCache, row: Claimed) -> tuple | None:
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


def decode_batch(model, tokenizer, rows: list[Claimed], url: str) -> list[list[GenerationSample]]:
    """Samples of every row, decoded in one batch (the rows share form and decoding settings);
    the samples of a row that ends meanwhile stop decoding (their results are not recorded)."""
    request = rows[0].request
    raw = request.form == "raw"
    conversations = [[{"role": "user", "content": p}] if raw else p for row in rows for p in row.request.prompts]
    owners = [row.id for row in rows for _ in row.request.prompts]  # the row of each conversation

    def ended() -> list[bool]:
        gone = ended_rows(url, [row.id for row in rows])
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
                finished_sample(row, GenerationSample(index=p * row.request.n + j, prompt_index=p), generated)
                for p, samples in enumerate(per_prompt)
                for j, generated in enumerate(samples)
            ]
        )
    return results


def stream_sample(
    settings: Settings, model, tokenizer, row: Claimed, sample: GenerationSample, prompt
) -> GenerationSample | None:
    """Decode ``sample`` of ``row`` from ``prompt`` (a message list, or a text for raw rows), its
    partial text sent to followers as it grows; the finished sample, or None when the row ended
    meanwhile."""
    request = row.request
    partial = PartialText(settings, row.id, sample)
    generated = stream_decode(
        model,
        tokenizer,
        prompt if request.form == "raw" else render_prompt(tokenizer, prompt),
        on_text=lambda so_far: partial.offer(shown(so_far, request.stop)),
        temperature=request.temperature,
        top_p=request.top_p,
        max_new_tokens=request.max_tokens,
        seed=None if request.seed is None else request.seed + sample.index % request.n,
        stop_at_fence=row.stops_at_fence,
        every_s=partial.tick_s,
        deadline=row.deadline,
        on_stopped=lambda prompt_tokens, decoded: record_stopped(
            partial.url, row.id, sample.index, prompt_tokens, decoded
        ),
    )
    if generated is None:
        return None
    done = partial.finish(finished_sample(row, sample, generated))
    if done is None:  # decoded in full, but the row ended (or the attempt was cancelled) meanwhile
        record_stopped(partial.url, row.id, sample.index, generated.prompt_tokens, generated.completion_tokens)
    return done
