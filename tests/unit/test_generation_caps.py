"""Decoding stopped from outside: past a wall-time deadline every completion in progress ends with
finish_reason ``length`` (the per-request time cap), and the conversations a caller marks as
ended (a request whose client left) stop while the rest of their batch decodes on."""

from __future__ import annotations

import time

import pytest

from cuset_core.generation.prompts import render_prompt
from cuset_core.generation.sampling import generate, stream_decode

SHORT = [{"role": "user", "content": "Write a CUDA kernel."}]
LONG = [{"role": "user", "content": "Write a CUDA kernel that adds two float vectors of length n, one thread each."}]


@pytest.fixture(scope="module")
def model_and_tokenizer(tiny_model_dir):
    from cuset_core.models import load_model

    return load_model(tiny_model_dir)


def test_a_batch_past_its_deadline_ends_every_sample_with_length(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer

    started = time.monotonic()
    [samples] = generate(
        model, tokenizer, [SHORT], n=3, temperature=1.0, seed=3, max_new_tokens=2000, deadline=time.monotonic()
    )

    assert time.monotonic() - started < 30  # 2,000 tokens were asked; one step was decoded
    assert [s.completion_tokens for s in samples] == [1, 1, 1]
    assert {s.finish_reason for s in samples} == {"length"}


def test_a_streamed_answer_past_its_deadline_ends_with_length(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer

    done = stream_decode(
        model,
        tokenizer,
        render_prompt(tokenizer, SHORT),
        on_text=lambda _text: True,
        max_new_tokens=2000,
        deadline=time.monotonic(),
    )

    assert done is not None and done.completion_tokens == 1 and done.finish_reason == "length"


def test_an_ended_conversation_stops_while_its_batch_mate_decodes_on(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    asked = []

    def ended() -> list[bool]:
        asked.append(time.monotonic())
        return [True, False]  # the first request's client left; the second waits for its answer

    stopped, going_on = generate(model, tokenizer, [SHORT, LONG], max_new_tokens=12, ended=ended, check_every_s=0)
    alone = generate(model, tokenizer, [LONG], max_new_tokens=12)[0]

    assert asked
    assert stopped[0].completion_tokens == 1 and stopped[0].finish_reason == "length"
    assert going_on == alone  # the batch mate's answer is what it would have been


def test_a_streamed_answer_stopped_by_its_watcher_reports_what_it_decoded(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    calls = []
    stopped = []

    def on_text(_text: str) -> bool:
        calls.append(1)
        return len(calls) < 5  # the fifth look says the answer is not wanted any more

    prompt = render_prompt(tokenizer, SHORT)
    done = stream_decode(
        model, tokenizer, prompt, on_text=on_text, max_new_tokens=200, on_stopped=lambda *c: stopped.append(c)
    )

    width = len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    assert done is None and stopped == [(width, 5)]  # watched after each step: stopped at the fifth token
