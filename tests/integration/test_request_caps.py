"""One request cannot take over a worker: a prompt that does not fit the model's context with its
``max_tokens`` is a 400 naming both numbers before anything is written or queued, a body over the
byte cap is refused before it is read, and a non-streamed request whose client leaves stops its
decoding (its row says what was decoded)."""

from __future__ import annotations

import time

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from cuset_core.generation.prompts import render_prompt
from db.models import Generation
from db.session import session_scope
from tests.real_service import wait_for

CONTEXT = 4096  # the tiny test model's max_position_embeddings


def generation_rows(settings) -> int:
    with session_scope(settings.resolved_database_url) as session:
        return session.scalar(select(func.count()).select_from(Generation))


def prompt_tokens(tokenizer, messages: list[dict]) -> int:
    return len(tokenizer(render_prompt(tokenizer, messages), add_special_tokens=False)["input_ids"])


def words(count: int) -> str:
    return " ".join(f"w{i % 97}" for i in range(count))


def test_a_chat_longer_than_the_context_is_a_400_naming_both_numbers_and_writes_nothing(
    client, service_settings, tokenizer
):
    messages = [{"role": "user", "content": "hello " * 3000}]
    tokens = prompt_tokens(tokenizer, messages)
    assert tokens < CONTEXT < tokens + 2048
    before = generation_rows(service_settings)

    response = client.post("/v1/chat/completions", json={"model": "tiny", "messages": messages, "max_tokens": 2048})

    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "max_tokens" and error["code"] == "context_length_exceeded"
    assert error["type"] == "invalid_request_error"
    assert f"{tokens} tokens" in error["message"] and "max_tokens is 2048" in error["message"]
    assert str(CONTEXT) in error["message"]
    assert generation_rows(service_settings) == before  # no row, so no task either


def test_a_prompt_that_alone_fills_the_context_names_the_prompt(client, service_settings, tokenizer):
    prompt = words(5000)
    tokens = len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    before = generation_rows(service_settings)

    completion = client.post("/v1/completions", json={"model": "tiny", "prompt": prompt, "max_tokens": 16})
    generate = client.post("/v1/generate", json={"model": "tiny", "prompt": prompt, "max_tokens": 16})

    assert completion.status_code == 400 and completion.json()["error"]["param"] == "prompt"
    assert f"The prompt is {tokens} tokens and max_tokens is 16" in completion.json()["error"]["message"]
    assert generate.status_code == 400 and generate.json()["error"]["param"] == "prompt"
    assert generation_rows(service_settings) == before


def test_a_request_that_fits_the_context_exactly_is_accepted(client, service_settings, tokenizer, worker):
    messages = [{"role": "user", "content": words(500)}]
    max_tokens = min(8, service_settings.max_generation_tokens)
    body = {"model": "tiny", "messages": messages, "temperature": 0}
    tokens = prompt_tokens(tokenizer, messages)
    # Under a server limit of exactly prompt + max_tokens: accepted; one token less: refused.
    capped = service_settings.model_copy(update={"max_context_tokens": tokens + max_tokens})
    from api.main import create_app

    with TestClient(create_app(capped), headers=client.headers) as capped_client:
        fits = capped_client.post("/v1/chat/completions", json=body | {"max_tokens": max_tokens})
        over = capped_client.post("/v1/chat/completions", json=body | {"max_tokens": max_tokens + 1})

    assert fits.status_code == 200, fits.text
    assert fits.json()["usage"]["prompt_tokens"] == tokens  # the API counts as the worker decodes
    assert over.status_code == 400 and "server's limit" in over.json()["error"]["message"]


def test_a_one_megabyte_chat_is_refused_in_seconds_without_a_row(client, service_settings):
    messages = [{"role": "user", "content": "Write a CUDA kernel that adds two vectors. " * 24_000}]  # ~1 MB
    before = generation_rows(service_settings)

    started = time.monotonic()
    response = client.post("/v1/chat/completions", json={"model": "tiny", "messages": messages})
    elapsed = time.monotonic() - started

    assert response.status_code == 400 and response.json()["error"]["param"] == "messages"
    assert response.json()["error"]["code"] == "context_length_exceeded"
    assert elapsed < 20, f"refusing a 1 MB prompt took {elapsed:.1f} s"
    assert generation_rows(service_settings) == before
    print(f"\n1 MB chat refused in {elapsed:.2f} s: {response.json()['error']['message']}")


def test_a_body_over_the_byte_cap_is_refused_before_it_is_read(client, service_settings):
    from api.main import create_app

    capped = service_settings.model_copy(update={"max_request_mb": 0.5})
    messages = [{"role": "user", "content": "x" * 2**20}]
    before = generation_rows(service_settings)

    with TestClient(create_app(capped), headers=client.headers) as capped_client:
        started = time.monotonic()
        response = capped_client.post("/v1/chat/completions", json={"model": "tiny", "messages": messages})
        elapsed = time.monotonic() - started

    assert response.status_code == 413 and response.json()["error"]["code"] == "request_too_large"
    assert elapsed < 5
    assert generation_rows(service_settings) == before


def test_a_non_streamed_request_whose_client_leaves_stops_decoding(server, worker, auth_headers, service_settings):
    body = {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 4000, "temperature": 0}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server}/v1/completions", json=body, headers=auth_headers, timeout=3)
    left = time.time()
    url = service_settings.resolved_database_url

    def newest() -> Generation:
        with session_scope(url) as session:
            row = session.scalars(select(Generation).order_by(Generation.created_at.desc())).first()
            session.expunge(row)
            return row

    wait_for(lambda: newest().status == "failed", timeout=30, what="the abandoned row to end")
    assert newest().error.code == "client_gone"
    # The worker noticed and stopped decoding: it records when, and how much it had decoded.
    row = wait_for(
        lambda: (r := newest()).timings and r.timings.decoded_at is not None and r, timeout=60, what="decoding"
    )
    assert row.timings.decoded_at - left < 10, row.timings
    assert 0 < row.usage.completion_tokens < 4000, row.usage
    print(f"\ndecoding stopped {row.timings.decoded_at - left:.2f} s after the client left, {row.usage}")
