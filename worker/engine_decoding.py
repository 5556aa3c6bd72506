"""Decoding a Generation row at the inference engine that serves its model (``request.engine``,
see db/engine_routes.py), no model loaded here: each sample is one streamed request to the engine,
which batches concurrent requests itself, so the row is never batched with others; its samples
go as concurrent requests (``engine_samples``), or one after another when the row is sequential
(``engine_stream_sample``). Verification stays in this service.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from typing import cast

import httpx

from cuset_core.analysis.extract import closing_fence_end
from cuset_core.generation.endpoint import DEFAULT_TIMEOUT_S, EndpointError, stream_answer
from cuset_core.generation.sampling import FinishReason, GeneratedText
from db.engine_routes import EngineRoute
from db.generations import GenerationSample
from db.settings import Settings
from service.answer_text import finished_sample, shown
from service.generation_claims import Claimed
from service.generation_records import FLUSH_S, PartialText, drawn_samples

ENGINE_CONNECT_S = 10.0
MAX_ENGINE_REQUESTS = 16  # a row's samples in flight at once to an engine


def engine_client(engine: EngineRoute) -> httpx.Client:
    # The read timeout bounds the wait for each streamed chunk, not the whole answer.
    return httpx.Client(headers=engine.headers(), timeout=httpx.Timeout(DEFAULT_TIMEOUT_S, connect=ENGINE_CONNECT_S))


def engine_samples(client: httpx.Client, row: Claimed) -> list[GenerationSample]:
    """Every sample of ``row`` from its engine, as concurrent requests (the engine batches them)."""
    request = row.request
    samples = drawn_samples(request)

    def whole(sample: GenerationSample) -> GenerationSample:
        answer = engine_answer(client, row, sample, request.prompts[sample.prompt_index], None)
        if answer is None:  # only a follower (on_partial) stops an answer early, and there is none
            raise EndpointError("model: the engine's answer stopped early")
        return answer

    with ThreadPoolExecutor(max_workers=min(len(samples), MAX_ENGINE_REQUESTS)) as pool:
        return list(pool.map(whole, samples))


def engine_stream_sample(
    settings: Settings, client: httpx.Client, row: Claimed, sample: GenerationSample, prompt: list[dict] | str
) -> GenerationSample | None:
    """``stream_sample`` through the engine: partial text sent to followers as it streams in."""
    partial = PartialText(settings, row.id, sample)
    done = engine_answer(client, row, sample, prompt, partial.offer)
    return None if done is None else partial.finish(done)


def engine_answer(
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
    if request.engine is None:
        raise ValueError(f"generation {row.id} is decoded by the worker, not by an engine")
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
                if not on_partial(shown(text, request.stop)):
                    return None
                last_flush = time.monotonic()
    if finish not in ("stop", "length"):
        raise EndpointError(f"model: the engine's answer ended without a finish_reason (got {finish!r})")
    reason = cast(FinishReason, finish)  # one of the two, checked just above
    return finished_sample(row, sample, GeneratedText(text, prompt_tokens, completion_tokens, reason))
