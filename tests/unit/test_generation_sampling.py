"""Sampling from a tiny random model: batching with left padding changes nothing, greedy repeats,
seeds reproduce, completions stop at EOS or at the token limit, and a streamed answer matches."""

from __future__ import annotations

import pytest
import torch

from cuset_core.generation.prompts import render_prompt
from cuset_core.generation.sampling import (
    GeneratedText,
    completion_from_tokens,
    generate,
    stream_decode,
)

SHORT = [{"role": "user", "content": "Write a CUDA kernel."}]
LONG = [{"role": "user", "content": "Write a CUDA kernel that adds two float vectors of length n, one thread each."}]


@pytest.fixture(scope="module")
def model_and_tokenizer(tiny_model_dir):
    from cuset_core.models import load_model

    return load_model(tiny_model_dir)


def test_a_batch_decodes_like_each_conversation_alone(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer

    together = generate(model, tokenizer, [SHORT, LONG], max_new_tokens=6)
    alone = [generate(model, tokenizer, [messages], max_new_tokens=6)[0] for messages in (SHORT, LONG)]

    assert together == alone
    assert together[0][0].prompt_tokens < together[1][0].prompt_tokens
    assert together[0][0].prompt_tokens == len(
        tokenizer.apply_chat_template(SHORT, add_generation_prompt=True, tokenize=True)["input_ids"]
    )


def test_greedy_samples_are_one_answer_repeated(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer

    [samples] = generate(model, tokenizer, [SHORT], n=3, max_new_tokens=4)

    assert len(samples) == 3 and samples[0] == samples[1] == samples[2]


def test_sampling_with_a_seed_reproduces_and_leaves_the_global_rng_alone(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)

    first = generate(model, tokenizer, [SHORT], n=3, temperature=1.0, max_new_tokens=5, seed=7)
    after = torch.rand(1)
    second = generate(model, tokenizer, [SHORT], n=3, temperature=1.0, max_new_tokens=5, seed=7)

    assert first == second
    assert len({sample.text for sample in first[0]}) > 1
    assert torch.equal(after, expected_next)


def test_completion_stops_at_the_first_stop_token(tokenizer):
    ids = tokenizer.encode("int i = 0;", add_special_tokens=False)
    eos = tokenizer.eos_token_id

    stopped = completion_from_tokens(ids + [eos, eos], prompt_tokens=9, stop_ids={eos}, tokenizer=tokenizer)
    cut = completion_from_tokens(ids, prompt_tokens=9, stop_ids={eos}, tokenizer=tokenizer)

    assert stopped == GeneratedText("int i = 0;", 9, len(ids) + 1, "stop")
    assert cut == GeneratedText("int i = 0;", 9, len(ids), "length")


def test_a_streamed_answer_grows_by_prefixes_to_the_greedy_answer(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    shown: list[str] = []

    streamed = stream_decode(
        model, tokenizer, render_prompt(tokenizer, LONG), on_text=lambda text: shown.append(text) or True,
        max_new_tokens=8,
    )  # fmt: skip
    [[answer]] = generate(model, tokenizer, [LONG], max_new_tokens=8)

    assert streamed == answer
    assert len(shown) == answer.completion_tokens  # every step, at every_s=0
    assert all(later.startswith(earlier) for earlier, later in zip(shown, shown[1:]))
    assert answer.text.startswith(shown[-1])


def test_a_streamed_answer_whose_watcher_says_stop_ends_at_once_without_a_result(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    steps: list[str] = []

    stopped = stream_decode(
        model, tokenizer, render_prompt(tokenizer, LONG), on_text=lambda text: steps.append(text) or len(steps) < 3,
        max_new_tokens=32,
    )  # fmt: skip

    assert stopped is None and len(steps) == 3


@pytest.mark.parametrize("options", [{"temperature": -1.0}, {"top_p": 0.0}, {"max_new_tokens": 0}, {"n": 0}])
def test_invalid_sampling_options_are_refused(model_and_tokenizer, options):
    model, tokenizer = model_and_tokenizer

    with pytest.raises(ValueError):
        generate(model, tokenizer, [SHORT], **options)
