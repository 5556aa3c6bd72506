"""Models and inference end to end: the API writes a Generation row, a real Celery worker decodes
it with the tiny random model (gibberish, but real tokens), and the API answers from the row."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlalchemy import select

from cuset_core.demo import demo_problems
from cuset_core.verify.result import VerifyResult
from db.models import Generation
from db.session import session_scope
from tests.integration.job_support import insert_tuned_model
from tests.real_service import TEST_OWNER, wait_for

HELLO = [{"role": "user", "content": "Write a CUDA kernel that adds two vectors."}]


def sse_events(lines) -> list[tuple[str | None, str]]:
    """(event name, data) of every server-sent event in a response's lines."""
    events, name = [], None
    for line in lines:
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: "):
            events.append((name, line[len("data: ") :]))
            name = None
    return events


def stream(client, path: str, body: dict) -> list[tuple[str | None, str]]:
    with client.stream("POST", path, json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return sse_events(response.iter_lines())


def test_models_lists_the_base_models_in_the_openai_shape(client):
    listing = client.get("/v1/models").json()

    assert listing["object"] == "list"
    assert {"id": "tiny", "object": "model", "created": 0, "owned_by": "cuset", "source": "folder"} in listing["data"]
    assert client.get("/v1/models/tiny").json()["id"] == "tiny"


def test_an_unknown_model_is_a_404_on_the_model_param(client):
    retrieved = client.get("/v1/models/no-such-model")
    generated = client.post("/v1/chat/completions", json={"model": "no-such-model", "messages": HELLO})

    for response in (retrieved, generated):
        assert response.status_code == 404
        assert response.json()["error"]["param"] == "model"
        assert response.json()["error"]["type"] == "not_found_error"


def test_chat_completion_answers_in_the_openai_shape(client, worker):
    response = client.post(
        "/v1/chat/completions", json={"model": "tiny", "messages": HELLO, "max_tokens": 16, "temperature": 0, "n": 2}
    )

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "chat.completion" and body["model"] == "tiny" and body["id"].startswith("gen-")
    assert [c["index"] for c in body["choices"]] == [0, 1]
    first = body["choices"][0]
    assert first["message"]["role"] == "assistant" and first["message"]["content"]
    assert first["finish_reason"] in ("stop", "length")
    assert body["choices"][1]["message"] == first["message"]  # greedy: n copies of one answer
    usage = body["usage"]
    assert usage["prompt_tokens"] > 10
    assert 2 <= usage["completion_tokens"] <= 32
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_completion_continues_the_raw_prompt(client, worker, tokenizer):
    prompt = "__global__ void add(float* a, float* b) {"

    body = client.post(
        "/v1/completions", json={"model": "tiny", "prompt": prompt, "max_tokens": 12, "temperature": 0}
    ).json()

    assert body["object"] == "text_completion"
    assert body["choices"][0]["text"] and body["choices"][0]["logprobs"] is None
    # No chat template: the prompt's tokens are exactly the raw text's.
    assert body["usage"]["prompt_tokens"] == len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    if body["choices"][0]["finish_reason"] == "length":
        assert body["usage"]["completion_tokens"] == 12


def test_a_stop_string_ends_the_text_before_it(client, worker):
    request = {"model": "tiny", "prompt": "int main() {", "max_tokens": 16, "temperature": 0}
    full = client.post("/v1/completions", json=request).json()["choices"][0]["text"]
    stop = full[3:6]
    if not stop.strip():
        pytest.skip("the random model's answer has no usable stop string")

    cut = client.post("/v1/completions", json=request | {"stop": [stop]}).json()["choices"][0]

    assert cut["text"] == full[: full.find(stop)]
    assert cut["finish_reason"] == "stop"


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_streamed_deltas_add_up_to_the_non_streamed_answer(client, worker, path):
    chat = path == "/v1/chat/completions"
    request = {"model": "tiny", "max_tokens": 64, "temperature": 0, "seed": 3}
    request |= {"messages": HELLO} if chat else {"prompt": "Once upon a time"}
    whole = client.post(path, json=request).json()["choices"][0]
    whole_text = whole["message"]["content"] if chat else whole["text"]

    events = stream(client, path, request | {"stream": True})

    assert events[-1] == (None, "[DONE]")
    chunks = [json.loads(data) for _, data in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk" if chat else "text_completion"}
    if chat:
        assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    else:
        text = "".join(c["choices"][0]["text"] for c in chunks)
    assert text == whole_text
    assert chunks[-1]["choices"][0]["finish_reason"] == whole["finish_reason"]
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])


