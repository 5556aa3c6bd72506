"""Fine-tuning jobs end to end: the API on real Postgres, a real Celery worker on real Redis,
and real training subprocesses on the tiny base model."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.integration.job_support import (
    FINISHED,
    event_messages,
    job_request,
    job_state,
    upload_demo_dataset,
    upload_eval_problems,
    upload_short_dataset,
)
from tests.real_service import wait_for


@pytest.fixture(scope="module")
def training_file(app, auth_headers) -> str:
    from fastapi.testclient import TestClient

    with TestClient(app, headers=auth_headers) as client:
        return upload_short_dataset(client)


def create(client, body: dict, **headers) -> httpx.Response:
    return client.post("/v1/fine_tuning/jobs", json=body, headers=headers)


def created(client, body: dict) -> dict:
    response = create(client, body)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_job_trains_the_tiny_model_to_an_adapter(client, worker, service_settings):
    # The demo dataset, whose records over max_seq_len the job reports.
    job = created(client, job_request(upload_demo_dataset(client), max_steps=4, suffix="demo", metadata={"run": "it"}))
    assert job["status"] == "validating_files" and job["object"] == "fine_tuning.job"
    assert job["method"]["type"] == "cuset" and job["hyperparameters"]["batch_size"] == 2
    assert job["metadata"] == {"run": "it"} and job["user_provided_suffix"] == "demo"

    # Progress advances while it runs: metrics rows and step events appear before the end.
    wait_for(lambda: job_state(client, job["id"])["progress"]["step"] >= 2, timeout=180, what="step 2")
    assert any(m.startswith("Step ") for m in event_messages(client, job["id"]))

    done = wait_for(
        lambda: (s := job_state(client, job["id"]))["status"] in FINISHED and s, timeout=180, what="job end"
    )
    assert done["status"] == "succeeded", done["error"]
    assert done["fine_tuned_model"] == f"ft:tiny:demo:{job['id']}"
    assert done["progress"] == {"step": 4, "total_steps": 4, "percent": 100.0, "eta_s": None}
    assert done["trained_tokens"] > 0 and done["finished_at"] >= done["created_at"]
    # The demo records over max_seq_len are reported once, by the validation step, as one line.
    messages = event_messages(client, job["id"])
    skipped = [m for m in messages if "skipped" in m]
    assert len(skipped) == 1 and skipped[0].startswith("training_file: ") and "over_token_limit (lines " in skipped[0]
    assert not any(m.startswith("train_file:") for m in messages)
    adapter = service_settings.artifacts / "jobs" / job["id"] / "out"
    assert (adapter / "adapter_config.json").is_file()

    metrics = client.get(f"/v1/fine_tuning/jobs/{job['id']}/metrics").json()
    assert [point["step"] for point in metrics["data"]] == list(range(1, 5))
    assert all(p["loss"] > 0 and 0 < p["kept_ratio"] <= 1 and p["learning_rate"] is not None for p in metrics["data"])
    later = client.get(f"/v1/fine_tuning/jobs/{job['id']}/metrics", params={"after_step": 2, "limit": 1}).json()
    assert [p["step"] for p in later["data"]] == [3] and later["has_more"]

    checkpoints = client.get(f"/v1/fine_tuning/jobs/{job['id']}/checkpoints").json()["data"]
    assert [c["step_number"] for c in checkpoints] == [4, 2]
    assert checkpoints[0]["fine_tuned_model_checkpoint"] == f"ft:tiny:demo:{job['id']}:ckpt-step-4"
    assert checkpoints[0]["object"] == "fine_tuning.job.checkpoint" and "train_loss" in checkpoints[0]["metrics"]

    messages = event_messages(client, job["id"])
    assert messages[0] == "Job created" and messages[-1] == "The job has successfully completed"


def test_a_fine_tuned_model_can_be_tuned_further(client, worker, training_file):
    def run(model: str) -> dict:
        job = created(client, {**job_request(training_file, max_steps=2), "model": model})
        return wait_for(
            lambda: (s := job_state(client, job["id"]))["status"] in FINISHED and s, timeout=180, what="job end"
        )

    first = run("tiny")
    second = run(first["fine_tuned_model"])
    assert second["status"] == "succeeded", second["error"]
    assert second["model"] == first["fine_tuned_model"]
    assert second["fine_tuned_model"] == f"ft:tiny::{second['id']}"


def test_events_page_newest_first(client, worker, training_file):
    job = created(client, job_request(training_file, max_steps=4))
    wait_for(lambda: job_state(client, job["id"])["status"] in FINISHED, timeout=180, what="job end")
    every = client.get(f"/v1/fine_tuning/jobs/{job['id']}/events", params={"limit": 100}).json()["data"]
    first = client.get(f"/v1/fine_tuning/jobs/{job['id']}/events", params={"limit": 3}).json()
    second = client.get(
        f"/v1/fine_tuning/jobs/{job['id']}/events", params={"limit": 3, "after": first["data"][-1]["id"]}
    ).json()
    assert first["has_more"] and [e["id"] for e in first["data"] + second["data"]] == [e["id"] for e in every[:6]]
    assert every[-1]["message"] == "Job created" and every[0]["object"] == "fine_tuning.job.event"
    assert any(e["type"] == "metrics" and e["data"]["step"] >= 1 for e in every)


def test_cancel_mid_run_stops_with_a_checkpoint(client, worker, training_file):
    job = created(client, job_request(training_file, max_steps=400))
    wait_for(lambda: job_state(client, job["id"])["progress"]["step"] >= 1, timeout=180, what="training to start")
    response = client.post(f"/v1/fine_tuning/jobs/{job['id']}/cancel")
    assert response.status_code == 200 and response.json()["status"] in ("cancelling", "cancelled")

    done = wait_for(
        lambda: (s := job_state(client, job["id"]))["status"] in FINISHED and s, timeout=120, what="cancelled"
    )
    assert done["status"] == "cancelled" and done["fine_tuned_model"] is None
    checkpoints = client.get(f"/v1/fine_tuning/jobs/{job['id']}/checkpoints").json()["data"]
    assert checkpoints and checkpoints[0]["step_number"] == done["progress"]["step"] < 400

    again = client.post(f"/v1/fine_tuning/jobs/{job['id']}/cancel")
    assert again.status_code == 409 and again.json()["error"]["code"] == "job_not_cancellable"

    # The cancelled job's checkpoint is a model: a new job tunes on from it (OpenAI's shape).
    further = created(
        client, {**job_request(training_file, max_steps=2), "model": checkpoints[0]["fine_tuned_model_checkpoint"]}
    )
    settled = wait_for(
        lambda: (s := job_state(client, further["id"]))["status"] in FINISHED and s, timeout=180, what="job end"
    )
    assert settled["status"] == "succeeded", settled["error"]


def test_a_job_past_its_wall_clock_limit_is_stopped_and_fails_with_the_reason(
    service_settings, auth_headers, training_file, tmp_path_factory
):
    from fastapi.testclient import TestClient

    from api.main import create_app
    from tests.real_service import WorkerProcess

    # An API and a worker of their own (own broker keys) whose jobs may run 10 s.
    settings = service_settings.model_copy(
        update={"broker_key_prefix": f"{service_settings.broker_key_prefix}wallclock:", "job_max_wall_s": 10.0}
    )
    worker = WorkerProcess(settings, tmp_path_factory.mktemp("wallclock-worker"))
    worker.start()
    try:
        with TestClient(create_app(settings), headers=auth_headers) as client:
            job = created(client, job_request(training_file, max_steps=100_000))
            done = wait_for(
                lambda: (s := job_state(client, job["id"]))["status"] in FINISHED and s,
                timeout=400,
                what="the wall-clock limit to stop the job",
            )
    finally:
        worker.stop()
    assert done["status"] == "failed"
    assert done["error"]["code"] == "wall_clock_limit"
    assert "wall-clock limit of 10 s" in done["error"]["message"]
    assert done["progress"]["step"] < 100_000


def test_a_job_not_yet_running_is_cancelled_at_once(client, training_file):
    job = created(client, job_request(training_file))
    body = client.post(f"/v1/fine_tuning/jobs/{job['id']}/cancel").json()
    assert body["status"] == "cancelled" and body["finished_at"] is not None
    assert "Job cancelled" in event_messages(client, job["id"])


def test_a_file_without_usable_records_fails_validation(client, worker, training_file):
    # Every demo record is longer than 64 tokens, so none survives the limit.
    body = job_request(training_file)
    body["hyperparameters"]["max_seq_len"] = 64
    job = created(client, body)
    done = wait_for(
        lambda: (s := job_state(client, job["id"]))["status"] in FINISHED and s, timeout=60, what="validation"
    )
    assert done["status"] == "failed"
    assert done["error"]["code"] == "invalid_file" and done["error"]["param"] == "training_file"
    assert "no usable record" in done["error"]["message"]


def test_same_idempotency_key_returns_the_same_job(client, training_file):
    body = job_request(training_file, suffix="idem")
    first = create(client, body, **{"Idempotency-Key": "same-key-1"})
    second = create(client, body, **{"Idempotency-Key": "same-key-1"})
    assert first.status_code == second.status_code == 200
    assert first.json()["id"] == second.json()["id"]
    client.post(f"/v1/fine_tuning/jobs/{first.json()['id']}/cancel")

    other = create(client, {**body, "suffix": "other"}, **{"Idempotency-Key": "same-key-1"})
    assert other.status_code == 409 and other.json()["error"]["code"] == "idempotency_key_reused"


def test_concurrent_retries_with_one_key_create_one_job(server, training_file, auth_headers):
    body = job_request(training_file)

    def post(_):
        return httpx.post(
            f"{server}/v1/fine_tuning/jobs",
            json=body,
            headers={"Idempotency-Key": "race-key", **auth_headers},
            timeout=30,
        )

    with ThreadPoolExecutor(10) as pool:
        responses = list(pool.map(post, range(10)))
    assert [r.status_code for r in responses] == [200] * 10, [r.text for r in responses]
    assert len({r.json()["id"] for r in responses}) == 1
    httpx.post(f"{server}/v1/fine_tuning/jobs/{responses[0].json()['id']}/cancel", headers=auth_headers)


def test_list_pages_newest_first_with_after_and_limit(client, training_file):
    ids = [created(client, job_request(training_file))["id"] for _ in range(7)]
    for job_id in ids:
        client.post(f"/v1/fine_tuning/jobs/{job_id}/cancel")
    seen, after = [], None
    while True:
        page = client.get("/v1/fine_tuning/jobs", params={"limit": 3, **({"after": after} if after else {})}).json()
        assert len(page["data"]) <= 3
        seen += [job["id"] for job in page["data"]]
        if not page["has_more"]:
            break
        after = page["last_id"]
    assert seen[:7] == ids[::-1] and len(seen) == len(set(seen))


def test_an_eval_file_cannot_be_a_training_file(client):
    response = create(client, job_request(upload_eval_problems(client)))
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "training_file"


def test_openai_supervised_method_maps_to_sft(client, training_file):
    body = job_request(training_file)
    body["method"] = {"type": "supervised", "supervised": {"hyperparameters": {"n_epochs": 2, "batch_size": 1}}}
    job = created(client, body)
    client.post(f"/v1/fine_tuning/jobs/{job['id']}/cancel")
    assert job["method"]["type"] == "sft"
    assert (job["hyperparameters"]["n_epochs"], job["hyperparameters"]["batch_size"]) == (2, 1)


def test_unknown_jobs_are_404(client):
    for path in ("", "/events", "/checkpoints", "/metrics"):
        response = client.get(f"/v1/fine_tuning/jobs/ftjob-unknown{path}")
        assert response.status_code == 404 and response.json()["error"]["type"] == "not_found_error"
