"""The official ``openai`` client against a real uvicorn server: models, completions, chat and
chat streaming parse into its types unchanged."""

from __future__ import annotations

import openai
import pytest

HELLO = [{"role": "user", "content": "Write a CUDA kernel that adds two vectors."}]


@pytest.fixture()
def openai_client(server, api_key) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server}/v1", api_key=api_key, max_retries=0, timeout=120)


def test_models_list_and_retrieve(openai_client):
    ids = [model.id for model in openai_client.models.list()]

    assert "tiny" in ids
    assert openai_client.models.retrieve("tiny").owned_by == "cuset"
    with pytest.raises(openai.NotFoundError):
        openai_client.models.retrieve("no-such-model")


def test_completions_create(openai_client, worker):
    completion = openai_client.completions.create(model="tiny", prompt="__global__ void", max_tokens=8, temperature=0)

    assert completion.object == "text_completion"
    assert completion.choices[0].text
    assert completion.choices[0].finish_reason in ("stop", "length")
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens


def test_chat_completions_create(openai_client, worker):
    chat = openai_client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=8, temperature=0, n=2)

    assert [choice.index for choice in chat.choices] == [0, 1]
    assert chat.choices[0].message.role == "assistant" and chat.choices[0].message.content
    assert chat.usage.completion_tokens > 0


def test_chat_streaming_matches_the_whole_answer(openai_client, worker):
    whole = openai_client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=16, temperature=0, seed=1)

    chunks = list(
        openai_client.chat.completions.create(
            model="tiny",
            messages=HELLO,
            max_tokens=16,
            temperature=0,
            seed=1,
            stream=True,
            stream_options={"include_usage": True},
        )
    )

    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == whole.choices[0].message.content
    finishes = [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices and chunk.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_errors_reach_the_client_as_its_exceptions(openai_client):
    with pytest.raises(openai.BadRequestError) as raised:
        openai_client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=10**7)

    assert raised.value.body["param"] == "max_tokens"