def test_generate_returns_samples_with_code_usage_and_timings(client, worker):
    problem = demo_problems()[0].problem_code

    response = client.post(
        "/v1/generate",
        json={"model": "tiny", "problem": problem, "max_tokens": 16, "n": 2, "temperature": 0.8, "seed": 5},
    )

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "generation" and len(body["samples"]) == 2
    for index, sample in enumerate(body["samples"]):
        assert sample["index"] == index
        assert sample["code"] == sample["text"] or sample["code"] in sample["text"]
        assert sample["verification"] is None
    timings = body["timings"]
    assert timings["queue_s"] >= 0 and timings["generate_s"] > 0 and timings["total_s"] >= timings["generate_s"]
    assert body["usage"]["completion_tokens"] > 0


@pytest.mark.parametrize("tier", ["static", pytest.param("compile", marks=pytest.mark.nvcc)])
def test_generate_verifies_every_sample_up_to_the_tier(client, worker, tier):
    problem = demo_problems()[1].problem_code

    response = client.post(
        "/v1/generate",
        json={"model": "tiny", "problem": problem, "max_tokens": 16, "n": 2, "temperature": 1.0, "verify": tier},
    )

    assert response.status_code == 200, response.text
    body = response.json()
    for sample in body["samples"]:
        result = VerifyResult.model_validate(sample["verification"])
        assert result.verdict and result.tiers_run and result.tiers_run[0].value == "static"
        assert not result.passed  # the random model writes no kernel
    assert body["timings"]["verify_s"] >= 0


def test_generate_streams_deltas_done_verification_and_the_end(client, worker):
    problem = demo_problems()[0].problem_code

    events = stream(
        client,
        "/v1/generate",
        {"model": "tiny", "problem": problem, "max_tokens": 16, "temperature": 0, "verify": "static", "stream": True},
    )

    assert events[-1] == (None, "[DONE]")
    names = [name for name, _ in events[:-1]]
    assert names[-1] == "generation.done"
    assert names.index("sample.done") < names.index("sample.verification")
    payloads = {name: json.loads(data) for name, data in events[:-1]}
    deltas = "".join(json.loads(data)["delta"] for name, data in events if name == "sample.delta")
    assert deltas == payloads["sample.done"]["text"]
    assert set(payloads["sample.done"]) == {"index", "text", "code", "finish_reason"}
    assert payloads["sample.verification"]["verification"]["verdict"]
    assert payloads["generation.done"]["usage"]["completion_tokens"] > 0


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"max_tokens": 10**6}, "max_tokens"),
        ({"n": 10**3}, "n"),
        ({"verify": "static"}, "verify"),
    ],
)
def test_requests_over_the_limits_are_400s_naming_the_field(client, body, param):
    response = client.post("/v1/generate", json={"model": "tiny", "prompt": "hi"} | body)

    assert response.status_code == 400
    assert response.json()["error"]["param"] == param


def test_chat_max_tokens_over_the_limit_is_a_400(client):
    response = client.post("/v1/chat/completions", json={"model": "tiny", "messages": HELLO, "max_tokens": 10**6})

    assert response.status_code == 400 and response.json()["error"]["param"] == "max_tokens"


def _add_tuned_model(settings, name: str, output_dir: str, owner: str = TEST_OWNER) -> None:
    """A succeeded fine-tuning job whose adapter lives in ``output_dir`` (under the artifact root)."""
    insert_tuned_model(settings.resolved_database_url, name, output_dir, owner)


def test_a_tuned_adapter_is_listed_and_serves_generations(client, worker, service_settings, tiny_model_dir):
    from peft import LoraConfig, get_peft_model

    from cuset_core.models import load_model, write_base_spec

    folder = service_settings.artifacts / "adapters" / "lora1"
    base, _ = load_model(tiny_model_dir)
    get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj", "v_proj"])).save_pretrained(folder)
    write_base_spec(folder, str(tiny_model_dir))
    _add_tuned_model(service_settings, "lora1", "adapters/lora1")

    listed = [m for m in client.get("/v1/models").json()["data"] if m["id"] == "ft:tiny:lora1"]
    response = client.post(
        "/v1/chat/completions", json={"model": "ft:tiny:lora1", "messages": HELLO, "max_tokens": 8, "temperature": 0}
    )

    assert listed and listed[0]["owned_by"] == TEST_OWNER and listed[0]["created"] > 0
    assert response.status_code == 200, response.text
    assert response.json()["model"] == "ft:tiny:lora1"


