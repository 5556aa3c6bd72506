"""A tuned adapter leaves the service: a succeeded job lists it in ``result_files`` as one tar
archive, ``/v1/files/{id}/content`` serves it, and peft loads it onto the base to the logits and
the greedy text the worker's model gives. Trackers named in ``integrations`` are checked at job
creation, and TensorBoard event files are kept with the job's artifacts."""

from __future__ import annotations

import io
import tarfile

import pytest
import torch

from cuset_core.models import load_model
from tests.integration.job_support import FINISHED, job_request, job_state, upload_short_dataset
from tests.real_service import wait_for

PROMPT = "__global__ void add(const float* a, const float* b, float* out, int n) {"


@pytest.fixture(scope="module")
def finished_job(app, auth_headers, worker) -> dict:
    from fastapi.testclient import TestClient

    with TestClient(app, headers=auth_headers) as client:
        body = job_request(upload_short_dataset(client), max_steps=2, integrations=[{"type": "tensorboard"}])
        created = client.post("/v1/fine_tuning/jobs", json=body)
        assert created.status_code == 200, created.text
        assert created.json()["integrations"] == [{"type": "tensorboard"}]
        return wait_for(
            lambda: (s := job_state(client, created.json()["id"]))["status"] in FINISHED and s,
            timeout=240,
            what="job end",
        )


def test_a_succeeded_job_lists_its_adapter_archive(client, finished_job):
    assert finished_job["status"] == "succeeded", finished_job["error"]
    [file_id] = finished_job["result_files"]
    file = client.get(f"/v1/files/{file_id}").json()
    assert file["purpose"] == "fine-tune-results" and file["format"] == "tar" and file["bytes"] > 0
    assert file["filename"] == f"{finished_job['id']}-adapter.tar"
    assert file_id in [f["id"] for f in client.get("/v1/files", params={"purpose": "fine-tune-results"}).json()["data"]]
    records = client.get(f"/v1/files/{file_id}/records")
    assert records.status_code == 400 and records.json()["error"]["code"] == "not_a_dataset"


def test_the_downloaded_adapter_gives_the_workers_logits_and_text(
    client, finished_job, tmp_path, tiny_model_dir, service_settings
):
    from peft import PeftModel

    response = client.get(f"/v1/files/{finished_job['result_files'][0]}/content")
    assert response.status_code == 200 and response.headers["content-type"] == "application/x-tar"
    with tarfile.open(fileobj=io.BytesIO(response.content)) as archive:
        archive.extractall(tmp_path, filter="data")
    folder = tmp_path / finished_job["id"]
    assert sorted(p.name for p in folder.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]

    base, tokenizer = load_model(tiny_model_dir)
    downloaded = PeftModel.from_pretrained(base, folder).eval()
    workers, _ = load_model(service_settings.artifacts / "jobs" / finished_job["id"] / "out")  # as the worker loads it
    ids = tokenizer(PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        torch.testing.assert_close(
            downloaded(input_ids=ids).logits, workers.eval()(input_ids=ids).logits, rtol=1e-5, atol=1e-5
        )
        expected = downloaded.generate(ids, max_new_tokens=8, do_sample=False)[0, ids.shape[1] :]

    served = client.post(
        "/v1/completions",
        json={"model": finished_job["fine_tuned_model"], "prompt": PROMPT, "max_tokens": 8, "temperature": 0},
    )
    assert served.status_code == 200, served.text
    assert served.json()["choices"][0]["text"] == tokenizer.decode(expected, skip_special_tokens=True)


def test_tensorboard_events_are_kept_with_the_jobs_artifacts(finished_job, service_settings):
    events = service_settings.artifacts / "jobs" / finished_job["id"] / "out" / "tensorboard"
    assert list(events.rglob("events.out.tfevents.*"))


def test_deleting_the_archive_takes_it_off_the_job(client, finished_job, service_settings):
    file_id = finished_job["result_files"][0]
    stored = next((service_settings.artifacts / "jobs" / finished_job["id"]).glob(f"{file_id}.tar"))
    assert client.delete(f"/v1/files/{file_id}").status_code == 200
    assert job_state(client, finished_job["id"])["result_files"] == [] and not stored.exists()


@pytest.mark.parametrize(
    ("integrations", "status", "code", "param"),
    [
        ([{"type": "wandb", "wandb": {"project": "kernels"}}], 400, "integration_unavailable", "integrations"),
        ([{"type": "comet"}], 400, "invalid_request", "integrations.0"),
        ([{"type": "wandb", "wandb": {"name": "x"}}], 400, "invalid_request", "integrations.0.wandb.wandb.project"),
    ],
)
def test_integrations_are_checked_at_job_creation(client, integrations, status, code, param):
    import importlib.util

    if code == "integration_unavailable" and importlib.util.find_spec("wandb") is not None:
        pytest.skip("wandb is installed here")
    body = job_request(upload_short_dataset(client), integrations=integrations)
    response = client.post("/v1/fine_tuning/jobs", json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"]) == (code, param)
    if code == "integration_unavailable":
        assert "wandb: pip install wandb" in error["message"]
