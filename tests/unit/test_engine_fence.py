"""A ``/v1/generate`` answer streamed from an engine ends at the line closing its first code block:
the rest of the stream is never read (closing it stops the engine); chat answers run on."""

from __future__ import annotations

import json

import httpx
import pytest

from db.engine_routes import EngineRoute
from db.generations import GenerationRequest, GenerationSample
from service.generation_claims import Claimed
from worker.engine_decoding import engine_answer

PIECES = ["Here:\n```python\n", "x = 1\n", "```", "\nNow a long", " explanation", " of it."]


def _engine(pieces: list[str]) -> tuple[httpx.Client, list[int]]:
    """A client whose engine streams ``pieces`` as chat deltas, then ``length``; the list counts
    the chunks the reader pulled."""
    pulled: list[int] = []

    def chunks():
        for piece in pieces:
            pulled.append(1)
            yield f"data: {json.dumps({'choices': [{'index': 0, 'delta': {'content': piece}}]})}\n\n".encode()
        yield b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}\n\ndata: [DONE]\n\n'

    client = httpx.Client(transport=httpx.MockTransport(lambda request: httpx.Response(200, content=chunks())))
    return client, pulled


@pytest.mark.parametrize(
    ("kind", "text", "finish"),
    [("generate", "Here:\n```python\nx = 1\n```\n", "stop"), ("chat", "".join(PIECES), "length")],
)
def test_a_generate_answer_from_an_engine_ends_after_its_closing_fence(kind, text, finish):
    request = GenerationRequest(engine=EngineRoute(url="http://engine/v1", model="m"), prompts=[[]], max_tokens=64)
    row = Claimed("gen-1", "m", kind, request, 0.0)
    client, pulled = _engine(PIECES)

    with client:
        done = engine_answer(client, row, GenerationSample(index=0, prompt_index=0), [], None)

    assert (done.text, done.finish_reason) == (text, finish)
    assert len(pulled) == (4 if kind == "generate" else len(PIECES)), "nothing read past the closing fence"
