"""Engine backends: a front service whose base model ``tiny`` is served by an OpenAI-compatible
engine decodes there. The engine is the run's own service (this project's ``/v1`` speaks the
same protocol); the front is a second instance with a database, broker prefix and worker of its
own, whose spec of ``tiny`` points at no weights, so every answer it gives came from the engine.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy import func, select

from db.errors import ErrorInfo
from db.keys import create_key
from db.models import Generation
from db.session import session_scope
from db.settings import Settings
from tests.integration.job_support import insert_tuned_model
from tests.real_service import TEST_OWNER, ServiceServer, WorkerProcess, fresh_database, wait_for

KEY_ENV = "CUSET_TEST_ENGINE_KEY"
HELLO = [{"role": "user", "content": "Write a CUDA kernel that adds two vectors."}]
GREEDY = {"max_tokens": 8, "temperature": 0}


def _changed(settings: Settings, **changes) -> Settings:
    """``settings`` with ``changes``, validated as the environment's would be."""
    return Settings(**(settings.model_dump() | changes))


UNREACHABLE = "http://127.0.0.1:9/v1"  # the discard port: nothing listens there


@pytest.fixture(scope="module")
def single_engine(worker, service_settings, tmp_path_factory) -> Iterator[str]:
    """A second API of the engine service (same database and worker) that answers one sample per
    request: ``n > 1`` is refused with a 400, as llama.cpp's server and some TGI builds do."""
    engine = ServiceServer(
        _changed(service_settings, max_samples_per_request=1), tmp_path_factory.mktemp("single-engine")
    )
    engine.start()
    yield engine.base
    engine.stop()


@pytest.fixture(scope="module")
def front(
    server, single_engine, worker, api_key, service_settings, broker_key_prefix, tmp_path_factory
) -> Iterator[httpx.Client]:
    """The front service's API (in process) with its own worker; its key in the headers. Besides
    ``tiny``, its base models ``gone`` (an engine that cannot be reached), ``misnamed`` (the
    engine, under a model name it does not serve) and ``single`` (the engine without ``n``)."""
    from fastapi.testclient import TestClient

    from api.main import create_app

    engines = {
        "tiny": {"url": f"{server}/v1", "api_key_env": KEY_ENV},
        "gone": {"url": UNREACHABLE},
        "misnamed": {"url": f"{server}/v1", "model": "not-served-here", "api_key_env": KEY_ENV},
        "single": {"url": f"{single_engine}/v1", "model": "tiny", "api_key_env": KEY_ENV},
    }
    with fresh_database() as database_url, pytest.MonkeyPatch.context() as env:
        env.setenv(KEY_ENV, api_key)  # the front's API and worker read the engine's key from it
        settings = _changed(
            service_settings,
            data_dir=tmp_path_factory.mktemp("front"),
            database_url=database_url,
            broker_key_prefix=f"{broker_key_prefix}front:",
            base_models={model: f"/nonexistent/{model}-weights" for model in engines},
            inference_engines=engines,
        )
        with session_scope(database_url) as session:
            front_key = create_key(session, TEST_OWNER).secret
        front_worker = WorkerProcess(settings, tmp_path_factory.mktemp("front-worker"), queues="infer,cpu")
        front_worker.start()
        try:
            with TestClient(create_app(settings), headers={"Authorization": f"Bearer {front_key}"}) as client:
                client.settings = settings
                yield client
        finally:
            front_worker.stop()


@pytest.fixture()
def engine(server, auth_headers) -> Iterator[httpx.Client]:
    """A client of the engine itself."""
    with httpx.Client(base_url=server, headers=auth_headers, timeout=120) as client:
        yield client


def _engine_rows(service_settings, **match) -> int:
    """How many generation rows the engine's own database holds that match ``match``."""
    with session_scope(service_settings.resolved_database_url) as session:
        query = select(func.count()).select_from(Generation).filter_by(owner=TEST_OWNER, **match)
        return session.scalar(query)


