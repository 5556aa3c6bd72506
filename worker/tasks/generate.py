"""``cuset.generate``: decode one Generation row, together with queued rows it can share a batch with.

The row is claimed atomically (queued -> running), so a redelivered message, or the task of a row
another task already decoded in its batch, finds nothing to do. A non-streaming row takes up to
``generation_batch_max - 1`` other queued, non-streaming, unseeded rows with the same model and
decoding settings and decodes them in one ``sampling.generate`` call. A streaming row is decoded
alone, one sample after another, its partial text written to ``samples[i]["text"]`` about every
``FLUSH_S`` seconds for the API to forward.

Request JSON (written by api/routers/inference.py): ``spec`` (cuset_core model spec), ``form``
(``chat``: ``prompts`` are message lists; ``raw``: ``prompts`` are texts continued as they are),
``n``, ``temperature``, ``top_p``, ``max_tokens``, ``seed``, ``stop`` (list), ``stream``, and for
``/v1/generate`` ``verify`` and ``problem``. Sample ``k`` is sample ``k % n`` of prompt ``k // n``.
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import torch
from celery import shared_task
from sqlalchemy import select, update
from transformers.generation.streamers import BaseStreamer

from cuset_core.generation.extract import answer_code
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
from db.models import Generation
from db.session import session_scope
from db.settings import Settings, get_settings
from worker.device_share import hold
from worker.model_cache import models

log = logging.getLogger(__name__)

FLUSH_S = 0.1  # how often a streaming sample's partial text reaches the database
BATCH_KEYS = ("spec", "form", "n", "temperature", "top_p", "max_tokens", "stop")


@dataclass(frozen=True)
class Claimed:
    """What the task needs of a claimed row (plain data: it outlives the session)."""

    id: str
    model: str
    kind: str
    request: dict[str, Any]
    created_at: float


@shared_task(name="cuset.generate")
def generate(generation_id: str) -> None:
    """Decode the row ``generation_id`` (and batch mates); record samples, usage and timings."""
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
            model, tokenizer = in_use.enter_context(models.use(lead.request["spec"], lead.model))
        except Exception as exc:  # noqa: BLE001 - any load failure is the request's failure
            log.exception("loading model %s failed", lead.request["spec"])
            _fail(url, [lead.id], "model_load_failed", f"could not load model {lead.request['spec']!r}: {exc}")
            return
        streaming = lead.request["stream"]
        rows = [lead] if streaming else [lead, *_claim_batch(url, lead, settings.generation_batch_max - 1)]
        try:
            results = [_stream(url, model, tokenizer, lead)] if streaming else _decode_batch(model, tokenizer, rows)
        except Exception as exc:  # noqa: BLE001 - a decoding failure fails the rows, never the worker
            log.exception("decoding %s failed", [row.id for row in rows])
            _fail(url, [row.id for row in rows], "decode_failed", f"{type(exc).__name__}: {exc}")
            return
    decoded = time.time()
    for row, samples in zip(rows, results):
        _record(settings, row, samples, started, decoded, batch_size=len(rows))


def _claim(session, generation_id: str) -> Claimed | None:
    """Mark the row running if it is still queued; None when someone else has it."""
    claimed = session.execute(
        update(Generation).where(Generation.id == generation_id, Generation.status == "queued").values(status="running")
    ).rowcount
    if claimed != 1:
        return None
    row = session.get(Generation, generation_id)
    return Claimed(row.id, row.model, row.kind, row.request, row.created_at)


def _batchable(request: dict) -> bool:
    # A seed asks for reproducible samples, which sharing a batch (padding, RNG draws) would break.
    return not request["stream"] and request["seed"] is None


def _claim_batch(url: str, lead: Claimed, limit: int) -> list[Claimed]:
    """Claim up to ``limit`` queued rows that can be decoded in one batch with ``lead``."""
    if limit < 1 or not _batchable(lead.request):
        return []
    key = [lead.request[k] for k in BATCH_KEYS]
    with session_scope(url) as session:
        # SKIP LOCKED (Postgres): rows another task is claiming right now are left to it.
        candidates = session.scalars(
            select(Generation)
            .where(Generation.status == "queued", Generation.model == lead.model, Generation.id != lead.id)
            .order_by(Generation.created_at)
            .limit(4 * limit)
            .with_for_update(skip_locked=True)
        ).all()
        mates = [row for row in candidates if _batchable(row.request) and [row.request[k] for k in BATCH_KEYS] == key]
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


def _decode_batch(model, tokenizer, rows: list[Claimed]) -> list[list[dict]]:
    """Samples of every row, decoded in one batch (the rows share form and decoding settings)."""
    request = rows[0].request
    raw = request["form"] == "raw"
    conversations = [[{"role": "user", "content": p}] if raw else p for row in rows for p in row.request["prompts"]]
    outputs = generate_batch(
        model,
        _RawTemplate(tokenizer) if raw else tokenizer,
        conversations,
        n=request["n"],
        temperature=request["temperature"],
        top_p=request["top_p"],
        max_new_tokens=request["max_tokens"],
        seed=request["seed"],
    )
    results, position = [], 0
    for row in rows:
        per_prompt = outputs[position : position + len(row.request["prompts"])]
        position += len(row.request["prompts"])
        results.append(
            [
                _sample(row, p * row.request["n"] + j, p, generated)
                for p, samples in enumerate(per_prompt)
                for j, generated in enumerate(samples)
            ]
        )
    return results


def _sample(row: Claimed, index: int, prompt_index: int, generated: GeneratedText) -> dict:
    """A finished sample as stored: stop strings applied, code extracted for /v1/generate."""
    text, stopped = _cut_at_stop(generated.text, row.request["stop"])
    sample = {
        "index": index,
        "prompt_index": prompt_index,
        "text": text,
        "finish_reason": "stop" if stopped else generated.finish_reason,
        "prompt_tokens": generated.prompt_tokens,
        "completion_tokens": generated.completion_tokens,
    }
    if row.kind == "generate":
        sample |= {"code": answer_code(text).code, "verification": None}
    return sample


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


def _stream(url: str, model, tokenizer, row: Claimed) -> list[dict]:
    """Decode the samples of a streaming row one by one, flushing partial text as it grows."""
    request = row.request
    n, stops = request["n"], request["stop"]
    samples: list[dict] = [
        {"index": p * n + j, "prompt_index": p, "text": "", "finish_reason": None}
        for p in range(len(request["prompts"]))
        for j in range(n)
    ]
    _write_samples(url, row.id, samples)
    stop_ids = stop_token_ids(model, tokenizer)
    device = next(model.parameters()).device
    kwargs = decoding_kwargs(request["temperature"], request["top_p"], request["max_tokens"])
    holdback = max((len(s) for s in stops), default=1) - 1  # a partial stop string is not sent yet
    for sample in samples:
        prompt = request["prompts"][sample["prompt_index"]]
        text = prompt if request["form"] == "raw" else render_prompt(tokenizer, prompt)
        encoded = tokenizer([text], return_tensors="pt", add_special_tokens=False).to(device)
        last_flush = time.monotonic()

        def flush_partial(tokens: list[int], sample=sample) -> None:
            nonlocal last_flush
            if time.monotonic() - last_flush < FLUSH_S:
                return
            partial = completion_from_tokens(tokens, 0, stop_ids, tokenizer).text.rstrip("\ufffd")  # no half characters
            partial, stopped = _cut_at_stop(partial, stops)
            sample["text"] = partial if stopped else partial[: len(partial) - holdback]
            _write_samples(url, row.id, samples)
            last_flush = time.monotonic()

        seed = None if request["seed"] is None else request["seed"] + sample["index"] % n
        streamer = _TokenStreamer(flush_partial)
        with torch.no_grad(), seeded(seed, device):
            model.generate(**encoded, **kwargs, streamer=streamer, pad_token_id=tokenizer.pad_token_id)
        done = completion_from_tokens(streamer.tokens, encoded["input_ids"].shape[1], stop_ids, tokenizer)
        sample |= _sample(row, sample["index"], sample["prompt_index"], done)
        _write_samples(url, row.id, samples)
    return samples


def _write_samples(url: str, generation_id: str, samples: list[dict]) -> None:
    with session_scope(url) as session:
        session.execute(
            update(Generation).where(Generation.id == generation_id).values(samples=[dict(s) for s in samples])
        )


def _usage(samples: list[dict]) -> dict[str, int]:
    prompt_tokens = sum({s["prompt_index"]: s["prompt_tokens"] for s in samples}.values())
    completion_tokens = sum(s["completion_tokens"] for s in samples)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _record(
    settings: Settings, row: Claimed, samples: list[dict], started: float, decoded: float, batch_size: int
) -> None:
    """Store a decoded row; finish it, or hand its samples to the verification tasks."""
    tier = row.request.get("verify", "none")
    verifying = row.kind == "generate" and tier != "none"
    timings = {
        "queue_s": round(started - row.created_at, 4),
        "generate_s": round(decoded - started, 4),
        "batch_size": batch_size,
        "decoded_at": decoded,
    }
    values: dict[str, Any] = {
        "samples": samples,
        "usage": _usage(samples),
        "timings": timings,
        "status": "verifying" if verifying else "succeeded",
    }
    if not verifying:
        values["finished_at"] = decoded
        timings["total_s"] = round(decoded - row.created_at, 4)
    with session_scope(settings.resolved_database_url) as session:
        session.execute(update(Generation).where(Generation.id == row.id).values(**values))
    if verifying:
        task = "cuset.verify_gpu" if tier == "gpu" else "cuset.verify_sample"
        for sample in samples:
            enqueue(settings, task, row.id, sample["index"])


def _fail(url: str, ids: list[str], code: str, message: str) -> None:
    with session_scope(url) as session:
        session.execute(
            update(Generation)
            .where(Generation.id.in_(ids), Generation.status.in_(("queued", "running")))
            .values(status="failed", error={"code": code, "message": message}, finished_at=time.time())
        )
