"""The official ``openai`` client against a real uvicorn server: files create/list/retrieve/
content/delete, and a rejected upload surfacing as the client's BadRequestError."""

from __future__ import annotations

import json

import openai
import pytest

from cuset_core.demo import demo_problems, demo_record


@pytest.fixture()
def oai(server, api_key):
    return openai.OpenAI(base_url=server + "/v1", api_key=api_key, max_retries=0)


def _dataset(n: int = 3) -> bytes:
    return "".join(json.dumps(demo_record(p)) + "\n" for p in demo_problems()[:n]).encode()


def test_create_list_retrieve_content_delete(oai):
    content = _dataset()
    created = oai.files.create(file=("kernels.jsonl", content), purpose="fine-tune")
    assert created.id.startswith("file-") and created.object == "file"
    assert (created.filename, created.purpose, created.bytes, created.status) == (
        "kernels.jsonl",
        "fine-tune",
        len(content),
        "processed",
    )
    assert created.model_extra["records"] == 3

    assert created.id in [f.id for f in oai.files.list(purpose="fine-tune", limit=100)]
    retrieved = oai.files.retrieve(created.id)
    assert (retrieved.id, retrieved.bytes, retrieved.created_at) == (created.id, created.bytes, created.created_at)
    assert oai.files.content(created.id).read() == content

    deleted = oai.files.delete(created.id)
    assert (deleted.id, deleted.deleted) == (created.id, True)
    with pytest.raises(openai.NotFoundError):
        oai.files.retrieve(created.id)


def test_list_pages_through_every_file(oai):
    ids = {oai.files.create(file=(f"part{i}.jsonl", _dataset(1)), purpose="fine-tune").id for i in range(3)}
    first = oai.files.list(limit=2)
    assert len(first.data) == 2 and first.has_more
    seen = [f.id for f in oai.files.list(limit=2)]  # iterating follows `after` across pages
    assert ids <= set(seen) and len(seen) == len(set(seen))


def test_a_rejected_file_is_a_bad_request_naming_the_line(oai):
    bad = _dataset(1) + b'{"messages": [{"role": "assistant", "content": "x"}]}\n'
    with pytest.raises(openai.BadRequestError) as caught:
        oai.files.create(file=("bad.jsonl", bad), purpose="fine-tune")
    assert caught.value.code == "invalid_file" and caught.value.param == "file"
    assert "line 2" in caught.value.message