def test_completions_and_chat_decode_at_the_engine(front, engine, service_settings):
    before = {kind: _engine_rows(service_settings, kind=kind) for kind in ("completion", "chat")}

    completion = front.post("/v1/completions", json={"model": "tiny", "prompt": "__global__ void"} | GREEDY)
    chat = front.post("/v1/chat/completions", json={"model": "tiny", "messages": HELLO} | GREEDY)
    direct = engine.post("/v1/chat/completions", json={"model": "tiny", "messages": HELLO} | GREEDY)

    assert completion.status_code == 200, completion.text
    assert chat.status_code == 200, chat.text
    assert completion.json()["choices"][0]["text"] and completion.json()["model"] == "tiny"
    assert chat.json()["choices"][0]["message"]["content"] == direct.json()["choices"][0]["message"]["content"]
    assert chat.json()["usage"] == direct.json()["usage"]
    assert _engine_rows(service_settings, kind="completion") == before["completion"] + 1
    assert _engine_rows(service_settings, kind="chat") == before["chat"] + 2  # the front's and the direct one


def _events(response: httpx.Response) -> list[tuple[str, dict | str]]:
    """(event, data) of a server-sent event stream; the last data is ``[DONE]``."""
    events, name = [], "message"
    for line in response.iter_lines():
        if line.startswith("event:"):
            name = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            data = line.removeprefix("data:").strip()
            events.append((name, data if data == "[DONE]" else json.loads(data)))
            name = "message"
    return events


def test_generate_streams_what_the_engine_decodes(front, engine):
    body = {"model": "tiny", "prompt": "Write a CUDA kernel that adds two vectors."} | GREEDY
    whole = front.post("/v1/generate", json=body)
    with front.stream("POST", "/v1/generate", json=body | {"stream": True}) as response:
        assert response.status_code == 200
        events = _events(response)
    direct = engine.post("/v1/chat/completions", json={"model": "tiny", "messages": HELLO} | GREEDY)

    assert whole.status_code == 200, whole.text
    names = [name for name, _ in events]
    assert names[0] == "sample.start" and names[-2:] == ["generation.done", "message"] and events[-1][1] == "[DONE]"
    streamed = "".join(data["delta"] for name, data in events if name == "sample.delta")
    done = next(data for name, data in events if name == "sample.done")
    assert streamed == done["text"] == whole.json()["samples"][0]["text"]
    assert done["text"] == direct.json()["choices"][0]["message"]["content"]
    assert whole.json()["usage"]["completion_tokens"] == direct.json()["usage"]["completion_tokens"]


def test_a_tuned_adapter_is_addressed_at_the_engine_by_its_name(front, service_settings, tiny_model_dir):
    from peft import LoraConfig, get_peft_model

    from cuset_core.models import load_model, write_base_spec

    # The engine serves the adapter under its fine-tuned model id (vLLM: --lora-modules NAME=PATH);
    # the front knows the same model id from its own succeeded job, whose files it never reads.
    folder = service_settings.artifacts / "adapters" / "engine-lora"
    base, _ = load_model(tiny_model_dir)
    get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj", "v_proj"])).save_pretrained(folder)
    write_base_spec(folder, str(tiny_model_dir))
    insert_tuned_model(service_settings.resolved_database_url, "engine-lora", "adapters/engine-lora")
    insert_tuned_model(front.settings.resolved_database_url, "engine-lora", "adapters/never-written")

    chat = front.post("/v1/chat/completions", json={"model": "ft:tiny:engine-lora", "messages": HELLO} | GREEDY)

    assert chat.status_code == 200, chat.text
    assert chat.json()["model"] == "ft:tiny:engine-lora" and chat.json()["choices"][0]["message"]["content"]
    assert _engine_rows(service_settings, model="ft:tiny:engine-lora") == 1


EVAL = {"samples": 0, "max_tokens": 8, "tier": "static", "problems": "demo:held-out"}


