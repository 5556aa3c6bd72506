"""The openai:URL#NAME model spec and how a streamed answer is read (the endpoint itself is
exercised in tests/integration)."""

from __future__ import annotations

import httpx
import pytest

from cuset_core.generation.endpoint import (
    Endpoint,
    EndpointDelta,
    EndpointError,
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
