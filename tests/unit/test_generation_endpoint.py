"""The openai:URL#NAME model spec and how a streamed answer is read (the endpoint itself is
exercised in tests/integration)."""

from __future__ import annotations

import json

import httpx
import pytest

from cuset_core.generation.endpoint import (
    Endpoint,
    EndpointDelta,
    EndpointError,
    chat_answers,
    is_endpoint_spec,
    parse_endpoint,
    stream_answer,
)


def test_an_endpoint_spec_names_the_base_url_and_the_served_model():
    assert parse_endpoint("openai:http://127.0.0.1:8000/v1/#org/model-7b") == Endpoint(
        "http://127.0.0.1:8000/v1", "org/model-7b"
    )
    assert is_endpoint_spec("openai:https://x/v1#m") and not is_endpoint_spec("smollm2-135m")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("openai:http://127.0.0.1:8000/v1", "expected openai:URL#NAME"),
        ("openai:http://127.0.0.1:8000/v1#", "expected openai:URL#NAME"),
        ("openai:127.0.0.1:8000#m", "the URL must be http"),
        ("openai:file:///etc/passwd#m", "the URL must be http"),
    ],
)
def test_malformed_endpoint_specs_say_what_is_expected(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_endpoint(spec)


def _sse_engine(*payloads: str) -> httpx.Client:
    """A client whose engine streams ``payloads`` as SSE ``data`` lines (the protocol's bytes;
    the real engines are exercised in tests/integration/test_engines.py)."""
    body = "".join(f"data: {p}\n\n" for p in payloads).encode()
    return httpx.Client(transport=httpx.MockTransport(lambda request: httpx.Response(200, content=body)))


DECODING = {"temperature": 0.0, "top_p": 1.0, "max_tokens": 8, "seed": None}


def test_a_streamed_chat_answer_arrives_as_deltas_then_usage():
    chunks = [
        '{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]}',
        '{"choices": [{"index": 0, "delta": {"content": "__global__"}, "finish_reason": null}]}',
        '{"choices": [{"index": 0, "delta": {"content": " void"}, "finish_reason": null}]}',
        '{"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}',
        '{"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}',
        "[DONE]",
    ]
    with _sse_engine(*chunks) as client:
        deltas = list(
            stream_answer(client, Endpoint("http://engine/v1", "m"), [{"role": "user", "content": "x"}], **DECODING)
        )

    assert "".join(d.text for d in deltas) == "__global__ void"
    assert [d.finish_reason for d in deltas if d.finish_reason] == ["length"]
    assert deltas[-1] == EndpointDelta(prompt_tokens=5, completion_tokens=2)


def test_an_error_in_the_stream_is_an_endpoint_error_with_its_message():
    chunks = [
        '{"choices": [{"index": 0, "text": "a", "finish_reason": null}]}',
        '{"error": {"message": "out of memory"}}',
    ]
    with _sse_engine(*chunks) as client, pytest.raises(EndpointError, match="out of memory"):
        list(stream_answer(client, Endpoint("http://engine/v1", "m"), "raw prompt", **DECODING))


class _Engine:
    """An engine's chat endpoint as a transport: answers each request with ``choices`` choices
    (None: as many as asked), or ``refuse_n`` (a status) when asked for more than one; records
    the n and seed of every request."""

    def __init__(self, *, choices: int | None = None, refuse_n: int | None = None) -> None:
        self.choices, self.refuse_n = choices, refuse_n
        self.asked: list[tuple[int, int | None]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        n, seed = body["n"], body["seed"]
        self.asked.append((n, seed))
        if n > 1 and self.refuse_n:
            return httpx.Response(self.refuse_n, json={"error": {"message": "only one completion per request"}})
        count = n if self.choices is None else min(n, self.choices)
        choices = [
            {"index": i, "message": {"content": f"answer seed={seed} choice={i}"}, "finish_reason": "stop"}
            for i in range(count)
        ]
        return httpx.Response(200, json={"choices": choices, "usage": {"prompt_tokens": 3, "completion_tokens": 4}})


SAMPLING = {"temperature": 0.8, "top_p": 0.95, "max_tokens": 8}


def _answers(engine: _Engine, endpoint: Endpoint, n: int, seed: int | None = 10) -> list[str]:
    with httpx.Client(transport=httpx.MockTransport(engine)) as client:
        answers = chat_answers(client, endpoint, [{"role": "user", "content": "x"}], n=n, seed=seed, **SAMPLING)
    return [a.text for a in answers]


def test_an_engine_refusing_n_gets_one_request_per_answer_with_its_own_seed_and_is_remembered():
    engine, endpoint = _Engine(refuse_n=400), Endpoint("http://refuses-n/v1", "m")

    first = _answers(engine, endpoint, 3)
    second = _answers(engine, endpoint, 2)

    assert first == [f"answer seed={s} choice=0" for s in (10, 11, 12)]
    assert second == [f"answer seed={s} choice=0" for s in (10, 11)]
    assert engine.asked[0] == (3, 10), "asked for n once"
    assert sorted(engine.asked[1:4]) == [(1, 10), (1, 11), (1, 12)]
    assert sorted(engine.asked[4:]) == [(1, 10), (1, 11)], "then never again"


def test_an_engine_returning_fewer_choices_is_asked_the_rest_one_by_one():
    engine = _Engine(choices=1)

    texts = _answers(engine, Endpoint("http://ignores-n/v1", "m"), 3, seed=None)

    assert len(texts) == 3 and engine.asked[0] == (3, None)
    assert sorted(engine.asked[1:]) == [(1, None), (1, None)]


def test_an_engine_configured_without_n_is_never_asked_for_several_choices():
    engine = _Engine()

    texts = _answers(engine, Endpoint("http://configured/v1", "m", supports_n=False), 2)

    assert texts == ["answer seed=10 choice=0", "answer seed=11 choice=0"]
    assert sorted(engine.asked) == [(1, 10), (1, 11)]


def test_an_engine_that_honours_n_answers_in_one_request():
    engine = _Engine()
    assert len(_answers(engine, Endpoint("http://honours-n/v1", "m"), 4)) == 4 and engine.asked == [(4, 10)]


def test_an_error_that_is_not_about_n_is_raised_with_the_url_and_status():
    engine = _Engine(refuse_n=401)
    with pytest.raises(EndpointError, match="answered 401") as raised:
        _answers(engine, Endpoint("http://locked/v1", "m"), 2)
    assert (raised.value.url, raised.value.status) == ("http://locked/v1/chat/completions", 401)
    assert engine.asked == [(2, 10)]


def test_an_unreachable_engine_is_an_endpoint_error_naming_the_url_and_the_connection_error():
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("Connection refused", request=request)

    with httpx.Client(transport=httpx.MockTransport(refuse)) as client, pytest.raises(EndpointError) as raised:
        chat_answers(client, Endpoint("http://down/v1", "m"), [], n=1, seed=None, **SAMPLING)
    assert raised.value.status is None and raised.value.url == "http://down/v1/chat/completions"
    assert str(raised.value) == "model: cannot reach http://down/v1/chat/completions: ConnectError: Connection refused"