def test_another_owners_tuned_model_is_unknown(client, service_settings):
    _add_tuned_model(service_settings, "theirs", "adapters/theirs", owner="someone-else")

    listed = [m["id"] for m in client.get("/v1/models").json()["data"]]
    retrieved = client.get("/v1/models/ft:tiny:theirs")
    generated = client.post("/v1/completions", json={"model": "ft:tiny:theirs", "prompt": "x"})

    assert "ft:tiny:theirs" not in listed
    assert retrieved.status_code == 404 and generated.status_code == 404
    assert generated.json()["error"]["param"] == "model"


def test_a_model_that_fails_to_load_fails_the_request_with_its_reason(client, worker, service_settings):
    (service_settings.artifacts / "adapters" / "broken").mkdir(parents=True)
    (service_settings.artifacts / "adapters" / "broken" / "adapter_config.json").write_text("{}")
    _add_tuned_model(service_settings, "broken", "adapters/broken")

    response = client.post("/v1/chat/completions", json={"model": "ft:tiny:broken", "messages": HELLO, "max_tokens": 8})

    assert response.status_code == 500
    error = response.json()["error"]
    assert error["code"] == "generation_failed" and "could not load model" in error["message"]


def test_concurrent_requests_for_one_model_are_decoded_in_one_batch(server, worker, service_settings, auth_headers):
    # With the worker stopped the requests pile up as queued rows; the first task to start then
    # takes the others into its batch.
    worker.stop()
    prompts = [f"Kernel number {i}:" for i in range(4)]
    answers: dict[str, httpx.Response] = {}

    def ask(prompt: str) -> None:
        answers[prompt] = httpx.post(
            f"{server}/v1/completions",
            timeout=120,
            headers=auth_headers,
            json={"model": "tiny", "prompt": prompt, "max_tokens": 8, "temperature": 0},
        )

    threads = [threading.Thread(target=ask, args=(p,)) for p in prompts]
    try:
        for thread in threads:
            thread.start()

        def queued() -> int:
            with session_scope(service_settings.resolved_database_url) as session:
                rows = session.scalars(select(Generation).where(Generation.status == "queued")).all()
                return sum(row.request.prompts[0] in prompts for row in rows) == len(prompts)

        wait_for(queued, timeout=30, what="all requests queued")
    finally:
        worker.start()
    for thread in threads:
        thread.join(150)

    assert all(answers[p].status_code == 200 for p in prompts), [answers[p].text for p in prompts]
    with session_scope(service_settings.resolved_database_url) as session:
        ids = [answers[p].json()["id"] for p in prompts]
        sizes = [row.timings.batch_size for row in session.scalars(select(Generation).where(Generation.id.in_(ids)))]
    assert max(sizes) > 1
    assert sum(1 for size in sizes if size > 1) >= 2  # a batch of k reports k on each of its rows


def test_requests_sent_together_to_a_running_worker_share_one_batch(server, worker, service_settings, auth_headers):
    # They reach the queue some milliseconds apart; the first one claimed waits for the others
    # (generation_batch_wait_s after each that joins) instead of being decoded alone. The test
    # worker runs two processes, so a second task may lead a batch of its own meanwhile: at
    # most two batches, whichever way the requests split between them.
    prompts = [f"Together {i}:" for i in range(4)]
    with ThreadPoolExecutor(len(prompts)) as pool:
        answers = list(
            pool.map(
                lambda prompt: httpx.post(
                    f"{server}/v1/completions",
                    timeout=150,
                    headers=auth_headers,
                    json={"model": "tiny", "prompt": prompt, "max_tokens": 8, "temperature": 0},
                ),
                prompts,
            )
        )

    assert all(answer.status_code == 200 for answer in answers), [answer.text for answer in answers]
    with session_scope(service_settings.resolved_database_url) as session:
        ids = [answer.json()["id"] for answer in answers]
        sizes = [row.timings.batch_size for row in session.scalars(select(Generation).where(Generation.id.in_(ids)))]
    batches = round(sum(1 / size for size in sizes))  # a batch of k reports k on each of its k rows
    assert batches <= 2, sizes
