"""Two rules every route keeps (issue 50, item 9), checked across the API on the embedded SQLite
database: an unknown model is a 404 ``model_not_found`` naming ``model`` wherever a model is
named, and a request the schema refuses is a 400 in OpenAI's error shape naming the field."""

from __future__ import annotations

import pytest

from cuset_core.demo import demo_problems
from tests.integration.job_support import job_request, upload_demo_dataset
from tests.sqlite_service import enqueued

PROBLEM = demo_problems()[0].problem_code
HELLO = [{"role": "user", "content": "hi"}]


def assert_error(response, status: int, code: str, param: str | None) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", code, param)
    assert error["message"]


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("post", "/v1/chat/completions", {"messages": HELLO}),
        ("post", "/v1/completions", {"prompt": "hi"}),
        ("post", "/v1/generate", {"prompt": "hi"}),
        ("post", "/v1/evals", {"problems": "demo:held-out", "samples": 0}),
        ("post", "/v1/fine_tuning/jobs", None),
        ("get", "/v1/models/{model}", None),
    ],
)
def test_an_unknown_model_is_a_404_model_not_found_everywhere(fast_client, fast_settings, method, path, body):
    model = "no-such-model"
    if path == "/v1/fine_tuning/jobs":
        body = job_request(upload_demo_dataset(fast_client))
    json = None if body is None else body | {"model": model}
    response = fast_client.request(method, path.format(model=model), json=json)
    assert response.status_code == 404, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"], error["type"]) == ("model_not_found", "model", "not_found_error")
    assert model in error["message"]
    assert [task for task, _ in enqueued(fast_settings) if task != "cuset.validate_file"] == []


@pytest.mark.parametrize(
    ("method", "path", "body", "param"),
    [
        ("post", "/v1/chat/completions", {"model": "tiny", "messages": HELLO, "temperature": -1}, "temperature"),
        ("post", "/v1/completions", {"model": "tiny", "prompt": "hi", "max_tokens": "many"}, "max_tokens"),
        ("post", "/v1/generate", {"model": "tiny", "problem": PROBLEM, "best_of": 0}, "best_of"),
        ("post", "/v1/evals", {"model": "tiny", "problems": "demo", "tier": "quantum"}, "tier"),
        ("post", "/v1/fine_tuning/jobs", {"model": "tiny", "training_file": "file-x", "seed": -1}, "seed"),
        ("get", "/v1/files?limit=0", None, "limit"),
        ("get", "/v1/fine_tuning/jobs?limit=0", None, "limit"),
        ("post", "/v1/chat/completions", {"messages": HELLO}, "model"),
    ],
)
def test_a_request_the_schema_refuses_is_a_400_naming_the_field(fast_client, method, path, body, param):
    response = fast_client.request(method, path, json=body)
    assert_error(response, 400, "invalid_request", param)
    assert param in response.json()["error"]["message"]
