"""Base models from every source (bundled, GGUF file, folder, Hugging Face repo id): /v1/models
says where each comes from, a repo id that cannot be found fails at job creation with how to
fetch it, and the precision and memory knobs are job hyperparameters."""

from __future__ import annotations

import pytest
import torch
from fastapi.testclient import TestClient

from api.errors import APIError
from api.routers.jobs import _check_load_options
from cuset_core.training.config import Hyperparameters
from db.settings import Settings
from tests.integration.job_support import FINISHED, job_request, job_state, upload_demo_dataset
from tests.real_service import wait_for

QLORA = {"bits": 4, "type": "nf4", "double_quant": True}


@pytest.fixture
def offline_hub(monkeypatch, hf_home):
    """The API process looking at ``hf_home``'s HF cache with HF_HUB_OFFLINE set."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hf_home / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


@pytest.fixture
def sources_client(service_settings, auth_headers, tiny_model_dir, tmp_path, offline_hub):
    """The API serving one base model of each source, two of them Hub repo ids (one cached)."""
    from api.main import create_app

    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    settings = service_settings.model_copy(
        update={
            "base_models": {
                "tiny": str(tiny_model_dir),
                "bundled": "smollm2-135m",
                "file": str(gguf),
                "tiny-hub": "cuset-test/tiny-coder",
                "absent-hub": "org/absent-coder",
                "gone": str(tmp_path / "gone"),
            }
        }
    )
    with TestClient(create_app(settings), headers=auth_headers) as client:
        yield client


def test_models_say_their_source(sources_client):
    listing = {model["id"]: model for model in sources_client.get("/v1/models").json()["data"]}

    assert {name: listing[name]["source"] for name in ("tiny", "bundled", "file", "tiny-hub", "absent-hub", "gone")} \
        == {"tiny": "folder", "bundled": "bundled", "file": "gguf", "tiny-hub": "hub", "absent-hub": "hub",
            "gone": None}  # fmt: skip
    assert sources_client.get("/v1/models/tiny-hub").json()["source"] == "hub"


def test_a_cached_repo_id_is_accepted_for_tuning(sources_client):
    training_file = upload_demo_dataset(sources_client)
    response = sources_client.post("/v1/fine_tuning/jobs", json={**job_request(training_file), "model": "tiny-hub"})

    assert response.status_code == 200, response.text
    sources_client.post(f"/v1/fine_tuning/jobs/{response.json()['id']}/cancel")


def test_an_uncached_repo_id_fails_at_job_creation_saying_how_to_fetch_it(sources_client):
    training_file = upload_demo_dataset(sources_client)
    response = sources_client.post("/v1/fine_tuning/jobs", json={**job_request(training_file), "model": "absent-hub"})

    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["param"], error["code"]) == ("model", "model_not_available")
    assert "'org/absent-coder' is not in the Hugging Face cache" in error["message"]
    assert "hf download org/absent-coder" in error["message"]


def test_precision_and_memory_knobs_are_stored_with_the_job(client, app, auth_headers):
    training_file = upload_demo_dataset(client)
    body = job_request(training_file)
    body["hyperparameters"] |= {
        "dtype": "bfloat16",
        "attn_implementation": "eager",
        "gradient_checkpointing": True,
        "group_by_length": True,
        "truncation": "cut",
        "loss_chunk_size": 512,
    }
    response = client.post("/v1/fine_tuning/jobs", json=body)

    assert response.status_code == 200, response.text
    stored = response.json()["hyperparameters"]
    client.post(f"/v1/fine_tuning/jobs/{response.json()['id']}/cancel")
    assert {key: stored[key] for key in body["hyperparameters"] if key in stored} == body["hyperparameters"]
    assert stored["quantization"] is None


@pytest.mark.parametrize(
    ("hyperparameters", "param", "message"),
    [
        ({"truncation": "wrap"}, "hyperparameters.truncation", "Input should be 'drop' or 'cut'"),
        ({"dtype": "int4"}, "hyperparameters.dtype", "Input should be 'auto', 'bfloat16', 'float16' or 'float32'"),
        ({"quantization": {"bits": 8}}, "hyperparameters.quantization.bits", "Input should be 4"),
        ({"quantization": QLORA, "lora": None}, "hyperparameters.quantization", "cannot be fully fine-tuned"),
    ],
)
def test_bad_precision_knobs_name_the_field(client, hyperparameters, param, message):
    body = job_request("file-unused")
    body["hyperparameters"] |= hyperparameters
    response = client.post("/v1/fine_tuning/jobs", json=body)

    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
    assert message in response.json()["error"]["message"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_an_embedded_server_without_a_gpu_refuses_qlora_at_creation(tmp_path):
    embedded = Settings(data_dir=tmp_path)
    with pytest.raises(APIError) as caught:
        _check_load_options(embedded, Hyperparameters(quantization=QLORA))

    assert caught.value.param == "hyperparameters.quantization"
    assert "needs a CUDA GPU" in str(caught.value.message)


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_qlora_on_a_worker_without_a_gpu_fails_with_the_reason(client, worker):
    training_file = upload_demo_dataset(client)
    body = job_request(training_file)
    body["hyperparameters"]["quantization"] = QLORA
    job = client.post("/v1/fine_tuning/jobs", json=body).json()

    done = wait_for(
        lambda: (s := job_state(client, job["id"]))["status"] in FINISHED and s, timeout=180, what="job end"
    )
    assert done["status"] == "failed"
    assert done["error"]["code"] == "invalid_config"
    assert done["error"]["message"].endswith(
        "hyperparameters.quantization: 4-bit quantization (QLoRA) needs a CUDA GPU and none is visible to this process"
    )