def _finished_eval(front: httpx.Client, request: dict) -> dict:
    """Create an eval on the front and wait until it leaves queued/running."""
    created = front.post("/v1/evals", json=EVAL | request)
    assert created.status_code == 200, created.text

    def finished():
        body = front.get(f"/v1/evals/{created.json()['id']}").json()
        return body if body["status"] not in ("queued", "running") else None

    return wait_for(finished, timeout=240, interval=0.5, what="the eval to finish")


def test_an_eval_generates_at_the_engine(front, service_settings):
    before = _engine_rows(service_settings, kind="chat")

    final = _finished_eval(front, {"model": "tiny"})

    assert final["status"] == "succeeded", final
    assert final["aggregate"]["problems"] == 4
    assert _engine_rows(service_settings, kind="chat") == before + 4  # one greedy answer per problem


def test_samples_of_an_eval_come_one_request_each_from_an_engine_that_refuses_n(front, service_settings):
    before = _engine_rows(service_settings, kind="chat")

    final = _finished_eval(front, {"model": "single", "samples": 2, "temperature": 1.0})

    assert final["status"] == "succeeded", final
    assert final["aggregate"]["samples"] == 12 and final["aggregate"]["sampled"]["samples"] == 8
    # Each problem's two samples were refused together (400, no row), then decoded one by one.
    assert _engine_rows(service_settings, kind="chat") == before + 4 * 3
    problems = front.get(f"/v1/evals/{final['id']}/problems").json()["data"]
    assert all(len(p["samples"]) == 3 and all(s["answer"] for s in p["samples"]) for p in problems)


@pytest.mark.parametrize(
    ("model", "code", "reason"),
    [
        ("gone", "engine_unreachable", f"cannot reach {UNREACHABLE}/chat/completions: ConnectError"),
        ("misnamed", "engine_error", "/v1/chat/completions answered 404"),
    ],
)
def test_an_eval_whose_engine_fails_names_the_engine_and_what_went_wrong(front, model, code, reason):
    final = _finished_eval(front, {"model": model})

    assert final["status"] == "failed" and final["aggregate"] is None
    assert final["error"]["code"] == code, final["error"]
    assert final["error"]["message"].startswith("The inference engine failed: ") and reason in final["error"]["message"]


def test_readyz_reports_each_engine(front, service_settings, server):
    from fastapi.testclient import TestClient

    from api.main import create_app

    ready = front.get("/readyz")

    assert ready.status_code == 200
    assert ready.json()["engines"]["tiny"] == {"url": f"{server}/v1", "model": "tiny", "status": "reachable"}
    assert ready.json()["engines"]["gone"]["status"] == "unreachable"
    closed = _changed(service_settings, inference_engines={"tiny": {"url": "http://127.0.0.1:9/v1", "model": "base"}})
    with TestClient(create_app(closed)) as client:
        down = client.get("/readyz")
    assert down.status_code == 200, "an engine down fails only its models' requests, not readiness"
    assert down.json()["engines"]["tiny"]["status"] == "unreachable"
    assert down.json()["engines"]["tiny"]["model"] == "base"


def test_an_engine_that_cannot_be_reached_fails_the_generation_with_the_reason(front):
    from db.engine_routes import EngineRoute
    from db.generations import GenerationRequest
    from db.ids import new_id
    from service.dispatch import send_generate

    # A row as the API writes it for a model whose engine has gone away since.
    gone = EngineRoute(url=UNREACHABLE, model="tiny")
    request = GenerationRequest(spec="tiny", engine=gone, prompts=[HELLO], max_tokens=8)
    url = front.settings.resolved_database_url
    with session_scope(url) as session:
        row = Generation(id=new_id("gen"), owner=TEST_OWNER, model="tiny", kind="chat", request=request)
        session.add(row)
        generation_id = row.id
    send_generate(front.settings, generation_id)

    def failed() -> ErrorInfo | None:
        with session_scope(url) as session:
            stored = session.get(Generation, generation_id)
            return stored.error if stored.status == "failed" else None

    error = wait_for(failed, timeout=60, what="the generation to fail")
    assert error.code == "decode_failed" and "cannot reach http://127.0.0.1:9/v1" in error.message
